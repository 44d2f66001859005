"""Selecting a piece's elements along each dimension: numpy index expressions, MPI types.

A separable piece is a product of index sets, one per dimension.  Most of them are
arithmetic progressions (blocks: step 1; cyclic: step P), which numpy can select with
a slice (a strided copy) and MPI with an ``hvector``; the others (block-cyclic, map
rows) need an index array (``np.ix_``) or an ``hindexed_block``.  The I/O methods that
move data themselves (sieving, servers) use these to copy whole boxes at once.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from mpi4py import MPI

from ..layout.regions import storage_dims

__all__ = ["as_index", "selector", "separable_type"]


def _step(a: np.ndarray, increasing: bool = False) -> int | None:
    """The common difference of an index array (None if it has none or it is not positive).

    Arrays known to be strictly *increasing* that span a consecutive range are
    recognized in O(1).
    """
    if a.size < 2:
        return 1
    if increasing and int(a[-1] - a[0]) == a.size - 1:
        return 1
    d = np.diff(a)
    first = int(d[0])
    return first if first > 0 and bool(np.all(d == first)) else None


def as_index(a: np.ndarray, increasing: bool = False) -> slice | np.ndarray:
    """A slice for an increasing arithmetic progression, else the array itself.

    Pass ``increasing=True`` for strictly increasing arrays (file indices, box
    positions): a consecutive range is then recognized without looking at every entry.
    """
    a = np.asarray(a, dtype=np.int64)
    step = _step(a, increasing)
    if a.size and step is not None:
        return slice(int(a[0]), int(a[-1]) + 1, step)
    return a


def selector(indices: Sequence[np.ndarray]) -> tuple:
    """A numpy index tuple selecting the product of *indices* (one array per dimension).

    Slices where possible (the result is then a view); otherwise ``np.ix_`` over all
    dimensions (a copy).
    """
    parts = [as_index(a) for a in indices]
    if all(isinstance(p, slice) for p in parts):
        return tuple(parts)
    return np.ix_(*(np.asarray(a, dtype=np.int64) for a in indices))


def separable_type(
    etype: MPI.Datatype, positions: Sequence[np.ndarray], strides: Sequence[int], order: str
) -> tuple[MPI.Datatype | None, int, list[MPI.Datatype]]:
    """An MPI type selecting the product of *positions* (element index per dimension).

    Elements are enumerated in storage *order* (fastest dimension innermost), whatever
    the buffer's own layout, so a memory side and a file side built with the same
    order match element for element.

    Returns
    -------
    (type, displacement, made)
        The committed type (None when nothing is selected), the byte displacement of
        its first element (pass it as the buffer displacement) and every type created
        (free them when done).
    """
    if any(np.asarray(p).size == 0 for p in positions):
        return None, 0, []
    made: list[MPI.Datatype] = []
    t, disp = etype, 0
    for d in storage_dims(len(positions), order):
        p = np.asarray(positions[d], dtype=np.int64)
        disp += int(p[0]) * int(strides[d])
        step = _step(p)
        if step is not None:
            t = t.Create_hvector(int(p.size), 1, step * int(strides[d]))
        else:
            t = t.Create_hindexed_block(1, ((p - p[0]) * int(strides[d])).tolist())
        made.append(t)
    t.Commit()
    return t, disp, made
