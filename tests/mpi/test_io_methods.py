"""Every I/O method writes and reads every distribution, byte for byte (numpy references).

Files are read back with numpy.memmap at the offsets the catalog records and compared
with global arrays built here with numpy; local arrays come from ``_reference``
(indices computed independently of SDM).  Ranks with nothing to do take part in
every call (zero-size pieces), and ghost cells are never written or read.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import sdm
from mpi4py import MPI
from sdm.io import get_method
from sdm.io.base import make_transfer
from sdm.bench.patterns import Pattern

from _reference import block_indices, cyclic_indices, global_array, local_from_global

METHODS = ["posix", "list", "datatype", "sieving", "collective", "servers", "auto"]
SHAPE = (7, 5, 3)


def _grid(size, ndim=3):
    return tuple(MPI.Compute_dims(size, [0] * ndim))


def _views(size, rank, shape):
    """(distribution, independently computed indices, ghost width) by name."""
    g = _grid(size)
    row = (size, 1, 1)
    # explicit boxes along dim 0: rank r takes rows [2r, 2r+2) up to the end, later ranks nothing
    lo, hi = min(2 * rank, shape[0]), min(2 * rank + 2, shape[0]) if rank < size - 1 else shape[0]
    hi = max(hi, lo)
    box = [np.arange(lo, hi), np.arange(shape[1]), np.arange(shape[2])]
    return {
        "block": (sdm.Block(), block_indices(shape, g, rank), 0),
        "block-ghosts": (sdm.Block(ghosts=1), block_indices(shape, g, rank), 1),
        "cyclic": (sdm.Cyclic(), cyclic_indices(shape, g, rank), 0),
        "block-cyclic": (sdm.BlockCyclic(blocks=2), cyclic_indices(shape, g, rank, 2), 0),
        "subarray-ghosts": (sdm.Subarray((lo, 0, 0), (hi - lo, shape[1], shape[2]), ghosts=1), box, 1),
        "rows": (sdm.Block(grid=row), block_indices(shape, row, rank), 0),
    }


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("view_name", ["block", "block-ghosts", "cyclic", "block-cyclic", "subarray-ghosts", "rows"])
def test_every_method_round_trips_every_view(comm, mpi_tmp, view_name, order):
    rank, size = comm.Get_rank(), comm.Get_size()
    shape = SHAPE if view_name != "rows" else (2, 5, 3)  # rows: ranks 2 and 3 own nothing
    view, idx, ghosts = _views(size, rank, shape)[view_name]
    url = f"sqlite:///{mpi_tmp}/cat.db"
    G = {m: global_array(shape, "f8", order, seed=i) for i, m in enumerate(METHODS)}
    with sdm.open("methods", root=mpi_tmp, catalog=url) as s:
        g = s.make_group("g", METHODS, dtype="f8", shape=shape, order=order, level=3, view=view)
        for m in METHODS:
            local, inner = local_from_global(G[m], idx, ghosts, order)
            g.write(m, 0, local, method=m)
        for m in METHODS:
            expect, inner = local_from_global(G[m], idx, ghosts, order)
            out = np.full(expect.shape, 99.0, order=order)
            g.read(m, 0, out=out, method=m, verify=True)
            np.testing.assert_array_equal(out[inner], expect[inner], err_msg=m)
            ghost = np.ones(out.shape, bool)
            ghost[inner] = False
            assert (out[ghost] == 99.0).all(), f"{m} wrote into ghost cells"
        run_id = s.run_id
    _check_files(comm, url, run_id, Path(mpi_tmp), G, shape, order)


def _check_files(comm, url, run_id, root, expected, shape, order="C"):
    """Rank 0: every recorded write's bytes (numpy.memmap) equal the expected global array."""
    comm.Barrier()
    if comm.Get_rank() != 0:
        return
    cat = sdm.Catalog(url)
    try:
        writes = cat.writes(run_id)
        assert {d for _, d, _ in writes} == set(expected)
        for _, name, w in writes:
            dtype = expected[name].dtype
            got = np.memmap(root / w.path, dtype=dtype, mode="r", offset=w.offset, shape=shape, order=order)
            np.testing.assert_array_equal(got, expected[name], err_msg=name)
            assert w.method == name or (name not in METHODS or name == "auto") and w.method in METHODS
            if name == "auto":
                assert w.reason.startswith(("auto:", "auto (trial"))
    finally:
        cat.close()


