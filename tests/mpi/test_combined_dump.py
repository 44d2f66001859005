"""A dump of several datasets of one file: one file view and one call for all of them.

The datasets differ in dtype, storage order, shape and data view (Block, Cyclic,
BlockCyclic with ghosts, MapArray with rows in a rank's own order, a one-element
dataset whose pieces are empty on every rank but 0).  The bytes on disk are compared
with global arrays built with numpy, at the offsets the catalog records; the catalog
rows say which datasets were combined; the SQL statements rank 0 makes for a dump do
not grow with the number of datasets.
"""

from __future__ import annotations

import numpy as np
import pytest
import sdm
from mpi4py import MPI

from _reference import block_indices, cyclic_indices, global_array, local_from_global

COMBINED = "one file view and one"


def _grid(size, ndim):
    return tuple(MPI.Compute_dims(size, [0] * ndim))


def _specs(size, rank):
    """(dataset, view, the rank's indices built independently, ghosts) of every dataset of the dump."""
    rows = np.arange(11)[rank::size][::-1].copy()  # a rank's map rows, in its own (descending) order
    return [
        (sdm.Dataset("a", shape=(7, 5, 3), dtype="<f8"), sdm.Block(),
         block_indices((7, 5, 3), _grid(size, 3), rank), 0),
        (sdm.Dataset("b", shape=(7, 5, 3), dtype=">i4", order="F"), sdm.Cyclic(),
         cyclic_indices((7, 5, 3), _grid(size, 3), rank), 0),
        (sdm.Dataset("c", shape=(9, 4), dtype="u1"), sdm.BlockCyclic(blocks=2, ghosts=1),
         cyclic_indices((9, 4), _grid(size, 2), rank, 2), 1),
        (sdm.Dataset("d", shape=(11, 3), dtype="<f4"), sdm.MapArray(rows), [rows, np.arange(3)], 0),
        (sdm.Dataset("e", shape=(1,), dtype="<c16"), sdm.Block(), block_indices((1,), (size,), rank), 0),
    ]


def _globals(specs, step):
    return {ds.name: global_array(ds.shape, ds.dtype, ds.order or "C", seed=10 * i + step)
            for i, (ds, _, _, _) in enumerate(specs)}


def _local(G, idx, ghosts, order, view):
    if isinstance(view, sdm.MapArray):
        return np.ascontiguousarray(G[np.ix_(*idx)])
    return local_from_global(G, idx, ghosts, order)[0]


@pytest.mark.parametrize("level", [2, 3])
@pytest.mark.parametrize("method", ["auto", "collective", "datatype", "posix"])
def test_mixed_dump_bytes_on_disk(comm, mpi_tmp, level, method):
    rank, size = comm.Get_rank(), comm.Get_size()
    specs = _specs(size, rank)
    url = f"sqlite:///{mpi_tmp}/cat.db"
    with sdm.open("combined", root=mpi_tmp, catalog=url, method=method) as s:
        g = s.make_group("mix", [ds for ds, _, _, _ in specs], level=level, view=sdm.Block())
        for ds, view, _, _ in specs:
            g.data_view(view, datasets=[ds.name])
        for step in (0, 1, 2):
            G = _globals(specs, step)
            g.write_step(step, {ds.name: _local(G[ds.name], idx, gh, ds.order or "C", view)
                                for ds, view, idx, gh in specs})
        run_id = s.run_id
        # read back through SDM as well, every dataset of every step
        for step in (0, 1, 2):
            G = _globals(specs, step)
            for ds, view, idx, gh in specs:
                out = g.read(ds.name, step)
                want = _local(G[ds.name], idx, gh, ds.order or "C", view)
                inner = tuple(slice(gh, n - gh) for n in want.shape)
                np.testing.assert_array_equal(out[inner], want[inner])
    rows = None
    if rank == 0:
        cat = sdm.Catalog(url)
        rows = [(d, w.step, w.path, w.offset, w.nbytes, w.method, w.reason or "") for _, d, w in cat.writes(run_id)]
        cat.close()
    rows = comm.bcast(rows)
    assert len(rows) == 3 * len(specs)
    spans = sorted((path, off, off + n) for _, _, path, off, n, _, _ in rows)
    for (p1, _, end), (p2, start, _) in zip(spans, spans[1:]):
        assert p1 != p2 or end <= start  # no two datasets share bytes
    for name, step, path, offset, nbytes, used, reason in rows:
        ds = next(d for d, _, _, _ in specs if d.name == name)
        G = _globals(specs, step)[name]
        assert nbytes == G.nbytes
        on_disk = np.memmap(mpi_tmp / path, dtype=ds.dtype, mode="r", offset=offset, shape=ds.shape,
                            order=ds.order or "C")
        np.testing.assert_array_equal(on_disk, G)
        if method == "posix" or level == 2:  # level 2: a file per dataset, nothing to combine
            assert COMBINED not in reason
            assert used == method or method == "auto", reason
        else:  # every dataset of the file moved by one combined call, with the method asked for (auto: collective)
            assert used == ("collective" if method == "auto" else method), reason
            assert COMBINED in reason and f"{len(specs)} datasets of the dump in one file" in reason


def test_level1_dump_is_not_combined(comm, mpi_tmp):
    """At level 1 every dataset has a file of its own: nothing to combine."""
    specs = _specs(comm.Get_size(), comm.Get_rank())[:2]
    url = f"sqlite:///{mpi_tmp}/cat.db"
    with sdm.open("combined", root=mpi_tmp, catalog=url, method="collective") as s:
        g = s.make_group("mix", [ds for ds, _, _, _ in specs], level=1)
        for ds, view, _, _ in specs:
            g.data_view(view, datasets=[ds.name])
        G = _globals(specs, 0)
        g.write_step(0, {ds.name: _local(G[ds.name], idx, gh, ds.order or "C", view) for ds, view, idx, gh in specs})
        if comm.Get_rank() == 0:
            reasons = [w.reason or "" for _, _, w in s.catalog.writes(s.run_id)]
            assert len(reasons) == 2 and not any(COMBINED in r for r in reasons)


def test_sql_per_dump_does_not_grow_with_datasets(comm, mpi_tmp):
    """Rank 0's SQL statements for a dump of 4 datasets and of 64: the same number."""
    from sqlalchemy import event

    counts = {}
    for count in (4, 64):
        names = [f"v{i}" for i in range(count)]
        url = f"sqlite:///{mpi_tmp}/cat{count}.db"
        with sdm.open("combined", root=mpi_tmp / f"r{count}", catalog=url) as s:
            g = s.make_group("many", names, dtype="<f8", shape=(64,), level=3, view=sdm.Block(grid=(comm.Get_size(),)))
            local = np.ones(g.local_shape("v0"))
            g.write_step(0, {n: local for n in names})  # the file exists, the run's first dump
            seen: list[str] = []
            if comm.Get_rank() == 0:
                def count_it(conn, cursor, statement, *args):
                    seen.append(statement)
                event.listen(s.catalog.engine, "before_cursor_execute", count_it)
            for step in (1, 2):
                g.write_step(step, {n: local * step for n in names})
            if comm.Get_rank() == 0:
                event.remove(s.catalog.engine, "before_cursor_execute", count_it)
            counts[count] = len(seen)
            for step in (1, 2):  # and the bytes are right
                np.testing.assert_array_equal(g.read(names[-1], step), local * step)
    if comm.Get_rank() == 0:
        assert counts[64] == counts[4], counts
        assert counts[4] <= 2 * 8, counts  # a handful per dump, whatever the number of datasets
