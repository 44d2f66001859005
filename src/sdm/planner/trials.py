"""Measured tie-breaks: when the model cannot tell methods apart, the first accesses try them.

An application repeats the same access every step, so its own first steps can settle
what the cost model cannot, as autotuners and FFTW's planner do: ``auto`` alternates
between the contenders (the methods predicted within a margin of the fastest), each
one's first access untimed (it builds its plans), then keeps the one with the lower
median.  The margin is the model's error: :data:`TIE` for a calibrated model (about
nine predictions in ten fall within it), :data:`UNCALIBRATED` for the default
constants, which are orders of magnitude only -- there the model shortlists and the
trial decides.  A trial costs at most a few accesses by a method within the margin.

Every rank must feed :meth:`Trial.observe` the same seconds (the slowest rank's, as the
write path agrees them), so that every rank ends the trial with the same method.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from statistics import median

__all__ = ["TIE", "UNCALIBRATED", "WARMUP", "Trial", "contenders"]

#: Relative gap under which a calibrated model's predictions are a tie: its error at most points
#: (replayed on ten stored NCIO runs, the choice was then 1.01x the best in geometric mean).
TIE = 0.5
#: The same for the uncalibrated defaults: methods predicted within 3x of the fastest.
UNCALIBRATED = 2.0
#: Untimed accesses per contender before its timed ones (plans and caches are built).
WARMUP = 1
#: Contenders tried at most (the best prediction and the next ones within the margin).
MOST = 3


def contenders(predictions: list[tuple[str, float]], margin: float = TIE) -> tuple[str, ...]:
    """Methods predicted within *margin* of the fastest (fastest first, at most :data:`MOST`).

    *predictions* are ``(method, seconds)`` pairs, fastest first.
    """
    best = predictions[0][1]
    return tuple(m for m, s in predictions if s <= best * (1 + margin))[:MOST]


@dataclass
class Trial:
    """The schedule and timings of one access's trial.

    Attributes
    ----------
    methods : tuple of str
        The contenders, fastest predicted first; they take turns.
    runs : int
        Timed accesses per contender.
    times : dict
        Method -> seconds of its timed accesses so far.
    """

    methods: tuple[str, ...]
    runs: int
    times: dict[str, list[float]] = field(default_factory=dict)
    done: int = 0

    @property
    def length(self) -> int:
        """Accesses the trial takes."""
        return len(self.methods) * (WARMUP + self.runs)

    def current(self) -> str:
        """The method the next access tries."""
        return self.methods[self.done % len(self.methods)]

    def observe(self, method: str, seconds: float) -> bool:
        """Record an access of *method* that took *seconds*; returns whether the trial is over.

        An access by another method than :meth:`current` (a caller that did not follow
        the schedule) is not counted.
        """
        if method != self.current():
            return False
        if self.done >= WARMUP * len(self.methods):
            self.times.setdefault(method, []).append(float(seconds))
        self.done += 1
        return self.done >= self.length

    def cost(self, seconds: Mapping[str, float], accesses: int) -> float:
        """Predicted seconds of *accesses* accesses that start with this trial.

        The trial's accesses go to the contenders in turn; the rest to the contender
        predicted fastest (``methods[0]``): a prediction cannot know which one the
        measurement will keep.  *seconds* maps each contender to its predicted seconds
        per access.
        """
        turns = min(accesses, self.length)
        tried = sum(seconds[self.methods[k % len(self.methods)]] for k in range(turns))
        return tried + (accesses - turns) * seconds[self.methods[0]]

    def winner(self) -> str:
        """The contender with the lowest median time (ties: the one predicted faster)."""
        return min(self.methods, key=lambda m: (median(self.times.get(m) or [float("inf")]), self.methods.index(m)))

    def summary(self) -> str:
        """The measured medians in a few words, winner first."""
        ranked = sorted(self.methods, key=lambda m: median(self.times.get(m) or [float("inf")]))
        return ", ".join(f"{m} {median(self.times[m]) * 1e3:.3g} ms" for m in ranked if self.times.get(m))