@pytest.mark.parametrize("method", ["sieving", "servers", "list", "posix"])
def test_method_parameters_small_buffers_and_one_server(comm, mpi_tmp, method):
    """Tiny buffers split the data into many windows (sieving) or rounds (servers)."""
    rank, size = comm.Get_rank(), comm.Get_size()
    hints = {"sdm_sieve_buffer_size": "48", "sdm_sieve_gap": "0", "sdm_io_servers": "1", "sdm_buffer_size": "64"}
    for view_name in ("cyclic", "block-ghosts", "block-cyclic"):
        view, idx, ghosts = _views(size, rank, SHAPE)[view_name]
        G = global_array(SHAPE, "<i8", "C", seed=4)
        url = f"sqlite:///{mpi_tmp}/{view_name}.db"
        with sdm.open("params", root=mpi_tmp, catalog=url, hints=hints, method=method) as s:
            g = s.make_group("g", ["a"], dtype="<i8", shape=SHAPE, view=view)
            local, inner = local_from_global(G, idx, ghosts)
            g.write("a", 1, local)
            back = g.read("a", 1)
            np.testing.assert_array_equal(back[inner], local[inner])
            run_id = s.run_id
        _check_files(comm, url, run_id, Path(mpi_tmp), {"a": G}, SHAPE)


@pytest.mark.parametrize("buffer, gap", [("4m", "32k"), ("40", "0"), ("100", "8")])
def test_sieving_writes_never_lose_a_neighbours_bytes(comm, mpi_tmp, buffer, gap):
    """Interleaved ranks read-modify-write the same windows; nothing written by another rank is lost.

    Rank r owns one 8-byte element of every record of ``size`` elements, each followed by
    two elements nobody owns (they must keep what the file held before).
    """
    rank, size = comm.Get_rank(), comm.Get_size()
    pattern = Pattern(8, 50, spacing=16)  # shape (50, size, 3): rank r owns [:, r, 0]
    path = Path(mpi_tmp) / "shared.dat"
    if rank == 0:
        np.full(pattern.shape(size), -7.0).tofile(path)
    comm.Barrier()
    piece = pattern.piece(size, rank)
    owner = np.zeros(pattern.shape(size), dtype=bool)
    owner[:, :, 0] = True
    fh = MPI.File.Open(comm, str(path), MPI.MODE_RDWR)
    try:
        for round_ in range(4):
            local = pattern.local(size, rank) + 1000 * round_
            with make_transfer(fh, 0, piece, local, "C", comm, {"sdm_sieve_buffer_size": buffer,
                                                                 "sdm_sieve_gap": gap}) as t:
                get_method("sieving").write(t)
            fh.Sync()
            comm.Barrier()
            if rank == 0:
                got = np.fromfile(path).reshape(pattern.shape(size))
                want = np.arange(1, got.size + 1, dtype=np.float64).reshape(got.shape) + 1000 * round_
                np.testing.assert_array_equal(got[owner], want[owner])
                assert (got[~owner] == -7.0).all()
            comm.Barrier()
    finally:
        fh.Close()


@pytest.mark.parametrize("method", ["sieving", "servers"])
def test_a_failure_on_one_rank_does_not_hang_the_others(comm, mpi_tmp, method):
    """A bad parameter on rank 0 only: rank 0 raises, the others return; nobody waits forever."""
    rank, size = comm.Get_rank(), comm.Get_size()
    path = Path(mpi_tmp) / "f.dat"
    if rank == 0:
        np.zeros(64).tofile(path)
    comm.Barrier()
    view = sdm.Cyclic(grid=(size,))
    piece = view.piece((64,), size, rank)
    local = np.ones(piece.counts)
    bad = {"sdm_sieve_buffer_size": "-1", "sdm_buffer_size": "-1"} if rank == 0 else {}
    fh = MPI.File.Open(comm, str(path), MPI.MODE_RDWR)
    raised = None
    try:
        with make_transfer(fh, 0, piece, local, "C", comm, bad) as t:
            get_method(method).write(t)
    except sdm.SDMError as exc:
        raised = type(exc).__name__
    finally:
        fh.Close()
    outcomes = comm.allgather(raised)
    assert outcomes[0] == "HintError"


def test_bad_method_hints_raise_the_same_error_on_every_rank(comm, mpi_tmp):
    with pytest.raises(sdm.HintError, match="sdm_buffer_size") as info:  # refused when the session opens
        sdm.open("bad", root=mpi_tmp, catalog=f"sqlite:///{mpi_tmp}/c.db", hints={"sdm_buffer_size": "lots"})
    messages = comm.allgather(str(info.value))
    assert len(set(messages)) == 1


