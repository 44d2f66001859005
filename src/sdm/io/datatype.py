"""Datatype I/O: independent access through the file view of the derived datatype.

The file view is the piece's own MPI type (``subarray`` for boxes, ``darray`` for
cyclic pieces, ``indexed_block`` for map arrays) and the memory type skips ghosts, so
one independent ``MPI_File_write_at`` / ``read_at`` describes everything; the MPI
library decides how to access it (ROMIO: data sieving for noncontiguous requests,
with file locks around each read-modify-write of a write, unless the user's hints
``romio_ds_read`` / ``romio_ds_write`` say otherwise).
"""

from __future__ import annotations

from ._support import ThroughView
from .base import register

__all__ = ["DatatypeIO"]


class DatatypeIO(ThroughView):
    """Set the file view from the derived file type, then one independent call."""

    name = "datatype"
    collective = False
    calls = ("Write_at", "Read_at")


register(DatatypeIO())
