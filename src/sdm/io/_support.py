"""Helpers the I/O methods share: file views with ROMIO switches, byte views, runs, errors.

Every method starts with a (collective) ``Set_view``; the info handed to it carries
the ROMIO switches the method needs (list I/O turns data sieving off, the others put
back the user's choice), so one method never inherits another's settings on a file
kept open across writes.

``MPI_File_set_view`` is collective (ROMIO adds a barrier and checks the hints across
ranks), so an access through the view already set on a cached file skips it: the view
``(disp, etype, filetype)`` repeats its file type every ``extent`` bytes, and a dataset
written again at ``disp + k * extent`` (the next step of a dataset in a level-2/3 file,
where consecutive reservations are whole datasets) is reached through the same view at
offset ``k * elements``.  Whether to skip depends only on values that are the same on
every rank (the layout key, the displacement, the extent, the hints) and on the view
state, which only changes inside the collective call: every rank decides alike.
"""

from __future__ import annotations

import math
from typing import Any, Callable, cast

import numpy as np
from mpi4py import MPI

from ..errors import HintError
from ..layout.regions import Runs, runs
from .base import SymmetricMethod, Transfer

__all__ = ["set_view", "forget_view", "byte_view", "transfer_runs", "memory_runs", "int_hint", "Deferred", "ThroughView"]

#: ROMIO hints a method may set through its file view (others stay as opened).
_VIEW_HINTS = ("romio_ds_read", "romio_ds_write", "romio_cb_read", "romio_cb_write", "cb_buffer_size",
               "ind_rd_buffer_size", "ind_wr_buffer_size")


def set_view(t: Transfer, etype: MPI.Datatype, filetype: MPI.Datatype, *, key: Any = None, extent: int = 0,
             elements: int = 0, **overrides: str) -> int:
    """``Set_view(t.disp, etype, filetype)`` with the ROMIO switches for this method (collective).

    Data sieving switches default to the user's hints, else ROMIO's ``automatic``;
    *overrides* win over both.

    Parameters
    ----------
    t : Transfer
    etype, filetype : MPI.Datatype
    key : object, optional
        What the view is (e.g. ``("piece", t.layout)``), the same on every rank;
        without it the view is set on every call.
    extent : int
        Bytes after which *filetype* repeats (its extent).
    elements : int
        Etypes this rank sees in one *filetype*.

    Returns
    -------
    int
        Offset, in etypes, of ``t.disp`` in the view now in effect: 0 after a
        ``Set_view``; ``k * elements`` when the view set earlier at ``t.disp - k * extent``
        is reused.  Add it to the offsets of the data calls.
    """
    info_items = []
    for name in _VIEW_HINTS:
        value = overrides.get(name, t.hints.get(name))
        if value is None and name.startswith("romio_ds_"):
            value = "automatic"
        if value is not None:
            info_items.append((name, str(value)))
    return t.file.set_view(t.disp, etype, filetype, info=info_items, key=key, extent=extent, elements=elements)


def forget_view(t: Transfer) -> None:
    """Record that a view is being set outside :func:`set_view` (the state is unknown)."""
    t.file.forget_view()


def byte_view(array: np.ndarray) -> np.ndarray:
    """The bytes of *array*'s buffer from its first element on, as a 1-D ``uint8`` view.

    Offsets computed from the array's strides index this view.  Works for contiguous
    arrays and for strided views with positive strides (e.g. one field of an
    interleaved array), without a copy.
    """
    if array.size == 0:
        return np.zeros(0, dtype=np.uint8)
    if array.flags.c_contiguous or array.flags.f_contiguous:
        return array.ravel(order="K").view(np.uint8)
    if any(s < 0 for s in array.strides):
        raise ValueError("byte_view needs non-negative strides")
    extent = sum((n - 1) * s for n, s in zip(array.shape, array.strides)) + array.itemsize
    first = np.lib.stride_tricks.as_strided(array, shape=(1,), strides=(array.itemsize,)).view(np.uint8)
    return np.lib.stride_tricks.as_strided(first, shape=(extent,), strides=(1,))


def memory_runs(t: Transfer) -> tuple[Runs, np.ndarray]:
    """:func:`transfer_runs` and their memory offsets (never None for a transfer's runs)."""
    seg = transfer_runs(t)
    return seg, cast(np.ndarray, seg.memory)


def transfer_runs(t: Transfer) -> Runs:
    """The segments of a transfer: runs contiguous in the file and in the local array.

    Kept in the piece's cache for the array's memory layout (a dataset's view keeps one
    piece for every step, and arrays of a run usually share one layout); read-only.
    """
    def build() -> Runs:
        seg = runs(t.piece, t.order, t.array.itemsize, t.array.strides)
        for a in (seg.file, seg.memory, seg.length):
            if a is not None:
                a.setflags(write=False)
        return seg

    return t.piece.cached(("runs", t.order, t.array.itemsize, t.array.strides), build, keep=4)


def int_hint(hints: dict[str, Any], key: str, default: int, minimum: int = 1) -> int:
    """An integer hint (``"4194304"``, ``4194304``, ``"4m"``, ``"64k"``) or *default*.

    Raises
    ------
    HintError
        The value is not an integer of at least *minimum*.
    """
    raw = hints.get(key)
    if raw is None:
        return default
    text = str(raw).strip().lower()
    scale = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}.get(text[-1:], 1)
    try:
        value = int(text[:-1] if scale > 1 else text) * scale
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise HintError(f"hint {key}={raw!r} must be an integer >= {minimum} (suffixes k, m, g allowed)")
    return value


class Deferred:
    """Runs local steps until one fails, keeping the error for after the collective steps.

    A method that mixes local work with collective calls runs the local parts through
    :meth:`run` and calls :meth:`reraise` once every collective call has been made,
    so a failure on one rank never leaves the others waiting.
    """

    def __init__(self) -> None:
        self.error: BaseException | None = None

    def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Call ``fn(*args)`` unless an earlier step failed; keep the first exception."""
        if self.error is not None:
            return None
        try:
            return fn(*args)
        except Exception as exc:  # noqa: BLE001 - re-raised by reraise()
            self.error = exc
            return None

    def reraise(self) -> None:
        """Raise the kept exception, if any."""
        if self.error is not None:
            raise self.error


class ThroughView(SymmetricMethod):
    """One call through the file view of the piece's derived datatype.

    Subclasses say whether the call is collective (:attr:`IOMethod.collective`:
    :meth:`~sdm.storage.backends.base.CollectiveHandle.write_at_all` and ``read_at_all``,
    else ``write_at`` and ``read_at``).
    """

    def move(self, t: Transfer, writing: bool) -> None:
        # the file type's extent is the whole dataset: computed from what every rank has
        # (a rank with an empty piece has an empty type of extent 0, yet must decide alike)
        extent = math.prod(int(n) for n in t.piece.shape) * t.etype.Get_extent()[1] if t.piece is not None else 0
        size = t.etype.Get_size()
        key = None if t.layout is None else ("piece", t.layout)
        base = set_view(t, t.etype, t.filetype, key=key, extent=extent,
                        elements=t.filetype.Get_size() // size if size else 0)
        fh = t.file
        if self.collective:
            (fh.write_at_all if writing else fh.read_at_all)(base, t.memory)
        else:
            (fh.write_at if writing else fh.read_at)(base, t.memory)
