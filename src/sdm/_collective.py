"""Collective helpers that keep every rank in step and turn one rank's error into all's.

The rules (DESIGN.md): every rank makes every collective call in the same order, and an
error on any rank is raised on all ranks as the same :class:`~sdm.errors.SDMError`.
The helpers here are the only places SDM decides "did anybody fail?".
"""

from __future__ import annotations

import hashlib
import threading
import time
import traceback
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence, TypeVar

import numpy as np
from mpi4py import MPI

from .urls import mask_urls
from .errors import InternalError, SDMError, StorageError, error_class

T = TypeVar("T")
_MASK = (1 << 64) - 1

__all__ = ["Failure", "capture", "agree", "root_call", "root_call_resting", "wait_resting", "resting", "resting_waits", "raise_first", "os_error", "exchange", "root_vector",
           "reduce_exchange", "digest", "pack_float", "unpack_float"]


class Failure:
    """A picklable record of an exception raised on one rank."""

    __slots__ = ("cls", "message", "rank", "errno")

    def __init__(self, exc: BaseException, rank: int) -> None:
        if isinstance(exc, OSError) and not isinstance(exc, SDMError):  # the system's, not SDM's: keep errno
            exc = os_error(exc)
        if isinstance(exc, SDMError):
            self.cls = type(exc).__name__
            self.message = exc.message
        else:  # unexpected after SDM's checks: a bug; keep the type and the last frame for the report
            self.cls = InternalError.__name__
            tb = traceback.extract_tb(exc.__traceback__)
            where = f" at {tb[-1].filename}:{tb[-1].lineno}" if tb else ""
            self.message = (f"internal error in SDM ({type(exc).__name__}: {exc}{where}); "
                            "this is a bug, please report it with this message")
        self.message = mask_urls(self.message)  # a URL's password never travels or prints
        self.rank = rank
        self.errno = getattr(exc, "errno", None) if isinstance(exc, SDMError) else None

    def exception(self, size: int) -> SDMError:
        """Rebuild the exception; the rank is named when the job has several."""
        msg = self.message if size == 1 else f"{self.message} [rank {self.rank}]"
        exc = error_class(self.cls)(msg)
        if self.errno is not None:
            exc.errno = self.errno  # type: ignore[attr-defined]
        return exc


def os_error(exc: OSError, what: str = "") -> StorageError:
    """A :class:`StorageError` for an operating-system error, its ``errno`` kept (``ENOSPC``, ...)."""
    text = exc.strerror or str(exc)
    where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
    return StorageError(f"{what + ': ' if what else ''}{text}{where}", errno=exc.errno)


def capture(fn: Callable[..., T], *args: Any, rank: int = 0, **kwargs: Any) -> tuple[T | None, Failure | None]:
    """Call ``fn`` and return ``(result, None)`` or ``(None, Failure)``; never raises."""
    try:
        return fn(*args, **kwargs), None
    except Exception as exc:  # noqa: BLE001 - every failure must reach every rank
        return None, Failure(exc, rank)


def raise_first(failures: list[Failure | None], size: int) -> None:
    """Raise the failure of the lowest rank, if any."""
    for f in failures:
        if f is not None:
            raise f.exception(size)


def agree(comm: MPI.Comm, failure: Failure | None, payload: Any = None) -> list[Any]:
    """Allgather ``(failure, payload)``; raise the first failure on every rank.

    Parameters
    ----------
    comm : MPI.Comm
        The session communicator.
    failure : Failure or None
        This rank's failure, if any.
    payload : object
        Anything picklable every rank wants to share (checksums, timings, ...).

    Returns
    -------
    list
        The payloads of all ranks, in rank order, when no rank failed.
    """
    gathered = comm.allgather((failure, payload))
    raise_first([f for f, _ in gathered], comm.Get_size())
    return [p for _, p in gathered]


