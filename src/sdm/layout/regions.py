"""Contiguous file regions of a piece: what decides the cost of naive I/O.

The storage rule behind every optimization in SDM: few large contiguous requests beat
many small ones.  A piece's *regions* are the maximal runs of consecutive bytes it
occupies in the file (global array in storage order).  Its *segments* are the maximal
runs that are consecutive both in the file and in the local array (memory): what an
I/O method that never packs data must move with one call each.

Everything here works on the *positions* of a piece, one array per dimension:

* file side: ``piece.indices[d]`` (sorted global indices) times the file stride of
  ``d`` in the dataset's storage order;
* memory side: the local position of each owned index (ghost offset plus ``0..count``
  for boxes, the permuted ``memory_rows`` of map-array pieces) times the local array's
  stride.

Elements are enumerated in storage order (fastest dimension first), which is
increasing file order, so a piece is described by sorted file offsets and the matching
memory offsets.  Counts are computed analytically in ``O(sum of counts)``; the region
lists (:func:`runs`) are built with numpy, one product-and-merge per dimension.
"""

from __future__ import annotations

import math

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .distribution import Piece

__all__ = [
    "count_regions",
    "Runs",
    "RankStats",
    "runs",
    "file_runs",
    "rank_stats",
    "rank_stats_tuple",
    "expand",
    "storage_dims",
    "file_strides",
    "memory_positions",
]


# ----------------------------------------------------------------------- geometry
def storage_dims(ndim: int, order: str) -> list[int]:
    """Dimensions listed fastest first for storage *order* (``"C"`` or ``"F"``)."""
    dims = list(range(ndim))
    return dims[::-1] if order == "C" else dims


def file_strides(shape: Sequence[int], order: str, itemsize: int) -> list[int]:
    """Byte strides of the global array stored in *order* (one per dimension)."""
    strides = [0] * len(shape)
    step = int(itemsize)
    for d in storage_dims(len(shape), order):
        strides[d] = step
        step *= int(shape[d])
    return strides


def memory_positions(piece: Piece) -> list[np.ndarray]:
    """Local index (ghosts included) of each owned element along every dimension (read-only).

    Computed once per piece and kept in its cache: a piece of 2 M elements along one
    dimension would otherwise allocate (and fault in) 16 MiB at every access.
    """
    def build() -> list[np.ndarray]:
        out = []
        for d, (c, (lo, _)) in enumerate(zip(piece.counts, piece.ghosts)):
            if d == 0 and piece.kind == "map":
                pos = np.array(piece.memory_rows, dtype=np.int64)
            else:
                pos = np.arange(lo, lo + c, dtype=np.int64)
            pos.setflags(write=False)
            out.append(pos)
        return out

    return list(piece.cached("memory_positions", build))


def _default_memory_strides(piece: Piece, order: str, itemsize: int) -> list[int]:
    """Strides of a local array of ``piece.memory_shape`` contiguous in *order*."""
    return file_strides(piece.memory_shape, order, itemsize)


# ------------------------------------------------------------------------ counting
def _count_runs(
    piece: Piece, order: str, itemsize: int, mem_strides: Sequence[int] | None, *, file: bool, memory: bool
) -> int:
    """Maximal runs of elements consecutive in the file and/or in memory (analytic).

    With dimensions fastest first, the step from the last element of a slice of the
    faster dimensions to the first element of the next slice (dimension ``j`` advancing
    by one local position) is contiguous in the file when the global index advances
    by ``(itemsize + sum_{i<j} (last_i - first_i) * F_i) / F_j`` and in memory when the
    local position does likewise with the memory strides; each broken step starts a run.
    """
    if piece.size == 0:
        return 0
    dims = storage_dims(len(piece.shape), order)
    fstr = file_strides(piece.shape, order, itemsize)
    mstr = list(mem_strides) if mem_strides is not None else _default_memory_strides(piece, order, itemsize)
    mpos = memory_positions(piece)
    counts = [int(piece.counts[d]) for d in dims]
    breaks = 0
    freach = mreach = int(itemsize)
    for k, d in enumerate(dims):
        idx, pos = piece.indices[d], mpos[d]
        slices = math.prod(int(c) for c in counts[k + 1:])
        if counts[k] > 1:
            sides = []
            if file:
                sides.append((idx, fstr[d], freach, True))
            if memory:
                sides.append((pos, int(mstr[d]), mreach, piece.kind != "map" or d != 0))
            breaks += _broken(sides, counts[k] - 1) * slices
        freach += int(idx[-1] - idx[0]) * fstr[d]
        mreach += int(pos[-1] - pos[0]) * int(mstr[d])
    return breaks + 1


