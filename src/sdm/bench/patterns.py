"""NCIO access patterns: region count, region size, region spacing, (non)contiguity.

The noncontiguous I/O benchmark of Ching et al. describes an access by the number of
contiguous regions each rank moves, their size, and the spacing between them, in the
file and in memory.  Here a pattern becomes an SDM :class:`~sdm.layout.Piece` of a
global ``float64`` array, so every I/O method runs on it exactly as it runs for a
dataset, and a local array holding the rank's values:

* file noncontiguous: region ``i`` of rank ``p`` starts at byte
  ``(i * P + p) * (size + spacing)``: the ranks' regions interleave, each followed by
  ``spacing`` bytes nobody writes (global shape ``(count, P, (size + spacing) / 8)``);
* file contiguous: rank ``p`` owns bytes ``[p * count * size, (p + 1) * count * size)``;
* memory noncontiguous: each region is followed in the local array by a gap of its own
  size (a ghost layer on the fastest dimension), so no two regions touch in memory.

Values are the element's index in the global array plus one (so that no written value
is zero, like the bytes nobody writes), so references are one ``arange``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ..layout.distribution import Piece
from ..layout.regions import RankStats, rank_stats

__all__ = ["Pattern", "ITEM"]

ITEM = 8  #: bytes per element (float64)


@dataclass(frozen=True)
class Pattern:
    """One NCIO access pattern (sizes in bytes, multiples of 8).

    Attributes
    ----------
    size : int
        Bytes per region.
    count : int
        Regions per rank.
    spacing : int
        Bytes nobody writes after each region in the file (noncontiguous file only).
    mem_contig, file_contig : bool
        Whether the rank's regions touch each other in memory / in the file.
    """

    size: int
    count: int
    spacing: int = 0
    mem_contig: bool = True
    file_contig: bool = False

    def __post_init__(self) -> None:
        for name in ("size", "spacing"):
            if getattr(self, name) % ITEM or getattr(self, name) < 0:
                raise ValueError(f"NCIO {name} must be a non-negative multiple of {ITEM} bytes")
        if self.size == 0 or self.count < 1:
            raise ValueError("NCIO regions need size >= 8 bytes and count >= 1")

    @property
    def label(self) -> str:
        """Short text: ``64Bx4096 sp512 m-nc f-nc``."""
        contig = f"m-{'c' if self.mem_contig else 'nc'} f-{'c' if self.file_contig else 'nc'}"
        return f"{_bytes(self.size)}x{self.count} sp{_bytes(self.spacing)} {contig}"

    def as_dict(self) -> dict[str, Any]:
        """JSON-able fields."""
        return asdict(self)

    # -------------------------------------------------------------------- geometry
    def shape(self, nprocs: int) -> tuple[int, int, int]:
        """Global shape (float64 elements) of the file for *nprocs* ranks."""
        words = self.size // ITEM
        if self.file_contig:
            return (nprocs, self.count, words)
        return (self.count, nprocs, words + self.spacing // ITEM)

    def file_bytes(self, nprocs: int) -> int:
        """Size of the file (bytes nobody owns included)."""
        return int(np.prod(self.shape(nprocs), dtype=np.int64)) * ITEM

    def piece(self, nprocs: int, rank: int) -> Piece:
        """The piece rank *rank* moves."""
        shape = self.shape(nprocs)
        words = self.size // ITEM
        if self.file_contig:
            starts, counts = (rank, 0, 0), (1, self.count, words)
        else:
            starts, counts = (0, rank, 0), (self.count, 1, words)
        return Piece(
            shape=shape,
            counts=counts,
            ghosts=((0, 0), (0, 0), (0, 0 if self.mem_contig else words)),
            indices=tuple(np.arange(s, s + c, dtype=np.int64) for s, c in zip(starts, counts)),
            kind="subarray",
            starts=starts,
        )

    def local(self, nprocs: int, rank: int) -> np.ndarray:
        """The rank's local array: its values in the regions, -1 in the memory gaps."""
        p = self.piece(nprocs, rank)
        out = np.full(p.memory_shape, -1.0)
        out[p.interior] = self.values(p)
        return out

    def values(self, piece: Piece) -> np.ndarray:
        """Values of the piece's elements: their index in the global array plus one."""
        s = piece.shape
        i, j, k = (np.asarray(x, dtype=np.float64) for x in piece.indices)
        return (i[:, None, None] * s[1] + j[None, :, None]) * s[2] + k[None, None, :] + 1.0

    def reference(self, nprocs: int) -> np.ndarray:
        """The whole file as it must be (0 where nobody writes), float64."""
        shape = self.shape(nprocs)
        ref = np.arange(1, int(np.prod(shape)) + 1, dtype=np.float64).reshape(shape)
        if not self.file_contig and self.spacing:
            ref[:, :, self.size // ITEM:] = 0.0
        return ref

    def stats(self, nprocs: int, rank: int) -> RankStats:
        """The planner's description of the rank's part (analytic)."""
        p = self.piece(nprocs, rank)
        strides = np.empty(p.memory_shape).strides
        return rank_stats(p, "C", ITEM, strides)

    def access(self, nprocs: int, writing: bool, hints: dict | None = None,
               stats: list[tuple] | None = None) -> Any:
        """The planner's :class:`~sdm.planner.Access` for this pattern on *nprocs* ranks.

        *stats* are every rank's ``stats(...).as_tuple()`` in rank order (computed here when
        not given).  Level 1: every timed write of the benchmark goes to a new file.
        """
        from ..planner import Access, row_bytes

        if stats is None:
            stats = [self.stats(nprocs, r).as_tuple() for r in range(nprocs)]
        return Access.from_stats(stats, writing=writing, level=1, itemsize=ITEM, total_bytes=self.file_bytes(nprocs),
                                 hints=hints, row_bytes=row_bytes(self.shape(nprocs), ITEM))


def _bytes(n: int) -> str:
    for unit, scale in (("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return str(n)
