"""Groups of datasets (the paper's datalists) and the collective write/read path.

A write, as the data flows (DESIGN.md): local checks on every rank and the plan on
rank 0 (does the step exist?) -> **exchange 1**, one fixed-size ``Allgather`` (a hash of
the call's arguments, a failure flag, a hash of the rank's layout statistics) that
either raises the same error everywhere or lets every rank go on -> **exchange 2**, a
small ``Bcast`` of the space rank 0 reserved through the catalog (it may reserve only
once every rank has accepted the call, and every rank needs the offsets before it
writes: the one exchange that cannot be folded into another) -> MPI-IO through the file
view (kept on the open file: not set again while unchanged) with each rank's checksum
share computed beside it -> sync -> **exchange 3**, one fixed-size ``Allreduce`` of
errors, timings and checksum shares -> rank 0 commits the dump's rows in one catalog
transaction (the other ranks wait for its outcome in a one-word ``Bcast``, or, with
``async_commit``, not at all).  A read is exchange 1 carrying rank 0's plan (file,
offset, checksum), the I/O, and exchange 3.  Any failure, a call that differs between
ranks, or layout statistics not seen before make every rank take the generic pickled
exchange (:func:`sdm._collective.agree`) that carries the message, so every rank makes
the same sequence of calls.  A failure before the commit leaves unreferenced bytes,
never a row that points at missing data.
"""

from __future__ import annotations

import os
import time
from datetime import datetime, timezone
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np
from mpi4py import MPI

from . import _validate as check
from . import _ranked_io, _subfiled, convert, integrity
from ._collective import (Failure, agree, capture, digest, exchange, pack_float, reduce_exchange, root_call, root_vector,
                          unpack_float)
from .catalog import DatasetRecord, DatasetSpec, GroupRecord
from .catalog.changes import AttributesSet, DistributionSet, SpaceReserved, WritesRecorded
from .catalog.values import merge_attributes
from .dtypes import check_dtype, dtype_text, from_text
from .engine.operations import EXTRA, collective
from .engine.space import SpacePool
from .errors import (
    CollectiveMismatchError,
    DatasetNotFoundError,
    DistributionError,
    IntegrityError,
    InternalError,
    InvalidArgumentError,
    InvalidNameError,
    SDMError,
    LocalArrayError,
    StepExistsError,
    StepNotFoundError,
    StorageError,
)
from .io import Transfer, get_method
from .io.combined import COMBINABLE, Part, combined_types, move_combined
from .io import remote as _remote
from .layout import Block, Distribution, MapArray, Piece
from .layout.agreement import agree_view
from .layout.datatypes import freeing
from .layout.ranked import Ranked, is_ranked
from .layout.views import ResolvedView
from .planner import Access, Decision as _Decision, choose_method, row_bytes
from .storage import appends, check_name, copy_range, extend_file, relative_path
from .storage.confine import confine, confine_location, row_record
from .storage.backends import is_object, object_at
from .storage.durability import fsync_path, node_comm
from .suggest import closest
from .storage.failures import storage_error

if TYPE_CHECKING:
    from .lazy import DatasetArray
    from .session import Session

__all__ = ["Dataset", "Group"]

_RESERVE_TRIES = 64  # level-1 versions tried when earlier ones are taken (crash leftovers)
_PLAN_WIDTH = EXTRA - 2  # int64 words of rank 0's read plan in the opening exchange (a path of up to 512 bytes)
_STATS_KEPT = 256  # layout statistics kept per group (forgotten all at once, alike on every rank)
_MASK = (1 << 64) - 1
#: How an archive-tier group writes (:mod:`sdm.io.remote`): the one method that makes whole objects.
_ARCHIVE_WRITE = _Decision(get_method("remote-collective"), "archive tier: aggregators assemble the object and upload "
                           "its parts (an object cannot be updated in part)")
#: ``auto`` writes datasets of at most this many bytes that share a file in one combined call
_COMBINE_AUTO_BYTES = 4 << 20
_THREADED_SHARE = 1 << 22  # bytes of a piece from which its checksum share runs beside the I/O


class _ShareJob:
    """This rank's checksum share of one write, computed beside the I/O when the piece is large.

    The share reads the local array, as the I/O does; both only read it.  When the
    node has a core to spare for every rank (``threaded``), a large piece's share runs
    in a worker thread while MPI-IO moves the bytes and the file is synced (numpy and
    MPI-IO both release the GIL); otherwise, and for a small piece, it runs in
    :meth:`result`, after the I/O: with every core taken, a second thread per rank
    only competes with the MPI library's own polling.
    """

    _pool: Any = None

    def __init__(self, view: ResolvedView, arr: np.ndarray, order: str, threaded: bool) -> None:
        self.args = (view.piece, arr, order, integrity.ALGORITHM)
        self.future = None
        if threaded and view.nbytes >= _THREADED_SHARE:
            if _ShareJob._pool is None:
                from concurrent.futures import ThreadPoolExecutor

                _ShareJob._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sdm-checksum")
            self.future = _ShareJob._pool.submit(integrity.piece_share, *self.args)

    def result(self) -> int:
        """The share (waits for the worker)."""
        if self.future is not None:
            return int(self.future.result())
        return integrity.piece_share(*self.args)


@dataclass(frozen=True)
class Dataset:
    """A dataset in a group definition; unset properties come from the group.

    Parameters
    ----------
    name : str
    shape : sequence of int, optional
    dtype : numpy dtype-like, optional
    order : {"C", "F"}, optional
    dims : sequence of str, optional
        A name per dimension (``("z", "y", "x")``): what xarray and the exports call them.
    """

    name: str
    shape: Sequence[int] | None = None
    dtype: Any = None
    order: str | None = None
    dims: Sequence[str] | None = None

    @classmethod
    def of(cls, item: "str | Dataset") -> "Dataset":
        """Accept a plain name or a Dataset."""
        return item if isinstance(item, Dataset) else cls(item)

    def spec(self, *, dtype: Any, shape: Sequence[int] | None, order: str,
             dims: Sequence[str] | None = None) -> DatasetSpec:
        """Resolve against the group defaults and validate.

        Raises
        ------
        InvalidNameError
            Bad name, missing or invalid shape/dtype/order.
        """
        check_name(self.name, "dataset")
        shp = self.shape if self.shape is not None else shape
        dt = self.dtype if self.dtype is not None else dtype
        od = self.order if self.order is not None else order
        if shp is None or dt is None:
            raise InvalidArgumentError(f"dataset {self.name!r} needs a shape and a dtype (from the group or its own)")
        shp = check.shape(shp, f"dataset {self.name!r}: shape")
        np_dtype = check_dtype(dt, f"dataset {self.name!r}")
        if not isinstance(od, str) or od not in ("C", "F"):
            raise InvalidArgumentError(f"dataset {self.name!r}: order must be 'C' or 'F', got {od!r}")
        if int(np.prod(shp, dtype=np.int64)) * np_dtype.itemsize > check.MAX_BYTES:
            raise InvalidArgumentError(f"dataset {self.name!r}: shape {shp} of {np_dtype} is larger than SDM stores "
                                       f"({check.MAX_BYTES} bytes)")
        names = self.dims if self.dims is not None else dims
        if names is not None:
            names = check_dims(names, len(shp), f"dataset {self.name!r}")
        return DatasetSpec(self.name, dtype_text(np_dtype), shp, od, names)


