"""Moving the bytes of a subfiled step: every extent whole, by its owner, in its own subfile.

The layout is :mod:`sdm.storage.subfiles`'s: extent ``k`` (rows of the slowest
dimension) of a step is held by rank ``k % P`` while it is written or read. One
``allgather`` of the ranks' pieces (the ``servers`` method's, :mod:`sdm.io.servers`)
tells every rank alike whether the access is *aligned*: every extent is all of its
owner's piece and nobody else's (a block distribution along the slowest dimension with K
equal to the number of ranks). Then each rank writes its piece straight from its array
to its subfile with ``pwrite`` (each subfile synced once per dump), or reads it straight into its array:
file-per-process I/O, no exchange. Otherwise the ``servers`` rounds move the elements
between the ranks' pieces and the owners' extent buffers (shared memory on one node,
``Alltoallv`` across nodes), and the owners write or read their extents whole.

An owner computes its extents' ``xxh3-64`` checksums from the contiguous bytes it
writes, or reads (when the read is verified, each extent is read whole).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .. import integrity
from ..storage.subfiles import Extent
from ..layout.regions import memory_positions
from ..storage.backends.base import Backend
from ._selection import selector
from ._support import Deferred
from .base import Transfer
from .servers import ChunkIO, gathered_plan, run_rounds

__all__ = ["Place", "aligned", "move"]


@dataclass(frozen=True)
class Place:
    """Where an extent's bytes are: *key* of *backend* (an absolute path on the fast tier, an object key
    on the archive tier) at *offset*."""

    backend: Backend
    key: Any
    offset: int


def _flat(a: np.ndarray, order: str) -> np.ndarray:
    """The bytes of *a* in storage *order*, a view when *a* is contiguous that way, else one copy."""
    if order == "F":
        return (a if a.flags.f_contiguous else np.asfortranarray(a)).reshape(-1, order="F").view(np.uint8)
    return np.ascontiguousarray(a).reshape(-1).view(np.uint8)


class _ExtentIO(ChunkIO):
    """A chunk (one extent) read or written whole in its subfile by its owner, checksummed there."""

    def __init__(self, t: Transfer, extents: Sequence[Extent], places: Sequence[Place], written: dict[Path, None],
                 whole: bool, digests: list[int]) -> None:
        super().__init__(t)
        self.extents, self.places, self.written, self.whole, self.digests = extents, places, written, whole, digests

    def put(self, index: int, data: np.ndarray) -> None:
        """Write extent *index* (its bytes: *data*) and its checksum; the subfile is synced later, once per dump."""
        self.digests[index] = integrity.xxh3(data)
        place = self.places[index]
        place.backend.write(place.key, data, place.offset, what="subfile")
        self.written[Path(place.key)] = None

    def before(self, chunk: Any, buffer: np.ndarray, writing: bool) -> None:
        place, full = self.places[chunk.index], buffer[:chunk.nbytes]
        if writing:
            if chunk.holes or chunk.lo > 0 or chunk.hi < chunk.nbytes:  # keep the bytes nobody writes
                got = place.backend.read_into(place.key, place.offset, full)
                full[got:] = 0
        elif self.whole:
            place.backend.read_exactly(place.key, place.offset, full)
            self.digests[chunk.index] = integrity.xxh3(full)
        elif chunk.hi > chunk.lo:
            place.backend.read_exactly(place.key, place.offset + chunk.lo, chunk.span(buffer))

    def after(self, chunk: Any, buffer: np.ndarray, writing: bool) -> None:
        if writing:
            self.put(chunk.index, buffer[:chunk.nbytes])


def aligned(stats: Sequence[Sequence[int]], extents: Sequence[Extent]) -> bool:
    """Whether every extent is exactly its owner's piece, from every rank's layout statistics (the same on every
    rank: the opening exchange gave them to all): ``(bytes, regions, segments, lo, hi, memory runs)`` per rank,
    a map array's without memory runs (its rows may be in any order in memory, so never aligned)."""
    if not extents or len(extents) > len(stats):
        return False
    for q, st in enumerate(stats):
        if q >= len(extents):
            if st[0]:
                return False
            continue
        e = extents[q]
        if len(st) < 6 or st[0] != e.nbytes or st[3] != e.start or st[4] - st[3] != e.nbytes:
            return False
    return True


def move(t: Transfer, extents: Sequence[Extent], places: Sequence[Place], *, writing: bool,
         written: dict[Path, None] | None = None, whole: bool = True, stats: Sequence[Sequence[int]] = ()
         ) -> tuple[list[int], bool]:
    """Write or read this rank's piece of a subfiled step (collective).

    Parameters
    ----------
    t : Transfer
        The access (``fh`` unused: each extent is reached through its :class:`Place`).
    extents, places : sequences
        The step's extents and where each is.
    written : dict, optional
        Writing: receives the subfiles this rank wrote (as keys), for the caller to sync
        once each when the whole dump is written.
    whole : bool
        Reading: read every extent whole (for its checksum) rather than only the bytes the
        ranks ask for (a box).
    stats : sequence
        Every rank's layout statistics of the access: when they show it :func:`aligned`,
        each rank moves its own extent with no collective call at all.

    Returns
    -------
    (list of int, bool)
        The ``xxh3-64`` digest of each extent this rank owns (0 for the others; summed over the
        ranks they give every extent's) and whether the access was aligned (no exchange).

    Raises
    ------
    SDMError
        This rank's failure, after every collective call was made.
    """
    digests = [0] * len(extents)
    deferred = Deferred()
    io = _ExtentIO(t, extents, places, {} if written is None else written, whole, digests)
    if aligned(stats, extents):  # file-per-process, known from the opening exchange: no collective
        rank = t.comm.Get_rank() if t.comm is not None else 0
        if rank < len(extents):
            _direct(io, rank, selector(memory_positions(t.piece)), writing)
        return digests, True
    cuts = [e.rows[0] for e in extents] + [extents[-1].rows[1]] if extents else [0, 0]
    plan = gathered_plan(t, deferred, cuts)
    if plan is None:  # a rank failed before the exchange: every rank knows it; the failing one raises
        deferred.reraise()
        return digests, False
    if plan.aligned:  # file-per-process: each rank's piece is its extent
        rank = t.comm.Get_rank() if t.comm is not None else 0
        for rnd in plan.rounds:
            if rnd.chunk is not None:
                part = plan.own_part(rnd, rank)
                assert part is not None  # aligned: the owner holds all of its chunk
                deferred.run(_direct, io, rnd.chunk.index, part.in_array, writing)
    else:
        run_rounds(t, plan, deferred, writing, io)
    deferred.reraise()
    return digests, bool(plan.aligned)


def _direct(io: _ExtentIO, index: int, in_array: tuple, writing: bool) -> None:
    """Aligned extent *index*: straight between its owner's array (*in_array* selects it) and its subfile."""
    t, place = io.t, io.places[index]
    local = t.array[in_array]
    if writing:
        io.put(index, _flat(local, t.order))
        return
    direct = local.flags.f_contiguous if t.order == "F" else local.flags.c_contiguous
    target = local if direct and np.may_share_memory(local, t.array) else np.empty(local.shape, local.dtype,
                                                                                order="F" if t.order == "F" else "C")
    flat = (target.reshape(-1, order="F") if t.order == "F" else target.reshape(-1)).view(np.uint8)
    place.backend.read_exactly(place.key, place.offset, flat)
    if io.whole:
        io.digests[index] = integrity.xxh3(flat)
    if target is not local:
        t.array[in_array] = target
