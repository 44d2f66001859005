"""The header of a ranked section: what one step of a ranked dataset starts with.

Layout (little-endian, documented in ``docs/format.md`` "Ranked sections"): magic
``SDMRANK1``, then uint64 header length, number of writer ranks, total rows, largest
per-rank count and row bytes, then one uint64 row count per writer rank, zero-padded to
the header length; the rows follow, rank-concatenated.  No MPI here: a file is decoded
by :func:`sdm.storage.trailer.read_array` without it.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Sequence

from ..errors import IntegrityError

__all__ = ["MAGIC", "FIXED", "RankedCounts", "header_length", "header_bytes", "parse_header"]

MAGIC = b"SDMRANK1"
FIXED = 48  # bytes before the per-rank counts: magic and five uint64 fields
_FIELDS = struct.Struct("<8s5Q")


@dataclass(frozen=True)
class RankedCounts:
    """The header of one step of a ranked dataset.

    Attributes
    ----------
    counts : tuple of int
        Rows written by each of the writer's ranks, in rank order.
    total : int
        Their sum.
    largest : int
        Their maximum (0 for no rank).
    nranks : int
        Ranks that wrote the step (the writer's communicator size).
    row_bytes : int
        Bytes of one row.
    header : int
        Bytes of the header (the rows start there).
    """

    counts: tuple[int, ...]
    total: int
    largest: int
    nranks: int
    row_bytes: int
    header: int

    @property
    def nbytes(self) -> int:
        """Bytes of the step: header and rows."""
        return self.header + self.total * self.row_bytes

    def starts(self) -> list[int]:
        """The first row of each writer rank, and the total last (``nranks + 1`` values)."""
        out = [0]
        for c in self.counts:
            out.append(out[-1] + c)
        return out


def header_length(nranks: int, itemsize: int) -> int:
    """Bytes of the header for *nranks* ranks: the fields and counts, zero-padded to a multiple of
    8 and of the element size (so the stored bytes are whole elements and whole checksum words)."""
    unit = math.lcm(8, max(1, itemsize))
    return -(-(FIXED + 8 * nranks) // unit) * unit


def header_bytes(counts: Sequence[int], row_bytes: int, itemsize: int) -> bytes:
    """The header of one step: magic, header length, nranks, total rows, largest count, row bytes, counts, padding."""
    n = len(counts)
    length = header_length(n, itemsize)
    head = _FIELDS.pack(MAGIC, length, n, sum(counts), max(counts, default=0), row_bytes)
    return (head + struct.pack(f"<{n}Q", *counts)).ljust(length, b"\0")


def parse_header(raw: bytes, what: str) -> RankedCounts:
    """The counts of a header read from a file (at least its first :data:`FIXED` bytes).

    Raises
    ------
    IntegrityError
        Not a ranked-section header, or fields that contradict each other.
    """
    if len(raw) < FIXED:
        raise IntegrityError(f"{what}: {len(raw)} bytes are too few for a ranked-section header ({FIXED})")
    magic, length, n, total, largest, rb = _FIELDS.unpack_from(raw)
    if magic != MAGIC:
        raise IntegrityError(f"{what}: no ranked-section header (magic {magic!r}, expected {MAGIC!r}); "
                             "the file was changed or damaged after the write")
    if length < FIXED + 8 * n or length > len(raw):
        raise IntegrityError(f"{what}: ranked-section header length {length} does not fit {n} ranks")
    counts = struct.unpack_from(f"<{n}Q", raw, FIXED)
    if sum(counts) != total or max(counts, default=0) != largest:
        raise IntegrityError(f"{what}: ranked-section header counts sum to {sum(counts)} (max {max(counts, default=0)}) "
                             f"but record total {total} (max {largest})")
    return RankedCounts(tuple(int(c) for c in counts), int(total), int(largest), int(n), int(rb), int(length))
