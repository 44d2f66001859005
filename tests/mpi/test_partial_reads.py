"""Partial reads: random boxes per rank (empty, overlapping, strided, not covering the array) of
datasets written with every distribution and both storage orders, through every read method,
compared with numpy slicing of an independent reference; lazy indexing likewise; ghost layers
of Cyclic and BlockCyclic views.

The draws come from one seed, the same on every rank (``$SDM_TEST_SEED``, else rank 0's).
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import sdm

from _reference import block_indices, cyclic_indices, global_array

METHODS = ["auto", "posix", "list", "datatype", "sieving", "collective"]
SHAPE = (9, 8, 5)


@pytest.fixture(scope="module")
def seed(comm):
    mine = int(os.environ["SDM_TEST_SEED"]) if os.environ.get("SDM_TEST_SEED") else int.from_bytes(os.urandom(4), "little")
    return comm.bcast(mine, root=0)


def _grid(size):
    return [size, 1, 1]


def views(size, rank):
    """(name, distribution, the global indices this rank owns per dimension) of every writer's view."""
    g = _grid(size)
    rows = np.arange(SHAPE[0])
    mine = rows[(rows * 7 + 3) % size == rank]
    return [
        ("block", sdm.Block(grid=g), block_indices(SHAPE, g, rank)),
        ("cyclic", sdm.Cyclic(grid=g), cyclic_indices(SHAPE, g, rank)),
        ("blockcyclic", sdm.BlockCyclic(grid=g, blocks=2), cyclic_indices(SHAPE, g, rank, 2)),
        ("map", sdm.MapArray(mine[::-1].astype(np.int64)), [mine[::-1], np.arange(SHAPE[1]), np.arange(SHAPE[2])]),
    ]


def kept(box):
    """*box* with every int as a one-element slice: numpy's result with every dimension kept."""
    items = list(box)
    if Ellipsis in items:
        at = items.index(Ellipsis)
        items = items[:at] + [slice(None)] * (len(SHAPE) - len(items) + 1) + items[at + 1:]
    return tuple(slice(x % n, x % n + 1) if isinstance(x, int) else x for x, n in zip(items, SHAPE))


def random_box(rng):
    """A box as numpy's basic indexing takes it: ints, slices with a positive step (empty ones too), '...'."""
    items = []
    for n in SHAPE:
        kind = rng.integers(5)
        if kind == 0:
            items.append(int(rng.integers(-n, n)))
        elif kind == 1:
            a = int(rng.integers(0, n + 1))
            items.append(slice(a, a))  # empty
        else:
            a, b = sorted(int(x) for x in rng.integers(-n - 2, n + 3, size=2))
            items.append(slice(a, b, int(rng.integers(1, 4))))
    if rng.integers(4) == 0:
        items = [items[0], Ellipsis]
    return tuple(items)


@pytest.mark.parametrize("order", ["C", "F"])
def test_random_boxes_of_every_distribution_match_numpy(comm, mpi_tmp, seed, order):
    size, rank = comm.Get_size(), comm.Get_rank()
    ref = global_array(SHAPE, "<f8", seed=1)
    with sdm.open("boxes", root=str(mpi_tmp), catalog=f"sqlite:///{mpi_tmp}/c{order}.db") as s:
        names = [sdm.Dataset(v[0], dtype="<f8", order="C" if v[0] == "map" else order)  # maps: C order only
                 for v in views(size, rank)]
        g = s.make_group("g", names, shape=SHAPE, level=3)
        for name, dist, idx in views(size, rank):
            g.data_view(dist, [name])
            local = ref[np.ix_(*idx)]
            g.write(name, 0, np.asfortranarray(local) if order == "F" and name != "map" else local)
        rng = np.random.default_rng([seed, rank, ord(order)])
        wrong = []  # checked after every collective read, so a mismatch on one rank never strands the others
        for name, *_ in views(size, rank):
            for method in METHODS:
                box = random_box(rng)
                got = g.read(name, 0, box=box, method=method)
                want = ref[kept(box)]
                if got.shape != want.shape or not np.array_equal(got, want):
                    wrong.append(("read", name, method, box))
                if not np.array_equal(g[name][(0, *box)], ref[box]):  # lazy indexing: ints drop dimensions
                    wrong.append(("lazy", name, box))
        assert not wrong, (seed, wrong)


