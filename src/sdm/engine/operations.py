"""The opening exchange of every collective operation, and what ends a session that cannot close.

Every collective operation of SDM (``open``, ``make_group``, ``write``, ``read``,
``set_attributes``, ``truncate``, ``close``, ...) begins with the same fixed-size
exchange: one ``Iallgather`` of :data:`WIDTH` int64 words per rank carrying

====  ==========================================================================
word  meaning
====  ==========================================================================
0     1 if this rank's checks of the call failed (the message follows, pickled)
1     the operation's code (:data:`OPERATIONS`)
2     the session's sequence number of this call (1, 2, ... on every rank)
3     a digest of the call's arguments (0 where the operation checks them itself)
4...  the operation's own words (a write's layout digest, a read's plan, ...)
====  ==========================================================================

Since every operation opens with the same call of the same size, ranks that entered
different operations (rank 0 in ``write`` under ``if rank == 0:`` while the others
``close``) meet in it and raise the same :class:`~sdm.errors.CollectiveMismatchError`
on every rank, naming what each rank called, instead of waiting forever in two
different collectives. The session is then *broken*: every rank knows it, later calls
raise at once and ``close`` only releases what the rank holds (rank 0 leaves the run
``interrupted``; every committed step stays readable).

An exception that is not an :class:`~sdm.errors.SDMError` (``KeyboardInterrupt``, a
bug) leaving an operation on one rank leaves the ranks out of step: the others may be
inside the same operation's later collectives. Such a session is *torn*; like
``python -m mpi4py``, SDM then reports the exception and ends the job with
``MPI_Abort`` rather than entering a collective ``close`` that the others will never
reach (on a single rank it closes locally and re-raises). An exception raised between
operations (in the application's code) first tries a collective close that waits at
most :func:`close_wait` seconds: when every rank raised too, the session closes as
usual; otherwise the job is ended the same way.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
import threading
import time
import traceback
from typing import Any, Callable, NoReturn, Sequence, TypeVar

import numpy as np
from mpi4py import MPI

from .._collective import Failure, agree
from ..urls import mask_urls
from ..errors import CollectiveMismatchError, InternalError, RunStateError, SDMError

__all__ = ["OPERATIONS", "WIDTH", "EXTRA", "Late", "Operations", "collective", "close_wait"]

F = TypeVar("F", bound=Callable[..., Any])

#: The collective operations, in a fixed order: an operation's code is its position + 1.
OPERATIONS: tuple[str, ...] = (
    "open", "close", "make_group", "group", "groups", "truncate", "import_array", "set_attributes", "set_info",
    "info", "infos", "find", "data_view", "write", "read", "ranked_counts", "index", "partition",
    "group_set_attributes", "group_set_info", "group_info", "group_infos", "prepare_history", "read_step",
)
_CODES = {name: i + 1 for i, name in enumerate(OPERATIONS)}
WIDTH = 74  #: int64 words each rank sends in the opening exchange
_HEAD = 4  # failed flag, operation, sequence number, arguments' digest
EXTRA = WIDTH - _HEAD  #: the operation's own words
_REST_FIRST, _REST_MAX = 50e-6, 20e-3  # seconds between tests of a timed opening: first, at most


def close_wait() -> float:
    """Seconds a rank leaving a session by an exception waits for the others to close it too.

    ``$SDM_CLOSE_WAIT`` (default 5); past it the job is ended with ``MPI_Abort``.
    """
    try:
        return max(0.0, float(os.environ.get("SDM_CLOSE_WAIT", "5")))
    except ValueError:
        return 5.0


class Late(Exception):
    """Internal: a timed opening exchange was not joined by every rank in time."""


def _short(value: Any) -> str:
    """A short, safe text of one argument (arrays by dtype and shape)."""
    if isinstance(value, np.ndarray):
        return f"<{value.dtype} array>"  # its shape is each rank's own: ranks that called alike read alike
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_short(k)}: {_short(v)}" for k, v in list(value.items())[:4]) + \
            (", ..." if len(value) > 4 else "") + "}"
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a value whose repr fails
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 40 else text[:37] + "..."


def describe(label: str, args: Sequence[Any], kwargs: dict[str, Any]) -> str:
    """``label(arg, ..., key=value)`` with every argument shortened (see :func:`_short`)."""
    if not args and not kwargs and label.endswith(")"):  # described already ("Session.close() after ...")
        return label
    parts = [_short(a) for a in args] + [f"{k}={_short(v)}" for k, v in kwargs.items()]
    return mask_urls(f"{label}({', '.join(parts)})")


class Operations:
    """The collective calls of one session: their sequence, and whether the session can still make them.

    Parameters
    ----------
    comm : MPI.Intracomm
        The session's private communicator.
    """

    def __init__(self, comm: MPI.Intracomm) -> None:
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self.seq = 0  # opening exchanges made so far (the same on every rank while in step)
        # depth and current are each thread's own: the background worker's dump (sdm.engine.background) and the
        # application's thread never see each other's nesting (only one of them is in an operation at a time)
        self._local = threading.local()
        self.background: Any = None  # the session's nonblocking dumps (sdm.engine.background.Background), once made
        self.broken: str | None = None  # why no collective call can be made any more (the same on every rank)
        self.torn: BaseException | None = None  # a non-SDM exception left an operation on this rank
        self.closed = False  # the session was closed
        self._vec = np.zeros(WIDTH, dtype=np.int64)

    @property
    def depth(self) -> int:
        """>0 while this thread is inside an operation (nested calls are part of it)."""
        return int(getattr(self._local, "depth", 0))

    @depth.setter
    def depth(self, value: int) -> None:
        self._local.depth = value

    @property
    def current(self) -> tuple[str, Sequence[Any], dict[str, Any]]:
        """What this thread called (label, arguments), described only for a mismatch's message."""
        return getattr(self._local, "current", ("", (), {}))

    @current.setter
    def current(self, value: tuple[str, Sequence[Any], dict[str, Any]]) -> None:
        self._local.current = value

    def drain(self, quiet: bool = False) -> None:
        """On the application's thread: wait for the outstanding nonblocking dumps, raise a background failure
        (once, the same on every rank; not when *quiet*). The worker's own operations never drain."""
        if self.background is not None and not self.background.in_worker():
            self.background.drain(quiet)

    # ------------------------------------------------------------------ entry
    def usable(self) -> None:
        """Refuse a new operation on a broken session (every rank alike); end the job on a torn one."""
        if self.torn is not None:
            self.abort(self.torn, "a later SDM call on this session")
        if self.broken is not None:
            raise CollectiveMismatchError(
                f"this session can no longer make collective calls: {self.broken}; close it and open a new one")
        if self.closed:
            raise RunStateError("this SDM session is closed; SDM calls need an open session (sdm.open)")

    def enter(self, op: str, failure: Failure | None = None, args: int = 0, extra: Sequence[int] | np.ndarray = (),
              *, deadline: float | None = None) -> np.ndarray:
        """The opening exchange of operation *op* (collective, the same size for every operation).

        Parameters
        ----------
        op : str
            One of :data:`OPERATIONS`.
        failure : Failure, optional
            This rank's failed checks of the call (raised on every rank).
        args : int
            A digest of the call's arguments (0: the operation checks them itself).
        extra : sequence of int
            Up to :data:`EXTRA` words of the operation's own.
        deadline : float, optional
            ``time.monotonic()`` past which waiting stops with :class:`Late` (the
            exchange is then left pending: the caller ends the job).

        Returns
        -------
        numpy.ndarray
            ``(size, 1 + EXTRA)`` int64: row ``r`` holds rank ``r``'s arguments' digest
            and its *extra* words.

        Raises
        ------
        CollectiveMismatchError
            Ranks entered different operations (or are at different calls of the
            session), on every rank, naming what each called; the session is broken.
        SDMError
            The failure of the lowest failed rank, on every rank.
        """
        self.seq += 1
        vec = self._vec
        vec[:] = 0
        vec[0] = failure is not None
        vec[1] = _CODES[op]
        vec[2] = self.seq
        vec[3] = args
        if len(extra):
            vec[_HEAD:_HEAD + len(extra)] = extra
        out = np.empty((self.size, WIDTH), dtype=np.int64)
        if self.size == 1:  # one process: nothing to exchange (a nonblocking collective costs up to ms here)
            out[0] = vec
        elif deadline is None:
            self.comm.Iallgather(vec, out).Wait()
        else:
            request = self.comm.Iallgather(vec, out)
            rest = _REST_FIRST
            while not request.Test():
                if time.monotonic() > deadline:
                    raise Late(op)
                time.sleep(rest)
                rest = min(2 * rest, _REST_MAX)
        heads = out[:, 1:3]
        if (heads != heads[0]).any():
            self._mismatch(out, op)
        if out[:, 0].any():
            agree(self.comm, failure)  # the rare path: the messages travel pickled; raises on every rank
            raise InternalError("a rank flagged a failure it did not send; this is a bug, please report it")
        return out[:, 3:]

    def _mismatch(self, out: np.ndarray, op: str) -> NoReturn:
        """Every rank: name what each rank called, break the session, raise the same error everywhere."""
        from ..layout.agreement import by_value

        label, args, kwargs = self.current
        calls = agree(self.comm, None, f"{describe(label, args, kwargs) if label else op} (call #{self.seq})")
        who = by_value(calls)
        self.broken = f"ranks entered different SDM operations: {who if len(who) <= 2000 else who[:2000] + ' ...'}"
        raise CollectiveMismatchError(
            f"{self.broken}; every rank must make the same SDM calls in the same order (a call made under "
            "`if rank == 0:` is the usual cause). This session can no longer make collective calls: close it (the "
            "run is left interrupted, every committed step readable)")

    # ------------------------------------------------------------------ exits
    def abort(self, exc: BaseException, where: str) -> NoReturn:
        """Report *exc* on stderr and end the whole job with ``MPI_Abort`` (the other ranks cannot follow).

        Never called on a single rank (there is nobody to wait for).
        """
        text = "".join(traceback.format_exception(exc))
        name = type(exc).__name__
        sys.stderr.write(mask_urls(
            f"{text}sdm: rank {self.rank} of {self.size}: {name} in {where}; the other ranks cannot follow this "
            f"one, so the MPI job is ended with MPI_Abort instead of waiting forever. Steps committed before stay "
            "readable and verified; the run is left interrupted (`sdm verify RUN` checks it).\n"))
        sys.stderr.flush()
        MPI.COMM_WORLD.Abort(130 if isinstance(exc, KeyboardInterrupt) else 1)
        raise SystemExit(1)  # not reached: MPI_Abort does not return


