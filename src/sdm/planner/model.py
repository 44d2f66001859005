"""The cost model: predicted seconds of an access for each I/O method.

The model of Shen, Liao and Choudhary -- ``T = Tconn + Topen + Tseek + Tread(s) +
Tclose``, ``n`` calls costing ``n (Tseek + Tread(s))`` -- with the terms a local or
parallel file system reached through MPI-IO asks for.  Every term is a named constant
(seconds per unit) times a count read off the access:

==================  ========================================================================
open                per collective file open and close
base_<method>_w/_r  per write / read with that method (its file view, planning, fixed collectives)
sync                per further collective synchronization (a turn, an exchange round)
call_w, call_r      per independent request (the fixed cost of a call)
seek_w, seek_r      per request that jumps in the file (not sequential)
page_w              per file page a write touches first (a new time step's pages are new;
                    the writers of a method share them out: regions, windows, chunks)
page_part_w         per such page a write smaller than a page creates alone (the kernel
                    gives it a page of its own; large writes create pages in large folios)
hole_w              per page of a read-modify-write window the file does not hold yet (a new
                    step's holes), read and written back: reading a hole makes a zeroed
                    page-cache page and writing fills it, both in small pages (measured
                    directly: about twice what a large write into new pages costs)
byte_w@S, byte_r@S  per byte, for requests of size S (4 KiB, 64 KiB, 512 KiB, 16 MiB; log-linear
                    in between, flat outside): the cost per byte depends on request size
list_w, list_r      per region walked inside one list-I/O call (MPI library, in C)
ds_w, ds_r          per region copied by ROMIO's data sieving
lock                per read-modify-write window of ROMIO's data sieving (file lock)
window              per window of SDM's sieving (its Python bookkeeping)
pack, pack_byte     per noncontiguous memory block the MPI datatype engine gathers or scatters,
                    and per byte it moves so
elem, copy, run     numpy strided copies (sieving, servers): per element of runs one element
                    long (numpy's inner loop copies them one by one), per byte, and per
                    longer run contiguous in both memory and file (an outer iteration each)
fault               per page of fresh memory a rank touches first: ROMIO's collective buffer,
                    allocated when a file is opened, on the handle's first collective write
                    (measured directly; not part of an access: :meth:`CostModel.new_handle`)
exchange_w/_r       per byte moved between ranks in MPI messages (two-phase collective, servers
                    without shared memory): writing, every rank sends to the aggregators;
                    reading, the aggregators send to every rank
shm                 per byte a rank copies into (out of) the servers' shared-memory slabs
coll_region_w/_r    per file region through ROMIO's two-phase collective I/O (a write also
                    merges the regions' offsets, sorted, to find the holes it must read first)
coll_check          per collective call that finds the ranks' regions not interleaved (ROMIO
                    gathers every rank's offset range first, then falls back to independent I/O)
fsync, fsync_byte   per sync as SDM makes it (:mod:`sdm.storage.durability`) and per byte it flushes
commit, lookup      per SDM write / read beyond the method (allgathers, catalog)
first_w             per dataset, what its first write adds (its catalog rows, the method's plans)
first_r             per dataset, what its first read adds (its read view, the method's plans)
session_r           per run, what its first read adds (the catalog's read queries, prepared once)
checksum_byte       per byte of a rank's share of the write-time checksum
pwrite              per plain ``os.pwrite`` from Python (codes that write value by value)
==================  ========================================================================

Each method turns an :class:`~sdm.planner.Access` into per-rank counts of these units
(:func:`structure`); the constants are *effective* ones, measured with all ranks of the
calibration busy at once (``nprocs`` ranks on ``cores`` cores), so a rank's time is its
counts times the constants.  Ranks combine by the slowest one, except where a method
serializes them: sieving writes with overlapping windows take turns.  Work that only
some ranks do while the others wait (ROMIO's aggregators, SDM's busy servers) runs
faster by the contention it is spared.  For another number of ranks the constants scale
with the CPU contention ``max(1, P / cores)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from . import Access

__all__ = [
    "SIZES",
    "METHODS",
    "CONSTANTS",
    "DEFAULTS",
    "Params",
    "Structure",
    "Prediction",
    "CostModel",
    "structure",
    "size_weights",
    "turns_of",
]

SIZES = (4096, 65536, 524288, 16777216)  #: request sizes of the byte-cost table
METHODS = ("posix", "list", "datatype", "sieving", "collective", "servers")

_PER = tuple(f"base_{m}_{x}" for m in METHODS for x in "wr") + (
    "sync", "call_w", "call_r", "seek_w", "seek_r", "page_w", "page_part_w", "hole_w", "buf_r", "list_w", "list_r", "ds_w", "ds_r", "lock", "window",
    "pack", "pack_byte",
        "elem", "copy", "run", "fault", "exchange_w", "exchange_r", "shm", "coll_region_w", "coll_region_r", "coll_check")
#: constants split in two since calibrations were first stored: an old value serves both
_RENAMED = {"exchange": ("exchange_w", "exchange_r"), "coll_region": ("coll_region_w", "coll_region_r")}
CONSTANTS = _PER + tuple(f"byte_{x}@{s}" for x in "wr" for s in SIZES)  #: constants the calibration fits
_FIXED = ("open", "fsync", "fsync_byte", "commit", "lookup", "first_w", "first_r", "session_r")  # not CPU-bound per rank: not scaled

#: Uncalibrated defaults (a local disk through the page cache, a few ranks per core pair).
DEFAULTS: dict[str, float] = {
    "open": 5e-4, **{f"base_{m}_{x}": b for m, b in (("posix", 5e-5), ("list", 5e-5), ("datatype", 5e-5),
                                                      ("sieving", 3e-4), ("servers", 1e-3), ("collective", 3e-4))
                     for x in "wr"},
    "sync": 1e-4, "pack": 2e-8, "pack_byte": 2e-10, "page_w": 1e-6, "page_part_w": 5e-6, "hole_w": 7e-6, "buf_r": 1.5e-10,
    "call_w": 2.5e-6, "call_r": 2e-6, "seek_w": 1e-7, "seek_r": 1e-7, "list_w": 1.5e-6, "list_r": 8e-7,
    "ds_w": 2e-8, "ds_r": 1.5e-8, "lock": 2e-5, "window": 5e-6, "elem": 3e-9, "copy": 3e-10, "run": 1e-8, "fault": 2e-6, "exchange_w": 5e-10, "exchange_r": 5e-10, "shm": 3e-10, "coll_region_w": 2e-7, "coll_region_r": 1.2e-7, "coll_check": 3e-5,
    "fsync": 1e-3, "fsync_byte": 1e-9, "commit": 2e-3, "lookup": 1e-3, "first_w": 2e-3, "first_r": 5e-4, "session_r": 2e-3, "pwrite": 1.5e-6, "checksum_byte": 4e-10,
    **{f"byte_w@{s}": 4e-10 for s in SIZES}, **{f"byte_r@{s}": 3e-10 for s in SIZES},
}


def size_weights(size: float) -> dict[int, float]:
    """Weights of the table sizes for a request of *size* bytes (log-linear hat functions)."""
    if size <= SIZES[0]:
        return {SIZES[0]: 1.0}
    if size >= SIZES[-1]:
        return {SIZES[-1]: 1.0}
    x = math.log(size)
    for a, b in zip(SIZES, SIZES[1:]):
        if size <= b:
            w = (x - math.log(a)) / (math.log(b) - math.log(a))
            return {a: 1.0 - w, b: w}
    raise AssertionError("unreachable")  # pragma: no cover


def _missing_sizes(stored: Mapping[str, float]) -> dict[str, float]:
    """Byte costs at request sizes a calibration stored before they were in :data:`SIZES`:
    interpolated log-linearly between the sizes it has, so that it predicts as it did."""
    out = {}
    for x in "wr":
        have = sorted(s for s in SIZES if f"byte_{x}@{s}" in stored)
        for s in SIZES:
            if have and s not in have:
                lo = max((h for h in have if h < s), default=have[0])
                hi = min((h for h in have if h > s), default=have[-1])
                w = 0.0 if lo == hi else (math.log(s) - math.log(lo)) / (math.log(hi) - math.log(lo))
                out[f"byte_{x}@{s}"] = (1 - w) * stored[f"byte_{x}@{lo}"] + w * stored[f"byte_{x}@{hi}"]
    return out


@dataclass(frozen=True)
class Params:
    """Method parameters as the methods will use them (from the hints and the target).

    Defaults are the methods' and ROMIO's: sieve buffer 4 MiB and gap 32 KiB; servers
    on every rank with 16 MiB buffers, in shared memory (``shm``: the ranks are taken
    to share a node unless ``sdm_shm=disable``); ROMIO data-sieving buffers 4 MiB
    (reads) and 512 KiB (writes), collective buffers 16 MiB on ``cb_nodes`` aggregators.
    ``cores`` is the number of cores the ranks share (0: unknown), for work only some
    ranks do at once (:func:`_alone`).
    """

    sieve_buffer: int = 4 << 20
    sieve_gap: int = 32 << 10
    servers: int | None = None
    server_buffer: int = 16 << 20
    shm: bool = True
    ind_rd_buffer: int = 4 << 20
    ind_wr_buffer: int = 512 << 10
    cb_buffer: int = 16 << 20
    cb_nodes: int = 1
    cores: int = 0

    @classmethod
    def of(cls, hints: Mapping[str, Any] | None = None, romio: Mapping[str, Any] | None = None,
           cores: int = 0) -> "Params":
        """Parameters from the session's MPI/SDM hints, over the target's ROMIO defaults."""
        from ..io._support import int_hint

        h = {**dict(romio or {}), **dict(hints or {})}
        d = cls()
        return cls(
            sieve_buffer=int_hint(h, "sdm_sieve_buffer_size", d.sieve_buffer),
            sieve_gap=int_hint(h, "sdm_sieve_gap", d.sieve_gap, minimum=0),
            servers=int_hint(h, "sdm_io_servers", 0, minimum=0) or None,
            server_buffer=int_hint(h, "sdm_buffer_size", d.server_buffer),
            shm=str(h.get("sdm_shm", "automatic")).lower() != "disable",
            ind_rd_buffer=int_hint(h, "ind_rd_buffer_size", d.ind_rd_buffer),
            ind_wr_buffer=int_hint(h, "ind_wr_buffer_size", d.ind_wr_buffer),
            cb_buffer=int_hint(h, "cb_buffer_size", d.cb_buffer),
            cb_nodes=int_hint(h, "cb_nodes", d.cb_nodes),
            cores=cores,
        )

    def buffer_of(self, method: str) -> int:
        """Extra memory a rank may need for *method*'s buffers (bytes)."""
        return {"sieving": self.sieve_buffer, "servers": self.server_buffer, "collective": self.cb_buffer,
                "datatype": self.ind_rd_buffer}.get(method, 0)


