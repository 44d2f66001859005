"""The planner (the paper's MDMS): decides the I/O method of every access, and says why.

Every rank describes its part of an access (bytes, file regions, segments, file span)
in the allgather every write and read already makes, so :meth:`Planner.choose` turns
the same :class:`Access` into the same :class:`Decision` on every rank.  ``"auto"``
predicts every method with the cost model (:mod:`~sdm.planner.model`) and takes the
fastest, unless others are predicted close to it: then the first accesses measure
them (:mod:`~sdm.planner.trials`, fed by :meth:`Planner.observe`) and the measured
fastest is kept.  Without a calibration the constants are orders of magnitude, so
"close" is wide (3x): the model shortlists, the trials decide; ``sdm calibrate``
narrows it.  The datasets of one pattern in a dump take the trial's turns one after
another, so the first dump settles it (:mod:`~sdm.planner.dump`), and what trials
learned is kept in the catalog per storage target for later runs
(:mod:`~sdm.planner.learned`).  The application's hints (:mod:`~sdm.planner.hints`) keep their MDMS
meaning.  The decision and its reason are recorded with every write in the catalog.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..errors import HintError, InvalidArgumentError
from ..io import get_method, method_names
from ..layout.regions import rank_stats_tuple
from .access import Access, Decision, row_bytes
from .dump import DumpPlan
from .hints import Hints, conforms
from .learned import RECHECK, Learned, pattern_digest
from .model import METHODS, CostModel
from .trials import TIE, UNCALIBRATED, Trial, contenders

__all__ = ["Access", "Decision", "DumpPlan", "Learned", "Planner", "choose_method", "rank_stats_tuple", "row_bytes"]


class Planner:
    """Chooses I/O methods; ``calibration`` holds measured cost-model constants, if any.

    Parameters
    ----------
    calibration : dict, optional
        Constants of the cost model for the session's storage target (from the
        catalog's ``io_calibrations``), identical on every rank.
    hints : dict, optional
        Session-wide user hints (see :mod:`sdm.planner.hints`).
    mpi_hints : dict, optional
        The session's MPI-IO/method hints (buffer sizes, servers), which the
        predictions take into account.
    model : CostModel, optional
        A model to use instead of the one *calibration* describes.
    learned : mapping, optional
        What earlier runs' trials settled on this target: pattern digest ->
        :class:`~sdm.planner.learned.Learned` (from the catalog, identical on every rank).
    run_id : int, optional
        The session's run: a learned choice older than :data:`~sdm.planner.learned.RECHECK`
        runs is measured again.  Trials settled in this session are kept in :attr:`measured`.
    """

    def __init__(self, calibration: dict[str, Any] | None = None, hints: dict[str, Any] | None = None,
                 mpi_hints: dict[str, Any] | None = None, *, model: CostModel | None = None,
                 learned: Mapping[str, Learned] | None = None, run_id: int | None = None) -> None:
        self.calibration = calibration
        self.hints = dict(hints or {})
        self.mpi_hints = dict(mpi_hints or {})
        self.model = model if model is not None else CostModel.from_calibration(calibration)
        self._decided: dict[tuple, Decision] = {}  # an application writes the same access every step
        self._trials: dict[tuple, tuple[Trial, str]] = {}  # ties being measured, and what was predicted
        self.learned: dict[str, Learned] = dict(learned or {})
        self.run_id = run_id
        #: Trials settled in this session: pattern digest -> what they measured (for the catalog).
        self.measured: dict[str, Learned] = {}

    def choose(self, requested: str, access: Access | None = None) -> Decision:
        """Resolve a requested method name (or ``"auto"``) for *access*.

        A pure function of its arguments and the planner's construction (no clock, no
        I/O, nothing rank-local): every rank reaches the same decision.

        Raises
        ------
        InvalidArgumentError
            The name is neither ``"auto"`` nor a registered method, or a hint is invalid.
        """
        if requested == "exchange" and access is not None and access.kind != "map":
            return Decision(get_method("collective"), "requested: exchange, which serves map arrays; collective here")
        if requested != "auto":
            method = get_method(requested)
            if method.backend != "mpiio":
                raise InvalidArgumentError(
                    f"method {requested!r} moves bytes to and from the archive tier (backend {method.backend}); "
                    f"files on the fast tier take one of {method_names() + ['auto']}")
            return Decision(method, f"requested: {requested}")
        key = access.key() if access is not None else None
        if key is not None and key in self._decided:
            return self._decided[key]
        if key is not None and key in self._trials:
            return _trying(*self._trials[key])
        stored = self._learned(key) if key is not None else None
        if stored is not None:
            _bounded(self._decided)[key] = stored
            return stored
        decision = self._auto(access)
        if isinstance(decision, tuple):  # a tie: the next accesses measure it
            _bounded(self._trials)[key] = decision
            return _trying(*decision)
        if key is not None:
            _bounded(self._decided)[key] = decision
        return decision

    def choose_many(self, requested: str, accesses: Sequence[Access | None]) -> DumpPlan:
        """The decisions of one dump's datasets (None: a dataset chosen for elsewhere), as a
        :class:`~sdm.planner.dump.DumpPlan`: the datasets of one pattern take a trial's turns
        one after another, and those after its last turn the winner (:meth:`DumpPlan.settle`)."""
        return DumpPlan(self, requested, accesses)

    def trying(self, access: Access, turn: int) -> Decision:
        """The decision of turn *turn* of *access*'s trial (:meth:`choose` started it)."""
        trial, predicted = self._trials[access.key()]
        return _trying(trial, predicted, turn)

    def digest(self, access: Access) -> str:
        """The name under which what a trial learns about *access* is kept across runs."""
        return pattern_digest(access.key(), self.hints, self.mpi_hints)

    def _learned(self, key: tuple) -> Decision | None:
        """The decision an earlier run's trial settled for the pattern *key* on this target, if still trusted."""
        if not self.learned:
            return None
        got = self.learned.get(pattern_digest(key, self.hints, self.mpi_hints))
        if got is None or got.due(self.run_id) or got.method not in method_names():
            return None
        return Decision(get_method(got.method),
                        f"auto: {got.method} learned on this target by the trial of run {got.run_id} ({got.summary}); "
                        f"measured again from run {got.run_id + RECHECK}")

    def trial(self, access: Access) -> Trial | None:
        """The tie *access*'s ``auto`` accesses are measuring (:meth:`choose` starts it), or None."""
        entry = self._trials.get(access.key())
        return entry[0] if entry is not None else None

    def observe(self, access: Access, method: str, seconds: float) -> None:
        """Tell the planner that *method* took *seconds* for *access* (collective by agreement).

        Only accesses whose ``auto`` decision is a trial (:mod:`sdm.planner.trials`) use
        it; when the trial is over, ``auto`` keeps the measured fastest for this access.
        Every rank must pass the same *seconds* (the slowest rank's), as every rank
        must reach the same decision.
        """
        key = access.key()
        if key not in self._trials:
            return
        trial, predicted = self._trials[key]
        if trial.observe(method, seconds):
            del self._trials[key]
            winner = trial.winner()
            if self.run_id is not None:
                _bounded(self.measured)[self.digest(access)] = Learned(winner, trial.summary(), self.run_id)
            _bounded(self._decided)[key] = Decision(
                get_method(winner),
                f"auto: {winner} measured fastest of a tie ({trial.summary()}; median of {trial.runs} "
                f"accesses each); {predicted}",
            )

    def _auto(self, access: Access | None) -> Decision | tuple[Trial, str]:
        """The decision for ``"auto"``, or a trial when predictions are close (see :meth:`choose`)."""
        if access is not None and access.kind == "map":
            return Decision(get_method("exchange"),
                            "auto: map-array view, rows exchanged to contiguous file blocks (plan built once per map)")
        hints = Hints.parse({**self.hints, **(access.hints if access is not None else {})})
        candidates = self._candidates(hints)
        said = f"; hints: {hints.describe()}" if hints.describe() else ""
        calibrated = self.model.calibrated
        if access is None or (not calibrated and hints.pattern is not None and conforms(hints.pattern, access.order)
                              and "datatype" in candidates):
            method = "datatype" if access is not None else ("collective" if "collective" in candidates
                                                             else candidates[0])
            why = ("the access pattern conforms to the stored (Block, *) layout: independent datatype I/O"
                   if access is not None else "collective I/O for access patterns that need not conform")
            return Decision(get_method(method), f"auto: {method} (MDMS rule: {why}){said}")
        preds = self.model.predict_all(access, self.mpi_hints, tuple(candidates))
        rare = hints.mostly is not None and (hints.mostly == "write") != access.writing
        margin = TIE if calibrated else UNCALIBRATED
        tied = contenders([(p.method, p.seconds) for p in preds], margin) if hints.trials and not rare else ()
        label = self.model.label if calibrated else "no calibration: default constants (`sdm calibrate` refines)"
        if len(tied) > 1:
            predicted = ", ".join(f"{p.method} {_ms(p.seconds)}" for p in preds if p.method in tied)
            return Trial(tied, hints.trials), f"predicted {predicted}, within {1 + margin:.3g}x of the fastest; {label}{said}"
        others = ", ".join(f"{p.method} {_ms(p.seconds)}" for p in preds[1:])
        return Decision(get_method(preds[0].method), f"auto: {preds[0].method} predicted {_ms(preds[0].seconds)} "
                                                     f"({preds[0].top()}); then {others}; {label}{said}")

    def _candidates(self, hints: Hints) -> list[str]:
        """Methods auto may choose: all, minus those the hints exclude."""
        allowed = [m for m in METHODS if m in method_names()]
        if hints.methods is not None:
            unknown = [m for m in hints.methods if m not in allowed]
            if unknown:
                raise HintError(f"planner hint methods names unknown methods {unknown}; choose from {allowed}")
            allowed = [m for m in allowed if m in hints.methods]
        if hints.buffer_limit is not None:
            params = self.model.params(self.mpi_hints)
            allowed = [m for m in allowed if params.buffer_of(m) <= hints.buffer_limit] or ["posix"]
        return allowed


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms"


def _trying(trial: Trial, predicted: str, turn: int | None = None) -> Decision:
    """The decision for turn *turn* of a trial (default: its next access)."""
    turn = trial.done if turn is None else turn
    method = trial.methods[turn % len(trial.methods)]
    return Decision(get_method(method), f"auto (trial, access {turn + 1} of {trial.length}): trying {method} of "
                                        f"{', '.join(trial.methods)}; {predicted}")


def _bounded(cache: dict) -> dict:
    """*cache* with room for one more entry (the oldest goes beyond 256)."""
    if len(cache) >= 256:
        cache.pop(next(iter(cache)))
    return cache


def choose_method(requested: str, access: Access | None = None) -> Decision:
    """Validate and resolve a method name without calibration (see :class:`Planner`)."""
    return Planner().choose(requested, access)
