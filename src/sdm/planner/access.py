"""What the planner decides over: one collective access as every rank sees it, and the decision made for it.

Every rank builds the same :class:`Access` from the layout statistics all ranks exchange
(:meth:`Access.from_stats`), so the planner (:class:`sdm.planner.Planner`), its cost model
(:mod:`sdm.planner.model`) and a dump's plan (:mod:`sdm.planner.dump`) reach the same
:class:`Decision` on every rank.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

from ..io import IOMethod

__all__ = ["Access", "Decision", "row_bytes"]


@dataclass(frozen=True)
class Access:
    """One collective access as the planner sees it (identical on every rank).

    Per rank (tuples in rank order): ``rank_bytes`` moved, ``rank_regions`` contiguous
    in the file, ``rank_segments`` contiguous in file and memory (default: the
    regions), ``rank_spans`` the byte span ``[lo, hi)`` of its regions (default: see
    :attr:`spans`), ``rank_memory`` runs in the local array (default: one).  Also the
    file organization ``level``, ``itemsize``, ``total_bytes`` of the dataset step,
    the user ``hints``, the storage ``order``, ``row_bytes`` (one slice along the
    slowest dimension: the unit of sieve windows and server chunks; 0 for one element)
    and the pieces' ``kind`` (``"map"`` for map-array views).
    """

    writing: bool
    level: int
    itemsize: int
    total_bytes: int
    rank_bytes: tuple[int, ...]
    rank_regions: tuple[int, ...]
    hints: dict[str, Any] = field(default_factory=dict)
    rank_segments: tuple[int, ...] = ()
    rank_spans: tuple[tuple[int, int], ...] = ()
    order: str = "C"
    rank_memory: tuple[int, ...] = ()
    row_bytes: int = 0
    kind: str = ""

    @property
    def nprocs(self) -> int:
        """Ranks taking part."""
        return len(self.rank_bytes)

    @property
    def segments(self) -> tuple[int, ...]:
        """Per rank segments (the regions when not given)."""
        return self.rank_segments or self.rank_regions

    @property
    def memory(self) -> tuple[int, ...]:
        """Per rank runs in the local array (one block each when not given)."""
        return self.rank_memory or tuple(1 if b else 0 for b in self.rank_bytes)

    @property
    def spans(self) -> tuple[tuple[int, int], ...]:
        """Per rank file spans; when not given, a rank with one region owns a block of its own
        and a rank with several spreads over the whole dataset (interleaved)."""
        if self.rank_spans:
            return self.rank_spans
        out, at = [], 0
        for b, reg in zip(self.rank_bytes, self.rank_regions):
            out.append((0, self.total_bytes) if reg > 1 else (at, at + b))
            at += b
        return tuple(out)

    def key(self) -> tuple:
        """A hashable signature: equal keys, equal decisions."""
        return (self.writing, self.level, self.itemsize, self.total_bytes, self.rank_bytes, self.rank_regions,
                self.rank_segments, self.rank_spans, self.order, self.kind, self.rank_memory, self.row_bytes,
                repr(sorted(self.hints.items())))

    @classmethod
    def from_stats(cls, stats: Sequence[Sequence[int]], *, writing: bool, level: int, itemsize: int,
                   total_bytes: int, hints: dict[str, Any] | None = None, order: str = "C",
                   row_bytes: int = 0) -> "Access":
        """Build from every rank's :func:`rank_stats_tuple` ``(bytes, regions, segments, lo, hi[, memory])``."""
        return cls(writing=writing, level=level, itemsize=itemsize, total_bytes=total_bytes,
                   rank_bytes=tuple(int(s[0]) for s in stats), rank_regions=tuple(int(s[1]) for s in stats),
                   hints=dict(hints or {}), rank_segments=tuple(int(s[2]) for s in stats),
                   rank_spans=tuple((int(s[3]), int(s[4])) for s in stats), order=order,
                   rank_memory=tuple(int(s[5]) for s in stats) if all(len(s) > 5 for s in stats) else (),
                   row_bytes=int(row_bytes))


def row_bytes(shape: Sequence[int], itemsize: int, order: str = "C") -> int:
    """Bytes of one slice of a dataset of *shape* along its slowest dimension (for :class:`Access`)."""
    slow = (shape[0] if order == "C" else shape[-1]) if shape else 1
    return int(itemsize) * math.prod(int(n) for n in shape) // max(int(slow), 1)


@dataclass(frozen=True)
class Decision:
    """The method chosen for an access and why."""

    method: IOMethod
    reason: str
