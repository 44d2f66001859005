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

    With dimensions listed fastest first, ``d`` and the slower rest ``S``:
    a complete ``d`` merges everything into the regions of ``S``; otherwise each of the
    ``|S|`` slices has ``runs(d)`` runs, and when ``d``'s indices hold both ``0`` and
    ``n-1`` the last run of a slice joins the first run of the next slice wherever two
    consecutive slices are adjacent in the file (``|S| - regions(S)`` times).
    """
    if piece.size == 0:
        return 0
    dims = list(range(len(piece.shape)))
    return _regions(piece, dims[::-1] if order == "C" else dims)


def _regions(piece: Piece, fastest_first: list[int]) -> int:
    if not fastest_first:
        return 1
    d, rest = fastest_first[0], fastest_first[1:]
    slower = _regions(piece, rest)
    idx, n = piece.indices[d], piece.shape[d]
    if idx.size == n:  # complete (indices are sorted and distinct)
        return slower
    slices = int(np.prod([piece.counts[s] for s in rest], dtype=np.int64))
    wraps = idx[0] == 0 and idx[-1] == n - 1
    return _runs(idx) * slices - ((slices - slower) if wraps else 0)
