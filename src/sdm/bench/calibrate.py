"""``sdm calibrate``: measure the cost-model constants of a storage target.

A short micro-benchmark, run collectively by the ranks that will use the target:

1. direct timings: collective open and close, ``MPI_File_sync`` of little and of many
   dirty bytes, the per-write overhead of SDM itself (a tiny dataset written and read
   through a session with a scratch SQLite catalog), the write-time checksum and a
   large memory copy per byte;
2. every I/O method on a set of small NCIO patterns chosen so that each constant of
   the model (:mod:`sdm.planner.model`) is exercised: tiny and large requests,
   sequential and jumping, holes, noncontiguous memory, interleaved ranks;
3. a fit of the constants to those timings: nonnegative least squares on relative
   errors, with a weak pull towards the defaults so that a constant the runs hardly
   see stays plausible;
4. a check of the fit (:func:`fit_problems`): a fit under load can be degenerate -- a
   byte cost of 0, or constants that predict the samples no better than one constant
   time would -- and then ranks the methods worse than the defaults do.  Such a fit
   is refused (:class:`~sdm.errors.CalibrationError`), never stored.

The constants, the ROMIO settings in effect and every sample are stored in the
catalog's ``io_calibrations`` table for the target directory, where sessions writing
under that directory find them (``Planner``, ``sdm predict``).
"""

from __future__ import annotations

import functools
import math
import os
import statistics
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
from mpi4py import MPI

from ..errors import CalibrationError
from .measure import (WARM_BYTES, data_file, pattern_access, run_method, sample_calls, scratch_file, steady_memory,
                      timed)
from ..storage.durability import make_durable
from ..planner.model import CONSTANTS, DEFAULTS, CostModel, structure
from .patterns import Pattern

__all__ = ["RUNS", "QUICK_RUNS", "REPEATS", "MIN_SIZES", "Sample", "calibrate", "check_fit", "fit", "fit_problems",
           "nnls", "store"]

K, M = 1 << 10, 1 << 20
REPEATS = 5  #: timed repeats per calibration sample (median)

#: (method, pattern) pairs timed for writes and reads; symmetric over the ranks.
RUNS: tuple[tuple[str, Pattern], ...] = (
    ("posix", Pattern(8, 4096)), ("posix", Pattern(64, 2048, mem_contig=False, file_contig=True)),
    ("posix", Pattern(4 * K, 256)), ("posix", Pattern(64 * K, 32)), ("posix", Pattern(256 * K, 8)),
    ("posix", Pattern(16 * M, 1)),
    ("list", Pattern(8, 8192)), ("list", Pattern(64, 2048, mem_contig=False, file_contig=True)),
    ("list", Pattern(4 * K, 128)), ("list", Pattern(64 * K, 32)),
    ("datatype", Pattern(8, 16384)), ("datatype", Pattern(64, 4096, 256)),
    ("datatype", Pattern(64, 4096, mem_contig=False, file_contig=True)), ("datatype", Pattern(1 * M, 4)),
    ("datatype", Pattern(8, 16384, mem_contig=False, file_contig=True)),  # tells pack per block from per byte
    ("sieving", Pattern(8, 16384)), ("sieving", Pattern(64, 512, 64 * K)), ("sieving", Pattern(4 * K, 256)),
    ("sieving", Pattern(64, 4096, 0, mem_contig=False)),
    ("servers", Pattern(8, 16384)), ("servers", Pattern(4 * K, 512)), ("servers", Pattern(256 * K, 8)),
    ("servers", Pattern(64, 4096, 64)),
    ("collective", Pattern(8, 8192)), ("collective", Pattern(4 * K, 256)), ("collective", Pattern(256 * K, 8)),
    ("collective", Pattern(64, 2048, file_contig=True)),
    *((m, Pattern(64, 4)) for m in ("posix", "list", "datatype", "sieving", "collective", "servers")),  # fixed costs
    ("datatype", Pattern(64, 1)),  # a contiguous view: no data sieving, so no lock (tells base from lock)
    ("posix", Pattern(64, 512, 16 * K)), ("list", Pattern(64, 512, 16 * K)),  # a new page per region
    ("servers", Pattern(64, 32768)),  # several rounds
)
#: A smaller set for tests and a first look: one small noncontiguous pattern per method, and two
#: larger posix ones (so that the byte costs see :data:`MIN_SIZES` sizes).
QUICK_RUNS: tuple[tuple[str, Pattern], ...] = (
    *((m, Pattern(64, 64)) for m in ("posix", "list", "datatype", "sieving", "collective", "servers")),
    ("posix", Pattern(4 * K, 16)), ("posix", Pattern(256 * K, 2)))
