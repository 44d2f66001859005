"""Map-array (irregular) writes and reads; every byte checked against numpy."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import sdm

from _reference import catalog_counts, global_array

N = 37  # global rows


def _maps(size, rank, n=N, ghost_fraction=0.3, seed=0, empty_last=False):
    """Owners by a shuffled round-robin; each rank's rows shuffled, with ghost copies of others' rows."""
    rng = np.random.default_rng(seed)
    perm = rng.permutation(n)
    owners = np.arange(n) % max(1, size - (1 if empty_last and size > 1 else 0))
    mine = perm[owners == rank]
    others = np.setdiff1d(np.arange(n), mine)
    nghost = min(others.size, int(round(ghost_fraction * max(mine.size, 1))))
    ghosts = rng.choice(others, nghost, replace=False) if nghost else np.array([], dtype=np.int64)
    rows = np.concatenate([mine, ghosts])
    mask = np.concatenate([np.zeros(mine.size, bool), np.ones(ghosts.size, bool)])
    order = rng.permutation(rows.size)  # memory order unrelated to file order
    return rows[order], mask[order]


def _local(G, rows, mask, fill):
    out = np.full((rows.size,) + G.shape[1:], fill, dtype=G.dtype)
    out[~mask] = G[rows[~mask]]
    out[mask] = fill
    return out


@pytest.mark.parametrize("method", ["auto", "collective"])
@pytest.mark.parametrize("rest", [(), (5,)])
@pytest.mark.parametrize("empty_last", [False, True])
@pytest.mark.parametrize("level", [1, 3])
def test_map_write_read_bytes(comm, mpi_tmp, rest, empty_last, level, method):
    rank, size = comm.Get_rank(), comm.Get_size()
    shape = (N, *rest)
    rows, mask = _maps(size, rank, empty_last=empty_last)
    m = sdm.MapArray(rows, ghost=mask)
    G = {d: global_array(shape, "f8", seed=i) for i, d in enumerate("pq")}
    url = f"sqlite:///{mpi_tmp}/c.db"
    with sdm.open("irr", root=mpi_tmp, catalog=url, method=method) as s:
        g = s.make_group("res", ["p", "q"], dtype="f8", shape=shape, level=level, view=m)
        for step in range(3):
            for d in "pq":
                g.write(d, step, _local(G[d] + step, rows, mask, -1.0))
        for step in range(3):
            for d in "pq":
                out = np.full((rows.size, *rest), 99.0)
                g.read(d, step, out=out, verify=True)
                np.testing.assert_array_equal(out[~mask], (G[d] + step)[rows[~mask]])
                assert (out[mask] == 99.0).all()  # ghost rows untouched
        if method == "collective":
            assert len(m.types) == 2  # one file type and one memory type, shared by 12 accesses
        run_id = s.run_id
    if rank == 0:
        cat = sdm.Catalog(url)
        for _, d, w in cat.writes(run_id):
            on_disk = np.memmap(Path(mpi_tmp) / w.path, dtype="f8", mode="r", offset=w.offset, shape=shape)
            np.testing.assert_array_equal(on_disk, G[d] + w.step)
            assert w.method == ("exchange" if method == "auto" else "collective")
        cat.close()


def test_read_through_another_map_and_block(comm, mpi_tmp):
    rank, size = comm.Get_rank(), comm.Get_size()
    G = global_array((N,), "<i4", seed=4)
    rows, mask = _maps(size, rank, seed=1)
    with sdm.open("irr2", root=mpi_tmp, catalog=f"sqlite:///{mpi_tmp}/c.db") as s:
        g = s.make_group("g", ["a"], dtype="<i4", shape=(N,), view=sdm.MapArray(rows, ghost=mask))
        g.write("a", 0, _local(G, rows, mask, 0))
        rows2, mask2 = _maps(size, rank, seed=2, ghost_fraction=0.0)
        g.data_view(sdm.MapArray(rows2, ghost=mask2))
        np.testing.assert_array_equal(g.read("a", 0), G[rows2])
        g.data_view(sdm.Block())
        lo = [len(c) for c in np.array_split(np.arange(N), size)]
        start = sum(lo[:rank])
        np.testing.assert_array_equal(g.read("a", 0), G[start:start + lo[rank]])


@pytest.mark.parametrize("method", ["exchange", "collective"])
def test_gaps_allowed_without_coverage(comm, mpi_tmp, method):
    rank, size = comm.Get_rank(), comm.Get_size()
    rows = np.arange(rank, N, size)[::2]  # every other owned row: gaps
    G = global_array((N,), "f8")
    with sdm.open("gap", root=mpi_tmp, catalog=f"sqlite:///{mpi_tmp}/c.db", method=method) as s:
        g = s.make_group("g", ["a"], dtype="f8", shape=(N,), view=sdm.MapArray(rows, coverage=False))
        g.write("a", 0, G[rows])
        np.testing.assert_array_equal(g.read("a", 0), G[rows])
        g.data_view(sdm.Block(grid=(1,)) if size == 1 else sdm.MapArray(np.arange(N) if rank == 0 else [], coverage=False))
        whole = g.read("a", 0)
        if rank == 0:  # unowned rows read back as zeros
            owned = np.concatenate([np.arange(r, N, size)[::2] for r in range(size)])
            expect = np.zeros(N)
            expect[owned] = G[owned]
            np.testing.assert_array_equal(whole, expect)
        # overwrite through the gappy map: the unowned rows keep their earlier bytes
        full = sdm.Block()
        g.data_view(full)
        lo = np.array_split(np.arange(N), size)[rank]
        g.write("a", 1, (G + 100)[lo])
        g.data_view(sdm.MapArray(rows, coverage=False))
        g.write("a", 1, (G + 200)[rows], overwrite=True)
        g.data_view(full)
        got = np.concatenate(comm.allgather(g.read("a", 1)))
        owned = np.concatenate([np.arange(r, N, size)[::2] for r in range(size)])
        expect = G + 100
        expect[owned] = (G + 200)[owned]
        np.testing.assert_array_equal(got, expect)




def _same_everywhere(comm, exc_info):
    seen = comm.allgather((type(exc_info.value).__name__, str(exc_info.value)))
    assert len(set(seen)) == 1, seen


@pytest.mark.parametrize("case, match", [
    ("duplicate", r"global rows owned by more than one rank: \[0\]|owns global rows more than once: \[0\]"),
    ("range", r"map entries out of range \[0, 37\) on rank \d+: local row 0 -> 37 \(1 in all\)"),
    ("uncovered", r"global rows owned by no rank: \[36\] \(1 rows in \[\d+, 37\)\); cover every row or pass coverage=False"),
])
def test_bad_maps_rejected_before_any_byte(comm, mpi_tmp, case, match):
    rank, size = comm.Get_rank(), comm.Get_size()
    url = f"sqlite:///{mpi_tmp}/c.db"
    rows = np.arange(rank, N, size)
    if case == "duplicate" and rank == size - 1:
        rows = np.concatenate([rows, [0]]) if 0 not in rows else np.concatenate([rows, [0]])
    if case == "range" and rank == size - 1:
        rows = np.concatenate([[N], rows])
    if case == "uncovered":
        rows = rows[rows != N - 1]
    with sdm.open("bad", root=mpi_tmp, catalog=url) as s:
        g = s.make_group("g", ["a"], dtype="f8", shape=(N,))
        before = catalog_counts(comm, url)
        with pytest.raises(sdm.DistributionError, match=match) as info:
            g.data_view(sdm.MapArray(rows))
        _same_everywhere(comm, info)
        assert catalog_counts(comm, url) == before
    assert not list(Path(mpi_tmp).rglob("*.sdm"))


def test_map_needs_c_order_for_components(comm, mpi_tmp):
    with sdm.open("ford", root=mpi_tmp, catalog=f"sqlite:///{mpi_tmp}/c.db") as s:
        g = s.make_group("g", ["a"], dtype="f8", shape=(N, 3), order="F")
        with pytest.raises(sdm.DistributionError, match="map-array views need C order"):
            g.data_view(sdm.MapArray(np.arange(comm.Get_rank(), N, comm.Get_size())))
