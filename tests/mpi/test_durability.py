"""Syncs: one ``fsync`` per node of the right file, or ``MPI_File_sync`` on every rank.

``os.fsync`` is wrapped to record which file each call synced (``/proc/self/fd``), and
the durability module's ``MPI_File_sync`` calls are counted, so the tests see exactly who synced what; the bytes are
read back with numpy.  Errors reach every rank.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import sdm
from mpi4py import MPI
from sdm.errors import HintError, StorageError
from sdm.storage import make_durable, sync_mode
from sdm.storage import durability
from sdm.storage.durability import node_comm


@pytest.fixture
def fsyncs(monkeypatch):
    """Paths this rank passed to ``os.fsync`` (resolved), and its count of ``MPI_File_sync`` calls."""
    seen: dict[str, list] = {"fsync": [], "mpi": []}
    real = os.fsync

    def spy(fd):
        seen["fsync"].append(os.path.realpath(f"/proc/self/fd/{fd}"))
        return real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    real_sync = durability._mpi_sync
    monkeypatch.setattr(durability, "_mpi_sync", lambda fh: (seen["mpi"].append(1), real_sync(fh))[1])
    return seen


def _data_syncs(paths):
    """The syncs of data files: the run's marker and a new catalog's file (before it is linked) are synced once,
    the run's meta-file once per record and its backup lazily (:func:`_meta_syncs`)."""
    return [p for p in paths if not p.endswith("/.sdm-run") and not (Path(p).name.startswith(".") and p.endswith(".new"))
            and p not in _meta_syncs(paths)]


def _meta_syncs(paths):
    """The syncs of the run's meta-file and its backup."""
    return [p for p in paths if Path(p).name in (".sdm-meta.jsonl", ".sdm-meta.jsonl.bak")]


def _nodes(comm):
    return comm.allreduce(int(node_comm(comm).Get_rank() == 0))


def _write(comm, path):
    """Every rank writes its 1000 float64 at its own offset; returns the expected file."""
    rank, size = comm.Get_rank(), comm.Get_size()
    fh = MPI.File.Open(comm, str(path), MPI.MODE_RDWR | MPI.MODE_CREATE)
    fh.Write_at_all(rank * 8000, np.arange(rank * 1000, (rank + 1) * 1000, dtype=np.float64))
    return fh, np.arange(size * 1000, dtype=np.float64)


def test_node_mode_fsyncs_the_file_once_per_node(comm, mpi_tmp, fsyncs):
    path = Path(mpi_tmp) / "data.bin"
    fh, expected = _write(comm, path)
    try:
        make_durable(comm, fh, path)
    finally:
        fh.Close()
    every = comm.allgather(fsyncs["fsync"])
    assert sum(len(m) for m in every) == _nodes(comm)
    assert all(p == str(path.resolve()) for m in every for p in m)
    assert comm.allreduce(len(fsyncs["mpi"])) == 0
    assert np.array_equal(np.fromfile(path, dtype=np.float64), expected)


def test_every_rank_mode_calls_mpi_file_sync_on_every_rank(comm, mpi_tmp, fsyncs):
    path = Path(mpi_tmp) / "data.bin"
    fh, expected = _write(comm, path)
    try:
        make_durable(comm, fh, path, "every_rank")
    finally:
        fh.Close()
    assert len(fsyncs["mpi"]) == 1
    assert _data_syncs(fsyncs["fsync"]) == []  # only the run's marker
    assert np.array_equal(np.fromfile(path, dtype=np.float64), expected)


def test_a_failed_sync_raises_the_same_error_on_every_rank(comm, mpi_tmp):
    path = Path(mpi_tmp) / "gone.bin"
    with pytest.raises(StorageError) as err:
        make_durable(comm, None, path)
    suffix = " [rank 0]" if comm.Get_size() > 1 else ""  # rank 0 leads the first node
    assert str(err.value) == f"sync of {path} failed: cannot open it (No such file or directory){suffix}"
    assert not path.exists()


