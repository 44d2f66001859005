"""Data sieving: few large contiguous accesses instead of many small ones.

The rank's data is covered by *windows*: spans of the file read (or written) in one
call each, holes included.  Consecutive parts join a window while the hole before them
is at most ``sdm_sieve_gap`` bytes and the window stays within
``sdm_sieve_buffer_size`` (plus one part).  Two ways to cut windows and move the bytes:

* **slabs** (the usual case): windows are ranges of the piece's rows along the slowest
  dimension; the window buffer is viewed as a slab of the global array and the rank's
  elements are copied with one numpy slice assignment (strided copy) or ``np.ix_``;
* **regions** (when the holes inside one row are larger than the gap): windows group
  the file regions themselves, and bytes move as words (the largest power of two
  dividing every offset and length) through index arrays.

A read reads each window once and extracts; a write fills each window and writes it
once; a window with holes (bytes of other ranks, or bytes nobody owns) is read first
and written back whole (read-modify-write).

Read-modify-write is made safe between ranks without locks: every rank publishes its
windows (one allgather); two ranks *conflict* when a read-modify-write window of one
overlaps any window of the other.  Ranks are coloured greedily in rank order so that
no two conflicting ranks share a colour, and the colours take turns, separated by a
barrier (``sdm_sieve_consistency=sync`` adds ``MPI_File_sync`` around it for file
systems without POSIX coherence, e.g. NFS).  Ranks without holes, or whose windows
touch nobody's, all go in the first turn: no barrier at all.

Hints (strings, as for MPI): ``sdm_sieve_buffer_size`` (default 4 MiB),
``sdm_sieve_gap`` (default 32 KiB), ``sdm_sieve_consistency`` (``posix``/``sync``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, cast
from math import gcd

import numpy as np
from mpi4py import MPI

from ..errors import HintError
from ..layout.regions import Runs, count_regions, expand, file_strides, memory_positions, rank_stats, storage_dims
from ._selection import as_index, selector
from ._support import Deferred, byte_view, int_hint, memory_runs, set_view
from .base import IOMethod, Transfer, register

__all__ = ["SievingIO", "Windows", "windows", "slab_windows", "slabs_suit", "conflicts", "turns", "sieve_parameters",
           "BUFFER_SIZE", "GAP"]

BUFFER_SIZE = 4 << 20  #: default sieve buffer (ROMIO's ind_rd_buffer_size)
GAP = 32 << 10  #: default largest hole read through rather than skipped


@dataclass(frozen=True)
class Windows:
    """Sieve windows of one rank: byte spans ``[start, end)`` relative to the dataset.

    Attributes
    ----------
    start, end : numpy.ndarray of int64
        Window spans (sorted, disjoint).
    rmw : numpy.ndarray of bool
        Whether the window has holes (a write must read it first).
    first : numpy.ndarray of int64
        Index of the window's first part; ``first[-1]`` is the number of parts.
    """

    start: np.ndarray
    end: np.ndarray
    rmw: np.ndarray
    first: np.ndarray

    @property
    def count(self) -> int:
        """Number of windows."""
        return int(self.start.size)


def windows(start: np.ndarray, length: np.ndarray, owned: np.ndarray, buffer: int = BUFFER_SIZE,
            gap: int = GAP) -> Windows:
    """Group sorted, disjoint parts ``[start, start + length)`` into sieve windows.

    A new window starts after a hole larger than *gap*, and where the offset from the
    start of the current gap-free stretch crosses a multiple of *buffer*.  ``owned``
    is the number of bytes of each part the rank owns (less than ``length`` when the
    part has holes of its own).  Vectorized.
    """
    if start.size == 0:
        empty = np.zeros(0, dtype=np.int64)
        return Windows(empty, empty, np.zeros(0, dtype=bool), np.zeros(1, dtype=np.int64))
    end = start + length
    stretch = np.concatenate(([True], start[1:] - end[:-1] > gap))
    origin = start[stretch][np.cumsum(stretch) - 1]
    chunk = (start - origin) // buffer
    at = np.flatnonzero(stretch | np.concatenate(([True], chunk[1:] != chunk[:-1])))
    stop = end[np.concatenate((at[1:], [start.size])) - 1]
    covered = np.add.reduceat(owned, at)
    return Windows(start[at], stop, (stop - start[at]) > covered, np.concatenate((at, [start.size])))


def slab_windows(span: int, row: int, buffer: int = BUFFER_SIZE) -> int:
    """The number of windows :func:`windows` cuts from back-to-back parts of *row* bytes over *span* bytes.

    A window starts at each part that begins past the next multiple of *buffer*: rows
    as large as the buffer are a window each, smaller ones share windows of about
    *buffer* bytes.  What the cost model counts for slab windows (no hole past the gap).
    """
    rows = -(-span // max(row, 1))
    if rows <= 0:
        return 0
    return rows if row >= buffer else (rows - 1) * row // buffer + 1


def slabs_suit(holes: int, regions: int, gap: int = GAP) -> bool:
    """Whether slab windows (holes read through) suit *regions* regions with *holes* bytes between them.

    They do while the holes average at most *gap* bytes; past that, region windows skip
    them.  The sieving plan asks this of a piece's first row, the cost model of a
    rank's whole span.
    """
    return holes <= gap * max(regions - 1, 0)


def _overlap(a_start: np.ndarray, a_end: np.ndarray, b_start: np.ndarray, b_end: np.ndarray) -> bool:
    """Whether any span of ``a`` overlaps any of the sorted, disjoint spans of ``b``."""
    if a_start.size == 0 or b_start.size == 0:
        return False
    k = np.searchsorted(b_end, a_start, side="right")  # first b ending after each a start
    ok = k < b_start.size
    return bool(np.any(b_start[k[ok]] < a_end[ok]))


def conflicts(spans: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> np.ndarray:
    """Symmetric matrix of ranks whose windows cannot be written at the same time.

    Parameters
    ----------
    spans : list of (start, end, rmw)
        Every rank's windows.

    ``r`` and ``s`` conflict when a read-modify-write window of one overlaps any window
    of the other.  Only pairs whose overall spans overlap are examined in detail.
    """
    p = len(spans)
    out = np.zeros((p, p), dtype=bool)
    lo = np.array([s[0][0] if s[0].size else 0 for s in spans], dtype=np.int64)
    hi = np.array([s[1][-1] if s[0].size else 0 for s in spans], dtype=np.int64)
    has_rmw = np.array([bool(s[2].any()) for s in spans], dtype=bool)
    near = (lo[:, None] < hi[None, :]) & (lo[None, :] < hi[:, None]) & has_rmw[:, None]
    for r, s in zip(*np.nonzero(near)):
        if r != s and not out[r, s]:
            (a0, a1, am), (b0, b1, _) = spans[r], spans[s]
            if _overlap(a0[am], a1[am], b0, b1):
                out[r, s] = out[s, r] = True
    return out


def turns(conflict: np.ndarray) -> np.ndarray:
    """Greedy colouring in rank order: each rank's turn, conflicting ranks apart."""
    p = conflict.shape[0]
    colour = np.zeros(p, dtype=np.int64)
    for r in range(1, p):
        taken = set(colour[:r][conflict[r, :r]].tolist())
        colour[r] = next(c for c in range(p) if c not in taken)
    return colour


