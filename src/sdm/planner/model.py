"""The cost model: predicted seconds of an access for each I/O method.

The model of Shen, Liao and Choudhary -- ``T = Tconn + Topen + Tseek + Tread(s) +
Tclose``, ``n`` calls costing ``n (Tseek + Tread(s))`` -- with the terms MPI-IO on a
local or parallel file system asks for.  Each method turns an
:class:`~sdm.planner.Access` into per-rank counts of a few units (:func:`structure`),
cut by the functions the method itself cuts the access with (sieve windows and
turns: :mod:`sdm.io.sieving`; server chunks: :mod:`sdm.io.servers`; ROMIO's windows:
:mod:`sdm.io.datatype`); a rank's time is its counts times seconds per unit, the
access's the slowest rank's:

========  ================================================================================
base      per access and method (file view, plans)
sync      per collective synchronization (a sieving turn, a server round, ROMIO's exchange)
call      per independent file request (``pwrite``/``pread`` through MPI-IO)
byte_w/r  per byte written to / read from the file system
page      per file page written first (a new step's pages; holes read then written: two)
list      per segment walked by list I/O (an indexed file type inside one call)
region    per region ROMIO's data sieving or two-phase I/O handles
lock      per read-modify-write window of ROMIO's data sieving (file lock)
pack      per noncontiguous memory block the MPI datatype engine gathers or scatters
copy      per byte copied in memory (sieve and server buffers, shared-memory slabs)
elem      per element of one-element runs copied by numpy (its inner loop)
run       per longer run of a numpy strided copy
exchange  per byte sent between ranks in MPI messages (two-phase I/O)
========  ================================================================================

plus what an SDM access costs around the method (``open``, ``fsync``, ``fsync_byte``,
``commit``, ``lookup``, ``checksum_byte``; :meth:`CostModel.overhead`).

Without a calibration the constants are :data:`DEFAULTS`: orders of magnitude of a
current machine, good enough to shortlist methods, which the planner's trials then
measure (:mod:`sdm.planner.trials`).  ``sdm calibrate`` fits them to the target.
Constants are effective ones, measured with every rank busy (``nprocs`` ranks on
``cores`` cores); for another rank count CPU-bound costs scale with ``max(1, P/cores)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from ..io.datatype import IND_RD_BUFFER, IND_WR_BUFFER, romio_windows
from ..io.servers import BUFFER_SIZE as SERVER_BUFFER, chunk_rows, server_parameters, server_ranks
from ..io.sieving import BUFFER_SIZE as SIEVE_BUFFER, GAP, sieve_parameters, slab_windows, slabs_suit, turns

if TYPE_CHECKING:  # pragma: no cover
    from .access import Access

__all__ = ["METHODS", "CONSTANTS", "DEFAULTS", "Params", "Structure", "Prediction", "CostModel", "structure"]

METHODS = ("posix", "list", "datatype", "sieving", "collective", "servers")
PAGE = 4096

#: Uncalibrated constants (seconds per unit): a few ranks per core pair, the page cache.
DEFAULTS: dict[str, float] = {
    "base": 5e-5, "sync": 1e-4, "call": 2e-6, "byte_w": 4e-10, "byte_r": 3e-10, "page": 1e-6, "list": 1e-6,
    "region": 1e-7, "lock": 2e-5, "pack": 2e-8, "copy": 3e-10, "elem": 3e-9, "run": 1e-8, "exchange": 5e-10,
    "open": 5e-4, "fsync": 1e-3, "fsync_byte": 1e-9, "commit": 2e-3, "lookup": 1e-3, "checksum_byte": 4e-10,
}
_FIXED = ("open", "fsync", "fsync_byte", "commit", "lookup")  # not CPU-bound per rank: not scaled
CONSTANTS = tuple(k for k in DEFAULTS if k not in _FIXED and k != "checksum_byte")  #: constants fitted to samples

Terms = dict[str, float]


@dataclass(frozen=True)
class Params:
    """Method parameters as the methods will use them (from the hints and the target).

    ``cores`` is the number of cores the ranks share (0: unknown), for work only some
    ranks do at once (:func:`_alone`).
    """

    sieve_buffer: int = SIEVE_BUFFER
    sieve_gap: int = GAP
    servers: int | None = None
    server_buffer: int = SERVER_BUFFER
    shm: bool = True
    ind_rd_buffer: int = IND_RD_BUFFER
    ind_wr_buffer: int = IND_WR_BUFFER
    cb_buffer: int = 16 << 20
    cb_nodes: int = 1
    cores: int = 0

    @classmethod
    def of(cls, hints: Mapping[str, Any] | None = None, romio: Mapping[str, Any] | None = None,
           cores: int = 0) -> "Params":
        """Parameters from the session's MPI/SDM hints, over the target's ROMIO defaults."""
        from ..io._support import int_hint

        h, d = {**dict(romio or {}), **dict(hints or {})}, cls()
        (sieve_buffer, sieve_gap, _), (servers, server_buffer, shm) = sieve_parameters(h), server_parameters(h)
        romio_hints = {f: int_hint(h, k, getattr(d, f)) for k, f in (
            ("ind_rd_buffer_size", "ind_rd_buffer"), ("ind_wr_buffer_size", "ind_wr_buffer"),
            ("cb_buffer_size", "cb_buffer"), ("cb_nodes", "cb_nodes"))}
        return cls(sieve_buffer=sieve_buffer, sieve_gap=sieve_gap, servers=servers, server_buffer=server_buffer,
                   shm=shm, cores=cores, **romio_hints)

    def buffer_of(self, method: str) -> int:
        """Extra memory a rank may need for *method*'s buffers (bytes)."""
        return {"sieving": self.sieve_buffer, "servers": self.server_buffer, "collective": self.cb_buffer,
                "datatype": self.ind_rd_buffer}.get(method, 0)


