"""Sessions: the paper's SDM_initialize / SDM_finalize as a context manager.

A :class:`Session` is opened collectively by every rank of a communicator for one
application.  In mode ``"w"`` it registers a new run; in ``"r"`` it opens an existing
run (by id, ``"latest"``, or the one run whose attributes match: several are an error
listing them, see :mod:`sdm.catalog.selection`) for reading; ``"a"`` reopens an
existing run the same way to add data.  Only rank 0 talks to the catalog.
"""

from __future__ import annotations

import hashlib
import json
import time
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence, TypeVar

import numpy as np
from mpi4py import MPI

from . import _validate as check
from . import config
from ._collective import Failure, agree, capture, root_call, root_call_resting
from .catalog import DatasetSpec, GroupRecord, RunRecord, Truncation, redact_url
from .catalog.changes import (AttributesSet, Change, GroupDefined, RunClosed, RunOpened, SpaceReserved, Truncated,
                              WritesRecorded)
from .catalog.metafile import MetaFile
from .catalog.recorder import Recorder
from .catalog.selection import run_choice
from .catalog.values import encode, merge_attributes
from .engine.hints import planner_hints as planner_hints_checked, session_hints
from .engine.operations import Late, Operations, close_wait, collective
from .errors import (
    CatalogError,
    CollectiveMismatchError,
    DistributionError,
    InvalidArgumentError,
    InvalidNameError,
    ReadOnlyError,
    RunStateError,
    SDMError,
)
from .group import Dataset, Group
from .layout import Distribution
from .layout.agreement import agree_view, by_value
from .catalog import planner_choices as choices
from .planner import Planner, choose_method
from .planner.learned import MOST_ROWS, from_rows
from .planner.model import METHODS
from .segments import check_kind, release_space
from .storage.backends.mpiio import MPIIOBackend
from .storage import FileCache, check_level, check_name, check_steps_per_file, durability, runs, trailer
from .storage.confine import confine, row_record
from .storage.subfiles import check_subfiles

if TYPE_CHECKING:
    from .catalog.catalog import Catalog

__all__ = ["Session", "open"]

T = TypeVar("T")


_MODES = ("w", "r", "a")


