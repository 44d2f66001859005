"""Sessions: the paper's SDM_initialize / SDM_finalize as a context manager.

A :class:`Session` is opened collectively by every rank of a communicator for one
application.  In mode ``"w"`` it registers a new run; in ``"r"`` it opens an existing
run (by id, or the newest whose attributes match) for reading; ``"a"`` reopens an
existing run to add data.  Only rank 0 talks to the catalog.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any, Sequence

from mpi4py import MPI

from . import config
from ._collective import agree, capture, root_call
from .catalog import Catalog, DatasetSpec, RunRecord
from .errors import InvalidNameError, ReadOnlyError
from .group import Dataset, Group
from .layout import Distribution
from .planner import Planner, choose_method
from .storage import FileCache, check_level, check_name, durability

__all__ = ["Session", "open"]

_MODES = ("w", "r", "a")


class Session:
    """A collective connection of an MPI job to SDM for one application and run.

    Use :func:`sdm.open` to create one.  Attributes ``run_id``, ``run`` (the catalog
    record), ``root`` (the data root) and ``catalog_url`` describe where things go.
    """

    def __init__(
        self,
        application: str,
        mode: str = "w",
        *,
        comm: MPI.Comm | None = None,
        catalog: str | None = None,
        root: str | Path | None = None,
        run: int | None = None,
        attributes: dict[str, Any] | None = None,
        problem_size: Any = None,
        method: str = "auto",
        hints: dict[str, str] | None = None,
        sync: bool | None = None,
        verify: bool = False,
        checksum: bool | None = None,
        planner_hints: dict[str, Any] | None = None,
    ) -> None:
        # SDM's collectives run on a private duplicate, never mixing with the application's
        self.comm = (comm if comm is not None else MPI.COMM_WORLD).Dup()
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        self.application = application
        self.mode = mode
        self.method = method
        self.sync = config.sync_enabled() if sync is None else bool(sync)
        self.verify = bool(verify)
        self.checksum = config.checksum_enabled() if checksum is None else bool(checksum)
        self.hints = dict(hints or {})
        self.catalog: Catalog | None = None
        self._closed = False
        self._groups: dict[str, Group] = {}

        def setup() -> tuple[str, str, RunRecord]:
            check_name(application, "application")
            if mode not in _MODES:
                raise InvalidNameError(f"mode must be one of {_MODES}, got {mode!r}")
            choose_method(method)  # validates the name
            data_root = Path(root).resolve() if root is not None else config.default_root()
            url = catalog or config.default_catalog_url(data_root)
            self.catalog = Catalog(url, create=(mode == "w"))
            try:
                if mode == "w":
                    run_id = self.catalog.create_run(
                        application,
                        nprocs=self.size,
                        root=str(data_root),
                        problem_size=problem_size,
                        attributes=attributes,
                    )
                    rec = self.catalog.run(run_id)
                elif run is not None:
                    rec = self.catalog.run(run, application=application)
                else:
                    rec = self.catalog.latest_run(application, attributes)
            except Exception:
                self.catalog.close()
                self.catalog = None
                raise
            if mode != "w" and root is None:
                data_root = Path(rec.root)
            calibration = self.catalog.latest_calibration(str(data_root))
            return url, str(data_root), rec, calibration

        try:
            agree(self.comm, capture(durability.sync_mode, self.hints, rank=self.rank)[1])  # the same error on all
            self.catalog_url, root_text, self.run, calibration = root_call(self.comm, setup)
        except BaseException:
            self.comm.Free()
            raise
        self.root = Path(root_text)
        self.run_id = self.run.id
        self.planner = Planner(calibration, planner_hints, self.hints)
        self.files = FileCache(self.comm, writable=(mode != "r"), capacity=config.open_files(), info=_info(hints),
                               sync_mode=durability.sync_mode(self.hints))
        self.sources = FileCache(self.comm, writable=False, capacity=8, info=_info(hints))  # imported files

    # ---------------------------------------------------------------- context
    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close files and the catalog (collective; the paper's SDM_finalize)."""
        if self._closed:
            return
        self._closed = True
        for g in self._groups.values():
            g._free()
        self.files.close_all()
        self.sources.close_all()
        if self.catalog is not None:
            self.catalog.close()
            self.catalog = None
        self.comm.Free()

    # ------------------------------------------------------------------ groups
    def make_group(
        self,
        name: str,
        datasets: Sequence[str | Dataset],
        *,
        dtype: Any = None,
        shape: Sequence[int] | None = None,
        order: str = "C",
        level: int = 3,
        view: Distribution | None = None,
        attributes: dict[str, Any] | None = None,
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
            File organization level (see :mod:`sdm.storage.organization`).
        view : Distribution, optional
            Data view for every dataset (default: :class:`sdm.Block` over all ranks).
        attributes : dict, optional
            Typed attributes of the group and its datasets.

        Returns
        -------
        Group

        Raises
        ------
        ReadOnlyError, InvalidNameError, GroupExistsError
        """
        self._check_writable("define a group")

        def specs() -> list[DatasetSpec]:
            check_name(name, "group")
            check_level(level)
            out = [Dataset.of(d).spec(dtype=dtype, shape=shape, order=order) for d in datasets]
            names = [s.name for s in out]
            if not out:
                raise InvalidNameError(f"group {name!r} needs at least one dataset")
            if len(set(names)) != len(names):
                raise InvalidNameError(f"group {name!r} lists a dataset twice: {names}")
            return out

        local, failure = capture(specs, rank=self.rank)
        agree(self.comm, failure)
        record = root_call(self.comm, self.catalog_call, "define_group", self.run_id, name, level, local)
        group = Group(self, record)
        self._groups[name] = group
        if attributes:
            group.set_attributes(attributes)
        if view is not None:
            group.data_view(view)
        return group

    def group(self, name: str) -> Group:
        """Return a group of this run (defined now or by the run that wrote it).

        Raises
        ------
        GroupNotFoundError
        """
        if name in self._groups:
            return self._groups[name]
        record = root_call(self.comm, self.catalog_call, "group", self.run_id, name)
        group = Group(self, record)
        self._groups[name] = group
        return group

    @property
    def groups(self) -> list[str]:
        """Names of the run's groups."""
        rec = root_call(self.comm, self.catalog_call, "run", self.run_id)
        return [g.name for g in rec.groups]

    # ------------------------------------------------------------------ import
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
    def set_attributes(self, attributes: dict[str, Any] | None = None, **kw: Any) -> None:
        """Set typed attributes on the run (collective)."""
        self._check_writable("set attributes")
        root_call(self.comm, self.catalog_call, "set_attributes", self.run_id, {**(attributes or {}), **kw})

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
        return root_call(
            self.comm,
            self.catalog_call,
            "find",
            application=application,
            run=run,
            since=since,
            until=until,
            attributes=attributes,
        )

    # ---------------------------------------------------------------- internal
    def catalog_call(self, _name: str, /, *args: Any, **kwargs: Any) -> Any:
        """Call a catalog method (rank 0 only; use through ``root_call``)."""
        assert self.catalog is not None, "catalog used outside rank 0 or after close"
        return getattr(self.catalog, _name)(*args, **kwargs)

    def _check_writable(self, what: str) -> None:
        if self.mode == "r":
            raise ReadOnlyError(
                f"cannot {what}: the session of run {self.run_id} was opened with mode='r'; "
                "open with mode='a' to add data to an existing run"
            )

    def __repr__(self) -> str:
        return f"<sdm.Session {self.application!r} run={self.run_id} mode={self.mode!r} ranks={self.size}>"


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
    run : int, optional
        Run id to open in modes ``"r"``/``"a"``.
    attributes : dict, optional
        Mode ``"w"``: attributes of the new run. Modes ``"r"``/``"a"`` without ``run``:
        select the newest run whose attributes match.
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
        it costs one pass over the data, about 1.5-3 GB/s per core).

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
