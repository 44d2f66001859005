"""The I/O performance predictor: a described workload's I/O time before running it.

Shen, Liao and Choudhary's predictor takes the number of iterations, array sizes,
number of datasets, frequency of dumps and access pattern, and computes the I/O cost
of the naive and the optimized approaches from the measured constants, so a user can
choose parameters -- and an I/O strategy -- before spending machine time.  Here the
workload is a group of equally shaped datasets written every ``every`` iterations by
``ranks`` ranks with a distribution such as ``(Block, Block, *)``; for every method
(and ``auto``) and every file organization level the predicted seconds are:

``writes * (T_method + T_commit + T_checksum + T_sync) + files_opened(level) * T_open
+ held_files(level) * T_new_handle``

For ``auto`` under a tie (:mod:`sdm.planner.trials`), the first accesses are the trial's,
each contender's prediction in turn, and the rest the contender predicted fastest.

plus, when the data will be read back (``reads`` per written step), the same for the
reads.  Levels differ in the files opened: one per dataset and step (level 1), one per
dataset (level 2), one for the group (level 3).
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from . import Access, Planner, row_bytes
from .hints import parse_pattern
from .model import METHODS, CostModel
from .trials import Trial

__all__ = ["Workload", "distribution_of", "workload_access", "opened_files", "held_files", "predict"]


@dataclass(frozen=True)
class Workload:
    """What the application will do (the predictor's input).

    Attributes
    ----------
    shape : tuple of int
        Global shape of every dataset.
    dtype : str
        numpy dtype of the datasets.
    distribution : str
        Access pattern, e.g. ``"(Block, Block, *)"``, ``"block"`` (every dimension),
        ``"cyclic"``.
    datasets : int
        Datasets written at every dump.
    every : int
        Dump period in iterations.
    iterations : int
        Iterations of the run.
    ranks : int
        MPI ranks.
    ghosts : int
        Ghost layer width of the local arrays (block distributions).
    reads : float
        Expected reads of each written step (the ``frequency`` hint).
    read_distribution : str, optional
        Access pattern of the reads (default: the writers').
    order : str
        Storage order.
    sync : bool
        Whether every write is synced to storage.
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


def _dims(n: int, k: int) -> list[int]:
    """A balanced factorization of *n* into *k* factors, largest first (MPI_Dims_create)."""
    out = [1] * k
    for p in _prime_factors(n)[::-1]:
        out[int(np.argmin(out))] *= p
    return sorted(out, reverse=True)


def _prime_factors(n: int) -> list[int]:
    out, f = [], 2
    while f * f <= n:
        while n % f == 0:
            out.append(f)
            n //= f
        f += 1
    if n > 1:
        out.append(n)
    return out


def distribution_of(text: str, shape: tuple[int, ...], ranks: int, ghosts: int = 0) -> Any:
    """An SDM distribution for a pattern such as ``"(Block, Block, *)"`` on *ranks* ranks.

    ``"block"`` and ``"cyclic"`` alone apply to every dimension.
    """
    from ..layout import Block, BlockCyclic

    words = parse_pattern(text)
    if len(words) == 1 and len(shape) > 1:
        words = words * len(shape)
    if len(words) != len(shape):
        raise ValueError(f"access pattern {text!r} has {len(words)} dimensions; the shape {shape} has {len(shape)}")
    split = [d for d, w in enumerate(words) if w != "*"]
    grid = [1] * len(shape)
    for d, g in zip(split, _dims(ranks, len(split)) if split else []):
        grid[d] = g
    if not split and ranks > 1:
        grid[0] = ranks
    if all(w in ("block", "*") for w in words):
        return Block(grid=grid, ghosts=[ghosts if w == "block" else 0 for w in words])
    blocks = [1 if w == "cyclic" else max(1, math.ceil(n / g)) for w, n, g in zip(words, shape, grid)]
    return BlockCyclic(grid=grid, blocks=blocks)


def workload_access(w: Workload, writing: bool, hints: dict[str, Any] | None = None) -> Access:
    """The planner's :class:`Access` for one dataset write (or read) of the workload."""
    from ..layout.regions import rank_stats

    text = w.distribution if writing or not w.read_distribution else w.read_distribution
    dist = distribution_of(text, w.shape, w.ranks, w.ghosts if writing or not w.read_distribution else 0)
    item = np.dtype(w.dtype).itemsize
    stats = []
    for r in range(w.ranks):
        piece = dist.piece(w.shape, w.ranks, r)
        strides = _strides(piece.memory_shape, w.order, item)
        stats.append(rank_stats(piece, w.order, item, strides).as_tuple())
    return Access.from_stats(stats, writing=writing, level=3, itemsize=item, total_bytes=w.nbytes,
                             hints=hints, order=w.order, row_bytes=row_bytes(w.shape, item, w.order))


def _strides(shape: tuple[int, ...], order: str, item: int) -> list[int]:
    from ..layout.regions import file_strides

    return file_strides(shape, order, item)


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
        ``workload``, ``model``, ``rows`` (per method incl. ``auto``: ``write_access``,
        ``read_access``, ``total`` by level) and ``auto`` (the chosen methods and why).
    """
    planner = Planner(hints=hints, mpi_hints=mpi_hints, model=model)
    wa = workload_access(w, True, hints)
    ra = workload_access(w, False, hints) if w.reads else None
    wpred = {p.method: p for p in model.predict_all(wa, mpi_hints)}
    # what a new handle's first write adds (ROMIO's collective buffer touched first), per file held open
    fresh = {m: model.new_handle(m, wa, mpi_hints) for m in METHODS}
    rpred = {p.method: p for p in model.predict_all(ra, mpi_hints)} if ra is not None else {}
    wdec = planner.choose("auto", wa)
    rdec = planner.choose("auto", ra) if ra is not None else None
    nreads = w.writes * w.reads
    # auto's first accesses measure a tie the model cannot break: each contender takes its turns
    wtrial, rtrial = planner.trial(wa), (planner.trial(ra) if ra is not None else None)
    rows = []
    for m in [*METHODS, "auto"]:
        wm = wdec.method.name if m == "auto" else m
        rm = (rdec.method.name if rdec is not None else None) if m == "auto" else m
        write_overhead = model.overhead(w.nbytes, w.ranks, writing=True, sync=w.sync)
        read_overhead = model.overhead(w.nbytes, w.ranks, writing=False) if rpred else 0.0
        per_write = wpred[wm].seconds + write_overhead
        per_read = (rpred[rm].seconds + read_overhead) if rpred else 0.0
        writes = _accesses(wtrial if m == "auto" else None, wpred, wm, w.writes) + w.writes * write_overhead
        reads = (_accesses(rtrial if m == "auto" else None, rpred, rm, nreads) + nreads * read_overhead
                 if rpred else 0.0)
        totals = {}
        for level in (1, 2, 3):
            opens = (opened_files(level, w) * model.constants["open"] * (2 if nreads else 1)
                     + held_files(level, w) * fresh[wm])
            totals[level] = writes + reads + opens
        rows.append({"method": m, "write_method": wm, "read_method": rm, "write_access": wpred[wm].seconds,
                     "read_access": rpred[rm].seconds if rpred else None, "per_write": per_write,
                     "per_held_file": fresh[wm],
                     "per_read": per_read if rpred else None, "total": totals})
    return {
        "workload": {**asdict(w), "dumps": w.dumps, "writes": w.writes, "bytes_per_write": w.nbytes},
        "model": model.label,
        "calibrated": model.calibrated,
        "rows": rows,
        "auto": {"write": wdec.reason, "read": rdec.reason if rdec is not None else None},
    }


def _accesses(trial: Trial | None, preds: dict[str, Any], method: str, n: int) -> float:
    """Predicted seconds of *n* accesses by *method*, or, under a tie's *trial*, by its schedule."""
    if trial is None:
        return n * preds[method].seconds
    return trial.cost({m: preds[m].seconds for m in trial.methods}, n)


def parse_shape(text: str) -> tuple[int, ...]:
    """``"256x256x64"`` or ``"256,256,64"`` -> ``(256, 256, 64)``."""
    parts = [p for p in re.split(r"[x,\s]+", text.strip()) if p]
    try:
        shape = tuple(int(p) for p in parts)
    except ValueError:
        raise ValueError(f"shape {text!r}: write sizes like 256x256x64") from None
    if not shape or any(n <= 0 for n in shape):
        raise ValueError(f"shape {text!r}: sizes must be positive")
    return shape