class Session:
    """A collective connection of an MPI job to SDM for one application and run.

    Use :func:`sdm.open` to create one.  Attributes ``run_id``, ``run`` (the catalog
    record), ``root`` (the data root), ``run_dir`` (the run's directory under it) and
    ``catalog_url`` describe where things go (``catalog_url`` is for showing: its
    password, if any, is masked as ``user:***@``); ``previous_state`` is the state the
    run was in when the session opened it (``"new"``, ``"open"``, ``"closed"`` or
    ``"interrupted"``: its last writers died without closing it).  ``async_commit``
    says whether dumps are committed in the background (see :func:`open`).
    """

    def __init__(
        self,
        application: str,
        mode: str = "w",
        *,
        comm: MPI.Comm | None = None,
        catalog: str | None = None,
        root: str | Path | None = None,
        run: int | str | None = None,
        attributes: dict[str, Any] | None = None,
        problem_size: Any = None,
        method: str = "auto",
        hints: dict[str, str] | None = None,
        sync: bool | None = None,
        verify: bool = False,
        checksum: bool | None = None,
        planner_hints: dict[str, Any] | None = None,
        async_commit: bool = False,
        metafile: bool = True,
    ) -> None:
        if comm is not None and not isinstance(comm, MPI.Intracomm):
            raise InvalidArgumentError(f"comm must be an MPI intracommunicator (e.g. MPI.COMM_WORLD), got {type(comm).__name__}")
        # SDM's collectives run on a private duplicate, never mixing with the application's
        self.comm = (comm if comm is not None else MPI.COMM_WORLD).Dup()
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        self._ops = Operations(self.comm)  # the opening exchange of every collective call (sdm.engine)
        self._ops.current = ("sdm.open", (application, mode), {})
        self.application = application
        self.mode = mode
        self.method = method
        args, failure = capture(_check_open, mode, catalog, root, run, attributes, problem_size, method, hints, sync,
                                verify, checksum, planner_hints, rank=self.rank)
        if failure is None:
            _, failure = capture(check.flag, async_commit, "async_commit", rank=self.rank)
        if failure is None:
            _, failure = capture(check.flag, metafile, "metafile", rank=self.rank)
        if failure is None:
            hints, planner_hints = args["hints"], args["planner_hints"]  # type: ignore[index]
            run = run_choice(run)  # an id, "latest" or None
            self.sync = config.sync_enabled() if sync is None else bool(sync)
            self.verify = bool(verify)
            self.checksum = config.checksum_enabled() if checksum is None else bool(checksum)
            # the arguments that must agree (mode, run, catalog, ...) before the catalog is touched
            agreeing: dict[str, Any] | None = dict(
                application=application, mode=mode, run=run, root=root, catalog=catalog, attributes=attributes,
                problem_size=problem_size, method=method, hints=hints, sync=self.sync, verify=self.verify,
                checksum=self.checksum, planner_hints=planner_hints, async_commit=bool(async_commit),
                metafile=bool(metafile))
        else:
            agreeing = None
        try:
            self._ops.enter("open")
            # one allgather: a bad argument on any rank raises the same error on all, then the comparison
            open_files = _agree_arguments(self.comm, failure, agreeing)
        except BaseException:
            self.comm.Free()
            raise
        self.hints = dict(hints or {})
        self.catalog: Catalog | None = None
        self._lock: runs.RunLock | None = None  # rank 0 of a writing session: its hold on the run
        self._closed = False
        self._groups: dict[str, Group] = {}
        self.async_commit = bool(async_commit)
        self._pending: Any = None  # rank 0, async_commit: the dump being committed in the background
        self._committer: Any = None  # rank 0, async_commit: the thread that commits
        self.meta: MetaFile | None = None  # rank 0 of a writing session: the run's meta-file
        self.described: set[str] = set()  # level-2/3 files written or cut (relative paths): trailers at close
        self.metafile = bool(metafile)

        def setup() -> tuple[str, str, RunRecord, Any, str]:
            check_name(application, "application")
            choose_method(method)  # validates the name
            data_root = Path(root).resolve() if root is not None else config.default_root()
            url = catalog or config.default_catalog_url(data_root)
            from .catalog.catalog import Catalog  # rank 0 only: the other ranks never import SQLAlchemy

            self.catalog = Catalog(url, create=(mode == "w"))
            try:
                if mode == "w":
                    cat_id, created = self.catalog.id, datetime.now(timezone.utc)
                    rec = self.catalog.new_run(
                        application,
                        nprocs=self.size,
                        root=str(data_root),
                        problem_size=problem_size,
                        attributes=attributes,
                        make_dir=lambda rid: self._make_run_dir(data_root, rid, cat_id, created, problem_size, attributes),
                        created_at=created,
                    )
                    self._lock = runs.RunLock(Path(rec.root), rec.dir or "")
                    previous = "new"
                else:  # run=ID, run="latest", or the one run that matches (several: an error listing them)
                    rec = self.catalog.select_run(application, attributes, run)
                    previous = self._hold_run(rec) if mode == "a" else self._look_at_run(rec)
            except Exception:
                self._release_run()
                self._close_meta()
                self.catalog.close()
                self.catalog = None
                raise
            if mode != "w" and root is None:
                data_root = Path(rec.root)
            # a catalog made just now holds no calibration and no learned choices
            calibration = None if self.catalog.created else self.catalog.latest_calibration(str(data_root))
            # (learned from the trials of writes: a read-only session makes none and needs none)
            learned = [] if self.catalog.created or mode == "r" else choices.load(self.catalog, str(data_root),
                                                                                   MOST_ROWS)
            return redact_url(url), str(data_root), rec, (calibration, learned), previous  # the password stays on rank 0

        try:
            self.catalog_url, root_text, self.run, (calibration, learned), self.previous_state = root_call_resting(
                self.comm, setup)
        except BaseException:
            self.comm.Free()
            raise
        self.root = Path(root_text)
        self.run_id = self.run.id
        self.run_dir = self.run.dir or runs.legacy_run_dir(self.run.application, self.run.id)
        self.planner = Planner(calibration, planner_hints, self.hints, learned=from_rows(learned, METHODS),
                               run_id=self.run_id)
        self.files = MPIIOBackend(self.comm, writable=(mode != "r"), capacity=open_files, info=_info(hints),
                               sync_mode=durability.sync_mode(self.hints))
        self.sources = FileCache(self.comm, writable=False, capacity=8, info=_info(hints))  # imported files

    # ---------------------------------------------------------------- context
    def __enter__(self) -> "Session":
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        """Close the session; after an exception, without waiting forever for ranks that did not raise it.

        An exception raised on every rank (an SDM error, or the same error of the
        application's code) closes the session collectively, as ``close``. One that
        left an SDM call on this rank alone (``KeyboardInterrupt``, a bug), or that the
        other ranks do not join in closing within ``$SDM_CLOSE_WAIT`` seconds (default
        5), is reported and ends the job with ``MPI_Abort`` (see :mod:`sdm.engine.operations`);
        the run is then left ``interrupted``, every committed step readable. After a
        ``KeyboardInterrupt`` on every rank the run is marked ``interrupted`` too.
        """
        if exc is None:
            self.close()
            return
        if self._closed:
            return
        interrupted = isinstance(exc, KeyboardInterrupt)
        if self._ops.torn is not None or self._ops.broken is not None or self.size == 1:
            self._close(interrupted=interrupted)  # ends the job (torn), or closes locally
            return
        wait = close_wait()
        try:
            self._close(deadline=time.monotonic() + wait, interrupted=interrupted, after=type(exc).__name__)
        except Late:
            self._ops.abort(exc, f"the application's code of this rank, and the other ranks did not close the "
                                 f"session within {wait:g} s ($SDM_CLOSE_WAIT)")
        except CollectiveMismatchError:
            self._ops.abort(exc, "the application's code of this rank while the other ranks made another SDM call")

    def close(self) -> None:
        """Close files and the catalog (collective; the paper's SDM_finalize).

        A writing session also records that it stopped writing the run: the last one
        marks the run ``closed``.  With ``async_commit=True`` the last dump's catalog
        commit is waited for first; if it (or any commit not yet reported) failed, the
        session still closes and its error is raised on every rank. A session that can
        no longer make collective calls (ranks entered different operations) only
        releases what this rank holds, and leaves the run ``interrupted``.
        """
        self._close()

    def _close(self, *, deadline: float | None = None, interrupted: bool = False, after: str = "") -> None:
        """Close collectively (within *deadline*, else :class:`Late`), or locally when the session is broken."""
        if self._closed:
            return
        ops = self._ops
        if ops.torn is not None and self.size > 1:
            ops.abort(ops.torn, "an SDM call (the ranks are no longer in step)")
        if ops.broken is not None or ops.torn is not None:
            self._close_locally()
            return
        ops.current = (f"Session.close() after {after}" if after else "Session.close", (), {})
        ops.depth = 1
        try:
            ops.enter("close", deadline=deadline)
        except CollectiveMismatchError:
            self._close_locally()
            raise
        finally:
            ops.depth = 0
        self._closed = ops.closed = True
        try:
            for g in self._groups.values():
                g.engine._free()
            self.files.close_all()
            self.sources.close_all()
            if self.mode != "r":
                root_call(self.comm, self._close_run, interrupted)
        except SDMError:
            raise
        except BaseException as exc:  # e.g. KeyboardInterrupt in a collective of the close
            ops.torn = exc
            if self.size > 1:
                ops.abort(exc, "Session.close (the ranks are no longer in step)")
            raise
        finally:
            if self._committer is not None:
                self._committer.shutdown(wait=True)
                self._committer = None
            self._close_meta()
            if self.catalog is not None:
                self.catalog.close()
                self.catalog = None
            self.comm.Free()

    # ------------------------------------------------------------ run states
    def _make_run_dir(self, data_root: Path, run_id: int, catalog_id: str, created: datetime, problem_size: Any,
                      attributes: dict[str, Any] | None) -> str:
        """Rank 0 of a new run, in the catalog's transaction: its directory, and the meta-file's first record."""
        rel = runs.make_run_dir(data_root, self.application, run_id, catalog_id, metafile=self.metafile)
        if not self.metafile:
            return rel
        self.meta = MetaFile(data_root / rel, sync=self.sync)
        self.meta.run(application=self.application, run_id=run_id, catalog_id=catalog_id, nprocs=self.size,
                      problem_size=problem_size, attributes=attributes, created=created, root=str(data_root),
                      directory=rel)
        return rel

    def _close_locally(self) -> None:
        """Release what this rank holds without a collective call; rank 0 leaves the run ``interrupted``.

        For a session whose ranks are no longer in step: its files stay open until the
        process ends (closing an MPI file is collective).
        """
        self._closed = self._ops.closed = True
        for g in self._groups.values():
            g.engine._free()
        if self._committer is not None:
            self._committer.shutdown(wait=True)
            self._committer = None
        self._release_run()
        if self.catalog is not None and self.mode != "r":
            capture(self.catalog.mark_interrupted, self.run_id)  # best effort: readers find it interrupted anyway
        self._close_meta()
        if self.catalog is not None:
            self.catalog.close()
            self.catalog = None

    def _close_meta(self) -> None:
        if self.meta is not None:
            self.meta.close()
            self.meta = None

    def _hold_run(self, rec: RunRecord) -> str:
        """Rank 0 of an appending session: check the run's directory, take a hold on it."""
        assert self.catalog is not None
        rel = rec.dir or runs.legacy_run_dir(rec.application, rec.id)
        legacy = rel == runs.legacy_run_dir(rec.application, rec.id)
        runs.check_run_dir(Path(rec.root), rel, self.catalog.id, rec.id, legacy=legacy)
        _check_on_fast_tier(self.catalog, rec.id)
        if not legacy and runs.keeps_metafile(Path(rec.root) / rel):  # else: the run has none to continue
            if not self.metafile:
                raise InvalidArgumentError(
                    f"run {rec.id} keeps a meta-file: appending with metafile=False would leave these writes out "
                    "of it (a rebuild would lose them); open it with metafile=True")
            self.meta = MetaFile(Path(rec.root) / rel, sync=self.sync)

        def claim() -> bool:
            live = runs.writer_alive(Path(rec.root), rel)
            self._lock = runs.RunLock(Path(rec.root), rel)
            return live

        return self._record(RunOpened(rec.id, claim))

    def _look_at_run(self, rec: RunRecord) -> str:
        """Rank 0 of a reading session: a run left ``open`` by dead writers is marked interrupted."""
        if rec.state == "open" and not runs.writer_alive(Path(rec.root), rec.dir):
            try:
                assert self.catalog is not None
                self.catalog.mark_interrupted(rec.id)
                return "interrupted"
            except CatalogError:  # a catalog the reader may not write: reading still works
                pass
        return rec.state

    def _close_run(self, interrupted: bool = False) -> None:
        failure = self._settle()  # the last dump's commit first: its error is reported after the close
        trailers = None
        try:
            if self.catalog is not None:
                self._give_back_space()  # before the trailers, which go at the files' ends
                self._store_learned()
                _, trailers = capture(self._write_trailers, rank=0)
                if interrupted:  # no close record: the run stays interrupted, also for a rebuild
                    self._release_run()
                    self.catalog.mark_interrupted(self.run_id)
                else:
                    self._record(RunClosed(self.run_id))
        finally:
            self._release_run()
        if failure is not None:
            raise failure.exception(1)
        if trailers is not None:
            raise trailers.exception(1)

    def _store_learned(self) -> None:
        """Rank 0 at close: what this session's trials settled, for later runs on this target (a cache: a
        catalog that refuses it, e.g. on a full disk, only makes the next run try again)."""
        assert self.catalog is not None
        if self.planner.measured:
            try:
                choices.store(self.catalog, str(self.root), [v.as_row(k) for k, v in self.planner.measured.items()])
            except CatalogError:
                pass

    def _give_back_space(self) -> None:
        """Rank 0 at close: the file space its groups reserved ahead and did not use, given back to the files
        whose high-water mark is still where this session left it (otherwise ``sdm gc`` does it)."""
        assert self.catalog is not None
        unused = [u for g in self._groups.values() for u in g.engine._pool.unused()]
        if unused:
            try:
                self.catalog.give_back(self.run_id, unused)
            except CatalogError:  # e.g. a full disk: the space stays reserved, as after a crash (`sdm gc` gives it back)
                pass

    def _write_trailers(self) -> None:
        """Rank 0 at close: a trailer at the end of every level-2/3 file this session wrote (committed rows only)."""
        assert self.catalog is not None
        if not self.described:
            return
        rec = self.catalog.run(self.run_id, steps=False)
        run = {"application": rec.application, "run": rec.id, "catalog": self.catalog.id, "dir": rec.dir}
        groups = {g.name: g for g in rec.groups}
        rows: dict[str, list[tuple[str, Any]]] = {}
        owner: dict[str, str] = {}
        for group, dataset, w in self.catalog.writes(self.run_id, paths=sorted(self.described)):
            if w.extents:  # a subfiled step: described by the meta-file and the catalog, never by a trailer
                continue
            rows.setdefault(w.path, []).append((dataset, w))
            owner[w.path] = group
        closed_at = datetime.now(timezone.utc).isoformat()
        for path in sorted(rows):  # a file left without rows (truncated away) has nothing to describe
            g = groups[owner[path]]
            index = trailer.index_of(run, g, path, rows[path], closed_at)
            size = len(trailer.encode(index, 0))
            offset = self.record(SpaceReserved(self.run_id, ((path, g.level, size, False),)))[0]
            assert offset is not None  # appended space (not a whole file) always has its offset
            trailer.write(confine(self.root, self.run_dir, path, row_record(self.run_id, g.name)), int(offset), index,
                          sync=self.sync)

    # ---------------------------------------------------------- async commits
    def _commit_later(self, rows: list[dict[str, Any]]) -> None:
        """Rank 0: commit one dump's rows in the background (``async_commit``).

        Its bytes are synced already (every rank passed the write's last exchange), so
        the order of durability holds; the next catalog use waits for it (:meth:`_settle`).
        """
        self._raise_pending()
        if self._committer is None:
            from concurrent.futures import ThreadPoolExecutor

            self._committer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sdm-commit")
        assert self.catalog is not None
        self._pending = self._committer.submit(self._record, WritesRecorded.of(self.run_id, rows))

    def _raise_pending(self) -> None:
        """Rank 0: wait for the background commit and raise its error, if any (once)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            exc = pending.exception()
            if exc is not None:
                raise exc

    def _settle(self) -> Any:
        """Rank 0: wait for the background commit; its :class:`Failure` (reported once) or None."""
        return capture(self._raise_pending, rank=0)[1]

    def _release_run(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    # ------------------------------------------------------------------ groups
    @collective("make_group")
    def make_group(
        self,
        name: str,
        datasets: Sequence[str | Dataset],
        *,
        dtype: Any = None,
        shape: Sequence[int] | None = None,
        order: str = "C",
        level: int | None = None,
        view: Distribution | None = None,
        attributes: dict[str, Any] | None = None,
        kind: str = "state",
        steps_per_file: int | None = None,
        tier: str = "fast",
        archive: str | None = None,
        dims: Sequence[str] | None = None,
        coords: dict[str, Any] | None = None,
        subfiles: int | str | None = None,
    ) -> Group:
        """Define a data group (the paper's ``SDM_make_datalist``), collectively.

        Properties given here (``dtype``, ``shape``, ``order``) apply to every dataset
        that does not set its own through :class:`sdm.Dataset`; attributes propagate
        to every dataset of the group.

        Parameters
        ----------
        name : str
            Group name (unique in the run).
        datasets : sequence of str or Dataset
            The datasets of the group, in order.
        dtype, shape, order
            Defaults for the datasets: numpy dtype, global shape, ``"C"`` or ``"F"``.
        level : {1, 2, 3}
            File organization level (see :mod:`sdm.storage.organization`); default 3,
            and 1 (the only one) on the archive tier.
        view : Distribution, optional
            Data view for every dataset (default: :class:`sdm.Block` over all ranks).
        attributes : dict, optional
            Typed attributes of the group and its datasets.
        kind : {"state", "topology"}
            ``"state"``: written every step (default); ``"topology"``: written once or
            rarely, e.g. a mesh (see :mod:`sdm.segments`).
        steps_per_file : int, optional
            Levels 2 and 3: start a new data file every *steps_per_file* steps (its name
            says which steps it holds); default one file.
        tier : {"fast", "archive"}
            Where the group's writes go: files on the fast tier (default), or objects in
            an S3 object store: one object per dataset and step (level 1: an object
            cannot be appended to), assembled by aggregator ranks and uploaded in parts
            (:mod:`sdm.io.remote`), each recorded as a verified archive copy. Reads,
            ``sdm stage`` and ``sdm purge`` then treat them as any archived file.
        archive : str, optional
            ``tier="archive"``: the object store, ``s3://BUCKET/PREFIX`` (default
            ``$SDM_ARCHIVE``); the bucket is created if needed. Server and credentials
            as for ``sdm migrate`` (``$SDM_S3_ENDPOINT``, the AWS variables).

        dims : sequence of str, optional
            Dimension names for every dataset that does not give its own
            (:class:`sdm.Dataset` ``dims=``), e.g. ``("z", "y", "x")``; xarray
            (``engine="sdm"``) and the exports use them (default ``dim_0``, ...).
        coords : dict of str to array, optional
            Coordinate values of named dimensions (``{"x": np.linspace(0, 1, nx)}``), one
            1-D array as long as the dimension; kept as infos ``coord.<name>`` of the group.
        subfiles : int or "auto", optional
            Levels 2 and 3 on the fast tier: store each dataset step as K extents in K
            subfiles (``group.sub00000.sdm`` ...), each written and read whole by one rank
            with plain POSIX I/O: file-per-process speed for one logical dataset, which the
            catalog and the reads put back together (see :mod:`sdm.storage.subfiles`).
            ``"auto"``: the planner chooses K, or one shared file, per write and records
            why. Default: one shared file.

        Returns
        -------
        Group

        Raises
        ------
        ReadOnlyError, InvalidNameError, GroupExistsError
        """
        self._check_writable("define a group")

        where, bad = capture(_archive_of, tier, archive, rank=self.rank)
        level = (1 if where else 3) if level is None else level

        def specs() -> list[DatasetSpec]:
            if bad is not None:
                raise bad.exception(1)
            check_name(name, "group")
            check_level(level)
            check_kind(kind)
            check_steps_per_file(steps_per_file, int(level))
            check_subfiles(subfiles, int(level), bool(where))
            if where and level != 1:
                raise InvalidArgumentError(
                    f"group {name!r}: the archive tier stores one object per dataset and step (level 1), since an "
                    f"object cannot be appended to; got level {level}. Write levels 2 and 3 on the fast tier and "
                    "`sdm migrate --pack-below BYTES` packs small files into superfiles")
            for key, value in check.mapping(attributes, "attributes").items():
                encode(key, value)  # refused now, before the group is defined
            if view is not None and not isinstance(view, Distribution):
                raise InvalidArgumentError(f"view must be a Distribution (Block, Cyclic, MapArray, ...), got {type(view).__name__}")
            out = [Dataset.of(d).spec(dtype=dtype, shape=shape, order=order, dims=dims)
                   for d in check.names(datasets, "datasets")]
            _check_coords(coords, out, name)
            names = [s.name for s in out]
            if not out:
                raise InvalidNameError(f"group {name!r} needs at least one dataset")
            if len(set(names)) != len(names):
                raise InvalidNameError(f"group {name!r} lists a dataset twice: {names}")
            return out

        local, failure = capture(specs, rank=self.rank)
        # before anything is recorded: ranks that give different views (or a view and none)
        # would make different collective calls
        agree_view(self.comm, view, f"make_group {name!r}")
        _same(agree(self.comm, failure, (name, level, kind, steps_per_file, where, local, subfiles)
                    if failure is None else None), "make_group")
        if where:  # the bucket exists (made if needed) and answers before anything is recorded
            root_call(self.comm, _ensure_bucket, where)
        if view is not None:  # a view that does not fit is refused before the group is defined
            self._check_view(view, local)  # type: ignore[arg-type]
        record = root_call(self.comm, lambda: self.record(GroupDefined(
            self.run_id, name, int(level), tuple(local), kind,  # type: ignore[arg-type]
            None if steps_per_file is None else int(steps_per_file), where or None,
            None if subfiles is None else check_subfiles(subfiles, int(level), False))))
        group = Group(self, record)
        self._groups[name] = group
        if attributes:
            group.set_attributes(attributes)
        for dim, values in (coords or {}).items():
            group.set_info(f"coord.{dim}", np.asarray(values))
        if view is not None:
            group.data_view(view)
        return group

    @collective("group")
    def group(self, name: str) -> Group:
        """Return a group of this run (defined now or by the run that wrote it).

        The group is read from the catalog at its first lookup and kept for the session:
        its step lists (and the first axis of ``group[name]``) stay as they were then, so
        steps another session writes afterwards show in a new session (``group.read`` of
        one step looks that step up). A group defined after this session opened is found
        when it is looked up.

        Raises
        ------
        GroupNotFoundError
        """
        _same(agree(self.comm, *capture(check_name, name, "group", rank=self.rank)[::-1]), "group")
        if name in self._groups:
            return self._groups[name]
        record = root_call(self.comm, self._group_record, name)
        group = Group(self, record)
        self._groups[name] = group
        return group

    @property
    @collective("groups")
    def groups(self) -> list[str]:
        """Names of the run's groups."""
        rec = root_call(self.comm, lambda: self.open_catalog().run(self.run_id))
        return [g.name for g in rec.groups]

    # --------------------------------------------------------------- segments
    @collective("truncate")
    def truncate(self, after_step: int, groups: Sequence[str] | None = None) -> Truncation:
        """Erase every step after *after_step* of the run's groups (collective; PDS segments).

        One catalog transaction erases the rows of the steps ``> after_step`` (of every
        group, or of those named), sets the datasets' step summaries to what remains and
        marks the groups, whose new steps must then be ``> after_step``; after its
        commit, files left without data are deleted and freed file tails cut (a crash
        in between leaves unreferenced bytes for ``sdm gc``). A simulation restarted
        from *after_step* then writes ``after_step + 1`` ... as if the erased steps had
        never been written. Refused while another session writes the run.

        Parameters
        ----------
        after_step : int
            The last step kept (``>= 0``).
        groups : sequence of str, optional
            The groups to truncate (default: every group of the run).

        Returns
        -------
        Truncation
            What was erased (the same on every rank).

        Raises
        ------
        ReadOnlyError, InvalidArgumentError, GroupNotFoundError, RunStateError, CatalogError
        """
        self._check_writable("truncate")

        def checked() -> tuple[int, list[str] | None]:
            step = check.integer(after_step, "after_step")
            return step, None if groups is None else [check_name(n, "group") for n in check.names(groups, "groups")]

        args, failure = capture(checked, rank=self.rank)
        _same(agree(self.comm, failure, args), "truncate")
        assert args is not None
        self.files.close_all()  # no rank keeps a handle on a file about to be deleted or cut

        def erase() -> Truncation:
            done = self.record(Truncated(self.run_id, args[0], None if args[1] is None else tuple(args[1]), 1,
                                         partial(confine, self.root, self.run_dir)))
            # the run's meta-file records the committed truncation here (see sdm.segments)
            return release_space(self.root, done, self.run_dir)

        done: Truncation = root_call(self.comm, erase)
        self.described.update(rel for rel, _ in done.cut_files)  # a cut file loses its trailer: a new one at close
        for name in done.groups:
            if name in self._groups:
                self._groups[name].engine._truncated(done.after_step)
        return done

    # ------------------------------------------------------------------ import
    @collective("import_array")
    def import_array(
        self,
        name: str,
        source: str | Path,
        *,
        dtype: Any,
        shape: Sequence[int] | None = None,
        count: int | None = None,
        offset: int = 0,
        view: Distribution | None = None,
        native: bool = True,
    ) -> Any:
        """Read an array from a raw binary file SDM did not write (collective).

        The paper's ``SDM_import``: distinct from :meth:`Group.read`, which reads what
        SDM wrote. Recorded in the catalog's ``imports`` table.

        Parameters
        ----------
        name : str
            What the application calls the data (recorded with the import).
        source : str or Path
            The raw file.
        dtype : numpy dtype-like
            Element type *with its byte order* as stored, e.g. ``">f8"`` or ``"<i4"``.
        shape, count : optional
            Global shape (rows first) or number of elements (one of them).
        offset : int
            Byte offset of the first element in the file.
        view : Distribution, optional
            How to spread the rows: contiguous blocks of rows by default (every rank
            reads its own block in parallel), or a :class:`~sdm.MapArray` (each rank
            reads exactly its rows, ghosts included) or any other view.
        native : bool
            Return the data in native byte order (default) instead of the file's.

        Returns
        -------
        numpy.ndarray
            This rank's local array (ghost rows/cells zero).

        Raises
        ------
        InvalidNameError, StorageError, DistributionError
        """
        from .importing import import_array

        return import_array(
            self, name, source, dtype=dtype, shape=shape, count=count, offset=offset, view=view, native=native
        )

    # -------------------------------------------------------------- attributes
    @collective("set_attributes")
    def set_attributes(self, attributes: dict[str, Any] | None = None, **kw: Any) -> None:
        """Set typed attributes on the run (collective)."""
        self._check_writable("set attributes")
        merged, failure = capture(merge_attributes, attributes, kw, rank=self.rank)
        agree(self.comm, failure)  # the same check, and error, on every rank
        root_call(self.comm, lambda: self.record(AttributesSet(self.run_id, merged)))  # type: ignore[arg-type]

    # ------------------------------------------------------------------- infos
    @collective("set_info")
    def set_info(self, name: str, array: Any) -> None:
        """Store an info (a named array kept as metadata) on the run (collective; see :mod:`sdm.infos`)."""
        from .infos import set_info

        set_info(self, name, array)

    @collective("info")
    def info(self, name: str) -> np.ndarray:
        """The run's info *name* as a numpy array, on every rank (collective; see :mod:`sdm.infos`)."""
        from .infos import get_info

        return get_info(self, name)

    @collective("infos")
    def infos(self) -> list[str]:
        """The names of the run's infos (collective; see :mod:`sdm.infos`)."""
        from .infos import list_infos

        return list_infos(self)

    @collective("find")
    def find(
        self,
        application: str | None = None,
        *,
        run: int | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        attributes: dict[str, Any] | None = None,
    ) -> list[RunRecord]:
        """Find runs and datasets in this session's catalog (collective).

        See :meth:`sdm.catalog.Catalog.find`; the result is the same on every rank.
        """
        def checked(**kwargs: Any) -> list[RunRecord]:
            check.text(application, "application", optional=True)
            if run is not None:
                kwargs["run"] = check.integer(run, "run id", minimum=1)  # numpy integers too
            for value, what in ((since, "since"), (until, "until")):
                if value is not None and not isinstance(value, datetime):
                    raise InvalidArgumentError(f"{what} must be a datetime.datetime, got {type(value).__name__}")
            check.mapping(attributes, "attributes")
            return self.open_catalog().find(**kwargs)

        return root_call(
            self.comm,
            checked,
            application=application,
            run=run,
            since=since,
            until=until,
            attributes=attributes,
        )

    # ---------------------------------------------------------------- internal
    def _check_view(self, view: Distribution, specs: Sequence[DatasetSpec]) -> None:
        """Check collectively that *view* fits every dataset of *specs* (raises on every rank)."""
        from .layout import MapArray

        def pieces() -> dict[tuple[int, ...], Any]:
            if view.kind == "ranked":  # no pieces: every rank gives its own rows (checked by data_view)
                return {}
            if isinstance(view, MapArray) and any(sp.order == "F" and len(sp.shape) > 1 for sp in specs):
                raise DistributionError("map-array views need datasets in C order (rows with their components contiguous)")
            return {sp.shape: view.piece(sp.shape, self.size, self.rank) for sp in specs}

        got, failure = capture(pieces, rank=self.rank)
        agree(self.comm, failure)
        assert got is not None  # no rank failed: every rank has its pieces, for the same shapes
        for shape, piece in got.items():
            agree(self.comm, capture(view.check, shape, piece, self.comm, rank=self.rank)[1])

    def record(self, change: Change[T]) -> T:
        """Make a change of the catalog (rank 0 only; use through ``root_call``): journaled first in the run's
        meta-file when the session writes one (:class:`~sdm.catalog.recorder.Recorder`); the catalog's answer."""
        self.open_catalog()
        return self._record(change)

    def _group_record(self, name: str) -> GroupRecord:
        """Rank 0: a group of the run as the catalog keeps it; the meta-file learns its ids (records name them)."""
        record = self.open_catalog().group(self.run_id, name)
        if self.meta is not None:
            self.meta.names.learn(record)
        return record

    def _record(self, change: Change[T]) -> T:
        """Rank 0: :meth:`record` without waiting for the background commit (that commit itself, open and close)."""
        assert self.catalog is not None, "catalog used outside rank 0 or after close"
        return Recorder(self.catalog, self.meta).record(change)

    def open_catalog(self) -> Catalog:
        """The session's catalog (rank 0 only, while the session is open; use through ``root_call``).

        With ``async_commit``, waits for the dump being committed in the background and
        raises its error first, so the catalog has one user at a time.
        """
        assert self.catalog is not None, "catalog used outside rank 0 or after close"
        self._raise_pending()  # one catalog user at a time; an earlier commit's error comes first
        return self.catalog

    def _check_writable(self, what: str) -> None:
        if self.mode == "r":
            raise ReadOnlyError(
                f"cannot {what}: the session of run {self.run_id} was opened with mode='r'; "
                "open with mode='a' to add data to an existing run"
            )

    def __repr__(self) -> str:
        return f"<sdm.Session {self.application!r} run={self.run_id} mode={self.mode!r} ranks={self.size}>"


