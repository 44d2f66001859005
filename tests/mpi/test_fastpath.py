"""The write path's fast exchanges, cached file views and background commits.

Bytes are checked against arrays built with numpy alone (``_reference``) and read at the
places the catalog records, through a connection of the test's own.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest
import sdm
from sdm.errors import CatalogError, CollectiveMismatchError, LocalArrayError, SDMError, StepExistsError

from _reference import block_indices, committed_bytes, global_array, local_from_global


def _grid(size, ndim):
    from mpi4py import MPI

    return MPI.Compute_dims(size, ndim)


def _url(root):
    return f"sqlite:///{root}/catalog.db"


def _expected_bytes(G, order="C"):
    return np.asarray(G).tobytes(order=order)


METHODS = ["collective", "datatype", "posix", "auto"]


@pytest.mark.parametrize("method", METHODS)
def test_cached_views_write_the_right_bytes_when_views_change(comm, mpi_tmp, method):
    """Datasets of different shapes and dtypes in one file, views changed between steps."""
    size, rank = comm.Get_size(), comm.Get_rank()
    shapes = {"a": (6, 5, 4), "b": (7, 3)}
    dtypes = {"a": "f4", "b": "i8"}
    expected = {}
    with sdm.open("views", root=mpi_tmp, method=method) as s:
        g = s.make_group("g", [sdm.Dataset("a", shape=shapes["a"], dtype="f4"),
                               sdm.Dataset("b", shape=shapes["b"], dtype="i8")], level=3)
        for step in range(5):
            if step == 2:  # a new view for "a" only: its file view must be set again
                g.data_view(sdm.Block(grid=[size, 1, 1]), ["a"])
            if step == 4:  # and for both: cyclic rows
                g.data_view(sdm.Cyclic(grid=[size, 1, 1]), ["a"])
            arrays = {}
            for name in ("a", "b"):
                G = global_array(shapes[name], dtypes[name], seed=step * 10 + len(name))
                expected[(name, step)] = _expected_bytes(G)
                piece = g.piece(name)
                arrays[name] = np.ascontiguousarray(G[np.ix_(*piece.indices)])
            if step % 2:
                g.write_step(step, arrays)
            else:  # one dataset at a time: consecutive reservations of different sizes
                for name in ("b", "a"):
                    g.write(name, step, arrays[name])
        run_id = s.run_id
        for step in range(5):  # read back through the (cached) views too
            got = g.read("a", step, verify=True)
            G = global_array(shapes["a"], "f4", seed=step * 10 + 1)
            assert np.array_equal(got, G[np.ix_(*g.piece("a").indices)])
    stored = committed_bytes(comm, _url(mpi_tmp), run_id, mpi_tmp)
    assert {k: v for k, v in stored.items()} == expected


def test_ghosted_arrays_and_repeated_layouts(comm, mpi_tmp):
    """Ghost layers (a derived memory type kept by the view) over many steps of one file."""
    size, rank = comm.Get_size(), comm.Get_rank()
    shape = (8, 6, 5)
    grid = _grid(size, 3)
    idx = block_indices(shape, grid, rank)
    expected = {}
    with sdm.open("ghosts", root=mpi_tmp, method="collective") as s:
        g = s.make_group("g", ["u"], dtype="f8", shape=shape, level=2,
                         view=sdm.Block(grid=grid, ghosts=1))
        for step in range(4):
            G = global_array(shape, "f8", seed=step)
            local, _ = local_from_global(G, idx, ghosts=1)
            g.write("u", step, local)
            expected[("u", step)] = _expected_bytes(G)
        run_id = s.run_id
    assert committed_bytes(comm, _url(mpi_tmp), run_id, mpi_tmp) == expected


def test_an_error_on_one_rank_is_the_same_error_on_every_rank(comm, mpi_tmp):
    """A bad local array on the last rank only: the fixed-size exchange's flag brings its message to all."""
    size, rank = comm.Get_size(), comm.Get_rank()
    with sdm.open("errors", root=mpi_tmp) as s:
        g = s.make_group("g", ["x"], dtype="f8", shape=(4 * size,), level=3)
        good = np.arange(4, dtype="f8") + 4 * rank
        g.write("x", 0, good)
        bad = good.astype("S8") if rank == size - 1 else good  # a dtype SDM does not convert to float64
        with pytest.raises(LocalArrayError) as info:
            g.write("x", 1, bad)
        assert "|S8" in str(info.value)
        if size > 1:
            assert f"[rank {size - 1}]" in str(info.value)
        messages = comm.allgather(str(info.value))
        assert all(m == messages[0] for m in messages)
        # different steps on different ranks: the call check, with both calls named
        if size > 1:
            with pytest.raises(CollectiveMismatchError, match="different write calls"):
                g.write("x", 10 + (rank == size - 1), good)
        with pytest.raises(StepExistsError):  # rank 0's plan refuses: the same error everywhere
            g.write("x", 0, good)
        g.write("x", 1, good)  # the session goes on; nothing of the failed calls was committed
        assert g.steps("x") == [0, 1]
        run_id = s.run_id
    stored = committed_bytes(comm, _url(mpi_tmp), run_id, mpi_tmp)
    full = np.arange(4 * size, dtype="f8").tobytes()
    assert stored == {("x", 0): full, ("x", 1): full}


