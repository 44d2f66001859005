"""``sdm rebuild``: a catalog made again from the runs' meta-files answers as the original did.

An MPI job (``_rebuild_job.py``, under ``mpiexec``) writes two runs (levels 1-3,
attributes on runs, groups and datasets, infos on a run, a group, a dataset and a step, each
set twice, a data view, overwrites, an import, one run with ``async_commit``); the catalog is then lost and rebuilt from the data root alone, on SQLite
and PostgreSQL.  ``sdm show --json --writes`` and ``sdm find --json`` must print the same
(run ids included), and another job reads every step back with ``verify=True`` against
numpy references.  Then: rebuilding again adds nothing; a damaged meta-file falls back to
its backup; both damaged is an error naming both files; a run id taken by another run is
refused; unknown record types are refused.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import zlib
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest
from typer.testing import CliRunner

from sdm._cli.main import app
from sdm.catalog import Catalog
from sdm.catalog.metafile import BACKUP, META, line_of, parse_line
from sdm.catalog.rebuild import rebuild
from sdm.errors import CatalogError, CatalogVersionError, IntegrityError

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
MPIEXEC = Path(sys.executable).parent / "mpiexec"
LIMIT = 300

sys.path.insert(0, str(HERE))
import _rebuild_job as job  # noqa: E402


def cli(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": None})


def mpi(ranks: int, *args: str, job: str = "_rebuild_job.py") -> str:
    """Run the MPI *job* (a script beside this file) on *ranks* ranks, under a time limit; its output."""
    env = dict(os.environ)
    src = str(ROOT / "src")
    env["PYTHONPATH"] = src + os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else src
    command = [str(MPIEXEC), "-n", str(ranks), sys.executable, str(HERE / job), *args]
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=LIMIT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"mpiexec -n {ranks} {args[0]} did not finish within {LIMIT} s\n{out[-4000:]}")
    assert proc.returncode == 0, out[-6000:]
    return out


@contextmanager
def fresh_catalog(request: pytest.FixtureRequest, tmp_path: Path, engine: str, name: str) -> Iterator[str]:
    """An empty catalog of the engine: a new SQLite file, or a new PostgreSQL database."""
    if engine == "sqlite":
        yield f"sqlite:///{tmp_path}/{name}.db"
    else:
        with request.getfixturevalue("postgres_server").fresh_database() as url:
            yield url


def answers(url: str, run_ids: list[int]) -> dict[str, object]:
    """What the CLI prints about the runs (JSON), as the comparison's unit."""
    out: dict[str, object] = {}
    for rid in run_ids:
        r = cli("show", str(rid), "--writes", "--json", "--catalog", url)
        assert r.exit_code == 0, r.output
        out[f"show {rid}"] = json.loads(r.output)
    for args in ([], ["case=c2"], ["units=m/s", "--steps"], ["kind=one", "nx>=12"]):
        r = cli("find", *args, "--json", "--catalog", url)
        assert r.exit_code == 0, r.output
        out[f"find {args}"] = json.loads(r.output)
    r = cli("histories", "rebuilt", "--json", "--catalog", url)
    assert r.exit_code == 0, r.output
    out["histories"] = json.loads(r.output)
    return out


def check_features_on_disk(data: Path, writes: list[dict], writers: int) -> None:
    """Run 3's bytes, read with numpy at the offsets the catalog gives, against the job's references.

    The ranked header is parsed as docs/format.md lays it out; the truncated steps hold
    the values written after the restart.
    """
    seen = set()
    for w in writes:
        seen.add((w["group"], w["step"]))
        if w["group"] == "mesh":
            want = job.mesh_reference()
            got = np.fromfile(data / w["path"], dtype="<f8", count=want.size, offset=w["offset"]).reshape(want.shape)
        elif w["group"] == "state":
            want = job.state_reference(w["step"], w["step"] > job.TRUNCATED_AFTER).astype("<f4")
            got = np.fromfile(data / w["path"], dtype="<f4", count=want.size, offset=w["offset"]).reshape(want.shape)
        else:
            raw = (data / w["path"]).read_bytes()[w["offset"]:w["offset"] + w["nbytes"]]
            magic, length, nranks, total = struct.unpack_from("<8s3Q", raw)
            assert (magic, nranks) == (b"SDMRANK1", writers)
            want = job.ranked_reference(w["step"], writers)
            assert total == len(want) and len(raw) == length + want.nbytes
            got = np.frombuffer(raw, dtype="<i8", offset=length).reshape(-1, 2)
            assert w["path"].endswith(f".s{w['step'] // 2 * 2:08d}-{w['step'] // 2 * 2 + 1:08d}.sdm")  # 2 steps a file
        np.testing.assert_array_equal(got, want)
    assert seen == {("mesh", 0), *(("parts", s) for s in job.RANKED_STEPS), *(("state", s) for s in job.STATE_STEPS)}


