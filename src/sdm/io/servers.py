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

When every rank of the communicator shares one node, step 3 needs no messages: the
servers' buffers live in an MPI-3 shared-memory window (``MPI_Win_allocate_shared``,
kept on the communicator and reused by every later access) and each rank copies its
elements straight into -- or, reading, out of -- the servers' slabs, between two
barriers; one copy per byte instead of pack, send and unpack (the intra-node
aggregation of ADIOS2's BP5 engine).  Across nodes the ``Alltoallv`` rounds are used.

Hints: ``sdm_io_servers`` (default: every rank), ``sdm_buffer_size`` (default 16 MiB,
ROMIO's ``cb_buffer_size``; PIO's 1 MB buffers cost extra rounds on today's memory),
``sdm_shm`` (``automatic``: shared memory when all ranks share a node; ``disable``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Mapping

import numpy as np
from mpi4py import MPI

from ..layout.regions import file_strides, memory_positions, storage_dims
from ._selection import _step, selector
from ..errors import HintError, InvalidArgumentError
from ._support import Deferred, int_hint, set_view
from .base import SymmetricMethod, Transfer, register

__all__ = ["ServersIO", "BUFFER_SIZE", "ChunkIO", "chunk_rows", "gathered_plan", "run_rounds", "server_parameters",
           "server_ranks", "shared_memory"]

BUFFER_SIZE = 16 << 20  #: bytes per server and round (ROMIO's default collective buffer)


def _comm(t: Transfer) -> MPI.Intracomm:
    """The communicator the servers exchange over (a transfer without one cannot be served)."""
    if not isinstance(t.comm, MPI.Intracomm):
        raise InvalidArgumentError("the servers method needs the session's communicator in the transfer")
    return t.comm


def _np_order(order: str) -> Literal["C", "F"]:
    """A storage order as numpy spells it."""
    return "F" if order == "F" else "C"


def _pack(a: np.ndarray) -> tuple:
    """A sorted index set as ``("r", start, stop, step)`` when arithmetic, else ``("a", array)``."""
    step = _step(a, increasing=True)
    if step is not None:
        return ("r", int(a[0]), int(a[-1]) + 1, step)
    return ("a", a)


def _unpack(p: tuple) -> np.ndarray:
    return np.arange(p[1], p[2], p[3], dtype=np.int64) if p[0] == "r" else p[1]


def server_parameters(hints: Mapping[str, Any]) -> tuple[int | None, int, bool]:
    """``(servers, buffer, shm)`` from the hints; ``servers`` is None for every rank.

    Raises
    ------
    HintError
        ``sdm_io_servers`` or ``sdm_buffer_size`` below 1, or ``sdm_shm`` not one of
        ``automatic``, ``enable``, ``disable``.
    """
    h = dict(hints)
    shm = str(h.get("sdm_shm", "automatic")).lower()
    if shm not in ("automatic", "enable", "disable"):
        raise HintError(f"hint sdm_shm={shm!r}: use 'automatic', 'enable' or 'disable'")
    return int_hint(h, "sdm_io_servers", 0) or None, int_hint(h, "sdm_buffer_size", BUFFER_SIZE), shm != "disable"


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
    cuts: list[int] | None = None  # explicit chunk boundaries (rows), e.g. a subfiled step's extents
    pieces_shape: tuple[int, ...] = ()  # the global shape

    @property
    def chunks(self) -> int:
        if self.cuts is not None:
            return len(self.cuts) - 1
        return -(-(self.stop_row - self.first_row) // self.rows_per_chunk) if self.stop_row > self.first_row else 0

    @property
    def rounds(self) -> int:
        return -(-self.chunks // len(self.servers))

    def chunk(self, round_: int, server: int) -> tuple[int, int] | None:
        """Rows ``[a, b)`` served by server index *server* in *round_*, or None."""
        c = round_ * len(self.servers) + server
        if c >= self.chunks:
            return None
        if self.cuts is not None:
            return self.cuts[c], self.cuts[c + 1]
        a = self.first_row + c * self.rows_per_chunk
        return a, min(a + self.rows_per_chunk, self.stop_row)


class ServersIO(SymmetricMethod):
    """Two-phase collective I/O with I/O servers and buffers, through ``Alltoallv``."""

    name = "servers"
    collective = True

    def move(self, t: Transfer, writing: bool) -> None:
        _serve(t, writing=writing)


def _local(t: Transfer) -> tuple[int, int, tuple | None, bool]:
    """This rank's parameters and the compressed file side of its piece (no communication)."""
    nprocs = _comm(t).Get_size()
    servers, buffer, shm = server_parameters(t.hints)
    mine = tuple(_pack(np.asarray(i, dtype=np.int64)) for i in t.piece.indices) if t.piece.size else None
    return min(servers or nprocs, nprocs), buffer, mine, shm


def _geometry(t: Transfer, servers: int, buffer: int, gathered: list, cuts: list[int] | None = None) -> _Geometry:
    """Cut the rows every rank touches into chunks (the same on every rank); *cuts*: given boundaries."""
    p = t.piece
    pieces = [None if q is None else tuple(_unpack(x) for x in q) for q in gathered]
    slow = storage_dims(len(p.shape), t.order)[-1]
    fstr = file_strides(p.shape, t.order, t.array.itemsize)
    used = [q[slow] for q in pieces if q is not None]
    first = min((int(r[0]) for r in used), default=0)
    stop = max((int(r[-1]) + 1 for r in used), default=0)
    per = chunk_rows(first, stop, fstr[slow], buffer, servers)
    if cuts is not None:
        per = max((b - a for a, b in zip(cuts, cuts[1:])), default=1)
    return _Geometry(pieces, slow, fstr, first, stop, per, server_ranks(_comm(t).Get_size(), servers), cuts,
                     tuple(int(n) for n in p.shape))


class ChunkIO:
    """What a server does with its chunk's buffer around a round's exchange: the shared file by default.

    :meth:`before` runs before the exchange (reading: fill the span; writing: read the
    span first when the ranks leave holes in it), :meth:`after` after it (writing: write
    the span).  :mod:`sdm.io.subfiles` puts each chunk (an extent) in its own subfile.
    """

    def __init__(self, t: Transfer) -> None:
        self.t = t

    def before(self, chunk: "_Chunk", buffer: np.ndarray, writing: bool) -> None:
        if not writing or chunk.holes:
            self.t.file.read_fully(chunk.offset, chunk.span(buffer))

    def after(self, chunk: "_Chunk", buffer: np.ndarray, writing: bool) -> None:
        if writing and chunk.hi > chunk.lo:
            self.t.file.write_at(chunk.offset, chunk.span(buffer))


def _serve(t: Transfer, *, writing: bool) -> None:
    set_view(t, MPI.BYTE, MPI.BYTE)  # collective
    deferred = Deferred()
    plan = gathered_plan(t, deferred)
    if plan is not None:
        run_rounds(t, plan, deferred, writing, ChunkIO(t))
    deferred.reraise()


def gathered_plan(t: Transfer, deferred: Deferred, cuts: list[int] | None = None) -> "_Plan | None":
    """Every rank's piece gathered (one ``allgather``) and this rank's plan; None when a rank failed
    (collective). *cuts*: the chunks' row boundaries, served by every rank in turn (chunk ``c`` by
    rank ``c % P``), instead of buffer-sized chunks over the hinted servers."""
    local = deferred.run(_local, t)
    gathered = _comm(t).allgather(None if local is None else ("ok", local))  # every rank, failed or not
    if any(g is None for g in gathered):  # the failing rank raises; the group agrees on its error afterwards
        return None
    return _plan_for(t, [g[1] for g in gathered], cuts)


def run_rounds(t: Transfer, plan: "_Plan", deferred: Deferred, writing: bool, io: ChunkIO) -> None:
    """The plan's rounds, through the node's shared memory when every rank shares it (collective)."""
    window = shared_memory(_comm(t), plan.buffer) if plan.shm else None
    if window is not None:
        _serve_shared(t, plan, window, deferred, writing, io)
    else:
        _serve_messages(t, plan, deferred, writing, io)


def _serve_messages(t: Transfer, plan: "_Plan", deferred: Deferred, writing: bool, io: ChunkIO) -> None:
    """The rounds through ``Alltoallv`` (collective)."""
    scratch = np.empty(plan.buffer if any(r.chunk is not None for r in plan.rounds) else 0, dtype=np.uint8)
    pool = _Pool()  # exchange buffers reused from round to round (no fresh pages each round)
    for rnd in plan.rounds:
        chunk = rnd.chunk
        if chunk is not None:
            deferred.run(io.before, chunk, scratch, writing)
        try:
            _exchange(t, rnd.sends, chunk, scratch, deferred, pool, to_servers=writing)
        except MPI.Exception as exc:  # keep going: the other ranks are in later rounds
            deferred.error = deferred.error or exc
        if chunk is not None:
            deferred.run(io.after, chunk, scratch, writing)


def _serve_shared(t: Transfer, plan: "_Plan", window: "_Window", deferred: Deferred, writing: bool,
                  io: ChunkIO) -> None:
    """The rounds through the node's shared-memory window (collective).

    Per round, writing: servers with holes read their span; barrier; every rank copies
    its elements into the servers' slabs; barrier; servers write their span.  Reading:
    servers read their span; barrier; every rank copies its elements out; barrier.
    """
    own = window.segment(_comm(t).Get_rank())
    for rnd in plan.rounds:
        chunk = rnd.chunk
        if chunk is not None:
            deferred.run(io.before, chunk, own, writing)
        window.barrier()
        for send in rnd.sends:
            deferred.run(_copy_shared, t, send, window.segment(send.server), writing)
        window.barrier()
        if chunk is not None:
            deferred.run(io.after, chunk, own, writing)


def _copy_shared(t: Transfer, send: "_Send", segment: np.ndarray, writing: bool) -> None:
    """Copy a part between the local array and a server's slab in shared memory."""
    slab = np.ndarray(send.slab_shape, dtype=t.array.dtype, buffer=segment, order=_np_order(t.order))
    if writing:
        slab[send.in_slab] = t.array[send.part.in_array]
    else:
        t.array[send.part.in_array] = slab[send.in_slab]


@dataclass
class _Send:
    """This rank's elements in one server's chunk of a round."""

    server: int  # the server's rank
    part: "_Part"
    slab_shape: tuple[int, ...]
    in_slab: tuple  # selector of the part in the server's slab


@dataclass
class _Round:
    sends: list[_Send]
    chunk: "_Chunk | None"  # the chunk this rank serves in the round


@dataclass
class _Plan:
    """Everything one rank does for one access, computed once per piece and layout."""

    rounds: list[_Round]
    buffer: int  # bytes of a server's chunk buffer
    shm: bool
    aligned: bool = False  # every chunk is all of its server's own piece's elements and nobody else's

    def own_part(self, rnd: "_Round", rank: int) -> "_Part | None":
        """This rank's part of its own chunk in round *rnd* (what it sends itself)."""
        return next((send.part for send in rnd.sends if send.server == rank), None)


def _aligned(geo: _Geometry) -> bool:
    """Whether each chunk's elements all come from its server's piece, which holds all of them (the same on
    every rank: computed from every rank's piece)."""
    if not geo.chunks:
        return False
    for c in range(geo.chunks):
        rows = geo.chunk(c // len(geo.servers), c % len(geo.servers))
        assert rows is not None
        owner = geo.pieces[geo.servers[c % len(geo.servers)]]
        if owner is None:
            return False
        for q, idx in enumerate(geo.pieces):
            if idx is None:
                continue
            lo, hi = np.searchsorted(idx[geo.slow], rows)
            mine = q == geo.servers[c % len(geo.servers)]
            if (hi > lo) != mine:
                return False
            if mine and (hi - lo != rows[1] - rows[0]
                         or any(i.size != n for d, (i, n) in enumerate(zip(idx, geo.pieces_shape)) if d != geo.slow)):
                return False
    return True


def _hashable(local: tuple) -> tuple | None:
    """A gathered ``_local`` tuple as a cache key, or None when it holds index arrays."""
    servers, buffer, mine, shm = local
    if mine is not None and any(x[0] != "r" for x in mine):
        return None
    return servers, buffer, mine, shm


def _plan_for(t: Transfer, gathered: list, cuts: list[int] | None = None) -> _Plan:
    """This rank's :class:`_Plan`, from the piece's cache when the same access was planned before."""
    def build() -> _Plan:
        servers, buffer, _, shm = gathered[0]  # rank 0's parameters, so that every rank cuts the same chunks
        if cuts is not None:
            servers = _comm(t).Get_size()
        return _build_plan(t, _geometry(t, servers, buffer, [g[2] for g in gathered], cuts), shm)

    keys = [_hashable(g) for g in gathered]
    if any(k is None for k in keys):
        return build()
    key = ("servers", tuple(keys), None if cuts is None else tuple(cuts), _comm(t).Get_rank(), t.order,
           t.array.shape, t.array.strides, t.array.dtype)
    return t.piece.cached(key, build, keep=8)


def _build_plan(t: Transfer, geo: _Geometry, shm: bool) -> _Plan:
    rank = _comm(t).Get_rank()
    mine = _Part.local(t, geo)
    rounds = []
    for r in range(geo.rounds):
        sends, chunk = [], None
        for j, srv in enumerate(geo.servers):
            rows = geo.chunk(r, j)
            if rows is None:
                continue
            if srv == rank:
                chunk = _Chunk(t, geo, rows, r * len(geo.servers) + j)
            part = mine.within(rows)
            if part is not None:
                inside = [i - rows[0] if d == geo.slow else i for d, i in enumerate(part.indices)]
                sends.append(_Send(srv, part, _slab_shape(t, geo, rows), selector(inside)))
        rounds.append(_Round(sends, chunk))
    return _Plan(rounds, geo.rows_per_chunk * geo.fstr[geo.slow], shm, geo.cuts is not None and _aligned(geo))


class _Window:
    """A shared-memory window over one node's ranks: one segment per rank, passive epoch held."""

    def __init__(self, node: MPI.Intracomm, nbytes: int) -> None:
        self.node, self.nbytes = node, nbytes
        self.win = MPI.Win.Allocate_shared(nbytes, 1, comm=node)
        self.win.Lock_all()
        self._segments: dict[int, np.ndarray] = {}

    def segment(self, rank: int) -> np.ndarray:
        """Rank *rank*'s segment as bytes (any rank may read and write it)."""
        if rank not in self._segments:
            buf, _ = self.win.Shared_query(rank)
            self._segments[rank] = np.frombuffer(buf.cast("B"), dtype=np.uint8)[: self.nbytes]
        return self._segments[rank]

    def barrier(self) -> None:
        """Make every rank's stores visible to every rank (collective)."""
        self.win.Sync()
        self.node.Barrier()
        self.win.Sync()

    def free(self) -> None:
        """Release the window and the node communicator (collective)."""
        self._segments.clear()
        self.win.Unlock_all()
        self.win.Free()
        self.node.Free()


_KEYVAL: list[int] = []  # the attribute key under which a communicator keeps its window


def _delete_window(comm: MPI.Comm, keyval: int, window: Any) -> None:
    if isinstance(window, _Window):
        window.free()


def shared_memory(comm: MPI.Comm, nbytes: int) -> "_Window | None":
    """*comm*'s shared-memory window with at least *nbytes* per rank, or None across nodes (collective).

    The window is cached on the communicator (an MPI attribute, freed with it) and
    grown when an access needs more; every rank asks for the same size.
    """
    if not _KEYVAL:
        _KEYVAL.append(MPI.Comm.Create_keyval(delete_fn=_delete_window))
    key = _KEYVAL[0]
    cached = comm.Get_attr(key)
    if cached is False:  # several nodes: the Alltoallv rounds
        return None
    if isinstance(cached, _Window):
        window = cached
    else:
        node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
        single = comm.allreduce(int(isinstance(node, MPI.Intracomm) and node.Get_size() == comm.Get_size()),
                               op=MPI.MIN)
        if not single or not isinstance(node, MPI.Intracomm):
            node.Free()
            comm.Set_attr(key, False)
            return None
        window = _Window(node, max(int(nbytes), 1))
        comm.Set_attr(key, window)
    if window.nbytes < nbytes:
        node = window.node.Dup()
        comm.Delete_attr(key)  # frees the smaller window
        window = _Window(node, int(nbytes))
        comm.Set_attr(key, window)
    return window


def _slab_shape(t: Transfer, geo: _Geometry, rows: tuple[int, int]) -> tuple[int, ...]:
    """Shape of the global array cut to rows ``[a, b)`` (a server's slab)."""
    shape = list(t.piece.shape)
    shape[geo.slow] = rows[1] - rows[0]
    return tuple(shape)


class _Part:
    """One rank's elements in a range of rows: selectors into an array and a slab."""

    def __init__(self, item: int, dtype: np.dtype, order: str, slow: int, indices: list, positions: list) -> None:
        self.item, self.dtype, self.order, self.slow = item, dtype, _np_order(order), slow
        self.indices, self.positions = indices, positions
        self._in_array: tuple | None = None
        self._in_file: tuple | None = None

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

    @property
    def in_array(self) -> tuple:
        """Selector of the part in the local array (computed once)."""
        if self._in_array is None:
            self._in_array = selector(self.positions)
        return self._in_array

    @property
    def in_file(self) -> tuple:
        """Selector of the part by its (chunk-relative) file indices (computed once)."""
        if self._in_file is None:
            self._in_file = selector(self.indices)
        return self._in_file

    def packed(self, buf: np.ndarray) -> np.ndarray:
        """*buf* (bytes) viewed as this part's elements, in storage order."""
        return buf.view(self.dtype).reshape(self.shape, order=self.order)


class _Chunk:
    """The rows a server handles in one round: slab shape, span to access, sources."""

    def __init__(self, t: Transfer, geo: _Geometry, rows: tuple[int, int], index: int = 0) -> None:
        a = rows[0]
        item = t.array.itemsize
        row = geo.fstr[geo.slow]
        self.index, self.rows, self.nbytes = index, rows, (rows[1] - rows[0]) * row  # the chunk: all its rows' bytes
        self.shape, self.dtype, self.order = _slab_shape(t, geo, rows), t.array.dtype, _np_order(t.order)
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
        self.lo, self.hi = lo or 0, hi
        self.offset = a * row + self.lo
        self.holes = owned < hi - self.lo

    def slab(self, buffer: np.ndarray) -> np.ndarray:
        """The chunk's rows as a slab of the global array over *buffer*."""
        return np.ndarray(self.shape, dtype=self.dtype, buffer=buffer, order=self.order)

    def span(self, buffer: np.ndarray) -> np.ndarray:
        """The bytes of *buffer* the server reads or writes."""
        return buffer[self.lo:self.hi]


def _exchange(t: Transfer, sends: list[_Send], chunk: _Chunk | None, scratch: np.ndarray, deferred: Deferred,
              pool: "_Pool", *, to_servers: bool) -> None:
    """One round: pack, ``Alltoallv`` of bytes, unpack (collective).

    Writing, ranks pack their parts for each server and servers unpack into their slab;
    reading, servers pack from their slab and ranks unpack into their arrays.
    """
    nprocs = _comm(t).Get_size()
    mine = [0] * nprocs  # bytes exchanged with each peer from this rank's array
    for send in sends:
        mine[send.server] = send.part.nbytes
    theirs = [0] * nprocs  # bytes exchanged with each source in this server's slab
    for q, part in chunk.sources if chunk is not None else ():
        theirs[q] = part.nbytes
    local = _Buffer(mine, pool.get(0, sum(mine)))
    remote = _Buffer(theirs, pool.get(1, sum(theirs)))
    slab = chunk.slab(scratch) if chunk is not None else None
    if to_servers:
        for send in sends:
            deferred.run(_copy_to, send.part.packed(local.of(send.server)), t.array, send.part.in_array)
        _comm(t).Alltoallv(local.spec(), remote.spec())
        for q, part in chunk.sources if chunk is not None else ():
            deferred.run(_copy_from, slab, part.in_file, part.packed(remote.of(q)))
    else:
        for q, part in chunk.sources if chunk is not None else ():
            deferred.run(_copy_to, part.packed(remote.of(q)), slab, part.in_file)
        _comm(t).Alltoallv(remote.spec(), local.spec())
        for send in sends:
            deferred.run(_copy_from, t.array, send.part.in_array, send.part.packed(local.of(send.server)))


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