@dataclass
class Structure:
    """Counts of cost units for one method and access: per rank (``ranks``), paid once by the
    whole access (``shared``), and the ranks that run one after another, turn by turn
    (``turns``: sieving writes; None when all run at once)."""

    ranks: list[Terms]
    shared: Terms = field(default_factory=dict)
    turns: list[list[int]] | None = None

    def _path(self, per: list[float]) -> list[int]:
        if self.turns is not None:
            return [max(turn, key=lambda r: per[r]) for turn in self.turns if turn]
        return [int(np.argmax(per))] if per else []

    def seconds(self, c: Mapping[str, float]) -> tuple[float, Terms]:
        """Predicted seconds and the seconds of each unit (along the slowest path)."""
        per = [sum(n * c.get(k, 0.0) for k, n in r.items()) for r in self.ranks]
        terms = {k: n * c.get(k, 0.0) for k, n in self.counts(self._path(per)).items()}
        return sum(terms.values()), terms

    def counts(self, path: list[int] | None = None) -> Terms:
        """Counts along *path* (default: the turns of the rank moving most), linear in the constants."""
        if path is None:
            heavy = int(np.argmax([sum(r.values()) for r in self.ranks])) if self.ranks else 0
            path = [heavy] * (len([t for t in self.turns if t]) if self.turns is not None else 1) if self.ranks else []
        out = dict(self.shared)
        for r in path:
            _add(out, **self.ranks[r])
        return out


@dataclass(frozen=True)
class Prediction:
    """Predicted seconds of one method for one access, with the biggest terms."""

    method: str
    seconds: float
    terms: Terms

    def top(self, n: int = 2) -> str:
        """The *n* largest terms as text: ``call 61%, byte_w 20%``."""
        best = sorted(self.terms.items(), key=lambda kv: -kv[1])[:n]
        return ", ".join(f"{k} {100 * v / (self.seconds or 1.0):.0f}%" for k, v in best if v > 0)


# ---------------------------------------------------------------------- structure
def _add(terms: Terms, **counts: float) -> Terms:
    for k, v in counts.items():
        if v:
            terms[k] = terms.get(k, 0.0) + v
    return terms


def _alone(p: Params, active: int, nprocs: int) -> float:
    """Time factor of work *active* of *nprocs* ranks do while the others wait (less contention)."""
    return max(1.0, active / p.cores) / max(1.0, nprocs / p.cores) if p.cores else 1.0


def _overlaps(a: "Access") -> np.ndarray:
    """Ranks whose file spans overlap (matrix)."""
    lo, hi = (np.array([s[i] for s in a.spans], dtype=np.int64) for i in (0, 1))
    near = (lo[:, None] < hi[None, :]) & (lo[None, :] < hi[:, None])
    np.fill_diagonal(near, False)
    return near


