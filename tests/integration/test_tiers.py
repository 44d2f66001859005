"""Migrate, stage and purge (``sdm.ops.tiers``) between the file system and a real S3 server (versitygw).

A run is written through SDM on one process; its files are migrated to the object store,
their objects compared byte for byte with the files and their digests recomputed with
hashlib; the fast copies purged, staged back, and every step read with ``verify=True``
against numpy references.  Refusals (no verified copy elsewhere, a damaged file, a
damaged object) name what is wrong and change nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
import subprocess
import sys
import time
import uuid
import zlib
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

import sdm
from sdm.catalog import Catalog
from sdm.catalog import tiers as rows
from sdm.errors import IntegrityError, InvalidArgumentError, RunStateError, StorageError
from sdm.maintenance import verify_run
from sdm.ops import tiers
from sdm.storage.digests import file_digest
from sdm.storage.backends.objectstore import ObjectStore

SHAPE = (16, 12)
STEPS = [0, 1, 2]


def field(name: str, step: int) -> np.ndarray:
    return np.arange(np.prod(SHAPE), dtype="<f8").reshape(SHAPE) * (1 + step) + 1000 * len(name)


@pytest.fixture
def store(s3_server) -> Iterator[ObjectStore]:
    made = ObjectStore(f"s3://sdm-tiers/t-{uuid.uuid4().hex[:8]}", endpoint=s3_server.endpoint)
    made.ensure_bucket()
    yield made


def write_run(root: Path, url: str) -> int:
    with sdm.open("tiers", root=str(root), catalog=url) as s:
        three = s.make_group("fields", ["T", "P"], dtype="<f8", shape=SHAPE, level=3)
        one = s.make_group("snap", ["Q"], dtype="<f8", shape=SHAPE, level=1)
        for step in STEPS:
            three.write_step(step, {"T": field("T", step), "P": field("P", step)})
            one.write("Q", step, field("Q", step))
        return s.run_id


def read_all(root: Path, url: str, run_id: int) -> int:
    count = 0
    with sdm.open("tiers", "r", root=str(root), catalog=url, run=run_id) as s:
        for group, names in (("fields", ["T", "P"]), ("snap", ["Q"])):
            for name in names:
                for step in STEPS:
                    np.testing.assert_array_equal(s.group(group).read(name, step, verify=True), field(name, step))
                    count += 1
    return count


@pytest.fixture
def run(tmp_path: Path) -> tuple[Path, str, int]:
    root, url = tmp_path / "root", f"sqlite:///{tmp_path}/c.db"
    return root, url, write_run(root, url)


def files_of(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.sdm"))}


def test_migrate_purge_stage_round_trip(run, store: ObjectStore) -> None:
    root, url, run_id = run
    original = files_of(root)
    cat = Catalog(url)
    try:
        report = tiers.migrate(cat, run_id, store)
        assert (report.files, report.nbytes, report.skipped) == (len(original), sum(map(len, original.values())), 0)
        for path, data in original.items():  # every object is its file, byte for byte
            assert store.get(path) == data
        copies = rows.copies(cat, run_id)
        assert set(copies) == set(original)
        for path, found in copies.items():
            digest = "sha256:" + hashlib.sha256(original[path]).hexdigest()
            assert [(c.tier, c.location, c.size, c.checksum, c.state) for c in found] == [
                ("archive", store.location(path), len(original[path]), digest, "verified"),
                ("fast", path, len(original[path]), digest, "verified")]
        again = tiers.migrate(cat, run_id, store)  # idempotent: nothing left to do
        assert (again.files, again.skipped) == (0, len(original))

        purged = tiers.purge(cat, run_id, "fast")
        assert (purged.files, purged.nbytes) == (len(original), sum(map(len, original.values())))
        assert files_of(root) == {}
        checked = verify_run(cat, run_id)  # purged rows are archived, not missing
        assert (checked.ok, checked.rows, checked.archived_rows, checked.unreferenced) == (True, 9, 9, [])
        assert {c.tier for found in rows.copies(cat, run_id).values() for c in found} == {"archive"}

        staged = tiers.stage(cat, run_id, store)
        assert staged.files == len(original)
        assert files_of(root) == original
        log = tiers_log(cat, run_id)
        assert log == [("migrate", "archive", len(original), "ok"), ("migrate", "archive", 0, "ok"),
                       ("purge", "fast", len(original), "ok"), ("stage", "fast", len(original), "ok")]
    finally:
        cat.close()
    assert read_all(root, url, run_id) == 9


def tiers_log(cat: Catalog, run_id: int) -> list[tuple[str, str, int, str | None]]:
    return [(o.operation, o.tier, o.files, o.outcome) for o in rows.operations(cat, run_id)]


def test_purge_without_a_verified_copy_elsewhere_is_refused(run, store: ObjectStore) -> None:
    root, url, run_id = run
    original = files_of(root)
    cat = Catalog(url)
    try:
        with pytest.raises(RunStateError) as err:
            tiers.purge(cat, run_id, "fast")
        assert str(err.value).startswith(
            f"purge of run {run_id} from the fast tier refused: {len(original)} of its files have no verified copy of "
            f"all their steps on the archive tier (")
        assert str(err.value).endswith(f"`sdm migrate {run_id}` first")
        nothing = tiers.purge(cat, run_id, "archive", store)  # nothing archived: nothing to remove, nothing refused
        assert (nothing.files, nothing.skipped) == (0, len(original))
        assert files_of(root) == original and store.list() == []
        assert tiers_log(cat, run_id) == [("purge", "fast", 0, "failed"), ("purge", "archive", 0, "ok")]
    finally:
        cat.close()


def test_a_damaged_file_is_never_archived(run, store: ObjectStore) -> None:
    root, url, run_id = run
    (level3,) = [p for p in root.rglob("fields.sdm")]
    raw = bytearray(level3.read_bytes())
    raw[100] ^= 0x04
    level3.write_bytes(bytes(raw))
    cat = Catalog(url)
    try:
        with pytest.raises(IntegrityError) as err:
            tiers.migrate(cat, run_id, store)
        assert str(err.value).startswith(f"{level3} does not hold what run {run_id}'s catalog says: fields/T step 0: "
                                         "checksum ")
        archived = {c.path for found in rows.copies(cat, run_id).values() for c in found if c.tier == "archive"}
        assert str(level3.relative_to(root)) not in archived
        assert store.head(str(level3.relative_to(root))) is None
    finally:
        cat.close()


def test_a_damaged_object_is_never_staged(run, store: ObjectStore) -> None:
    root, url, run_id = run
    original = files_of(root)
    cat = Catalog(url)
    try:
        tiers.migrate(cat, run_id, store)
        tiers.purge(cat, run_id, "fast")
        path = next(iter(original))
        bad = bytearray(original[path])
        bad[0] ^= 0x01
        store.put(path, bytes(bad))  # changed in the object store behind SDM's back
        with pytest.raises(IntegrityError) as err:
            tiers.stage(cat, run_id, store)
        assert str(err.value) == (f"{store.location(path)} does not match its recorded digest "
                                  f"sha256:{hashlib.sha256(original[path]).hexdigest()}; it was changed or damaged in "
                                  "the object store")
        assert not (root / path).exists() and not list(root.rglob("*.staging"))
        store.put(path, original[path])  # repaired: a rerun completes
        tiers.stage(cat, run_id, store)
        assert files_of(root) == original
    finally:
        cat.close()
    assert read_all(root, url, run_id) == 9


def test_purge_of_the_archive_keeps_the_files(run, store: ObjectStore) -> None:
    root, url, run_id = run
    original = files_of(root)
    cat = Catalog(url)
    try:
        tiers.migrate(cat, run_id, store)
        report = tiers.purge(cat, run_id, "archive", store)
        assert report.files == len(original) and store.list() == []
        assert {c.tier for found in rows.copies(cat, run_id).values() for c in found} == {"fast"}
        assert files_of(root) == original
    finally:
        cat.close()


# ------------------------------------------------------------------------------------- the CLI

def cli(*args: str):
    from typer.testing import CliRunner

    from sdm._cli.main import app

    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


def test_the_commands_select_runs_by_id_or_attributes(tmp_path: Path, store: ObjectStore) -> None:
    root, url = tmp_path / "root", f"sqlite:///{tmp_path}/c.db"
    with sdm.open("tiers", root=str(root), catalog=url, attributes={"case": "a"}) as s:
        s.make_group("g", ["x"], dtype="<i4", shape=(10,)).write("x", 0, np.arange(10, dtype="<i4"))
        first = s.run_id
    second = write_run(root, url)
    where = ["--catalog", url, "--endpoint", store.endpoint or ""]
    got = cli("migrate", "case=a", "--to", store.url, *where, "--json")
    assert got.exit_code == 0, got.output
    (report,) = json.loads(got.output)["runs"]
    assert (report["run_id"], report["operation"], report["files"]) == (first, "migrate", 1)
    (size,) = [p.stat().st_size for p in root.rglob("g.sdm")]  # 40 B of data and the file's trailer
    got = cli("purge", "case=a", *where)
    assert got.exit_code == 0, got.output
    assert got.output.startswith(f"run {first}: purge of 1 files ({size} B) in ")
    cat = Catalog(url)
    try:
        assert {c.tier for found in rows.copies(cat, first).values() for c in found} == {"archive"}
        assert all(c[0].implicit for c in rows.copies(cat, second).values())  # the other run untouched
    finally:
        cat.close()
    assert cli("stage", str(first), *where).exit_code == 0
    with sdm.open("tiers", "r", root=str(root), catalog=url, run=first) as s:
        np.testing.assert_array_equal(s.group("g").read("x", 0, verify=True), np.arange(10, dtype="<i4"))
    for args, message in (
        (["migrate", str(first), *where], "error: migrate needs the archive to copy to: to='s3://BUCKET/PREFIX'"),
        (["migrate", "--to", store.url, *where],
         "error: name runs by id, or select them with KEY=VALUE conditions and/or an application"),
        (["purge", str(second), *where],
         f"error: purge of run {second} from the fast tier refused: 4 of its files have no verified copy of all their "
         f"steps on the archive tier ("),
    ):
        got = cli(*args)
        assert got.exit_code == 1 and " ".join(got.output.split()).startswith(message), got.output


# ------------------------------------------------------------------------------------- kill -9

_JOB = """
import sys, sdm
op, url, run, to, endpoint = sys.argv[1:6]
if op == "migrate":
    sdm.migrate([int(run)], to=to, endpoint=endpoint, catalog=url)