def root_call(comm: MPI.Comm, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run ``fn`` on rank 0 only and broadcast its result (or its error) to all ranks."""
    if comm.Get_rank() == 0:
        result, failure = capture(fn, *args, **kwargs)
    else:
        result, failure = None, None
    result, failure = comm.bcast((result, failure), root=0)
    if failure is not None:
        raise failure.exception(1)  # rank 0's message is the same for everyone
    return result  # type: ignore[return-value, unused-ignore]


# ----------------------------------------------------------------------------- fixed-size exchanges
#
# The hot path of an access (sdm.engine) moves small int64 vectors with MPI's buffer calls
# (``Allgather``/``Bcast``: no pickling, no per-call allocation of Python objects).  A
# flag in every vector says "this rank failed"; when any rank set it, every rank then
# makes the generic pickled exchange (:func:`agree` / ``bcast``) that carries the
# message, so the error path stays the same sequence of calls on every rank.


def exchange(comm: MPI.Comm, failure: Failure | None, values: Sequence[int] | np.ndarray) -> np.ndarray:
    """Allgather a fixed-size int64 vector; raise the first failure on every rank.

    Parameters
    ----------
    comm : MPI.Comm
    failure : Failure or None
        This rank's failure, if any.
    values : sequence of int
        This rank's values; every rank must pass the same number of them.

    Returns
    -------
    numpy.ndarray
        ``(size, len(values))`` int64: row ``r`` holds rank ``r``'s values.

    Raises
    ------
    SDMError
        On every rank, the failure of the lowest failed rank (carried by a second,
        pickled allgather made only when some rank failed).
    """
    n = len(values)
    vec = np.empty(n + 1, dtype=np.int64)
    vec[0] = failure is not None
    if failure is None:
        vec[1:] = values
    else:
        vec[1:] = 0
    out = np.empty((comm.Get_size(), n + 1), dtype=np.int64)
    if resting():
        wait_resting(comm.Iallgather(vec, out))
    else:
        comm.Allgather(vec, out)
    if out[:, 0].any():
        agree(comm, failure)  # the rare path: the messages travel pickled; raises on every rank
        raise InternalError("a rank flagged a failure it did not send; this is a bug, please report it")
    return out[:, 1:]


def reduce_exchange(comm: MPI.Comm, failure: Failure | None, maxima: Sequence[int], sums: Sequence[int]
                    ) -> tuple[np.ndarray, np.ndarray]:
    """The largest of each of *maxima* and the sum modulo ``2**64`` of each of *sums*, on every rank.

    The counterpart of :func:`exchange` for values that only matter combined (the
    slowest rank's seconds, the checksum of every rank's shares): two non-blocking
    reductions with MPI's own operations, started together and waited for together
    (``MPI_MAX`` over int64 words, ``MPI_SUM`` over uint64 words, which wraps modulo
    ``2**64``). Each rank sends and receives ``len(maxima) + 1 + len(sums)`` words
    whatever the number of ranks, in ``log2(P)`` steps, instead of an allgather's
    ``P`` rows. No Python code runs inside the reductions: an interrupt
    (``KeyboardInterrupt``) can never leave a half-combined result that a commit
    would then record; it is raised after them.

    Parameters
    ----------
    comm : MPI.Comm
    failure : Failure or None
        This rank's failure, if any (its flag is the largest of one more maximum).
    maxima : sequence of int
        Non-negative int64 values (e.g. seconds from :func:`pack_float`: the bits of
        non-negative floats order as the floats do).
    sums : sequence of int
        Values taken modulo ``2**64`` (signed or not).

    Returns
    -------
    (numpy.ndarray, numpy.ndarray)
        The maxima as int64 and the sums as uint64, the same on every rank.

    Raises
    ------
    SDMError
        On every rank, the failure of the lowest failed rank (carried by a pickled
        allgather made only when some rank failed, as in :func:`exchange`).
    """
    top = np.zeros(1 + len(maxima), dtype=np.int64)
    top[0] = failure is not None
    total = np.zeros(len(sums), dtype=np.uint64)
    if failure is None:
        top[1:] = np.asarray(maxima, dtype=np.int64)
        total[:] = [int(x) & _MASK for x in sums]
    top_out, total_out = np.empty_like(top), np.empty_like(total)
    requests = [comm.Iallreduce(top, top_out, op=MPI.MAX)]
    if len(total):
        requests.append(comm.Iallreduce(total, total_out, op=MPI.SUM))
    if resting():
        for request in requests:
            wait_resting(request)
    else:
        MPI.Request.Waitall(requests)
    if top_out[0]:
        agree(comm, failure)  # the rare path: the messages travel pickled; raises on every rank
        raise InternalError("a rank flagged a failure it did not send; this is a bug, please report it")
    return top_out[1:], total_out


def root_vector(comm: MPI.Comm, width: int, fn: Callable[..., Sequence[int]], *args: Any) -> np.ndarray:
    """Run ``fn`` on rank 0 only and broadcast its *width* int64 values (or its error).

    The fixed-size counterpart of :func:`root_call` (one small ``Bcast``; a second,
    pickled one only when rank 0 failed, to carry its message).

    Raises
    ------
    SDMError
        Rank 0's error, the same on every rank.
    """
    vec = np.zeros(width + 1, dtype=np.int64)
    failure = None
    if comm.Get_rank() == 0:
        result, failure = capture(fn, *args)
        if failure is None:
            vec[1:] = result  # type: ignore[assignment]  # fn returned (capture's None is a failure)
        else:
            vec[0] = 1
    # a plain Bcast: a resting wait (as at open) measured 2.4x slower per small write here, since
    # a sleeping rank also delays forwarding the broadcast to the ranks below it in the tree;
    # resting in a nonblocking dump's worker, whose latency the application does not wait for
    if resting():
        wait_resting(comm.Ibcast(vec, root=0))
    else:
        comm.Bcast(vec, root=0)
    if vec[0]:
        sent: Failure = comm.bcast(failure, root=0)
        raise sent.exception(1)  # rank 0's message is the same for everyone
    return vec[1:]


_REST_FIRST, _REST_MAX = 50e-6, 500e-6  # seconds between checks of a waiting rank: first, at most
_RESTING = threading.local()


def resting() -> bool:
    """Whether the calling thread waits in the hot path's collectives resting (:func:`resting_waits`)."""
    return getattr(_RESTING, "on", False)


@contextmanager
def resting_waits() -> Iterator[None]:
    """On this thread, the hot path's collectives (:func:`exchange`, :func:`reduce_exchange`,
    :func:`root_vector`) wait with :func:`wait_resting` instead of MPI's busy polling.

    The worker of nonblocking dumps runs its dumps so: a rank that reached a collective
    before the others would otherwise spin on a core the application computes on, for
    as long as the slowest rank's I/O and rank 0's catalog commit take.
    """
    before = resting()
    _RESTING.on = True
    try:
        yield
    finally:
        _RESTING.on = before


def wait_resting(request: MPI.Request) -> None:
    """Wait for *request* with short sleeps between tests instead of MPI's busy polling.

    For the broadcasts that follow rank 0's catalog work (milliseconds): ranks blocked in
    a broadcast poll at full speed meanwhile and, where ranks outnumber cores, take the
    CPU from rank 0, which then takes about twice as long. A waiting rank here is at most
    half a millisecond late.
    """
    rest = _REST_FIRST
    while not request.Test():
        time.sleep(rest)
        rest = min(2 * rest, _REST_MAX)


def root_call_resting(comm: MPI.Comm, fn: Callable[[], T]) -> T:
    """:func:`root_call` whose other ranks wait without spinning (see :func:`wait_resting`).

    The broadcast's length goes first in a non-blocking ``Ibcast`` the other ranks wait
    for resting; the pickled result follows in a ``Bcast`` (two parts of one broadcast).
    """
    length = np.zeros(1, dtype=np.int64)
    if comm.Get_rank() == 0:
        result, failure = capture(fn)
        data = MPI.pickle.dumps((result, failure))
        length[0] = len(data)
        comm.Ibcast(length, root=0).Wait()
        comm.Bcast([data, MPI.BYTE], root=0)
    else:
        wait_resting(comm.Ibcast(length, root=0))
        buf = bytearray(int(length[0]))
        comm.Bcast([buf, MPI.BYTE], root=0)
        result, failure = MPI.pickle.loads(buf)
    if failure is not None:
        raise failure.exception(1)  # rank 0's message is the same for everyone
    return result  # type: ignore[return-value]


def digest(value: object) -> int:
    """A 63-bit hash of ``repr(value)`` that is the same in every process (``hash`` is salted per process)."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a value whose repr fails differs from any other
        text = f"<{type(value).__name__}>"
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8", "backslashreplace"), digest_size=8).digest(),
                          "little") >> 1


def pack_float(x: float) -> int:
    """The bits of a float64 as an int64 (to travel in an int64 vector)."""
    return int(np.float64(x).view(np.int64))


def unpack_float(bits: Any) -> np.ndarray:
    """Float64 values from int64 bits made by :func:`pack_float`."""
    return np.asarray(bits, dtype=np.int64).view(np.float64)
