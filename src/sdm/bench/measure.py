"""Timing I/O methods on NCIO patterns: shared by the calibration and the NCIO benchmark.

Every measurement is collective: all ranks start after a barrier and the time is
taken after a closing barrier, so it is the slowest rank's wall time (what the
application waits for).  Reads and writes go through the same :class:`~sdm.io.Transfer`
an SDM write builds; nothing is synced to disk unless asked (method comparisons run
against the page cache, like repeated dumps on a machine with memory to spare).
"""

from __future__ import annotations

import functools
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
from mpi4py import MPI

from ..io import get_method
from ..io.base import make_transfer
from ..planner import Access, Planner
from .patterns import Pattern

__all__ = ["warm_memory", "steady_memory", "scratch_file", "data_file", "timed", "pattern_access",
           "run_method", "calls_for", "settle_calls", "check_file"]


_COUNTER = iter(range(1 << 62))

#: Bytes of memory :func:`warm_memory` touches by default (over all ranks).
WARM_BYTES = 2 << 30


def warm_memory(comm: MPI.Comm, nbytes: int = WARM_BYTES) -> float:
    """Touch and release *nbytes* of anonymous memory (collective); returns the first-touch rate in B/s.

    On a virtual machine the hypervisor may back guest memory only when a page is first
    touched: such pages fill at a fraction of memory speed (0.4 GB/s against 6 GB/s
    measured on a 2-core cloud VM), and the page cache draws from them for every new
    file.  Timings then depend on which pages the kernel happens to hand out, not on
    the I/O method.  Touching and releasing the memory once puts backed pages on the
    kernel's free lists, where the page cache finds them; on a physical machine this
    costs a fraction of a second.  Each rank touches its share, one chunk at a time.
    """
    chunk = 64 << 20
    share = max(0, int(nbytes) // comm.Get_size())
    comm.Barrier()
    t0 = time.perf_counter()
    for _ in range(0, share, chunk):
        block = np.empty(min(chunk, share) // 8, dtype=np.int64)
        block[::512] = 1  # one store per 4 KiB page
        del block
    comm.Barrier()
    seconds = time.perf_counter() - t0
    return comm.bcast(nbytes / seconds if seconds > 0 else float("inf"), root=0)


@contextmanager
def steady_memory(comm: MPI.Comm, nbytes: int = WARM_BYTES) -> Iterator[dict[str, Any]]:
    """Pre-touched memory for a measurement, on the host as it is (collective).

    Runs :func:`warm_memory` before the block. On a guest whose kernel reports free pages
    to the hypervisor, blocks that stay free for a few seconds may still go back to the
    host, so timings of new files can vary; SDM never changes that (nor any other setting
    of the host): the repeats and trials absorb the spread.

    Yields
    ------
    dict
        ``touch_rate``: B/s of the first touch.
    """
    yield {"touch_rate": warm_memory(comm, nbytes)}


@contextmanager
def scratch_file(comm: MPI.Comm, directory: str | Path, nbytes: int, hints: dict[str, str] | None = None,
                 name: str = "sdm-bench") -> Iterator[tuple[MPI.File, Path]]:
    """A new sparse file of *nbytes* bytes in *directory*, open on every rank, and its path;
    closed and removed afterwards.

    Every timed write goes to a file of its own, as a new time step does: rewriting one
    file with every method would make each method's time depend on the one before it
    (e.g. after one large write the page cache holds large folios, and small writes of
    several ranks then contend for their locks).  Files are opened one at a time, as SDM
    opens a level-1 file per write: ROMIO allocates a handle's 16 MiB collective buffer
    at the open, and only a buffer freed by an earlier close comes back already touched.
    """
    stem = comm.bcast(f".{name}-{os.getpid()}-{next(_COUNTER)}" if comm.Get_rank() == 0 else None, root=0)
    path = Path(directory) / f"{stem}.dat"
    if comm.Get_rank() == 0:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as f:
            f.truncate(nbytes)
    comm.Barrier()
    info = MPI.Info.Create()
    for k, v in (hints or {}).items():
        info.Set(str(k), str(v))
    fh = None
    try:
        fh = MPI.File.Open(comm, str(path), MPI.MODE_RDWR, info)
        yield fh, path
    finally:
        info.Free()
        if fh is not None:
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
    return pattern.access(p, writing, hints, comm.allgather(pattern.stats(p, r).as_tuple()))


@contextmanager
def data_file(comm: MPI.Comm, directory: str | Path, pattern: Pattern,
              hints: dict[str, str] | None = None) -> Iterator[tuple[MPI.File, Path]]:
    """A scratch file holding the pattern's data (written collectively), for reads."""
    nprocs, rank = comm.Get_size(), comm.Get_rank()
    with scratch_file(comm, directory, pattern.file_bytes(nprocs), hints, "sdm-data") as (fh, path):
        piece = pattern.piece(nprocs, rank)
        with make_transfer(fh, 0, piece, pattern.local(nprocs, rank), "C", comm) as t:
            get_method("collective").write(t)
        fh.Sync()
        yield fh, path


def run_method(comm: MPI.Comm, directory: str | Path, pattern: Pattern, method: str, writing: bool, repeats: int,
               *, data: MPI.File | None = None, planner: Planner | None = None, access: Access | None = None,
               hints: dict | None = None, inner: int = 1, check: bool = False,
               settle: int = 0) -> tuple[list[float], str, bool]:
    """Time *method* (or ``"auto"`` through *planner*) on *pattern*, *repeats* times.

    Writes go to new files in *directory* (one per call); reads read *data* (see
    :func:`data_file`).  Each sample is the mean of *inner* calls, each between two
    barriers (more than one for calls too short to time alone).  For ``auto`` the
    planner's decision is part of every call, as in an SDM write, and every call's time
    is reported to the planner, which measures ties that way (:mod:`sdm.planner.trials`).
    With *settle*, each sample starts with that many untimed calls: when methods take turns, the first
    call after another method pays for what that method left behind (caches, scheduling;
    up to 2x for a 5 ms call here), which an application repeating one access never sees.

    Returns
    -------
    (seconds, method, ok)
        The seconds of each sample, the method that ran, and -- with *check* -- whether
        every written file (or every read) was byte-for-byte right (numpy reference).
    """
    nprocs, rank = comm.Get_size(), comm.Get_rank()
    piece = _piece(pattern, nprocs, rank)
    array = pattern.local(nprocs, rank) if writing else np.zeros(piece.memory_shape)
    chosen, ok, times = method, True, []

    def call(fh: MPI.File) -> None:
        with make_transfer(fh, 0, piece, array, "C", comm, hints) as t:
            def once() -> None:
                nonlocal chosen
                if method == "auto":
                    chosen = planner.choose("auto", access).method.name  # type: ignore[union-attr]
                m = get_method(chosen)
                (m.write if writing else m.read)(t)

            seconds = timed(comm, once)  # the same on every rank
            if method == "auto":  # a tie the model cannot break is measured by the first calls
                planner.observe(access, chosen, seconds)  # type: ignore[union-attr, arg-type]
            times[-1] += seconds

    for _ in range(repeats):
        times.append(0.0)
        if writing:
            for k in range(inner + settle):  # a file at a time, each closed before the next opens, as SDM does
                with scratch_file(comm, directory, pattern.file_bytes(nprocs), hints, "sdm-write") as (fh, path):
                    call(fh)
                    if k < settle:
                        times[-1] = 0.0
                    elif check:
                        ok &= check_file(comm, fh, path, pattern)
        else:
            for _ in range(settle):
                call(data)  # type: ignore[arg-type]
            times[-1] = 0.0
            for _ in range(inner):
                call(data)  # type: ignore[arg-type]
            if check:
                ok &= bool(comm.allreduce(np.array_equal(array[piece.interior], pattern.values(piece)), op=MPI.LAND))
        times[-1] /= inner
    return times, chosen, ok


@functools.lru_cache(maxsize=16)
def _piece(pattern: Pattern, nprocs: int, rank: int) -> Any:
    """The pattern's piece, one object per pattern as a dataset's view keeps one for every step
    (methods cache their plans on it)."""
    return pattern.piece(nprocs, rank)


def calls_for(comm: MPI.Comm, seconds: float, target: float = 0.02, most: int = 64) -> int:
    """Calls per sample so that a sample lasts about *target* seconds (rank 0 decides).

    At most *most* calls: enough that a sample of a 0.1 ms call still lasts several
    milliseconds (16 calls left such samples 10 % apart between two runs of the same code).
    """
    return int(comm.bcast(max(1, min(most, int(target / max(seconds, 1e-9)))), root=0))


#: Seconds of untimed calls before each sample (:func:`settle_calls`).
SETTLE = 0.03


def settle_calls(comm: MPI.Comm, seconds: float) -> int:
    """Untimed calls before each sample of a call taking *seconds*: about :data:`SETTLE` seconds, at least two.

    A sample comes back to its data after other work went through the memory. Such
    data takes several passes to read at full speed again (measured here, 16 MiB per
    rank after 280 MiB of other files: 10-170 ms for the first pass, then 5.9, 6.1, 4.7,
    3.5, 3.1, 2.9 ms, settling at 2.7 ms after eight), and one untimed call left the
    calibration's samples of it at 3.5-4.0 ms.
    """
    return max(2, calls_for(comm, seconds, SETTLE, 16))


def check_file(comm: MPI.Comm, fh: MPI.File, path: Path, pattern: Pattern) -> bool:
    """Whether the file holds exactly the pattern's reference bytes, read with numpy (collective)."""
    fh.Sync()
    comm.Barrier()
    ok = True
    if comm.Get_rank() == 0:
        ref = pattern.reference(comm.Get_size())
        ok = bool(np.array_equal(np.fromfile(path, dtype=np.float64), ref.ravel()))
    return bool(comm.bcast(ok, root=0))
