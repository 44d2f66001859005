"""The recorder: every kind of catalog change journaled, applied, and replayed by ``sdm rebuild`` identically.

A run is made here without MPI through :class:`~sdm.catalog.recorder.Recorder` alone, one
change of every kind (and a change the catalog refuses), with real bytes in its files.
Its meta-file records are compared with the format of ``docs/format.md`` written out by
hand; the catalog's rows, ids turned into names, are compared before and after a rebuild
into a new catalog. Then one record of each kind is made bad (with a valid CRC): the
rebuild refuses it with the exact error and leaves the new catalog empty.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import zlib
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa

from sdm import integrity
from sdm.catalog import Catalog, DatasetSpec
from sdm.catalog import schema as S
from sdm.catalog.changes import (CHANGES, AttributesSet, CopyDropped, CopyPut, DistributionSet, GroupDefined,
                                 ImportRecorded, InfoSet, RunClosed, RunCreated, RunOpened, SpaceReserved, Truncated,
                                 WritesRecorded)
from sdm.catalog.metafile import BACKUP, META, MetaFile, line_of, read_meta
from sdm.catalog.rebuild import rebuild
from sdm.catalog.recorder import Recorder
from sdm.errors import GroupExistsError, IntegrityError
from sdm.segments import release_space
from sdm.storage import runs

CREATED = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


def values(step: int, version: int = 1) -> np.ndarray:
    return np.arange(4, dtype="<f8") + 10.0 * step + 100.0 * version


def put(path: Path, offset: int, raw: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, raw, offset)
    finally:
        os.close(fd)


def make_run(root: Path, url: str) -> tuple[int, str]:
    """A run with one change of every kind; its id and directory."""
    cat = Catalog(url)
    made: dict[str, Any] = {}

    def make_dir(rid: int) -> str:
        rel = runs.make_run_dir(root, "app", rid, cat.id)
        made["meta"] = MetaFile(root / rel, sync=True)
        Recorder(cat, made["meta"]).journal_only(RunCreated("app", rid, cat.id, 2, {"nx": 4}, {"case": "c1"}, CREATED,
                                                            str(root), rel))
        return rel

    try:
        run = cat.new_run("app", nprocs=2, root=str(root), problem_size={"nx": 4}, attributes={"case": "c1"},
                          make_dir=make_dir, created_at=CREATED)
        rid, rel = run.id, str(run.dir)
        rec = Recorder(cat, made["meta"])
        spec = (DatasetSpec("a", "<f8", (4,), "C"), DatasetSpec("b", "<f8", (4,), "C", ("x",)))
        g = rec.record(GroupDefined(rid, "g", 3, spec, "state", 2))
        one = rec.record(GroupDefined(rid, "one", 1, (DatasetSpec("c", "<f8", (4,), "C"),), "topology"))
        sub = rec.record(GroupDefined(rid, "sub", 3, (DatasetSpec("s", "<f8", (4,), "C"),), subfiles=2))
        with pytest.raises(GroupExistsError):  # refused by the catalog: an abort record follows
            rec.record(GroupDefined(rid, "g", 2, spec))
        a, b = (g.dataset(n).id for n in ("a", "b"))  # type: ignore[union-attr]
        rec.record(DistributionSet((a, b), {"kind": "block", "axis": 0}))
        rec.record(AttributesSet(rid, {"units": "m/s", "nx": 12}, g.id, (a, b)))
        rec.record(AttributesSet(rid, {"kind": "one"}))
        rec.record(InfoSet.of(rid, "coord.x", np.linspace(0, 1, 4)))
        rec.record(InfoSet.of(rid, "mask", np.array([1, 0], dtype="<i4"), group_id=g.id, dataset_id=a, step=2))
        assert rec.record(RunOpened(rid, lambda: True)) == "open"
        # dumps of g at steps 0..2 (2 steps a file), an overwrite of step 0, the level-1 and subfiled groups
        for step in range(3):
            path = f"{rel}/g.s{step // 2 * 2:08d}-{step // 2 * 2 + 1:08d}.sdm"
            offs = rec.record(SpaceReserved(rid, ((path, 3, 32, False), (path, 3, 32, False))))
            rows = []
            for did, off, v in zip((a, b), offs, (values(step), -values(step))):
                put(root / path, int(off), v.tobytes())
                rows.append(dict(dataset_id=did, step=step, path=path, level=3, offset=off, nbytes=32,
                                 checksum=integrity.checksum_of_bytes(v.tobytes(), "<f8"),
                                 checksum_algo=integrity.ALGORITHM, method="posix", reason="test", seconds=0.5,
                                 nprocs=2, overwrite=False))
            rec.record(WritesRecorded.of(rid, rows))
        path0 = f"{rel}/g.s00000000-00000001.sdm"
        off = rec.record(SpaceReserved(rid, ((path0, 3, 32, False),)))[0]
        put(root / path0, int(off), values(0, 2).tobytes())  # type: ignore[arg-type]
        rec.record(WritesRecorded.of(rid, [dict(
            dataset_id=a, step=0, path=path0, level=3, offset=off, nbytes=32,
            checksum=integrity.checksum_of_bytes(values(0, 2).tobytes(), "<f8"), checksum_algo=integrity.ALGORITHM,
            method="list", reason="overwrite", seconds=0.25, nprocs=2, overwrite=True, version=2, replaces=1)]))
        c = one.datasets[0].id
        lpath = f"{rel}/one.c.s00000000.sdm"
        assert rec.record(SpaceReserved(rid, ((lpath, 1, 32, True),))) == [0]
        put(root / lpath, 0, values(7).tobytes())
        rec.record(WritesRecorded.of(rid, [dict(
            dataset_id=c, step=0, path=lpath, level=1, offset=0, nbytes=32,
            checksum=integrity.checksum_of_bytes(values(7).tobytes(), "<f8"), checksum_algo=integrity.ALGORITHM,
            method="posix", reason=None, seconds=0.1, nprocs=2, overwrite=False)]))
        subs = [f"{rel}/sub.sdm.sub{k}" for k in range(2)]
        soffs = rec.record(SpaceReserved(rid, tuple((p, 3, 16, False, 4096) for p in subs)))
        raw = values(9).tobytes()
        extents = []
        for k, (p, o) in enumerate(zip(subs, soffs)):
            put(root / p, int(o), raw[16 * k:16 * k + 16])  # type: ignore[arg-type]
            extents.append(dict(path=p, offset=o, nbytes=16, start=16 * k,
                                checksum=integrity.checksum_of_bytes(raw[16 * k:16 * k + 16], "<f8"),
                                checksum_algo=integrity.ALGORITHM))
        rec.record(WritesRecorded.of(rid, [dict(
            dataset_id=sub.datasets[0].id, step=0, path=f"{rel}/sub.sdm", level=3, offset=0, nbytes=32,
            checksum=integrity.checksum_of_bytes(raw, "<f8"), checksum_algo=integrity.ALGORITHM, method="subfile",
            reason="subfiled", seconds=0.2, nprocs=2, overwrite=False, extents=extents)]))
        src = root / "raw.bin"
        values(3).astype(">f8").tofile(src)
        rec.record(ImportRecorded(rid, dict(
            name="raw", source=str(src), offset=0, dtype=">f8", count=4, shape=(4,), mode="contiguous", nbytes=32,
            checksum=integrity.checksum_of_bytes(values(3).astype(">f8").tobytes(), ">f8"),
            checksum_algo=integrity.ALGORITHM, seconds=0.01, nprocs=2, imported_at=CREATED)))
        done = rec.record(Truncated(rid, 1, ("g",), 2))
        release_space(root, done, rel)  # as a session does after the commit
        when = datetime(2026, 1, 3, tzinfo=timezone.utc)
        rec.record(CopyPut(rid, lpath, "fast", lpath, 32, "sha256:" + "0" * 64, "verified", when))
        rec.record(CopyPut(rid, path0, "fast", path0, 96, None, "copying"))  # not verified: not journaled
        rec.record(CopyDropped(rid, path0, "fast"))
        assert rec.record(RunClosed(rid)) == "open"
        assert rec.record(RunClosed(rid)) == "closed"
        made["meta"].close()
        return rid, rel
    finally:
        cat.close()


def rows(url: str, rid: int) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the run, ids turned into names (surrogate ids differ between catalogs), sorted.

    Left out: ``files.created_at`` and ``copies.created_at`` (the time the session first
    made the row, which no record keeps: a rebuild gives a file its first write's time and
    a copy its verification's).
    """
    eng = sa.create_engine(Catalog(url).engine.url)
    out: dict[str, list[tuple[Any, ...]]] = {}
    with eng.connect() as con:
        groups = {i: n for i, n in con.execute(sa.select(S.groups.c.id, S.groups.c.name).where(S.groups.c.run_id == rid))}
        datasets = {i: (groups[g], n) for i, g, n in con.execute(
            sa.select(S.datasets.c.id, S.datasets.c.group_id, S.datasets.c.name)) if g in groups}
        files = {i: p for i, p in con.execute(sa.select(S.files.c.id, S.files.c.path).where(S.files.c.run_id == rid))}
        writes = {i: (datasets[d], st) for i, d, st in con.execute(
            sa.select(S.writes.c.id, S.writes.c.dataset_id, S.writes.c.step)) if d in datasets}
        names = {"group_id": groups, "dataset_id": datasets, "file_id": files, "write_id": writes}
        skip = {"id", "run_id", "created_at"}
        for table in (S.runs, S.groups, S.datasets, S.attributes, S.files, S.writes, S.extents, S.infos, S.imports,
                      S.copies):
            got = []
            for r in con.execute(sa.select(table)).mappings():
                if "run_id" in r and r["run_id"] != rid and table is not S.runs or table is S.runs and r["id"] != rid:
                    continue
                if any(k in names and r[k] is not None and r[k] not in names[k] for k in r):
                    continue
                keep = {k: v for k, v in r.items() if k not in skip or (table in (S.runs, S.infos, S.imports)
                                                                          and k == "created_at")}
                got.append(tuple(sorted((k, str(names[k].get(v, v)) if k in names else str(v)) for k, v in keep.items()
                                        if k != "id" or table is S.runs)))
            out[table.name] = sorted(got)
    eng.dispose()
    return out


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, int, str]:
    base = tmp_path_factory.mktemp("recorder")
    root = base / "data"
    root.mkdir()
    url = f"sqlite:///{base}/original.db"
    rid, rel = make_run(root, url)
    return root, url, rid, rel