#: Distinct bytes per rank the samples must move for a fit to tell byte costs from fixed ones.
MIN_SIZES = 3


@dataclass(frozen=True)
class Sample:
    """One timed configuration: what ran, its cost units, and the median seconds."""

    method: str
    pattern: Pattern
    writing: bool
    counts: dict[str, float]
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return {"method": self.method, "pattern": self.pattern.as_dict(), "writing": self.writing,
                "seconds": self.seconds, "counts": self.counts}


# --------------------------------------------------------------------------- fitting
def nnls(a: np.ndarray, b: np.ndarray, iterations: int = 500) -> np.ndarray:
    """Nonnegative least squares ``min ||a x - b||, x >= 0`` (Lawson and Hanson)."""
    n = a.shape[1]
    x = np.zeros(n)
    passive = np.zeros(n, dtype=bool)
    w = a.T @ (b - a @ x)
    for _ in range(iterations):
        if passive.all() or w[~passive].max(initial=-np.inf) <= 1e-12 * max(1.0, np.abs(w).max()):
            break
        j = int(np.argmax(np.where(passive, -np.inf, w)))
        passive[j] = True
        while True:
            z = np.zeros(n)
            z[passive] = np.linalg.lstsq(a[:, passive], b, rcond=None)[0]
            if (z[passive] > 0).all():
                x = z
                break
            bad = passive & (z <= 0)
            alpha = np.min(x[bad] / (x[bad] - z[bad]))
            x = x + alpha * (z - x)
            passive &= x > 1e-15
        w = a.T @ (b - a @ x)
    return x


def fit(samples: list[Sample], prior: dict[str, float] | None = None, weight: float = 0.03,
        known: dict[str, float] | None = None) -> dict[str, float]:
    """Constants minimizing relative errors on *samples*, pulled weakly to *prior*.

    Parameters
    ----------
    samples : list of Sample
    prior : dict, optional
        Values the fit falls back to for constants the samples do not determine
        (default :data:`~sdm.planner.model.DEFAULTS`).
    weight : float
        Strength of the pull, relative to one sample.
    known : dict, optional
        Constants measured directly: their share of each sample is taken off before
        the others are fitted, and they are returned as given.
    """
    prior = {**DEFAULTS, **(prior or {})}
    known = {k: v for k, v in (known or {}).items() if k in CONSTANTS}
    names = [k for k in CONSTANTS if k not in known]
    rows = [[s.counts.get(k, 0.0) / s.seconds for k in names] for s in samples]
    rhs = [1.0 - sum(v * s.counts.get(k, 0.0) for k, v in known.items()) / s.seconds for s in samples]
    for i, k in enumerate(names):
        row = [0.0] * len(names)
        row[i] = weight / prior[k] if prior[k] > 0 else 0.0
        rows.append(row)
        rhs.append(weight if prior[k] > 0 else 0.0)
    a, b = np.array(rows), np.array(rhs)
    scale = np.array([prior[k] if prior[k] > 0 else 1.0 for k in names])  # solve in units of the prior
    x = nnls(a * scale, b) * scale
    return {**{k: float(v) for k, v in zip(names, x)}, **known}


def _relative_rms(predicted: np.ndarray, measured: np.ndarray) -> float:
    return float(np.sqrt(np.mean((predicted / measured - 1.0) ** 2)))


