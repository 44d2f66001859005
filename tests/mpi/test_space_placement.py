"""Dumps placed from the chunks reserved ahead, which every rank holds alike.

A dump of new steps that the chunks hold takes its offsets on every rank with no
broadcast (one ``root_vector`` per dump is left: the commit's); a dump that needs a new
chunk, an overwrite, a session in mode ``"a"`` and a map that leaves rows unwritten are
placed by rank 0 and broadcast, with the chunks' state, so the ranks' chunks stay equal.
Every row's bytes on disk are compared with arrays built with numpy.
"""

from __future__ import annotations

import numpy as np
import pytest
import sdm
import sdm.engine.placement as engine_placement
import sdm.engine.state as engine_state

from _reference import global_array

NAMES = ["p", "q", "r"]
N = 24


@pytest.fixture
def broadcasts(monkeypatch):
    """The number of root_vector calls the engine makes for a group's dumps (placements and commits)."""
    seen = {"n": 0}
    real = engine_state.root_vector

    def counting(*args, **kwargs):
        seen["n"] += 1
        return real(*args, **kwargs)

    for module in (engine_state, engine_placement):
        monkeypatch.setattr(module, "root_vector", counting)
    return seen


def _cut(comm):
    return np.array_split(np.arange(N), comm.Get_size())[comm.Get_rank()]  # Block's rule, cut independently


def _values(name, step, version=0):
    return global_array((N,), "<f8", seed=1000 * version + 100 * NAMES.index(name) + step)


def _dump(g, comm, step, version=0, **kw):
    g.write_step(step, {n: np.ascontiguousarray(_values(n, step, version)[_cut(comm)]) for n in NAMES}, **kw)


def _same_chunks_everywhere(comm, g):
    sig = g.engine._pool.signature()
    assert all(other == sig for other in comm.allgather(sig)), "ranks hold different chunks"
    return sig


def _check_rows(comm, s, root, versions):
    rows = None
    if comm.Get_rank() == 0:
        rows = [(d, w.step, w.path, w.offset, w.nbytes) for _, d, w in s.catalog.writes(s.run_id)]
    rows = comm.bcast(rows)
    assert sorted((d, st) for d, st, _, _, _ in rows) == sorted((n, st) for n in NAMES for st in versions)
    spans = sorted((p, o, o + nb) for _, _, p, o, nb in rows)
    for (p1, _, end), (p2, start, _) in zip(spans, spans[1:]):
        assert p1 != p2 or end <= start  # no two rows share bytes
    for name, step, path, offset, nbytes in rows:
        on_disk = np.fromfile(root / path, dtype="<f8", count=N, offset=offset)
        np.testing.assert_array_equal(on_disk, _values(name, step, versions[step]))


def test_dumps_the_chunks_hold_make_no_broadcast(comm, mpi_tmp, broadcasts):
    with sdm.open("placed", root=mpi_tmp, catalog=f"sqlite:///{mpi_tmp}/cat.db") as s:
        g = s.make_group("g", NAMES, dtype="<f8", shape=(N,), level=3, view=sdm.Block(grid=(comm.Get_size(),)))
        counts = []
        for step in range(20):  # the first chunk holds 8 dumps, the next 16
            before = broadcasts["n"]
            _dump(g, comm, step)
            counts.append(broadcasts["n"] - before)
            _same_chunks_everywhere(comm, g)
        assert counts[0] == 2 and counts[8] == 2  # a new chunk: rank 0 reserves and broadcasts, then the commit
        assert counts[1:8] == [1] * 7 and counts[9:20] == [1] * 11, counts  # the commit alone
        before = broadcasts["n"]
        _dump(g, comm, 3, version=1, overwrite=True)  # an overwrite: rank 0 looked up the version it replaces
        assert broadcasts["n"] - before == 2
        _same_chunks_everywhere(comm, g)
        before = broadcasts["n"]
        _dump(g, comm, 20)
        assert broadcasts["n"] - before == 1
        root = mpi_tmp
        _check_rows(comm, s, root, {st: (1 if st == 3 else 0) for st in range(21)})
    with sdm.open("placed", "a", root=mpi_tmp, catalog=f"sqlite:///{mpi_tmp}/cat.db", run="latest") as s:
        g = s.group("g")
        g.data_view(sdm.Block(grid=(comm.Get_size(),)))
        before = broadcasts["n"]
        _dump(g, comm, 21)  # mode "a": rank 0 looks up every step, and places it
        _dump(g, comm, 22)
        assert broadcasts["n"] - before == 4
        _same_chunks_everywhere(comm, g)
        versions = {st: (1 if st == 3 else 0) for st in range(23)}
        _check_rows(comm, s, root, versions)


def test_a_map_that_leaves_rows_unwritten_is_placed_by_rank_0(comm, mpi_tmp, broadcasts):
    size, rank = comm.Get_size(), comm.Get_rank()
    rows = np.arange(rank, N - 2, size)  # the last two rows belong to nobody
    with sdm.open("placed", root=mpi_tmp, catalog=f"sqlite:///{mpi_tmp}/cat.db") as s:
        g = s.make_group("g", ["m"], dtype="<f8", shape=(N,), level=3, view=sdm.MapArray(rows, coverage=False))
        for step in range(3):
            before = broadcasts["n"]
            g.write("m", step, _values("p", step)[rows])
            assert broadcasts["n"] - before == 2  # the files are extended to the rows nobody writes first
            _same_chunks_everywhere(comm, g)
        path = comm.bcast([(w.path, w.offset) for _, _, w in s.catalog.writes(s.run_id)] if rank == 0 else None)
    for step, (rel, offset) in enumerate(path):
        on_disk = np.fromfile(mpi_tmp / rel, dtype="<f8", count=N, offset=offset)
        want = _values("p", step).copy()
        want[N - 2:] = 0.0  # never written: zeros
        np.testing.assert_array_equal(on_disk, want)