@pytest.mark.parametrize("shm", ["automatic", "disable"])
@pytest.mark.parametrize("buffer", ["64", "16m"])
def test_servers_in_shared_memory_and_by_messages_write_the_same_bytes(comm, mpi_tmp, shm, buffer):
    """Both ways of reaching the servers, one round or many, with holes, ghosts and empty ranks.

    Every step writes new values through the same view (the cached plan must not keep
    data), and reads them back into a zeroed array.
    """
    rank, size = comm.Get_rank(), comm.Get_size()
    hints = {"sdm_shm": shm, "sdm_buffer_size": buffer}
    for view_name in ("cyclic", "block-ghosts", "subarray-ghosts", "rows"):
        shape = SHAPE if view_name != "rows" else (2, 5, 3)
        view, idx, ghosts = _views(size, rank, shape)[view_name]
        G = {step: global_array(shape, "<i8", "C", seed=10 + step) for step in (1, 2, 3)}
        url = f"sqlite:///{mpi_tmp}/{view_name}-{shm}-{buffer}.db"
        with sdm.open("shm", root=mpi_tmp, catalog=url, hints=hints, method="servers") as s:
            g = s.make_group("g", ["a"], dtype="<i8", shape=shape, view=view, level=3)
            for step, glob in G.items():
                local, inner = local_from_global(glob, idx, ghosts)
                g.write("a", step, local)
                back = g.read("a", step)
                np.testing.assert_array_equal(back[inner], local[inner])
            run_id = s.run_id
        cat = sdm.Catalog(url, create=False) if rank == 0 else None
        try:
            if rank == 0:
                writes = cat.writes(run_id)
                assert sorted(w.step for _, _, w in writes) == [1, 2, 3]
                for _, _, w in writes:
                    got = np.memmap(Path(mpi_tmp) / w.path, dtype="<i8", mode="r", offset=w.offset, shape=shape)
                    np.testing.assert_array_equal(got, G[w.step])
                    assert w.method == "servers"
        finally:
            if cat is not None:
                cat.close()
        comm.Barrier()


def test_servers_plan_is_cached_on_the_piece_and_the_window_on_the_communicator(comm, mpi_tmp):
    """The second access reuses the plan; the window lives on the communicator and goes with it."""
    from sdm.io import servers

    rank, size = comm.Get_rank(), comm.Get_size()
    dup = comm.Dup()
    pattern = Pattern(8, 40)
    piece = pattern.piece(size, rank)
    path = Path(mpi_tmp) / "plan.dat"
    if rank == 0:
        np.zeros(pattern.shape(size)).tofile(path)
    comm.Barrier()
    fh = MPI.File.Open(dup, str(path), MPI.MODE_RDWR)
    try:
        for k in range(3):
            local = pattern.local(size, rank) + 100 * k
            with make_transfer(fh, 0, piece, local, "C", dup) as t:
                get_method("servers").write(t)
            plans = [key for key in piece.cache if key[0] == "servers"]
            assert len(plans) == 1
        fh.Sync()
        dup.Barrier()
        if rank == 0:
            want = pattern.reference(size) + 200
            np.testing.assert_array_equal(np.fromfile(path).reshape(want.shape), want)
    finally:
        fh.Close()
    window = servers.shared_memory(dup, 1)
    assert window is not None and window.nbytes >= 1  # every rank of an mpiexec run here shares the node
    grown = servers.shared_memory(dup, window.nbytes + 4096)
    assert grown.nbytes == window.nbytes + 4096 and grown is not window
    dup.Free()  # frees the window with it (a hang or an MPI error here would fail the run)
    comm.Barrier()


def test_a_bad_shm_hint_raises_on_every_rank_and_writes_nothing(comm, mpi_tmp):
    url = f"sqlite:///{mpi_tmp}/c.db"
    hints = {"sdm_shm": "sometimes"} if comm.Get_rank() == 0 else {}
    with pytest.raises(sdm.HintError) as info:  # refused when the session opens, before any run exists
        sdm.open("badshm", root=mpi_tmp, catalog=url, hints=hints)
    messages = comm.allgather(str(info.value))
    assert len(set(messages)) == 1 and "sdm_shm='sometimes'" in messages[0]
    assert not (Path(mpi_tmp) / "c.db").exists()