else:
    sdm.purge([int(run)], tier="fast", endpoint=endpoint, catalog=url)
"""


def _start(op: str, url: str, run_id: int, store: ObjectStore) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2] / "src"))
    return subprocess.Popen([sys.executable, "-c", _JOB, op, url, str(run_id), store.url, store.endpoint or ""],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _done(cat: Catalog, run_id: int, op: str) -> int:
    """Files the operation has finished: archive copies verified (migrate) or fast copies gone (purge)."""
    found = rows.copies(cat, run_id).values()
    if op == "migrate":
        return sum(1 for f in found for c in f if c.tier == "archive" and c.verified)
    return sum(1 for f in found if not any(c.tier == "fast" for c in f))


def _kill_midway(op: str, url: str, run_id: int, store: ObjectStore, cat: Catalog, files: int) -> None:
    """Start *op* and SIGKILL it as soon as it has finished one more file (well before the last)."""
    before = _done(cat, run_id, op)
    assert before < files - 10, "too little work left to be interrupted"
    proc = _start(op, url, run_id, store)
    deadline = time.monotonic() + 120
    while _done(cat, run_id, op) <= before:
        assert proc.poll() is None, f"{op} ended before it was killed: {proc.stderr.read()[-2000:]}"  # type: ignore[union-attr]
        assert time.monotonic() < deadline, f"{op} made no progress in 120 s"
        time.sleep(0.002)
    proc.kill()
    proc.wait()
    proc.stderr.close()  # type: ignore[union-attr]


def _every_row_readable_somewhere(cat: Catalog, run_id: int, root: Path, store: ObjectStore,
                                  original: dict[str, bytes]) -> None:
    """No row without bytes: a file the catalog says is on the fast tier is there and whole; one only on the
    archive has a verified object equal to the original bytes."""
    for path, found in rows.copies(cat, run_id).items():
        fast = next((c for c in found if c.tier == "fast"), None)
        archive = next((c for c in found if c.tier == "archive" and c.verified), None)
        assert fast is not None or archive is not None, f"{path}: no copy left"
        if fast is not None:
            assert (root / path).read_bytes() == original[path], path
        if archive is not None:
            assert store.get(path) == original[path], path


@pytest.mark.timeout(300)
def test_kill_during_migrate_and_purge_loses_nothing_and_a_rerun_completes(tmp_path: Path, store: ObjectStore) -> None:
    root, url = tmp_path / "root", f"sqlite:///{tmp_path}/c.db"
    with sdm.open("tiers", root=str(root), catalog=url) as s:
        g = s.make_group("snap", ["Q"], dtype="<f8", shape=(64, 64), level=1)
        for step in range(120):
            g.write("Q", step, np.full((64, 64), float(step)))
        run_id = s.run_id
    original = files_of(root)
    cat = Catalog(url)
    try:
        for op in ("migrate", "purge"):
            for _ in range(3):
                _kill_midway(op, url, run_id, store, cat, len(original))
                _every_row_readable_somewhere(cat, run_id, root, store, original)
            proc = _start(op, url, run_id, store)  # the rerun completes
            assert proc.wait(timeout=120) == 0, proc.stderr.read()  # type: ignore[union-attr]
            proc.stderr.close()  # type: ignore[union-attr]
            _every_row_readable_somewhere(cat, run_id, root, store, original)
        assert files_of(root) == {}
        assert all([c.tier for c in found] == ["archive"] for found in rows.copies(cat, run_id).values())
        log = [(o.operation, o.outcome) for o in rows.operations(cat, run_id)]
        assert log == [("migrate", None)] * 3 + [("migrate", "ok")] + [("purge", None)] * 3 + [("purge", "ok")]
        tiers.stage(cat, run_id, store)
    finally:
        cat.close()
    assert files_of(root) == original


# ------------------------------------------------------------------------------------- faults

@pytest.mark.parametrize("kind, cause", [("reset_peer", "connection reset by the server"), ("timeout", "timed out")])
def test_a_faulty_connection_fails_migrate_and_stage_clearly_and_loses_nothing(
        kind: str, cause: str, run, store: ObjectStore, toxiproxy) -> None:
    root, url, run_id = run
    original = files_of(root)
    proxied = ObjectStore(store.url, endpoint=toxiproxy.endpoint, timeout=1.0, connect_timeout=1.0, retry_time=2.0,
                          backoff=0.05, max_backoff=0.5)
    failing = re.compile(rf"^(PUT|GET) {re.escape(store.url)}/\S+ failed after \d+ attempts in [\d.]+ s: {cause}$")
    cat = Catalog(url)
    try:
        with toxiproxy.toxic(kind, timeout=0):
            start = time.monotonic()
            with pytest.raises(StorageError) as err:
                tiers.migrate(cat, run_id, proxied)
            assert failing.match(str(err.value)), str(err.value)
            assert time.monotonic() - start < proxied.retry_time + proxied.timeout + 3  # retried, then gave up
        assert files_of(root) == original  # nothing lost
        assert not any(c.tier == "archive" and c.verified for f in rows.copies(cat, run_id).values() for c in f)
        (failed,) = rows.operations(cat, run_id)
        assert (failed.operation, failed.outcome) == ("migrate", "failed") and failed.detail.startswith("StorageError: ")
        with pytest.raises(RunStateError):  # an unverified archive copy never lets the fast one go
            tiers.purge(cat, run_id, "fast")
        tiers.migrate(cat, run_id, proxied)  # the fault gone, a rerun completes
        tiers.purge(cat, run_id, "fast")
        with toxiproxy.toxic(kind, timeout=0):
            with pytest.raises(StorageError) as err:
                tiers.stage(cat, run_id, proxied)
            assert failing.match(str(err.value)), str(err.value)
        assert files_of(root) == {} and not list(root.rglob("*.part")) and not list(root.rglob("*.staging"))
        assert all(c.verified for f in rows.copies(cat, run_id).values() for c in f if c.tier == "archive")
        tiers.stage(cat, run_id, proxied)
    finally:
        cat.close()
    assert files_of(root) == original
    assert read_all(root, url, run_id) == 9


# ------------------------------------------------------------------------------------- superfiles

def test_small_files_packed_in_a_superfile_are_read_with_one_request(run, store: ObjectStore, monkeypatch) -> None:
    from sdm.io import remote

    monkeypatch.setenv("SDM_S3_ENDPOINT", store.endpoint or "")  # where reads find the archive
    root, url, run_id = run
    original = files_of(root)
    small = {p: d for p, d in original.items() if len(d) <= 4096}  # the 3 level-1 files; fields.sdm is larger
    assert len(small) == 3 and len(original) == 4
    cat = Catalog(url)
    try:
        report = tiers.migrate(cat, run_id, store, pack_below=4096)
        assert report.files == 4
        objects = dict(store.list())
        (packed,) = [k for k in objects if k.endswith(".sdmpack")]
        assert set(objects) == {packed, *(p for p in original if p not in small)}
        raw = store.get(packed)  # the object describes itself: members, then the trailer's JSON and footer
        magic, start, length, crc, version = struct.unpack("<8sQQII", raw[-32:])
        assert (magic, version, start + length + 32) == (b"SDMTRAIL", 1, len(raw))
        assert zlib.crc32(raw[start:start + length]) == crc
        index = json.loads(raw[start:start + length])
        assert index["superfile"] is True and index["run"] == run_id
        assert [m["path"] for m in index["members"]] == sorted(small)
        for m in index["members"]:
            assert raw[m["offset"]:m["offset"] + m["size"]] == small[m["path"]]
            assert m["checksum"] == "sha256:" + hashlib.sha256(small[m["path"]]).hexdigest()
            (copy,) = [c for c in rows.copies(cat, run_id)[m["path"]] if c.tier == "archive"]
            assert (copy.location, copy.size, copy.state) == (f"{store.location(packed)}@{m['offset']}", m["size"],
                                                              "verified")
        tiers.purge(cat, run_id, "fast")
    finally:
        cat.close()
    before = remote.counters()["requests"]
    with sdm.open("tiers", "r", root=str(root), catalog=url, run=run_id) as s:
        g = s.group("snap")
        np.testing.assert_array_equal(g.read("Q", STEPS[0], verify=True), field("Q", STEPS[0]))
        assert remote.counters()["requests"] == before + 1  # the whole superfile, once
        for step in STEPS[1:]:
            np.testing.assert_array_equal(g.read("Q", step, verify=True), field("Q", step))
        assert remote.counters()["requests"] == before + 1  # the other members from memory
    cat = Catalog(url)
    try:
        tiers.stage(cat, run_id, store)
        assert files_of(root) == original
        tiers.purge(cat, run_id, "archive", store)
        assert store.list() == []  # the superfile went with its last member's copy
    finally:
        cat.close()
    assert read_all(root, url, run_id) == 9


def test_migrate_trusting_the_servers_upload_check(run, store: ObjectStore) -> None:
    root, url, run_id = run
    original = files_of(root)
    cat = Catalog(url)
    try:
        with pytest.raises(InvalidArgumentError) as err:
            tiers.migrate(cat, run_id, store, verify="none")
        assert str(err.value) == "migrate verify must be one of read-back, upload, got 'none'"
        assert all(c[0].implicit for c in rows.copies(cat, run_id).values()) and store.list() == []
        report = tiers.migrate(cat, run_id, store, verify="upload")
        assert report.files == len(original)
        for path, data in original.items():
            assert store.get(path) == data
            (archive,) = [c for c in rows.copies(cat, run_id)[path] if c.tier == "archive"]
            assert (archive.state, archive.checksum) == ("verified", "sha256:" + hashlib.sha256(data).hexdigest())
    finally:
        cat.close()


def test_a_rebuilt_catalog_knows_where_the_bytes_are(run, store: ObjectStore, monkeypatch) -> None:
    """Verified copies and purges go to the run's meta-file first: a catalog rebuilt from the data root after
    a migrate (superfile included) and a purge reads the archived steps."""
    from sdm.catalog.metafile import META, read_meta
    from sdm.catalog.rebuild import rebuild

    monkeypatch.setenv("SDM_S3_ENDPOINT", store.endpoint or "")
    root, url, run_id = run
    original = files_of(root)
    cat = Catalog(url)
    try:
        tiers.migrate(cat, run_id, store, pack_below=4096)
        tiers.purge(cat, run_id, "fast")
        where = {p: sorted((c.tier, c.location, c.size, c.checksum, c.state) for c in f)
                 for p, f in rows.copies(cat, run_id).items()}
    finally:
        cat.close()
    (meta,) = root.rglob(META)
    kinds = [r["t"] for r in read_meta(meta.parent).records]
    # 4 files: their fast copies (the large one twice: before its upload, then with its digest) and archive
    # copies, then the fast copies gone
    assert kinds.count("copy") == 9 and kinds.count("uncopy") == 4
    (Path(url[len("sqlite:///"):])).unlink()
    assert rebuild(root, url).added == [run_id]
    cat = Catalog(url)
    try:
        assert {p: sorted((c.tier, c.location, c.size, c.checksum, c.state) for c in f)
                for p, f in rows.copies(cat, run_id).items()} == where
    finally:
        cat.close()
    assert read_all(root, url, run_id) == 9  # from the archive, without staging
    assert files_of(root) == {}
    cat = Catalog(url)
    try:
        tiers.stage(cat, run_id, tiers.archive_store(cat, run_id))
    finally:
        cat.close()
    assert files_of(root) == original


def test_appending_to_a_purged_run_is_refused_until_it_is_staged(run, store: ObjectStore, monkeypatch) -> None:
    """New steps go into the fast tier's file: a purged file would be made again around a hole."""
    monkeypatch.setenv("SDM_S3_ENDPOINT", store.endpoint or "")  # the last reads come from the archive
    root, url, run_id = run
    cat = Catalog(url)
    try:
        tiers.migrate(cat, run_id, store)
        tiers.purge(cat, run_id, "fast")
        before = rows.copies(cat, run_id)
        appended = sorted(f.path for f in cat.files(run_id) if f.level > 1)  # level-1 files are never written again
    finally:
        cat.close()
    assert 0 < len(appended) < len(before)
    with pytest.raises(RunStateError) as err:
        sdm.open("tiers", "a", root=str(root), catalog=url, run=run_id)
    assert str(err.value) == (f"run {run_id} cannot be appended to: {len(appended)} of its files are not on the fast "
                              f"tier ({', '.join(appended[:3])}{', ...' if len(appended) > 3 else ''}); "
                              f"`sdm stage {run_id}` first")
    assert files_of(root) == {}
    cat = Catalog(url)
    try:
        assert rows.copies(cat, run_id) == before
        tiers.stage(cat, run_id, store)
    finally:
        cat.close()
    with sdm.open("tiers", "a", root=str(root), catalog=url, run=run_id) as s:  # staged: appending works
        s.group("fields").write_step(3, {"T": field("T", 3), "P": field("P", 3)})
    with sdm.open("tiers", "r", root=str(root), catalog=url, run=run_id) as s:
        for step in STEPS + [3]:
            np.testing.assert_array_equal(s.group("fields").read("T", step, verify=True), field("T", step))
    cat = Catalog(url)
    try:  # the archive copy of fields.sdm lacks step 3: it no longer lets the fast copy go
        with pytest.raises(RunStateError) as err:
            tiers.purge(cat, run_id, "fast")
        assert str(err.value).startswith(f"purge of run {run_id} from the fast tier refused: 1 of its files have no "
                                         "verified copy of all their steps on the archive tier (tiers/run-")
        again = tiers.migrate(cat, run_id, store)  # uploads that file again, whole
        assert (again.files, again.skipped) == (1, 3)
        tiers.purge(cat, run_id, "fast")
    finally:
        cat.close()
    assert files_of(root) == {}
    assert read_all(root, url, run_id) == 9


