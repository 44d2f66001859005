"""User hints for the planner: what the application knows that the planner cannot see.

The MDMS of Shen, Liao and Choudhary takes high-level hints from the application --
how data is partitioned among processors (``(Block, Block)``), how often it will be
used, whether it is mostly read or mostly written -- and turns them into an I/O
decision.  The hints SDM understands (``sdm.open(..., planner_hints={...})``):

=============  ==========================================================================
pattern        access pattern, e.g. ``"(Block, Block)"``, ``"(Block, *, *)"``,
               ``"(*, Cyclic)"``: compared with the stored layout (canonical order,
               i.e. ``(Block, *, ...)`` in C order) when there is no calibration
frequency     expected accesses of each written step (reads per write), for predictions
mostly        ``"read"`` or ``"write"``: the other side is rare, so its accesses are not
              worth trials (the model's choice is kept)
buffer_limit  bytes of extra memory a rank may spend on I/O buffers (excludes methods
              whose buffers are larger: sieving, servers, collective, and datatype for ROMIO's
              data-sieving buffers)
methods       comma-separated methods ``auto`` may choose from (e.g. ``"collective,servers"``
              on a file system without POSIX coherence or file locks)
trials        timed accesses per method when the predictions of several methods are
              close (within the model's error): the first accesses try each
              (:mod:`sdm.planner.trials`); 0 trusts the model (default 3)
=============  ==========================================================================
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ..errors import HintError
from ..layout.patterns import parse_pattern

__all__ = ["Hints", "conforms"]

def conforms(pattern: tuple[str, ...], order: str = "C") -> bool:
    """Whether each rank's part of *pattern* is one contiguous run of the stored array.

    Files hold the global array in canonical order, which is the layout ``(Block, *,
    ..., *)`` (C order; mirrored for Fortran order): a pattern conforms when only the
    slowest dimension is split, and in blocks.
    """
    dims = list(pattern) if order == "C" else list(reversed(pattern))
    return dims[0] in ("block", "*") and all(d == "*" for d in dims[1:])


@dataclass(frozen=True)
class Hints:
    """Parsed planner hints (see the module documentation)."""

    pattern: tuple[str, ...] | None = None
    frequency: float = 1.0
    mostly: str | None = None
    buffer_limit: int | None = None
    methods: tuple[str, ...] | None = None
    trials: int = 3

    @classmethod
    def parse(cls, hints: Mapping[str, Any] | None) -> "Hints":
        """Read a hints dict (unknown keys are ignored: they may be MPI-IO hints).

        Raises
        ------
        HintError
            A known hint with a value that cannot be used.
        """
        if hints is not None and not isinstance(hints, Mapping):
            raise HintError(f"planner hints must be a dict, got {type(hints).__name__}")
        h = dict(hints or {})
        bad = [k for k in h if not isinstance(k, str)]
        if bad:
            raise HintError(f"planner hint keys must be strings, got {bad[0]!r}")
        pattern = parse_pattern(h["pattern"]) if h.get("pattern") is not None else None
        try:
            frequency = float(h.get("frequency", 1.0))
        except (TypeError, ValueError, OverflowError):
            frequency = -1.0
        if not 0 <= frequency < float("inf"):
            raise HintError(f"planner hint frequency={h.get('frequency')!r} must be a number >= 0")
        mostly = h.get("mostly")
        if mostly is not None and mostly not in ("read", "write"):
            raise HintError(f"planner hint mostly={mostly!r} must be 'read' or 'write'")
        limit = h.get("buffer_limit")
        if limit is not None:
            try:
                limit = int(limit)
            except (TypeError, ValueError, OverflowError):
                limit = -1
            if limit < 0:
                raise HintError(f"planner hint buffer_limit={h.get('buffer_limit')!r} must be bytes >= 0")
        methods = h.get("methods")
        if methods is not None:
            items = methods.split(",") if isinstance(methods, str) else methods
            if not isinstance(items, (list, tuple)) or not all(isinstance(m, str) for m in items):
                raise HintError(f"planner hint methods={methods!r} must be comma-separated method names")
            methods = tuple(m.strip() for m in items if m.strip())
        raw = h.get("trials", cls.trials)
        trials = int(raw) if isinstance(raw, (int, str)) and str(raw).strip().isdigit() else -1
        if trials < 0:
            raise HintError(f"planner hint trials={h.get('trials')!r} must be a whole number >= 0")
        return cls(pattern, frequency, mostly, limit, methods, trials)

    def describe(self) -> str:
        """The hints in a few words (for decision reasons), '' when none were given."""
        parts = []
        if self.pattern is not None:
            parts.append(f"pattern ({', '.join(d.capitalize() if d != '*' else '*' for d in self.pattern)})")
        if self.mostly:
            parts.append(f"{self.mostly}-mostly")
        if self.frequency != 1.0:
            parts.append(f"{self.frequency:g} accesses per step")
        if self.buffer_limit is not None:
            parts.append(f"buffers <= {self.buffer_limit} B")
        if self.methods:
            parts.append(f"methods {','.join(self.methods)}")
        if self.trials != Hints.trials:
            parts.append(f"{self.trials} trial accesses per tied method")
        return "; ".join(parts)
