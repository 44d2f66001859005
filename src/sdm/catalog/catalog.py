"""The catalog API: one class over SQLite and PostgreSQL, chosen by URL.

Only rank 0 of an SDM session opens a :class:`Catalog`; the other ranks receive what
they need by broadcast.  Every method is one short transaction.

:class:`Catalog` is a facade over the stores of :mod:`sdm.catalog.runs`,
:mod:`~sdm.catalog.groups`, :mod:`~sdm.catalog.writes`, :mod:`~sdm.catalog.info_rows` and
:mod:`~sdm.catalog.calibrations`, which share one
:class:`~sdm.catalog.connection.Database` (its connections and transactions). Each of its
methods calls the store's method of that name (:func:`_via`: the same signature, checked
by mypy, and the same documentation), so a call costs what it cost the store: no extra
statement, no extra round trip.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from functools import wraps
from typing import Callable, Concatenate, ParamSpec, TypeVar

from sqlalchemy.engine import Connection, Engine

from . import schema as S
from .calibrations import Calibrations
from .connection import Database, normalize_url
from .groups import Groups
from .info_rows import Infos
from .records import DatasetSpec
from .runs import Runs
from .urls import redact_url
from .writes import Writes

__all__ = ["Catalog", "normalize_url", "redact_url", "DatasetSpec"]

_P = ParamSpec("_P")
_R = TypeVar("_R")
_S = TypeVar("_S")


def _via(store: Callable[[Catalog], _S], method: Callable[Concatenate[_S, _P], _R]
         ) -> Callable[Concatenate[Catalog, _P], _R]:
    """A method of :class:`Catalog` that calls *method* on the catalog's store *store* picks.

    It has *method*'s name, signature and documentation (``inspect.signature`` and
    ``help`` show them); mypy checks its calls against *method*'s parameters.
    """

    @wraps(method)
    def delegate(self: Catalog, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        return method(store(self), *args, **kwargs)

    delegate.__module__, delegate.__qualname__ = __name__, f"Catalog.{method.__name__}"
    return delegate


def _db(cat: Catalog) -> Database:
    return cat._db


def _runs(cat: Catalog) -> Runs:
    return cat._runs


def _groups(cat: Catalog) -> Groups:
    return cat._groups


def _writes(cat: Catalog) -> Writes:
    return cat._writes


def _infos(cat: Catalog) -> Infos:
    return cat._infos


def _calibrations(cat: Catalog) -> Calibrations:
    return cat._calibrations


class Catalog:
    """Metadata catalog of runs, groups, datasets, attributes, files and writes.

    Parameters
    ----------
    url : str
        ``sqlite:///path/to/catalog.db`` (created if missing) or
        ``postgresql://user[:password]@host[:port]/dbname`` (the database must exist).
    create : bool
        Create the schema when the catalog is empty (default).  Readers pass ``False``.

    Raises
    ------
    CatalogUnavailableError
        The URL cannot be opened.
    CatalogVersionError
        The catalog holds a schema version this SDM does not know.
    CatalogDamagedError
        The catalog file is empty, not a database, or damaged (never replaced by a new one).

    Notes
    -----
    :attr:`url` is the URL as it may be shown, its password masked (``user:***@``); the
    real one lives only in the engine's connection settings.

    A full disk under the catalog raises :class:`~sdm.errors.CatalogError` with
    ``errno.ENOSPC`` from any method that writes, the catalog left as it was; a reader
    (``create=False``) of an SQLite catalog on a full disk still opens and reads it
    (see :mod:`sdm.catalog.database`).

    Each method belongs to the store of one kind of record, over the catalog's one
    :class:`~sdm.catalog.connection.Database`: :class:`~sdm.catalog.runs.Runs` (runs,
    applications, searches), :class:`~sdm.catalog.groups.Groups` (groups, datasets,
    attributes, distributions), :class:`~sdm.catalog.writes.Writes` (writes, extents,
    files and their space), :class:`~sdm.catalog.info_rows.Infos` (infos) and
    :class:`~sdm.catalog.calibrations.Calibrations` (calibrations, the planner's learned
    choices); the copies per storage tier are :mod:`sdm.catalog.tiers`' functions over a
    catalog.
    """

    def __init__(self, url: str, *, create: bool = True) -> None:
        self._db = Database(url, create=create)
        #: Whether this object created the catalog (an SQLite file it made: no run, no calibration yet)
        self.created = self._db.created
        self._runs = Runs(self._db)
        self._groups = Groups(self._db, self._runs)
        self._writes = Writes(self._db)
        self._infos = Infos(self._db)
        self._calibrations = Calibrations(self._db)

    @property
    def url(self) -> str:
        """The catalog URL with any password masked (safe for messages and logs)."""
        return self._db.url

    def __repr__(self) -> str:
        return f"Catalog({self.url!r})"

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine of the catalog (the process's, made at first use; see :func:`database.make_engine`)."""
        return self._db.engine

    @property
    def _engine(self) -> Engine | None:
        """The engine if one was made (an SQLite catalog at the current revision reads without one)."""
        return self._db._engine

    @property
    def id(self) -> str:
        """The catalog's unique id (recorded in the directory of every run it creates)."""
        return self._db.id

    @property
    def schema_version(self) -> str:
        """The schema revision in use (an Alembic revision id)."""
        return S.SCHEMA_VERSION

    def _tx(self) -> AbstractContextManager[Connection]:
        """A write transaction (inside :meth:`batch`: the batch's, committed with it)."""
        return self._db.tx()

    def _connect(self) -> AbstractContextManager[Connection]:
        """A connection to read with (inside :meth:`batch`: the batch's, which sees its changes)."""
        return self._db.connect()

    # the connections and transactions
    integrity_check = _via(_db, Database.integrity_check)
    close = _via(_db, Database.close)
    batch = _via(_db, Database.batch)

    # runs, applications and searches
    applications = _via(_runs, Runs.applications)
    create_run = _via(_runs, Runs.create_run)
    new_run = _via(_runs, Runs.new_run)
    restore_run = _via(_runs, Runs.restore_run)
    settle_run = _via(_runs, Runs.settle_run)
    open_run = _via(_runs, Runs.open_run)
    close_run = _via(_runs, Runs.close_run)
    mark_interrupted = _via(_runs, Runs.mark_interrupted)
    run = _via(_runs, Runs.run)
    latest_run = _via(_runs, Runs.latest_run)
    select_run = _via(_runs, Runs.select_run)
    find = _via(_runs, Runs.find)
    list_runs = _via(_runs, Runs.list_runs)
    counts = _via(_runs, Runs.counts)

    # groups, datasets, attributes and distributions
    set_attributes = _via(_groups, Groups.set_attributes)
    define_group = _via(_groups, Groups.define_group)
    group = _via(_groups, Groups.group)
    set_distribution = _via(_groups, Groups.set_distribution)

    # infos
    set_info = _via(_infos, Infos.set_info)
    info = _via(_infos, Infos.info)
    infos = _via(_infos, Infos.infos)

    # writes, extents, files and their space
    lookup_write = _via(_writes, Writes.lookup_write)
    lookup_writes = _via(_writes, Writes.lookup_writes)
    dataset_writes = _via(_writes, Writes.dataset_writes)
    file_end = _via(_writes, Writes.file_end)
    reserve = _via(_writes, Writes.reserve)
    give_back = _via(_writes, Writes.give_back)
    reserved_ends = _via(_writes, Writes.reserved_ends)
    record_write = _via(_writes, Writes.record_write)
    record_writes = _via(_writes, Writes.record_writes)
    extents = _via(_writes, Writes.extents)
    truncate = _via(_writes, Writes.truncate)
    drop_file = _via(_writes, Writes.drop_file)
    lower_alloc_end = _via(_writes, Writes.lower_alloc_end)
    writes = _via(_writes, Writes.writes)
    files = _via(_writes, Writes.files)

    # calibrations and the planner's learned choices
    save_calibration = _via(_calibrations, Calibrations.save_calibration)
    latest_calibration = _via(_calibrations, Calibrations.latest_calibration)
    planner_choices = _via(_calibrations, Calibrations.planner_choices)
    store_planner_choices = _via(_calibrations, Calibrations.store_planner_choices)
