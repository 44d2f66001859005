"""The state of one group as the engine works on it, and the steps its writes and reads share.

A :class:`sdm.Group` is the user's handle; its :class:`~sdm.engine.group_engine.GroupEngine`
(this class with the placement of :mod:`sdm.engine.placement` and the write, read and data
view protocols of :mod:`sdm.engine.write`, :mod:`sdm.engine.read` and :mod:`sdm.engine.data_view`) holds what the protocol needs: the catalog records, the resolved
data views, the steps written, the checked paths, the space reserved ahead, the layout
statistics seen; and the steps every access shares: the opening exchange
(:meth:`GroupState._agree_call`), one
transfer through the storage seam (:meth:`GroupState._transfer`), the closing exchange
(:meth:`GroupState._closing`) and the commit (:meth:`GroupState._commit_dump`).
"""

from __future__ import annotations

import os
import time
from datetime import datetime, timezone
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
from mpi4py import MPI

from .. import integrity
from . import compressed as _compressed
from . import subfiled as _subfiled
from .._collective import (agree, digest, pack_float, reduce_exchange, root_vector, unpack_float)
from ..catalog import DatasetRecord, GroupRecord
from ..catalog.changes import SpaceReserved, WritesRecorded
from ..dtypes import from_text
from .operations import EXTRA
from .space import SpacePool
from ..errors import (
    DatasetNotFoundError,
    InternalError,
    InvalidArgumentError,
    SDMError,
    StepNotFoundError,
    StorageError,
)
from ..io import Transfer, get_method
from ..io.combined import COMBINABLE, Part, combined_types, move_combined
from ..io import remote as _remote
from ..layout import Block
from ..layout.datatypes import freeing
from ..layout.ranked import is_ranked
from ..layout.views import ResolvedView
from ..planner import Access, Decision as _Decision, choose_method, row_bytes
from ..storage import appends, relative_path
from ..storage.confine import confine, confine_location, row_record
from ..storage.backends import is_object, object_at
from ..storage.durability import node_comm
from ..suggest import closest
from ..storage.failures import storage_error

from .checks import _check_same_call, _not_global
if TYPE_CHECKING:
    from ..storage.backends.base import Backend
    from .session_state import SessionState as Session


__all__ = ["GroupState"]

_PLAN_WIDTH = EXTRA - 2  # int64 words of rank 0's read plan in the opening exchange (a path of up to 512 bytes)
_STATS_KEPT = 256  # layout statistics kept per group (forgotten all at once, alike on every rank)
_MASK = (1 << 64) - 1
#: How an archive-tier group writes (:mod:`sdm.io.remote`): the one method that makes whole objects.
_ARCHIVE_WRITE = _Decision(get_method("remote-collective"), "archive tier: aggregators assemble the object and upload "
                           "its parts (an object cannot be updated in part)")
#: ``auto`` writes datasets of at most this many bytes that share a file in one combined call
_COMBINE_AUTO_BYTES = 4 << 20
_THREADED_SHARE = 1 << 22  # bytes of a piece from which its checksum share runs beside the I/O


