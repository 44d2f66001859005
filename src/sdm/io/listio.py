"""List I/O: one independent call per rank with every file region listed.

The rank's contiguous file regions become one ``hindexed`` file type (offsets and
lengths in bytes) and the memory side is the transfer's memory type; a single
``MPI_File_write_at`` / ``read_at`` hands the whole list to the MPI library, which
walks it in C (ROMIO's strided path with data sieving switched off: one system call
per region, no read-modify-write, no locks).  Compared with :mod:`posix` the calls
per region disappear, the accesses per region remain.
"""

from __future__ import annotations

from mpi4py import MPI

from ..layout.regions import runs
from ._support import set_view
from .base import SymmetricMethod, Transfer, register

__all__ = ["ListIO"]

class ListIO(SymmetricMethod):
    """One independent call per rank through an offset-length list file type."""

    name = "list"
    collective = False

    def move(self, t: Transfer, writing: bool) -> None:
        ftype = _list_type(t)
        try:
            set_view(t, MPI.BYTE, ftype, romio_ds_read="disable", romio_ds_write="disable")  # collective
            fh = t.file
            (fh.write_at if writing else fh.read_at)(0, t.memory)
        finally:
            ftype.Free()


def _list_type(t: Transfer) -> MPI.Datatype:
    """The committed ``hindexed`` byte type of the rank's file regions."""
    if t.piece.size == 0:
        return MPI.BYTE.Create_contiguous(0).Commit()
    regions = runs(t.piece, t.order, t.array.itemsize, memory=False)
    return MPI.BYTE.Create_hindexed(regions.length.tolist(), regions.file.tolist()).Commit()


register(ListIO())