def _operations_of(obj: Any) -> Operations:
    """The :class:`Operations` of a Session, or of the session of a Group or dataset array."""
    ops = getattr(obj, "_ops", None)
    if ops is None:
        ops = obj.session._ops if hasattr(obj, "session") else obj.group.session._ops
    assert isinstance(ops, Operations)
    return ops


def collective(op: str, *, opens: bool = True, label: str | None = None) -> Callable[[F], F]:
    """Make a method a collective operation *op* of its session.

    The outermost operation on the call stack is the operation: on the application's
    thread it first waits for the session's nonblocking dumps (:mod:`sdm.engine.background`;
    a failure of one is raised here, on every rank), then it checks that the
    session is usable, makes the opening exchange (unless *opens* is False: the method
    makes it itself with its own words, as ``write`` and ``read`` do) and marks the
    session torn when an exception other than an :class:`~sdm.errors.SDMError` leaves
    it after it started (calls nested in it are parts of it).

    Parameters
    ----------
    op : str
        One of :data:`OPERATIONS`.
    opens : bool
        Whether the wrapper makes the opening exchange.
    label : str, optional
        How the call is named in a mismatch's message (default: the method's qualified name).
    """
    if op not in _CODES:
        raise InternalError(f"unknown collective operation {op!r}")

    def wrap(fn: F) -> F:
        name = label or fn.__qualname__
        signature = inspect.signature(fn)

        @functools.wraps(fn)
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            ops = _operations_of(self)
            if ops.depth:  # a part of the operation already entered
                return fn(self, *args, **kwargs)
            signature.bind(self, *args, **kwargs)  # a call's own TypeError, before any collective
            ops.drain()  # the dumps issued before it come first (a no-op on the worker's thread)
            ops.usable()
            ops.depth = 1
            ops.current = (name, args, kwargs)
            try:
                if opens:
                    ops.enter(op)
                return fn(self, *args, **kwargs)
            except SDMError:
                raise  # raised on every rank by SDM's agreements
            except BaseException as exc:  # KeyboardInterrupt, a bug: the other ranks may be anywhere in it
                ops.torn = exc
                raise
            finally:
                ops.depth = 0
                ops.current = (name, (), {})  # the arguments are not held past the call (a dump's copies)

        return call  # type: ignore[return-value]

    return wrap
