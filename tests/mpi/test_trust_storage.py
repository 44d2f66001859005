"""Durability of the storage layer: overwrites never touch committed bytes, run directories
are unique and owned by one catalog, runs have states, ``sdm verify`` and ``sdm gc``.

Every expected array is built here with numpy; file bytes are read with numpy at the
catalog's offsets, never through SDM.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import sdm
from sdm import maintenance
from sdm.catalog import Catalog
from sdm.errors import CatalogError, RunStateError, StepExistsError

SHAPE = (12, 10)


def _global(step: int, version: int, name: str = "a") -> np.ndarray:
    """A field whose every value names its dataset, step, version and position."""
    base = {"a": 1000.0, "b": 2000.0}[name]
    return base + 100.0 * step + 10.0 * version + np.arange(np.prod(SHAPE), dtype="f8").reshape(SHAPE) / 1000


def _local(g: sdm.Group, name: str, step: int, version: int) -> np.ndarray:
    p = g.piece(name)
    return np.ascontiguousarray(_global(step, version, name)[np.ix_(*p.indices)])


def _row(url: str, run: int, name: str, step: int):
    cat = Catalog(url, create=False)
    try:
        ((_, _, w),) = [r for r in cat.writes(run) if r[1] == name and r[2].step == step]
        return w, cat.run(run)
    finally:
        cat.close()


def _bytes_at(root: Path, path: str, offset: int, count: int) -> np.ndarray:
    return np.fromfile(root / path, dtype="f8", count=count, offset=offset)


@pytest.mark.parametrize("level", [1, 2, 3])
def test_overwrite_writes_fresh_space_and_never_touches_committed_bytes(comm, mpi_tmp, level):
    url, root = f"sqlite:///{mpi_tmp}/cat.db", Path(mpi_tmp)
    n = int(np.prod(SHAPE))
    with sdm.open("trust", root=root, catalog=url, comm=comm) as s:
        g = s.make_group("g", ["a", "b"], dtype="f8", shape=SHAPE, level=level)
        g.write_step(4, {"a": _local(g, "a", 4, 1), "b": _local(g, "b", 4, 1)})
        first = _row(url, s.run_id, "a", 4)[0] if s.rank == 0 else None
        g.write("a", 4, _local(g, "a", 4, 2), overwrite=True)
        g.write_step(4, {"a": _local(g, "a", 4, 3), "b": _local(g, "b", 4, 2)}, overwrite=True)
        run = s.run_id
        back = g.read("a", 4, verify=True)
    np.testing.assert_array_equal(back, _global(4, 3)[np.ix_(*g.piece("a").indices)])
    if comm.Get_rank() == 0:
        w, rec = _row(url, run, "a", 4)
        assert w.version == 3
        assert (w.path, w.offset) != (first.path, first.offset)
        np.testing.assert_array_equal(_bytes_at(root, w.path, w.offset, n), _global(4, 3).ravel())
        # the first version's bytes are exactly as committed: nothing wrote over them
        np.testing.assert_array_equal(_bytes_at(root, first.path, first.offset, n), _global(4, 1).ravel())
        if level == 1:
            assert w.path.endswith("g.a.s00000004.v3.sdm") and first.path.endswith("g.a.s00000004.sdm")
        report = maintenance.verify_run(Catalog(url, create=False), run)
        assert report.ok and report.rows == 2 and report.checksums_checked == 2
        assert report.unreferenced_bytes == 3 * n * 8  # a: versions 1 and 2, b: version 1
    comm.Barrier()


@pytest.mark.parametrize("level", [1, 3])
def test_failed_commit_of_an_overwrite_keeps_the_old_version(comm, mpi_tmp, level, monkeypatch):
    url, root = f"sqlite:///{mpi_tmp}/cat.db", Path(mpi_tmp)
    with sdm.open("trust", root=root, catalog=url, comm=comm) as s:
        g = s.make_group("g", ["a"], dtype="f8", shape=SHAPE, level=level)
        g.write("a", 0, _local(g, "a", 0, 1))

        def refuse(*args, **kwargs):
            raise CatalogError("catalog disk full")

        if s.rank == 0:
            monkeypatch.setattr(s.catalog, "record_writes", refuse)
        with pytest.raises(CatalogError, match=r"^catalog disk full$"):
            g.write("a", 0, _local(g, "a", 0, 2), overwrite=True)
        monkeypatch.undo()
        back = g.read("a", 0, verify=True)
        np.testing.assert_array_equal(back, _global(0, 1)[np.ix_(*g.piece("a").indices)])
        run = s.run_id
    if comm.Get_rank() == 0:
        w, _ = _row(url, run, "a", 0)
        assert w.version == 1
        np.testing.assert_array_equal(_bytes_at(root, w.path, w.offset, int(np.prod(SHAPE))), _global(0, 1).ravel())
    comm.Barrier()


def test_run_directories_are_unique_without_the_catalog(comm, mpi_tmp):
    """A lost catalog, or two catalogs on one data root: run ids repeat, directories do not."""
    root = Path(mpi_tmp)
    urls = [f"sqlite:///{mpi_tmp}/one.db", f"sqlite:///{mpi_tmp}/two.db"]
    dirs, runs = [], []
    for version, url in enumerate(urls + urls[:1], start=1):
        if version == 3 and comm.Get_rank() == 0:
            Path(urls[0][len("sqlite:///"):]).unlink()  # the first catalog is lost
            for extra in ("-wal", "-shm"):
                Path(urls[0][len("sqlite:///"):] + extra).unlink(missing_ok=True)
        comm.Barrier()
        with sdm.open("trust", root=root, catalog=url, comm=comm) as s:
            g = s.make_group("g", ["a"], dtype="f8", shape=SHAPE, level=3)
            g.write("a", 0, _local(g, "a", 0, version))
            dirs.append(s.run_dir)
            runs.append(s.run_id)
    assert runs == [1, 1, 1]
    assert len(set(dirs)) == 3
    if comm.Get_rank() == 0:
        for version, d in enumerate(dirs, start=1):  # every run's bytes are still its own
            np.testing.assert_array_equal(_bytes_at(root, f"{d}/g.sdm", 0, int(np.prod(SHAPE))),
                                          _global(0, version).ravel())
            marker = json.loads((root / d / ".sdm-run").read_text())
            assert marker["run"] == 1 and marker["application"] == "trust"
    comm.Barrier()


def test_never_writes_into_a_directory_of_another_catalog(comm, mpi_tmp):
    url, root = f"sqlite:///{mpi_tmp}/cat.db", Path(mpi_tmp)
    with sdm.open("trust", root=root, catalog=url, comm=comm) as s:
        g = s.make_group("g", ["a"], dtype="f8", shape=SHAPE, level=3)
        g.write("a", 0, _local(g, "a", 0, 1))
        run, rel = s.run_id, s.run_dir
    marker = root / rel / ".sdm-run"
    if comm.Get_rank() == 0:
        data = json.loads(marker.read_text())
        marker.write_text(json.dumps({**data, "catalog": "another-catalog"}))
    comm.Barrier()
    before = (root / rel / "g.sdm").read_bytes()
    with pytest.raises(RunStateError) as info:
        sdm.open("trust", "a", root=root, catalog=url, run=run, comm=comm)
    assert str(info.value).startswith(f"run {run}: the directory {root / rel} was created by another catalog or run")
    assert str(info.value).endswith("SDM never writes into a run directory this catalog did not create")
    assert (root / rel / "g.sdm").read_bytes() == before
    if comm.Get_rank() == 0:
        cat = Catalog(url, create=False)
        assert cat.run(run).state == "closed" and cat.counts()["writes"] == 1
        cat.close()
    comm.Barrier()


def test_run_states_open_closed_interrupted(comm, mpi_tmp):
    url, root = f"sqlite:///{mpi_tmp}/cat.db", Path(mpi_tmp)

    def state(run):
        if comm.Get_rank() != 0:
            return None
        cat = Catalog(url, create=False)
        try:
            return cat.run(run).state
        finally:
            cat.close()

    with sdm.open("trust", root=root, catalog=url, comm=comm) as s:
        run = s.run_id
        assert s.previous_state == "new"
        assert state(run) in ("open", None)
        with sdm.open("trust", "r", root=root, catalog=url, run=run, comm=comm) as r:  # a live writer: still open
            assert r.previous_state == "open"
        g = s.make_group("g", ["a"], dtype="f8", shape=SHAPE, level=2)
        g.write("a", 0, _local(g, "a", 0, 1))
        if s.rank == 0:  # a live session refuses gc
            with pytest.raises(RunStateError, match=rf"^run {run} is being written by a live session"):
                maintenance.gc_run(s.catalog, run)
    assert state(run) in ("closed", None)

    # a writer that died: the catalog still says open, and nobody holds the run's lock
    if comm.Get_rank() == 0:
        cat = Catalog(url, create=False)
        with cat.engine.begin() as con:
            con.exec_driver_sql(f"UPDATE runs SET state = 'open', writers = 1 WHERE id = {run}")
        cat.close()
    comm.Barrier()
    with sdm.open("trust", "r", root=root, catalog=url, run=run, comm=comm) as r:
        assert r.previous_state == "interrupted"
        np.testing.assert_array_equal(r.group("g").read("a", 0, verify=True),
                                      _global(0, 1)[np.ix_(*r.group("g").piece("a").indices)])
    assert state(run) in ("interrupted", None)
    with sdm.open("trust", "a", root=root, catalog=url, run=run, comm=comm) as s:  # continued after the crash
        assert s.previous_state == "interrupted"
        g = s.group("g")
        g.write("a", 1, _local(g, "a", 1, 1))
        assert state(run) in ("open", None)
    assert state(run) in ("closed", None)


def test_verify_finds_damage_and_gc_reclaims(comm, mpi_tmp):
    url, root = f"sqlite:///{mpi_tmp}/cat.db", Path(mpi_tmp)
    n = int(np.prod(SHAPE))
    with sdm.open("trust", root=root, catalog=url, comm=comm) as s:
        g1 = s.make_group("one", ["a"], dtype="f8", shape=SHAPE, level=1)
        g3 = s.make_group("three", ["a", "b"], dtype="f8", shape=SHAPE, level=3)
        for version in (1, 2, 3):
            g1.write("a", 0, _local(g1, "a", 0, version), overwrite=version > 1)
            g3.write_step(0, {"a": _local(g3, "a", 0, version), "b": _local(g3, "b", 0, version)},
                          overwrite=version > 1)
        g3.write("a", 1, _local(g3, "a", 1, 1))
        run, rel = s.run_id, s.run_dir
    if comm.Get_rank() == 0:
        cat = Catalog(url, create=False)
        before = maintenance.verify_run(cat, run)
        assert before.ok and before.rows == 4
        whole = sorted(u.path for u in before.unreferenced if u.whole_file)
        assert whole == [f"{rel}/one.a.s00000000.sdm", f"{rel}/one.a.s00000000.v2.sdm"]
        ranges = [(u.offset, u.nbytes) for u in before.unreferenced if not u.whole_file]
        assert ranges == [(0, 4 * n * 8)]  # a and b of versions 1 and 2, in front of version 3
        report = maintenance.gc_run(cat, run)
        assert (report.files_removed, report.ranges_punched, report.tails_cut) == (2, 1, 0)
        assert report.bytes_reclaimed == before.unreferenced_bytes
        after = maintenance.verify_run(cat, run)
        assert after.ok and after.unreferenced == [] and after.rows == 4
        assert not (root / whole[0]).exists()
        # every committed row still reads its own bytes
        for g, d, w in cat.writes(run):
            step_version = {(0, "one"): 3, (0, "three"): 3, (1, "three"): 1}[(w.step, g)]
            np.testing.assert_array_equal(_bytes_at(root, w.path, w.offset, n), _global(w.step, step_version, d).ravel())
        # damage one value of one row: verify names exactly that row
        w = [w for g, d, w in cat.writes(run) if g == "three" and d == "b"][0]
        with open(root / w.path, "r+b") as f:
            f.seek(w.offset + 8 * 17)
            f.write(np.float64(-1.5).tobytes())
        damaged = maintenance.verify_run(cat, run)
        assert not damaged.ok
        assert [(p.group, p.dataset, p.step, p.path) for p in damaged.problems] == [("three", "b", 0, w.path)]
        assert damaged.problems[0].problem.startswith("checksum ")
        cat.close()
    comm.Barrier()


def test_concurrent_step_writers_never_both_win(comm, mpi_tmp):
    """Two sessions on one run write the same new step: one commits, the other gets StepExistsError."""
    url, root = f"sqlite:///{mpi_tmp}/cat.db", Path(mpi_tmp)
    with sdm.open("trust", root=root, catalog=url, comm=comm) as s:
        g = s.make_group("g", ["a"], dtype="f8", shape=SHAPE, level=3)
        with sdm.open("trust", "a", root=root, catalog=url, run=s.run_id, comm=comm) as other:
            g2 = other.group("g")
            g2.write("a", 7, _local(g2, "a", 7, 1))
            with pytest.raises(StepExistsError):
                g.write("a", 7, _local(g, "a", 7, 2))  # this session had not seen step 7: the commit refuses it
        back = g.read("a", 7, verify=True)
    np.testing.assert_array_equal(back, _global(7, 1)[np.ix_(*g.piece("a").indices)])


def test_a_run_locked_by_gc_is_refused_not_waited_for(comm, mpi_tmp):
    """While ``sdm gc`` holds the run exclusively, a new writer gets RunStateError on every rank."""
    import fcntl
    import os

    url, root = f"sqlite:///{mpi_tmp}/cat.db", Path(mpi_tmp)
    with sdm.open("trust", root=root, catalog=url, comm=comm) as s:
        g = s.make_group("g", ["a"], dtype="f8", shape=SHAPE, level=3)
        g.write("a", 0, _local(g, "a", 0, 1))
        run, rel = s.run_id, s.run_dir
    fd = None
    if comm.Get_rank() == 0:  # what gc_run holds while it works
        fd = os.open(root / rel / ".sdm-run", os.O_RDONLY)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    comm.Barrier()
    try:
        with pytest.raises(RunStateError) as info:
            sdm.open("trust", "a", root=root, catalog=url, run=run, comm=comm)
        assert str(info.value) == (f"the run in {root / rel} is locked by `sdm gc` (or another exclusive holder); "
                                   "open it again when that has finished")
        assert len(set(comm.allgather(str(info.value)))) == 1
    finally:
        if fd is not None:
            os.close(fd)
    comm.Barrier()
    with sdm.open("trust", "a", root=root, catalog=url, run=run, comm=comm) as s:  # gc finished: writing goes on
        g = s.group("g")
        g.write("a", 1, _local(g, "a", 1, 1))
    if comm.Get_rank() == 0:
        cat = Catalog(url, create=False)
        assert cat.run(run).state == "closed" and sorted(w.step for _, _, w in cat.writes(run)) == [0, 1]
        cat.close()
    comm.Barrier()