Terms = dict[str, float]


@dataclass
class Structure:
    """Counts of cost units for one method and access, and how ranks combine.

    Attributes
    ----------
    ranks : list of dict
        Per rank: constant name -> count.
    shared : dict
        Counts paid once by the whole access (collective synchronizations).
    turns : list of list of int, optional
        Ranks that run one after another, turn by turn (sieving writes).
    """

    ranks: list[Terms]
    shared: Terms = field(default_factory=dict)
    turns: list[list[int]] | None = None

    def seconds(self, c: Mapping[str, float]) -> tuple[float, Terms]:
        """Predicted seconds and the seconds of each constant (for the slowest path)."""
        per = [sum(n * c.get(k, 0.0) for k, n in r.items()) for r in self.ranks]
        path: list[tuple[int, float]]  # (rank, weight) whose terms make up the prediction
        if self.turns is not None:
            path = [(max(turn, key=lambda r: per[r]), 1.0) for turn in self.turns if turn]
        else:
            path = [(int(np.argmax(per)), 1.0)] if per else []
        terms: Terms = {}
        for r, w in path:
            for k, n in self.ranks[r].items():
                terms[k] = terms.get(k, 0.0) + w * n * c.get(k, 0.0)
        for k, n in self.shared.items():
            terms[k] = terms.get(k, 0.0) + n * c.get(k, 0.0)
        return sum(terms.values()), terms

    def counts(self, rank: int | None = None) -> Terms:
        """Counts along the path of *rank* (default: the rank moving most bytes), linear in the constants.

        Used to fit the constants on symmetric accesses, where every rank is the slowest.
        """
        if not self.ranks:
            return dict(self.shared)
        heavy = rank if rank is not None else int(np.argmax([sum(r.values()) for r in self.ranks]))
        weight = 1.0 if self.turns is None else float(sum(1 for turn in self.turns if turn))
        out = {k: weight * n for k, n in self.ranks[heavy].items()}
        for k, n in self.shared.items():
            out[k] = out.get(k, 0.0) + n
        return out


