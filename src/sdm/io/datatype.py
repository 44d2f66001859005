"""Datatype I/O: independent access through the file view of the derived datatype.

The file view is the piece's own MPI type (``subarray`` for boxes, ``darray`` for
cyclic pieces, ``indexed_block`` for map arrays) and the memory type skips ghosts, so
one independent ``MPI_File_write_at`` / ``read_at`` describes everything; the MPI
library decides how to access it (ROMIO: data sieving for noncontiguous requests,
with file locks around each read-modify-write of a write, unless the user's hints
``romio_ds_read`` / ``romio_ds_write`` say otherwise).
"""

from __future__ import annotations

import math

from ._support import ThroughView
from .base import register

__all__ = ["DatatypeIO", "romio_windows", "IND_RD_BUFFER", "IND_WR_BUFFER"]

IND_RD_BUFFER = 4 << 20  #: ROMIO's default ``ind_rd_buffer_size``: its data-sieving buffer for reads
IND_WR_BUFFER = 512 << 10  #: ROMIO's default ``ind_wr_buffer_size``: the same for writes


def romio_windows(nbytes: int, regions: int, span: int, buffer: int) -> tuple[int, float]:
    """ROMIO's data-sieving windows over a rank's *regions* regions: ``(count, bytes covered)``.

    ROMIO starts a window at the first region not covered yet and makes it one buffer
    long: regions closer than a buffer share windows that tile the *span*; farther
    apart, every region starts windows of its own.  (The cost model's description of
    what this method's calls do inside ROMIO.)
    """
    if span / max(regions, 1) <= buffer:
        return math.ceil(span / buffer), float(span)
    n = regions * math.ceil(nbytes / regions / buffer)
    return n, float(min(span, n * buffer))


class DatatypeIO(ThroughView):
    """Set the file view from the derived file type, then one independent call."""

    name = "datatype"
    collective = False


register(DatatypeIO())
