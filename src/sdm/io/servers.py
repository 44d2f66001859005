"""I/O servers with buffers (PDS/PIO): SDM's own two-phase collective I/O.

PIO collects data from many compute ranks into a few *I/O servers*, each of which
writes large buffers (1 MB by default) to the file system; here the same idea is built
on MPI derived datatypes so that no element is touched by Python:

1. every rank publishes the file side of its piece (one allgather of per-dimension
   index sets, arithmetic progressions compressed to three numbers);
2. the rows (slowest dimension) the access touches are cut into *chunks* of about
   ``sdm_buffer_size`` bytes; chunk ``c`` is served by server ``c % servers`` in round
   ``c // servers`` (``sdm_io_servers`` servers spread evenly over the ranks);
3. each round is one ``MPI_Alltoallv`` of bytes: every rank packs the elements of
   its piece that fall in each server's chunk (numpy slices of its local array, ghosts
   skipped: strided copies), and each server unpacks them into its chunk buffer viewed
   as a slab of the global array (MPI derived datatypes would do the same, but MPICH
   moves 8-byte elements through them about 20 times slower than numpy);
4. each server writes the span of its chunk with one call; when ranks leave holes in
   it (bytes nobody owns) the server reads the span first (read-modify-write without
   conflicts: chunks are disjoint).  Reads run the same rounds backwards.

Hints: ``sdm_io_servers`` (default: every rank), ``sdm_buffer_size`` (default 1 MiB).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from mpi4py import MPI

from ..layout.regions import file_strides, memory_positions, storage_dims
from ._selection import _step, selector
from ._support import Deferred, int_hint, read_fully, set_view
from .base import SymmetricMethod, Transfer, register

__all__ = ["ServersIO", "BUFFER_SIZE", "chunk_rows", "server_ranks"]

BUFFER_SIZE = 1 << 20  #: PIO's default buffer


def _pack(a: np.ndarray) -> tuple:
    """A sorted index set as ``("r", start, stop, step)`` when arithmetic, else ``("a", array)``."""
    step = _step(a, increasing=True)
    if step is not None:
        return ("r", int(a[0]), int(a[-1]) + 1, step)
    return ("a", a)


def _unpack(p: tuple) -> np.ndarray:
    return np.arange(p[1], p[2], p[3], dtype=np.int64) if p[0] == "r" else p[1]


def server_ranks(nprocs: int, servers: int) -> list[int]:
    """Ranks acting as I/O servers, spread evenly (server ``j`` is rank ``j*P//servers``)."""
    return [j * nprocs // servers for j in range(servers)]


def chunk_rows(first: int, stop: int, row_bytes: int, buffer: int, servers: int) -> int:
    """Rows per chunk: about *buffer* bytes, fewer when that keeps every server busy."""
    rows = max(stop - first, 0)
    return max(1, min(buffer // max(row_bytes, 1), -(-rows // max(servers, 1))))


@dataclass
class _Geometry:
    """Everything about the access that is the same on every rank."""

    pieces: list  # per rank: None or tuple of per-dimension index arrays (file side)
    slow: int
    fstr: list[int]
    first_row: int
    stop_row: int
    rows_per_chunk: int
    servers: list[int]

    @property
    def chunks(self) -> int:
        return -(-(self.stop_row - self.first_row) // self.rows_per_chunk) if self.stop_row > self.first_row else 0

    @property
    def rounds(self) -> int:
        return -(-self.chunks // len(self.servers))

    def chunk(self, round_: int, server: int) -> tuple[int, int] | None:
        """Rows ``[a, b)`` served by server index *server* in *round_*, or None."""
        c = round_ * len(self.servers) + server
        if c >= self.chunks:
            return None
        a = self.first_row + c * self.rows_per_chunk
        return a, min(a + self.rows_per_chunk, self.stop_row)


class ServersIO(SymmetricMethod):
    """Two-phase collective I/O with I/O servers and buffers, through ``Alltoallv``."""

    name = "servers"
    collective = True

    def move(self, t: Transfer, writing: bool) -> None:
        _serve(t, writing=writing)


def _local(t: Transfer) -> tuple[int, int, tuple | None]:
    """This rank's parameters and the compressed file side of its piece (no communication)."""
    nprocs = t.comm.Get_size()
    servers = min(int_hint(t.hints, "sdm_io_servers", nprocs), nprocs)
    buffer = int_hint(t.hints, "sdm_buffer_size", BUFFER_SIZE)
    mine = tuple(_pack(np.asarray(i, dtype=np.int64)) for i in t.piece.indices) if t.piece.size else None
    return servers, buffer, mine


def _geometry(t: Transfer, servers: int, buffer: int, gathered: list) -> _Geometry:
    """Cut the rows every rank touches into chunks (the same on every rank)."""
    p = t.piece
    pieces = [None if q is None else tuple(_unpack(x) for x in q) for q in gathered]
    slow = storage_dims(len(p.shape), t.order)[-1]
    fstr = file_strides(p.shape, t.order, t.array.itemsize)
    used = [q[slow] for q in pieces if q is not None]
    first = min((int(r[0]) for r in used), default=0)
    stop = max((int(r[-1]) + 1 for r in used), default=0)
    per = chunk_rows(first, stop, fstr[slow], buffer, servers)
    return _Geometry(pieces, slow, fstr, first, stop, per, server_ranks(t.comm.Get_size(), servers))


def _serve(t: Transfer, *, writing: bool) -> None:
    set_view(t, MPI.BYTE, MPI.BYTE)  # collective
    deferred = Deferred()
    local = deferred.run(_local, t)
    gathered = t.comm.allgather(None if local is None else ("ok", local))  # every rank, failed or not
    if any(g is None for g in gathered):  # the failing rank raises; the group agrees on its error afterwards
        deferred.reraise()
        return
    servers, buffer, _ = gathered[0][1]  # rank 0's parameters, so that every rank cuts the same chunks
    geo = _geometry(t, servers, buffer, [g[1][2] for g in gathered])
    rank = t.comm.Get_rank()
    row = geo.fstr[geo.slow]
    scratch = np.empty(geo.rows_per_chunk * row if rank in geo.servers else 0, dtype=np.uint8)
    mine = _Part.local(t, geo)
    pool = _Pool()  # exchange buffers reused from round to round (no fresh pages each round)
    for r in range(geo.rounds):
        jobs = [(srv, geo.chunk(r, j)) for j, srv in enumerate(geo.servers)]
        sends = [(srv, mine.within(rows)) for srv, rows in jobs if rows is not None]
        serving = next((rows for srv, rows in jobs if srv == rank and rows is not None), None)
        chunk = _Chunk(t, geo, serving, scratch) if serving is not None else None
        if chunk is not None and (not writing or chunk.holes):
            deferred.run(read_fully, t.fh, chunk.offset, chunk.span)
        try:
            _exchange(t, sends, chunk, deferred, pool, to_servers=writing)
        except MPI.Exception as exc:  # keep going: the other ranks are in later rounds
            deferred.error = deferred.error or exc
        if chunk is not None and writing and chunk.span.size:
            deferred.run(t.fh.Write_at, chunk.offset, chunk.span)
    deferred.reraise()


class _Part:
    """One rank's elements in a range of rows: selectors into an array and a slab."""

    def __init__(self, item: int, dtype: np.dtype, order: str, slow: int, indices: list, positions: list) -> None:
        self.item, self.dtype, self.order, self.slow = item, dtype, order, slow
        self.indices, self.positions = indices, positions

    @classmethod
    def local(cls, t: Transfer, geo: _Geometry) -> "_Part":
        """This rank's piece: global indices (file side) and local positions (memory side)."""
        idx = [np.asarray(i, dtype=np.int64) for i in t.piece.indices]
        return cls(t.array.itemsize, t.array.dtype, t.order, geo.slow, idx, memory_positions(t.piece))

    def within(self, rows: tuple[int, int]) -> "_Part | None":
        """The part in rows ``[a, b)``, or None if empty."""
        if any(i.size == 0 for i in self.indices):
            return None
        l0 = int(np.searchsorted(self.indices[self.slow], rows[0]))
        l1 = int(np.searchsorted(self.indices[self.slow], rows[1]))
        if l1 <= l0:
            return None
        cut = lambda arrs: [a[l0:l1] if d == self.slow else a for d, a in enumerate(arrs)]  # noqa: E731
        return _Part(self.item, self.dtype, self.order, self.slow, cut(self.indices), cut(self.positions))

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(i.size for i in self.indices)

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.item

    def packed(self, buf: np.ndarray) -> np.ndarray:
        """*buf* (bytes) viewed as this part's elements, in storage order."""
        return buf.view(self.dtype).reshape(self.shape, order=self.order)


class _Chunk:
    """The rows a server handles in one round: slab buffer, span to access, sources."""

    def __init__(self, t: Transfer, geo: _Geometry, rows: tuple[int, int], scratch: np.ndarray) -> None:
        a, b = rows
        item = t.array.itemsize
        row = geo.fstr[geo.slow]
        shape = list(t.piece.shape)
        shape[geo.slow] = b - a
        self.slab = np.ndarray(shape, dtype=t.array.dtype, buffer=scratch, order=t.order)
        self.sources: list[tuple[int, _Part]] = []
        lo, hi, owned = None, 0, 0
        for q, idx in enumerate(geo.pieces):
            if idx is None:
                continue
            part = _Part(item, t.array.dtype, t.order, geo.slow, list(idx), list(idx)).within(rows)
            if part is None:
                continue
            part.indices[geo.slow] = part.indices[geo.slow] - a  # rows relative to the chunk
            self.sources.append((q, part))
            first = sum(int(i[0]) * s for i, s in zip(part.indices, geo.fstr))
            last = sum(int(i[-1]) * s for i, s in zip(part.indices, geo.fstr)) + item
            lo, hi, owned = (first if lo is None else min(lo, first)), max(hi, last), owned + part.nbytes
        lo = lo or 0
        self.offset = a * row + lo
        self.span = scratch[lo:hi]
        self.holes = owned < hi - lo

    def select(self, part: _Part) -> tuple:
        return selector(part.indices)


def _exchange(t: Transfer, sends: list, chunk: _Chunk | None, deferred: Deferred, pool: "_Pool", *,
              to_servers: bool) -> None:
    """One round: pack, ``Alltoallv`` of bytes, unpack (collective).

    Writing, ranks pack their parts for each server and servers unpack into their slab;
    reading, servers pack from their slab and ranks unpack into their arrays.
    """
    nprocs = t.comm.Get_size()
    mine = [0] * nprocs  # bytes exchanged with each peer from this rank's array
    for srv, part in sends:
        if part is not None:
            mine[srv] = part.nbytes
    theirs = [0] * nprocs  # bytes exchanged with each source in this server's slab
    for q, part in chunk.sources if chunk is not None else ():
        theirs[q] = part.nbytes
    local = _Buffer(mine, pool.get(0, sum(mine)))
    remote = _Buffer(theirs, pool.get(1, sum(theirs)))
    if to_servers:
        for srv, part in sends:
            if part is not None:
                deferred.run(_copy_to, part.packed(local.of(srv)), t.array, selector(part.positions))
        t.comm.Alltoallv(local.spec(), remote.spec())
        for q, part in chunk.sources if chunk is not None else ():
            deferred.run(_copy_from, chunk.slab, chunk.select(part), part.packed(remote.of(q)))
    else:
        for q, part in chunk.sources if chunk is not None else ():
            deferred.run(_copy_to, part.packed(remote.of(q)), chunk.slab, chunk.select(part))
        t.comm.Alltoallv(remote.spec(), local.spec())
        for srv, part in sends:
            if part is not None:
                deferred.run(_copy_from, t.array, selector(part.positions), part.packed(local.of(srv)))


def _copy_to(dest: np.ndarray, array: np.ndarray, sel: tuple) -> None:
    dest[...] = array[sel]


def _copy_from(array: np.ndarray, sel: tuple, src: np.ndarray) -> None:
    array[sel] = src


class _Pool:
    """Byte buffers kept across rounds, grown when a round needs more."""

    def __init__(self) -> None:
        self.buffers = [np.empty(0, dtype=np.uint8), np.empty(0, dtype=np.uint8)]

    def get(self, which: int, nbytes: int) -> np.ndarray:
        if self.buffers[which].size < nbytes:
            self.buffers[which] = np.empty(nbytes, dtype=np.uint8)
        return self.buffers[which][:nbytes]


class _Buffer:
    """A contiguous byte buffer cut into one slice per peer (``Alltoallv`` layout)."""

    def __init__(self, counts: list[int], data: np.ndarray) -> None:
        self.counts = counts
        self.displs = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(int).tolist()
        self.data = data

    def of(self, peer: int) -> np.ndarray:
        return self.data[self.displs[peer]:self.displs[peer] + self.counts[peer]]

    def spec(self) -> list:
        return [self.data, (self.counts, self.displs), MPI.BYTE]


register(ServersIO())