def sieve_parameters(hints: dict) -> tuple[int, int, bool]:
    """``(buffer, gap, sync)`` from the hints (defaults :data:`BUFFER_SIZE`, :data:`GAP`).

    Raises
    ------
    HintError
        A hint has a value that is not allowed.
    """
    buffer = int_hint(hints, "sdm_sieve_buffer_size", BUFFER_SIZE)
    gap = int_hint(hints, "sdm_sieve_gap", GAP, minimum=0)
    mode = str(hints.get("sdm_sieve_consistency", "posix"))
    if mode not in ("posix", "sync"):
        raise HintError(f"hint sdm_sieve_consistency={mode!r} must be 'posix' or 'sync'")
    return buffer, gap, mode == "sync"


class SievingIO(IOMethod):
    """Data sieving with lock-free, turn-based read-modify-write between ranks."""

    name = "sieving"
    collective = False

    def read(self, t: Transfer) -> None:
        set_view(t, MPI.BYTE, MPI.BYTE)  # collective, before anything that may fail on one rank
        _plan(t).move(t, False)

    def write(self, t: Transfer) -> None:
        set_view(t, MPI.BYTE, MPI.BYTE)  # collective
        deferred = Deferred()
        plan = deferred.run(_plan, t)
        mine = None if plan is None else (plan.win.start, plan.win.end, plan.win.rmw, plan.sync)
        everyone = t.comm.allgather(mine) if t.comm is not None else [mine]
        if any(w is None for w in everyone):  # a rank could not plan: nobody writes, it raises
            deferred.reraise()
            return
        planned = cast(list[tuple[Any, Any, Any, Any]], everyone)  # every rank planned
        sync = bool(planned[0][3])  # rank 0's consistency mode, so every rank makes the same calls
        colour = turns(conflicts([w[:3] for w in planned]))
        rank = t.comm.Get_rank() if t.comm is not None else 0
        last = int(colour.max())
        for turn in range(last + 1):
            if colour[rank] == turn:
                deferred.run(plan.move, t, True)
            if turn < last:
                _between_turns(t, sync)
        deferred.reraise()