def _b64(a: np.ndarray) -> str:
    return base64.b64encode(a.tobytes()).decode()


def test_each_change_is_journaled_in_the_documented_format(made) -> None:
    root, url, rid, rel = made
    log = read_meta(root / rel).records
    assert (root / rel / META).read_bytes() == (root / rel / BACKUP).read_bytes()
    kinds = [r["t"] for r in log]
    assert kinds == ["run", "group", "group", "group", "group", "abort", "distribution", "attributes", "attributes",
                     "info", "info", "open", "writes", "writes", "writes", "writes", "writes", "writes", "import",
                     "truncate", "copy", "uncopy", "close", "close"]
    assert {k for k in kinds if k != "abort"} == set(CHANGES)  # every kind the meta-file keeps
    assert log[5]["ref"] == log[4]["id"]
    body = [{k: v for k, v in r.items() if k not in ("v", "id", "at", "created", "written_at", "sdm")} for r in log]
    assert body[0] == {"t": "run", "application": "app", "run": rid, "catalog": body[0]["catalog"], "nprocs": 2,
                       "problem_size": {"nx": 4}, "attributes": {"case": "c1"}, "root": str(root), "dir": rel}
    assert log[0]["created"] == CREATED.isoformat()
    assert body[1] == {"t": "group", "name": "g", "level": 3, "kind": "state", "steps_per_file": 2, "archive": None,
                       "datasets": [{"name": "a", "dtype": "<f8", "shape": [4], "order": "C"},
                                    {"name": "b", "dtype": "<f8", "shape": [4], "order": "C", "dims": ["x"]}]}
    assert body[3]["subfiles"] == 2 and "subfiles" not in body[1]
    assert body[6] == {"t": "distribution", "datasets": [["g", "a"], ["g", "b"]],
                       "distribution": {"kind": "block", "axis": 0}}
    assert body[7] == {"t": "attributes", "group": "g", "datasets": ["a", "b"], "on_group": True,
                       "attributes": {"units": "m/s", "nx": 12}}
    assert body[8] == {"t": "attributes", "group": None, "datasets": [], "on_group": True, "attributes": {"kind": "one"}}
    mask = np.array([1, 0], dtype="<i4")
    assert body[10] == {"t": "info", "name": "mask", "group": "g", "dataset": "a", "step": 2, "dtype": "<i4",
                        "shape": [2], "checksum": f"{zlib.crc32(mask.tobytes()):08x}", "data": _b64(mask)}
    w = log[12]["writes"][1]
    assert w == {"group": "g", "dataset": "b", "step": 0, "path": f"{rel}/g.s00000000-00000001.sdm", "level": 3,
                 "offset": 32, "nbytes": 32, "checksum": integrity.checksum_of_bytes((-values(0)).tobytes(), "<f8"),
                 "algo": integrity.ALGORITHM, "method": "posix", "reason": "test", "seconds": 0.5, "nprocs": 2,
                 "version": 1, "replaces": None, "overwrite": False}
    assert (log[15]["writes"][0]["version"], log[15]["writes"][0]["replaces"]) == (2, 1)
    assert [x["start"] for x in log[17]["writes"][0]["extents"]] == [0, 16]
    assert body[19] == {"t": "truncate", "after": 1, "groups": ["g"]}
    assert body[20] == {"t": "copy", "path": f"{rel}/one.c.s00000000.sdm", "tier": "fast",
                        "location": f"{rel}/one.c.s00000000.sdm", "size": 32, "checksum": "sha256:" + "0" * 64,
                        "verified_at": "2026-01-03T00:00:00+00:00"}
    assert body[21] == {"t": "uncopy", "path": f"{rel}/g.s00000000-00000001.sdm", "tier": "fast"}
    # the catalog keeps the times the records carry
    cat = Catalog(url)
    try:
        info = cat.info(rid, "coord.x")
        assert info.created_at.isoformat() == log[9]["created"]
        got = cat.lookup_write(next(d.id for d in cat.group(rid, "g").datasets if d.name == "b"), 1)
        assert got is not None and got.written_at.isoformat() == log[13]["written_at"]
    finally:
        cat.close()