# ------------------------------------------------------------------------------------- the remote reads' cache

def test_stage_and_purge_of_the_archive_remove_the_remote_reads_cache(run, store: ObjectStore, monkeypatch) -> None:
    """The subfile cache mirrors archive copies for reads without a fast copy: stale once the fast copies are
    back (stage) or the archive copies are gone (purge of the archive); removed then, and only on success."""
    import shutil

    from sdm.io import remote

    monkeypatch.setenv("SDM_S3_ENDPOINT", store.endpoint or "")
    root, url, run_id = run
    original = files_of(root)

    def fill_cache() -> Path:
        with sdm.open("tiers", "r", root=str(root), catalog=url, run=run_id) as s:
            got = s.group("fields").read("T", 1, method="remote-subfile", verify=True)
        np.testing.assert_array_equal(got, field("T", 1))
        (cache,) = root.rglob(remote.CACHE_DIR)
        assert sorted(p.suffix for p in cache.iterdir()) == [".bytes", ".json"]
        return cache

    cat = Catalog(url)
    try:
        tiers.migrate(cat, run_id, store)
        tiers.purge(cat, run_id, "fast")
        cache = fill_cache()
        kept = cache.with_name("kept-cache")
        shutil.copytree(cache, kept)
        with pytest.raises(RunStateError):  # a failed operation leaves the cache alone
            tiers.purge(cat, run_id, "archive", store)
        assert sorted(p.name for p in cache.iterdir()) == sorted(p.name for p in kept.iterdir())

        staged = tiers.stage(cat, run_id, store)
        assert not cache.exists() and files_of(root) == original
        assert staged.notes and staged.notes[0].startswith("removed the remote reads' cache (")
        (last,) = [o for o in rows.operations(cat, run_id) if o.operation == "stage"]
        assert last.detail == staged.notes[0]

        kept.rename(cache)  # a cache left behind (by a stage of an earlier version, say)
        purged = tiers.purge(cat, run_id, "archive", store)
        assert purged.files == len(original) and not cache.exists() and store.list() == []
        assert purged.notes[0].startswith("removed the remote reads' cache (")
        assert tiers.purge(cat, run_id, "archive", store).notes == []  # nothing left to remove: no note
    finally:
        cat.close()
    assert files_of(root) == original
    assert read_all(root, url, run_id) == 9