class GroupState:
    """One group's state and the steps its accesses share (rank-local; see the module docstring)."""

    def __init__(self, session: "Session", record: GroupRecord) -> None:
        self.session = session
        self.record = record
        self.name = record.name
        self.level = record.level
        self._datasets: dict[str, DatasetRecord] = {d.name: d for d in record.datasets}
        if any(d.steps is None for d in record.datasets):  # Catalog.group reads every step
            raise InternalError(f"group {record.name!r} was read without its steps; this is a bug, please report it")
        self._steps: dict[str, set[int]] = {d.name: set(d.steps or ()) for d in record.datasets}
        self._nbytes: dict[str, int] = {d.name: d.nbytes for d in record.datasets}
        self._views: dict[str, ResolvedView] = {}
        self._shared: dict[Any, ResolvedView] = {}  # the views in use, by layout: datasets alike share one
        self._paths: dict[str, Path] = {}  # relative path -> checked absolute path
        self._relatives: dict[tuple[str, int, int], str] = {}  # what a data file's path depends on -> the path
        self._pool = SpacePool(self._reserve_chunks)  # file space reserved ahead (levels 2 and 3), alike everywhere
        self._epoch = 0  # data_view calls so far (part of the views' layout keys)
        self._threads: bool | None = None  # checksum shares beside the I/O (see _ShareJob)
        self._stats_seen: dict[tuple[int, ...], list[Any]] = {}  # every rank's layout statistics, by their hashes
        self._ranked: set[str] = {d.name for d in record.datasets if is_ranked(d.distribution)}  # sdm.Ranked datasets
        self._archive_store: Any = None  # the object store of an archive-tier group (see _store)
        self._placement: tuple[int, str] | None = None  # nodes and file system (sdm.engine.subfiled, subfiled groups)

    def dataset(self, name: str) -> DatasetRecord:
        """The catalog record of a dataset (dtype, shape, order).

        Raises
        ------
        DatasetNotFoundError
        """
        try:
            return self._datasets[name]
        except (KeyError, TypeError):
            raise DatasetNotFoundError(
                f"group {self.name!r} has no dataset {name!r}; its datasets are {list(self._datasets)}"
                f"{closest(name, list(self._datasets))}"
            ) from None

    def _store(self) -> Any:
        """The object store of an archive-tier group (made once)."""
        if self._archive_store is None:
            from ..storage.backends.objectstore import ObjectStore

            self._archive_store = ObjectStore(str(self.record.archive))
        return self._archive_store

    def _truncated(self, after_step: int) -> None:
        """Every rank, after ``Session.truncate`` committed: forget the erased steps."""
        self.record = replace(self.record, truncated_after=after_step)
        self._pool.clear()  # the truncation lowered the files' marks: the space reserved ahead is not ours
        for steps in self._steps.values():
            steps.difference_update([s for s in steps if s > after_step])

    def _is_ranked(self, name: object) -> bool:
        """Whether *name* is a ranked dataset (:class:`sdm.layout.ranked.Ranked`)."""
        try:
            return name in self._ranked
        except TypeError:  # an unhashable name: refused later as an unknown dataset
            return False

    def _view(self, name: str) -> ResolvedView:
        v = self._views.get(name)
        if v is None:
            rec = self.dataset(name)
            if name in self._ranked:
                raise _not_global(name)
            s = self.session
            layout = ("default", s.size, tuple(rec.shape), rec.dtype, rec.order)
            # datasets of one shape, dtype and order share the default view (its piece and MPI types)
            v = self._shared.get(layout)
            if v is None:
                piece = Block().piece(rec.shape, s.size, s.rank)  # default view, same on all ranks
                v = self._shared[layout] = ResolvedView(Block(), piece, from_text(rec.dtype), rec.order, layout=layout)
            self._views[name] = v
        return v

    def _drop_views(self, names: Sequence[str]) -> None:
        """Forget the resolved views of *names*, freeing those no other dataset shares."""
        dropped = [v for v in (self._views.pop(n, None) for n in names) if v is not None]
        live = {id(v) for v in self._views.values()}
        freed: set[int] = set()
        for v in dropped:
            if id(v) not in live and id(v) not in freed:
                freed.add(id(v))
                self._shared.pop(v.layout, None)
                v.free()

    def _spare_cores(self) -> bool:
        """Whether this node has a core for every rank and one more (collective the first time, where
        every rank calls it: after the reservation, which every rank passed)."""
        if self._threads is None:
            ranks = node_comm(self.session.comm).Get_size()
            try:
                cores = len(os.sched_getaffinity(0))
            except (AttributeError, OSError):
                cores = os.cpu_count() or 1
            self._threads = cores > ranks
        return self._threads

    def _agree_call(self, what: str, call: tuple[Any, ...], failure: Any, plan: Any, stats: Any,
                    packed_plan: Sequence[int] | None = None, names: Sequence[str] = ()) -> tuple[Any, list[Any]]:
        """The exchange that opens an access: the same call on every rank, no failure, every layout.

        The session's opening exchange of the operation (:mod:`sdm.engine.operations`:
        one ``Iallgather`` of fixed size, the operation's name and sequence number first)
        carrying a hash of the call's arguments, a hash of the rank's layout statistics
        (the planner's input) and, for a read, rank 0's plan packed into integers
        (*packed_plan*).  Layout statistics
        seen before come from a cache that is the same on every rank (keyed by what
        every rank received); new ones, a call that differs between ranks, or a plan that
        does not fit make every rank take the generic pickled exchange instead (with *names*, naming each
        argument of *call* for the message of calls that differ).

        Returns
        -------
        (plan, statsets)
            Rank 0's plan (its own *plan* on rank 0; unpacked from the exchange, or None
            for a write, elsewhere) and every rank's *stats*, in rank order.

        Raises
        ------
        SDMError
            The failure of the lowest failed rank, on every rank; CollectiveMismatchError
            when ranks made different calls.
        """
        s = self.session
        mine = np.zeros(2 + _PLAN_WIDTH, dtype=np.int64)
        mine[0] = digest(stats)
        if packed_plan is not None and len(packed_plan) <= _PLAN_WIDTH:
            mine[1] = len(packed_plan) + 1
            mine[2:2 + len(packed_plan)] = packed_plan
        got = s._ops.enter(what, failure, digest(call), mine)  # column 0: the call's digest, then *mine*
        plan_missing = what == "read" and not got[0, 2]
        if (got[:, 0] != got[0, 0]).any() or plan_missing:  # rare: the arguments travel pickled
            payloads = agree(s.comm, None, (call, plan, stats, tuple(names)))
            _check_same_call(payloads, what)
            return payloads[0][1], [p[2] for p in payloads]
        key = tuple(int(x) for x in got[:, 1])
        statsets = self._stats_seen.get(key)
        if statsets is None:  # new layouts: every rank misses alike (the key is what all received)
            statsets = s.comm.allgather(stats)
            if len(self._stats_seen) >= _STATS_KEPT:
                self._stats_seen.clear()
            self._stats_seen[key] = statsets
        if what == "read":
            plan = got[0, 3:3 + int(got[0, 2]) - 1]
        return plan, statsets

    def _closing(self, failure: Any, seconds: Sequence[float], shares: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """The exchange that closes an access: every rank's failure, the slowest seconds, the checksums.

        One ``Allreduce`` (:func:`sdm._collective.reduce_exchange`) of fixed size, whatever
        the number of ranks: the largest of each of *seconds* and the sum modulo ``2**64``
        of each of *shares*, which is :func:`sdm.integrity.combine` of every rank's shares
        (the checksum is a sum of per-word terms, so the order of the ranks does not
        matter).

        Returns
        -------
        (numpy.ndarray, numpy.ndarray)
            The slowest rank's seconds (float64) and the combined checksums (uint64), the
            same on every rank.

        Raises
        ------
        SDMError
            The failure of the lowest failed rank, on every rank.
        """
        top, sums = reduce_exchange(self.session.comm, failure, [pack_float(max(t, 0.0)) for t in seconds], shares)
        return unpack_float(top), sums

    def _combined(self, names: Sequence[str], files: Sequence[str | None], method: str | None) -> list[list[int]]:
        """The datasets of a dump (or of a ``read_step``) moved by one combined call per file: their positions,
        per file, two or more each (the same on every rank: from agreed values only).

        *files* gives each dataset's file, or None for one that cannot be combined (subfiled,
        on the archive tier).  Only at levels 2 and 3 (a level-1 file holds one dataset), and
        when the call names a method that moves bytes through a file view (``collective``,
        ``datatype``) or leaves the method to SDM (``auto``: for datasets of at most
        :data:`_COMBINE_AUTO_BYTES`, whose access costs more in fixed per-call work than in
        bytes; a larger one is planned on its own).
        """
        chosen = method or self.session.method
        if not appends(self.level) or (chosen != "auto" and chosen not in COMBINABLE):
            return []
        by_file: dict[str, list[int]] = {}
        for i, (name, path) in enumerate(zip(names, files)):
            if path is not None and (chosen != "auto" or self._nbytes[name] <= _COMBINE_AUTO_BYTES):
                by_file.setdefault(path, []).append(i)
        return [members for members in by_file.values() if len(members) > 1]

    def _move_combined(self, path: Path, members: Sequence[tuple[int, int, ResolvedView, np.ndarray]], method: str,
                       writing: bool) -> float:
        """Write (or read) the rows *members*, ``(offset, nbytes, view, local array)`` each, of the file *path*
        with one file view and one call of *method* (:mod:`sdm.io.combined`); the seconds it took.

        Raises
        ------
        StorageError
            The MPI-IO call failed (raised once the file is released).
        """
        s = self.session
        made: list[MPI.Datatype] = []
        error: SDMError | None = None
        t0 = time.perf_counter()
        fh = s.files.open(path, cache=True)
        try:
            parts = []
            for offset, nbytes, view, arr in members:
                mem, extra = view.memory(arr)
                made.extend(extra)
                parts.append(Part(offset, nbytes, view.ftype, mem, view.layout))
            types = combined_types(parts)
            try:
                move_combined(fh, method, types, writing=writing, hints=s.hints)
            except MPI.Exception as exc:
                error = storage_error(exc, f"MPI-IO {'write' if writing else 'read'} of {path} failed", path)
            finally:
                types.free()
        finally:
            for t in made:
                if t != MPI.DATATYPE_NULL:
                    t.Free()
            s.files.release(path, fh)
        if error is not None:
            raise error
        return time.perf_counter() - t0

    def _relative(self, name: str, step: int, version: int) -> str:
        """The data file (relative to the root) of one version of a step of *name* (every rank alike)."""
        spf = self.record.steps_per_file
        # what the path depends on (sdm.storage.organization.relative_path): level 3 names no dataset, and
        # levels 2 and 3 no step but the file's range of steps
        key = ((name, step, version) if self.level == 1 else
               (name if self.level == 2 else "", step // spf if spf else 0, 0))
        rel = self._relatives.get(key)
        if rel is None:
            if len(self._relatives) >= 4096:
                self._relatives.clear()
            rel = self._relatives[key] = str(relative_path(self.session.run_dir, self.level, self.name, name, step,
                                                           version, self.record.steps_per_file))
        return rel

    def _absolute(self, rel: str, record: str = "") -> Path:
        """Absolute path of a catalog-relative path, checked once to lie inside the run's directory
        (:func:`sdm.storage.confine.confine`; *record* names the row for the message)."""
        path = self._paths.get(rel)
        if path is None:
            s = self.session
            path = self._paths[rel] = confine(s.root, s.run_dir, rel, record or row_record(s.run_id, self.name))
        return path

    def _access(self, name: str, writing: bool, statsets: list[Any], index: int = 0, kind: str | None = None) -> Access:
        """The planner's view of access *index* of a call, built from every rank's layout statistics
        (*kind*: the pieces' kind, default the data view's)."""
        rec = self.dataset(name)
        itemsize = from_text(rec.dtype).itemsize
        access = Access.from_stats(
            [p[index] for p in statsets],
            writing=writing,
            level=self.level,
            itemsize=itemsize,
            total_bytes=self._nbytes[name],
            hints=self.session.planner.hints,
            order=rec.order,
            row_bytes=row_bytes(rec.shape, itemsize, rec.order),
        )
        return replace(access, kind=kind or self._view(name).piece.kind)

    def _transfer(
        self, backend: "Backend", path: Any, offset: int, view: ResolvedView, arr: np.ndarray, method: Any, writing: bool,
        sync: bool = False, *, stats: Sequence[Any] = (), copy: str = "", size: int = 0,
        digests: tuple[list[str], int] | None = None,
    ) -> tuple[float, Any]:
        """Move this rank's bytes through *backend* (the storage seam); returns ``(seconds, sync failure)``
        (open excluded, sync included).

        *path* is the backend's key (an absolute path for ``mpiio``, the object's key for
        ``objectstore``); *stats* every rank's layout statistics of this access; for an
        object, *copy* is its archive copy's checksum (read) or *size* its size (write),
        and ``digests[0][digests[1]]`` receives, on rank 0, the digest of the object
        written. The collective calls (the method's I/O, ``MPI_File_sync`` when every
        rank syncs, the close of a level-1 file) are made on every rank even when an
        earlier one failed here, so a failure on one rank never leaves the others
        waiting; the I/O error is raised afterwards, the sync's failure returned for the
        caller's exchange (the sync itself is agreed on there).
        """
        s = self.session
        if not backend.serves(method.backend):
            raise InternalError(f"method {method.name!r} works through {method.backend}, the bytes are in {backend.name}")
        fh = backend.open(path, cache=appends(self.level))
        fh.expect(copy=copy, size=size)
        error: SDMError | None = None
        synced = None
        t0 = time.perf_counter()
        try:
            mem, made = view.memory(arr)
            with freeing(made):
                try:
                    t = Transfer(fh, offset, view.etype, view.ftype, mem, view.piece, arr, view.order, s.comm, s.hints,
                                 view.layout, stats, s.root / s.run_dir / _remote.CACHE_DIR)
                    (method.write if writing else method.read)(t)
                    if digests is not None:
                        digests[0][digests[1]] = fh.digest
                except MPI.Exception as exc:
                    error = storage_error(exc, f"MPI-IO {'write' if writing else 'read'} of {path} failed", path,
                                          needed=size - offset if writing else None)
                except SDMError as exc:  # the method's own error: the sync below is still made on every rank
                    error = exc
                if writing and sync:
                    synced = backend.sync_unagreed(path, fh)
        finally:
            backend.release(path, fh)
        if error is not None:
            raise error
        return time.perf_counter() - t0, synced

    def _locate(self, name: str, step: int, w: Any, held: dict[str, list[Any]] | None = None) -> tuple[str, int]:
        """Rank 0: where the bytes of write row *w* are: ``(its file, offset)`` on the fast tier, else the
        :func:`sdm.io.remote.plan_path` of its verified archive copy and the offset there.

        *held*: the run's copies of the files looked at (``sdm.catalog.tiers.copies``), when the caller
        fetched them for many rows at once; else they are looked up for this file.

        Raises
        ------
        StorageError
            The file is missing with no archive copy, or shorter than the row.
        """
        return self._locate_span(name, step, w.path, w.offset, w.nbytes, held)

    def _locate_span(self, name: str, step: int, rel: str, offset: int, nbytes: int,
                     held: dict[str, list[Any]] | None = None) -> tuple[str, int]:
        """Rank 0: :meth:`_locate` for *nbytes* at *offset* of the file *rel* (a row, or an extent of one)."""
        s = self.session
        row = row_record(s.run_id, self.name, name, step)
        full = self._absolute(rel, row)
        try:
            size = os.path.getsize(full)
        except OSError as exc:
            if held is None:
                from ..catalog.tiers import copies

                held = copies(s.open_catalog(), s.run_id, [rel])
            copy = _remote.archived(held.get(rel, []), offset + nbytes)
            if copy is not None:  # purged from the fast tier: read from the archive copy
                confine_location(copy.location, s.run_dir, rel, row)
                where, at = _remote.object_place(copy.location)  # a superfile member: its offset in the object
                return _remote.plan_path(where, copy.checksum), at + offset
            raise StorageError(f"data file {full} of run {s.run_id} is missing", errno=exc.errno) from None
        if size < offset + nbytes:
            raise StorageError(
                f"data file {full} holds {size} bytes but step {step} of {name!r} needs bytes "
                f"{offset}..{offset + nbytes}; the file was truncated"
            )
        return rel, offset

    def _read_bytes(self, rel: str, offset: int, nbytes: int) -> bytes:
        """Rank 0: *nbytes* at *offset* of the run's file *rel* on the fast tier."""
        (data,) = self.session.files.read(self._absolute(rel), [(offset, nbytes)])
        return data

    def _backend_of(self, path: str) -> tuple["Backend", Any, str]:
        """The backend holding the bytes of a read plan's *path*, their key there, and the archive copy's
        checksum (empty on the fast tier)."""
        if is_object(path):
            location, copy = path.partition("#")[::2]
            store, key = object_at(location)
            return store, key, copy
        return self.session.files, self._absolute(path), ""

    def _free(self) -> None:
        self._drop_views(list(self._views))

    def _partial_checksum(self, name: str, view: ResolvedView, arr: np.ndarray, algorithm: str) -> int:
        """This rank's share of the checksum (*algorithm*) of the elements it owns."""
        rec = self.dataset(name)
        return integrity.piece_share(view.piece, arr, rec.order, algorithm)

    def _reserve_chunks(self, wanted: Sequence[tuple[str, int]]) -> list[int]:
        """Rank 0: one catalog transaction reserving *wanted* ``(path, nbytes)`` chunks (:class:`SpacePool`)."""
        s = self.session
        got = s.record(SpaceReserved(s.run_id, tuple((rel, self.level, nbytes, False) for rel, nbytes in wanted)))
        return [int(x or 0) for x in got]  # never None: no request here owns a whole file

    def _plan_reads(self, names: Sequence[str], step: int) -> list[tuple[Any, ...]]:
        """Rank 0: :meth:`_plan_read` of *step* of several datasets, their rows looked up together."""
        found = self.session.open_catalog().lookup_writes([self.dataset(n).id for n in names], step)
        return [self._plan_read(n, step, found.get(self.dataset(n).id)) for n in names]

    def _plan_read(self, name: str, step: int, w: Any = None) -> tuple[Any, ...]:
        """Rank 0: where the bytes of one step are and their checksum: ``(path, offset, checksum, algorithm)``,
        and for a subfiled step its extents' :func:`sdm.engine.subfiled.read_plan` (*w*: its row, when the
        caller looked it up)."""
        s = self.session
        rec = self.dataset(name)
        w = w or s.open_catalog().lookup_write(rec.id, step)
        if w is None:
            steps = sorted(s.open_catalog().dataset_writes(rec.id))
            raise StepNotFoundError(
                f"dataset {name!r} (group {self.name!r}, run {s.run_id}) was never written at step {step}; "
                f"written steps: {steps}"
            )
        if w.codec is not None:  # compressed: its chunks (sdm.engine.compressed)
            return w.path, w.offset, w.checksum, w.checksum_algo, _compressed.read_plan(self, name, step, w)
        if w.extents:
            return w.path, w.offset, w.checksum, w.checksum_algo, _subfiled.read_plan(self, name, step, w)
        path, offset = self._locate(name, step, w)
        return path, offset, w.checksum, w.checksum_algo

    def _check_write_method(self, method: str | None) -> None:
        """Refuse a write method the group's tier cannot write with (the name validated too).

        Raises
        ------
        InvalidArgumentError
        """
        if not _remote.is_method(method):
            choose_method(method or self.session.method)  # validates the name
        elif self.record.archive is None:
            raise InvalidArgumentError(f"method {method!r} writes to the archive tier, and group {self.name!r} writes "
                                       f"to the fast tier; choose a fast-tier method or 'auto'")
        elif method != _ARCHIVE_WRITE.method.name:
            raise InvalidArgumentError(f"method {method!r} cannot write to the archive tier: an object cannot be updated "
                                       f"in part, so group {self.name!r} writes whole objects with "
                                       f"{_ARCHIVE_WRITE.method.name!r} (or 'auto')")

    def _commit_dump(self, names: Sequence[str], step: int, places: Sequence[tuple[str, int, int, int | None]],
                     checksums: Sequence[str], decisions: Sequence[Any], seconds: Sequence[float], overwrite: bool,
                     sizes: Sequence[int], digests: Sequence[str] | None = None,
                     subfiled: tuple[list[Any], list[list[int]]] | None = None,
                     compressed: tuple[Sequence[str | None], Sequence[Any]] | None = None) -> None:
        """Every rank, once the bytes of a dump are written and agreed: rank 0 commits its rows (or queues them).

        *digests*: the objects' digests of an archive-tier group (rank 0); each row then
        carries its object's verified archive copy, committed with it. *subfiled*: each
        dataset's :class:`sdm.engine.subfiled.Layout` (or None) and its extents' checksums.
        *compressed*: each dataset's codec text (or None) and every rank's chunk metadata
        (:func:`sdm.engine.compressed.row_fields`).
        """
        s = self.session
        rows = self._rows(names, step, places, checksums, decisions, seconds, overwrite, sizes) if s.rank == 0 else []
        layouts = subfiled[0] if subfiled is not None else [None] * len(names)
        for row, lay, sums in zip(rows, layouts, subfiled[1] if subfiled is not None else [[]] * len(names)):
            if lay is not None:
                row.update(_subfiled.row_fields(row["path"], lay, sums, s.checksum))
        if compressed is not None:
            for i, (row, codec) in enumerate(zip(rows, compressed[0])):
                if codec:
                    row.update(_compressed.row_fields(codec, row["path"], row["offset"], compressed[1], i, s.checksum))
        if digests is not None and s.rank == 0:
            store, now = self._store(), datetime.now(timezone.utc)
            for row, sha, nbytes in zip(rows, digests, sizes):
                row["copy"] = {"tier": "archive", "location": store.location(row["path"]),
                               "size": int(row["offset"]) + int(nbytes), "checksum": sha, "verified_at": now}
        if s.async_commit:
            if s.rank == 0:  # in the background; a failure surfaces at the next call or at close
                s._commit_later(rows)
        else:
            root_vector(s.comm, 0, self._commit, rows)
        for name in names:
            self._steps[name].add(step)
        if appends(self.level):  # described by a trailer when the session closes (sdm.storage.trailer)
            s.described.update(p[0] for p, lay in zip(places, layouts) if lay is None)

    def _rows(
        self,
        names: Sequence[str],
        step: int,
        places: Sequence[tuple[str, int, int, int | None]],
        checksums: Sequence[str],
        decisions: Sequence[Any],
        seconds: Sequence[float],
        overwrite: bool,
        sizes: Sequence[int],
    ) -> list[dict[str, Any]]:
        """Rank 0: the catalog rows of one dump (*sizes*: the bytes of each; a nonblocking dump's reason says so)."""
        s = self.session
        note = s._ops.background.note() if s._ops.background is not None else ""
        rows = []
        for name, (rel, offset, version, old), checksum, decision, secs, nbytes in zip(
                names, places, checksums, decisions, seconds, sizes):
            rec = self.dataset(name)
            rows.append(dict(
                dataset_id=rec.id, step=step, path=rel, level=self.level, offset=offset, nbytes=nbytes,
                checksum=checksum, checksum_algo=integrity.ALGORITHM if checksum else "none",
                method=decision.method.name, reason=decision.reason + note, seconds=secs, nprocs=s.size,
                overwrite=overwrite,
                version=version, replaces=old,
            ))
        return rows

    def _commit(self, rows: list[dict[str, Any]]) -> list[int]:
        """Rank 0: record the writes of one dump in one catalog transaction."""
        self.session.record(WritesRecorded.of(self.session.run_id, rows))
        return []
