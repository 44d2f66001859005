"""Several datasets of one file moved by one file view and one MPI-IO call.

PnetCDF's ``wait_all`` and HDF5's ``H5Dwrite_multi`` merge the pending requests of many
variables into one file view and one collective call; this module does the same for
the datasets of one dump that lie in one file (levels 2 and 3) and are moved through a
file view (the ``collective`` and ``datatype`` methods).

The combined file type is a struct of each dataset's own file type
(:func:`sdm.layout.datatypes.file_type`, extent: the whole dataset) at the dataset's
offset relative to the first one, in increasing offset order (the reservations of a
dump never overlap, so the type map is monotonic, as MPI requires of a file type), and
resized to the span of the dump.  The element type of the view is ``MPI.BYTE``, so
datasets of different dtypes share it.  The memory side is a struct of each dataset's
memory type at its buffer's absolute address (``MPI.BOTTOM``).

The view is kept on the open file under a key that every rank computes alike (the
datasets' layout keys, dtypes and relative offsets): the next dump of the same datasets,
reserved right after this one (``disp + k * span``), is written through the view
already set, without another collective ``Set_view`` (see :func:`sdm.io._support.set_view`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from mpi4py import MPI

from ..errors import InvalidArgumentError
from ..storage.backends.base import CollectiveHandle
from ._support import set_view
from .base import Transfer

__all__ = ["Part", "CombinedTypes", "combined_types", "move_combined", "COMBINABLE"]

#: Methods whose access is "one call through the piece's file view" (the handle's call of each: collective
#: or independent): what a combined call does for many.
COMBINABLE = {"collective": "write_at_all", "datatype": "write_at"}


@dataclass(frozen=True)
class Part:
    """One dataset's share of a combined access on this rank.

    Attributes
    ----------
    offset : int
        Byte offset of the dataset in the file (the same on every rank).
    nbytes : int
        The dataset's size in the file (the same on every rank).
    filetype : MPI.Datatype
        This rank's committed file type of the dataset (extent: the whole dataset).
    memory : list
        The mpi4py buffer spec ``[array, count, type]`` of this rank's elements.
    layout : object
        The dataset's layout key, the same on every rank (None: the view is not kept).
    """

    offset: int
    nbytes: int
    filetype: MPI.Datatype
    memory: list
    layout: Any = None


@dataclass
class CombinedTypes:
    """The committed types of one combined access (free them with :meth:`free`)."""

    disp: int
    span: int
    filetype: MPI.Datatype
    memory: MPI.Datatype
    key: Any

    def free(self) -> None:
        for t in (self.filetype, self.memory):
            if t != MPI.DATATYPE_NULL:
                t.Free()


def combined_types(parts: Sequence[Part]) -> CombinedTypes:
    """The file type and memory type that move every part in one call (see the module's docstring).

    Raises
    ------
    ValueError
        Parts overlap (their reservations must be disjoint).
    """
    ordered = sorted(parts, key=lambda p: p.offset)
    disp = ordered[0].offset
    for a, b in zip(ordered, ordered[1:]):
        if a.offset + a.nbytes > b.offset:
            raise ValueError(f"combined parts overlap: [{a.offset}, {a.offset + a.nbytes}) and {b.offset}")
    span = ordered[-1].offset + ordered[-1].nbytes - disp
    struct = MPI.Datatype.Create_struct([1] * len(ordered), [p.offset - disp for p in ordered],
                                        [p.filetype for p in ordered])
    try:
        filetype = struct.Create_resized(0, span).Commit()
    finally:
        struct.Free()
    addresses = [MPI.Get_address(p.memory[0]) for p in ordered]
    memory = MPI.Datatype.Create_struct([int(p.memory[1]) for p in ordered], addresses,
                                        [p.memory[2] for p in ordered]).Commit()
    layouts = tuple(p.layout for p in ordered)
    key = None if any(x is None for x in layouts) else ("combined", layouts,
                                                       tuple((p.offset - disp, p.nbytes) for p in ordered))
    return CombinedTypes(disp, span, filetype, memory, key)


def move_combined(fh: CollectiveHandle, method: str, types: CombinedTypes, *, writing: bool, hints: dict) -> None:
    """Write (or read) every part of *types* with one view and one call of *method* (``COMBINABLE``).

    Collective for ``collective`` (every rank calls it, with its own parts, possibly none
    of its elements); ``Set_view`` is collective for both, unless the view kept by the
    handle (the open file's view state) already describes this dump.
    """
    if method not in COMBINABLE:
        raise InvalidArgumentError(f"method {method!r} cannot move datasets combined; use one of {sorted(COMBINABLE)}")
    t = Transfer(fh, types.disp, MPI.BYTE, types.filetype, [MPI.BOTTOM, 1, types.memory], hints=hints)
    base = set_view(t, MPI.BYTE, types.filetype, key=types.key, extent=types.span,
                    elements=types.filetype.Get_size())
    if method == "collective":
        (fh.write_at_all if writing else fh.read_at_all)(base, t.memory)
    else:
        (fh.write_at if writing else fh.read_at)(base, t.memory)
