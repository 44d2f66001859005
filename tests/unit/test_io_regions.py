"""Run lists, segment counts and sieve windows against brute force (no MPI I/O)."""

from __future__ import annotations

import numpy as np
import pytest
import sdm
from sdm.io.sieving import conflicts, turns, windows
from sdm.layout.maparray import MapArray
from sdm.layout.regions import count_regions, expand, file_strides, memory_positions, rank_stats, runs


def _brute(piece, order, item, strides):
    """Per-element file and memory offsets in storage order, built independently."""
    fo = np.zeros(piece.counts, dtype=np.int64)
    mo = np.zeros(piece.counts, dtype=np.int64)
    fs = file_strides(piece.shape, order, item)
    for d, (idx, pos) in enumerate(zip(piece.indices, memory_positions(piece))):
        shape = [1] * len(piece.counts)
        shape[d] = -1
        fo = fo + (np.asarray(idx) * fs[d]).reshape(shape)
        mo = mo + (np.asarray(pos) * strides[d]).reshape(shape)
    return fo.ravel(order=order), mo.ravel(order=order)


def _count(starts_break):
    return int(np.count_nonzero(starts_break)) + 1


VIEWS = [sdm.Block(), sdm.Block(ghosts=1), sdm.Cyclic(), sdm.BlockCyclic(blocks=2), sdm.Block(ghosts=(2, 0, 1))]


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("array_order", ["C", "F"])
@pytest.mark.parametrize("view", VIEWS, ids=repr)
@pytest.mark.parametrize("nprocs", [1, 2, 3, 4])
def test_runs_and_counts_match_brute_force(order, array_order, view, nprocs):
    shape, item = (7, 5, 3), 8
    for rank in range(nprocs):
        p = view.piece(shape, nprocs, rank)
        strides = np.empty(p.memory_shape, order=array_order).strides
        st = rank_stats(p, order, item, strides)
        if p.size == 0:
            assert (st.nbytes, st.regions, st.segments) == (0, 0, 0)
            assert runs(p, order, item, strides).count == 0
            continue
        fo, mo = _brute(p, order, item, strides)
        regions = _count(np.diff(fo) != item)
        segments = _count((np.diff(fo) != item) | (np.diff(mo) != item))
        assert (st.regions, st.segments) == (regions, segments) and count_regions(p, order) == regions
        assert (st.lo, st.hi, st.nbytes) == (fo[0], fo[-1] + item, fo.size * item)
        r = runs(p, order, item, strides)
        assert r.count == segments and r.nbytes == st.nbytes
        np.testing.assert_array_equal(expand(r.file, r.length, item) * item, fo)
        np.testing.assert_array_equal(expand(r.memory, r.length, item) * item, mo)
        assert runs(p, order, item, memory=False).count == regions


def test_map_pieces_permute_the_memory_side():
    rng = np.random.default_rng(5)
    for _ in range(50):
        n, comp = int(rng.integers(1, 20)), int(rng.integers(1, 4))
        rows = rng.permutation(n)[: rng.integers(1, n + 1)]
        ghost = rng.random(rows.size) < 0.3
        p = MapArray(rows, ghost, coverage=False).piece((n, comp), 1, 0)
        if p.size == 0:
            continue
        strides = np.empty(p.memory_shape).strides
        fo, mo = _brute(p, "C", 8, strides)
        st = rank_stats(p, "C", 8, strides)
        assert st.segments == _count((np.diff(fo) != 8) | (np.diff(mo) != 8))
        r = runs(p, "C", 8, strides)
        np.testing.assert_array_equal(expand(r.memory, r.length, 8) * 8, mo)


def test_expand_lists_every_word_of_the_runs():
    np.testing.assert_array_equal(expand(np.array([0, 32, 48]), np.array([16, 8, 24]), 8), [0, 1, 4, 6, 7, 8])
    assert expand(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), 8).size == 0