@dataclass(frozen=True)
class Prediction:
    """Predicted seconds of one method for one access, with the biggest terms."""

    method: str
    seconds: float
    terms: Terms

    def top(self, n: int = 2) -> str:
        """The *n* largest terms as text: ``call_w 61%, byte_w@4096 20%``."""
        total = self.seconds or 1.0
        best = sorted(self.terms.items(), key=lambda kv: -kv[1])[:n]
        return ", ".join(f"{k} {100 * v / total:.0f}%" for k, v in best if v > 0)


# ---------------------------------------------------------------------- structure
def _bytes(terms: Terms, rw: str, nbytes: float, size: float) -> None:
    """Add *nbytes* moved in requests of *size* bytes to *terms*."""
    if nbytes <= 0:
        return
    for s, w in size_weights(max(size, 1.0)).items():
        key = f"byte_{rw}@{s}"
        terms[key] = terms.get(key, 0.0) + w * nbytes


def _add(terms: Terms, **counts: float) -> Terms:
    for k, v in counts.items():
        if v:
            terms[k] = terms.get(k, 0.0) + v
    return terms


def _alone(p: Params, active: int, nprocs: int) -> float:
    """Time factor of work *active* of *nprocs* ranks do at once while the others wait.

    The constants are measured with every rank busy; fewer ranks share the cores, and
    the kernel's page allocation, with fewer (measured here, 4 ranks on 2 cores: a new
    page costs 2.6-3.3 us with all four writing, 1.2-1.3 us with one at a time).
    """
    if not p.cores:
        return 1.0
    return max(1.0, active / p.cores) / max(1.0, nprocs / p.cores)


