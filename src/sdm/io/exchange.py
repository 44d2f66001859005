"""Map-array I/O by exchange: rows travel to the rank that owns their file block.

For irregular (map-array) pieces, describing thousands of scattered rows to MPI-IO
with indexed types makes the library flatten and sort them on every access. This
method does the two-phase work itself, once per map and then with plain numpy:

* **plan** (built once per map, communicator and row size, cached on the piece): the
  global rows are split into ``size`` contiguous blocks; every rank tells each block
  owner which of that block's rows it holds (one ``Alltoall`` + one ``Alltoallv`` of
  indices).
* **write**: the rank's rows go to the block owners (one ``Alltoallv`` of values),
  which place them and write their block with one contiguous collective call.
* **read**: every rank reads its block with one contiguous collective call and sends
  each rank the rows it asked for (the reverse ``Alltoallv``), ghost rows included.

A block whose rows are not all owned (a map with ``coverage=False``) is written as its
runs of owned rows only, so unowned bytes are never touched.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from mpi4py import MPI

from ..errors import SDMError
from .base import IOMethod, Transfer, register

__all__ = ["ExchangeIO", "ExchangePlan"]


@dataclass
class ExchangePlan:
    """Who sends which rows where, for one map on one communicator."""

    lo: int  # this rank's block of global rows [lo, hi)
    hi: int
    sendcounts: np.ndarray  # rows this rank sends to each block owner (its sorted rows, in order)
    recvcounts: np.ndarray  # rows each rank sends to this block
    slots: np.ndarray  # where each received row goes in the block (row - lo)
    complete: bool  # every row of the block is received
    runs: tuple[np.ndarray, np.ndarray]  # starts and lengths of received runs (block-relative)
    present: np.ndarray  # the received rows of the block, ascending (block-relative)
    rowtype: MPI.Datatype  # one row of the dataset

    def free(self) -> None:
        """Release the row datatype."""
        if self.rowtype != MPI.DATATYPE_NULL:
            self.rowtype.Free()


def _comm(t: Transfer) -> MPI.Comm:
    """The transfer's communicator (the exchange needs one)."""
    if t.comm is None:
        raise SDMError("the exchange method needs the transfer's communicator")
    return t.comm


def _displs(counts: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)


def _plan(t: Transfer) -> ExchangePlan:
    piece, comm = t.piece, _comm(t)
    rowelems = int(np.prod(piece.shape[1:], dtype=np.int64))
    # the same key on every rank (no communicator handle): the cache decides a collective call
    key = ("exchange", comm.Get_size(), t.etype.Get_extent()[1], rowelems)
    return piece.cached(key, lambda: _new_plan(t, rowelems))


def _new_plan(t: Transfer, rowelems: int) -> ExchangePlan:
    """The rows this rank gathers and where they go (collective: every rank builds at once)."""
    piece, comm = t.piece, _comm(t)
    size, rank = comm.Get_size(), comm.Get_rank()
    n = piece.shape[0]
    chunk = max(1, -(-n // size))
    rows = piece.indices[0]  # sorted
    sendcounts = np.bincount(rows // chunk, minlength=size).astype(np.int64) if rows.size else np.zeros(size, np.int64)
    recvcounts = np.empty(size, dtype=np.int64)
    comm.Alltoall(sendcounts, recvcounts)
    got = np.empty(int(recvcounts.sum()), dtype=np.int64)
    comm.Alltoallv([np.ascontiguousarray(rows), sendcounts, _displs(sendcounts), MPI.INT64_T],
                   [got, recvcounts, _displs(recvcounts), MPI.INT64_T])
    lo, hi = min(n, rank * chunk), min(n, (rank + 1) * chunk)
    slots = got - lo
    present = np.zeros(hi - lo, dtype=bool)
    present[slots] = True
    edges = np.flatnonzero(np.diff(np.concatenate([[False], present, [False]]).astype(np.int8)))
    starts, ends = edges[0::2], edges[1::2]
    rowtype = t.etype.Create_contiguous(rowelems).Commit()
    return ExchangePlan(lo, hi, sendcounts, recvcounts, slots, bool(present.all()), (starts, ends - starts),
                        np.flatnonzero(present), rowtype)


class ExchangeIO(IOMethod):
    """Two-phase I/O for map-array pieces with numpy and one exchange per access."""

    name = "exchange"
    collective = True

    @staticmethod
    def _check(t: Transfer) -> None:
        if t.piece is None or t.piece.kind != "map":
            raise SDMError("the exchange method serves map-array views only; use collective for other views")

    def write(self, t: Transfer) -> None:
        self._check(t)
        plan = _plan(t)
        rest = t.piece.shape[1:]
        send = np.ascontiguousarray(t.array[t.piece.memory_rows])
        recv = np.empty((int(plan.recvcounts.sum()), *rest), dtype=t.array.dtype)
        _comm(t).Alltoallv([send, plan.sendcounts, _displs(plan.sendcounts), plan.rowtype],
                         [recv, plan.recvcounts, _displs(plan.recvcounts), plan.rowtype])
        block = np.empty((plan.hi - plan.lo, *rest), dtype=t.array.dtype)
        block[plan.slots] = recv
        rowbytes = plan.rowtype.Get_extent()[1]
        # One Set_view and one Write_at_all on every rank, whatever its block holds (all rows,
        # some runs of rows or none): collective calls never depend on a rank's data.
        starts, lengths = plan.runs  # only the owned runs are written: holes keep their bytes
        if plan.complete or not starts.size:
            ftype = plan.rowtype.Create_contiguous(block.shape[0] if plan.complete else 0).Commit()
            data = block if plan.complete else block[:0]
        else:
            ftype = plan.rowtype.Create_indexed(lengths.tolist(), starts.tolist()).Commit()
            data = block[plan.present]  # indexing keeps the dtype (np.concatenate would make it native-endian)
        try:
            t.file.set_view(t.disp + plan.lo * rowbytes, plan.rowtype, ftype)  # not kept
            t.file.write_at_all(0, [data, data.shape[0], plan.rowtype])
        finally:
            ftype.Free()

    def read(self, t: Transfer) -> None:
        self._check(t)
        plan = _plan(t)
        rest = t.piece.shape[1:]
        block = np.empty((plan.hi - plan.lo, *rest), dtype=t.array.dtype)
        rowbytes = plan.rowtype.Get_extent()[1]
        t.file.set_view(t.disp + plan.lo * rowbytes, MPI.BYTE, MPI.BYTE)  # not kept
        t.file.read_at_all(0, [block, block.shape[0], plan.rowtype])
        send = np.ascontiguousarray(block[plan.slots])
        recv = np.empty((int(plan.sendcounts.sum()), *rest), dtype=t.array.dtype)
        _comm(t).Alltoallv([send, plan.recvcounts, _displs(plan.recvcounts), plan.rowtype],
                         [recv, plan.sendcounts, _displs(plan.sendcounts), plan.rowtype])
        t.array[t.piece.memory_rows] = recv


register(ExchangeIO())