def fit_problems(samples: list[Sample], constants: dict[str, float]) -> list[str]:
    """What makes a fit of *constants* to *samples* unusable (empty: none), in words.

    Refused: a constant that is not a finite number >= 0; a byte cost (``byte_w``,
    ``byte_r``) of 0 or less (bandwidth without limit: every method that moves more
    bytes looks free); samples of fewer than :data:`MIN_SIZES` distinct sizes (bytes per
    rank), which cannot tell a byte's cost from a call's; and a fit whose relative error
    on the samples is no smaller than that of the best single constant time for every
    sample (the constants explain nothing of the differences between samples).  Without
    *samples* only the constants are checked.
    """
    out = []
    bad = sorted(k for k, v in constants.items() if not (math.isfinite(v) and v >= 0))
    if bad:
        out.append(f"{', '.join(bad)} not a finite number >= 0")
    zero = [k for k in ("byte_w", "byte_r") if k not in bad and constants.get(k, 0.0) <= 0]
    if zero:
        out.append(f"{' and '.join(zero)} fitted to 0 (a byte would cost nothing)")
    timed = [s for s in samples if math.isfinite(s.seconds) and s.seconds > 0]
    sizes = len({s.pattern.size * s.pattern.count for s in timed})
    if samples and sizes < MIN_SIZES:
        out.append(f"the samples move {sizes} distinct size{'s' if sizes != 1 else ''} per rank "
                   f"(at least {MIN_SIZES} tell a byte's cost from a call's)")
    if timed and not bad:
        measured = np.array([s.seconds for s in timed])
        predicted = np.array([sum(n * constants.get(k, 0.0) for k, n in s.counts.items()) for s in timed])
        flat = float(np.sum(1 / measured) / np.sum(1 / measured ** 2))  # the best constant for relative errors
        err, flat_err = _relative_rms(predicted, measured), _relative_rms(np.full_like(measured, flat), measured)
        if err >= flat_err:
            out.append(f"its error on the samples (rms {err:.0%} of the measured times) is no smaller than one "
                       f"constant time's ({flat_err:.0%})")
    return out


def check_fit(samples: list[Sample], constants: dict[str, float]) -> None:
    """Refuse a degenerate fit (see :func:`fit_problems`).

    Raises
    ------
    CalibrationError
        With every problem found, and what to do.
    """
    problems = fit_problems(samples, constants)
    if problems:
        raise CalibrationError(f"the fit is degenerate: {'; '.join(problems)}. Not stored: calibrate again when "
                               f"the machine is quieter, or with more --repeats; until then `auto` uses the "
                               f"default constants (or the calibration stored before)")


# ------------------------------------------------------------------------ measuring
def _median_time(comm: MPI.Intracomm, fn: Callable[[], Any], repeats: int) -> float:
    fn()  # warm-up
    return statistics.median(timed(comm, fn) for _ in range(repeats))


def _open_close(comm: MPI.Intracomm, directory: Path, repeats: int) -> float:
    path = comm.bcast(str(directory / f".sdm-calibrate-open-{os.getpid()}.dat"), root=0)

    def once() -> None:
        MPI.File.Open(comm, path, MPI.MODE_RDWR | MPI.MODE_CREATE).Close()

    t = _median_time(comm, once, repeats)
    if comm.Get_rank() == 0:
        Path(path).unlink(missing_ok=True)
    return t


def _fsync(comm: MPI.Intracomm, directory: Path, repeats: int) -> tuple[float, float]:
    """Seconds of a sync as SDM makes it (:func:`~sdm.storage.make_durable`) with nothing dirty, and per dirty byte."""
    size, rank = comm.Get_size(), comm.Get_rank()
    per_rank = 4 * M
    data = np.ones(per_rank, dtype=np.uint8)
    with scratch_file(comm, directory, per_rank * size, name="sdm-calibrate-sync") as (fh, path):
        def sync() -> None:
            make_durable(comm, fh, path)

        idle = _median_time(comm, sync, repeats)
        samples = []
        for _ in range(repeats):
            fh.Write_at(rank * per_rank, data)
            samples.append(timed(comm, sync))
    full = statistics.median(samples)
    return idle, max(full - idle, 0.0) / (per_rank * size)