def test_a_rebuild_replays_every_change_into_the_same_rows(made, tmp_path: Path) -> None:
    root, url, rid, rel = made
    original = rows(url, rid)
    assert [len(original[t]) for t in ("groups", "datasets", "writes", "extents", "infos", "imports", "copies")] == [
        3, 4, 6, 2, 1, 1, 1]  # step 2 of g and its info truncated away; the unverified copy dropped
    url2 = f"sqlite:///{tmp_path}/rebuilt.db"
    report = rebuild(root, url2)
    assert (report.added, report.writes, report.notes) == ([rid], 6, [])
    assert rows(url2, rid) == original
    for path, step, version in ((f"{rel}/g.s00000000-00000001.sdm", 0, 2), (f"{rel}/g.s00000000-00000001.sdm", 1, 1)):
        cat = Catalog(url2)
        try:
            w = cat.lookup_write(next(d.id for d in cat.group(rid, "g").datasets if d.name == "a"), step)
        finally:
            cat.close()
        assert w is not None and (w.path, w.version) == (path, version)
        got = np.fromfile(root / w.path, dtype="<f8", count=4, offset=w.offset)
        np.testing.assert_array_equal(got, values(step, version))


def _rewrite(run_dir: Path, line: int, change: Any) -> None:
    """Replace record *line* (1-based) of both files with *change* applied to it, its CRC made valid."""
    for name in (META, BACKUP):
        lines = (run_dir / name).read_bytes().split(b"\n")[:-1]
        rec = json.loads(lines[line - 1])
        rec.pop("crc")
        change(rec)
        lines[line - 1] = line_of(rec).rstrip(b"\n")
        (run_dir / name).write_bytes(b"\n".join(lines) + b"\n")