def _broken(sides: list[tuple[np.ndarray, int, int, bool]], steps: int) -> int:
    """Steps between consecutive positions that break a run on any side.

    A side is ``(positions, stride, reach, increasing)``: a step breaks it unless the
    position advances by exactly ``reach`` bytes.  Increasing positions that form one
    consecutive range are decided in O(1) (every step advances by ``stride``).
    """
    masks = []
    for pos, stride, reach, increasing in sides:
        if increasing and int(pos[-1] - pos[0]) == steps:  # consecutive: every step is +1
            if stride != reach:
                return steps
            continue
        masks.append(np.diff(pos) * stride != reach)
    if not masks:
        return 0
    return int(np.count_nonzero(np.logical_or.reduce(masks)))


def count_regions(piece: Piece, order: str) -> int:
    """Number of contiguous file regions of a separable *piece* in storage *order*."""
    return _count_runs(piece, order, 1, None, file=True, memory=False)


@dataclass(frozen=True)
class RankStats:
    """What the planner needs to know about one rank's part of an access.

    Attributes
    ----------
    nbytes : int
        Bytes moved.
    regions : int
        Contiguous file regions.
    segments : int
        Runs contiguous in the file *and* in memory (calls of a method that never packs).
    lo, hi : int
        Byte span ``[lo, hi)`` of the rank's regions, relative to the dataset's start
        (``0, 0`` when the rank moves nothing).
    memory : int
        Runs contiguous in the local array (1 when the interior is one block).
    """

    nbytes: int
    regions: int
    segments: int
    lo: int
    hi: int
    memory: int = 1

    def as_tuple(self) -> tuple[int, int, int, int, int, int]:
        """A picklable tuple (what travels in the allgather)."""
        return (self.nbytes, self.regions, self.segments, self.lo, self.hi, self.memory)


def rank_stats(piece: Piece, order: str, itemsize: int, mem_strides: Sequence[int] | None = None) -> RankStats:
    """Bytes, regions, segments, file span and memory runs of *piece* (analytic, no region list).

    Parameters
    ----------
    piece : Piece
    order : {"C", "F"}
        Storage order of the dataset.
    itemsize : int
        Bytes per element.
    mem_strides : sequence of int, optional
        Byte strides of the local array (default: contiguous in *order*).
    """
    if piece.size == 0:
        return RankStats(0, 0, 0, 0, 0, 0)
    fstr = file_strides(piece.shape, order, itemsize)
    lo = sum(int(i[0]) * s for i, s in zip(piece.indices, fstr))
    hi = sum(int(i[-1]) * s for i, s in zip(piece.indices, fstr)) + int(itemsize)
    return RankStats(
        nbytes=piece.size * int(itemsize),
        regions=_count_runs(piece, order, itemsize, mem_strides, file=True, memory=False),
        segments=_count_runs(piece, order, itemsize, mem_strides, file=True, memory=True),
        lo=lo,
        hi=hi,
        memory=_count_runs(piece, order, itemsize, mem_strides, file=False, memory=True),
    )


def rank_stats_tuple(piece: Piece, order: str, array: np.ndarray) -> tuple[int, int, int, int, int, int]:
    """This rank's ``(bytes, regions, segments, lo, hi, memory runs)`` of *piece* of the local *array*
    (its strides decide the segments) for :meth:`sdm.planner.Access.from_stats`."""
    return rank_stats(piece, order, array.itemsize, array.strides).as_tuple()


# --------------------------------------------------------------------- run lists
@dataclass(frozen=True)
class Runs:
    """Runs of bytes of a piece in storage order (file offsets increasing).

    Attributes
    ----------
    file : numpy.ndarray of int64
        Byte offset of each run in the dataset (relative to its start in the file).
    memory : numpy.ndarray of int64 or None
        Byte offset of each run in the local array's buffer (None for file-only runs).
    length : numpy.ndarray of int64
        Bytes of each run.
    """

    file: np.ndarray
    memory: np.ndarray | None
    length: np.ndarray

    @property
    def count(self) -> int:
        """Number of runs."""
        return int(self.length.size)

    @property
    def nbytes(self) -> int:
        """Bytes in all runs."""
        return int(self.length.sum())