def _sdm_overhead(comm: MPI.Intracomm, directory: Path, steps: int) -> dict[str, float]:
    """Seconds an SDM write and read of a tiny dataset take beyond the method (catalog, allgathers,
    checksum): ``commit`` and ``lookup``, first accesses left out."""
    import shutil

    import sdm

    root = Path(comm.bcast(tempfile.mkdtemp(prefix=".sdm-calibrate-", dir=directory) if comm.Get_rank() == 0
                           else None, root=0))
    try:
        with sdm.open("sdm-calibrate", root=root, catalog=f"sqlite:///{root}/catalog.db", sync=False,
                      comm=comm, method="datatype") as s:
            g = s.make_group("g", ["x"], dtype="f8", shape=(comm.Get_size(),), level=2)
            one = np.ones(g.local_shape("x"))
            g.write("x", 0, one)
            g.read("x", 0)
            return {"commit": statistics.median(timed(comm, functools.partial(g.write, "x", k, one)) for k in range(1, steps + 1)),
                    "lookup": statistics.median(timed(comm, functools.partial(g.read, "x", k)) for k in range(1, steps + 1))}
    finally:
        comm.Barrier()
        if comm.Get_rank() == 0:
            shutil.rmtree(root, ignore_errors=True)


def _checksum_byte(comm: MPI.Intracomm, nbytes: int) -> float:
    """Seconds per byte of SDM's write-time checksum (``integrity.ALGORITHM``), all ranks at once."""
    from ..integrity import partial

    n = nbytes // 8
    values = np.arange(n, dtype=np.float64)
    return _median_time(comm, lambda: partial(values, [np.arange(n)], (n,), "C"), 3) / nbytes


def _copy_byte(comm: MPI.Intracomm, nbytes: int = 4 * M) -> float:
    """Seconds per byte of a large memory copy, all ranks at once (``copy``).

    Measured apart because in the method samples a copy always comes with a file
    access of the same bytes (ROMIO's data sieving copies out of the buffer it read,
    SDM's sieving out of its slab), and the fit cannot tell the two apart: left to
    it, ``copy`` fitted to 0 and large sieved reads were predicted at 0.6 of measured.
    *nbytes* is the size of the methods' buffers (ROMIO's ``ind_rd_buffer_size``).
    """
    source = np.ones(nbytes, dtype=np.uint8)
    target = np.zeros(nbytes, dtype=np.uint8)
    return _median_time(comm, lambda: np.copyto(target, source), 5) / nbytes


def _romio(fh: MPI.File) -> dict[str, int]:
    """The ROMIO buffer settings and aggregator count the target's files get by default."""
    info = fh.Get_info()
    out = {}
    for key in ("cb_nodes", "cb_buffer_size", "ind_rd_buffer_size", "ind_wr_buffer_size"):
        value = info.Get(key)
        if value is not None and str(value).isdigit():
            out[key] = int(value)
    info.Free()
    return out


def measure_runs(comm: MPI.Intracomm, directory: Path, runs: tuple[tuple[str, Pattern], ...], repeats: int,
                 romio: dict[str, int], progress: Callable[[str], None] | None = None,
                 quick: bool = False) -> list[Sample]:
    """Time every (method, pattern) for writes and reads, each sample after untimed calls (collective).

    Samples are taken as the NCIO benchmark takes them (:func:`~sdm.bench.measure.run_method`
    after untimed calls), so that the constants fitted here predict what the benchmark
    measures.  The repeats are taken in rounds over all runs, not one run after another:
    a disturbance of a second or two (a virtual machine's host taking its cores back:
    one calibration here saw every sample of two seconds 2-4x slow) then spoils one
    repeat of many samples, which their medians discard, instead of every repeat of a few.

    A round comes back to a sample after every other one ran: each sample starts with
    untimed calls until its data is read at full speed again
    (:func:`~sdm.bench.measure.settle_calls`), as the benchmark's samples do.
    """
    nprocs = comm.Get_size()
    model = CostModel(nprocs=nprocs, cores=os.cpu_count() or 1, romio=romio)
    cases = [(method, pattern, writing) for method, pattern in runs for writing in (True, False)]
    inner: dict[tuple[str, Pattern, bool], int] = {}
    settle: dict[tuple[str, Pattern, bool], int] = {}
    times: dict[tuple[str, Pattern, bool], list[float]] = {case: [] for case in cases}
    with ExitStack() as files:
        # every data file written (and synced) before any timing: a sample taken right after a
        # file was written and synced ran up to 2x slower while the file system caught up
        data = {pattern: files.enter_context(data_file(comm, directory, pattern))[0] for _, pattern in runs}
        for rnd in range(repeats):
            for case in cases:
                method, pattern, writing = case
                if case not in inner:
                    first, _, _ = run_method(comm, directory, pattern, method, writing, 1 if quick else 3,
                                             data=data[pattern])  # warm-up
                    inner[case], settle[case] = sample_calls(comm, min(first), quick)
                t, _, _ = run_method(comm, directory, pattern, method, writing, 1, data=data[pattern],
                                     inner=inner[case], settle=settle[case])
                times[case] += t
            if progress is not None:
                progress(f"round {rnd + 1}/{repeats} of {len(runs)} method runs timed")
    out = []
    for method, pattern, writing in cases:
        access = pattern_access(comm, pattern, writing)
        counts = structure(method, access, model.params()).counts()
        out.append(Sample(method, pattern, writing, counts, statistics.median(times[(method, pattern, writing)])))
    return out