def _set(key: str, value: Any) -> Any:
    return lambda rec: rec.__setitem__(key, value)


def _set_write(key: str, value: Any) -> Any:
    return lambda rec: rec["writes"][0].__setitem__(key, value)


BAD = [  # (record line, change, the error after "<meta-file> line N")
    (1, _set("nprocs", 0), ": nprocs must be an integer in 1..2147483647, not integer 0"),
    (2, _set("level", 4), ": level must be an integer in 1..3, not integer 4"),
    (7, _set("datasets", [["g", "zz"]]), ": datasets[0] names dataset 'zz', which group 'g' does not define"),
    (8, _set("group", "nope"), ": datasets names group 'nope', which no earlier group record defines"),
    (10, _set("data", "AAAA"), ": data holds 3 bytes but shape [4] of <f8 needs 32"),
    (12, _set("at", "yesterday"), ": at must be an ISO 8601 time, not text 'yesterday'"),
    (13, _set_write("nbytes", 31), ": writes[0].nbytes must be 32 (the bytes of dataset 'a' of group 'g'), not integer 31"),
    (19, _set("count", 5), ": count must be 4 (the elements of shape [4]), not integer 5"),
    (20, _set("groups", ["zz"]), ": groups names group 'zz', which no earlier group record defines"),
    (21, _set("tier", "tape"), ": tier must be one of 'archive', 'fast', not text 'tape'"),
    (22, _set("path", 7), ": path must be text of at most 4096 characters, not integer 7"),
    (23, _set("at", 5), ": at must be an ISO 8601 time, not integer 5"),
]