def _same(calls: list[Any], what: str) -> None:
    """Raise :class:`CollectiveMismatchError` (on every rank) unless all ranks passed the same arguments."""
    if any(c != calls[0] for c in calls):
        diffs = {r: c for r, c in enumerate(calls) if c != calls[0]}
        raise CollectiveMismatchError(
            f"ranks made different {what} calls: rank 0 {calls[0]!r}, others {diffs!r}; every rank must pass the same arguments"
        )


def _check_open(mode: Any, catalog: Any, root: Any, run: Any, attributes: Any, problem_size: Any, method: Any,
                hints: Any, sync: Any, verify: Any, checksum: Any, planner_hints: Any) -> dict[str, Any]:
    """Check the arguments of :func:`open` (every rank; no catalog, no file touched).

    Raises
    ------
    InvalidArgumentError, HintError
    """
    check.text(mode, "mode", choices=_MODES)
    check.text(catalog, "catalog URL", optional=True)
    check.path(root, "root", optional=True)
    run_choice(run)  # None, a run id or "latest"
    check.mapping(attributes, "attributes")
    if problem_size is not None:
        try:
            json.dumps(problem_size, default=_plain, allow_nan=False)
        except (TypeError, ValueError, RecursionError) as exc:
            raise InvalidArgumentError(f"problem_size must be JSON-like (numbers, strings, lists, dicts): {exc}") from None
    check.text(method, "method")
    choose_method(method)  # the name is known
    for value, what in ((sync, "sync"), (checksum, "checksum")):
        check.optional_flag(value, what)
    check.flag(verify, "verify")
    return {"hints": session_hints(hints), "planner_hints": planner_hints_checked(planner_hints)}


