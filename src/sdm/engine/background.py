"""Nonblocking dumps: ``write(..., wait=False)`` and ``write_step(..., wait=False)`` (see docs/design.md).

A nonblocking call copies the local arrays (so the caller may reuse its own at once),
queues the dump and returns a :class:`DumpHandle`; one worker thread per session (a
daemon, started at the first nonblocking dump, joined at close) runs the queued dumps
one after the other, in the order they were issued, each with the usual blocking
protocol of :mod:`sdm.engine.write` on the session's own communicator. Submitting
makes no collective call and decides nothing from the worker's progress, so ranks
never diverge:

* **Order.** Every collective operation of the application's thread (a read, a
  blocking write, ``close``, ...) first waits for every outstanding dump
  (:meth:`Background.drain`, called by :func:`~sdm.engine.operations.collective`), so
  only one thread of a rank is ever in a collective of the session, and the
  collectives run in the order of the calls on every rank.
* **Memory.** The copies held per rank are bounded by ``max_in_flight`` bytes
  (:func:`default_limit`); a submission that would pass it waits, locally, for earlier
  dumps (recorded as :attr:`DumpHandle.waited`). A dump larger than the bound waits for
  all earlier ones, then runs alone.
* **Errors.** A dump that fails raises an SDM error agreed by every rank (the same on
  each); it leaves no row, as a blocking write. Every dump issued after it and before
  the failure is reported is cancelled on every rank alike (never written). The failure
  is reported once, naming the dump: at the next collective call, at
  :meth:`sdm.Session.wait`, at ``wait()`` of the failed (or a cancelled) dump's handle,
  or after ``close`` closed the session. A non-SDM exception (a bug) in the worker
  tears the session as it would on the application's thread.

Needs an MPI library initialized with ``MPI.THREAD_MULTIPLE`` (mpi4py's default): the
worker's collectives run while the application's thread computes or makes its own MPI
calls on other communicators. Numpy releases the GIL in its large copies and kernels,
mpi4py in blocking MPI calls, so the worker's dump overlaps the application's work.
"""

from __future__ import annotations

import copy
import os
import sys
import threading
import time
from collections import deque
from typing import Any, Callable, Mapping

import numpy as np
from mpi4py import MPI

from .. import _validate as check
from .._collective import resting_waits
from ..errors import DumpCancelledError, InvalidArgumentError, SDMError
from .operations import Late, Operations, describe

__all__ = ["Background", "DumpHandle", "check_wait", "default_limit", "dump", "thread_level"]

_LEAST = 16 << 20  #: bytes the default bound never goes below
_LEVELS = {MPI.THREAD_SINGLE: "MPI.THREAD_SINGLE", MPI.THREAD_FUNNELED: "MPI.THREAD_FUNNELED",
           MPI.THREAD_SERIALIZED: "MPI.THREAD_SERIALIZED", MPI.THREAD_MULTIPLE: "MPI.THREAD_MULTIPLE"}


def thread_level() -> int:
    """The thread support the MPI library gave (``MPI.Query_thread()``)."""
    return int(MPI.Query_thread())


def refuse_without_threads(what: str) -> None:
    """Raise :class:`InvalidArgumentError` unless MPI gives ``MPI.THREAD_MULTIPLE`` (*what*: the asking option)."""
    level = thread_level()
    if level < MPI.THREAD_MULTIPLE:
        raise InvalidArgumentError(
            f"{what} needs MPI initialized with MPI.THREAD_MULTIPLE, but the MPI library gave "
            f"{_LEVELS.get(level, str(level))}: nonblocking dumps run in a background thread. Write with wait=True, "
            "or initialize MPI with multiple threads (mpi4py.rc.thread_level = 'multiple' before importing MPI)")


def check_wait(wait: Any) -> None:
    """A write's ``wait`` argument: a bool; False only with ``MPI.THREAD_MULTIPLE`` (every rank, in the call's
    checks, so a bad value is refused on every rank alike)."""
    check.flag(wait, "wait")
    if not wait:
        refuse_without_threads("wait=False")


