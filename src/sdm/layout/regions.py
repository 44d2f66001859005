"""Contiguous file regions of a piece: what decides the cost of naive I/O.

The storage rule behind every optimization in SDM: few large contiguous requests beat
many small ones.  A piece's *regions* are the maximal runs of consecutive bytes it
occupies in the file (global array in storage order).
"""

from __future__ import annotations

import numpy as np

from .distribution import Piece

__all__ = ["count_regions"]


def _runs(indices: np.ndarray) -> int:
    """Number of maximal runs of consecutive integers in a sorted index array."""
    if indices.size == 0:
        return 0
    return int(np.count_nonzero(np.diff(indices) != 1)) + 1


def count_regions(piece: Piece, order: str) -> int:
    """Number of contiguous file regions of a separable *piece* in storage *order*.

    Dimensions are walked from the fastest-varying one; as long as a dimension is
    covered completely, its runs merge with those of the next slower dimension.
    """
    if piece.size == 0:
        return 0
    dims = list(range(len(piece.shape)))
    fastest_first = dims[::-1] if order == "C" else dims
    for k, d in enumerate(fastest_first):
        idx = piece.indices[d]
        full = idx.size == piece.shape[d]  # sorted and complete
        if not full:
            slower = fastest_first[k + 1:]
            return _runs(idx) * int(np.prod([piece.counts[s] for s in slower], dtype=np.int64))
    return 1
