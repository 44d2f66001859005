"""Naive POSIX-style I/O: one independent call per segment (the baseline).

A *segment* is a run of bytes contiguous both in the file and in the local array, so
nothing is ever packed or sieved: a piece with ``n`` segments costs ``n`` calls
(``MPI_File_write_at`` / ``read_at`` through a plain byte view, which ROMIO turns into
one ``pwrite`` / ``pread`` each).  This is what the seed papers measure every
optimization against: the original LBMPI code and NCIO's POSIX I/O.
"""

from __future__ import annotations

from mpi4py import MPI

from ._support import byte_view, memory_runs, set_view
from .base import SymmetricMethod, Transfer, register

__all__ = ["PosixIO"]


class PosixIO(SymmetricMethod):
    """One ``Write_at`` / ``Read_at`` per segment (independent)."""

    name = "posix"
    collective = False

    def move(self, t: Transfer, writing: bool) -> None:
        # collective: every rank, even with nothing to move (skipped when the byte view is set)
        base = set_view(t, MPI.BYTE, MPI.BYTE, key="bytes", extent=1, elements=1)
        if t.piece.size == 0:
            return
        seg, memory = memory_runs(t)
        mv = byte_view(t.array).data
        fh = t.file
        call = fh.write_at if writing else fh.read_at
        for f, m, n in zip(seg.file.tolist(), memory.tolist(), seg.length.tolist()):  # the point: a call each
            call(base + f, mv[m:m + n])


register(PosixIO())