def test_the_read_back_finds_an_object_that_differs_from_its_file(tmp_path: Path, store: ObjectStore,
                                                                   monkeypatch) -> None:
    """migrate's read-back compares the object with the file byte for byte: the first range that differs."""
    monkeypatch.setattr(tiers, "_CHUNK", 64 << 10)  # ranges of 64 KiB: several for a small file
    local = tmp_path / "f.bin"
    data = np.random.default_rng(3).bytes(300_000)
    local.write_bytes(data)
    tiers._upload_mapped(store, "f.bin", local)  # what migrate uploads, from a memory map of the file
    assert store.get("f.bin") == data
    assert tiers._same_object(store, "f.bin", local, len(data)) is None
    changed = bytearray(data)
    changed[200_000] ^= 1
    store.put("f.bin", bytes(changed))
    assert tiers._same_object(store, "f.bin", local, len(data)) == 3 * (64 << 10)
    store.put("f.bin", data[:-1])  # shorter: its last range differs
    assert tiers._same_object(store, "f.bin", local, len(data)) == 4 * (64 << 10)
    store.put("f.bin", data + b"x")  # longer
    assert tiers._same_object(store, "f.bin", local, len(data)) == len(data)
    empty = tmp_path / "empty.bin"
    empty.write_bytes(b"")
    tiers._upload_mapped(store, "empty.bin", empty)
    assert store.head("empty.bin") == 0 and tiers._same_object(store, "empty.bin", empty, 0) is None
    assert file_digest(empty) == "sha256:" + hashlib.sha256(b"").hexdigest()
    assert file_digest(local) == "sha256:" + hashlib.sha256(data).hexdigest()