def check_dims(dims: Any, ndim: int, what: str) -> tuple[str, ...]:
    """Dimension names: one distinct identifier-like string per dimension, none called ``step``.

    Raises
    ------
    InvalidArgumentError
    """
    if isinstance(dims, str) or not isinstance(dims, Sequence):
        raise InvalidArgumentError(f"{what}: dims must be a sequence of names, one per dimension, got {dims!r}")
    names = tuple(dims)
    if len(names) != ndim:
        raise InvalidArgumentError(f"{what}: dims {names} has {len(names)} names; the shape has {ndim} dimensions")
    for n in names:
        if not isinstance(n, str) or not n or not n.replace("_", "a").isalnum() or n[0].isdigit():
            raise InvalidArgumentError(f"{what}: dimension name {n!r} must be letters, digits and '_', not "
                                       "starting with a digit")
    if len(set(names)) != len(names) or "step" in names:
        raise InvalidArgumentError(f"{what}: dims {names} must be distinct and not 'step' (the steps' dimension)")
    return names


class Group:
    """A group of datasets written and read together (collective methods).

    Obtained from :meth:`Session.make_group` or :meth:`Session.group`.
    """

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
        self._paths: dict[str, Path] = {}  # relative path -> checked absolute path
        self._relatives: dict[tuple[str, int, int], str] = {}  # (dataset, step, version) -> relative path
        self._pool = SpacePool(self._reserve_chunks)  # rank 0: file space reserved ahead (levels 2 and 3)
        self._epoch = 0  # data_view calls so far (part of the views' layout keys)
        self._threads: bool | None = None  # checksum shares beside the I/O (see _ShareJob)
        self._stats_seen: dict[tuple[int, ...], list] = {}  # every rank's layout statistics, by their hashes
        self._ranked: set[str] = {d.name for d in record.datasets if is_ranked(d.distribution)}  # sdm.Ranked datasets
        self._archive_store: Any = None  # the object store of an archive-tier group (see _store)
        self._placement: tuple[int, str] | None = None  # nodes and file system (sdm._subfiled, subfiled groups)

    # --------------------------------------------------------------- metadata
    @property
    def datasets(self) -> list[str]:
        """Dataset names in group order."""
        return list(self._datasets)

    def __getitem__(self, name: str) -> "DatasetArray":
        """Dataset *name* as a lazy array over ``(steps, *shape)`` that reads only what is indexed
        (:class:`sdm.lazy.DatasetArray`): ``g["T"][20, 10:15, :]``, ``g["T"][:, 0, 0]``.

        Raises
        ------
        KeyError
            No such dataset (the message names the closest ones).
        """
        from .lazy import dataset_array

        return dataset_array(self, name)

    def __contains__(self, name: object) -> bool:
        return name in self._datasets

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
                f"group {self.name!r} has no dataset {name!r}; its datasets are {self.datasets}"
                f"{closest(name, self.datasets)}"
            ) from None

    def steps(self, name: str) -> list[int]:
        """Time steps at which *name* has been written, ascending."""
        self.dataset(name)
        return sorted(self._steps[name])

    @property
    def kind(self) -> str:
        """``"state"`` (written every step) or ``"topology"`` (written once or rarely); see :mod:`sdm.segments`."""
        return self.record.kind

    @property
    def steps_per_file(self) -> int | None:
        """Levels 2 and 3: steps per data file (None: one file)."""
        return self.record.steps_per_file

    @property
    def tier(self) -> str:
        """Where the group's writes go: ``"fast"`` (files) or ``"archive"`` (objects, see :attr:`archive`)."""
        return "archive" if self.record.archive else "fast"

    @property
    def subfiles(self) -> int | str | None:
        """K subfiles per step, ``"auto"`` (chosen per write), or None: one file (see :mod:`sdm.storage.subfiles`)."""
        k = self.record.subfiles
        return "auto" if k == 0 else k

    @property
    def archive(self) -> str | None:
        """``s3://BUCKET/PREFIX`` the group writes its objects to (None: the fast tier)."""
        return self.record.archive

    def _store(self) -> Any:
        """The object store of an archive-tier group (made once)."""
        if self._archive_store is None:
            from .storage.backends.objectstore import ObjectStore

            self._archive_store = ObjectStore(str(self.record.archive))
        return self._archive_store

    def step_at(self, name: str, step: int) -> int | None:
        """The last step of *name* written at or before *step* (None: none), e.g. the topology in effect
        at a state step."""
        _check_step(step)
        earlier = [s for s in self.steps(name) if s <= step]
        return earlier[-1] if earlier else None

    def _truncated(self, after_step: int) -> None:
        """Every rank, after ``Session.truncate`` committed: forget the erased steps."""
        self.record = replace(self.record, truncated_after=after_step)
        self._pool.clear()  # the truncation lowered the files' marks: the space reserved ahead is not ours
        for steps in self._steps.values():
            steps.difference_update([s for s in steps if s > after_step])

    @collective("group_set_attributes")
    def set_attributes(
        self, attributes: dict[str, Any] | None = None, *, datasets: Sequence[str] | None = None, **kw: Any
    ) -> None:
        """Set typed attributes (collective).

        Without ``datasets``: on the group, propagated to all its datasets (the paper's
        ``SDM_set_attributes``). With ``datasets``: on those datasets only, overriding
        the group's and the run's values for them.

        Raises
        ------
        ReadOnlyError, DatasetNotFoundError, InvalidArgumentError
        """
        self.session._check_writable("set attributes")

        def resolve() -> tuple[dict[str, Any], list[int]]:
            merged = merge_attributes(attributes, kw)
            names = self.datasets if datasets is None else check.names(datasets, "datasets")
            return merged, [self.dataset(n).id for n in names]

        resolved, failure = capture(resolve, rank=self.session.rank)
        agree(self.session.comm, failure)  # a bad name on any rank: the same error on all
        merged, ids = resolved  # type: ignore[misc]
        root_call(
            self.session.comm,
            self.session.record,
            AttributesSet(self.session.run_id, merged, self.record.id, tuple(ids), datasets is None),
        )

    # ------------------------------------------------------------------ infos
    @collective("group_set_info")
    def set_info(self, name: str, array: Any, dataset: str | None = None, step: int | None = None) -> None:
        """Store an info on the group, or on its *dataset*, or on one *step* of it (collective; see :mod:`sdm.infos`)."""
        from .infos import set_info

        set_info(self.session, name, array, group=self, dataset=dataset, step=step)

    @collective("group_info")
    def info(self, name: str, dataset: str | None = None, step: int | None = None) -> np.ndarray:
        """The info *name* of the group, its *dataset* or one *step* of it, on every rank (collective)."""
        from .infos import get_info

        return get_info(self.session, name, group=self, dataset=dataset, step=step)

    @collective("group_infos")
    def infos(self, dataset: str | None = None, step: int | None = None) -> list[str]:
        """The names of the infos of the group, its *dataset* or one *step* of it (collective)."""
        from .infos import list_infos

        return list_infos(self.session, group=self, dataset=dataset, step=step)

    # ------------------------------------------------------------------ views
    @collective("data_view")
    def data_view(self, view: Distribution, datasets: Sequence[str] | None = None) -> None:
        """Set the data view (distribution) of datasets of the group (collective).

        The paper's ``SDM_data_view``: how the local arrays of the ranks map onto the
        global array.  Explicit :class:`~sdm.Subarray` views are checked across all
        ranks: a gap or an overlap raises :class:`DistributionError` everywhere.
        In a writing session the view is recorded as the datasets' access pattern.

        Every rank must give the same kind of view with the same parameters (grid, block
        sizes, map options; Subarray boxes, MapArray rows and ghost layers are each
        rank's own) for the same datasets: this is checked with one exchange before
        anything else, and a difference raises :class:`CollectiveMismatchError` with
        the same message on every rank, naming the ranks and their views.

        Raises
        ------
        CollectiveMismatchError, DistributionError, DatasetNotFoundError
        """
        s = self.session
        names, failure = capture(lambda: list(self._datasets) if datasets is None else check.names(datasets, "datasets"),
                                 rank=s.rank)
        # first, before any collective that depends on the kind: the same view everywhere
        agree_view(s.comm, view, f"data_view of group {self.name!r}", names)
        agree(s.comm, failure)
        assert names is not None
        if isinstance(view, Ranked):  # the same kind on every rank (agreed above)
            return _ranked_io.set_view(self, names)

        def resolve() -> tuple[list[str], dict[str, Piece]]:
            if not isinstance(view, Distribution):
                raise InvalidArgumentError(
                    f"a data view must be a Distribution (Block, Cyclic, MapArray, ...), got {type(view).__name__}"
                )
            names = list(self._datasets) if datasets is None else check.names(datasets, "datasets")
            for n in names:
                rec = self.dataset(n)
                if n in self._ranked:
                    raise _not_global(n)
                if isinstance(view, MapArray) and rec.order == "F" and len(rec.shape) > 1:
                    raise DistributionError(
                        f"dataset {n!r} is stored in Fortran order; map-array views need C order "
                        "(rows with their components contiguous)"
                    )
            return names, {n: view.piece(self.dataset(n).shape, s.size, s.rank) for n in names}

        resolved, failure = capture(resolve, rank=s.rank)
        listed = agree(s.comm, failure, resolved[0] if resolved else None)
        if any(n != listed[0] for n in listed):  # the walks below are collective
            raise CollectiveMismatchError(
                f"ranks set data views of different datasets: {dict(enumerate(listed))}; every rank must name the same ones"
            )
        names, pieces = resolved  # type: ignore[misc]
        self._epoch += 1  # every rank is here: the views' layout keys change alike
        checked: set[tuple[int, ...]] = set()
        for n in names:  # collective: every rank walks the same names
            shape = self.dataset(n).shape
            if shape not in checked:
                checked.add(shape)
                _, failure = capture(view.check, shape, pieces[n], s.comm, rank=s.rank)
                agree(s.comm, failure)
        for n in names:
            old = self._views.pop(n, None)
            if old is not None:
                old.free()
            rec = self.dataset(n)
            self._views[n] = ResolvedView(view, pieces[n], from_text(rec.dtype), rec.order,
                                          layout=("view", self.record.id, self._epoch, rec.shape, rec.dtype, rec.order))
        if s.mode != "r":
            ids = [self.dataset(n).id for n in names]
            root_call(s.comm, s.record, DistributionSet(tuple(ids), view.to_json()))

    def local_shape(self, name: str) -> tuple[int, ...]:
        """Shape of this rank's local array for *name* (ghost layers included)."""
        return self._view(name).piece.memory_shape

    def piece(self, name: str) -> Piece:
        """This rank's piece of *name* under the current view."""
        return self._view(name).piece

    def _is_ranked(self, name: object) -> bool:
        """Whether *name* is a ranked dataset (:class:`sdm.layout.ranked.Ranked`)."""
        try:
            return name in self._ranked
        except TypeError:  # an unhashable name: refused later as an unknown dataset
            return False

    @collective("ranked_counts")
    def ranked_counts(self, name: str, step: int) -> "_ranked_io.RankedCounts":
        """The header of one step of a ranked dataset, without its rows (collective).

        Returns
        -------
        sdm._ranked_io.RankedCounts
            Per-rank row counts, their total and maximum, the writer's number of ranks.

        Raises
        ------
        DatasetNotFoundError, StepNotFoundError, InvalidArgumentError (not ranked), IntegrityError, StorageError
        """
        return _ranked_io.counts(self, name, step)

    def _view(self, name: str) -> ResolvedView:
        v = self._views.get(name)
        if v is None:
            rec = self.dataset(name)
            if name in self._ranked:
                raise _not_global(name)
            s = self.session
            piece = Block().piece(rec.shape, s.size, s.rank)  # default view, same on all ranks
            v = self._views[name] = ResolvedView(Block(), piece, from_text(rec.dtype), rec.order,
                                                 layout=("default", s.size, rec.shape, rec.dtype, rec.order))
        return v

    # ------------------------------------------------------------------ write
    @collective("write", opens=False)  # write_step's first exchange opens it
    def write(self, name: str, step: int, array: Any, *, overwrite: bool = False, method: str | None = None,
              casting: str | None = None) -> None:
        """Write this rank's piece of dataset *name* at time *step* (collective).

        Parameters
        ----------
        name : str
            Dataset of this group.
        step : int
            Time step (>= 0).
        array : numpy.ndarray
            The local array, ghost layers included, of the shape :meth:`local_shape`
            gives, of the dataset's dtype or of one SDM converts to it (any numeric
            dtype to a numeric one, byte order included; see :mod:`sdm.convert`). The
            conversion is made in the one copy of the array the write then moves; the
            checksum is the stored bytes'.
        overwrite : bool
            Replace a step written before (otherwise :class:`StepExistsError`).
        method : str, optional
            I/O method for this call (default: the session's).
        casting : {None, "no", "equiv", "safe", "same_kind", "unsafe"}
            None (default): a conversion numpy does not call safe checks the values
            written and refuses them all if one does not fit (overflow, NaN, infinity
            or a fraction to an integer, ...); numpy's names allow what
            ``numpy.can_cast`` allows, unchecked (``"unsafe"``: as ``astype``).

        Raises
        ------
        ReadOnlyError, DatasetNotFoundError, LocalArrayError, ConversionError,
        StepExistsError, CollectiveMismatchError, StorageError, CatalogError
        """
        try:
            arrays = {name: array}
        except TypeError:  # an unhashable name: refused (on every rank) as an unknown dataset
            arrays = {repr(name): array}
        self.write_step(step, arrays, overwrite=overwrite, method=method, casting=casting)

    @collective("write", opens=False)  # exchange 1 (_agree_call) opens it
    def write_step(
        self, step: int, arrays: Mapping[str, Any], *, overwrite: bool = False, method: str | None = None,
        casting: str | None = None,
    ) -> None:
        """Write several datasets of one time step as one dump (collective).

        Like ADIOS2's ``BeginStep``/``EndStep`` or PnetCDF's ``iput`` + ``wait_all``:
        one exchange checks the arguments of every rank, one hands out every file and
        offset, the data of each dataset is moved, then one sync per file, one
        exchange of errors, timings and checksums, and one catalog transaction that
        records all the datasets or none (in the background with the session's
        ``async_commit``). Every rank passes the same names in the same order.

        Parameters
        ----------
        step : int
        arrays : mapping of str to numpy.ndarray
            Local arrays by dataset name (see :meth:`write`).
        overwrite, method, casting
            As for :meth:`write` (a value that does not fit in any array refuses the whole dump).

        Raises
        ------
        As for :meth:`write`.
        """
        s = self.session
        s._check_writable("write")
        names = list(arrays) if isinstance(arrays, Mapping) else []
        if any(self._is_ranked(n) for n in names):  # the same on every rank that passes the same names
            s._ops.enter("write")
            return _ranked_io.write(self, step, arrays, overwrite=overwrite, method=method, casting=casting)

        def local() -> list[tuple[ResolvedView, np.ndarray]]:
            _check_step(step)
            if not isinstance(arrays, Mapping):
                raise InvalidArgumentError(
                    f"write_step needs a dict of dataset name to local array, got {type(arrays).__name__}"
                )
            if not names or len(set(names)) != len(names):
                raise InvalidNameError(f"write_step needs distinct dataset names, got {names}")
            check.flag(overwrite, "overwrite")
            check.text(method, "method", optional=True)
            self._check_write_method(method)
            convert.check_casting(casting)
            return [(self._view(n), _check_array(arrays[n], self._view(n), n, s.rank, for_read=False, casting=casting)[0])
                    for n in names]

        prepared, failure = capture(local, rank=s.rank)
        plan = None
        if s.rank == 0:
            failure = s._settle() or failure  # an earlier dump's commit failure surfaces first
            if failure is None:
                plan, failure = capture(self._plan_write, names, int(step), overwrite, rank=0)
        stats = [v.stats(a) for v, a in prepared] if prepared else None
        call = (tuple(_key(n) for n in names), _key(step), _key(overwrite), _key(method))
        # exchange 1: every rank's call, failure and layout in one fixed-size allgather
        _, statsets = self._agree_call("write", call, failure, plan, stats)
        # exchange 2: rank 0 reserves fresh space, which it may only do once every rank
        # has accepted the call (exchange 1), and every rank needs the offsets before it
        # writes: one small Bcast of (offset, version, replaced version) per dataset
        layouts, notes = (_subfiled.layouts(self, names) if self.record.subfiles is not None
                          else ([None] * len(names), [""] * len(names)))
        places = self._reserve_everywhere(names, int(step), plan, [self._nbytes[n] for n in names], layouts)
        archived = self.record.archive is not None
        shared = self._shared_files(names, places, layouts, method) if not archived else {}
        # the planner's view of each access (not needed for a dataset written in a combined call)
        accesses = [None if i in shared else self._access(n, True, statsets, i) for i, n in enumerate(names)]
        chosen = s.planner.choose_many(method or s.method, [None if archived or lay is not None else a
                                                            for a, lay in zip(accesses, layouts)])
        decisions = [_ARCHIVE_WRITE if archived else _Decision(get_method("servers"), lay.reason) if lay is not None
                     else _combined_decision(len(shared[i]), method or s.method) if i in shared
                     else _noted(d, note)  # type: ignore[arg-type]
                     for i, (d, lay, note) in enumerate(zip(chosen.decisions, layouts, notes))]
        combined = {id(members): members for members in shared.values()}  # one call per file, alike everywhere
        n = len(names)
        extent_digests: list[list[int]] = [[0] * len(lay.extents) if lay is not None else [] for lay in layouts]
        threads = s.checksum and self._spare_cores()
        seconds = [0.0] * n
        partials = [0] * n
        failure = None
        deferred: dict[Path, None] = {}  # open files synced once, after every transfer
        subfiles: dict[Path, None] = {}  # the subfiles this rank wrote (each its own: synced here alone)
        digests: list[str] = [""] * n  # archive-tier objects: their digests (rank 0)
        for members in combined.values():  # every rank holds the same groups, in the same order
            both, f = capture(self._write_combined, members, prepared, places, [self._nbytes[x] for x in names],
                               decisions[members[0]].method.name, threads, rank=s.rank)
            if both is not None:
                for i, took, mine in zip(members, both[0], both[1]):
                    seconds[i], partials[i] = took, mine
            deferred[self._absolute(places[members[0]][0])] = None
            failure = failure or f
        done = {i for members in combined.values() for i in members}
        for i, ((view, arr), decision, (rel, offset, _, _), name) in enumerate(zip(prepared, decisions, places, names)):  # type: ignore[arg-type]
            if i in done:
                continue
            if chosen.settles(i):  # a trial ended earlier in this dump (agreed here): its winner writes the rest
                decision = decisions[i] = _noted(chosen.settle(i, seconds, s.comm), notes[i])
            backend: Any = self._store() if archived else s.files
            path: Any = rel if archived else self._absolute(rel)
            sync_now = s.sync and not appends(self.level)
            lay = layouts[i]
            if lay is not None:  # subfiled: each extent in its own subfile, checksummed by its owner (xxh3-64)
                moved, f = capture(_subfiled.write, self, view, arr, rel, lay, subfiles, [p[i] for p in statsets],
                                   rank=s.rank)
                if moved is not None:
                    seconds[i], extent_digests[i] = moved
                failure = failure or f
                continue
            share = _ShareJob(view, arr, self.dataset(name).order, threads) if s.checksum and failure is None else None
            if archived and method is not None and _remote.is_method(method):
                decision = decisions[i] = _Decision(get_method(method), f"method {method!r} asked for")
            out, f = capture(self._transfer, backend, path, offset, view, arr, decision.method, True, sync_now,
                             rank=s.rank, stats=[p[i] for p in statsets], size=offset + self._nbytes[name],
                             digests=(digests, i))
            if out is not None:
                seconds[i], sync_failure = out
                f = f or sync_failure
            if appends(self.level):
                deferred[path] = None
            if share is not None:
                value, f2 = capture(share.result, rank=s.rank)
                partials[i] = value or 0
                f = f or f2
            failure = failure or f
        if s.sync and (deferred or subfiles):
            t0 = time.perf_counter()
            for path in deferred:  # every rank holds the same files, in the same order
                f = s.files.sync_unagreed(path)
                failure = failure or f
            for path in subfiles:  # this rank's own subfiles: no collective
                failure = failure or capture(fsync_path, path, rank=s.rank)[1]
            per = (time.perf_counter() - t0) / n
            seconds = [t + per for t in seconds]
        # exchange 3: errors (I/O, sync, checksum), the slowest rank's seconds and the sum of
        # the checksum shares, in one reduction; a rank is past it only when every node's sync
        # is done, so the commit below follows the sync
        try:
            slowest, sums = self._closing(failure, seconds, partials + [d for ds in extent_digests for d in ds])
        except SDMError:
            s.files.reset_views()  # a view may have been set on some ranks only
            raise
        checksums = [integrity.to_hex(int(x)) if s.checksum else "" for x in sums[:n]]
        at = n
        for i, lay in enumerate(layouts):  # every extent's digest: the sum of its owner's and zeros
            if lay is not None:
                extent_digests[i] = [int(x) for x in sums[at:at + len(lay.extents)]]
                at += len(lay.extents)
                checksums[i] = integrity.extents_checksum(extent_digests[i]) if s.checksum else ""
        if not archived:
            for i, (a, decision, secs, lay) in enumerate(zip(accesses, decisions, slowest, layouts)):  # alike everywhere
                if lay is None and a is not None:
                    s.planner.observe(a, decision.method.name, float(secs))
        self._commit_dump(names, int(step), places, checksums, decisions, [float(x) for x in slowest], overwrite,
                          [self._nbytes[n] for n in names], digests if archived else None,
                          subfiled=(layouts, extent_digests))

    def _shared_files(self, names: Sequence[str], places: Sequence[tuple[str, int, int, int | None]],
                      layouts: Sequence[Any],
                      method: str | None) -> dict[int, list[int]]:
        """The datasets of a dump that share a file with another one: ``{index: members of its file}``.

        Only at levels 2 and 3 (a level-1 file holds one dataset), for fast-tier datasets
        that are not subfiled, and when the call names a method that moves bytes through
        a file view (``collective``, ``datatype``) or leaves the method to SDM (``auto``:
        for datasets of at most :data:`_COMBINE_AUTO_BYTES`, whose access costs more in
        fixed per-call work than in bytes; a larger one is planned on its own): those are
        written by one combined call per file (:mod:`sdm.io.combined`).  The same on
        every rank (from agreed values only).
        """
        chosen = method or self.session.method
        if not appends(self.level) or (chosen != "auto" and chosen not in COMBINABLE):
            return {}
        limit = _COMBINE_AUTO_BYTES if chosen == "auto" else None
        files: dict[str, list[int]] = {}
        for i, (place, lay, name) in enumerate(zip(places, layouts, names)):
            if lay is None and (limit is None or self._nbytes[name] <= limit):
                files.setdefault(place[0], []).append(i)
        out: dict[int, list[int]] = {}
        for members in files.values():
            if len(members) > 1:
                out.update((i, members) for i in members)
        return out

    def _write_combined(self, members: Sequence[int], prepared: Sequence[tuple[ResolvedView, np.ndarray]],
                        places: Sequence[tuple[str, int, int, int | None]], sizes: Sequence[int], method: str,
                        threads: bool) -> tuple[list[float], list[int]]:
        """This rank's part of one combined write: the datasets *members* of one file in one view and one call.

        Returns each dataset's seconds (the call's, shared out by size) and checksum share.
        The collective calls are made on every rank even when building the types failed
        here (the failure is raised afterwards, for the closing exchange).
        """
        s = self.session
        path = self._absolute(places[members[0]][0])
        jobs = [_ShareJob(prepared[i][0], prepared[i][1], prepared[i][0].order, threads) if s.checksum else None
                for i in members]
        made: list[MPI.Datatype] = []
        error: SDMError | None = None
        t0 = time.perf_counter()
        fh = s.files.open(path, cache=True)
        try:
            parts = []
            for i in members:
                view, arr = prepared[i]
                mem, extra = view.memory(arr)
                made.extend(extra)
                parts.append(Part(places[i][1], sizes[i], view.ftype, mem, view.layout))
            types = combined_types(parts)
            try:
                move_combined(fh, method, types, writing=True, hints=s.hints, views=s.files.views(path))
            except MPI.Exception as exc:
                error = storage_error(exc, f"MPI-IO write of {path} failed", path)
            finally:
                types.free()
        finally:
            for t in made:
                if t != MPI.DATATYPE_NULL:
                    t.Free()
            s.files.release(path, fh)
        if error is not None:
            raise error
        secs = time.perf_counter() - t0
        total = sum(sizes[i] for i in members) or 1
        return ([secs * sizes[i] / total for i in members],
                [job.result() if job is not None else 0 for job in jobs])

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
                     subfiled: tuple[list, list[list[int]]] | None = None) -> None:
        """Every rank, once the bytes of a dump are written and agreed: rank 0 commits its rows (or queues them).

        *digests*: the objects' digests of an archive-tier group (rank 0); each row then
        carries its object's verified archive copy, committed with it. *subfiled*: each
        dataset's :class:`sdm._subfiled.Layout` (or None) and its extents' checksums.
        """
        s = self.session
        rows = self._rows(names, step, places, checksums, decisions, seconds, overwrite, sizes) if s.rank == 0 else []
        layouts = subfiled[0] if subfiled is not None else [None] * len(names)
        for row, lay, sums in zip(rows, layouts, subfiled[1] if subfiled is not None else [[]] * len(names)):
            if lay is not None:
                row.update(_subfiled.row_fields(row["path"], lay, sums, s.checksum))
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

    def _agree_call(self, what: str, call: tuple, failure: Any, plan: Any, stats: Any,
                    packed_plan: Sequence[int] | None = None) -> tuple[Any, list]:
        """The exchange that opens an access: the same call on every rank, no failure, every layout.

        The session's opening exchange of the operation (:mod:`sdm.engine.operations`:
        one ``Iallgather`` of fixed size, the operation's name and sequence number first)
        carrying a hash of the call's arguments, a hash of the rank's layout statistics
        (the planner's input) and, for a read, rank 0's plan packed into integers
        (*packed_plan*).  Layout statistics
        seen before come from a cache that is the same on every rank (keyed by what
        every rank received); new ones, a call that differs between ranks, or a plan that
        does not fit make every rank take the generic pickled exchange instead.

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
            payloads = agree(s.comm, None, (call, plan, stats))
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

    def _reserve_everywhere(self, names: Sequence[str], step: int, replaced: Any, sizes: Sequence[int],
                            layouts: Sequence[Any] | None = None) -> list[tuple[str, int, int, int | None]]:
        """Rank 0 reserves *sizes* bytes (:meth:`_reserve`); every rank gets ``(path, offset, version, replaced)``.

        A subfiled dataset's :class:`sdm._subfiled.Layout` in *layouts* gets the offset of
        each of its extents (its place is then the data file's path, which names the subfiles).
        """
        s = self.session
        n = len(names)
        layouts = list(layouts) if layouts is not None else [None] * n
        width = 3 * n + sum(len(lay.extents) for lay in layouts if lay is not None)

        def reserve() -> list[int]:
            places = self._reserve(names, step, replaced, sizes, layouts)
            return ([p[1] for p in places] + [p[2] for p in places] + [-1 if p[3] is None else p[3] for p in places]
                    + [o for lay in layouts if lay is not None for o in lay.offsets])

        got = root_vector(s.comm, width, reserve)
        out = []
        at = 3 * n
        for i, name in enumerate(names):
            version = int(got[n + i])
            rel = self._relative(name, step, version)
            old = int(got[2 * n + i])
            out.append((rel, int(got[i]), version, None if old < 0 else old))
            lay = layouts[i]
            if lay is not None:
                lay.offsets = [int(x) for x in got[at:at + len(lay.extents)]]
                at += len(lay.extents)
        return out

    def _partial_checksum(self, name: str, view: ResolvedView, arr: np.ndarray, algorithm: str) -> int:
        """This rank's share of the checksum (*algorithm*) of the elements it owns."""
        rec = self.dataset(name)
        return integrity.piece_share(view.piece, arr, rec.order, algorithm)

    def _relative(self, name: str, step: int, version: int) -> str:
        """The data file (relative to the root) of one version of a step of *name* (every rank alike)."""
        key = (name, step, version)
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

    def _plan_write(self, names: Sequence[str], step: int, overwrite: bool) -> list[int | None]:
        """Rank 0: the version each dataset's write replaces (None: a new step), or why it cannot be written."""
        s = self.session
        replaced: list[int | None] = []
        cut = self.record.truncated_after
        for name in names:
            rec = self.dataset(name)
            if cut is not None and step <= cut and step not in self._steps[name]:
                raise InvalidArgumentError(
                    f"step {step} of dataset {name!r} (group {self.name!r}, run {s.run_id}) comes before the group's "
                    f"truncation after step {cut}: new steps must be > {cut}"
                )
            # steps this session has not seen need no lookup: the commit still refuses duplicates
            known = step in self._steps[name] or s.mode == "a" or overwrite
            existing = s.open_catalog().lookup_write(rec.id, step) if known else None
            if existing is not None and not overwrite:
                raise StepExistsError(
                    f"step {step} of dataset {name!r} (group {self.name!r}, run {s.run_id}) was already written; "
                    "pass overwrite=True to replace it"
                )
            if (existing is not None and self.record.archive is not None and name not in self._ranked
                    and _has_gaps(self._view(name).dist)):
                raise InvalidArgumentError(
                    f"step {step} of dataset {name!r} cannot be overwritten on the archive tier with a map that leaves "
                    "rows unwritten (they would keep their earlier values in a file, but an object is written whole); "
                    "write every row, or overwrite on the fast tier")
            replaced.append(existing.version if existing is not None else None)
        return replaced

    def _reserve(self, names: Sequence[str], step: int, replaced: Sequence[int | None], sizes: Sequence[int],
                 layouts: Sequence[Any] | None = None) -> list[tuple[str, int, int, int | None]]:
        """Rank 0, once every rank agreed to the write: fresh space (*sizes* bytes) for each dataset.

        Returns ``(relative path, offset, version, version replaced)`` per dataset. Every
        version is written to fresh space reserved through the catalog (a new file at
        level 1, space past the file's high-water mark at levels 2 and 3): the bytes of
        a committed row are never modified, and two writers never share bytes.
        """
        s = self.session
        versions = [1 if old is None else old + 1 for old in replaced]
        places: list[tuple[str, int] | None] = [None] * len(names)
        for i, lay in enumerate(layouts or ()):
            if lay is not None:  # subfiled: its extents' space is reserved below, in the subfiles
                places[i] = (self._relative(names[i], step, versions[i]), 0)
        if appends(self.level) and self.record.archive is None:  # from the space reserved ahead
            todo = [i for i, p in enumerate(places) if p is None]
            rels = [self._relative(names[i], step, versions[i]) for i in todo]
            for i, rel, start in zip(todo, rels, self._pool.take([(rel, sizes[i]) for rel, i in zip(rels, todo)])):
                places[i] = (rel, start)
        for _ in range(_RESERVE_TRIES):
            todo = [i for i, p in enumerate(places) if p is None]
            if not todo:
                break
            rels = [self._relative(names[i], step, versions[i]) for i in todo]
            offsets = s.record(SpaceReserved(s.run_id, tuple(
                (rel, self.level, sizes[i], not appends(self.level)) for rel, i in zip(rels, todo)
            )))
            for i, rel, offset in zip(todo, rels, offsets):
                if offset is None:  # that version's file is taken (a crashed or concurrent write): next one
                    versions[i] += 1
                else:
                    places[i] = (rel, offset)
        if any(p is None for p in places):
            raise StorageError(f"could not reserve a new file for step {step} in {_RESERVE_TRIES} tries")
        reserved = [p for p in places if p is not None]
        subfiled = [i for i, lay in enumerate(layouts or ()) if lay is not None]
        if subfiled and layouts is not None:  # every extent's space, in one transaction
            _subfiled.reserve(self, [reserved[i][0] for i in subfiled], [layouts[i] for i in subfiled])
        out = []
        ends: dict[str, int] = {}  # each file's end after this dump: extended once
        for name, (rel, offset), version, old, nbytes, lay in zip(names, reserved, versions, replaced, sizes,
                                                                  layouts or [None] * len(names)):
            if self.record.archive is not None:  # an object, made whole by the write (unwritten bytes: zeros)
                out.append((rel, offset, version, old))
                continue
            if lay is not None:  # subfiled: a range in each extent's subfile (the data file itself is not used)
                if old is not None and _has_gaps(self._view(name).dist):
                    prev = s.open_catalog().lookup_write(self.dataset(name).id, step)
                    assert prev is not None  # the version it replaces
                    _subfiled.copy_previous(self, prev, rel, lay, self._read_bytes)
                out.append((rel, offset, version, old))
                continue
            ends[rel] = max(ends.get(rel, 0), offset + nbytes)
            if old is not None and name not in self._ranked and _has_gaps(self._view(name).dist):
                extend_file(self._absolute(rel), offset + nbytes)
                # rows the gappy map does not write keep their earlier values, as they would in place
                prev = s.open_catalog().lookup_write(self.dataset(name).id, step)
                assert prev is not None  # the version it replaces
                copy_range(self._absolute(prev.path), prev.offset, self._absolute(rel), offset, nbytes)
            out.append((rel, offset, version, old))
        for rel, end in ends.items():
            extend_file(self._absolute(rel), end)
        return out

    def _reserve_chunks(self, wanted: Sequence[tuple[str, int]]) -> list[int]:
        """Rank 0: one catalog transaction reserving *wanted* ``(path, nbytes)`` chunks (:class:`SpacePool`)."""
        s = self.session
        got = s.record(SpaceReserved(s.run_id, tuple((rel, self.level, nbytes, False) for rel, nbytes in wanted)))
        return [int(x or 0) for x in got]  # never None: no request here owns a whole file

    def _access(self, name: str, writing: bool, statsets: list, index: int = 0, kind: str | None = None) -> Access:
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
        """Rank 0: the catalog rows of one dump (*sizes*: the bytes of each)."""
        s = self.session
        rows = []
        for name, (rel, offset, version, old), checksum, decision, secs, nbytes in zip(
                names, places, checksums, decisions, seconds, sizes):
            rec = self.dataset(name)
            rows.append(dict(
                dataset_id=rec.id, step=step, path=rel, level=self.level, offset=offset, nbytes=nbytes,
                checksum=checksum, checksum_algo=integrity.ALGORITHM if checksum else "none",
                method=decision.method.name, reason=decision.reason, seconds=secs, nprocs=s.size, overwrite=overwrite,
                version=version, replaces=old,
            ))
        return rows

    def _commit(self, rows: list[dict[str, Any]]) -> list[int]:
        """Rank 0: record the writes of one dump in one catalog transaction."""
        self.session.record(WritesRecorded.of(self.session.run_id, rows))
        return []

    def _transfer(
        self, backend: Any, path: Any, offset: int, view: ResolvedView, arr: np.ndarray, method, writing: bool,
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
        if method.backend != backend.name:
            raise InternalError(f"method {method.name!r} works through {method.backend}, the bytes are in {backend.name}")
        fh = backend.open(path, cache=appends(self.level))
        if backend.name == "objectstore":
            fh.copy, fh.size = copy, size
        error: SDMError | None = None
        synced = None
        t0 = time.perf_counter()
        try:
            mem, made = view.memory(arr)
            with freeing(made):
                try:
                    t = Transfer(fh, offset, view.etype, view.ftype, mem, view.piece, arr, view.order, s.comm, s.hints,
                                 s.files.views(path) if backend is s.files else {}, view.layout, stats,
                                 s.root / s.run_dir / _remote.CACHE_DIR)
                    (method.write if writing else method.read)(t)
                    if digests is not None and backend.name == "objectstore":
                        digests[0][digests[1]] = fh.digest
                except MPI.Exception as exc:
                    error = storage_error(exc, f"MPI-IO {'write' if writing else 'read'} of {path} failed", path,
                                          needed=size - offset if writing else None)
                except SDMError as exc:  # the method's own error: the sync below is still made on every rank
                    error = exc
                if writing and sync and backend is s.files:
                    synced = s.files.sync_unagreed(path, fh)
        finally:
            backend.release(path, fh)
        if error is not None:
            raise error
        return time.perf_counter() - t0, synced

    # ------------------------------------------------------------------- read
    @collective("read", opens=False)  # exchange 1 (_agree_call) opens it
    def read(self, name: str, step: int, out: np.ndarray | None = None, *, method: str | None = None,
             verify: bool | None = None, dtype: Any = None, casting: str | None = None,
             ranks: tuple[int, int] | None = None, box: Any = None) -> np.ndarray:
        """Read this rank's piece of dataset *name* at time *step* (collective), or a box of it.

        Parameters
        ----------
        name : str
        step : int
        out : numpy.ndarray, optional
            Local array to fill (C- or Fortran-contiguous, ghost layers included;
            ghosts are left untouched). Allocated (zero ghosts) when omitted. Of
            the dataset's dtype or one SDM converts it to (see *dtype*).
        method : str, optional
            I/O method for this call.
        verify : bool, optional
            Check the bytes against the write-time checksum (default: the session's).
        dtype : numpy dtype-like, optional
            The dtype of the result (default: *out*'s, else the dataset's). Another
            dtype than the stored one is converted after the bytes are read and
            verified (rules in :mod:`sdm.convert`); every rank must read into the
            same dtype.
        casting : {None, "no", "equiv", "safe", "same_kind", "unsafe"}
            As for :meth:`write`: by default a value that does not fit the result's
            dtype refuses the read (nothing set in *out*).
        ranks : (int, int), optional
            Ranked datasets only (:class:`sdm.Ranked`): read the rows the writer's
            ranks ``first`` to ``stop - 1`` wrote (each rank may name its own range).
            Without it a rank of a ranked dataset gets its own rows under the writer's
            number of ranks, else a balanced share of all rows, in order. Ranked rows
            are read in their stored dtype (no *out*, *dtype* or *casting*); the
            verification covers the whole step.
        box : tuple, optional
            Read this box of the global array instead of the rank's piece of the data
            view: per dimension an int, a ``start:stop:step`` slice (step > 0) or ``...``,
            as numpy's basic indexing (:func:`sdm.layout.boxes.parse_box`). Each rank
            gives its own box; boxes may overlap, be empty or leave parts unread, and only
            their bytes are read. The result keeps every dimension (an int gives extent
            1); *out*, if given, has that shape. Either every rank gives a box or none.
            A box is not checked against the step's checksum (it covers the whole
            step): ``verify=True`` is refused, the session's default skipped.

        Returns
        -------
        numpy.ndarray
            *out*, or the new local array.

        Raises
        ------
        DatasetNotFoundError, StepNotFoundError, LocalArrayError, ConversionError,
        StorageError, IntegrityError, CollectiveMismatchError
        """
        if self._is_ranked(name):
            refused = None if box is None else Failure(InvalidArgumentError(
                f"box= does not apply to ranked dataset {name!r}; select rows with ranks="), self.session.rank)
            self.session._ops.enter("read", refused)
            return _ranked_io.read(self, name, step, out=out, method=method, verify=verify, dtype=dtype,
                                   casting=casting, ranks=ranks)
        s = self.session
        boxed = box is not None
        verify_now = (s.verify if not isinstance(verify, (bool, np.bool_)) else bool(verify)) and not boxed
        made: list[ResolvedView] = []  # a box's view, freed after the read

        def local() -> tuple[ResolvedView, np.ndarray, convert.Conversion | None]:
            _check_step(step)
            if ranks is not None:
                raise InvalidArgumentError(f"ranks= applies to ranked datasets only; dataset {name!r} is not ranked")
            check.optional_flag(verify, "verify")
            check.text(method, "method", optional=True)
            if not _remote.is_method(method):
                choose_method(method or s.method)  # validates the name
            convert.check_casting(casting)
            if boxed and verify is True:
                raise InvalidArgumentError(
                    f"a box of dataset {name!r} cannot be checked against the step's checksum, which covers the "
                    "whole step; read it with verify=False (or read the whole step with verify=True)")
            view = self._box_view(name, box, made) if boxed else self._view(name)
            wanted = None if dtype is None else check_dtype(dtype, f"the dtype read of dataset {name!r}")
            conv = None
            if out is None:
                if wanted is not None:
                    conv = convert.conversion(view.dtype, wanted, casting, f"dataset {name!r} stores "
                                              f"{convert.describe(view.dtype)}, read as {convert.describe(wanted)}")
                fortran = view.order == "F"
            else:
                if wanted is not None and isinstance(out, np.ndarray) and wanted != out.dtype:
                    raise InvalidArgumentError(f"read of dataset {name!r}: dtype {convert.describe(wanted)} differs "
                                               f"from out's {convert.describe(out.dtype)}; give one of them")
                checked, conv = _check_array(out, view, name, s.rank, for_read=True, casting=casting)
                if conv is None:
                    return view, checked, None
                fortran = not checked.flags.c_contiguous
            return view, np.zeros(view.piece.memory_shape, dtype=view.dtype, order="F" if fortran else "C"), conv

        try:
            prepared, failure = capture(local, rank=s.rank)
            plan = None
            if s.rank == 0:
                failure = s._settle() or failure  # an earlier dump's commit failure surfaces first
                if failure is None:
                    plan, failure = capture(self._plan_read, name, int(step), rank=0)
            stats = [prepared[0].stats(prepared[1])] if prepared else None
            target = prepared[2].dst if prepared and prepared[2] else None  # converting reads agree on one more exchange
            call = (_key(name), _key(step), _key(method), _key(verify), None if target is None else dtype_text(target),
                    boxed)
            got, statsets = self._agree_call("read", call, failure, plan, stats, _pack_read_plan(plan))
            got = got if isinstance(got, tuple) else _unpack_read_plan(got)
            rel, offset, expected, algorithm = got[:4]
            view, arr, conv = prepared  # type: ignore[misc]
            if len(got) > 4:  # subfiled: every extent through its owner (sdm._subfiled)
                self._read_subfiled(name, step, view, arr, got[4], verify_now and bool(expected), statsets)
            else:
                self._read_file(name, step, view, arr, rel, offset, expected, algorithm, method, statsets, boxed,
                                verify_now)
            if conv is not None:  # after the bytes are verified: a damaged file is an IntegrityError first
                converted, failure = capture(convert.unpack, conv, arr, view.piece, out is not None, rank=s.rank)
                exchange(s.comm, failure, [])  # out is set only once every rank converted
                assert converted is not None  # the exchange raised every rank's failure
                return converted if out is None else convert.place(converted, view.piece, out)
            return arr
        finally:
            for v in made:
                v.free()

    def _read_subfiled(self, name: str, step: int, view: ResolvedView, arr: np.ndarray, plan: Any,
                       verify: bool, statsets: list) -> None:
        """The I/O of a read of a subfiled step, its exchange of errors and its extents' checksums (collective)."""
        s = self.session
        moved, failure = capture(_subfiled.read, self, name, view, arr, plan, verify, [p[0] for p in statsets],
                                 rank=s.rank)
        digests = moved[1] if moved is not None else [0] * len(plan)
        _, sums = self._closing(failure, [moved[0] if moved else 0.0], digests)
        if verify:
            _subfiled.check_read(name, step, plan, [int(x) for x in sums])

    def _read_file(self, name: str, step: int, view: ResolvedView, arr: np.ndarray, rel: str, offset: int,
                   expected: str, algorithm: str, method: str | None, statsets: list, boxed: bool,
                   verify_now: bool) -> None:
        """The I/O of a read of one run of bytes, its exchange of errors and its checksum (collective)."""
        s = self.session
        access = self._access(name, False, statsets, kind="box" if boxed else None)
        archived = is_object(rel)  # the bytes are on the archive tier only (sdm.io.remote)
        backend, key, copy = self._backend_of(rel)
        if archived:
            chosen = get_method(_remote.choose(s, method, rel, statsets, view.piece.shape, view.dtype, view.order))
        else:
            decision = s.planner.choose(s.method if _remote.is_method(method) else method or s.method, access)
            chosen = decision.method
        moved, failure = capture(self._transfer, backend, key, offset, view, arr, chosen, False, rank=s.rank,
                                 stats=[p[0] for p in statsets], copy=copy)
        verify_now = verify_now and bool(expected)  # nothing to compare with when written without checksum
        partial: int | None = 0
        if failure is None and verify_now:
            partial, failure = capture(self._verify_share, name, step, view, arr, algorithm, rank=s.rank)
        try:
            slowest, sums = self._closing(failure, [moved[0] if moved else 0.0], [partial or 0])
        except SDMError:
            s.files.reset_views()  # a view may have been set on some ranks only
            raise
        if not archived:
            s.planner.observe(access, decision.method.name, float(slowest[0]))  # the same everywhere
        if verify_now and integrity.to_hex(int(sums[0])) != expected:
            raise IntegrityError(
                f"dataset {name!r} step {step} read from {rel} does not match its write-time checksum "
                f"{algorithm}:{expected}; the file was changed or damaged after the write"
            )

    def _box_view(self, name: str, box: Any, made: list[ResolvedView]) -> ResolvedView:
        """The view of this rank's *box* of dataset *name* (appended to *made*, to be freed after the read)."""
        from .layout.boxes import Hyperslab, parse_box

        rec = self.dataset(name)
        dist = Hyperslab(parse_box(box, rec.shape, f"box of dataset {name!r}"))
        s = self.session
        view = ResolvedView(dist, dist.piece(rec.shape, s.size, s.rank), from_text(rec.dtype), rec.order)
        made.append(view)
        return view

    def _verify_share(self, name: str, step: int, view: ResolvedView, arr: np.ndarray, algorithm: str) -> int:
        """This rank's share of a read's checksum, with the algorithm the row was written with."""
        try:
            algorithm = integrity.canonical(algorithm)
        except InvalidArgumentError:
            raise IntegrityError(
                f"dataset {name!r} step {step} cannot be verified: its checksum algorithm {algorithm!r} is not "
                f"known to this SDM (known: {', '.join(integrity.ALGORITHMS)}); read it with verify=False"
            ) from None
        return self._partial_checksum(name, view, arr, algorithm)

    def _plan_read(self, name: str, step: int) -> tuple:
        """Rank 0: where the bytes of one step are and their checksum: ``(path, offset, checksum, algorithm)``,
        and for a subfiled step its extents' :func:`sdm._subfiled.read_plan`."""
        s = self.session
        rec = self.dataset(name)
        w = s.open_catalog().lookup_write(rec.id, step)
        if w is None:
            steps = sorted(s.open_catalog().dataset_writes(rec.id))
            raise StepNotFoundError(
                f"dataset {name!r} (group {self.name!r}, run {s.run_id}) was never written at step {step}; "
                f"written steps: {steps}"
            )
        if w.extents:
            return w.path, w.offset, w.checksum, w.checksum_algo, _subfiled.read_plan(self, name, step, w)
        path, offset = self._locate(name, step, w)
        return path, offset, w.checksum, w.checksum_algo

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
                from .catalog.tiers import copies

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

    def _backend_of(self, path: str) -> tuple[Any, Any, str]:
        """The backend holding the bytes of a read plan's *path*, their key there, and the archive copy's
        checksum (empty on the fast tier)."""
        if is_object(path):
            location, copy = path.partition("#")[::2]
            store, key = object_at(location)
            return store, key, copy
        return self.session.files, self._absolute(path), ""

    def _free(self) -> None:
        for v in self._views.values():
            v.free()
        self._views.clear()

    def __repr__(self) -> str:
        return f"<sdm.Group {self.name!r} level={self.level} datasets={self.datasets}>"


def _combined_decision(count: int, method: str) -> _Decision:
    """The decision for a dataset written with *count* - 1 others of its file in one call (*method*:
    the one asked for, or ``auto``: ``collective``)."""
    if method in COMBINABLE:
        return _Decision(get_method(method), f"method {method!r} asked for; {count} datasets of the dump in one file: "
                         "one file view and one call for all of them (sdm.io.combined)")
    return _Decision(get_method("collective"), f"{count} datasets of the dump in one file: one file view and one "
                     "collective call for all of them (sdm.io.combined)")


def _noted(decision: _Decision, note: str) -> _Decision:
    """*decision* with *note* (why a subfiled group's write kept one file) before its reason."""
    return replace(decision, reason=f"subfiles: {note}; {decision.reason}") if note else decision


def _signed(value: int) -> int:
    """A 64-bit unsigned share as the int64 with the same bits."""
    value &= _MASK
    return value - (1 << 64) if value >= 1 << 63 else value


def _pack_read_plan(plan: tuple[str, int, str, str] | None) -> list[int] | None:
    """Rank 0's read plan ``(path, offset, checksum, algorithm)`` as int64 words, or None if it does not fit.

    Words: offset, checksum (0 when none, else its 64 bits, with a flag word), the
    algorithm's index in :data:`sdm.integrity.ALGORITHMS` and the path's length, then
    the path's UTF-8 bytes.
    """
    if plan is None or len(plan) != 4:  # a subfiled step's extents travel pickled
        return None
    path, offset, checksum, algorithm = plan
    if algorithm not in integrity.ALGORITHMS and checksum:
        return None  # an unknown algorithm travels by name (the pickled exchange)
    raw = path.encode("utf-8")
    words = -(-len(raw) // 8)
    if 5 + words > _PLAN_WIDTH:
        return None
    try:
        value = int(checksum, 16) if checksum else 0
    except ValueError:
        return None
    head = [int(offset), _signed(value), 1 if checksum else 0,
            integrity.ALGORITHMS.index(algorithm) if algorithm in integrity.ALGORITHMS else -1, len(raw)]
    body = np.frombuffer(raw.ljust(words * 8, b"\0"), dtype="<i8").tolist()
    return head + body


def _unpack_read_plan(words: np.ndarray) -> tuple[str, int, str, str]:
    """The inverse of :func:`_pack_read_plan`."""
    offset, value, has, algo, length = (int(x) for x in words[:5])
    raw = np.asarray(words[5:], dtype="<i8").tobytes()[:length]
    checksum = integrity.to_hex(value) if has else ""
    algorithm = integrity.ALGORITHMS[algo] if algo >= 0 else "none"
    return raw.decode("utf-8"), offset, checksum, algorithm


def _not_global(name: str) -> DistributionError:
    """The error for a ranked dataset given another view or asked for its piece."""
    return DistributionError(f"dataset {name!r} is ranked (sdm.Ranked): each rank gives its own rows, there is no "
                             "global array to cut into pieces")


def _has_gaps(view: Distribution) -> bool:
    """Whether a view may leave elements unwritten (a map array without coverage)."""
    return isinstance(view, MapArray) and not view.coverage


def _key(value: object) -> object:
    """A picklable, comparable form of an argument that never raises (for the call check)."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    return value if value is None or isinstance(value, str) else repr(value)


def _check_step(step: object) -> None:
    check.integer(step, "time step")


def _check_same_call(payloads: list, what: str) -> None:
    calls = [p[0] for p in payloads]
    if any(c != calls[0] for c in calls):
        diffs = {r: c for r, c in enumerate(calls) if c != calls[0]}
        raise CollectiveMismatchError(
            f"ranks made different {what} calls: rank 0 {calls[0]}, others {diffs}; "
            "every rank must call with the same dataset and step"
        )


def _check_array(array: Any, view: ResolvedView, name: str, rank: int, *, for_read: bool,
                 casting: str | None = None) -> tuple[np.ndarray, convert.Conversion | None]:
    """Check a local array against the view: a usable (contiguous) array and the conversion it needs.

    A write's array of another dtype comes back converted to the stored one (the one
    copy, which also makes a non-contiguous array contiguous); a read's *out* comes
    back as it is, with the conversion from the stored dtype to its own.
    """
    if not isinstance(array, np.ndarray):
        if for_read:
            raise LocalArrayError(f"out for dataset {name!r} must be a numpy array, got {type(array).__name__}")
        try:
            array = np.asarray(array)
        except (TypeError, ValueError, OverflowError):
            array = None
        if array is None or array.dtype.hasobject:
            raise LocalArrayError(
                f"the local array of dataset {name!r} on rank {rank} must be a numpy array of {view.dtype}"
            )
    conv = None
    if array.dtype != view.dtype:
        what = (f"dataset {name!r} stores {convert.describe(view.dtype)} but {'out' if for_read else 'the local array'} "
                f"on rank {rank} is {convert.describe(array.dtype)}")
        conv = convert.conversion(view.dtype, array.dtype, casting, what) if for_read else \
            convert.conversion(array.dtype, view.dtype, casting, what)
    expected = view.piece.memory_shape
    if array.shape != expected:
        ghost = f" (interior {view.piece.counts} plus ghosts {view.piece.ghosts})" if view.piece.has_ghosts else ""
        raise LocalArrayError(
            f"dataset {name!r} with view {view.dist!r} expects a local array of shape {expected}{ghost} on rank "
            f"{rank}, got {array.shape}"
        )
    needs_c = view.piece.kind == "map"
    if not (array.flags.c_contiguous or (array.flags.f_contiguous and not needs_c)):
        if for_read:
            what = "C-contiguous" if needs_c else "C- or Fortran-contiguous"
            raise LocalArrayError(f"out for dataset {name!r} must be {what}")
        if conv is None:
            array = np.array(array, order="C" if needs_c or view.order != "F" else "F")  # one copy, in the storage order
    if for_read and not array.flags.writeable:
        raise LocalArrayError(f"out for dataset {name!r} is read-only")
    if conv is not None and not for_read:  # the conversion is the copy (made contiguous in the same pass)
        return convert.pack(conv, array, view.piece, view.order), conv
    return array, conv