def _plain(obj: Any) -> Any:
    if hasattr(obj, "tolist") and not isinstance(obj, type):
        return obj.tolist()
    raise TypeError(f"{type(obj).__name__} is not JSON")


_SECRET = ("catalog",)  # compared, never shown (a URL may hold a password)


def _canonical(value: Any) -> str:
    """A text that is equal on two ranks when the argument is (never raises)."""
    try:
        return json.dumps(value, sort_keys=True, default=repr)
    except Exception:  # noqa: BLE001 - e.g. keys of mixed types
        try:
            return repr(value)
        except Exception:  # noqa: BLE001
            return f"<{type(value).__name__}>"


def _effective(args: dict[str, Any]) -> dict[str, str]:
    """What each argument means on this rank (defaults from the environment resolved), as text."""
    out = {k: _canonical(v) for k, v in args.items() if k not in ("root", "catalog")}
    root, catalog = args["root"], args["catalog"]
    try:
        data_root = Path(root).resolve() if root is not None else config.default_root()
        out["root"] = str(data_root) if root is not None or args["mode"] == "w" else "the run's root"
        url = catalog or config.default_catalog_url(data_root)
        out["catalog"] = hashlib.sha256(str(url).encode()).hexdigest()
    except Exception as exc:  # noqa: BLE001 - reported by setup() on rank 0; here it only has to compare
        out["root"] = out["catalog"] = f"<{type(exc).__name__}>"
    return out