def _refuse_step(root, step):
    """Rank 0: make the catalog's database refuse rows of *step* (a trigger: a real SQLite failure)."""
    con = sqlite3.connect(Path(root) / "catalog.db", timeout=60)
    try:
        con.execute(f"CREATE TRIGGER refuse BEFORE INSERT ON writes WHEN NEW.step = {int(step)} "
                    "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END")
        con.commit()
    finally:
        con.close()


def _local(size, rank, step):
    return (np.arange(4, dtype="f8") + 4 * rank) * (step + 1)


@pytest.mark.parametrize("surface", ["next write", "next read", "close"])
def test_async_commit_failure_surfaces_on_every_rank(comm, mpi_tmp, surface):
    size, rank = comm.Get_size(), comm.Get_rank()
    s = sdm.open("async", root=mpi_tmp, async_commit=True)
    assert s.async_commit
    g = s.make_group("g", ["x"], dtype="f8", shape=(4 * size,), level=3)
    g.write("x", 0, _local(size, rank, 0))
    g.write("x", 1, _local(size, rank, 1))
    if rank == 0:
        s._settle()  # let step 1's commit finish before the trigger exists (a test of the failure only)
        _refuse_step(mpi_tmp, 2)
    comm.Barrier()
    g.write("x", 2, _local(size, rank, 2))  # returns: its commit fails in the background
    errors = []
    try:
        if surface == "next write":
            g.write("x", 3, _local(size, rank, 3))
        elif surface == "next read":
            g.read("x", 0)
        else:
            s.close()
    except SDMError as exc:
        errors.append(exc)
    assert len(errors) == 1 and isinstance(errors[0], CatalogError), errors
    assert "refused by the test" in str(errors[0])
    texts = comm.allgather((type(errors[0]).__name__, str(errors[0])))
    assert all(t == texts[0] for t in texts)
    if surface != "close":
        # the error was reported once; the session still works
        assert np.array_equal(g.read("x", 1), _local(size, rank, 1))
        s.close()
    run_id = s.run_id
    stored = committed_bytes(comm, _url(mpi_tmp), run_id, mpi_tmp)
    assert sorted(stored) == [("x", 0), ("x", 1)]  # the rows committed before stay; the refused one is absent
    for step in (0, 1):
        assert stored[("x", step)] == (np.arange(4 * size, dtype="f8") * (step + 1)).tobytes()
    with sdm.open("async", "r", root=mpi_tmp, run=run_id) as r:
        assert r.group("g").steps("x") == [0, 1]
        assert r.previous_state == "closed"


def test_async_commit_writes_what_a_synchronous_session_writes(comm, mpi_tmp):
    size, rank = comm.Get_size(), comm.Get_rank()
    shape = (5, 4 * size)
    runs = {}
    for flag in (False, True):
        with sdm.open(f"commit{int(flag)}", root=mpi_tmp, async_commit=flag) as s:
            g = s.make_group("g", ["p", "q"], dtype="f4", shape=shape, level=3)
            idx = g.piece("p").indices
            for step in range(3):
                G = global_array(shape, "f4", seed=step)
                g.write_step(step, {"p": np.ascontiguousarray(G[np.ix_(*idx)]),
                                    "q": np.ascontiguousarray((2 * G)[np.ix_(*idx)])})
                # read-after-write in the same session sees the committed rows
                assert np.array_equal(g.read("q", step, verify=True), (2 * G)[np.ix_(*idx)])
            runs[flag] = s.run_id
    got = {flag: committed_bytes(comm, _url(mpi_tmp), rid, mpi_tmp) for flag, rid in runs.items()}
    assert got[True] == got[False]
    assert got[True][("p", 2)] == global_array(shape, "f4", seed=2).tobytes()


