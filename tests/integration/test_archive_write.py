"""Writes to the archive tier: groups made with ``tier="archive"`` on a real S3 server (versitygw).

``mpiexec`` jobs (``_archive_write_job.py``) write every distribution of the core and map
arrays (Block, Cyclic, BlockCyclic, Subarray with ghosts, MapArray with a ghost row, C
and Fortran order) at 1-4 ranks into objects; the test then compares each object's bytes
with numpy references, checks the catalog's archive copies (digests computed here with
hashlib), reads everything back at another rank count, appends and overwrites, stages,
rebuilds the catalog from the meta-file, and checks each bad call's exact error on every
rank, with nothing written.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from pathlib import Path

import numpy as np
import pytest

import sdm
from sdm.catalog import Catalog
from sdm.catalog.rebuild import rebuild
from sdm.catalog.tiers import copies
from sdm.maintenance import verify_run
from sdm.ops import tiers
from sdm.storage.sections import parse_header
from sdm.storage.backends.objectstore import ObjectStore

from _archive_write_job import BIG_COLUMNS, DTYPES, particles, reference
from test_rebuild import mpi
from test_remote_read import to_archive_only

BUCKET = "sdm-writes"
JOB = "_archive_write_job.py"
PART = 5 << 20  # the smallest part of a multipart upload


@pytest.fixture
def endpoint(s3_server, monkeypatch) -> str:
    monkeypatch.setenv("SDM_S3_ENDPOINT", s3_server.endpoint)
    return s3_server.endpoint


def fresh_archive() -> str:
    return f"s3://{BUCKET}/w-{uuid.uuid4().hex[:8]}"


def expected_digest(data: bytes, ranks: int) -> str:
    """What put_collective records, computed from the bytes alone: one SHA-256, or the parts' composite."""
    parts = max(1, min(ranks, len(data) // PART))
    if parts == 1:
        return "sha256:" + hashlib.sha256(data).hexdigest()
    size = -(-len(data) // parts)
    digests = b"".join(hashlib.sha256(data[i:i + size]).digest() for i in range(0, len(data), size))
    return f"sha256-parts:{size}:{hashlib.sha256(digests).hexdigest()}"


def objects_of(url: str, run_id: int) -> dict[str, tuple[str, str, int, str | None, str]]:
    """Per file of the run: its one copy (tier, location, size, checksum, state)."""
    cat = Catalog(url)
    try:
        out = {}
        for path, found in copies(cat, run_id).items():
            (copy,) = found
            out[path] = (copy.tier, copy.location, copy.size, copy.checksum, copy.state)
        return out
    finally:
        cat.close()


def rows_of(url: str, run_id: int) -> dict[tuple[str, str, int], str]:
    cat = Catalog(url)
    try:
        return {(g, d, w.step): w.path for g, d, w in cat.writes(run_id)}
    finally:
        cat.close()


@pytest.mark.parametrize("ranks", [1, 2, 3, 4])
def test_every_distribution_written_to_the_archive_is_the_numpy_array(tmp_path: Path, endpoint, ranks: int) -> None:
    root, url, archive = tmp_path / "root", f"sqlite:///{tmp_path}/c.db", fresh_archive()
    big = 1536 if ranks in (2, 4) else 0  # 12 MiB: two parts at 2 and 4 ranks
    out = mpi(ranks, "write", str(root), url, archive, str(big), job=JOB)
    run_id = int(out.split("RUN ")[1].split()[0])
    assert not [p for p in root.rglob("*") if p.is_file() and p.suffix == ".sdm"]  # no byte on the fast tier
    store = ObjectStore(archive, endpoint=endpoint)
    found = objects_of(url, run_id)
    paths = rows_of(url, run_id)
    assert len(paths) == 2 * (len(DTYPES) + 2) + (1 if big else 0) == len(found)
    for (group, name, step), path in paths.items():
        if name == "particles":  # a ranked section: its header, then every writer's rows in rank order
            data = store.get(path)
            head = parse_header(data, "particles")
            assert list(head.counts) == list(range(2, ranks + 2))
            assert data[head.header:] == particles(step, ranks).tobytes()
            assert found[path][3] == expected_digest(data, ranks)
            continue
        if name == "big":
            want = reference("big", 0, "<f8", (big, BIG_COLUMNS)).tobytes()
        elif name == "fortran":
            want = reference(name, step, "<f8").tobytes(order="F")
        else:
            want = reference(name, step, DTYPES[name]).tobytes()
        assert store.get(path) == want, (name, step)  # the object holds exactly the array's bytes
        assert found[path] == ("archive", store.location(path), len(want), expected_digest(want, ranks), "verified")
    if big:
        assert found[paths[("b", "big", 0)]][3].startswith("sha256-parts:")  # uploaded in parts by aggregators
    cat = Catalog(url)
    try:
        report = verify_run(cat, run_id)
        assert report.archived_rows == len(paths) and report.ok
    finally:
        cat.close()
    other = 3 if ranks != 3 else 2  # read back at another rank count, every view
    reads = mpi(other, "read", str(root), url, str(run_id), job=JOB)
    assert f"READ OK {other * (2 * (len(DTYPES) + 2) + (1 if big else 0))}" in reads, reads[-3000:]


def test_append_overwrite_stage_and_rebuild(tmp_path: Path, endpoint) -> None:
    root, url, archive = tmp_path / "root", f"sqlite:///{tmp_path}/c.db", fresh_archive()
    run_id = int(mpi(2, "write", str(root), url, archive, "0", job=JOB).split("RUN ")[1].split()[0])
    assert "APPEND OK" in mpi(2, "append", str(root), url, str(run_id), job=JOB)  # level 1: new objects only
    store = ObjectStore(archive, endpoint=endpoint)
    paths = rows_of(url, run_id)
    assert store.get(paths[("a", "block", 2)]) == reference("block", 2, "<f8").tobytes()
    assert store.get(paths[("a", "cyclic", 0)]) == (reference("cyclic", 0, ">i4") + 5).astype(">i4").tobytes()  # the new version
    before = objects_of(url, run_id)
    assert "READ OK 45" in mpi(3, "read", str(root), url, str(run_id), "appended", job=JOB)
    # a catalog rebuilt from the meta-file knows the group's archive and every object
    (tmp_path / "c.db").unlink()
    assert rebuild(root, url).added == [run_id]
    cat = Catalog(url)
    try:
        (group,) = [g for g in cat.run(run_id).groups if g.name == "a"]
        assert group.archive == archive and group.level == 1
    finally:
        cat.close()
    assert objects_of(url, run_id) == before  # the replaced version's object too, as its file on the fast tier
    with sdm.open("archived", "r", root=str(root), catalog=url, run=run_id) as s:
        g = s.group("a")
        assert (g.tier, g.archive) == ("archive", archive)
        np.testing.assert_array_equal(g.read("block", 2, verify=True), reference("block", 2, "<f8"))
    # staged: files on the fast tier, byte for byte the arrays, and readable with the fast methods
    cat = Catalog(url)
    try:
        report = tiers.stage(cat, run_id, tiers.archive_store(cat, run_id))
        assert report.files == len(before)  # the replaced version too, as gc has not reclaimed it
    finally:
        cat.close()
    for (_, name, step), path in rows_of(url, run_id).items():
        data = (root / path).read_bytes()
        if name == "fortran":
            assert data == reference(name, step, "<f8").tobytes(order="F")
        elif name == "particles":
            assert data[parse_header(data, name).header:] == particles(step, 2).tobytes()
        elif (name, step) == ("cyclic", 0):
            assert data == (reference("cyclic", 0, ">i4") + 5).astype(">i4").tobytes()
        else:
            assert data == reference(name, step, DTYPES[name]).tobytes()
    with sdm.open("archived", "r", root=str(root), catalog=url, run=run_id) as s:
        np.testing.assert_array_equal(s.group("a").read("subarray", 1, verify=True, method="collective"),
                                      reference("subarray", 1, "<i8"))


ERRORS = {
    "no-archive": "InvalidArgumentError: tier='archive' needs the object store: archive='s3://BUCKET/PREFIX' "
                  "(or $SDM_ARCHIVE)",
    "level": "InvalidArgumentError: group 'e': the archive tier stores one object per dataset and step (level 1), "
             "since an object cannot be appended to; got level 3. Write levels 2 and 3 on the fast tier and "
             "`sdm migrate --pack-below BYTES` packs small files into superfiles",
    "tier": "InvalidArgumentError: tier must be 'fast' or 'archive', got 'tape'",
    "bucket": "InvalidArgumentError: object store URL 's3://No_Such/x': bucket name 'No_Such' is not 3-63 characters "
              "of a-z, 0-9, '.' and '-'",
    "naive": "InvalidArgumentError: method 'remote-naive' cannot write to the archive tier: an object cannot be "
             "updated in part, so group 'e' writes whole objects with 'remote-collective' (or 'auto')",
    "fast-remote": "InvalidArgumentError: method 'remote-collective' writes to the archive tier, and group 'e' "
                   "writes to the fast tier; choose a fast-tier method or 'auto'",
}


@pytest.mark.parametrize("ranks", [1, 3])
@pytest.mark.parametrize("case", sorted(ERRORS))
def test_bad_calls_fail_alike_on_every_rank_and_write_nothing(tmp_path: Path, endpoint, case: str,
                                                               ranks: int) -> None:
    root, url, archive = tmp_path / "root", f"sqlite:///{tmp_path}/c.db", fresh_archive()
    out = mpi(ranks, "error", str(root), url, archive, case, job=JOB)
    suffix = " [rank 0]" if ranks > 1 else ""
    lines = sorted(line for line in out.splitlines() if line.startswith("ERROR "))
    assert lines == [f"ERROR {r} {ERRORS[case]}{suffix}" for r in range(ranks)], out[-3000:]
    assert ObjectStore(archive, endpoint=endpoint).list() == []
    cat = Catalog(url)
    try:
        (run,) = cat.find(application="archived", steps=False)
        assert list(cat.writes(run.id)) == []
    finally:
        cat.close()


def test_a_connection_reset_fails_the_write_clearly_and_records_nothing(tmp_path: Path, s3_server, toxiproxy,
                                                                       monkeypatch) -> None:
    """The job makes its group through the proxy, then has it reset every connection and writes."""
    root, url, archive = tmp_path / "root", f"sqlite:///{tmp_path}/c.db", fresh_archive()
    monkeypatch.setenv("SDM_S3_ENDPOINT", toxiproxy.endpoint)
    monkeypatch.setenv("SDM_S3_RETRY_TIME", "1")
    monkeypatch.setenv("TOXIPROXY_API", f"{toxiproxy.server.endpoint}/proxies/{toxiproxy.name}/toxics")
    try:
        out = mpi(2, "error", str(root), url, archive, "fault", job=JOB)
    finally:
        toxiproxy.clear()
    lines = sorted(line for line in out.splitlines() if line.startswith("ERROR "))
    assert len(lines) == 2 and lines[0].split(" ", 2)[2] == lines[1].split(" ", 2)[2], out[-3000:]
    assert re.match(rf"^ERROR 0 StorageError: PUT {re.escape(archive)}/\S+ failed after \d+ attempts in [\d.]+ s: "
                    r"connection reset by the server \[rank 0\]$", lines[0]), lines
    assert ObjectStore(archive, endpoint=s3_server.endpoint).list() == []  # no object, not even in part
    cat = Catalog(url)
    try:
        (run,) = cat.find(application="archived", steps=False)
        assert list(cat.writes(run.id)) == []
        assert not any(c.tier == "archive" for found in copies(cat, run.id).values() for c in found)
    finally:
        cat.close()


def test_a_ranked_dataset_migrated_and_purged_is_read_from_the_archive(tmp_path: Path, endpoint) -> None:
    root, url = tmp_path / "root", f"sqlite:///{tmp_path}/c.db"
    rows = particles(0, 1)
    with sdm.open("ranked", root=str(root), catalog=url) as s:
        g = s.make_group("r", [sdm.Dataset("particles", dtype="<f8", shape=(3,))], level=3)
        g.data_view(sdm.Ranked())
        g.write("particles", 0, rows)
        run_id = s.run_id
    to_archive_only(root, url, run_id, ObjectStore(fresh_archive(), endpoint=endpoint))
    with sdm.open("ranked", "r", root=str(root), catalog=url, run=run_id) as s:
        g = s.group("r")
        assert g.read("particles", 0, verify=True).tobytes() == rows.tobytes()
        assert g.read("particles", 0, ranks=(0, 1)).tobytes() == rows.tobytes()
        assert g.ranked_counts("particles", 0).counts == (2,)


def test_boxes_and_lazy_indexing_read_the_archive_by_ranged_gets(tmp_path: Path, endpoint) -> None:
    """A run only the archive holds: a box read (the remote methods) and lazy indexing (ranged GETs)."""
    root, url, archive = tmp_path / "root", f"sqlite:///{tmp_path}/c.db", fresh_archive()
    run_id = int(mpi(2, "write", str(root), url, archive, "0", job=JOB).split("RUN ")[1].split()[0])
    with sdm.open("archived", "r", root=str(root), catalog=url, run=run_id) as s:
        g = s.group("a")
        want = reference("block", 1, "<f8")
        np.testing.assert_array_equal(g.read("block", 1, box=(slice(2, 9, 3), 4)), want[2:9:3, 4:5])
        np.testing.assert_array_equal(g["block"][:, 5, 1:3], np.stack([reference("block", k, "<f8")[5, 1:3]
                                                                       for k in (0, 1)]))
        np.testing.assert_array_equal(g["fortran"][1, 3], reference("fortran", 1, "<f8")[3])