ADVICE = ("its lines carry valid CRCs, so they were written this way, not damaged: the meta-file was edited or not "
          "written by SDM; restore the run directory from a copy")


@pytest.mark.parametrize("line,change,why", BAD, ids=[f"line{b[0]}" for b in BAD])
def test_a_bad_record_of_each_kind_is_refused_and_nothing_is_rebuilt(made, tmp_path: Path, line: int, change: Any,
                                                                    why: str) -> None:
    root, url, rid, rel = made
    copy = tmp_path / "data"
    run_dir = copy / rel
    shutil.copytree(root / rel, run_dir, symlinks=True)
    _rewrite(run_dir, line, change)
    url2 = f"sqlite:///{tmp_path}/bad.db"
    with pytest.raises(IntegrityError) as err:
        rebuild(copy, url2)
    assert str(err.value) == f"{run_dir / META} line {line}{why}; {ADVICE}"
    cat = Catalog(url2)
    try:
        assert {k: v for k, v in cat.counts().items() if v} == {}
    finally:
        cat.close()


def test_a_record_the_catalog_refuses_is_named_and_nothing_is_rebuilt(made, tmp_path: Path) -> None:
    """A duplicated dump (a new step written twice, no overwrite) passes the format's checks; its catalog refuses it."""
    root, url, rid, rel = made
    copy = tmp_path / "data"
    run_dir = copy / rel
    shutil.copytree(root / rel, run_dir, symlinks=True)
    for name in (META, BACKUP):
        lines = (run_dir / name).read_bytes().split(b"\n")[:-1]
        lines.insert(13, lines[12])  # the dump of step 0 twice (the same id: the line after it is a new line)
        (run_dir / name).write_bytes(b"\n".join(lines) + b"\n")
    url2 = f"sqlite:///{tmp_path}/bad.db"
    with pytest.raises(IntegrityError) as err:
        rebuild(copy, url2)
    text = str(err.value)  # the dumps applied together: their lines, and the catalog's reason
    assert text.startswith(f"{run_dir / META} lines 13-19: the catalog refuses this record (step 0 of dataset id 1, ")
    assert text.endswith(" is already recorded; pass overwrite=True to replace it); a session never journals what its "
                         "catalog refused, so the meta-file was edited or not written by SDM: restore the run "
                         "directory from a copy")
    cat = Catalog(url2)
    try:
        assert {k: v for k, v in cat.counts().items() if v} == {}
    finally:
        cat.close()
