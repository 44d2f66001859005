"""The methods of one dump's datasets: a trial settled within the first dump.

A dump writes K datasets; those of one shape and layout are one access pattern (equal
:meth:`~sdm.planner.Access.key`).  When ``auto`` has to measure a tie for a pattern
(:mod:`sdm.planner.trials`), the datasets of that pattern in the dump take the trial's
turns one after another -- dataset 1 tries method A, dataset 2 method B, ... -- instead
of one turn per dump.  When the dump holds more datasets of the pattern than the trial
needs, the ranks agree on the trial's times right after its last turn (one small
``Allreduce`` of the slowest rank's seconds, made by every rank at the same dataset),
the trial ends, and the remaining datasets of the dump are written with the winner, as
are later dumps.  A trial that does not fit in the dump goes on in the next one, its
times observed after each dump's closing exchange as before.

A fresh trial of a pattern with ``m > 1`` datasets in the dump is shortened to fit it:
with ``c`` contenders, each gets at most ``m // (2 c) - WARMUP`` timed turns (at least
one; at most the ``trials`` hint), so that the trial takes about half of the dump when
the dump is large enough.  A pattern written once per dump keeps the full trial.

Everything here is a function of agreed data (the accesses, the planner's state, the
agreed seconds): every rank makes the same decisions and the same collective calls.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Protocol, Sequence

import numpy as np

from .trials import WARMUP, Trial

if TYPE_CHECKING:  # pragma: no cover
    from mpi4py import MPI

    from .access import Access, Decision

__all__ = ["DumpPlan"]


class Planner(Protocol):
    """What a dump's plan asks of the planner (:class:`sdm.planner.Planner`, which makes the plan)."""

    def choose(self, requested: str, access: Access | None = None) -> Decision: ...

    def trial(self, access: Access) -> Trial | None: ...

    def trying(self, access: Access, turn: int) -> Decision: ...

    def observe(self, access: Access, method: str, seconds: float) -> None: ...


class DumpPlan:
    """The decisions of one dump's datasets (see the module documentation).

    Parameters
    ----------
    planner : Planner
    requested : str
        The method asked for (``"auto"`` or a name).
    accesses : sequence of Access or None
        The dump's accesses in dataset order; None for a dataset the planner does not
        choose for (written by another path, e.g. subfiled or to the archive tier).

    Attributes
    ----------
    decisions : list of Decision or None
        One per access (None where the access is None).  The datasets of a pattern after
        its trial's last turn hold a placeholder until :meth:`settle` replaces it.
    """

    def __init__(self, planner: "Planner", requested: str, accesses: Sequence["Access | None"]) -> None:
        self._planner = planner
        self._accesses = list(accesses)
        self.decisions: list[Decision | None] = [None] * len(self._accesses)
        self._turns: dict[tuple, list[int]] = {}  # pattern -> its datasets taking the trial's turns
        self._after: dict[int, tuple] = {}  # dataset -> the pattern whose trial ends before it
        self._settled: set[tuple] = set()
        counts = Counter(a.key() for a in self._accesses if a is not None) if requested == "auto" else Counter()
        for i, a in enumerate(self._accesses):
            if a is None:
                continue
            decision = planner.choose(requested, a)
            trial = planner.trial(a) if requested == "auto" else None
            if trial is None:
                self.decisions[i] = decision
                continue
            key = a.key()
            turns = self._turns.setdefault(key, [])
            if not turns and trial.done == 0 and counts[key] > 1:
                _fit(trial, counts[key])
            turn = trial.done + len(turns)
            if turn < trial.length:
                turns.append(i)
                self.decisions[i] = planner.trying(a, turn)
            else:  # the trial is over before this dataset: it waits for the winner (settle)
                self._after[i] = key
                self.decisions[i] = decision

    def settles(self, i: int) -> bool:
        """Whether dataset *i* is written with a trial's winner that :meth:`settle` decides."""
        return i in self._after

    def settle(self, i: int, seconds: Sequence[float], comm: "MPI.Comm") -> "Decision":
        """The decision for dataset *i* (:meth:`settles` is true), after its pattern's trial is over.

        The first time for a pattern (collective: every rank calls it at the same *i*),
        the ranks agree on the trial's turns' *seconds* (the slowest rank's), which end
        the trial.  *seconds* are this rank's seconds of the dump's datasets so far.
        """
        key = self._after[i]
        access = self._accesses[i]
        assert access is not None
        if key not in self._settled:
            from mpi4py import MPI

            turns = self._turns[key]
            slowest = np.array([float(seconds[j]) for j in turns], dtype=np.float64)
            comm.Allreduce(MPI.IN_PLACE, slowest, op=MPI.MAX)
            for j, secs in zip(turns, slowest):
                decided = self.decisions[j]
                tried = self._accesses[j]
                assert decided is not None and tried is not None
                self._planner.observe(tried, decided.method.name, float(secs))
            self._settled.add(key)
        decision = self._planner.choose("auto", access)
        self.decisions[i] = decision
        return decision


def _fit(trial: Trial, datasets: int) -> None:
    """Shorten a fresh *trial* to about half of a dump's *datasets* of its pattern (at least one timed turn each)."""
    per = datasets // (2 * len(trial.methods)) - WARMUP
    trial.runs = max(1, min(trial.runs, per))
