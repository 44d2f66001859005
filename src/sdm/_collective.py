"""Collective helpers that keep every rank in step and turn one rank's error into all's.

The rules (DESIGN.md): every rank makes every collective call in the same order, and an
error on any rank is raised on all ranks as the same :class:`~sdm.errors.SDMError`.
The helpers here are the only places SDM decides "did anybody fail?".
"""

from __future__ import annotations

import traceback
from typing import Any, Callable, TypeVar

from mpi4py import MPI

from .catalog.urls import mask_urls
from .errors import InternalError, SDMError, StorageError, error_class

T = TypeVar("T")

__all__ = ["Failure", "capture", "agree", "root_call", "raise_first", "os_error"]


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
    return result  # type: ignore[return-value]
