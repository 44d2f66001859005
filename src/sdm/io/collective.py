"""Two-phase collective I/O through a file view (``MPI_File_write_at_all``)."""

from __future__ import annotations

from .base import IOMethod, Transfer, register

__all__ = ["CollectiveIO"]


class CollectiveIO(IOMethod):
    """Set the file view from the derived file type, then one collective call.

    ROMIO aggregates the ranks' noncontiguous pieces into large contiguous requests
    (two-phase I/O); aggregator count and buffer size follow the session hints
    (``cb_nodes``, ``cb_buffer_size``, ``romio_cb_write`` ...).
    """

    name = "collective"
    collective = True

    def write(self, t: Transfer) -> None:
        t.fh.Set_view(t.disp, t.etype, t.filetype)
        t.fh.Write_at_all(0, t.memory)

    def read(self, t: Transfer) -> None:
        t.fh.Set_view(t.disp, t.etype, t.filetype)
        t.fh.Read_at_all(0, t.memory)


register(CollectiveIO())