def test_ghost_layers_of_cyclic_views(comm, mpi_tmp):
    size, rank = comm.Get_size(), comm.Get_rank()
    ref = global_array(SHAPE, "<i8", seed=4)
    g3 = _grid(size)
    cases = [("cyclic", sdm.Cyclic(grid=g3, ghosts=1), cyclic_indices(SHAPE, g3, rank)),
             ("blockcyclic", sdm.BlockCyclic(grid=g3, blocks=2, ghosts=[(2, 1), 0, (0, 1)]),
              cyclic_indices(SHAPE, g3, rank, 2))]
    with sdm.open("ghosts", root=str(mpi_tmp), catalog=f"sqlite:///{mpi_tmp}/g.db") as s:
        g = s.make_group("g", [c[0] for c in cases], dtype="<i8", shape=SHAPE)
        for name, dist, idx in cases:
            g.data_view(dist, [name])
            lo = [(1, 1)] * 3 if name == "cyclic" else [(2, 1), (0, 0), (0, 1)]
            local = np.full([len(i) + a + b for i, (a, b) in zip(idx, lo)], -7, dtype="<i8")
            inner = tuple(slice(a, a + len(i)) for i, (a, _) in zip(idx, lo))
            local[inner] = ref[np.ix_(*idx)]
            assert g.local_shape(name) == local.shape
            g.write(name, 0, local)  # the ghost layers are not written
            back = np.full(local.shape, -1, dtype="<i8")
            g.read(name, 0, out=back, verify=True)
            assert np.array_equal(back[inner], ref[np.ix_(*idx)])
            outside = np.ones(local.shape, bool)
            outside[inner] = False
            assert (back[outside] == -1).all()  # ghosts left untouched by the read
        g.data_view(sdm.Block(grid=[1, 1, 1]) if size == 1 else sdm.Block(grid=g3))
        for name, *_ in cases:  # the file holds the global array
            whole = g.read(name, 0, box=(...,))
            assert np.array_equal(whole, ref)


def test_bad_boxes_are_refused_alike(comm, mpi_tmp):
    ref = global_array(SHAPE, "<f8")
    with sdm.open("badbox", root=str(mpi_tmp), catalog=f"sqlite:///{mpi_tmp}/b.db") as s:
        g = s.make_group("g", ["T"], dtype="<f8", shape=SHAPE)
        g.data_view(sdm.Block(grid=_grid(comm.Get_size())))
        g.write("T", 0, np.ascontiguousarray(ref[np.ix_(*block_indices(SHAPE, _grid(comm.Get_size()), comm.rank))]))
        suffix = " [rank 0]" if comm.Get_size() > 1 else ""
        for box, message in [
            ((slice(None, None, -1),), "box of dataset 'T' (slice(None, None, -1),): the step of dimension 0 must be "
                                       "> 0, got -1 (read forwards, then reverse the result with numpy)"),
            ((0, 0, 0, 0), "box of dataset 'T' (0, 0, 0, 0) has 4 entries; the array has 3 dimensions (shape (9, 8, 5))"),
            ((9,), "box of dataset 'T' (9,): index 9 is out of range for dimension 0 of extent 9"),
            (([1, 2],), "box of dataset 'T' ([1, 2],): dimension 0 takes an int, a slice or '...', got list [1, 2] "
                        "(fancy indexing: read a box, then index it with numpy)"),
        ]:
            with pytest.raises(sdm.InvalidArgumentError) as err:
                g.read("T", 0, box=box)
            assert str(err.value) == message + suffix
        with pytest.raises(sdm.InvalidArgumentError) as err:
            g.read("T", 0, box=(1,), verify=True)
        assert str(err.value) == ("a box of dataset 'T' cannot be checked against the step's checksum, which covers "
                                  "the whole step; read it with verify=False (or read the whole step with "
                                  "verify=True)" + suffix)
        with pytest.raises(KeyError) as key:
            g["t"]
        assert key.value.args[0] == "group 'g' has no dataset 't'; its datasets are ['T']; did you mean 'T'?"
        assert np.array_equal(g.read("T", 0, box=(2,)), ref[2:3])  # the session goes on


def test_lazy_indexing_on_several_ranks_never_hangs(comm, mpi_tmp):
    """Ranks that select different steps, or one rank's bad index, fail alike on every rank."""
    size, rank = comm.Get_size(), comm.Get_rank()
    ref = global_array(SHAPE, "<f8")
    with sdm.open("lazyranks", root=str(mpi_tmp), catalog=f"sqlite:///{mpi_tmp}/l.db") as s:
        g = s.make_group("g", ["T"], dtype="<f8", shape=SHAPE)
        g.data_view(sdm.Block(grid=_grid(size)))
        local = np.ascontiguousarray(ref[np.ix_(*block_indices(SHAPE, _grid(size), rank))])
        for step in (0, 1):
            g.write("T", step, local)
        T = g["T"]
        np.testing.assert_array_equal(T[:, rank % SHAPE[0], 1:3], np.stack([ref[rank % SHAPE[0], 1:3]] * 2))
        if size == 1:
            return
        with pytest.raises(sdm.CollectiveMismatchError) as err:
            T[rank % 2]  # rank 0 step 0, rank 1 step 1
        assert str(err.value).startswith("indexing dataset 'T' on several ranks reads step by step, collectively: "
                                         "every rank must select the same steps")
        with pytest.raises(sdm.InvalidArgumentError) as bad:
            T[0, 99] if rank == size - 1 else T[0, 1]
        assert str(bad.value) == (f"index of dataset 'T' (0, 99): index 99 is out of range for dimension 1 of "
                                  f"extent 9 [rank {size - 1}]")
        np.testing.assert_array_equal(T[1, 2], ref[2])  # the session goes on