def _data_span(a: "Access") -> int:
    """Bytes from the first to the last byte any rank accesses."""
    used = [s for s, b in zip(a.spans, a.rank_bytes) if b]
    return max(s[1] for s in used) - min(s[0] for s in used) if used else 0


def _pages(a: "Access", r: int) -> float:
    """New file pages rank *r*'s writes create: its regions' pages, shared ones split among the ranks."""
    b, reg, (lo, hi) = a.rank_bytes[r], a.rank_regions[r], a.spans[r]
    if not b:
        return 0.0
    own = [min(math.ceil((h - l) / PAGE), g * math.ceil(n / g / PAGE))
           for n, g, (l, h) in zip(a.rank_bytes, a.rank_regions, a.spans) if n]
    share = min(1.0, math.ceil(_data_span(a) / PAGE) / sum(own)) if sum(own) else 1.0
    return share * min(math.ceil((hi - lo) / PAGE), reg * math.ceil(b / reg / PAGE))


def _move(t: Terms, rw: str, nbytes: float, calls: float, pages: float = 0.0) -> Terms:
    """*nbytes* in *calls* requests; writing, *pages* of them new."""
    return _add(t, call=calls, **{f"byte_{rw}": nbytes}, page=pages if rw == "w" else 0.0)


def _rmw(t: Terms, span: float, calls: float, holes: float) -> Terms:
    """A read-modify-write of *span* bytes in *calls* windows, *holes* of its pages not in the file yet."""
    _add(t, call=2 * calls, page=2 * holes)
    filled = max(span - holes * PAGE, 0.0)
    return _add(t, byte_r=filled, byte_w=filled)


def _runs(nbytes: float, runs: float, itemsize: int) -> Terms:
    """A numpy strided copy of *nbytes* in *runs* runs: one-element runs element by element."""
    if not runs:
        return {}
    return {"elem": runs} if nbytes <= runs * itemsize else {"run": runs, "copy": nbytes}


def _pack(nbytes: float, blocks: int) -> Terms:
    """The MPI datatype engine gathering *nbytes* from *blocks* memory blocks (nothing for one)."""
    return _add({}, pack=blocks, copy=nbytes) if blocks > 1 else {}


def _posix(a: "Access", p: Params, rw: str) -> Structure:
    ranks = [_move({}, rw, b, seg, _pages(a, r)) for r, (b, seg) in enumerate(zip(a.rank_bytes, a.segments))]
    return Structure(ranks, {"base": 1})


def _list(a: "Access", p: Params, rw: str) -> Structure:
    ranks = [_move(_add(_pack(b, mem), list=seg), rw, b, 1 if b else 0, _pages(a, r))
             for r, (b, seg, mem) in enumerate(zip(a.rank_bytes, a.segments, a.memory))]
    return Structure(ranks, {"base": 1})


def _datatype(a: "Access", p: Params, rw: str) -> Structure:
    """ROMIO's independent path through a file view (data sieving when noncontiguous)."""
    near, ranks = _overlaps(a), []
    for r, (b, reg, mem, (lo, hi)) in enumerate(zip(a.rank_bytes, a.rank_regions, a.memory, a.spans)):
        t = _pack(b, mem)
        if reg <= 1:
            _move(t, rw, b, 1 if b else 0, math.ceil(b / PAGE))
        else:
            n, covered = romio_windows(b, reg, hi - lo, p.ind_rd_buffer if rw == "r" else p.ind_wr_buffer)
            _add(t, region=reg, copy=b)
            if rw == "r":
                _move(t, rw, covered, n)
            else:
                _rmw(_add(t, lock=n), covered, n, covered / PAGE / (1 + int(near[r].sum())))
        ranks.append(t)
    return Structure(ranks, {"base": 1})