def test_session_writes_sync_once_per_node_and_record_the_data(comm, mpi_tmp, fsyncs):
    rank, size = comm.Get_rank(), comm.Get_size()
    url = f"sqlite:///{mpi_tmp}/cat.db"
    with sdm.open("dur", root=mpi_tmp, catalog=url, sync=True, method="collective") as s:
        g = s.make_group("g", ["a"], dtype="f8", shape=(size * 4, 3), level=2, view=sdm.Block(grid=(size, 1)))
        for step in range(3):
            g.write("a", step, np.full((4, 3), 10.0 * step + rank))
        run_id = s.run_id
    data_syncs = _data_syncs(fsyncs["fsync"])
    # 3 dumps synced once per node, then rank 0 syncs the trailer it appends at close
    assert sum(len(m) for m in comm.allgather(data_syncs)) == 3 * _nodes(comm) + 1
    assert comm.allreduce(len(fsyncs["mpi"])) == 0
    # rank 0 appends 7 records (run, group, data view, 3 dumps, close), each synced in the meta-file;
    # the backup is synced lazily: at close, and by an append a second or more after its last sync
    names = [Path(p).name for p in _meta_syncs(fsyncs["fsync"])]
    assert names.count(".sdm-meta.jsonl") == (7 if rank == 0 else 0)
    assert (1 <= names.count(".sdm-meta.jsonl.bak") <= 8) if rank == 0 else names == []
    if rank == 0:
        assert names[-1] == ".sdm-meta.jsonl.bak"  # the last sync: the backup's, at close
    if rank == 0:
        cat = sdm.Catalog(url, create=False)
        writes = [w for _, _, w in cat.writes(run_id)]
        cat.close()
        assert [w.step for w in writes] == [0, 1, 2]
        (rel,) = {w.path for w in writes}
        data = np.fromfile(Path(mpi_tmp) / rel, dtype=np.float64, count=3 * size * 12).reshape(3, size * 4, 3)
        for step in range(3):
            assert np.array_equal(data[step], np.repeat(10.0 * step + np.arange(size), 4)[:, None] * np.ones(3))


def test_session_with_every_rank_hint_uses_mpi_file_sync(comm, mpi_tmp, fsyncs):
    url = f"sqlite:///{mpi_tmp}/cat.db"
    with sdm.open("dur", root=mpi_tmp, catalog=url, sync=True, hints={"sdm_sync": "every_rank"}) as s:
        g = s.make_group("g", ["a"], dtype="f8", shape=(comm.Get_size() * 2,), level=1)
        g.write("a", 0, np.ones(2))
        back = g.read("a", 0)
    assert len(fsyncs["mpi"]) == 1
    assert _data_syncs(fsyncs["fsync"]) == []  # only the run's marker and the new catalog
    assert np.array_equal(back, np.ones(2))


def test_bad_sync_hint_on_one_rank_fails_everywhere_and_creates_no_run(comm, mpi_tmp):
    rank, size = comm.Get_rank(), comm.Get_size()
    url = f"sqlite:///{mpi_tmp}/cat.db"
    bad = size - 1
    hints = {"sdm_sync": "sometimes"} if rank == bad else {}
    with pytest.raises(HintError) as err:
        sdm.open("dur", root=mpi_tmp, catalog=url, hints=hints)
    suffix = f" [rank {bad}]" if size > 1 else ""
    assert str(err.value) == f"hint sdm_sync='sometimes': use one of 'node', 'every_rank'{suffix}"
    assert not (Path(mpi_tmp) / "cat.db").exists()


def test_sync_mode_values():
    assert sync_mode(None) == "node"
    assert sync_mode({"sdm_sync": "EVERY_RANK"}) == "every_rank"
    with pytest.raises(HintError, match="hint sdm_sync='fsync'"):
        sync_mode({"sdm_sync": "fsync"})