def _agree_arguments(comm: MPI.Comm, failure: Failure | None, args: dict[str, Any] | None) -> int:
    """One allgather: the first rank's failure, else a CollectiveMismatchError if arguments differ, on every rank.

    Parameters
    ----------
    failure : Failure or None
        This rank's failed check of the arguments (then *args* is None).
    args : dict or None
        The arguments as this rank resolved them.

    Returns the number of data files the session keeps open: the least over the ranks
    (each rank's limit may differ; closing a cached file is collective, so all use one).

    Raises
    ------
    SDMError
        The failure of the lowest failing rank.
    CollectiveMismatchError
        Naming every argument that differs and which ranks gave what (catalog URLs are
        compared but never shown).
    """
    mine = None
    if failure is None and args is not None:
        mine = _effective(args)
        try:
            mine["open files"] = str(config.open_files())
        except ValueError:  # a bad $SDM_OPEN_FILES: the default
            mine["open files"] = "64"
    everyone: list[dict[str, str]] = agree(comm, failure, mine)
    differ = []
    for key in everyone[0]:
        if key == "open files":
            continue
        values = [e[key] for e in everyone]
        if len(set(values)) == 1:
            continue
        if key in _SECRET:
            labels: dict[str, str] = {}
            shown = [labels.setdefault(v, f"URL {len(labels) + 1}") for v in values]
            differ.append(f"{key} ({by_value(shown)}; URLs not shown)")
        else:
            differ.append(f"{key} ({by_value([v if len(v) <= 80 else v[:77] + '...' for v in values])})")
    if differ:
        raise CollectiveMismatchError(
            "ranks opened the session with different arguments: " + ", ".join(differ)
            + "; every rank must call sdm.open with the same application, mode, run, root, catalog and options"
        )
    return min(int(e["open files"]) for e in everyone)


