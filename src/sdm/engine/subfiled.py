"""The write and read protocol of subfiled groups (``make_group(subfiles=K)``), for :class:`sdm.Group`.

The protocol is a group's usual one (:mod:`sdm.group`): the same opening exchange, one
reservation by rank 0 (here one range per extent, in each extent's subfile, aligned:
:mod:`sdm.storage.subfiles`), the bytes moved (:func:`sdm.io.subfiles.move`), one closing
reduction that also sums every extent's checksum (each rank contributes those of the
extents it owns), and one catalog transaction that records the step's row with its
extents. A read is planned by rank 0 from the row's extents (each on the fast tier, or
its verified archive copy) and checks every extent's checksum when it is verified.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, Sequence

import numpy as np

from .. import integrity
from ..catalog.changes import SpaceReserved
from ..errors import IntegrityError
from ..io.base import Transfer
from ..io.subfiles import Place, move
from ..io._support import int_hint
from ..planner.subfiles import choose_subfiles
from ..storage.mounts import fs_type
from ..storage.confine import row_record
from ..storage.durability import node_comm
from ..storage.subfiles import ALIGN, Extent, cut, subfile_path

if TYPE_CHECKING:
    from ..catalog import DatasetRecord, GroupRecord, WriteRecord
    from ..layout.views import ResolvedView
    from .session_state import SessionState

__all__ = ["Layout", "layouts", "reserve", "row_fields", "write", "read_plan", "read", "check_read", "copy_previous"]


class Group(Protocol):
    """What the subfiled protocol takes of a group's state (:class:`sdm.engine.state.GroupState`, which calls it)."""

    _placement: tuple[int, str] | None
    _nbytes: dict[str, int]

    @property
    def session(self) -> SessionState: ...
    @property
    def record(self) -> GroupRecord: ...
    @property
    def name(self) -> str: ...
    @property
    def level(self) -> int: ...

    def dataset(self, name: str) -> DatasetRecord: ...

    def _view(self, name: str) -> ResolvedView: ...

    def _absolute(self, rel: str, record: str = "") -> Path: ...

    def _locate_span(self, name: str, step: int, rel: str, offset: int, nbytes: int,
                     held: dict[str, list[Any]] | None = None) -> tuple[str, int]: ...

    def _backend_of(self, path: str) -> tuple[Any, Any, str]: ...

METHOD = "subfiles"  #: the ``writes.method`` of a subfiled step


@dataclass
class Layout:
    """How one dataset step of a write is cut: its extents, why, and (after the reservation) where each goes."""

    extents: list[Extent]
    reason: str
    offsets: list[int] = field(default_factory=list)
    aligned: bool = False  # set by the write: no byte moved between ranks


def _placement(g: "Group") -> tuple[int, str]:
    """The number of nodes the session's ranks run on and (rank 0, for the reasons it records) the data
    root's file system; collective the first time, then kept by the group."""
    if g._placement is None:
        s = g.session
        node = node_comm(s.comm)
        nodes = int(s.comm.allreduce(1 if node.Get_rank() == 0 else 0))
        g._placement = (nodes, fs_type(s.root) if s.rank == 0 else "")
    return g._placement


def layouts(g: "Group", names: Sequence[str]) -> tuple[list[Layout | None], list[str]]:
    """Each dataset's layout in this write (None: one shared file) and, for those kept in one file, why;
    the same on every rank (collective the first time: :func:`_placement`)."""
    s = g.session
    requested = int(g.record.subfiles or 0)
    nodes, fs = _placement(g)
    out: list[Layout | None] = []
    notes: list[str] = []
    for name in names:
        rec = g.dataset(name)
        itemsize = np.dtype(g._view(name).dtype).itemsize
        k, reason = choose_subfiles(requested, g._nbytes[name], s.size, nodes, s.hints, fs)
        if not rec.shape:
            k, reason = 0, "one shared file (a 0-d dataset is one element)"
        extents = cut(rec.shape, itemsize, rec.order, k) if k else []
        if k and not extents:
            reason = "one shared file (an empty dataset has no extents)"
        out.append(Layout(extents, reason) if extents else None)
        notes.append("" if extents else reason)
    return out, notes