def _overlaps(a: "Access") -> np.ndarray:
    """Ranks whose file spans overlap (matrix); empty ranks overlap nobody."""
    lo = np.array([s[0] for s in a.spans], dtype=np.int64)
    hi = np.array([s[1] for s in a.spans], dtype=np.int64)
    near = (lo[:, None] < hi[None, :]) & (lo[None, :] < hi[:, None])
    np.fill_diagonal(near, False)
    return near


def turns_of(conflict: np.ndarray) -> list[list[int]]:
    """Greedy colouring in rank order (as the sieving method does), as lists of ranks."""
    from ..io.sieving import turns

    colour = turns(conflict) if conflict.size else np.zeros(0, dtype=np.int64)
    return [list(np.flatnonzero(colour == k)) for k in range(int(colour.max()) + 1)] if colour.size else []


PAGE = 4096


def _pages(nbytes: int, regions: int, span: tuple[int, int]) -> float:
    """File pages a rank's regions touch: each region's own, shared ones counted once."""
    if not nbytes:
        return 0.0
    return float(min(math.ceil((span[1] - span[0]) / PAGE), regions * math.ceil(nbytes / regions / PAGE)))


def _data_span(a: "Access") -> int:
    """Bytes from the first to the last byte any rank accesses (0: no rank accesses any)."""
    used = [s for s, b in zip(a.spans, a.rank_bytes) if b]
    return max(s[1] for s in used) - min(s[0] for s in used) if used else 0


