"""Pieces of every distribution, checked against first-principles numpy partitions."""

from __future__ import annotations

import numpy as np
import pytest
import sdm
from sdm.layout import check_tiling, distribution_from_json


@pytest.mark.parametrize("shape, grid", [((7, 5, 3), (2, 2, 1)), ((10,), (4,)), ((3, 8), (3, 1)), ((2, 2), (4, 1))])
def test_block_pieces_tile_the_array(shape, grid):
    owner = np.full(shape, -1)
    nprocs = int(np.prod(grid))
    for rank in range(nprocs):
        p = sdm.Block(grid=grid).piece(shape, nprocs, rank)
        sel = np.ix_(*p.indices)
        assert (owner[sel] == -1).all()
        owner[sel] = rank
        # balanced: sizes along a dim differ by at most one
        for n, g, c in zip(shape, grid, p.counts):
            assert c in (n // g, n // g + 1)
    assert (owner >= 0).all()


@pytest.mark.parametrize("blocks", [1, 2, 3])
def test_block_cyclic_round_robin(blocks):
    shape, grid = (11, 7), (2, 3)
    owner = np.full(shape, -1)
    for rank in range(6):
        p = sdm.BlockCyclic(grid=grid, blocks=blocks).piece(shape, 6, rank)
        owner[np.ix_(*p.indices)] = rank
        r0, r1 = divmod(rank, 3)
        assert all((p.indices[0] // blocks) % 2 == r0) and all((p.indices[1] // blocks) % 3 == r1)
    assert (owner >= 0).all()


def test_ghost_memory_shape_and_interior():
    p = sdm.Block(grid=(2, 1), ghosts=[(1, 2), 3]).piece((6, 4), 2, 1)
    assert p.counts == (3, 4) and p.ghosts == ((1, 2), (3, 3))
    assert p.memory_shape == (6, 10)
    assert p.interior == (slice(1, 4), slice(3, 7))


def test_grid_errors():
    with pytest.raises(sdm.DistributionError, match=r"process grid \(2, 2\) has 4 cells but the communicator has 3 ranks"):
        sdm.Block(grid=(2, 2)).piece((4, 4), 3, 0)
    with pytest.raises(sdm.DistributionError, match=r"process grid \(3,\) has 1 dimensions but the array shape \(4, 4\) has 2"):
        sdm.Block(grid=(3,)).piece((4, 4), 3, 0)
    with pytest.raises(sdm.DistributionError, match=r"block sizes \(2, 2, 2\) must be 2 integers >= 1"):
        sdm.BlockCyclic(blocks=(2, 2, 2)).piece((4, 4), 1, 0)
    # bad argument values are refused when the view is built
    with pytest.raises(sdm.InvalidArgumentError, match=r"block size must be an integer >= 1"):
        sdm.BlockCyclic(blocks=0)
    with pytest.raises(sdm.InvalidArgumentError, match=r"ghosts must be an integer >= 0"):
        sdm.Block(ghosts=-1)
    with pytest.raises(sdm.InvalidArgumentError, match=r"process grid must be a sequence of integers"):
        sdm.Block(grid="22")
    with pytest.raises(sdm.DistributionError, match=r"wider than the global extent 4"):
        sdm.Block(ghosts=10**6).piece((4,), 1, 0)


def test_subarray_outside_the_array():
    with pytest.raises(sdm.DistributionError, match=r"leaves the global shape \(4, 4\) in dimension 1"):
        sdm.Subarray((0, 2), (4, 3)).piece((4, 4), 1, 0)


def test_tiling_accepts_exact_cover_with_empty_pieces():
    check_tiling((4, 3), [((0, 0), (2, 3)), ((2, 0), (2, 3)), ((4, 0), (0, 3))])


def test_tiling_reports_overlap_and_gap():
    with pytest.raises(sdm.DistributionError, match=r"the pieces of ranks 0 and 1 overlap \(start \(0, 0\) count \(3, 3\)"):
        check_tiling((4, 3), [((0, 0), (3, 3)), ((2, 0), (2, 3))])
    with pytest.raises(sdm.DistributionError, match=r"cover 9 of the 12 elements of shape \(4, 3\); 3 elements have no owner"):
        check_tiling((4, 3), [((0, 0), (3, 3)), ((3, 0), (0, 3))])


@pytest.mark.parametrize("dist", [sdm.Block(), sdm.Block(grid=(2, 1), ghosts=1), sdm.Cyclic(grid=(1, 2)), sdm.BlockCyclic(blocks=[2, 3])])
def test_distribution_json_round_trip(dist):
    assert distribution_from_json(dist.to_json()) == dist


def test_subarray_is_not_rebuilt_from_catalog():
    with pytest.raises(sdm.DistributionError, match="a 'subarray' view cannot be rebuilt from the catalog"):
        distribution_from_json(sdm.Subarray((0,), (1,)).to_json())