def default_limit() -> int:
    """The default ``max_in_flight``: physical memory / (8 x the host's cores), at least 16 MiB (no collective:
    each rank's own bound)."""
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return _LEAST
    return max(_LEAST, int(memory) // (8 * (os.cpu_count() or 1)))


class DumpHandle:
    """One nonblocking dump (returned by ``write``/``write_step`` with ``wait=False``).

    Attributes
    ----------
    number : int
        The session's count of nonblocking dumps (1, 2, ...; the same on every rank).
    call : str
        The call, e.g. ``Group.write('T', 3) of group 'g'``.
    nbytes : int
        Bytes of this rank's copies.
    waited : float
        Seconds the submission waited for earlier dumps (the ``max_in_flight`` bound).
    seconds : float
        Seconds the dump ran in the background.
    cpu : float
        CPU seconds the worker thread spent on the dump on this rank (what it could take
        from the application's compute where cores are shared; waits in MPI that spin count).
    blocked : float
        Seconds the application waited for the dump to end (``wait()``, the next
        collective call, ``Session.wait()``, ``close``).
    state : str
        ``"queued"``, ``"running"``, ``"done"``, ``"failed"`` or ``"cancelled"``.
    error : SDMError or None
        Why it failed or was cancelled.
    """

    def __init__(self, owner: Background, number: int, call: str, run: Callable[[Any], None]) -> None:
        self._owner = owner
        self.number, self.call = number, call
        self.nbytes = 0
        self.waited = self.seconds = self.blocked = self.cpu = 0.0
        self.state = "queued"
        self.error: BaseException | None = None
        self.cause: DumpHandle | None = None  # the failed dump that cancelled this one
        self._run: Callable[[Any], None] | None = run
        self._arrays: Any = None
        self._since: float | None = None  # when the application began waiting for it

    def done(self) -> bool:
        """Whether the dump ended (written, failed or cancelled); never waits, never raises."""
        return self.state in ("done", "failed", "cancelled")

    def wait(self) -> None:
        """Wait for the dump to end (local: no collective call).

        Raises
        ------
        SDMError
            The dump failed (the same error on every rank, naming the dump).
        DumpCancelledError
            An earlier dump failed, so this one was not written.
        """
        self._owner.wait_for(self)

    def __repr__(self) -> str:
        return f"<sdm.DumpHandle #{self.number} {self.call} {self.state}>"


class Background:
    """The nonblocking dumps of one session: their queue, the worker thread and the pending failure."""

    def __init__(self, ops: Operations, limit: int | None) -> None:
        self.ops = ops
        self.limit = default_limit() if limit is None else int(limit)
        self._cond = threading.Condition()
        self._queue: deque[DumpHandle] = deque()  # issued and not ended, the first one running
        self._in_flight = 0  # bytes of the copies held
        self.peak = 0  #: the most bytes of copies held at once (at most the bound, or one dump larger than it)
        self._count = 0
        self._failure: DumpHandle | None = None  # failed and not reported yet
        self._thread: threading.Thread | None = None
        self._stopping = False
        self.spares = Spares()  #: the copies of ended dumps, kept for the next ones (within the bound)

    # ------------------------------------------------------------------ the application's side
    def in_worker(self) -> bool:
        """Whether the calling thread is the worker (whose operations never wait for dumps)."""
        return self._thread is not None and threading.current_thread() is self._thread

    def note(self) -> str:
        """On the worker: what the running dump's catalog rows say of it (its number, and the seconds its
        submission waited under the ``max_in_flight`` bound on this rank); elsewhere ``""``."""
        if not self.in_worker():
            return ""
        with self._cond:
            h = self._queue[0] if self._queue else None
        if h is None:
            return ""
        waited = f", after its submission waited {h.waited:.3g} s for memory (max_in_flight)" if h.waited >= 1e-3 else ""
        return f"; nonblocking dump #{h.number}{waited}"

    def submit(self, call: str, arrays: Any, run: Callable[[Any], None]) -> DumpHandle:
        """Copy *arrays* (one array or a mapping of them), queue ``run(copies)``; the handle (no collective)."""
        with self._cond:
            self._count += 1
            h = DumpHandle(self, self._count, call, run)
            if self._failure is not None:  # issued after a failure not yet reported: cancelled on every rank
                self._cancel(h, self._failure)
                return h
        want = _nbytes(arrays)
        t0 = time.perf_counter()
        with self._cond:  # back-pressure: wait for earlier dumps, never for the worker's sake of this one
            while self._queue and self._in_flight + want > self.limit and self._failure is None:
                self._cond.wait()
            self.spares.trim(self.limit - self._in_flight - want)
        h.waited = time.perf_counter() - t0
        copies = _copies(arrays, self.spares)
        with self._cond:
            if self._failure is not None:
                self._cancel(h, self._failure)
                return h
            h._arrays, h.nbytes = copies, _nbytes(copies)
            self._in_flight += h.nbytes
            self.peak = max(self.peak, self._in_flight)
            self._queue.append(h)
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name="sdm-dumps", daemon=True)
                self._thread.start()
            self._cond.notify_all()
        return h

    def idle(self, deadline: float | None = None) -> bool:
        """Wait until every issued dump ended (False: *deadline*, a ``time.monotonic()``, passed first)."""
        with self._cond:
            now = time.perf_counter()
            for h in self._queue:
                h._since = h._since if h._since is not None else now
            while self._queue:
                if deadline is None:
                    self._cond.wait()
                    continue
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def drain(self, quiet: bool = False) -> None:
        """Wait for every outstanding dump; then raise a failure not yet reported (unless *quiet*)."""
        self.idle()
        if not quiet:
            failed = self.take()
            if failed is not None:
                self._raise(failed.error)

    def take(self, deadline: float | None = None) -> DumpHandle | None:
        """Wait for every outstanding dump (:class:`Late` past *deadline*); the failed dump not yet reported."""
        if not self.idle(deadline):
            raise Late("nonblocking dumps")
        with self._cond:
            failed, self._failure = self._failure, None
        return failed

    def wait_for(self, h: DumpHandle) -> None:
        """:meth:`DumpHandle.wait`."""
        with self._cond:
            if not h.done() and h._since is None:
                h._since = time.perf_counter()
            while not h.done():
                self._cond.wait()
            if h.error is not None and self._failure is not None and self._failure in (h, h.cause):
                self._failure = None  # reported here
        if h.error is not None:
            self._raise(h.error)

    def stop(self, join: bool = True) -> None:
        """End the worker (joined when *join*: every dump has ended)."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if join and self._thread is not None:
            self._thread.join()
        with self._cond:
            self.spares.trim(0)

    # ------------------------------------------------------------------ the worker's side
    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._stopping:
                    self._cond.wait()
                if not self._queue:
                    return
                h = self._queue[0]
                h.state = "running"
            t0, c0 = time.perf_counter(), time.thread_time()
            error: BaseException | None = None
            try:
                assert h._run is not None
                with resting_waits():
                    h._run(h._arrays)
            except BaseException as exc:  # noqa: BLE001 - reported on the application's thread
                error = exc
            end, h.cpu = time.perf_counter(), time.thread_time() - c0
            with self._cond:
                h.seconds = end - t0
                self._finish(h, end)
                if error is None:
                    h.state = "done"
                else:
                    h.state, h.error = "failed", _named(error, h)
                    self._failure = h
                    while self._queue:
                        self._cancel(self._queue[0], h, end)
                self._cond.notify_all()

    def _finish(self, h: DumpHandle, end: float | None = None) -> None:
        """Under the lock: *h* leaves the queue, its copies freed, the application's wait for it counted."""
        if self._queue and self._queue[0] is h:
            self._queue.popleft()
            self._in_flight -= h.nbytes
            self.spares.keep(h, self.limit - self._in_flight)  # ended, failed or cancelled: nobody reads them
        h._arrays = h._run = None
        if h._since is not None:
            h.blocked += (end or time.perf_counter()) - h._since
            h._since = None

    def _cancel(self, h: DumpHandle, failed: DumpHandle, end: float | None = None) -> None:
        self._finish(h, end)
        h.state, h.cause = "cancelled", failed
        err = failed.error.__cause__ if isinstance(failed.error, SDMError) and failed.error.__cause__ else failed.error
        h.error = DumpCancelledError(
            f"nonblocking dump #{h.number} {h.call} was cancelled (nothing of it written): the earlier dump "
            f"#{failed.number} {failed.call} failed with {type(err).__name__}: {getattr(err, 'message', err)}")

    def _raise(self, error: BaseException | None) -> None:
        assert error is not None
        if not isinstance(error, SDMError) and self.ops.size > 1:
            self.ops.abort(error, "a nonblocking dump in the background")
        raise error


