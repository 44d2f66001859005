"""Randomized maps and distributions through every I/O method, checked byte for byte with numpy.

Each draw picks a global shape, a dtype and a way to split the rows over the ranks that
gives the exchange method's file blocks every state (complete, partial, empty: rows left
unowned with ``coverage=False``, ranks owning nothing, more ranks than rows), plus
ghost rows and a shuffled memory order; or a box/cyclic distribution with empty pieces.
Every method writes it and reads it back; the file's bytes are compared with a global
array built here with numpy.

The draws come from one seed, the same on every rank: ``$SDM_TEST_SEED`` when set, else a
fresh one from rank 0. It is printed with every failure; rerun with
``SDM_TEST_SEED=<seed> mpiexec -n <ranks> python -m pytest tests/mpi/test_random_io.py``.
``$SDM_TEST_DRAWS`` sets the number of draws of each kind (default 4).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import sdm
from mpi4py import MPI

from _reference import committed_bytes

METHODS = ["posix", "list", "datatype", "sieving", "collective", "servers", "exchange"]
DTYPES = [np.dtype("<f8"), np.dtype(">i2"), np.dtype("S3"), np.dtype([("a", "<u4"), ("b", ">f4"), ("c", "S1")])]
DRAWS = int(os.environ.get("SDM_TEST_DRAWS", "4"))


@pytest.fixture(scope="module")
def seed(comm):
    mine = int(os.environ["SDM_TEST_SEED"]) if os.environ.get("SDM_TEST_SEED") else int.from_bytes(os.urandom(4), "little")
    return comm.bcast(mine, root=0)


def _values(dtype, shape, rng):
    """A global array of *dtype* whose elements differ (numpy only)."""
    n = int(np.prod(shape, dtype=np.int64))
    G = np.zeros(shape, dtype=dtype)
    flat = G.reshape(-1)
    codes = rng.permutation(n) + 1
    if dtype.fields is not None:
        flat["a"] = codes
        flat["b"] = -codes * 0.5
        flat["c"] = (codes % 26 + 65).astype("u1").view("S1")
    elif dtype.kind == "S":
        flat[...] = np.char.mod("%03d", codes % 1000).astype("S3")
    else:
        flat[...] = codes.astype(dtype)
    return G


def draw_map(seed, k, size):
    """(n, rest, dtype, owner per global row (-1: nobody), coverage, how) for draw *k* (same on every rank)."""
    rng = np.random.default_rng([seed, 1, k])
    n = int(rng.choice([1, max(1, size - 1), size, size + 1, 2 * size + 1, int(rng.integers(1, 80)), 37]))
    rest = [(), (3,), (2, 2)][int(rng.integers(3))]
    dtype = DTYPES[int(rng.integers(len(DTYPES)))]
    chunk = max(1, -(-n // size))  # the exchange method's file blocks: [r * chunk, (r + 1) * chunk)
    how = ["every-other", "random-gaps", "some-ranks-empty", "complete-blocks", "blocks-half-full", "full"][
        int(rng.integers(6))]
    if how == "every-other":  # the case: a round-robin map with every other row
        owner = np.where(np.arange(n) % 2 == 0, np.arange(n) % size, -1)
    elif how == "random-gaps":
        owner = rng.integers(-1, size, n)
    elif how == "some-ranks-empty":
        active = rng.choice(size, max(1, size // 2), replace=False)
        owner = rng.choice(active, n)
        owner[rng.random(n) < 0.2] = -1
    elif how == "complete-blocks":  # every block all owned or all not, owners shuffled
        blocks = np.arange(n) // chunk
        keep = rng.random(blocks.max() + 1) < 0.6
        owner = np.where(keep[blocks], rng.integers(0, size, n), -1)
    elif how == "blocks-half-full":  # the first half of every block owned
        owner = np.where(np.arange(n) % chunk < max(1, chunk // 2), rng.integers(0, size, n), -1)
    else:
        owner = rng.integers(0, size, n)
    coverage = bool((owner >= 0).all()) and bool(rng.integers(2))
    return n, rest, dtype, owner, coverage, how


def _local_rows(seed, k, rank, owner):
    """This rank's rows (owned and ghost) in a shuffled memory order, and the ghost mask."""
    rng = np.random.default_rng([seed, 2, k, rank])
    mine = np.flatnonzero(owner == rank)
    others = np.flatnonzero((owner != rank) & (owner >= 0))
    ghosts = rng.choice(others, min(others.size, int(rng.integers(0, 4))), replace=False) if others.size else others
    rows = np.concatenate([mine, ghosts]).astype(np.int64)
    mask = np.concatenate([np.zeros(mine.size, bool), np.ones(ghosts.size, bool)])
    order = rng.permutation(rows.size)
    return rows[order], mask[order]


def _files(comm, url, run_id, root):
    """Rank 0: {(dataset, step): bytes of the write}, shared; an error on rank 0 is raised everywhere."""
    return committed_bytes(comm, url, run_id, root)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("k", range(DRAWS))
