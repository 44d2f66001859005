"""Helpers shared by the I/O-method benchmarks (ncio.py, lbmpi.py, predictor.py).

Collective over the communicator: a scratch directory every rank sees (removed at the
end unless the user gave it), a fresh subdirectory per measurement, the calibration of
a directory stored in its own catalog, printing on rank 0, and the results triple
(JSON, Markdown, PNG) written by rank 0.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import tempfile
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator

from mpi4py import MPI

from sdm._cli.bench import fs_type

__all__ = ["scratch", "fresh", "say", "meta", "provenance", "write_results", "RESULTS"]

RESULTS = Path(__file__).resolve().parent / "results"


@contextmanager
def scratch(comm: MPI.Comm, root: str | None, prefix: str, parent: str | None = None) -> Iterator[Path]:
    """*root*, or a new temporary directory (under *parent*) removed afterwards (the same path on every rank)."""
    base = root or comm.bcast(tempfile.mkdtemp(prefix=prefix, dir=parent) if comm.Get_rank() == 0 else None, root=0)
    try:
        yield Path(base).resolve()
    finally:
        comm.Barrier()
        if comm.Get_rank() == 0 and not root:
            shutil.rmtree(base, ignore_errors=True)


def per_place(disk: str, prefix: str, measure: Callable[[Path], dict[str, Any]]) -> dict[str, Any]:
    """``measure(scratch)`` in a new directory on ``/dev/shm`` and one under *disk* (each removed after):
    ``{"/dev/shm": {"fs": ..., **result}, "disk": {...}}`` (one process)."""
    from sdm._cli.bench import fs_type

    out: dict[str, Any] = {}
    for place, parent in (("/dev/shm", "/dev/shm"), ("disk", disk)):
        with scratch(MPI.COMM_SELF, None, prefix, parent) as where:
            out[place] = {"fs": fs_type(where) or "unknown", **measure(where)}
    return out


def fresh(comm: MPI.Comm, base: Path, name: str) -> Path:
    """An empty directory *base*/*name* (collective)."""
    path = base / name
    if comm.Get_rank() == 0:
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
    comm.Barrier()
    return path


def remove(comm: MPI.Comm, path: Path) -> None:
    """Remove a scratch directory once every rank is done with it (collective)."""
    comm.Barrier()
    if comm.Get_rank() == 0:
        shutil.rmtree(path, ignore_errors=True)
    comm.Barrier()


def say(comm: MPI.Comm) -> Callable[[str], None]:
    """A print function that prints on rank 0 only."""
    return (lambda text: print(text, flush=True)) if comm.Get_rank() == 0 else (lambda text: None)


def meta(comm: MPI.Comm, directory: Path, load_before: float, **extra: Any) -> dict[str, Any]:
    """The measurement's circumstances: SDM version and commit, ranks, cores, file system, load, date, MPI."""
    return {**provenance(), "nprocs": comm.Get_size(), "cores": os.cpu_count(), "fs": fs_type(directory) or "unknown",
            "load_before": load_before, "load_after": os.getloadavg()[0],
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "mpi": MPI.Get_library_version().splitlines()[0].strip(), "python": platform.python_version(),
            "host": platform.node(), **extra}


def calibrated(comm: MPI.Comm, directory: Path, quick: bool) -> Any:
    """A calibration of *directory* (``sdm.bench.calibrate``) when its fit is sound; else SDM's default
    constants, their label saying why (a degenerate fit on a loaded machine), the same on every rank.

    Each benchmark's fresh directories then get the model stored only when it is calibrated
    (:func:`store_model`), so ``auto`` decides there as the benchmark predicts.
    """
    from sdm.bench.calibrate import calibrate, check_fit
    from sdm.errors import CalibrationError
    from sdm.planner.model import CostModel

    model, _, _ = calibrate(comm, directory, quick=quick)
    try:
        check_fit([], dict(model.constants))  # the model is the same on every rank: so is the outcome
    except CalibrationError as exc:
        say(comm)(f"calibration not used: {exc.message}")
        return CostModel(nprocs=comm.Get_size(), cores=os.cpu_count() or 1,
                         label=f"defaults (calibration not used: {exc.message.split('. ')[0]})")
    return model


def store_model(url: str, root: Path, model: Any) -> None:
    """Store *model* as the calibration of *root* in the catalog at *url* (rank 0); defaults are not stored."""
    from sdm.bench.calibrate import store

    if model.calibrated:
        store(url, root, model)


def provenance_text(meta: dict[str, Any]) -> str:
    """The sentence of a Markdown header naming what was measured: ``SDM 0.1.0 at <commit>.``"""
    return f"SDM {meta.get('sdm_version', '?')} at {meta.get('git_commit', 'unknown')}."


def provenance() -> dict[str, Any]:
    """The SDM version and the git commit of the sources measured (``+dirty`` with local changes)."""
    import sdm

    here = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True,
                                check=True).stdout.strip()
        # results written by earlier benchmarks of the same run are not changes to what is measured
        dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no", "--",
                                ":(top)", ":(top,exclude)benchmarks/results"],
                               capture_output=True, text=True, check=True).stdout.strip()
        commit += "+dirty" if dirty else ""
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    return {"sdm_version": sdm.__version__, "git_commit": commit}


def rounded(value: Any) -> Any:
    """*value* with every float to 9 significant digits: far finer than any timing's noise (and than the
    relative tolerance of the benchmarks' own checks of sums), and the results directory stays small."""
    if isinstance(value, float):
        return float(f"{value:.9g}")
    if isinstance(value, (list, tuple)):
        return [rounded(v) for v in value]
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    return value


def write_results(out: Path, name: str, data: dict[str, Any], markdown: str,
                  plot: Callable[[Path], None]) -> None:
    """``<name>.json`` (compact), ``<name>.md`` and ``<name>.png`` in *out*; prints the Markdown."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(rounded(data), separators=(",", ":"), default=str))  # compact
    (out / f"{name}.md").write_text(markdown)
    plot(out / f"{name}.png")
    print(markdown)