def _first_touch(a: "Access") -> float:
    """Share of the pages a rank's regions touch that it is the first to write.

    Ranks whose regions interleave inside pages touch the same pages; the file's pages
    are created once, so each rank creates its touched pages' share of the union.
    """
    touched = sum(_pages(b, reg, span) for b, reg, span in zip(a.rank_bytes, a.rank_regions, a.spans))
    span = _data_span(a)
    if not touched or not span:
        return 1.0
    union = math.ceil(span / PAGE)
    return min(1.0, union / touched)


def _new_pages(t: Terms, pages: float, request: float) -> None:
    """Add *pages* new file pages written in requests of *request* bytes."""
    _add(t, page_w=pages, page_part_w=pages if request < PAGE else 0)


def _span_pages(a: "Access", near: np.ndarray, r: int) -> float:
    """Pages rank *r* creates writing its whole span (holes too), shared with the ranks it overlaps."""
    lo, hi = a.spans[r]
    return math.ceil((hi - lo) / PAGE) / (1 + int(near[r].sum()))


def _rmw(t: Terms, span: float, size: float, holes: float) -> None:
    """A read-modify-write of *span* bytes in requests of *size*: read into the method's buffer,
    patched and written back whole.  *holes* of its pages are not in the file yet: reading
    them makes zeroed pages, writing back fills them (``hole_w`` for both); the rest is
    read as data (``buf_r``) and overwritten."""
    filled = min(span, holes * PAGE)
    _add(t, hole_w=holes, buf_r=span - filled)
    _bytes(t, "w", span - filled, size)


def _posix(a: "Access", p: Params, rw: str) -> Structure:
    ranks, share = [], _first_touch(a) if rw == "w" else 0.0
    for b, reg, seg, span in zip(a.rank_bytes, a.rank_regions, a.segments, a.spans):
        t = _add({}, **{f"call_{rw}": seg, f"seek_{rw}": reg})
        if rw == "w":
            _new_pages(t, share * _pages(b, reg, span), b / seg if seg else 0)
        _bytes(t, rw, b, b / seg if seg else 0)
        ranks.append(t)
    return Structure(ranks, {f"base_posix_{rw}": 1})


def _packing(nbytes: float, mem: int) -> Terms:
    """What the MPI datatype engine does gathering (scattering) *nbytes* in *mem* memory
    blocks: per block and per byte (nothing for one contiguous block)."""
    return _add({}, pack=mem, pack_byte=nbytes) if mem > 1 else {}


def _list(a: "Access", p: Params, rw: str) -> Structure:
    ranks, share = [], _first_touch(a) if rw == "w" else 0.0
    for b, reg, seg, mem, span in zip(a.rank_bytes, a.rank_regions, a.segments, a.memory, a.spans):
        t = _add(_packing(b, mem), **{f"call_{rw}": 1 if b else 0, f"list_{rw}": seg, f"seek_{rw}": reg})
        if rw == "w":
            _new_pages(t, share * _pages(b, reg, span), b / seg if seg else 0)
        _bytes(t, rw, b, b / seg if seg else 0)
        ranks.append(t)
    return Structure(ranks, {f"base_list_{rw}": 1})


def _romio_windows(nbytes: int, regions: int, span: int, buffer: int) -> tuple[int, float, bool]:
    """ROMIO's data-sieving windows over a rank's regions: (count, bytes covered, tiled).

    A window starts at the first region it has not covered yet and is one buffer long:
    where regions repeat within a buffer the windows tile the span; farther apart, every
    region starts windows of its own and the holes between are skipped.
    """
    if span / regions <= buffer:
        n = math.ceil(span / buffer)
        return n, float(span), True
    n = regions * math.ceil(nbytes / regions / buffer)
    return n, float(min(span, n * buffer)), False