def _info(hints: dict[str, str] | None) -> MPI.Info:
    if not hints:
        return MPI.INFO_NULL
    info = MPI.Info.Create()
    for k, v in hints.items():
        info.Set(str(k), str(v))
    return info


def open(application: str, mode: str = "w", **kwargs: Any) -> Session:  # noqa: A001 - the API's verb
    """Open an SDM session (collective over ``comm``, default ``MPI.COMM_WORLD``).

    Parameters
    ----------
    application : str
        Application name (the catalog groups runs under it).
    mode : {"w", "r", "a"}
        ``"w"`` starts a new run; ``"r"`` reads an existing run; ``"a"`` adds to one.
    comm : MPI.Comm, optional
        The ranks taking part (default ``MPI.COMM_WORLD``); SDM works on a duplicate.
    catalog : str, optional
        Catalog URL: ``sqlite:///path`` or ``postgresql://user@host:port/db``.
        Default ``$SDM_CATALOG`` or ``sqlite:///<root>/catalog.db``.
    root : str or Path, optional
        Data root for new files (default ``$SDM_ROOT`` or ``./sdm-data``). Readers
        default to the root the run was written under.
    run : int or "latest", optional
        Modes ``"r"``/``"a"``: the run id to open, or ``"latest"`` for the newest run of the
        application whose attributes match. Without it exactly one run must match:
        several raise :class:`~sdm.errors.AmbiguousRunError` on every rank, listing them
        (id, creation time, attributes; newest first).
    attributes : dict, optional
        Mode ``"w"``: attributes of the new run. Modes ``"r"``/``"a"``: the conditions the
        run must match (``{key: value}`` or ``{key: (op, value)}``, as :func:`sdm.find`);
        not consulted with ``run=ID``.
    problem_size : object, optional
        Recorded with the run (e.g. the global grid).
    method : str
        I/O method (``"auto"`` lets the planner choose).
    hints : dict, optional
        MPI-IO hints (``{"cb_nodes": "2", "cb_buffer_size": "16777216"}``), also
        handed to the I/O methods.
    planner_hints : dict, optional
        What the application knows of its use of the data, for ``method="auto"``.
    sync : bool, optional
        Sync data to storage before each catalog commit (default ``$SDM_SYNC`` or on).
    verify : bool
        Check every read against the checksum recorded at write time.
    checksum : bool, optional
        Record a ``mix64-v2`` checksum with every write (default ``$SDM_CHECKSUM`` or on;
        it costs one pass over the data, about 1.2-3 GB/s per core, overlapped with the
        I/O for large pieces).
    async_commit : bool
        Commit each dump's catalog rows (one transaction per ``write``/``write_step``)
        in the background on rank 0, so no rank waits for the transaction (default
        False: every rank returns from a write once its rows are committed). A row is
        still committed only after its bytes are synced on every node. A commit that
        fails is reported at the session's next collective call (a write, a read, any
        call that uses the catalog) or at :meth:`Session.close`, as the same
        :class:`~sdm.SDMError` on every rank; the rows committed before it stay, and
        the failed dump's bytes are left unreferenced (``sdm verify`` finds them).
    metafile : bool
        Mode ``"w"``: keep the run's meta-file (default True; see ``docs/format.md``).
        False saves its appends (two ``fsync`` per change with ``sync``) but the run then
        cannot be rebuilt from its data: its marker says so and ``sdm rebuild`` refuses
        it.  An appending session continues the run's own choice; ``metafile=False`` on a
        run that keeps a meta-file is refused.

    Returns
    -------
    Session

    Examples
    --------
    >>> with sdm.open("ASTRO3D", attributes={"resolution": 64}) as s:   # doctest: +SKIP
    ...     g = s.make_group("analysis", ["rho", "e"], dtype="f4", shape=(64, 64, 64))
    ...     g.write("rho", 0, local_rho)
    """
    return Session(application, mode, **kwargs)