def _between_turns(t: Transfer, sync: bool) -> None:
    """Make one turn's writes visible to the next turn's reads (collective)."""
    if sync:
        t.file.sync_all()
    if t.comm is not None:
        t.comm.Barrier()
    if sync:
        t.file.sync_all()


def _first_row(p, slow: int):
    """The piece cut to its first row along dimension *slow* (map rows included)."""
    cut = {"counts": tuple(1 if d == slow else c for d, c in enumerate(p.counts)),
           "indices": tuple(i[:1] if d == slow else i for d, i in enumerate(p.indices))}
    if p.kind == "map" and slow == 0:
        cut["memory_rows"] = p.memory_rows[:1]
    return replace(p, **cut)


def _plan(t: Transfer) -> "_SlabPlan | _RegionPlan":
    """This piece's plan, from the piece's cache when the same access was planned before.

    A plan depends on the piece, the array's memory layout and the sieve parameters; a
    dataset's view keeps one piece for every step, so later steps skip the planning.
    """
    buffer, gap, sync = sieve_parameters(t.hints)
    key = ("sieving", buffer, gap, sync, t.order, t.array.shape, t.array.strides, t.array.dtype)
    return t.piece.cached(key, lambda: _new_plan(t, buffer, gap, sync), keep=8)


def _new_plan(t: Transfer, buffer: int, gap: int, sync: bool) -> "_SlabPlan | _RegionPlan":
    """The cheaper way to sieve this piece: slabs unless rows have large inner holes."""
    p = t.piece
    if p.size == 0:
        return _RegionPlan(t, buffer, gap, sync)
    item = t.array.itemsize
    slow = storage_dims(len(p.shape), t.order)[-1]
    one_row = _first_row(p, slow)
    strides = file_strides(p.shape, t.order, item)
    span = sum(int(i[-1] - i[0]) * s for i, s in zip(one_row.indices, strides)) + item
    if slabs_suit(span - one_row.size * item, count_regions(one_row, t.order), gap):
        return _SlabPlan(t, buffer, gap, sync)
    return _RegionPlan(t, buffer, gap, sync)


class _SlabPlan:
    """Windows of whole rows (slowest dimension); numpy slices move the elements."""

    def __init__(self, t: Transfer, buffer: int, gap: int, sync: bool) -> None:
        p, item = t.piece, t.array.itemsize
        self.sync = sync
        self.slow = storage_dims(len(p.shape), t.order)[-1]
        inner = [d for d in range(len(p.shape)) if d != self.slow]
        self.fstr = file_strides(p.shape, t.order, item)
        self.rows = p.indices[self.slow].astype(np.int64)
        self.lo = sum(int(p.indices[d][0]) * self.fstr[d] for d in inner)
        hi = sum(int(p.indices[d][-1]) * self.fstr[d] for d in inner) + item
        owned = int(np.prod([p.counts[d] for d in inner], dtype=np.int64)) * item
        n = self.rows.size
        self.win = windows(self.rows * self.fstr[self.slow] + self.lo, np.full(n, hi - self.lo, dtype=np.int64),
                           np.full(n, owned, dtype=np.int64), buffer, gap)
        self.mpos = memory_positions(p)
        sorted_memory = p.kind != "map"  # map rows come in any order; box positions increase
        self.inner_file = {d: as_index(p.indices[d], True) for d in inner}
        self.inner_mem = {d: as_index(self.mpos[d], sorted_memory) for d in inner}
        # a row that is one segment (contiguous in file and memory) moves alone without a buffer
        first_row = _first_row(p, self.slow)
        self.row_bytes = hi - self.lo
        self.direct = owned == self.row_bytes and rank_stats(first_row, t.order, item, t.array.strides).segments == 1
        self.mstr = t.array.strides
        whole = as_index(self.rows, True), as_index(self.mpos[self.slow], sorted_memory or self.slow != 0)
        simple = all(isinstance(x, slice) for x in (*whole, *self.inner_file.values(), *self.inner_mem.values()))
        self.steps = (whole[0].step, whole[1].step) if simple else None  # type: ignore[union-attr]

    def move(self, t: Transfer, writing: bool) -> None:
        """Read or write every window of this rank (independent calls)."""
        if self.win.count == 0:
            return
        p, fh, row = t.piece, t.file, self.fstr[self.slow]
        first = self.win.first
        nrows = self.rows[first[1:] - 1] - self.rows[first[:-1]] + 1
        scratch = np.empty(int(nrows.max()) * row, dtype=np.uint8)
        mv = byte_view(t.array).data if self.direct else None
        for w in range(self.win.count):
            a, b = int(first[w]), int(first[w + 1])
            if mv is not None and b - a == 1:
                m = sum(int(x[a if d == self.slow else 0]) * s for d, (x, s) in enumerate(zip(self.mpos, self.mstr)))
                (fh.write_at if writing else fh.read_at)(int(self.win.start[w]), mv[m:m + self.row_bytes])
                continue
            top = int(self.rows[a])
            shape = list(p.shape)
            shape[self.slow] = int(nrows[w])
            slab = np.ndarray(shape, dtype=t.array.dtype, buffer=scratch, order="F" if t.order == "F" else "C")
            start, stop = int(self.win.start[w]), int(self.win.end[w])
            span = scratch[start - top * row: stop - top * row]
            fsel, msel = self._selectors(a, b, top)
            if not writing or self.win.rmw[w]:
                fh.read_fully(start, span)
            if writing:
                slab[fsel] = t.array[msel]
                fh.write_at(start, span)
            else:
                t.array[msel] = slab[fsel]

    def _selectors(self, a: int, b: int, top: int) -> tuple[tuple, tuple]:
        """Index tuples of the window's elements in the slab and in the local array."""
        nd = len(self.fstr)
        if self.steps is not None:  # every dimension a progression: slices, no index arrays
            fstep, mstep = self.steps
            m0 = int(self.mpos[self.slow][a])
            rows = slice(0, (b - a - 1) * fstep + 1, fstep)
            mrows = slice(m0, m0 + (b - a - 1) * mstep + 1, mstep)
            return (tuple(rows if d == self.slow else self.inner_file[d] for d in range(nd)),
                    tuple(mrows if d == self.slow else self.inner_mem[d] for d in range(nd)))
        fidx = [self.rows[a:b] - top if d == self.slow else self.inner_file[d] for d in range(nd)]
        midx = [self.mpos[self.slow][a:b] if d == self.slow else self.inner_mem[d] for d in range(nd)]
        return _combine(fidx), _combine(midx)


