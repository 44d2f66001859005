"""count_regions against a brute-force count of contiguous runs in the file."""

from __future__ import annotations

import numpy as np
import pytest
import sdm
from sdm.layout.regions import count_regions


def _brute(shape, indices, order):
    mask = np.zeros(shape, bool)
    mask[np.ix_(*indices)] = True
    flat = mask.ravel(order=order).astype(np.int8)
    return int(np.count_nonzero(np.diff(np.concatenate([[0], flat])) == 1))


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("dist, nprocs", [
    (sdm.Block(), 4), (sdm.Block(grid=(4, 1, 1)), 4), (sdm.Block(grid=(1, 1, 3)), 3),
    (sdm.Cyclic(), 4), (sdm.BlockCyclic(blocks=2), 2), (sdm.Block(grid=(1, 2, 1)), 2),
])
def test_regions_match_brute_force(order, dist, nprocs):
    shape = (6, 5, 4)
    for rank in range(nprocs):
        p = dist.piece(shape, nprocs, rank)
        assert count_regions(p, order) == _brute(shape, p.indices, order)


def test_empty_piece_has_no_region():
    p = sdm.Block(grid=(4,)).piece((2,), 4, 3)
    assert p.size == 0 and count_regions(p, "C") == 0
