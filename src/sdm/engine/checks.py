"""Checks the write and read protocols make on every rank before the opening exchange."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .. import _validate as check
from .. import convert
from ..errors import (
    CollectiveMismatchError,
    DistributionError,
    LocalArrayError,
    ReadOnlyError,
)
from ..layout import Distribution, MapArray
from ..layout.agreement import differences
from ..layout.views import ResolvedView



__all__: list[str] = []


def _not_global(name: str) -> DistributionError:
    """The error for a ranked dataset given another view or asked for its piece."""
    return DistributionError(f"dataset {name!r} is ranked (sdm.Ranked): each rank gives its own rows, there is no "
                             "global array to cut into pieces")


def _has_gaps(view: Distribution) -> bool:
    """Whether a view may leave elements unwritten (a map array without coverage)."""
    return isinstance(view, MapArray) and not view.coverage


def _key(value: object) -> object:
    """A picklable, comparable form of an argument that never raises (for the call check)."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    return value if value is None or isinstance(value, str) else repr(value)


def check_writable(mode: str, run_id: int, what: str) -> None:
    """Refuse *what* in a reading session (mode ``"r"``)."""
    if mode == "r":
        raise ReadOnlyError(f"cannot {what}: the session of run {run_id} was opened with mode='r'; "
                            "open with mode='a' to add data to an existing run")


def _check_step(step: object) -> None:
    check.integer(step, "time step")


#: The arguments of a write's call (sdm.engine.write; sdm.engine.ranked after the view's kind), named for the
#: message of calls that differ
WRITE_CALL = ("datasets", "step", "overwrite", "method", "file space reserved ahead")


def _check_same_call(payloads: list[Any], what: str) -> None:
    """Raise :class:`CollectiveMismatchError` (on every rank alike) unless every rank made the same call; each
    payload is ``(call, plan, stats, names)``, *names* naming each argument of *call* for the message."""
    calls = [p[0] for p in payloads]
    if any(c != calls[0] for c in calls):
        raise CollectiveMismatchError(
            f"ranks made different {what} calls: {differences([named(p[0], p[3]) for p in payloads])}; "
            "every rank must call with the same datasets, step and options"
        )


def named(call: Any, names: Sequence[str]) -> list[tuple[str, Any]]:
    """The arguments of *call* (a tuple, or one value) as ``(name, value)`` pairs, by *names* in order (an
    argument past them is called by its position)."""
    values = call if isinstance(call, tuple) else (call,)
    return [(names[i] if i < len(names) else f"argument {i + 1}", v) for i, v in enumerate(values)]


def _check_array(array: Any, view: ResolvedView, name: str, rank: int, *, for_read: bool,
                 casting: str | None = None) -> tuple[np.ndarray, convert.Conversion | None]:
    """Check a local array against the view: a usable (contiguous) array and the conversion it needs.

    A write's array of another dtype comes back converted to the stored one (the one
    copy, which also makes a non-contiguous array contiguous); a read's *out* comes
    back as it is, with the conversion from the stored dtype to its own.
    """
    if not isinstance(array, np.ndarray):
        if for_read:
            raise LocalArrayError(f"out for dataset {name!r} must be a numpy array, got {type(array).__name__}")
        try:
            array = np.asarray(array)
        except (TypeError, ValueError, OverflowError):
            array = None
        if array is None or array.dtype.hasobject:
            raise LocalArrayError(
                f"the local array of dataset {name!r} on rank {rank} must be a numpy array of {view.dtype}"
            )
    conv = None
    if array.dtype != view.dtype:
        what = (f"dataset {name!r} stores {convert.describe(view.dtype)} but {'out' if for_read else 'the local array'} "
                f"on rank {rank} is {convert.describe(array.dtype)}")
        conv = convert.conversion(view.dtype, array.dtype, casting, what) if for_read else \
            convert.conversion(array.dtype, view.dtype, casting, what)
    expected = view.piece.memory_shape
    if array.shape != expected:
        ghost = f" (interior {view.piece.counts} plus ghosts {view.piece.ghosts})" if view.piece.has_ghosts else ""
        raise LocalArrayError(
            f"dataset {name!r} with view {view.dist!r} expects a local array of shape {expected}{ghost} on rank "
            f"{rank}, got {array.shape}"
        )
    needs_c = view.piece.kind == "map"
    if not (array.flags.c_contiguous or (array.flags.f_contiguous and not needs_c)):
        if for_read:
            what = "C-contiguous" if needs_c else "C- or Fortran-contiguous"
            raise LocalArrayError(f"out for dataset {name!r} must be {what}")
        if conv is None:
            array = np.array(array, order="C" if needs_c or view.order != "F" else "F")  # one copy, in the storage order
    if for_read and not array.flags.writeable:
        raise LocalArrayError(f"out for dataset {name!r} is read-only")
    if conv is not None and not for_read:  # the conversion is the copy (made contiguous in the same pass)
        return convert.pack(conv, array, view.piece, view.order), conv
    return array, conv