def dump(group: Any, wait: Any, label: str, args: tuple[Any, ...], arrays: Any,
         call: Callable[[Any, Any], None]) -> DumpHandle | None:
    """A write's entry: ``call(arrays, wait)`` now (``wait`` True, or a bad value its checks refuse on every rank),
    or queued with copies of *arrays* (``wait=False``; default: the session's ``asynchronous``).

    *label* and *args* name the call (of *group*) in the handle and in its errors.
    """
    session = group.session
    if wait is None:
        wait = not session.asynchronous
    ops: Operations = session._ops
    if (not isinstance(wait, (bool, np.bool_)) or wait or thread_level() < MPI.THREAD_MULTIPLE or ops.closed
            or ops.broken is not None or ops.torn is not None or session.mode == "r"):
        call(arrays, wait)  # blocking; or refused now by its checks, on every rank alike
        return None
    if ops.background is None:
        ops.background = Background(ops, session.max_in_flight)
    queue: Background = ops.background
    return queue.submit(f"{describe(label, args, {})} of group {group.name!r}", arrays, lambda c: call(c, False))


def _named(error: BaseException, h: DumpHandle) -> BaseException:
    """The same SDM error, its message naming the dump (a non-SDM exception as it is)."""
    if not isinstance(error, SDMError):
        return error
    named = copy.copy(error)
    named.message = f"nonblocking dump #{h.number} {h.call} failed: {error.message}"
    named.args = (named.message,)
    named.__cause__ = error
    return named