def _independent_view(a: "Access", p: Params, rw: str) -> Structure:
    """ROMIO's independent path through a file view (data sieving when noncontiguous)."""
    ranks, near = [], _overlaps(a)
    for r, (b, reg, mem, (lo, hi)) in enumerate(zip(a.rank_bytes, a.rank_regions, a.memory, a.spans)):
        t = _packing(b, mem)
        if reg <= 1:
            _add(t, **{f"call_{rw}": 1 if b else 0})
            _bytes(t, rw, b, b)
            if rw == "w":
                _add(t, page_w=math.ceil(b / PAGE))
        else:  # data sieving: windows read and, writing, written back whole, holes too
            buf = p.ind_rd_buffer if rw == "r" else p.ind_wr_buffer
            n, covered, tiled = _romio_windows(b, reg, hi - lo, buf)
            _add(t, call_r=n, copy=b, **{f"ds_{rw}": reg})
            if rw == "r":
                _add(t, buf_r=covered)  # into the method's reused buffer
            else:
                _add(t, call_w=n, lock=n)
                _rmw(t, covered, min(covered, buf), _span_pages(a, near, r) if tiled else covered / PAGE)
        ranks.append(t)
    return Structure(ranks, {f"base_datatype_{rw}": 1})


def _sieving(a: "Access", p: Params, rw: str) -> Structure:
    ranks, rmw, near = [], [], _overlaps(a)
    share = _first_touch(a) if rw == "w" else 0.0
    for r, (b, reg, seg, (lo, hi)) in enumerate(zip(a.rank_bytes, a.rank_regions, a.segments, a.spans)):
        t: Terms = {}
        if b == 0:
            ranks.append(t)
            continue
        span = hi - lo
        gap = (span - b) / max(reg - 1, 1)
        if reg > 1 and gap > p.sieve_gap:  # region windows, holes skipped
            _add(t, window=reg, **{f"call_{rw}": reg})
            _bytes(t, rw, b, b / reg)
            if rw == "w":
                _new_pages(t, share * _pages(b, reg, (lo, hi)), b / reg)
            if seg > reg:
                _add(t, copy=b, **_runs(b, seg, a.itemsize))
        else:  # slab windows of whole rows, holes read through
            row = a.row_bytes or a.itemsize
            n = max(1, math.ceil(span / (row * max(1, p.sieve_buffer // row))))
            size = span / n
            _add(t, copy=b, **_runs(b, seg, a.itemsize), window=n, **{f"call_{rw}": n})
            if rw == "r":
                _add(t, buf_r=span)  # into the method's reused buffer
            elif span > b:  # whole windows are read and written back, holes too
                _add(t, call_r=n)
                _rmw(t, span, size, _span_pages(a, near, r))
                rmw.append(r)
            else:
                _add(t, page_w=_span_pages(a, near, r))
                _bytes(t, "w", span, size)
        ranks.append(t)
    if rw == "r":
        return Structure(ranks, {"base_sieving_r": 1})
    conflict = np.zeros_like(near)
    for r in rmw:
        conflict[r] |= near[r]
        conflict[:, r] |= near[r]
    turns = turns_of(conflict) or [[]]
    return Structure(ranks, {"base_sieving_w": 1, "sync": float(len(turns))}, turns=turns)


def _serve(t: Terms, p: Params, rw: str, nbytes: float, chunk: float, calls: int, holes: bool, active: int,
           nprocs: int) -> None:
    """An aggregator's (or server's) share of *nbytes* of the file, moved in *calls* *chunk*-byte buffers.

    Its part of the file is its own: writing with holes, all of it is read first (holes).
    *active* of the *nprocs* ranks do this while the others wait, faster by the contention
    they are spared (:func:`_alone`) -- except copying cached pages (``buf_r``), which
    memory bandwidth bounds (64 MiB from the page cache: 10.3 ms alone, 15.6 ms with four
    ranks at once).
    """
    io = _add({}, **{f"call_{rw}": calls})
    if rw == "r":
        _add(io, buf_r=nbytes)  # into the method's reused buffer
    elif holes:
        _add(io, call_r=calls)
        _rmw(io, nbytes, chunk, math.ceil(nbytes / PAGE))
    else:
        _add(io, page_w=math.ceil(nbytes / PAGE))
        _bytes(io, "w", nbytes, chunk)
    f = _alone(p, active, nprocs)
    _add(t, **{k: n if k == "buf_r" else f * n for k, n in io.items()})


def _runs(nbytes: float, runs: int, itemsize: int) -> Terms:
    """What a numpy strided copy of *nbytes* in *runs* contiguous runs iterates over.

    Runs of one element are copied element by element in numpy's inner loop (``elem``);
    runs of several elements cost an outer iteration each (``run``), their bytes a
    memory copy (``copy``, counted by the caller).
    """
    if not runs:
        return {}
    return {"elem": float(runs)} if nbytes <= runs * itemsize else {"run": float(runs)}


def _servers(a: "Access", p: Params, rw: str) -> Structure:
    nproc = a.nprocs
    k = min(p.servers or nproc, nproc)
    span = _data_span(a)
    if not span:
        return Structure([{} for _ in range(nproc)], {f"base_servers_{rw}": 1})
    total = sum(a.rank_bytes)
    row = a.row_bytes or a.itemsize
    rows = max(1, math.ceil(span / row))  # chunks are whole rows, as the method cuts them
    per = max(1, min(p.server_buffer // row, math.ceil(rows / k)))
    chunks = math.ceil(rows / per)
    rounds = math.ceil(chunks / k)
    busy = min(k, chunks)
    chunk = min(per * row, span)
    servers = {j * nproc // k for j in range(busy)}
    ranks = []
    for r, (b, seg) in enumerate(zip(a.rank_bytes, a.segments)):
        # shared memory: each byte moves once, straight into (out of) another rank's slab (an exchange
        # through memory); else packed (copy), sent (exchange) and unpacked by the server
        t = _add({}, copy=0 if p.shm else b, **_runs(b, seg, a.itemsize), **{"shm" if p.shm else f"exchange_{rw}": b})
        if r in servers:
            mine = math.ceil(chunks / busy)
            if not p.shm:
                _add(t, copy=total / busy, **_runs(total / busy, math.ceil(sum(a.segments) / busy), a.itemsize))
            _serve(t, p, rw, span / busy, chunk, mine, total < span, busy, nproc)
        ranks.append(t)
    return Structure(ranks, {f"base_servers_{rw}": 1, "sync": 2 * rounds if p.shm else rounds})


def _aggregators(a: "Access", p: Params) -> int:
    """ROMIO's collective-buffering aggregators for *a* (``cb_nodes``, at most one per rank)."""
    return max(1, min(p.cb_nodes, a.nprocs))


def _collective(a: "Access", p: Params, rw: str) -> Structure:
    near = _overlaps(a)
    if not near.any():  # ROMIO's "automatic" collective buffering falls back to independent I/O,
        fallback = _independent_view(a, p, rw)  # once the ranks' offset ranges are gathered
        _add(fallback.shared, coll_check=1)
        return fallback
    span = _data_span(a)
    total = sum(a.rank_bytes)
    k = _aggregators(a, p)
    ranks = [_add(_packing(b, mem), copy=b) for b, mem in zip(a.rank_bytes, a.memory)]
    for r in range(k):  # the aggregators: every region passes through them
        n = math.ceil(span / k / p.cb_buffer)
        t = _add(ranks[r * a.nprocs // k], **{f"coll_region_{rw}": sum(a.rank_regions) / k, f"exchange_{rw}": total / k})
        _serve(t, p, rw, span / k, min(span / k, p.cb_buffer), n, total < span, k, a.nprocs)
    return Structure(ranks, {f"base_collective_{rw}": 1})


_BUILDERS = {"posix": _posix, "list": _list, "datatype": _independent_view, "sieving": _sieving,
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
        Seconds per unit (see the module documentation); missing ones take
        :data:`DEFAULTS`.
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
        stored = {k: float(v) for k, v in data.get("constants", {}).items()}
        for old, new in _RENAMED.items():  # calibrations stored before a constant was split in two
            if old in stored:
                stored = {**{n: stored[old] for n in new}, **stored}
        stored = {**_missing_sizes(stored), **stored}
        return cls(
            constants={**DEFAULTS, **stored},
            nprocs=int(data.get("nprocs", record.get("nprocs", 4))),
            cores=int(data.get("cores", 2)),
            romio=dict(data.get("romio", {})),
            calibrated=True,
            label=f"calibration {record.get('id', '?')} ({record.get('nprocs', data.get('nprocs', '?'))} ranks)",
        )

    def to_json(self) -> dict[str, Any]:
        """What the catalog stores in ``io_calibrations.constants``."""
        return {"version": 1, "nprocs": self.nprocs, "cores": self.cores, "romio": dict(self.romio),
                "constants": dict(self.constants)}

    def contention(self, nprocs: int) -> float:
        """CPU contention of *nprocs* ranks on this target's cores."""
        return max(1.0, nprocs / max(self.cores, 1))

    def scaled(self, nprocs: int) -> dict[str, float]:
        """Constants for *nprocs* ranks (CPU-bound costs scale with the contention)."""
        f = self.contention(nprocs) / self.contention(self.nprocs)
        return {k: (v if k in _FIXED else v * f) for k, v in self.constants.items()}

    def params(self, hints: Mapping[str, Any] | None = None) -> Params:
        """Method parameters under *hints* on this target."""
        return Params.of(hints, self.romio, self.cores)

    def predict(self, method: str, access: "Access", hints: Mapping[str, Any] | None = None) -> Prediction:
        """Predicted seconds of *method* for *access*."""
        s = structure(method, access, self.params(hints))
        seconds, terms = s.seconds(self.scaled(access.nprocs))
        return Prediction(method, seconds, terms)

    def predict_all(self, access: "Access", hints: Mapping[str, Any] | None = None,
                    methods: tuple[str, ...] = METHODS) -> list[Prediction]:
        """Predictions for *methods*, fastest first (ties: the order of *methods*)."""
        preds = [self.predict(m, access, hints) for m in methods]
        return sorted(preds, key=lambda p: p.seconds)

    def new_handle(self, method: str, access: "Access", hints: Mapping[str, Any] | None = None) -> float:
        """Seconds the first write through a newly opened file handle adds to *access* with *method*.

        ROMIO allocates a handle's collective buffer (``cb_buffer_size``) when the file is
        opened, and the first collective write touches it, as far as an aggregator's share
        of the span reaches.  Memory is fresh only while no earlier buffer was freed: a
        process that closes one file before opening the next gets the freed buffer back
        from the allocator (measured: 4,100 page faults for the first handle, none for
        the next), so this is paid once per handle *held open at the same time*.
        """
        if method != "collective" or not access.writing or not _overlaps(access).any():
            return 0.0
        p = self.params(hints)
        k = _aggregators(access, p)
        return math.ceil(min(_data_span(access) / k, p.cb_buffer) / PAGE) * self.scaled(access.nprocs)["fault"]

    def first_writes(self, datasets: int) -> float:
        """Seconds the first writes of *datasets* new datasets add to their later writes' cost."""
        return datasets * self.constants.get("first_w", DEFAULTS["first_w"])

    def first_reads(self, datasets: int) -> float:
        """Seconds a run's first reads of *datasets* datasets add to their later reads' cost."""
        if datasets <= 0:
            return 0.0
        c = self.constants
        return c.get("session_r", DEFAULTS["session_r"]) + datasets * c.get("first_r", DEFAULTS["first_r"])

    def overhead(self, nbytes: int, nprocs: int = 1, *, writing: bool, sync: bool = True, checksum: bool = True,
                 opened: bool = False) -> float:
        """Seconds an SDM write or read of *nbytes* on *nprocs* ranks adds around the method.

        Writes: the commit, the checksum (each rank its share), the sync of the dirty
        bytes; reads: the lookup.  ``opened`` adds one file open.
        """
        c = self.constants
        t = c["open"] if opened else 0.0
        if writing:
            share = nbytes / max(nprocs, 1)
            t += c["commit"] + (self.scaled(nprocs)["checksum_byte"] * share if checksum else 0.0)
            t += c["fsync"] + c["fsync_byte"] * nbytes if sync else 0.0
        else:
            t += c["lookup"]
        return t