def _check_coords(coords: Any, specs: Sequence[DatasetSpec], group: str) -> None:
    """Coordinates name a dimension some dataset has, one 1-D array as long as that dimension.

    Raises
    ------
    InvalidArgumentError
    """
    extents: dict[str, set[int]] = {}
    for spec in specs:
        for d, n in zip(spec.dims or (), spec.shape):
            extents.setdefault(d, set()).add(n)
    for dim, values in check.mapping(coords, "coords").items():
        if dim not in extents:
            raise InvalidArgumentError(f"group {group!r}: coordinate {dim!r} names no dimension of its datasets "
                                       f"(dims: {sorted(extents)})")
        arr = np.asarray(values)
        if arr.ndim != 1 or {arr.size} != extents[dim]:
            raise InvalidArgumentError(f"group {group!r}: coordinate {dim!r} must be 1-D with "
                                       f"{'/'.join(map(str, sorted(extents[dim])))} values, got shape {arr.shape}")


def _archive_of(tier: Any, archive: Any) -> str | None:
    """The archive a group writes to (``s3://BUCKET/PREFIX``), or None for the fast tier (checked, every rank alike).

    Raises
    ------
    InvalidArgumentError
    """
    import os

    from .storage.backends.objectstore import parse_url

    if tier not in ("fast", "archive"):
        raise InvalidArgumentError(f"tier must be 'fast' or 'archive', got {tier!r}")
    if tier == "fast":
        if archive is not None:
            raise InvalidArgumentError(f"archive={archive!r} is for groups with tier='archive'")
        return None
    url = archive if archive is not None else os.environ.get("SDM_ARCHIVE")
    if not url:
        raise InvalidArgumentError("tier='archive' needs the object store: archive='s3://BUCKET/PREFIX' "
                                   "(or $SDM_ARCHIVE)")
    check.text(url, "archive")
    bucket, prefix = parse_url(url)
    return f"s3://{bucket}/{prefix}".rstrip("/")


def _ensure_bucket(url: str) -> None:
    """Rank 0: make the archive's bucket if needed (which also proves the server and credentials work)."""
    from .storage.backends.objectstore import ObjectStore

    ObjectStore(url).ensure_bucket()


def _check_on_fast_tier(catalog: Catalog, run_id: int) -> None:
    """Refuse to append to a run whose level-2/3 files are not all on the fast tier (purged, or being staged).

    New steps of a level-2/3 file are written into the file on the fast tier: a file
    purged from it would be made again around a hole where its archived steps were.
    Level-1 files (archive-tier groups' objects among them) are never written again:
    new steps go to new files.

    Raises
    ------
    RunStateError
    """
    from .catalog.tiers import FAST, copies

    appended = {f.path for f in catalog.files(run_id) if f.level > 1}
    away = sorted(path for path, found in copies(catalog, run_id).items()
                  if path in appended and not any(c.tier == FAST and c.verified for c in found))
    if away:
        raise RunStateError(
            f"run {run_id} cannot be appended to: {len(away)} of its files are not on the fast tier "
            f"({', '.join(away[:3])}{', ...' if len(away) > 3 else ''}); `sdm stage {run_id}` first")