def test_random_maps_every_method(comm, mpi_tmp, seed, k):
    rank, size = comm.Get_rank(), comm.Get_size()
    n, rest, dtype, owner, coverage, how = draw_map(seed, k, size)
    note = (f"seed {seed} draw {k} on {size} ranks: {n} rows {rest} {dtype}, {how}, coverage={coverage}, "
            f"{int((owner < 0).sum())} unowned")
    print(note)
    rows, mask = _local_rows(seed, k, rank, owner)
    shape = (n, *rest)
    G = _values(dtype, shape, np.random.default_rng([seed, 3, k]))
    E = np.zeros(shape, dtype=dtype)  # the file: unowned rows stay zero
    E[owner >= 0] = G[owner >= 0]
    url = f"sqlite:///{mpi_tmp}/cat.db"
    with sdm.open("random", root=mpi_tmp, catalog=url, sync=False) as s:
        g = s.make_group("g", METHODS, dtype=dtype, shape=shape, level=3, view=sdm.MapArray(rows, mask, coverage=coverage))
        local = np.zeros((rows.size, *rest), dtype=dtype)
        local[~mask] = G[rows[~mask]]
        for m in METHODS:
            g.write(m, 0, local, method=m)
        for m in METHODS:
            out = np.zeros((rows.size, *rest), dtype=dtype)  # ghost rows must stay zero (no value of G is)
            back = g.read(m, 0, out=out, method=m, verify=True)
            assert back[~mask].tobytes() == G[rows[~mask]].tobytes(), f"{m} read wrong rows; {note}"
            assert not back[mask].tobytes().strip(b"\0"), f"{m} wrote into ghost rows; {note}"
        run_id = s.run_id
    files = _files(comm, url, run_id, mpi_tmp)
    for m in METHODS:
        assert files[(m, 0)] == E.tobytes(), f"file of {m} differs from numpy's; {note}"


def draw_boxes(seed, k, size):
    """(shape, view kind, parameters, dtype) for box/cyclic draw *k* with empty pieces likely."""
    rng = np.random.default_rng([seed, 4, k])
    ndim = int(rng.integers(1, 4))
    shape = tuple(int(rng.choice([1, 2, 3, size, size + 1, int(rng.integers(1, 9))])) for _ in range(ndim))
    kind = ["block", "block-cyclic", "subarray"][int(rng.integers(3))]
    dtype = DTYPES[int(rng.integers(len(DTYPES)))]
    order = "CF"[int(rng.integers(2))]
    if kind == "subarray":  # cuts along dimension 0, some boxes empty
        cuts = np.sort(rng.integers(0, shape[0] + 1, size - 1)) if size > 1 else np.zeros(0, np.int64)
        params = np.concatenate([[0], cuts, [shape[0]]]).astype(int).tolist()
    elif kind == "block-cyclic":
        params = [int(rng.integers(1, 4)) for _ in range(ndim)]
    else:
        params = None
    return shape, kind, params, dtype, order


def _box_view(shape, kind, params, size, rank):
    grid = [size] + [1] * (len(shape) - 1)
    if kind == "block":
        view = sdm.Block(grid=grid)
        idx = [np.array_split(np.arange(shape[0]), size)[rank]] + [np.arange(m) for m in shape[1:]]
    elif kind == "block-cyclic":
        b = params[0]
        g0 = np.arange(shape[0])
        view = sdm.BlockCyclic(grid=grid, blocks=params)
        idx = [g0[(g0 // b) % size == rank]] + [np.arange(m) for m in shape[1:]]
    else:
        lo, hi = params[rank], params[rank + 1]
        view = sdm.Subarray((lo,) + (0,) * (len(shape) - 1), (hi - lo, *shape[1:]))
        idx = [np.arange(lo, hi)] + [np.arange(m) for m in shape[1:]]
    return view, idx


@pytest.mark.timeout(120)
@pytest.mark.parametrize("k", range(DRAWS))
def test_random_boxes_every_method(comm, mpi_tmp, seed, k):
    rank, size = comm.Get_rank(), comm.Get_size()
    shape, kind, params, dtype, order = draw_boxes(seed, k, size)
    note = f"seed {seed} box draw {k} on {size} ranks: {shape} {kind} {params} {dtype} order {order}"
    print(note)
    view, idx = _box_view(shape, kind, params, size, rank)
    G = _values(dtype, shape, np.random.default_rng([seed, 5, k]))
    G = np.asarray(G, order=order)
    local = np.asarray(G[np.ix_(*idx)], order=order)
    url = f"sqlite:///{mpi_tmp}/cat.db"
    methods = [m for m in METHODS if m != "exchange"]
    with sdm.open("random", root=mpi_tmp, catalog=url, sync=False) as s:
        g = s.make_group("g", methods, dtype=dtype, shape=shape, order=order, level=3, view=view)
        for m in methods:
            g.write(m, 0, local, method=m)
        for m in methods:
            back = g.read(m, 0, method=m, verify=True)
            assert back.tobytes(order="A") == local.tobytes(order="A"), f"{m} read wrong elements; {note}"
        run_id = s.run_id
    files = _files(comm, url, run_id, mpi_tmp)
    for m in methods:
        assert files[(m, 0)] == G.tobytes(order=order), f"file of {m} differs from numpy's; {note}"