def test_a_subfiled_run_migrates_extent_files_and_reads_back_from_the_archive(tmp_path: Path, store: ObjectStore,
                                                                              monkeypatch) -> None:
    """Each subfile becomes one object; after the purge every extent is read from its object (ranged GETs) and
    verified with its xxh3-64 checksum; stage brings the subfiles back byte for byte."""
    monkeypatch.setenv("SDM_S3_ENDPOINT", store.endpoint or "")  # where reads find the archive
    root, url = tmp_path / "root", f"sqlite:///{tmp_path}/c.db"
    shape = (10, 6)
    values = {(name, step): np.arange(60, dtype="<f8").reshape(shape) * (step + 1) + 100 * len(name)
              for name in ("U", "VV") for step in (0, 1)}
    with sdm.open("tiers", root=str(root), catalog=url) as s:
        g = s.make_group("sub", ["U", "VV"], dtype="<f8", shape=shape, subfiles=3)
        for step in (0, 1):
            g.write_step(step, {name: values[(name, step)] for name in ("U", "VV")})
        run_id = s.run_id
    original = files_of(root)
    assert sorted(Path(p).name for p in original) == ["sub.sub00000.sdm", "sub.sub00001.sdm", "sub.sub00002.sdm"]

    def read_back() -> None:
        with sdm.open("tiers", "r", root=str(root), catalog=url, run=run_id) as s:
            for (name, step), expected in values.items():
                np.testing.assert_array_equal(s.group("sub").read(name, step, verify=True), expected)
                np.testing.assert_array_equal(s.group("sub").read(name, step, box=(slice(2, 9), 3)),
                                              expected[2:9, 3:4])

    cat = Catalog(url)
    try:
        report = tiers.migrate(cat, run_id, store)
        assert report.files == 3
        for path, data in original.items():  # one object per subfile, byte for byte
            assert store.get(path) == data
        tiers.purge(cat, run_id, "fast")
        assert files_of(root) == {}
        checked = verify_run(cat, run_id)
        assert (checked.ok, checked.rows, checked.archived_rows) == (True, 4, 4)
    finally:
        cat.close()
    read_back()  # every extent from its object
    cat = Catalog(url)
    try:
        tiers.stage(cat, run_id, store)
    finally:
        cat.close()
    assert files_of(root) == original
    read_back()
