"""What the irregular templates (FUN3D, Rayleigh-Taylor, CE-QUAL-ICM) share.

Timed phases (:class:`Phases`), ranks taking turns (:func:`sequential`), the files SDM wrote compared with files written some other way
(:func:`compare_writes`), the rich report (:func:`print_phases`) and the command-line
options the three have in common.
"""

from __future__ import annotations

import argparse
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np
from mpi4py import MPI

from sdm.catalog import Catalog, redact_url

from ._template import MB, _catalog_summary

__all__ = [
    "MB",
    "Phases",
    "catalog_writes",
    "compare_writes",
    "sequential",
    "print_phases",
    "print_catalog",
    "add_arguments",
    "summary",
    "inputs_dir",
    "parts_for",
    "shared_result",
    "print_verdict",
    "exit_status",
]

class Phases:
    """Wall time of named, barrier-aligned phases (slowest rank) and the bytes they moved."""

    def __init__(self, comm: MPI.Comm) -> None:
        self.comm = comm
        self.seconds: dict[str, float] = {}
        self.nbytes: dict[str, int] = {}

    @contextmanager
    def __call__(self, name: str, nbytes: int = 0) -> Iterator[None]:
        """Time a section (a barrier first, so the slowest rank's time is what counts)."""
        self.comm.Barrier()
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0
            self.nbytes[name] = self.nbytes.get(name, 0) + int(nbytes)

    def totals(self) -> dict[str, dict[str, float]]:
        """``{phase: {"seconds", "bytes", "mbps"}}`` with the slowest rank's seconds (collective)."""
        names = list(self.seconds)
        worst = np.array([self.seconds[n] for n in names], dtype=np.float64)
        self.comm.Allreduce(MPI.IN_PLACE, worst, op=MPI.MAX)
        out = {}
        for n, s in zip(names, worst):
            b = self.nbytes[n]
            out[n] = {"seconds": float(s), "bytes": b, "mbps": b / MB / s if s > 0 and b else 0.0}
        return out


@contextmanager
def sequential(comm: MPI.Comm) -> Iterator[None]:
    """Let the ranks run the block one after another, in rank order (a token passes on).

    Raises on every rank what the block raised on any (the token still travels).
    """
    rank, size = comm.Get_rank(), comm.Get_size()
    if rank > 0:
        comm.recv(source=rank - 1, tag=77)
    error = None
    try:
        yield
    except Exception as exc:  # noqa: BLE001 - reported below on every rank
        error = f"{type(exc).__name__}: {exc}"
    if rank < size - 1:
        comm.send(None, dest=rank + 1, tag=77)
    errors = [e for e in comm.allgather(error) if e]
    if errors:
        raise RuntimeError(f"a rank failed in its turn: {errors[0]}")


def catalog_writes(url: str, run_id: int) -> list[tuple[str, str, Any]]:
    """``(group, dataset, write record)`` of a run, in write order (any rank)."""
    cat = Catalog(url, create=False)
    try:
        return list(cat.writes(run_id))
    finally:
        cat.close()


def compare_writes(url: str, run_id: int, root: str | Path, expected: Callable[[str, str, int], np.ndarray]) -> list[str]:
    """Compare the bytes of every write of a run with ``expected(group, dataset, step)``.

    Reads the data files with ``numpy.memmap`` at the offsets the catalog records (no
    SDM read path involved). Returns a description of each write that differs.
    """
    bad = []
    for gname, dname, w in catalog_writes(url, run_id):
        want = np.ascontiguousarray(expected(gname, dname, w.step))
        if want.nbytes != w.nbytes:
            bad.append(f"{gname}/{dname} step {w.step}: {w.nbytes} bytes on disk, {want.nbytes} expected")
            continue
        got = np.memmap(Path(root) / w.path, dtype=np.uint8, mode="r", offset=w.offset, shape=(w.nbytes,))
        if not np.array_equal(got, want.view(np.uint8).ravel()):
            bad.append(f"{gname}/{dname} step {w.step} ({w.path} at {w.offset})")
    return bad


def summary(url: str, run_id: int) -> dict[str, Any]:
    """What the catalog holds about a run (groups, datasets, steps, files, bytes)."""
    return _catalog_summary(url, run_id)


