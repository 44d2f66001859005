"""Two-phase collective I/O through a file view (``MPI_File_write_at_all``)."""

from __future__ import annotations

from ._support import ThroughView
from .base import register

__all__ = ["CollectiveIO"]


class CollectiveIO(ThroughView):
    """Set the file view from the derived file type, then one collective call.

    ROMIO aggregates the ranks' noncontiguous pieces into large contiguous requests
    (two-phase I/O): ``cb_nodes`` aggregators (PDS/PIO's I/O servers; set when the
    file is opened, from the session's hints) each move ``cb_buffer_size`` bytes at a
    time (PIO's buffers; settable per access through the hints, like
    ``romio_cb_write`` / ``romio_cb_read``).
    """

    name = "collective"
    collective = True


register(CollectiveIO())
