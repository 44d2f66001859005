"""Reads from the archive tier without staging (``sdm.io.remote``) on a real S3 server (versitygw).

A run (levels 1 and 3, C and Fortran order) is written on one process, migrated with
:func:`sdm.ops.tiers.migrate` and purged from the fast tier; ``mpiexec`` jobs
(``_remote_job.py``) then read it at 1-4 ranks with every remote method and ``auto``,
every distribution (Block, Cyclic, BlockCyclic, Subarray with ghosts, MapArray with a
ghost row), ``verify=True``, byte for byte against numpy references.  The subfile cache
is reused (counted GETs), and a missing object gives the same StorageError on every rank.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Iterator

import pytest

import sdm
from sdm.catalog import Catalog
from sdm.catalog.tiers import copies
from sdm.io import remote
from sdm.planner import remote as remote_planner
from sdm.maintenance import verify_run
from sdm.ops import tiers
from sdm.storage.backends.objectstore import ObjectStore

from _remote_job import DATASETS, SHAPE, reference
from test_rebuild import mpi

BUCKET = "sdm-remote"


def write_run(root: Path, url: str) -> int:
    with sdm.open("remote", root=str(root), catalog=url) as s:
        groups = {}
        for group, level, name, dtype, order, steps in DATASETS:
            if group not in groups:
                names = [sdm.Dataset(n, dtype=d, order=o) for g, _, n, d, o, _ in DATASETS if g == group]
                groups[group] = s.make_group(group, names, shape=SHAPE, level=level)
            for step in steps:
                groups[group].write(name, step, reference(name, step, dtype))
        return s.run_id


def archived_run(root: Path, url: str, endpoint: str) -> tuple[int, ObjectStore]:
    """A run written, migrated and purged from the fast tier; its store."""
    run_id = write_run(root, url)
    store = ObjectStore(f"s3://{BUCKET}/r-{uuid.uuid4().hex[:8]}", endpoint=endpoint)
    to_archive_only(root, url, run_id, store)
    return run_id, store


def to_archive_only(root: Path, url: str, run_id: int, store: ObjectStore) -> None:
    """Migrate a run to *store* (its bucket made if needed) and purge its fast copies."""
    store.ensure_bucket()
    cat = Catalog(url)
    try:
        tiers.migrate(cat, run_id, store)
        tiers.purge(cat, run_id, "fast")
    finally:
        cat.close()
    assert not list(root.rglob("*.sdm"))  # the bytes are on the archive tier only


@pytest.fixture(scope="module")
def run(s3_server, tmp_path_factory) -> Iterator[tuple[Path, str, int, ObjectStore]]:
    tmp = tmp_path_factory.mktemp("remote")
    root, url = tmp / "root", f"sqlite:///{tmp}/c.db"
    run_id, store = archived_run(root, url, s3_server.endpoint)
    yield root, url, run_id, store


@pytest.fixture
def endpoint(s3_server, monkeypatch) -> str:
    monkeypatch.setenv("SDM_S3_ENDPOINT", s3_server.endpoint)
    return s3_server.endpoint


@pytest.mark.parametrize("ranks", [1, 2, 3, 4])
def test_every_method_and_view_reads_the_archive(run, endpoint, ranks: int) -> None:
    root, url, run_id, _ = run
    out = mpi(ranks, "read", str(root), url, str(run_id), *remote.METHODS, "auto", job="_remote_job.py")
    views = 5
    per_view = sum(len(steps) for *_, steps in DATASETS)
    reads = (views * per_view - sum(len(steps) for *_, order, steps in DATASETS if order == "F")) * \
        (len(remote.METHODS) + 1)  # every method and auto
    assert f"READ OK {reads * ranks}" in out, out[-3000:]
    assert not list(root.rglob("*.sdm"))  # read without staging


@pytest.mark.parametrize("ranks", [1, 3])
def test_subfile_cache_is_reused(tmp_path: Path, endpoint, ranks: int) -> None:
    root, url = tmp_path / "root", f"sqlite:///{tmp_path}/c.db"
    run_id, _ = archived_run(root, url, endpoint)
    first = mpi(ranks, "cache", str(root), url, str(run_id), job="_remote_job.py")
    gets = [int(x) for x in first.split("GETS ")[1].split()[:2]]
    assert gets[0] >= 1 and gets[1] == 0, first[-2000:]  # the second read makes no request
    again = mpi(ranks, "cache", str(root), url, str(run_id), job="_remote_job.py")
    assert "GETS 0 0" in again, again[-2000:]  # another job reuses the cache too
    cache = [p for p in root.rglob(f"{remote.CACHE_DIR}/*")]
    assert sorted(p.suffix for p in cache) == [".bytes", ".json"]
    cat = Catalog(url)
    try:  # the cache is SDM's own: neither unreferenced bytes for `sdm verify` nor reclaimed by `sdm gc`
        assert verify_run(cat, run_id).unreferenced == []
    finally:
        cat.close()
    assert remote.clear_cache(cache[0].parent.parent) > 0
    assert not cache[0].parent.exists()
    third = mpi(ranks, "cache", str(root), url, str(run_id), job="_remote_job.py")
    assert third.split("GETS ")[1].split()[:2] == [str(gets[0]), "0"], third[-2000:]


@pytest.mark.parametrize("ranks", [1, 2, 4])
@pytest.mark.parametrize("method", [*remote.METHODS, "auto"])
def test_missing_object_is_the_same_error_on_every_rank(tmp_path: Path, endpoint, ranks: int, method: str) -> None:
    root, url = tmp_path / "root", f"sqlite:///{tmp_path}/c.db"
    run_id, store = archived_run(root, url, endpoint)
    cat = Catalog(url)
    try:
        path = next(p for p in copies(cat, run_id) if "fields" in p)
    finally:
        cat.close()
    store.delete(path)
    out = mpi(ranks, "error", str(root), url, str(run_id), method, job="_remote_job.py")
    message = f"StorageError: GET {store.location(path)}: no such object" + (" [rank 0]" if ranks > 1 else "")
    lines = [line for line in out.splitlines() if line.startswith("ERROR ")]
    assert lines == [f"ERROR {r} {message}" for r in range(ranks)], out[-3000:]


@pytest.mark.parametrize("ranks", [1, 2, 4])
def test_requests_of_each_method(tmp_path: Path, endpoint, ranks: int) -> None:
    """Cyclic rows: naive one GET per row (one region at 1 rank), sieving and collective one per rank,
    the subfile one per row it stages and none once cached, the superfile form one whole-object GET per rank."""
    root, url = tmp_path / "root", f"sqlite:///{tmp_path}/c.db"
    run_id, _ = archived_run(root, url, endpoint)
    out = mpi(ranks, "counts", str(root), url, str(run_id), job="_remote_job.py")
    regions = SHAPE[0] if ranks > 1 else 1
    assert (f"COUNTS remote-naive={regions} remote-sieving={ranks} remote-collective={ranks} "
            f"remote-subfile={regions} remote-superfile={ranks} remote-subfile=0") in out, out[-2000:]


def test_auto_uses_the_stored_calibration_of_the_archive(run, endpoint) -> None:
    """``auto`` takes the newest calibration of ``archive:<endpoint>``, else the paper's constants."""
    from sdm.planner.remote import SRB_HPSS_2003, RemoteConstants, archive_target

    root, url, run_id, store = run
    fast = {**SRB_HPSS_2003.to_json(), "T_seek": 0.0, "T_read": [[1, 0.001], [1 << 20, 0.002]]}
    with sdm.open("remote", "r", root=str(root), catalog=url, run=run_id) as s:
        assert remote_planner._constants(s, store.location("x")) == SRB_HPSS_2003
    prefix = {**fast, "T_comm": 0.25}
    cat = Catalog(url)
    try:
        cat.save_calibration(archive_target(store.url), 1, prefix)  # what `sdm predict --endpoint s3://...` names
        with sdm.open("remote", "r", root=str(root), catalog=url, run=run_id) as s:
            assert remote_planner._constants(s, store.location("a/b")) == RemoteConstants.from_json(prefix)
        cat.save_calibration(archive_target(endpoint), 1, fast)  # the server's URL comes first
    finally:
        cat.close()
    with sdm.open("remote", "r", root=str(root), catalog=url, run=run_id) as s:
        assert remote_planner._constants(s, store.location("x")) == RemoteConstants.from_json(fast)
        g = s.group("fields")
        assert g.read("T", 1, verify=True).tobytes() == reference("T", 1, "<f8").tobytes()