class Spares:
    """The copies of ended dumps, kept to hold the next dumps' copies (by shape, dtype and order).

    A fresh buffer of many megabytes costs a page fault per page on its first write (the
    allocator returns large blocks to the system when they are freed); a kept one is
    written at memory speed. Copies are kept only while nothing else refers to them, and
    only within the bytes the ``max_in_flight`` bound leaves free. Not thread-safe: the
    owner calls it under its lock (:meth:`take` alone runs outside it, on the
    application's thread, the only taker).
    """

    def __init__(self) -> None:
        self._free: dict[tuple[Any, ...], list[np.ndarray]] = {}
        self.nbytes = 0
        self._lock = threading.Lock()

    @staticmethod
    def key(a: np.ndarray) -> tuple[Any, ...]:
        order = "F" if a.flags.f_contiguous and not a.flags.c_contiguous else "C"
        return (a.shape, a.dtype.str, order)

    def take(self, a: np.ndarray) -> np.ndarray:
        """A buffer like *a* (kept, or new), holding a copy of *a*."""
        k = self.key(a)
        with self._lock:
            free = self._free.get(k)
            buf = free.pop() if free else None
            if buf is not None:
                self.nbytes -= buf.nbytes
        if buf is None:
            buf = np.empty(a.shape, a.dtype, order=k[2])
        np.copyto(buf, a, casting="no")
        return buf

    def keep(self, h: DumpHandle, room: int) -> None:
        """Keep the copies of the ended dump *h* (only those nobody else refers to) within *room* bytes."""
        arrays, h._arrays = h._arrays, None
        values = list(arrays.values()) if isinstance(arrays, Mapping) else [arrays]
        del arrays
        while values:
            a = values.pop()
            # references: ``a`` and getrefcount's argument; any more is someone else's
            if (isinstance(a, np.ndarray) and a.base is None and a.flags.owndata and a.flags.writeable
                    and sys.getrefcount(a) <= 2 and self.nbytes + a.nbytes <= room):
                with self._lock:
                    self._free.setdefault(self.key(a), []).append(a)
                    self.nbytes += a.nbytes
            del a

    def trim(self, room: int) -> None:
        """Free kept buffers until they take at most *room* bytes."""
        with self._lock:
            while self.nbytes > max(room, 0) and self._free:
                k = next(iter(self._free))
                self.nbytes -= self._free[k].pop().nbytes
                if not self._free[k]:
                    del self._free[k]


def _copies(arrays: Any, spares: Spares) -> Any:
    """Copies of the caller's arrays (what cannot be copied is passed on: the dump's checks refuse it)."""
    def one(a: Any) -> Any:
        try:
            if isinstance(a, np.ndarray) and a.dtype.kind in "biufcSUV" and not a.dtype.hasobject:
                return spares.take(a)
            return np.array(a, copy=True)
        except Exception:  # noqa: BLE001 - refused by the write's checks, on every rank
            return a
    if isinstance(arrays, Mapping):
        try:
            return {k: one(v) for k, v in arrays.items()}
        except Exception:  # noqa: BLE001
            return arrays
    return one(arrays)


def _nbytes(arrays: Any) -> int:
    values = arrays.values() if isinstance(arrays, Mapping) else [arrays]
    try:
        return sum(int(v.nbytes) for v in values if isinstance(v, np.ndarray))
    except Exception:  # noqa: BLE001
        return 0