def print_catalog(title: str, groups: Sequence[dict[str, Any]]) -> None:
    """The per-group catalog summary as a rich table (rank 0)."""
    from rich.console import Console
    from rich.table import Table

    t = Table(title=title)
    for col in ("group", "datasets", "steps", "writes", "files", "MB"):
        t.add_column(col, justify="left" if col in ("group", "datasets", "steps") else "right")
    for g in groups:
        steps = g["steps"]
        shown = ", ".join(map(str, steps)) if len(steps) <= 6 else f"{steps[0]}..{steps[-1]} ({len(steps)})"
        t.add_row(g["group"], ", ".join(g["datasets"]), shown, str(g["writes"]), str(g["files"]), f"{g['bytes'] / MB:.2f}")
    Console().print(t)


def print_phases(title: str, phases: dict[str, dict[str, float]], notes: dict[str, str] | None = None) -> None:
    """Timed phases as a rich table: MB, seconds, MB/s and a note per phase (rank 0)."""
    from rich.console import Console
    from rich.table import Table

    t = Table(title=title)
    for col in ("phase", "MB", "seconds", "MB/s", "note"):
        t.add_column(col, justify="left" if col in ("phase", "note") else "right")
    for name, p in phases.items():
        t.add_row(name, f"{p['bytes'] / MB:.2f}" if p["bytes"] else "", f"{p['seconds']:.3f}",
                  f"{p['mbps']:.1f}" if p["mbps"] else "", (notes or {}).get(name, ""))
    Console().print(t)


def add_arguments(p: argparse.ArgumentParser, *, steps: int, steps_help: str) -> None:
    """Options of every irregular template."""
    p.add_argument("--steps", type=int, default=steps, help=steps_help)
    p.add_argument("--level", type=int, choices=(1, 2, 3), default=3, help="file organization level (default 3)")
    p.add_argument("--root", default=None, help="data root (default $SDM_ROOT or ./sdm-data)")
    p.add_argument("--catalog", default=None, help="catalog URL (default sqlite in the data root)")
    p.add_argument("--inputs", default=None, help="directory of the generated inputs (default <root>/inputs)")
    p.add_argument("--method", default="auto", help="SDM I/O method (default auto)")
    p.add_argument("--verify", action="store_true", help="check every byte against an independent numpy computation")
    p.add_argument("--idle-last", action="store_true", help="give the last rank no elements at all")
    p.add_argument("--quiet", action="store_true", help="no progress lines")


def inputs_dir(root: str | Path | None, inputs: str | Path | None) -> Path:
    """Where generated inputs live: *inputs*, else ``<root>/inputs`` (SDM's default root)."""
    from sdm import config

    if inputs is not None:
        return Path(inputs).resolve()
    return (Path(root).resolve() if root is not None else config.default_root()) / "inputs"


def parts_for(comm: MPI.Comm, idle_last: bool) -> int:
    """Number of ranks that get elements (all, or all but the last one)."""
    size = comm.Get_size()
    return size - 1 if idle_last and size > 1 else size


def shared_result(comm: MPI.Comm, url: str | None, run_id: int | None, **fields: Any) -> dict[str, Any]:
    """Rank 0's result (with the catalog summary of the run) on every rank (collective)."""
    result = None
    if comm.Get_rank() == 0:
        result = dict(fields, run_id=run_id, catalog=redact_url(url) if url else url)  # shown: no password
        if run_id is not None:
            result.update(summary(url, run_id))  # type: ignore[arg-type]
    return comm.bcast(result, root=0)


def print_verdict(result: dict[str, Any], what: str) -> None:
    """One line saying whether *what* was verified, then the first differences (rank 0)."""
    from rich.console import Console

    if not result["verified"]:
        return
    con = Console()
    ok = result["mismatches"] == 0
    con.print(("[green]verified:" if ok else f"[red]MISMATCH ({result['mismatches']}):") + f" {what}")
    for line in result["bad_files"][:10]:
        con.print(f"[red]  {line}")


def exit_status(comm: MPI.Comm, result: dict[str, Any], report: Callable[[dict[str, Any]], None]) -> int:
    """Print the report on rank 0; the command's exit status (1 when anything mismatched)."""
    if comm.Get_rank() == 0:
        report(result)
    return 1 if result["mismatches"] else 0
