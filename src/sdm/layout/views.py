"""A data view resolved for one dataset on one rank: its piece and its MPI types."""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from .datatypes import element_type, file_type, memory_spec
from .distribution import Distribution, Piece
from .maparray import MapArray
from .regions import count_regions, rank_stats_tuple

__all__ = ["ResolvedView"]


class ResolvedView:
    """A data view resolved for one dataset on this rank, with its MPI types.

    Map-array views share their types through the map (built once for every dataset
    and step with the same rows); other views own theirs, and keep the memory types
    of the local-array layouts they have seen (a few), so a write of every step builds
    no datatype.  ``layout`` is a key of the view that is the same on every rank (given
    by the group), with which an unchanged file view is not set again
    (:func:`sdm.io._support.set_view`).
    """

    _MEMORY_LAYOUTS = 4  # memory types kept per view (local arrays of a run usually share one layout)

    def __init__(self, dist: Distribution, piece: Piece, dtype: np.dtype, order: str, layout: object = None) -> None:
        self.dist, self.piece, self.dtype, self.order = dist, piece, dtype, order
        self.layout = layout
        self._memory: dict[tuple, tuple[int, MPI.Datatype, list[MPI.Datatype]]] = {}
        shared = dist.types if isinstance(dist, MapArray) else None
        key = ("file", dtype, piece.shape)  # the dtype itself: structured dtypes of one size share a .str
        if shared is not None and key in shared:
            self.etype, self.ftype = shared[key]
        else:
            self.etype = element_type(dtype).Commit()
            self.ftype = file_type(piece, self.etype, order)
            if shared is not None:
                shared[key] = (self.etype, self.ftype)
        self.owns_types = shared is None
        self.nbytes = piece.size * dtype.itemsize
        self.regions = count_regions(piece, order)
        self._stats: dict[tuple, tuple[int, ...]] = {}

    def stats(self, arr: np.ndarray) -> tuple[int, ...]:
        """This rank's ``(bytes, regions, segments, lo, hi[, memory runs])`` for the planner.

        Computed once per array layout (map pieces report their regions as segments).
        """
        key = ("stats", arr.shape, arr.strides)
        cached = self._stats.get(key)
        if cached is None:
            if self.piece.kind == "map":
                total = int(np.prod(self.piece.shape, dtype=np.int64)) * self.dtype.itemsize
                cached = (self.nbytes, self.regions, self.regions, 0, total)
            else:
                cached = tuple(int(x) for x in rank_stats_tuple(self.piece, self.order, arr))
            self._stats[key] = cached
        return cached

    def memory(self, arr: np.ndarray) -> tuple[list, list[MPI.Datatype]]:
        """Buffer spec for *arr* and the types to free afterwards."""
        if isinstance(self.dist, MapArray):
            key = ("memory", self.dtype, arr.shape[1:], arr.strides[0])
            spec = self.dist.types.get(key)
            if spec is None:
                spec, made = memory_spec(arr, self.piece, self.etype, self.order)
                for t in made[:-1]:  # intermediate types; the last one is kept with the map
                    t.Free()
                self.dist.types[key] = spec
            return [arr, *spec[1:]], []
        layout = (arr.shape, arr.strides, arr.flags.c_contiguous, arr.flags.f_contiguous)
        kept = self._memory.get(layout)
        if kept is None:
            spec, made = memory_spec(arr, self.piece, self.etype, self.order)
            if len(self._memory) >= self._MEMORY_LAYOUTS:
                return spec, made  # an unusual layout: built for this access only
            kept = self._memory[layout] = (spec[1], spec[2], made)
        return [arr, kept[0], kept[1]], []

    def free(self) -> None:
        for _, _, made in self._memory.values():
            for t in made:
                if t != MPI.DATATYPE_NULL:
                    t.Free()
        self._memory.clear()
        if not self.owns_types:
            return
        for t in (self.ftype, self.etype):
            if t != MPI.DATATYPE_NULL:
                t.Free()
