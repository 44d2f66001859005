"""A data view resolved for one dataset on one rank: its piece and its MPI types."""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from .datatypes import element_type, file_type, memory_spec
from .distribution import Distribution, Piece
from .maparray import MapArray
from .regions import count_regions

__all__ = ["ResolvedView"]


class ResolvedView:
    """A data view resolved for one dataset on this rank, with its MPI types.

    Map-array views share their types through the map (built once for every dataset
    and step with the same rows); other views own theirs.
    """

    def __init__(self, dist: Distribution, piece: Piece, dtype: np.dtype, order: str) -> None:
        self.dist, self.piece, self.dtype, self.order = dist, piece, dtype, order
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
                from ..planner import rank_stats_tuple

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
        return memory_spec(arr, self.piece, self.etype, self.order)

    def free(self) -> None:
        if not self.owns_types:
            return
        for t in (self.ftype, self.etype):
            if t != MPI.DATATYPE_NULL:
                t.Free()