def _combine(parts: list) -> tuple:
    """One numpy index tuple from per-dimension slices or arrays (``np.ix_`` if needed)."""
    parts = [as_index(x) if isinstance(x, np.ndarray) else x for x in parts]
    if all(isinstance(x, slice) for x in parts):
        return tuple(parts)
    return selector([np.arange(x.start, x.stop, x.step) if isinstance(x, slice) else x for x in parts])


def _word(unit: int) -> np.dtype:
    """The numpy type that moves *unit* bytes at a time."""
    return np.dtype({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}.get(unit, (np.void, unit)))


class _RegionPlan:
    """Windows of file regions; words move through index arrays (large holes in rows)."""

    def __init__(self, t: Transfer, buffer: int, gap: int, sync: bool) -> None:
        self.sync = sync
        self.seg, self.memory = seg, memory = memory_runs(t)
        f, n = seg.file, seg.length
        if f.size:
            joins = f[:-1] + n[:-1] == f[1:]
            at = np.flatnonzero(np.concatenate(([True], ~joins)))
            regions = Runs(f[at], None, np.add.reduceat(n, at))
        else:
            regions = seg
        self.win = windows(regions.file, regions.length, regions.length, buffer, gap)
        # the windows' first parts are regions; find their first segments
        self.first = np.searchsorted(f, np.concatenate((self.win.start, [np.iinfo(np.int64).max])))
        unit = int(np.gcd.reduce(np.concatenate((f, memory, n)))) if f.size else 1
        self.unit = gcd(unit, 1 << 20)

    def move(self, t: Transfer, writing: bool) -> None:
        """Read or write every window of this rank (independent calls)."""
        if self.win.count == 0:
            return
        raw = byte_view(t.array)
        word = _word(self.unit)
        mem = raw[: raw.size - raw.size % self.unit].view(word)
        spans = self.win.end - self.win.start
        scratch = np.empty(int(spans.max()), dtype=np.uint8)
        mv = raw.data
        fh, seg = t.file, self.seg
        for w in range(self.win.count):
            a, b = int(self.first[w]), int(self.first[w + 1])
            start, span, holes = int(self.win.start[w]), int(spans[w]), bool(self.win.rmw[w])
            if b - a == 1 and not holes:  # one segment fills the window: straight from/to memory
                m = int(self.memory[a])
                (fh.write_at if writing else fh.read_at)(start, mv[m:m + span])
                continue
            buf = scratch[:span]
            if not writing or holes:
                fh.read_fully(start, buf)
            at_file = expand(seg.file[a:b] - start, seg.length[a:b], self.unit)
            at_mem = expand(self.memory[a:b], seg.length[a:b], self.unit)
            words = buf.view(word)
            if writing:
                words[at_file] = mem[at_mem]
                fh.write_at(start, buf)
            else:
                mem[at_mem] = words[at_file]


register(SievingIO())