def _sieving(a: "Access", p: Params, rw: str) -> Structure:
    """SDM's sieving (:mod:`sdm.io.sieving`): region windows past the gap, else slabs of rows."""
    near, ranks, rmw = _overlaps(a), [], []
    for r, (b, reg, seg, (lo, hi)) in enumerate(zip(a.rank_bytes, a.rank_regions, a.segments, a.spans)):
        t: Terms = {}
        span = hi - lo
        if not b:
            pass
        elif not slabs_suit(span - b, reg, p.sieve_gap):  # region windows, holes skipped
            _move(t, rw, b, reg, _pages(a, r))
            if seg > reg:
                _add(t, **_runs(b, seg, a.itemsize))
        else:  # slab windows of whole rows, holes read through
            row = a.row_bytes or a.itemsize
            n = max(1, slab_windows(span, row, p.sieve_buffer))
            _add(t, **_runs(b, seg, a.itemsize))
            if rw == "r":
                _move(t, rw, span, n)
            elif span > b:
                _rmw(t, span, n, math.ceil(span / PAGE) / (1 + int(near[r].sum())))
                rmw.append(r)
            else:
                _move(t, rw, span, n, _pages(a, r))
        ranks.append(t)
    if rw == "r":
        return Structure(ranks, {"base": 1})
    conflict = np.zeros_like(near)
    for r in rmw:
        conflict[r] |= near[r]
        conflict[:, r] |= near[r]
    colour = turns(conflict)
    groups = [[int(r) for r in np.flatnonzero(colour == k)] for k in range(int(colour.max()) + 1)] if colour.size else [[]]
    return Structure(ranks, {"base": 1, "sync": float(len(groups))}, turns=groups)


def _serve(t: Terms, p: Params, rw: str, nbytes: float, calls: int, holes: bool, active: int, nprocs: int) -> None:
    """An aggregator's (or server's) own part of the file, *nbytes* in *calls* buffers, faster by
    the contention the waiting ranks spare it (:func:`_alone`)."""
    io: Terms = {}
    if rw == "w" and holes:
        _rmw(io, nbytes, calls, math.ceil(nbytes / PAGE))
    else:
        _move(io, rw, nbytes, calls, math.ceil(nbytes / PAGE))
    f = _alone(p, active, nprocs)
    _add(t, **{k: f * n for k, n in io.items()})


def _servers(a: "Access", p: Params, rw: str) -> Structure:
    """SDM's I/O servers (:mod:`sdm.io.servers`): whole-row chunks served in rounds."""
    nproc, span = a.nprocs, _data_span(a)
    k = min(p.servers or nproc, nproc)
    if not span:
        return Structure([{} for _ in range(nproc)], {"base": 1})
    row = a.row_bytes or a.itemsize
    rows = max(1, math.ceil(span / row))
    chunks = math.ceil(rows / chunk_rows(0, rows, row, p.server_buffer, k))
    rounds, busy = math.ceil(chunks / k), min(k, chunks)
    total, servers = sum(a.rank_bytes), set(server_ranks(nproc, k)[:busy])
    ranks = []
    for r, (b, seg) in enumerate(zip(a.rank_bytes, a.segments)):
        # shared memory: each byte is copied once, into (out of) a server's slab; else packed and sent
        t = _add(_runs(b, seg, a.itemsize), exchange=0 if p.shm else b)
        if r in servers:
            if not p.shm:
                _add(t, **_runs(total / busy, math.ceil(sum(a.segments) / busy), a.itemsize))
            _serve(t, p, rw, span / busy, math.ceil(chunks / busy), total < span, busy, nproc)
        ranks.append(t)
    return Structure(ranks, {"base": 1, "sync": 2 * rounds if p.shm else rounds})