def row_counts(url: str) -> dict[str, int]:
    cat = Catalog(url)
    try:
        return cat.counts()
    finally:
        cat.close()


def damage(path: Path, line: int) -> None:
    """Change one character inside line *line* (1-based) of a meta-file."""
    lines = path.read_bytes().split(b"\n")
    text = bytearray(lines[line - 1])
    text[len(text) // 2] ^= 0x01
    lines[line - 1] = bytes(text)
    path.write_bytes(b"\n".join(lines))


@pytest.mark.skipif(not MPIEXEC.exists(), reason="no mpiexec next to this Python")
@pytest.mark.timeout(3 * LIMIT)
@pytest.mark.parametrize("engine", [pytest.param("sqlite"), pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_rebuild_answers_as_the_original(engine: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    ranks = 2 if engine == "sqlite" else 4
    data = tmp_path / "data"
    data.mkdir()
    with fresh_catalog(request, tmp_path, engine, "original") as url:
        out = mpi(ranks, "write", str(data), url)
        run_ids = [int(x) for x in out.split("RUNS", 1)[1].split()[:3]]
        original = answers(url, run_ids)
        counts = row_counts(url)
        assert counts["infos"] == 8  # each set twice: replaced
        assert len(original["histories"]) == 1  # type: ignore[arg-type]
        for rid in run_ids[:2]:
            shown = original[f"show {rid}"]["infos"]  # type: ignore[index]
            want = job.infos(run_ids.index(rid) + 1)
            assert [(i["group"], i["dataset"], i["step"], i["name"]) for i in shown] == list(want)
            assert [(i["dtype"], i["shape"]) for i in shown] == [(w.dtype.str, list(w.shape)) for w in want.values()]
        # the meta-file's writes are the catalog's, byte for byte: every value read with numpy
        check_features_on_disk(data, original[f"show {run_ids[2]}"]["writes"], ranks)  # type: ignore[index]
        for rid in run_ids[:2]:
            for w in original[f"show {rid}"]["writes"]:  # type: ignore[index]
                spec = next(g for g in job.GROUPS if g[0] == w["group"])
                version = 2 if w["step"] == job.OVERWRITTEN and w["dataset"] == spec[2][0] else 1
                want = job.reference(run_ids.index(rid) + 1, w["dataset"], w["step"], spec[3], spec[4], version)
                got = np.fromfile(data / w["path"], dtype=spec[3], count=want.size, offset=w["offset"])
                np.testing.assert_array_equal(got, want.ravel())

        # merge: rebuilding into the catalog that holds both runs adds nothing
        r = cli("rebuild", str(data), "--catalog", url, "--json")
        assert r.exit_code == 0, r.output
        assert json.loads(r.output) == {"added": [], "present": run_ids, "writes": 0, "histories": 0, "notes": []}
        assert row_counts(url) == counts

    # the catalog is lost: rebuild from the data alone
    with fresh_catalog(request, tmp_path, engine, "rebuilt") as url2:
        r = cli("rebuild", str(data), "--catalog", url2, "--json")
        assert r.exit_code == 0, r.output
        report = json.loads(r.output)
        assert report["added"] == run_ids and report["present"] == [] and report["notes"] == []
        assert report["histories"] == 1
        assert answers(url2, run_ids) == original
        assert row_counts(url2) == counts
        assert "READ OK 31 INFOS OK 8" in mpi(3, "read", str(data), url2)
        # one run directory at a time, twice: no duplicates
        one = data / original[f"show {run_ids[0]}"]["run"]["dir"]  # type: ignore[index]
        assert rebuild(one, url2).present == [run_ids[0]]
        assert row_counts(url2) == counts

    # the main meta-file damaged: its backup is used, with a note
    meta = data / original[f"show {run_ids[1]}"]["run"]["dir"] / META  # type: ignore[index]
    saved = meta.read_bytes()
    damage(meta, 3)
    with fresh_catalog(request, tmp_path, engine, "from_backup") as url3:
        report = rebuild(data, url3)
        assert report.notes == [f"{meta} is damaged at line 3 (the line's CRC-32 does not match its text; 2 intact "
                                f"records before it); its backup {meta.with_name(BACKUP)} was used"]
        assert answers(url3, run_ids) == original

    # both damaged: an error naming both, nothing of that run recorded
    backup = meta.with_name(BACKUP)
    damage(backup, 5)
    with fresh_catalog(request, tmp_path, engine, "both_damaged") as url4:
        r = cli("rebuild", str(meta.parent), "--catalog", url4)
        assert r.exit_code == 1
        message = (f"the meta-file of run directory {meta.parent} and its backup are both damaged: "
                   f"{meta} is damaged at line 3 (the line's CRC-32 does not match its text; 2 intact records "
                   "before it); "
                   f"{backup} is damaged at line 5 (the line's CRC-32 does not match its text; 4 intact records "
                   "before it); "
                   f"what can still be recovered: the 4 records before the first damaged line of {backup}")
        assert r.output.strip() == f"error: {message}"
        with pytest.raises(IntegrityError) as err:
            rebuild(meta.parent, url4)
        assert str(err.value) == message
        assert row_counts(url4)["runs"] == 0
    meta.write_bytes(saved)
    backup.write_bytes(saved)


def _run_dir(tmp_path: Path, records: list[dict]) -> Path:
    """A run directory written by hand: a marker and a meta-file (and backup) of *records*."""
    d = tmp_path / "data" / "app" / "run-000001-x"
    d.mkdir(parents=True)
    (d / ".sdm-run").write_text(json.dumps({"catalog": "c0ffee", "run": 1, "application": "app"}))
    blob = b"".join(line_of(dict(r)) for r in records)
    (d / META).write_bytes(blob)
    (d / BACKUP).write_bytes(blob)
    return d


RUN = {"v": 1, "t": "run", "id": "s.1", "application": "app", "run": 1, "catalog": "c0ffee", "nprocs": 1,
       "problem_size": None, "attributes": {"a": 1}, "created": "2026-01-02T03:04:05+00:00", "root": "/x",
       "dir": "app/run-000001-x", "sdm": "0.1.0"}


def test_a_line_and_its_checksum(tmp_path: Path) -> None:
    line = line_of({"v": 1, "t": "close", "id": "s.9"}).decode()
    body = line[:line.rindex(',"crc":')] + "}"
    assert line == body[:-1] + f',"crc":"{zlib.crc32(body.encode()):08x}"}}\n'
    assert parse_line(line.rstrip("\n")) == {"v": 1, "t": "close", "id": "s.9"}
    assert parse_line(line.rstrip("\n").replace("close", "clse")) is None


def test_a_taken_run_id_is_refused(tmp_path: Path) -> None:
    d = _run_dir(tmp_path, [RUN])
    url = f"sqlite:///{tmp_path}/catalog.db"
    Catalog(url).create_run("other", nprocs=1, root=str(tmp_path))  # takes id 1
    with pytest.raises(CatalogError) as err:
        rebuild(tmp_path / "data", url)
    assert str(err.value) == (f"run id 1 of {d} is taken in catalog {url!r} by another run (application 'other', "
                              "directory None); rebuild into another catalog")
    assert row_counts(url)["runs"] == 1


def test_unknown_record_types(tmp_path: Path) -> None:
    d = _run_dir(tmp_path, [RUN, {"v": 1, "t": "ranked", "id": "s.2"}])
    url = f"sqlite:///{tmp_path}/catalog.db"
    with pytest.raises(CatalogVersionError) as err:
        rebuild(tmp_path / "data", url)
    assert str(err.value) == (f"{d / META} line 2: record type 'ranked' is unknown to this SDM (format 1); "
                              "it was written by SDM 0.1.0: rebuild with that version or newer")
    assert row_counts(url)["runs"] == 0
    # marked optional: skipped; the run is rebuilt from what this SDM knows, closed
    for p in (d / META, d / BACKUP):
        p.write_bytes(line_of(dict(RUN)) + line_of({"v": 1, "t": "ranked", "id": "s.2", "optional": True})
                      + line_of({"v": 1, "t": "close", "id": "s.3"}))
    assert rebuild(tmp_path / "data", url).added == [1]
    rec = Catalog(url).run(1)
    assert (rec.application, rec.attributes, rec.state, rec.dir) == ("app", {"a": 1}, "closed", "app/run-000001-x")


def test_a_torn_last_record_is_left_out(tmp_path: Path) -> None:
    d = _run_dir(tmp_path, [RUN])
    for p in (d / META, d / BACKUP):
        with open(p, "ab") as f:
            f.write(line_of({"v": 1, "t": "close", "id": "s.2"})[:20])  # an append cut by a crash
    report = rebuild(tmp_path / "data", f"sqlite:///{tmp_path}/catalog.db")
    assert report.added == [1]
    assert report.notes == [f"{d / META} ends with an unfinished record (an append cut by a crash), left out"]
    assert Catalog(f"sqlite:///{tmp_path}/catalog.db").run(1).state == "interrupted"