def test_windows_split_at_large_holes_and_at_the_buffer_size():
    start = np.array([0, 16, 32, 1000, 1016], dtype=np.int64)
    length = np.full(5, 8, dtype=np.int64)
    w = windows(start, length, length, buffer=1 << 20, gap=100)
    assert w.start.tolist() == [0, 1000] and w.end.tolist() == [40, 1024] and w.rmw.tolist() == [True, True]
    assert w.first.tolist() == [0, 3, 5]
    w = windows(start, length, length, buffer=20, gap=100)  # a new window every 20 bytes of a stretch
    assert w.start.tolist() == [0, 32, 1000] and w.end.tolist() == [24, 40, 1024]
    full = windows(np.array([0, 8]), np.array([8, 8]), np.array([8, 8]), buffer=64, gap=0)
    assert full.count == 1 and not full.rmw.any()


def test_conflicts_need_a_window_with_holes_overlapping_another_rank():
    a = (np.array([0]), np.array([100]), np.array([True]))  # holes
    b = (np.array([40]), np.array([48]), np.array([False]))  # inside a's window
    c = (np.array([200]), np.array([300]), np.array([True]))  # far away
    d = (np.array([300]), np.array([400]), np.array([False]))  # touches c, no overlap
    m = conflicts([a, b, c, d])
    assert m.tolist() == [[False, True, False, False], [True, False, False, False],
                          [False, False, False, False], [False, False, False, False]]
    assert turns(m).tolist() == [0, 1, 0, 0]
    everyone = np.ones((4, 4), dtype=bool)
    np.fill_diagonal(everyone, False)
    assert turns(everyone).tolist() == [0, 1, 2, 3]


def test_memory_positions_are_kept_per_piece_read_only_and_a_replaced_piece_starts_afresh():
    from dataclasses import replace

    p = sdm.Block(ghosts=1).piece((6, 4), 2, 1)
    first = memory_positions(p)
    again = memory_positions(p)
    assert all(a is b for a, b in zip(first, again))  # computed once per piece
    assert [x.tolist() for x in first] == [[1, 2, 3], [1, 2, 3, 4]]  # ghosts offset the interior
    with pytest.raises(ValueError, match="read-only"):
        first[0][0] = 7
    cut = replace(p, counts=(1, 4), indices=(p.indices[0][:1], p.indices[1]))
    assert cut.cache == {} and [x.tolist() for x in memory_positions(cut)] == [[1], [1, 2, 3, 4]]
    assert [x.tolist() for x in memory_positions(p)] == [[1, 2, 3], [1, 2, 3, 4]]  # untouched by the cut


def test_transfer_runs_are_kept_per_memory_layout():
    from types import SimpleNamespace

    from sdm.io._support import transfer_runs

    p = sdm.Block().piece((8, 6), 2, 0)
    c = np.zeros(p.memory_shape)
    f = np.zeros(p.memory_shape, order="F")
    tc, tf = SimpleNamespace(piece=p, order="C", array=c), SimpleNamespace(piece=p, order="C", array=f)
    assert transfer_runs(tc) is transfer_runs(tc)
    ref = runs(p, "C", 8, f.strides)
    got = transfer_runs(tf)
    assert got is not transfer_runs(tc) and got.length.tolist() == ref.length.tolist()
    assert got.memory.tolist() == ref.memory.tolist() and got.file.tolist() == ref.file.tolist()
    assert transfer_runs(tc).length.tolist() == [4 * 6 * 8]  # rows 0-3 whole: one run for the C array


def test_piece_cached_builds_once_per_key_and_keeps_the_newest_of_a_kind():
    p = sdm.Block().piece((8, 6), 2, 0)
    built = []

    def build(k):
        return lambda: built.append(k) or f"plan {k}"

    assert p.cached(("m", 1), build(1), keep=2) == "plan 1"
    assert p.cached(("m", 1), build(1), keep=2) == "plan 1" and built == [1]  # computed once
    p.cached(("other", 0), build("o"), keep=2)
    p.cached(("m", 2), build(2), keep=2)
    p.cached(("m", 3), build(3), keep=2)  # a third "m": the oldest "m" goes, "other" stays
    assert sorted(k for k in p.cache if k[0] == "m") == [("m", 2), ("m", 3)] and ("other", 0) in p.cache
    assert p.cached(("m", 1), build(1), keep=2) == "plan 1" and built == [1, "o", 2, 3, 1]  # rebuilt
