"""The I/O performance predictor: a described workload's I/O time before running it.

Shen, Liao and Choudhary's predictor computes, from the measured constants, the I/O
cost of a run described by its iterations, array sizes, datasets, dump frequency and
access pattern, so a user can choose parameters -- and an I/O strategy -- before
spending machine time.  Here the workload is a group of equally shaped datasets
written every ``every`` iterations by ``ranks`` ranks with a pattern such as
``(Block, Block, *)``, perhaps read back ``reads`` times per step; for every method
(and ``auto``) and every file organization level the predicted seconds are

``writes * (T_method + T_commit + T_checksum + T_sync) + reads * (T_method + T_lookup)
+ files_opened(level) * T_open + held_files(level) * T_new_handle``

Level 1 opens a file per dataset and step, level 2 one per dataset, level 3 one for
the group.  Under a tie (:mod:`sdm.planner.trials`) ``auto``'s first accesses are the
trial's, each contender's prediction in turn, the rest the contender predicted fastest.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from . import Access, Planner, row_bytes
from .model import METHODS, CostModel, Prediction
from .trials import Trial

__all__ = ["Workload", "workload_access", "opened_files", "held_files", "predict"]


@dataclass(frozen=True)
class Workload:
    """What the application will do (the predictor's input).

    ``distribution`` (and ``read_distribution``, default the writers') is an access
    pattern (:func:`sdm.layout.patterns.distribution_of`); ``ghosts`` the ghost layer
    width of the writers' local arrays; ``reads`` the expected reads of each written
    step (the ``frequency`` hint); ``sync`` whether every write is synced.
    """

    shape: tuple[int, ...]
    dtype: str = "f8"
    distribution: str = "block"
    datasets: int = 1
    every: int = 1
    iterations: int = 1
    ranks: int = 1
    ghosts: int = 0
    reads: float = 0.0
    read_distribution: str | None = None
    order: str = "C"
    sync: bool = True

    @property
    def dumps(self) -> int:
        """Dumps in the run."""
        return self.iterations // self.every if self.every > 0 else 0

    @property
    def writes(self) -> int:
        """Dataset writes in the run."""
        return self.dumps * self.datasets

    @property
    def nbytes(self) -> int:
        """Bytes of one dataset step."""
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize


def workload_access(w: Workload, writing: bool, hints: dict[str, Any] | None = None) -> Access:
    """The planner's :class:`Access` for one dataset write (or read) of the workload."""
    from ..layout.patterns import distribution_of
    from ..layout.regions import file_strides, rank_stats

    reader = None if writing else w.read_distribution  # the readers' own pattern, without ghosts
    dist = distribution_of(reader or w.distribution, w.shape, w.ranks, 0 if reader else w.ghosts)
    item = np.dtype(w.dtype).itemsize
    stats = []
    for r in range(w.ranks):
        piece = dist.piece(w.shape, w.ranks, r)
        stats.append(rank_stats(piece, w.order, item, file_strides(piece.memory_shape, w.order, item)).as_tuple())
    return Access.from_stats(stats, writing=writing, level=3, itemsize=item, total_bytes=w.nbytes,
                             hints=hints, order=w.order, row_bytes=row_bytes(w.shape, item, w.order))


def opened_files(level: int, w: Workload) -> int:
    """Files opened (and closed) in the run at *level*."""
    return {1: w.writes, 2: w.datasets, 3: 1}[level]


def held_files(level: int, w: Workload) -> int:
    """Files open at the same time at *level*: SDM keeps the files that later writes append
    to open (levels 2 and 3) and closes a level-1 file after its write."""
    return {1: 1, 2: w.datasets, 3: 1}[level]


def predict(w: Workload, model: CostModel, hints: dict[str, Any] | None = None,
            mpi_hints: dict[str, Any] | None = None) -> dict[str, Any]:
    """Predicted seconds per method and level for the run (and per single access).

    Returns
    -------
    dict
        ``workload``, ``model``, ``calibrated``, ``rows`` (per method and ``auto``:
        ``write_access``, ``read_access``, ``per_write``, ``per_read``, ``per_held_file``,
        ``total`` by level) and ``auto`` (why auto chose what it did).
    """
    planner = Planner(hints=hints, mpi_hints=mpi_hints, model=model)
    wa = workload_access(w, True, hints)
    ra = workload_access(w, False, hints) if w.reads else None
    wpred = {p.method: p for p in model.predict_all(wa, mpi_hints)}
    rpred = {p.method: p for p in model.predict_all(ra, mpi_hints)} if ra is not None else {}
    # what a new handle's first write adds (ROMIO's collective buffer touched first), per file held open
    fresh = {m: model.new_handle(m, wa, mpi_hints) for m in METHODS}
    wdec = planner.choose("auto", wa)
    rdec = planner.choose("auto", ra) if ra is not None else None
    nreads = w.writes * w.reads  # may be fractional (reads per step on average)
    # auto's first accesses measure a tie the model cannot break: each contender takes its turns
    wtrial, rtrial = planner.trial(wa), (planner.trial(ra) if ra is not None else None)
    write_overhead = model.overhead(w.nbytes, w.ranks, writing=True, sync=w.sync)
    read_overhead = model.overhead(w.nbytes, w.ranks, writing=False)
    rows = []
    for m in [*METHODS, "auto"]:
        wm = wdec.method.name if m == "auto" else m
        rm = rdec.method.name if m == "auto" and rdec is not None else m
        writes = _accesses(wtrial if m == "auto" else None, wpred, wm, w.writes) + w.writes * write_overhead
        per_read, reads = None, 0.0
        if rpred:
            per_read = rpred[rm].seconds + read_overhead
            reads = _accesses(rtrial if m == "auto" else None, rpred, rm, nreads) + nreads * read_overhead
        totals = {level: writes + reads + opened_files(level, w) * model.constants["open"] * (2 if nreads else 1)
                  + held_files(level, w) * fresh[wm] for level in (1, 2, 3)}
        rows.append({"method": m, "write_method": wm, "read_method": rm if rpred else None,
                     "write_access": wpred[wm].seconds, "read_access": rpred[rm].seconds if rpred else None,
                     "per_write": wpred[wm].seconds + write_overhead, "per_held_file": fresh[wm],
                     "per_read": per_read, "total": totals})
    return {
        "workload": {**asdict(w), "dumps": w.dumps, "writes": w.writes, "bytes_per_write": w.nbytes},
        "model": model.label,
        "calibrated": model.calibrated,
        "rows": rows,
        "auto": {"write": wdec.reason, "read": rdec.reason if rdec is not None else None},
    }


def _accesses(trial: Trial | None, preds: dict[str, Prediction], method: str, n: float) -> float:
    """Predicted seconds of *n* accesses by *method*, or, under a tie's *trial*, by its schedule."""
    if trial is None:
        return n * preds[method].seconds
    return trial.cost({m: preds[m].seconds for m in trial.methods}, n)
