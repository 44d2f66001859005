"""Timing I/O methods on NCIO patterns: shared by the calibration and the NCIO benchmark.

Every measurement is collective: all ranks start after a barrier and the time is
taken after a closing barrier, so it is the slowest rank's wall time (what the
application waits for).  Reads and writes go through the same :class:`~sdm.io.Transfer`
an SDM write builds; nothing is synced to disk unless asked (method comparisons run
against the page cache, like repeated dumps on a machine with memory to spare).
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
from mpi4py import MPI

from ..io import get_method
from ..io.base import make_transfer
from . import Access, Planner
from .patterns import ITEM, Pattern

__all__ = ["scratch_file", "timed", "pattern_access", "run_method", "calls_for", "poison", "check_file"]


@contextmanager
def scratch_file(comm: MPI.Comm, directory: str | Path, nbytes: int, hints: dict[str, str] | None = None,
                 name: str = "sdm-bench") -> Iterator[tuple[MPI.File, Path]]:
    """A file of *nbytes* zero bytes in *directory*, open on every rank, and its path; removed afterwards."""
    path = Path(directory) / f".{name}-{os.getpid() if comm.Get_rank() == 0 else 0}.dat"
    path = Path(comm.bcast(str(path), root=0))
    if comm.Get_rank() == 0:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as f:
            f.truncate(nbytes)
    comm.Barrier()
    info = MPI.Info.Create()
    for k, v in (hints or {}).items():
        info.Set(str(k), str(v))
    fh = MPI.File.Open(comm, str(path), MPI.MODE_RDWR, info)
    info.Free()
    try:
        yield fh, path
    finally:
        fh.Close()
        if comm.Get_rank() == 0:
            path.unlink(missing_ok=True)


def timed(comm: MPI.Comm, fn: Callable[[], Any]) -> float:
    """Seconds from a barrier to a barrier around ``fn()`` (the same on every rank)."""
    comm.Barrier()
    t0 = time.perf_counter()
    fn()
    comm.Barrier()
    return comm.bcast(time.perf_counter() - t0, root=0)


def pattern_access(comm: MPI.Comm, pattern: Pattern, writing: bool, hints: dict | None = None) -> Access:
    """The planner's :class:`Access` for an NCIO pattern (one allgather of rank stats)."""
    p, r = comm.Get_size(), comm.Get_rank()
    stats = comm.allgather(pattern.stats(p, r).as_tuple())
    return Access.from_stats(stats, writing=writing, level=3, itemsize=ITEM, total_bytes=pattern.file_bytes(p),
                             hints=hints)


def run_method(comm: MPI.Comm, fh: MPI.File, pattern: Pattern, method: str, writing: bool, repeats: int,
               *, planner: Planner | None = None, access: Access | None = None,
               hints: dict | None = None, inner: int = 1) -> tuple[list[float], str]:
    """Time *method* (or ``"auto"`` through *planner*) on *pattern*, *repeats* times.

    Each sample is the mean of *inner* back-to-back calls between two barriers (more
    than one for calls too short to time alone).  Returns the seconds of each sample
    and the method that ran.  For ``auto`` the planner's decision is part of every
    call, as in an SDM write.
    """
    nprocs, rank = comm.Get_size(), comm.Get_rank()
    piece = pattern.piece(nprocs, rank)
    array = pattern.local(nprocs, rank) if writing else np.zeros(piece.memory_shape)
    chosen = method
    times = []
    with make_transfer(fh, 0, piece, array, "C", comm, hints) as t:
        def once() -> None:
            nonlocal chosen
            for _ in range(inner):
                if method == "auto":
                    chosen = planner.choose("auto", access).method.name  # type: ignore[union-attr]
                m = get_method(chosen)
                (m.write if writing else m.read)(t)

        for _ in range(repeats):
            times.append(timed(comm, once) / inner)
    if not writing and not np.array_equal(array[piece.interior], pattern.values(piece)):
        raise AssertionError(f"{chosen} read wrong values for {pattern.label}")
    return times, chosen


def calls_for(comm: MPI.Comm, seconds: float, target: float = 0.01, most: int = 50) -> int:
    """Back-to-back calls per sample so that a sample lasts about *target* seconds (rank 0 decides)."""
    return int(comm.bcast(max(1, min(most, int(target / max(seconds, 1e-9)))), root=0))


def poison(comm: MPI.Comm, fh: MPI.File, path: Path, pattern: Pattern) -> None:
    """Overwrite every owned byte with -1 (holes stay 0), so a later check proves a write (collective)."""
    fh.Sync()
    comm.Barrier()
    if comm.Get_rank() == 0:
        ref = pattern.reference(comm.Get_size())
        np.where(ref != 0, -1.0, 0.0).tofile(path)
    comm.Barrier()
    fh.Sync()


def check_file(comm: MPI.Comm, fh: MPI.File, path: Path, pattern: Pattern) -> bool:
    """Whether the file holds exactly the pattern's reference bytes, read with numpy (collective)."""
    fh.Sync()
    comm.Barrier()
    ok = True
    if comm.Get_rank() == 0:
        ref = pattern.reference(comm.Get_size())
        ok = bool(np.array_equal(np.fromfile(path, dtype=np.float64), ref.ravel()))
    return bool(comm.bcast(ok, root=0))