def reserve(g: "Group", rels: Sequence[str], layouts: Sequence[Layout]) -> None:
    """Rank 0: aligned space in each subfile for every extent of the dump's subfiled datasets, in one catalog
    transaction; each layout gets its extents' offsets."""
    s = g.session
    align = int_hint(dict(s.hints), "sdm_subfile_align", ALIGN)
    # one range per subfile holding the dump's extents in it, one after the other, each on the alignment
    ranges: dict[str, list[tuple[int, int, int]]] = {}  # subfile -> (layout, extent, bytes)
    for i, (rel, lay) in enumerate(zip(rels, layouts)):
        lay.offsets = [0] * len(lay.extents)
        for k, e in enumerate(lay.extents):
            ranges.setdefault(subfile_path(rel, k), []).append((i, k, e.nbytes))
    spans = {path: [-(-n // align) * align for _, _, n in parts[:-1]] + [parts[-1][2]] for path, parts in ranges.items()}
    asked = [(path, g.level, sum(spans[path]), False, align) for path in ranges]
    got = s.record(SpaceReserved(s.run_id, tuple(asked))) if asked else []
    for (path, parts), start in zip(ranges.items(), got):
        assert start is not None  # appended space (not a whole file) always has its offset
        at = int(start)
        for (i, k, _), span in zip(parts, spans[path]):
            layouts[i].offsets[k] = at
            at += span


def copy_previous(g: "Group", previous: "WriteRecord", rel: str, layout: Layout, read: Any) -> None:
    """Rank 0, overwriting with a map that leaves rows unwritten: copy the earlier version's bytes into the new
    extents, which then keep them where the map writes nothing (*read(path, offset, nbytes)* gives bytes)."""
    for k, (e, offset) in enumerate(zip(layout.extents, layout.offsets)):
        data = bytearray(e.nbytes)
        for path, at, n, start in _stream_spans(previous):
            lo, hi = max(start, e.start), min(start + n, e.start + e.nbytes)
            if hi > lo:
                data[lo - e.start:hi - e.start] = read(path, at + lo - start, hi - lo)
        g.session.files.write(g._absolute(subfile_path(rel, k)), data, offset, what="subfile")


def _stream_spans(w: "WriteRecord") -> list[tuple[str, int, int, int]]:
    """``(path, offset, nbytes, first byte in the stream)`` of each run of a row's bytes."""
    if w.extents:
        return [(e.path, e.offset, e.nbytes, e.start) for e in w.extents]
    return [(w.path, w.offset, w.nbytes, 0)]


def row_fields(rel: str, layout: Layout, digests: Sequence[int], checksum: bool) -> dict[str, Any]:
    """What a subfiled step's catalog row says besides a plain row's: its first extent's place, its
    checksum's algorithm, why it was cut so, and its extents."""
    how = ("aligned: each rank wrote its own extent straight from its array" if layout.aligned else
           "extents gathered by their owners (servers exchange) before the writes")
    return dict(
        path=subfile_path(rel, 0), offset=layout.offsets[0], method=METHOD, reason=f"{layout.reason}; {how}",
        checksum_algo=integrity.EXTENTS if checksum else "none",
        extents=[dict(path=subfile_path(rel, k), offset=off, nbytes=e.nbytes, start=e.start,
                      checksum=integrity.to_hex(d) if checksum else "", checksum_algo=integrity.XXH3 if checksum else "none")
                 for k, (e, off, d) in enumerate(zip(layout.extents, layout.offsets, digests))],
    )


def _transfer(g: "Group", view: "ResolvedView", arr: np.ndarray) -> Transfer:
    s = g.session
    return Transfer(None, 0, view.etype, view.ftype, [], view.piece, arr, view.order, s.comm, s.hints)


def write(g: "Group", view: "ResolvedView", arr: np.ndarray, rel: str, layout: Layout, written: dict[Path, None],
          stats: Sequence[Sequence[int]]) -> tuple[float, list[int]]:
    """Move this rank's piece into the extents (collective unless *stats*, every rank's layout statistics,
    show the access aligned): ``(seconds, digests of the extents it owns)``; *written* receives the subfiles
    this rank wrote (synced once each by the caller, after the whole dump)."""
    t0 = time.perf_counter()
    places = [Place(g.session.files, g._absolute(subfile_path(rel, k)), off) for k, off in enumerate(layout.offsets)]
    digests, layout.aligned = move(_transfer(g, view, arr), layout.extents, places, writing=True, written=written,
                                   stats=stats)
    return time.perf_counter() - t0, digests


def extents_of(w: "WriteRecord", shape: Sequence[int], order: str) -> list[Extent]:
    """A recorded row's extents as layout extents (rows of the slowest dimension)."""
    rows = int(shape[0 if order == "C" else len(shape) - 1]) if len(shape) else 1
    per_row = w.nbytes // max(rows, 1)
    return [Extent((e.start // per_row, (e.start + e.nbytes) // per_row), e.start, e.nbytes) for e in w.extents]


def read_plan(g: "Group", name: str, step: int, w: "WriteRecord") -> list[tuple[str, int, int, int, str]]:
    """Rank 0: ``(plan path, offset, nbytes, start, checksum)`` of each extent of a subfiled row, each on the
    fast tier or its verified archive copy (:meth:`sdm.engine.state.GroupState._locate_span`)."""
    held: dict[str, list[Any]] | None = None
    missing = [e.path for k, e in enumerate(w.extents)
               if not g._absolute(e.path, row_record(g.session.run_id, g.name, name, step, k)).exists()]
    if missing:
        from ..catalog.tiers import copies

        held = copies(g.session.open_catalog(), g.session.run_id, missing)
    out = []
    for e in w.extents:
        path, offset = g._locate_span(name, step, e.path, e.offset, e.nbytes, held)
        out.append((path, offset, e.nbytes, e.start, e.checksum))
    return out


def read(g: "Group", name: str, view: "ResolvedView", arr: np.ndarray, plan: Sequence[tuple[str, int, int, int, str]],
         whole: bool, stats: Sequence[Sequence[int]]) -> tuple[float, list[int]]:
    """Read this rank's piece from the extents (collective): ``(seconds, digests of the extents it owns, when
    *whole*)``."""
    rec = g.dataset(name)
    t0 = time.perf_counter()
    total = sum(p[2] for p in plan)
    rows = int(rec.shape[0 if rec.order == "C" else len(rec.shape) - 1]) if len(rec.shape) else 1
    per_row = total // max(rows, 1)
    extents, places = [], []
    for path, offset, nbytes, start, _ in plan:
        backend, key, _copy = g._backend_of(path)
        extents.append(Extent((start // per_row, (start + nbytes) // per_row), start, nbytes))
        places.append(Place(backend, key, offset))
    digests, _ = move(_transfer(g, view, arr), extents, places, writing=False, whole=whole, stats=stats)
    return time.perf_counter() - t0, digests


def check_read(name: str, step: int, plan: Sequence[tuple[str, int, int, int, str]], sums: Sequence[int]) -> None:
    """Compare every extent's checksum read with its recorded one (every rank alike).

    Raises
    ------
    IntegrityError
        Naming the first extent that differs, its subfile and byte range.
    """
    for k, ((path, offset, nbytes, _, expected), got) in enumerate(zip(plan, sums)):
        if expected and integrity.to_hex(int(got)) != expected:
            raise IntegrityError(
                f"dataset {name!r} step {step} extent {k} ({nbytes} bytes at {offset} of {Path(path).name}) does not "
                f"match its write-time checksum {integrity.XXH3}:{expected}; the subfile was changed or damaged after "
                "the write")