def _merge(f: np.ndarray, m: np.ndarray | None, n: np.ndarray) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """Join each run with the next where both continue it (file and, if given, memory)."""
    if f.size < 2:
        return f, m, n
    joins = f[:-1] + n[:-1] == f[1:]
    if m is not None:
        joins &= m[:-1] + n[:-1] == m[1:]
    if not joins.any():
        return f, m, n
    starts = np.flatnonzero(np.concatenate(([True], ~joins)))
    return f[starts], None if m is None else m[starts], np.add.reduceat(n, starts)


def runs(
    piece: Piece,
    order: str,
    itemsize: int,
    mem_strides: Sequence[int] | None = None,
    *,
    memory: bool = True,
) -> Runs:
    """The runs of *piece*: segments (file and memory) or file regions only.

    Built fastest dimension first: the runs so far are repeated for every position of
    the next dimension (offsets shifted by its file and memory strides), then merged
    where they continue each other.  Intermediate lists never exceed the final count
    plus one dimension's extent.

    Parameters
    ----------
    piece : Piece
    order : {"C", "F"}
    itemsize : int
    mem_strides : sequence of int, optional
        Byte strides of the local array (default: contiguous in *order*).
    memory : bool
        ``True``: segments contiguous in both file and memory, with memory offsets;
        ``False``: file regions only (``Runs.memory`` is None).
    """
    empty = np.zeros(0, dtype=np.int64)
    if piece.size == 0:
        return Runs(empty, empty if memory else None, empty)
    fstr = file_strides(piece.shape, order, itemsize)
    mstr = list(mem_strides) if mem_strides is not None else _default_memory_strides(piece, order, itemsize)
    mpos = memory_positions(piece)
    f = np.zeros(1, dtype=np.int64)
    m: np.ndarray | None = np.zeros(1, dtype=np.int64) if memory else None
    n = np.full(1, int(itemsize), dtype=np.int64)
    for d in storage_dims(len(piece.shape), order):
        idx, pos = piece.indices[d], mpos[d]
        if f.size == 1 and _continues(idx, fstr[d], int(n[0])) and (
            m is None or (piece.kind != "map" or d != 0) and _continues(pos, int(mstr[d]), int(n[0]))
        ):  # one run that the whole dimension extends: no per-element arrays
            f = f + int(idx[0]) * fstr[d]
            if m is not None:
                m = m + int(pos[0]) * int(mstr[d])
            n = n * idx.size
            continue
        fo = idx.astype(np.int64) * fstr[d]
        f = (fo[:, None] + f[None, :]).ravel()
        if m is not None:
            mo = pos * int(mstr[d])
            m = (mo[:, None] + m[None, :]).ravel()
        n = np.broadcast_to(n, (fo.size, n.size)).ravel()
        f, m, n = _merge(f, m, n)
    return Runs(f, m, np.ascontiguousarray(n))


def _continues(increasing: np.ndarray, stride: int, length: int) -> bool:
    """Whether consecutive indices at *stride* bytes extend a run of *length* bytes (O(1))."""
    return stride == length and int(increasing[-1] - increasing[0]) == increasing.size - 1


def file_runs(piece: Piece, order: str, itemsize: int) -> Runs:
    """The contiguous file regions of *piece* (offsets and lengths in bytes)."""
    return runs(piece, order, itemsize, memory=False)


def expand(offsets: np.ndarray, lengths: np.ndarray, unit: int) -> np.ndarray:
    """Index of every *unit*-byte word of the runs ``(offsets, lengths)``, in order.

    ``offsets`` and ``lengths`` must be multiples of ``unit``.  Vectorized: one repeat
    and one arange, no loop over runs.
    """
    words = lengths // unit
    total = int(words.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    first = np.cumsum(words) - words  # position of each run's first word in the output
    return np.repeat(offsets // unit - first, words) + np.arange(total, dtype=np.int64)