def _collective(a: "Access", p: Params, rw: str) -> Structure:
    """ROMIO's two-phase collective I/O (independent when the ranks' spans do not interleave)."""
    if not _overlaps(a).any():  # ROMIO gathers the offset ranges, then falls back to independent I/O
        fallback = _datatype(a, p, rw)
        _add(fallback.shared, sync=1)
        return fallback
    span, total, k = _data_span(a), sum(a.rank_bytes), max(1, min(p.cb_nodes, a.nprocs))
    ranks = [_add(_pack(b, mem), copy=b) for b, mem in zip(a.rank_bytes, a.memory)]
    for j in range(k):  # the aggregators: every region passes through them
        t = _add(ranks[j * a.nprocs // k], region=sum(a.rank_regions) / k, exchange=total / k)
        _serve(t, p, rw, span / k, math.ceil(span / k / p.cb_buffer), total < span, k, a.nprocs)
    return Structure(ranks, {"base": 1, "sync": 1})


_BUILDERS = {"posix": _posix, "list": _list, "datatype": _datatype, "sieving": _sieving,
             "collective": _collective, "servers": _servers}


def structure(method: str, access: "Access", params: Params | None = None) -> Structure:
    """The cost units of *method* for *access* (see the module documentation)."""
    return _BUILDERS[method](access, params or Params(), "w" if access.writing else "r")


# -------------------------------------------------------------------------- model
@dataclass(frozen=True)
class CostModel:
    """Constants for one storage target, measured with ``nprocs`` ranks on ``cores`` cores.

    Parameters
    ----------
    constants : dict
        Seconds per unit (see the module documentation); missing ones take :data:`DEFAULTS`.
    nprocs, cores : int
        Ranks and cores of the calibration run.
    romio : dict
        ROMIO hints in effect on the target (``cb_nodes``, buffer sizes).
    calibrated : bool
        False for the built-in defaults.
    """

    constants: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULTS))
    nprocs: int = 4
    cores: int = 2
    romio: Mapping[str, Any] = field(default_factory=dict)
    calibrated: bool = False
    label: str = "defaults"

    @classmethod
    def from_calibration(cls, record: Mapping[str, Any] | None) -> "CostModel":
        """A model from a catalog ``io_calibrations`` record (None: the defaults)."""
        if not record:
            return cls()
        data = record.get("constants", record)
        return cls(
            constants={**DEFAULTS, **{k: float(v) for k, v in data.get("constants", {}).items() if k in DEFAULTS}},
            nprocs=int(data.get("nprocs", 4)), cores=int(data.get("cores", 2)), romio=dict(data.get("romio", {})),
            calibrated=True, label=f"calibration {record.get('id', '?')} ({data.get('nprocs', '?')} ranks)",
        )

    def to_json(self) -> dict[str, Any]:
        """What the catalog stores in ``io_calibrations.constants``."""
        return {"version": 2, "nprocs": self.nprocs, "cores": self.cores, "romio": dict(self.romio),
                "constants": dict(self.constants)}

    def scaled(self, nprocs: int) -> dict[str, float]:
        """Constants for *nprocs* ranks (CPU-bound costs scale with the contention ``max(1, P/cores)``)."""
        def contention(n: int) -> float:
            return max(1.0, n / max(self.cores, 1))

        f = contention(nprocs) / contention(self.nprocs)
        return {k: (v if k in _FIXED else v * f) for k, v in self.constants.items()}

    def params(self, hints: Mapping[str, Any] | None = None) -> Params:
        """Method parameters under *hints* on this target."""
        return Params.of(hints, self.romio, self.cores)

    def predict(self, method: str, access: "Access", hints: Mapping[str, Any] | None = None) -> Prediction:
        """Predicted seconds of *method* for *access*."""
        seconds, terms = structure(method, access, self.params(hints)).seconds(self.scaled(access.nprocs))
        return Prediction(method, seconds, terms)

    def predict_all(self, access: "Access", hints: Mapping[str, Any] | None = None,
                    methods: tuple[str, ...] = METHODS) -> list[Prediction]:
        """Predictions for *methods*, fastest first (ties: the order of *methods*)."""
        return sorted((self.predict(m, access, hints) for m in methods), key=lambda p: p.seconds)

    def new_handle(self, method: str, access: "Access", hints: Mapping[str, Any] | None = None) -> float:
        """Seconds the first write through a newly opened file handle adds (*method* collective).

        ROMIO allocates a handle's collective buffer when the file is opened and the first
        collective write touches it, as far as an aggregator's share of the span reaches:
        paid once per handle held open at the same time (a freed buffer comes back touched).
        """
        if method != "collective" or not access.writing or not _overlaps(access).any():
            return 0.0
        p = self.params(hints)
        share = min(_data_span(access) / max(1, min(p.cb_nodes, access.nprocs)), p.cb_buffer)
        return math.ceil(share / PAGE) * self.scaled(access.nprocs)["page"]

    def overhead(self, nbytes: int, nprocs: int = 1, *, writing: bool, sync: bool = True, checksum: bool = True,
                 opened: bool = False) -> float:
        """Seconds an SDM write or read of *nbytes* on *nprocs* ranks adds around the method.

        Writes: the commit, the checksum (each rank its share), the sync of the dirty bytes;
        reads: the lookup.  ``opened`` adds one file open.
        """
        c = self.constants
        t = c["open"] if opened else 0.0
        if not writing:
            return t + c["lookup"]
        t += c["commit"] + (self.scaled(nprocs)["checksum_byte"] * nbytes / max(nprocs, 1) if checksum else 0.0)
        return t + (c["fsync"] + c["fsync_byte"] * nbytes if sync else 0.0)
