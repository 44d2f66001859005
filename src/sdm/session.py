"""Sessions: the paper's SDM_initialize / SDM_finalize as a context manager.

A :class:`Session` is opened collectively by every rank of a communicator for one application. In mode ``"w"``
it registers a new run; in ``"r"`` it opens an existing run (by id, ``"latest"``, or the one run whose attributes
match, see :mod:`sdm.catalog.selection`) to read; ``"a"`` reopens one to add data. Only rank 0 talks to the
catalog. Each call's protocol is in :mod:`sdm.engine`.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
from mpi4py import MPI

from . import _validate as check
from ._collective import agree, capture, root_call
from .catalog import RunRecord, Truncation
from .catalog.changes import AttributesSet
from .values import merge_attributes
from .engine import session_close, truncate as _truncate
from .engine.commits import Commits
from .engine.find import find_runs
from .engine.checks import check_writable
from .engine.groups import define_group, same_calls
from .engine.operations import Operations, collective
from .engine.session_open import agree_options, open_files_of, open_run
from .importing import import_array as _import_array
from .infos import get_info, list_infos, set_info as _set_info
from .errors import InvalidArgumentError
from .group import Dataset, Group
from .layout import Distribution
from .planner import Planner
from .planner.learned import from_rows
from .planner.model import METHODS
from .storage import check_name, runs

if TYPE_CHECKING:
    from .catalog.catalog import Catalog
    from .catalog.metafile import MetaFile

__all__ = ["Session", "open"]


class Session:
    """A collective connection of an MPI job to SDM for one application and run.

    Use :func:`sdm.open` to create one. Attributes ``run_id``, ``run`` (the catalog record), ``root`` (the data
    root), ``run_dir`` (the run's directory under it) and ``catalog_url`` (for showing: a password is masked as
    ``user:***@``) describe where things go; ``previous_state`` is the run's state when the session opened it
    (``"new"``, ``"open"``, ``"closed"`` or ``"interrupted"``: its last writers died without closing it);
    ``async_commit``: whether dumps are committed in the background; ``asynchronous`` and ``max_in_flight``:
    nonblocking dumps by default, and their bound (see :func:`open`).
    """

    def __init__(self, application: str, mode: str = "w", *, comm: MPI.Comm | None = None, catalog: str | None = None,
                 root: str | Path | None = None, run: int | str | None = None, attributes: dict[str, Any] | None = None,
                 problem_size: Any = None, method: str = "auto", hints: dict[str, str] | None = None,
                 sync: bool | None = None, verify: bool = False, checksum: bool | None = None,
                 planner_hints: dict[str, Any] | None = None, async_commit: bool = False, metafile: bool = True,
                 asynchronous: bool = False, max_in_flight: int | None = None) -> None:
        if comm is not None and not isinstance(comm, MPI.Intracomm):
            raise InvalidArgumentError(f"comm must be an MPI intracommunicator (e.g. MPI.COMM_WORLD), got {type(comm).__name__}")
        self.comm = (comm if comm is not None else MPI.COMM_WORLD).Dup()  # SDM's collectives: a private duplicate
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self._ops = Operations(self.comm)  # the opening exchange of every collective call (sdm.engine)
        self._ops.current = ("sdm.open", (application, mode), {})
        self.application, self.mode, self.method = application, mode, method
        agreed, open_files = agree_options(self._ops, self.comm, self.rank, application, mode, dict(
            catalog=catalog, root=root, run=run, attributes=attributes, problem_size=problem_size, method=method,
            hints=hints, sync=sync, verify=verify, checksum=checksum, planner_hints=planner_hints,
            async_commit=async_commit, metafile=metafile, asynchronous=asynchronous, max_in_flight=max_in_flight))
        self.sync, self.verify, self.checksum = agreed["sync"], agreed["verify"], agreed["checksum"]
        self.hints: dict[str, str] = dict(agreed["hints"] or {})
        self.async_commit, self.metafile = agreed["async_commit"], agreed["metafile"]
        self.asynchronous, self.max_in_flight = agreed["asynchronous"], agreed["max_in_flight"]
        # rank 0 (through root_call): record a change, the catalog, background commits (sdm.engine.commits)
        c = self._commits = Commits()  # the catalog, the run's meta-file, the background commits
        self.record, self.open_catalog, self._commit_later, self._settle = (c.record, c.open_catalog, c.commit_later,
                                                                            c.settle)
        self._lock: runs.RunLock | None = None  # rank 0 of a writing session: its hold on the run
        self._closed = False
        self._groups: dict[str, Group] = {}
        self.described: set[str] = set()  # level-2/3 files written or cut (relative paths): trailers at close
        self.catalog_url, root_text, self.run, (calibration, learned), self.previous_state = open_run(self, agreed)
        self.root = Path(root_text)
        self.run_id = self._commits.run_id = self.run.id
        self.run_dir = self.run.dir or runs.legacy_run_dir(self.run.application, self.run.id)
        self.planner = Planner(calibration, agreed["planner_hints"], self.hints, learned=from_rows(learned, METHODS),
                               run_id=self.run_id)
        self.files, self.sources = open_files_of(self, open_files)  # the run's data files; imported files

    @property
    def catalog(self) -> Catalog | None:  # rank 0, while the session is open; None elsewhere
        return self._commits.catalog

    @property
    def meta(self) -> MetaFile | None:  # rank 0 of a writing session that keeps a meta-file; None elsewhere
        return self._commits.meta

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        """Close the session; after an exception, without waiting forever for ranks that did not raise it.

        An exception raised on every rank (an SDM error, or the same error of the application's code) closes
        it collectively, as ``close``. One that left an SDM call on this rank alone (``KeyboardInterrupt``, a
        bug), or that the other ranks do not join in closing within ``$SDM_CLOSE_WAIT`` seconds (default 5),
        is reported and ends the job with ``MPI_Abort`` (:mod:`sdm.engine.operations`); the run is left
        ``interrupted``, every committed step readable, as after a ``KeyboardInterrupt`` on every rank.
        """
        session_close.close_after(self, exc)

    def close(self) -> None:
        """Close files and the catalog (collective; the paper's SDM_finalize).

        A writing session also records that it stopped writing the run: the last one marks it ``closed``. Nonblocking
        dumps and, with ``async_commit=True``, the last dump's commit are waited for first; if one (or any commit
        not yet reported) failed, the session still closes and its error is raised on every rank. A session whose
        ranks entered different operations only releases what this rank holds, and leaves the run ``interrupted``.
        """
        session_close.close(self)

    def wait(self) -> None:
        """Wait for every nonblocking dump (local); raise a failure not yet reported (:mod:`sdm.engine.background`)."""
        self._ops.drain()

    @collective("make_group")
    def make_group(self, name: str, datasets: Sequence[str | Dataset], *, dtype: Any = None,
                   shape: Sequence[int] | None = None, order: str = "C", level: int | None = None,
                   view: Distribution | None = None, attributes: dict[str, Any] | None = None, kind: str = "state",
                   steps_per_file: int | None = None, tier: str = "fast", archive: str | None = None,
                   dims: Sequence[str] | None = None, coords: dict[str, Any] | None = None,
                   subfiles: int | str | None = None, compression: Any = None,
                   chunks: Sequence[int] | None = None) -> Group:
        """Define a data group (the paper's ``SDM_make_datalist``), collectively.

        ``dtype``, ``shape``, ``order``, ``dims``, ``compression`` and ``chunks`` apply to every dataset
        that does not set its own (:class:`sdm.Dataset`); attributes propagate to every dataset.

        Parameters
        ----------
        name : str
            Group name (unique in the run).
        datasets : sequence of str or Dataset
            The datasets of the group, in order.
        dtype, shape, order
            numpy dtype, global shape, ``"C"`` or ``"F"``.
        level : {1, 2, 3}
            File organization level (:mod:`sdm.storage.organization`); default 3, 1 on the archive tier.
        view : Distribution, optional
            Data view for every dataset (default: :class:`sdm.Block` over all ranks).
        attributes : dict, optional
            Typed attributes of the group and its datasets.
        kind : {"state", "topology"}
            Written every step (default), or once or rarely, e.g. a mesh (:mod:`sdm.segments`).
        steps_per_file : int, optional
            Levels 2 and 3: a new data file every *steps_per_file* steps (default one file).
        tier : {"fast", "archive"}
            Where the writes go: files on the fast tier (default), or objects in an S3 object store, one per
            dataset and step (level 1), uploaded in parts by aggregators (:mod:`sdm.io.remote`), each a verified
            archive copy that reads, ``sdm stage`` and ``sdm purge`` treat as any other.
        archive : str, optional
            ``tier="archive"``: the object store, ``s3://BUCKET/PREFIX`` (default ``$SDM_ARCHIVE``;
            the bucket is made if needed; server and credentials as for ``sdm migrate``).
        dims : sequence of str, optional
            Dimension names (``("z", "y", "x")``) for xarray and the exports (default ``dim_0``, ...).
        coords : dict of str to array, optional
            Values of named dimensions (``{"x": np.linspace(0, 1, nx)}``), kept as infos ``coord.<name>``.
        subfiles : int or "auto", optional
            Levels 2 and 3 on the fast tier: each dataset step as K extents in K subfiles, each written and read
            whole by one rank with POSIX I/O (:mod:`sdm.storage.subfiles`). ``"auto"``: the planner chooses K or
            one shared file per write and records why. Default: one shared file.
        compression : str, dict or None, optional
            Datasets stored as chunks encoded by their writers (:mod:`sdm.codecs`: ``"zstd"``, ``"lz4"``,
            ``"blosc2:zstd:5:bitshuffle"``, ``{"codec": "zfp", "tolerance": 1e-3}``, ...). Default: raw bytes.
        chunks : sequence of int, optional
            Compressed datasets: each writer cuts its box along multiples of this shape (default: one chunk).

        Returns
        -------
        Group

        Raises
        ------
        ReadOnlyError, InvalidNameError, GroupExistsError, CompressionSpecError
        """
        self._check_writable("define a group")
        record = define_group(
            self, name, lambda: [Dataset.of(d).spec(dtype=dtype, shape=shape, order=order, dims=dims, chunks=chunks,
                                                    compression=compression) for d in check.names(datasets, "datasets")],
            level=level, view=view, attributes=attributes, kind=kind, steps_per_file=steps_per_file, tier=tier,
            archive=archive, coords=coords, subfiles=subfiles)
        group = self._groups[name] = Group(self, record)
        if attributes:
            group.set_attributes(attributes)
        for dim, values in (coords or {}).items():
            group.set_info(f"coord.{dim}", np.asarray(values))
        if view is not None:  # agreed on and checked against every shape by define_group
            group.engine._set_data_view(view, agreed=True)
        return group

    @collective("group")
    def group(self, name: str) -> Group:
        """Return a group of this run (defined now or by the run that wrote it).

        Read from the catalog at its first lookup (a group defined after the session opened too) and kept for
        the session: its step lists (and the first axis of ``group[name]``) stay as they were then; steps
        written since show in a new session (``group.read`` of one step looks it up).

        Raises
        ------
        GroupNotFoundError
        """
        same_calls(agree(self.comm, *capture(check_name, name, "group", rank=self.rank)[::-1]), "group", ("name",))
        if name not in self._groups:
            self._groups[name] = Group(self, root_call(self.comm, self._commits.group_record, name))
        return self._groups[name]

    @property
    @collective("groups")
    def groups(self) -> list[str]:
        """Names of the run's groups."""
        rec = root_call(self.comm, lambda: self.open_catalog().run(self.run_id))
        return [g.name for g in rec.groups]

    @collective("truncate")
    def truncate(self, after_step: int, groups: Sequence[str] | None = None) -> Truncation:
        """Erase every step after *after_step* of the run's groups (collective; PDS segments).

        One catalog transaction erases the rows of steps ``> after_step`` (of every group, or of those named), sets
        the datasets' step summaries to what remains and marks the groups, whose new steps must then be ``>
        after_step``; after its commit, files left without data are deleted and freed tails cut (a crash in between
        leaves unreferenced bytes for ``sdm gc``). A simulation restarted from *after_step* then writes ``after_step +
        1`` ... as if the erased steps had never been written. Refused while another session writes the run.

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
        return _truncate.truncate(self, after_step, groups)

    @collective("import_array")
    def import_array(self, name: str, source: str | Path, *, dtype: Any, shape: Sequence[int] | None = None,
                     count: int | None = None, offset: int = 0, view: Distribution | None = None,
                     native: bool = True) -> Any:
        """Read an array from a raw binary file SDM did not write (collective).

        The paper's ``SDM_import`` (:meth:`Group.read` reads what SDM wrote); recorded in the catalog's
        ``imports`` table.

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
            How to spread the rows: contiguous blocks by default (each rank reads its block in parallel), a
            :class:`~sdm.MapArray` (each rank reads its rows, ghosts included) or any.
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
        return _import_array(self, name, source, dtype=dtype, shape=shape, count=count, offset=offset, view=view,
                            native=native)

    @collective("set_attributes")
    def set_attributes(self, attributes: dict[str, Any] | None = None, **kw: Any) -> None:
        """Set typed attributes on the run (collective)."""
        self._check_writable("set attributes")
        merged, failure = capture(merge_attributes, attributes, kw, rank=self.rank)
        agree(self.comm, failure)  # the same check, and error, on every rank
        root_call(self.comm, lambda: self.record(AttributesSet(self.run_id, merged)))  # type: ignore[arg-type]

    @collective("set_info")
    def set_info(self, name: str, array: Any) -> None:
        """Store an info (a named array kept as metadata) on the run (collective; see :mod:`sdm.infos`)."""
        _set_info(self, name, array)

    @collective("info")
    def info(self, name: str) -> np.ndarray:
        """The run's info *name* as a numpy array, on every rank (collective; see :mod:`sdm.infos`)."""
        return get_info(self, name)

    @collective("infos")
    def infos(self) -> list[str]:
        """The names of the run's infos (collective; see :mod:`sdm.infos`)."""
        return list_infos(self)

    @collective("find")
    def find(self, application: str | None = None, *, run: int | None = None, since: datetime | None = None,
             until: datetime | None = None, attributes: dict[str, Any] | None = None) -> list[RunRecord]:
        """Find runs and datasets in this session's catalog (collective; see :meth:`sdm.catalog.Catalog.find`; the
        result is the same on every rank)."""
        return root_call(self.comm, find_runs, self._commits, application=application, run=run, since=since,
                         until=until, attributes=attributes)

    def _check_writable(self, what: str) -> None:
        check_writable(self.mode, self.run_id, what)

    def __repr__(self) -> str:
        return f"<sdm.Session {self.application!r} run={self.run_id} mode={self.mode!r} ranks={self.size}>"


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
        ``sqlite:///path`` or ``postgresql://user@host:port/db`` (default ``$SDM_CATALOG`` or
        ``sqlite:///<root>/catalog.db``).
    root : str or Path, optional
        Data root for new files (default ``$SDM_ROOT`` or ``./sdm-data``; readers: the run's).
    run : int or "latest", optional
        Modes ``"r"``/``"a"``: the run id, or ``"latest"``: the newest run of the application whose attributes match.
        Without it exactly one run must match: several raise :class:`~sdm.errors.AmbiguousRunError` on every rank,
        listing them (newest first).
    attributes : dict, optional
        Mode ``"w"``: the new run's attributes. Modes ``"r"``/``"a"``: conditions the run must match (``{key: value}``
        or ``{key: (op, value)}``, as :func:`sdm.find`; not with ``run=ID``).
    problem_size : object, optional
        Recorded with the run (e.g. the global grid).
    method : str
        I/O method (``"auto"`` lets the planner choose).
    hints : dict, optional
        MPI-IO hints (``{"cb_nodes": "2"}``), also handed to the I/O methods.
    planner_hints : dict, optional
        What the application knows of its use of the data, for ``method="auto"``.
    sync : bool, optional
        Sync data to storage before each catalog commit (default ``$SDM_SYNC`` or on).
    verify : bool
        Check every read against the checksum recorded at write time.
    checksum : bool, optional
        Record a ``mix64-v2`` checksum with every write (default ``$SDM_CHECKSUM`` or on; one pass over the data,
        overlapped with the I/O for large pieces).
    async_commit : bool
        Commit each dump's rows (one transaction per ``write``/``write_step``) in the background on rank 0, after its
        bytes are synced on every node, so no rank waits for it (default False). A failed commit is raised as the same
        :class:`~sdm.SDMError` on every rank at the next collective call or :meth:`Session.close`; the rows committed
        before it stay, its bytes are left unreferenced (``sdm verify`` finds them).
    asynchronous : bool
        Writes are nonblocking unless a call says ``wait=True`` (:meth:`Group.write`); needs MPI with
        ``MPI.THREAD_MULTIPLE``. Default False.
    max_in_flight : int, optional
        Bytes of nonblocking dumps' copies each rank holds at most (a submission past it waits); default physical
        memory / (8 x cores), at least 16 MiB.
    metafile : bool
        Mode ``"w"``: keep the run's meta-file (default True; ``docs/format.md``). False saves its appends but the run
        cannot be rebuilt from its data (its marker says so; ``sdm rebuild`` refuses it). An appending session
        continues the run's choice (``metafile=False`` on a run with a meta-file is refused).

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