def calibrate(comm: MPI.Intracomm, directory: str | Path, *, quick: bool = False, repeats: int | None = None,
              progress: Callable[[str], None] | None = None) -> tuple[CostModel, list[Sample], dict[str, float]]:
    """Measure and fit the constants for *directory* (collective over *comm*).

    Parameters
    ----------
    repeats : int, optional
        Timed repeats per sample, median taken (default :data:`REPEATS`).

    Returns
    -------
    (model, samples, direct)
        The fitted model (the same on every rank), the method samples and the
        directly measured constants.
    """
    directory = Path(directory).resolve()
    if comm.Get_rank() == 0:
        directory.mkdir(parents=True, exist_ok=True)
    comm.Barrier()
    warm = WARM_BYTES // 8 if quick else WARM_BYTES
    with steady_memory(comm, warm) as memory:
        if progress is not None:
            progress(f"memory pre-touched ({warm >> 20} MiB at {memory['touch_rate'] / 1e9:.2g} GB/s)")
        return _calibrate(comm, directory, quick, REPEATS if repeats is None else repeats, progress)


def _calibrate(comm: MPI.Intracomm, directory: Path, quick: bool, repeats: int,
               progress: Callable[[str], None] | None) -> tuple[CostModel, list[Sample], dict[str, float]]:
    t0 = time.perf_counter()
    with scratch_file(comm, directory, 0, name="sdm-calibrate-info") as (fh, _):
        romio = _romio(fh)
    direct = {"open": _open_close(comm, directory, repeats * 3)}
    direct["fsync"], direct["fsync_byte"] = _fsync(comm, directory, repeats)
    direct.update(_sdm_overhead(comm, directory, 3 if quick else 8))
    direct["checksum_byte"] = _checksum_byte(comm, (1 if quick else 8) * M)
    direct["copy"] = _copy_byte(comm)
    if progress is not None:
        progress("open, sync and SDM overhead measured")
    samples = measure_runs(comm, directory, QUICK_RUNS if quick else RUNS, repeats, romio, progress, quick)
    constants = fit(samples, known=direct) if comm.Get_rank() == 0 else None
    constants = comm.bcast(constants, root=0)
    model = CostModel(constants={**DEFAULTS, **constants, **direct}, nprocs=comm.Get_size(),
                      cores=comm.bcast(os.cpu_count() or 1, root=0), romio=romio, calibrated=True,
                      label=f"calibration of {directory} ({comm.Get_size()} ranks, {time.perf_counter() - t0:.0f} s)")
    return model, samples, direct


def store(url: str, target: str | Path, model: CostModel, samples: list[Sample] | None = None,
          direct: dict[str, float] | None = None) -> int:
    """Save *model* as the calibration of *target* in the catalog at *url* (rank 0 only); returns its id.

    Raises
    ------
    CalibrationError
        The fit is degenerate (:func:`check_fit` with *samples*): nothing is stored.
    """
    from ..catalog import Catalog

    check_fit(list(samples or ()), dict(model.constants))
    cat = Catalog(url, create=True)
    try:
        extra = {"direct": direct or {}, "samples": [s.as_dict() for s in samples or ()]}
        return cat.save_calibration(str(Path(target).resolve()), model.nprocs, model.to_json(), extra)
    finally:
        cat.close()
