"""Hyperslabs: the part of a global array one read asks for (partial reads).

A *box* is what numpy's basic indexing gives per dimension: an ``int`` (one index, the
dimension kept with extent 1 here; :func:`parse_box` says which dimensions an integer
dropped), a ``slice`` (``start:stop:step``, ``step`` > 0, clipped to the shape as numpy
does) or ``Ellipsis`` (every dimension it stands for, whole).  Fewer entries than
dimensions leave the last ones whole.  :class:`Hyperslab` is the box as a
distribution: each rank gives its own, boxes may overlap, be empty, and need not cover
the array.  Its piece has kind ``"box"``: per dimension the global indices
``range(start, stop, step)``, whose file type :func:`sdm.layout.datatypes.file_type`
builds as nested indexed blocks, so only the bytes asked for are read.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..errors import IndexOutOfRangeError, InvalidArgumentError
from .distribution import Distribution, Piece

__all__ = ["Box", "parse_box", "Hyperslab"]


class Box:
    """A normalised box: per dimension ``(start, stop, step)`` with ``stop`` clipped, and the dimensions
    an integer index dropped (numpy's result drops them; a read keeps them with extent 1).

    Attributes
    ----------
    ranges : tuple of (int, int, int)
    dropped : tuple of int
    """

    def __init__(self, ranges: Sequence[tuple[int, int, int]], dropped: Sequence[int] = ()) -> None:
        self.ranges = tuple((int(a), int(b), int(c)) for a, b, c in ranges)
        self.dropped = tuple(int(d) for d in dropped)

    @property
    def counts(self) -> tuple[int, ...]:
        """Elements selected in each dimension."""
        return tuple(len(range(a, b, c)) for a, b, c in self.ranges)

    @property
    def shape(self) -> tuple[int, ...]:
        """numpy's result shape: :attr:`counts` without the dropped dimensions."""
        return tuple(n for d, n in enumerate(self.counts) if d not in self.dropped)

    def indices(self) -> tuple[np.ndarray, ...]:
        """The global indices selected in each dimension (ascending)."""
        return tuple(np.arange(a, b, c, dtype=np.int64) if b > a else np.zeros(0, np.int64)
                     for a, b, c in self.ranges)

    def __repr__(self) -> str:
        return f"Box({self.ranges}, dropped={self.dropped})"


def parse_box(box: Any, shape: Sequence[int], what: str = "box") -> Box:
    """Normalise *box* (an index expression) for an array of *shape*.

    Raises
    ------
    InvalidArgumentError
        An entry that is not an int, a slice or ``...``; a step that is not a positive
        integer; more entries than dimensions; two ``...``.
    IndexOutOfRangeError
        An integer out of range (an :class:`IndexError` too, as numpy raises).
    """
    shape = tuple(int(n) for n in shape)
    items = list(box) if isinstance(box, tuple) else [box]
    if sum(1 for x in items if x is Ellipsis) > 1:
        raise InvalidArgumentError(f"{what} {box!r}: at most one '...'")
    if Ellipsis in items:
        at = items.index(Ellipsis)
        fill = len(shape) - (len(items) - 1)
        items = items[:at] + [slice(None)] * max(fill, 0) + items[at + 1:]
    if len(items) > len(shape):
        raise InvalidArgumentError(f"{what} {box!r} has {len(items)} entries; the array has {len(shape)} "
                                   f"dimensions (shape {shape})")
    items += [slice(None)] * (len(shape) - len(items))
    ranges, dropped = [], []
    for d, (item, n) in enumerate(zip(items, shape)):
        if isinstance(item, (int, np.integer)) and not isinstance(item, (bool, np.bool_)):
            i = int(item)
            if not -n <= i < n:
                raise IndexOutOfRangeError(f"{what} {box!r}: index {i} is out of range for dimension {d} of "
                                           f"extent {n}")
            i %= n
            ranges.append((i, i + 1, 1))
            dropped.append(d)
        elif isinstance(item, slice):
            for part in (item.start, item.stop, item.step):
                if part is not None and (isinstance(part, (bool, np.bool_))
                                         or not isinstance(part, (int, np.integer))):
                    raise InvalidArgumentError(f"{what} {box!r}: slice bounds must be integers or None, "
                                               f"got {part!r} in dimension {d}")
            if item.step is not None and int(item.step) <= 0:
                raise InvalidArgumentError(f"{what} {box!r}: the step of dimension {d} must be > 0, got {item.step}"
                                           " (read forwards, then reverse the result with numpy)")
            a, b, c = item.indices(n)
            ranges.append((a, max(a, b), c))
        else:
            raise InvalidArgumentError(f"{what} {box!r}: dimension {d} takes an int, a slice or '...', got "
                                       f"{type(item).__name__} {item!r} (fancy indexing: read a box, then index "
                                       "it with numpy)")
    return Box(ranges, dropped)


class Hyperslab(Distribution):
    """One rank's box as a view for a read (each rank its own; overlaps, gaps and empty boxes allowed)."""

    kind = "box"

    def __init__(self, box: Box) -> None:
        self.box = box

    def piece(self, shape: Sequence[int], nprocs: int, rank: int) -> Piece:
        indices = self.box.indices()
        counts = tuple(len(i) for i in indices)
        return Piece(shape=tuple(int(n) for n in shape), counts=counts, ghosts=((0, 0),) * len(counts),
                     indices=indices, kind="box", starts=tuple(int(i[0]) if i.size else 0 for i in indices))

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "ranges": [list(r) for r in self.box.ranges]}