def test_async_commit_must_be_a_flag(comm, mpi_tmp):
    with pytest.raises(sdm.errors.InvalidArgumentError, match="async_commit"):
        sdm.open("flag", root=mpi_tmp, async_commit="yes")


def _sum64(raw, itemsize):
    """The legacy sum64-v1 checksum from its definition: sum of word * (2 * position + 1) mod 2**64."""
    size = next(k for k in (8, 4, 2, 1) if itemsize % k == 0)
    words = np.frombuffer(bytes(raw), dtype=np.dtype(f"<u{size}"))
    return sum(int(w) * (2 * p + 1) for p, w in enumerate(words)) % (1 << 64)


def test_a_read_plan_that_does_not_fit_the_fixed_exchange_travels_pickled(comm, mpi_tmp):
    """A row whose algorithm is spelled the early way ("sum64") has no code in the fixed-size
    exchange: the generic exchange carries rank 0's plan, and verification still works."""
    size, rank = comm.Get_size(), comm.Get_rank()
    G = np.arange(4 * size, dtype="f8") * 3
    with sdm.open("legacy", root=mpi_tmp) as s:
        g = s.make_group("g", ["x"], dtype="f8", shape=(4 * size,), level=3)
        g.write("x", 0, G[4 * rank:4 * rank + 4])
        run_id = s.run_id
    if rank == 0:
        con = sqlite3.connect(Path(mpi_tmp) / "catalog.db", timeout=60)
        con.execute("UPDATE writes SET checksum_algo = 'sum64', checksum = ?", (f"{_sum64(G.tobytes(), 8):016x}",))
        con.commit()
        con.close()
    comm.Barrier()
    with sdm.open("legacy", "r", root=mpi_tmp, run=run_id) as r:
        g = r.group("g")
        for _ in range(2):
            assert np.array_equal(g.read("x", 0, verify=True), G[4 * rank:4 * rank + 4])
        if rank == 0:  # the bytes change: the same IntegrityError on every rank, through the same path
            with open(next(Path(mpi_tmp).rglob("g.sdm")), "r+b") as f:
                f.write(np.float64(-1).tobytes())
        comm.Barrier()
        with pytest.raises(sdm.errors.IntegrityError, match="sum64"):
            g.read("x", 0, verify=True)


def test_views_of_different_methods_on_one_file_never_mix(comm, mpi_tmp):
    """Methods that set other views (bytes, lists, sieving) between writes through the same layout."""
    size, rank = comm.Get_size(), comm.Get_rank()
    shape = (5, 3, 2 * size)
    methods = ["collective", "posix", "collective", "list", "datatype", "sieving", "collective", "servers", "datatype"]
    expected = {}
    with sdm.open("mixed", root=mpi_tmp) as s:
        g = s.make_group("g", ["u", "v"], dtype="i4", shape=shape, level=3, view=sdm.Block(grid=[1, 1, size]))
        idx = g.piece("u").indices
        for step, method in enumerate(methods):
            G = global_array(shape, "i4", seed=step)
            g.write_step(step, {"u": np.ascontiguousarray(G[np.ix_(*idx)]),
                                "v": np.ascontiguousarray((G + 1)[np.ix_(*idx)])}, method=method)
            expected[("u", step)], expected[("v", step)] = G.tobytes(), (G + 1).tobytes()
        for step, method in enumerate(reversed(methods)):
            got = g.read("v", step, method=method)
            assert np.array_equal(got, (global_array(shape, "i4", seed=step) + 1)[np.ix_(*idx)])
        run_id = s.run_id
    assert committed_bytes(comm, _url(mpi_tmp), run_id, mpi_tmp) == expected
