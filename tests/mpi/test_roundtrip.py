"""Write then read every distribution, both storage orders, every organization level.

The file bytes are compared with a global array built with numpy, read back with
numpy.memmap at the offsets the catalog records (not through SDM).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import sdm
from mpi4py import MPI
from sdm.layout import default_grid

from _reference import block_indices, cyclic_indices, global_array, local_from_global

SHAPE = (7, 5, 3)  # uneven for every rank count 2..4


def _grid(size, ndim=3):
    return tuple(MPI.Compute_dims(size, [0] * ndim))


def _views(size, rank, shape):
    """(name, distribution, independently computed indices, ghost width)."""
    g = _grid(size)
    row = (size, 1, 1)
    # explicit subarray boxes along dim 0, uneven, the last rank empty when size >= 3
    cuts = np.linspace(0, shape[0], size + (0 if size < 3 else 0) + 1).astype(int) if size < 3 else np.array(
        [0] + [min(shape[0], 3 * (i + 1)) for i in range(size - 1)] + [shape[0]]
    )
    cuts = np.maximum.accumulate(cuts)
    if size >= 3:
        cuts[-2] = shape[0]  # rank size-2 takes the rest, the last rank owns nothing
    start, count = (int(cuts[rank]), 0, 0), (int(cuts[rank + 1] - cuts[rank]), shape[1], shape[2])
    sub_idx = [np.arange(start[0], start[0] + count[0]), np.arange(shape[1]), np.arange(shape[2])]
    return [
        ("block", sdm.Block(), block_indices(shape, g, rank), 0),
        ("block-row", sdm.Block(grid=row), block_indices(shape, row, rank), 0),
        ("block-ghosts", sdm.Block(ghosts=1), block_indices(shape, g, rank), 1),
        ("cyclic", sdm.Cyclic(), cyclic_indices(shape, g, rank), 0),
        ("block-cyclic", sdm.BlockCyclic(blocks=2), cyclic_indices(shape, g, rank, 2), 0),
        ("subarray-ghosts", sdm.Subarray(start, count, ghosts=1), sub_idx, 1),
    ]


VIEW_NAMES = ["block", "block-row", "block-ghosts", "cyclic", "block-cyclic", "subarray-ghosts"]


def _auto_choice(reason: str) -> str:
    """The method an ``auto`` reason names: ``auto: M ...`` or ``auto (trial, ...): trying M of ...``."""
    match = re.match(r"auto: (\w+) |auto \(trial, access \d+ of \d+\): trying (\w+) of ", reason)
    assert match, reason
    method = match.group(1) or match.group(2)
    assert method in ("posix", "list", "datatype", "sieving", "collective", "servers", "exchange"), reason
    return method


def _file_bytes(root: Path, write, shape, dtype, order):
    return np.memmap(root / write.path, dtype=dtype, mode="r", offset=write.offset, shape=shape, order=order)


@pytest.mark.parametrize("level", [1, 2, 3])
@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("view_name", VIEW_NAMES)
def test_write_read_bytes_on_disk(comm, mpi_tmp, view_name, order, level):
    rank, size = comm.Get_rank(), comm.Get_size()
    name, view, idx, ghosts = next(v for v in _views(size, rank, SHAPE) if v[0] == view_name)
    G = {d: global_array(SHAPE, "f8", order, seed=i) for i, d in enumerate(("u", "v"))}
    url = f"sqlite:///{mpi_tmp}/cat.db"
    with sdm.open("rt", root=mpi_tmp, catalog=url) as s:
        g = s.make_group("fields", ["u", "v"], dtype="f8", shape=SHAPE, order=order, level=level, view=view)
        for step in (0, 3):
            for d in ("u", "v"):
                local, inner = local_from_global(G[d] + step, idx, ghosts, order)
                assert g.local_shape(d) == local.shape
                g.write(d, step, local)
        for step in (0, 3):
            for d in ("u", "v"):
                back = g.read(d, step, verify=True)
                expect, inner = local_from_global(G[d] + step, idx, ghosts, order)
                np.testing.assert_array_equal(back[inner], expect[inner])
        run_id = s.run_id
    comm.Barrier()
    if rank == 0:
        cat = sdm.Catalog(url)
        writes = cat.writes(run_id)
        assert len(writes) == 4
        for _, d, w in writes:
            np.testing.assert_array_equal(_file_bytes(Path(mpi_tmp), w, SHAPE, "f8", order), G[d] + w.step)
            assert w.nbytes == G[d].nbytes and w.nprocs == size
            assert w.method == _auto_choice(w.reason)  # what auto chose depends on the model and trials
        on_disk = sorted(p.name for p in Path(mpi_tmp).rglob("*.sdm"))
        expected_files = {1: 4, 2: 2, 3: 1}[level]
        assert len(on_disk) == expected_files == len(cat.files(run_id))
        cat.close()


@pytest.mark.parametrize("writer, reader", [("block", "cyclic"), ("cyclic", "block-ghosts"), ("block-cyclic", "subarray-ghosts"), ("subarray-ghosts", "block-row")])
def test_read_with_another_distribution(comm, mpi_tmp, writer, reader):
    rank, size = comm.Get_rank(), comm.Get_size()
    views = {v[0]: v for v in _views(size, rank, SHAPE)}
    G = global_array(SHAPE, "<i8", "C", seed=11)
    url = f"sqlite:///{mpi_tmp}/cat.db"
    _, wview, widx, wg = views[writer]
    with sdm.open("xd", root=mpi_tmp, catalog=url, attributes={"case": writer}) as s:
        g = s.make_group("g", ["a"], dtype="<i8", shape=SHAPE, view=wview)
        g.write("a", 5, local_from_global(G, widx, wg)[0])
    _, rview, ridx, rg = views[reader]
    # a new session that knows only the application name and attributes
    with sdm.open("xd", "r", catalog=url, attributes={"case": writer}) as s:
        g = s.group("g")
        assert g.steps("a") == [5]
        g.data_view(rview)
        back = g.read("a", 5, verify=True)
        expect, inner = local_from_global(G, ridx, rg)
        np.testing.assert_array_equal(back[inner], expect[inner])


def test_read_on_fewer_ranks_than_written(comm, mpi_tmp):
    """Written by all ranks, read by a sub-communicator of rank 0 alone."""
    G = global_array(SHAPE, "f4", "C", seed=3)
    url = f"sqlite:///{mpi_tmp}/cat.db"
    rank, size = comm.Get_rank(), comm.Get_size()
    with sdm.open("few", root=mpi_tmp, catalog=url) as s:
        g = s.make_group("g", ["a"], dtype="f4", shape=SHAPE, view=sdm.Cyclic())
        g.write("a", 0, local_from_global(G, cyclic_indices(SHAPE, _grid(size), rank))[0])
        run_id = s.run_id
    solo = comm.Split(0 if rank == 0 else MPI.UNDEFINED, rank)
    if rank == 0:
        with sdm.open("few", "r", comm=solo, catalog=url, run=run_id) as s:
            np.testing.assert_array_equal(s.group("g").read("a", 0), G)
        solo.Free()
    comm.Barrier()


def test_ghost_cells_untouched_by_read(comm, mpi_tmp):
    rank, size = comm.Get_rank(), comm.Get_size()
    G = global_array(SHAPE, "f8", "C", seed=5)
    idx = block_indices(SHAPE, _grid(size), rank)
    with sdm.open("gh", root=mpi_tmp, catalog=f"sqlite:///{mpi_tmp}/c.db") as s:
        g = s.make_group("g", ["a"], dtype="f8", shape=SHAPE, view=sdm.Block(ghosts=2))
        local, inner = local_from_global(G, idx, 2)
        g.write("a", 0, local)
        out = np.full(local.shape, 99.0)
        g.read("a", 0, out=out)
        mask = np.ones(local.shape, bool)
        mask[inner] = False
        assert (out[mask] == 99.0).all()
        np.testing.assert_array_equal(out[inner], local[inner])


def test_overwrite_writes_a_new_version_in_fresh_space(comm, mpi_tmp):
    rank, size = comm.Get_rank(), comm.Get_size()
    url = f"sqlite:///{mpi_tmp}/c.db"
    idx = block_indices(SHAPE, _grid(size), rank)
    A, B = global_array(SHAPE, "f8", seed=1), global_array(SHAPE, "f8", seed=2)
    with sdm.open("ow", root=mpi_tmp, catalog=url) as s:
        g = s.make_group("g", ["a", "b"], dtype="f8", shape=SHAPE, level=3)
        g.write("a", 0, local_from_global(A, idx)[0])
        g.write("b", 0, local_from_global(A, idx)[0])
        g.write("a", 0, local_from_global(B, idx)[0], overwrite=True)
        np.testing.assert_array_equal(g.read("a", 0, verify=True), local_from_global(B, idx)[0])
        run_id = s.run_id
    if rank == 0:
        cat = sdm.Catalog(url)
        ws = {d: w for _, d, w in cat.writes(run_id)}
        assert ws["a"].offset == 2 * A.nbytes and ws["b"].offset == A.nbytes  # appended: a's first bytes kept
        assert ws["a"].version == 2
        np.testing.assert_array_equal(_file_bytes(Path(mpi_tmp), ws["a"], SHAPE, "f8", "C"), B)
        np.testing.assert_array_equal(_file_bytes(Path(mpi_tmp), ws["b"], SHAPE, "f8", "C"), A)
        old = np.fromfile(Path(mpi_tmp) / ws["a"].path, dtype="f8", count=A.size).reshape(SHAPE)
        np.testing.assert_array_equal(old, A)  # the replaced version was never written over
        cat.close()


def test_mixed_dtypes_and_shapes_in_one_group(comm, mpi_tmp):
    rank, size = comm.Get_rank(), comm.Get_size()
    url = f"sqlite:///{mpi_tmp}/c.db"
    specs = {"q": ((9, 4, 3, 5), "f8"), "flag": ((9, 4, 3), "u1"), "c": ((9, 4, 3), "c16")}
    with sdm.open("mix", root=mpi_tmp, catalog=url) as s:
        g = s.make_group("m", [sdm.Dataset(n, shape=sh, dtype=dt) for n, (sh, dt) in specs.items()], level=3)
        refs = {}
        for n, (sh, dt) in specs.items():
            G = (np.arange(np.prod(sh)) % 251).astype(dt).reshape(sh)
            if dt == "c16":
                G = G + 1j * G[::-1].reshape(sh)
            refs[n] = G
            idx = block_indices(sh, default_grid(size, len(sh)), rank)
            g.write(n, 0, local_from_global(G, idx)[0])
            np.testing.assert_array_equal(g.read(n, 0, verify=True), local_from_global(G, idx)[0])
        run_id = s.run_id
    if rank == 0:
        cat = sdm.Catalog(url)
        for _, d, w in cat.writes(run_id):
            sh, dt = specs[d]
            np.testing.assert_array_equal(_file_bytes(Path(mpi_tmp), w, sh, dt, "C"), refs[d])
        cat.close()


def test_more_ranks_than_elements(comm, mpi_tmp):
    """Ranks with zero-size pieces take part in every collective call."""
    rank, size = comm.Get_rank(), comm.Get_size()
    shape = (2,)
    G = np.array([3.5, -1.0])
    with sdm.open("tiny", root=mpi_tmp, catalog=f"sqlite:///{mpi_tmp}/c.db") as s:
        g = s.make_group("g", ["a"], dtype="f8", shape=shape, level=2)
        idx = block_indices(shape, (size,), rank)
        local = G[idx[0]]
        g.write("a", 0, local)
        g.write("a", 1, local * 2)
        np.testing.assert_array_equal(g.read("a", 1), local * 2)


def test_writes_without_checksum(comm, mpi_tmp):
    """checksum=False records no sum; the bytes are the same and verified reads still work."""
    rank, size = comm.Get_rank(), comm.Get_size()
    url = f"sqlite:///{mpi_tmp}/c.db"
    G = global_array(SHAPE, "f8", seed=9)
    idx = block_indices(SHAPE, _grid(size), rank)
    with sdm.open("nock", root=mpi_tmp, catalog=url, checksum=False) as s:
        g = s.make_group("g", ["a"], dtype="f8", shape=SHAPE, level=2)
        g.write("a", 0, local_from_global(G, idx)[0])
        np.testing.assert_array_equal(g.read("a", 0, verify=True), local_from_global(G, idx)[0])
        run_id = s.run_id
    if rank == 0:
        cat = sdm.Catalog(url)
        ((_, _, w),) = cat.writes(run_id)
        assert (w.checksum, w.checksum_algo) == ("", "none")
        np.testing.assert_array_equal(_file_bytes(Path(mpi_tmp), w, SHAPE, "f8", "C"), G)
        cat.close()


def test_method_and_reason_recorded(comm, mpi_tmp):
    url = f"sqlite:///{mpi_tmp}/c.db"
    with sdm.open("why", root=mpi_tmp, catalog=url) as s:
        g = s.make_group("g", ["a", "b"], dtype="f8", shape=SHAPE)
        g.write("a", 0, np.zeros(g.local_shape("a")))
        g.write("b", 0, np.zeros(g.local_shape("b")), method="collective")
        run_id = s.run_id
    if comm.Get_rank() == 0:
        cat = sdm.Catalog(url)
        ws = {d: w for _, d, w in cat.writes(run_id)}
        assert ws["a"].method == _auto_choice(ws["a"].reason)
        assert ws["b"].reason == "requested: collective"
        cat.close()


@pytest.mark.parametrize("level", [1, 2, 3])
def test_write_step_several_datasets(comm, mpi_tmp, level):
    rank, size = comm.Get_rank(), comm.Get_size()
    url = f"sqlite:///{mpi_tmp}/c.db"
    idx = block_indices(SHAPE, _grid(size), rank)
    G = {d: global_array(SHAPE, "f8", seed=i) for i, d in enumerate("uvw")}
    with sdm.open("dump", root=mpi_tmp, catalog=url) as s:
        g = s.make_group("g", list("uvw"), dtype="f8", shape=SHAPE, level=level)
        for step in (0, 5):
            g.write_step(step, {d: local_from_global(G[d] + step, idx)[0] for d in "uvw"})
        for d in "uvw":
            np.testing.assert_array_equal(g.read(d, 5, verify=True), local_from_global(G[d] + 5, idx)[0])
        run_id = s.run_id
    if rank == 0:
        cat = sdm.Catalog(url)
        writes = cat.writes(run_id)
        assert len(writes) == 6
        for _, d, w in writes:
            np.testing.assert_array_equal(_file_bytes(Path(mpi_tmp), w, SHAPE, "f8", "C"), G[d] + w.step)
        if level == 3:  # appended in the order given, step after step
            assert [(d, w.step, w.offset) for _, d, w in writes] == [
                (d, st, (i + 3 * k) * G["u"].nbytes) for k, st in enumerate((0, 5)) for i, d in enumerate("uvw")]
        cat.close()


def test_write_step_is_all_or_nothing(comm, mpi_tmp):
    rank, size = comm.Get_rank(), comm.Get_size()
    url = f"sqlite:///{mpi_tmp}/c.db"
    from _reference import catalog_counts

    with sdm.open("dump", root=mpi_tmp, catalog=url) as s:
        g = s.make_group("g", ["u", "v"], dtype="f8", shape=SHAPE)
        good = np.zeros(g.local_shape("u"))
        bad = good.astype("S8") if rank == size - 1 else good  # a dtype SDM does not convert to float64
        before = catalog_counts(comm, url)
        with pytest.raises(sdm.LocalArrayError, match="dataset 'v' stores float64"):
            g.write_step(0, {"u": good, "v": bad})
        assert catalog_counts(comm, url) == before and g.steps("u") == []
        g.write("v", 1, good)
        with pytest.raises(sdm.StepExistsError, match="step 1 of dataset 'v'"):
            g.write_step(1, {"u": good, "v": good})
        assert catalog_counts(comm, url) == {**before, "writes": before["writes"] + 1, "files": before["files"] + 1}
        with pytest.raises(sdm.InvalidNameError, match=r"write_step needs distinct dataset names, got \[\]"):
            g.write_step(2, {})
