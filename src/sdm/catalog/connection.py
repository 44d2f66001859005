"""The connection and transaction machinery that every part of the catalog shares.

One :class:`Database` per open :class:`~sdm.catalog.Catalog`: the engine (for an SQLite
catalog at the current revision, made only when a method first needs it), the catalog's
own SQLite connection for lean reads (:mod:`sdm.catalog.reader`), the write transaction
of :meth:`Database.batch` while one is open, and how a failure of the database is
reported (:class:`~sdm.errors.CatalogError`, the URL masked). The kinds of record (runs,
groups, writes, infos, calibrations) are each a small :class:`Store` over one
:class:`Database`; :class:`~sdm.catalog.Catalog` composes them.
"""

from __future__ import annotations

import errno
import sqlite3
import threading
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator

from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from ..config import catalog_url
from ..errors import CatalogDamagedError, CatalogError, CatalogUnavailableError, InvalidArgumentError
from . import database as D
from . import reader as RD
from .urls import mask_urls, misparse, redact_url, scrub
from .values import loaded_numpy

__all__ = ["Database", "Store", "normalize_url", "utcnow", "inserted_id", "checked_id", "jsonable", "short_error",
           "CHUNK"]

CHUNK = 500  # ids per IN (...) list where a list of ids is given by the caller

_ID_MAX = 2**63 - 1


def utcnow() -> datetime:
    """The time now, in UTC."""
    return datetime.now(timezone.utc)


def inserted_id(result: Any) -> int:
    """The primary key of the row an ``INSERT`` made."""
    key = result.inserted_primary_key
    assert key is not None, "an INSERT of one row returns its key"
    return int(key[0])


def normalize_url(url: str) -> str:
    """Return the SQLAlchemy URL for a catalog URL or the path of an SQLite catalog file.

    ``postgresql://`` and ``postgres://`` select the psycopg (3) driver; ``sqlite:///path``
    is used as it is; a plain path (``runs/catalog.db``) means that SQLite file
    (see :func:`sdm.config.catalog_url`).

    Raises
    ------
    CatalogUnavailableError
        For any other scheme, for text that is neither a URL nor a plain path, and for a
        PostgreSQL URL that a connection library would split elsewhere than it reads (a
        raw ``@`` in the password: the message says to percent-encode it).
    """
    url = catalog_url(url) if isinstance(url, str) else url
    if not isinstance(url, str) or "://" not in url:
        raise CatalogUnavailableError(
            f"catalog URL {redact_url(url)!r} is not a URL; use sqlite:///path/to/catalog.db or "
            "postgresql://user@host:port/dbname"
        )
    scheme, rest = url.split("://", 1)
    if scheme in {"postgresql", "postgres", "postgresql+psycopg"}:
        why = misparse(url)
        if why is not None:
            raise CatalogUnavailableError(f"catalog URL {redact_url(url)!r} cannot be used as written: {why}")
        return "postgresql+psycopg://" + rest
    if scheme == "sqlite":
        return url
    if not all(ch.isalnum() or ch in "+.-" for ch in scheme):  # 'user:pw@host://...' is no scheme
        raise CatalogUnavailableError(
            f"catalog URL {redact_url(url)!r} has no valid scheme; use sqlite:/// or postgresql://"
        )
    raise CatalogUnavailableError(
        f"catalog URL scheme {scheme!r} is not supported; use sqlite:/// or postgresql://"
    )


class Database:
    """The connections and transactions of one catalog (see the module's text).

    Parameters
    ----------
    url : str
        As :class:`~sdm.catalog.Catalog` takes it.
    create : bool
        Create the schema when the catalog is empty.

    Raises
    ------
    CatalogUnavailableError, CatalogVersionError, CatalogDamagedError
        As :class:`~sdm.catalog.Catalog` raises them.
    """

    @property
    def url(self) -> str:
        """The catalog URL with any password masked (safe for messages and logs)."""
        return self._shown_url

    def __init__(self, url: str, *, create: bool = True) -> None:
        url = catalog_url(url) if isinstance(url, str) else url  # a plain path: that SQLite file
        self._shown_url = redact_url(url)
        self._batch: Connection | None = None  # the transaction of batch(), while one is open
        #: Called when a batch rolls back (caches of rows the rollback took back)
        self.rollback_hooks: list[Callable[[], None]] = []
        self._id: str | None = None
        #: Whether this object created the catalog (an SQLite file it made: no run, no calibration yet)
        self.created = False
        sa_url = normalize_url(url)
        self._engine: Engine | None = None
        #: The catalog's own SQLite connection (lean reads, see sdm.catalog.reader), one user at a time
        self._own: sqlite3.Connection | None = None
        self._own_lock = threading.Lock()
        shown = repr(self.url)
        path = D.sqlite_path(sa_url)
        #: An SQLite catalog's file, and its engine's URL (made when a method first needs it; no secret in it)
        self._sqlite_file, self._sqlite_url = path, (sa_url if path is not None else None)
        error: CatalogError | None = None
        try:
            if path is None:
                self._engine = D.make_engine(sa_url)
            else:
                self._id = self._prepare_sqlite(path, shown, create)
                self.created = self._id is not None
                if not self.created:  # at the current revision: read without an engine (made when needed)
                    found = D.sqlite_connection(path)
                    if found is not None:
                        self._own, self._id = found
            if not self.created and self._own is None:  # a file made just now holds the head revision
                try:
                    self._id = D.ensure_schema(self.engine, shown, create=create)
                except CatalogError as exc:
                    if exc.errno != errno.ENOSPC or path is None or create:
                        raise
                    self._engine = D.reading_engine(sa_url)  # a reader on a full disk: no -shm file to make
                    self._id = D.ensure_schema(self._engine, shown, create=False)
        except CatalogError:
            self._dispose()
            raise
        except (SQLAlchemyError, OSError, ValueError, sqlite3.Error) as exc:
            self._dispose()
            if D.is_damage(exc):
                error = CatalogDamagedError(
                    f"catalog {shown} is damaged: {scrub(short_error(exc), url)}; restore it from a backup")
            else:
                error = CatalogUnavailableError(f"cannot open catalog {shown}: {scrub(short_error(exc), url)}")
        if error is not None:  # raised outside the handler: the driver's error (its text unscrubbed) is not chained
            raise error

    @staticmethod
    def _prepare_sqlite(path: Path, shown: str, create: bool) -> str | None:
        """Check an SQLite catalog file, or create it (atomically) when a writer needs it.

        Returns the new catalog's id when this call created it, else None.
        """
        if path.is_dir():
            raise CatalogUnavailableError(
                f"catalog {shown}: {path} is a directory; name the catalog file, e.g. {str(path / 'catalog.db')!r}"
            )
        if path.exists():
            D.check_sqlite_file(path, shown)
            return None
        parent = path.parent
        if not create:
            if parent.is_dir():
                raise CatalogUnavailableError(f"catalog {shown}: no catalog file {path}")
            raise CatalogUnavailableError(f"catalog {shown}: directory {parent} does not exist")
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CatalogUnavailableError(f"catalog {shown}: cannot create {parent}: {exc}") from exc
        return D.create_sqlite_file(path, shown)

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine of the catalog (the process's, made at first use; see :func:`database.make_engine`)."""
        if self._engine is None:
            assert self._sqlite_url is not None, "other catalogs make their engine when opened"
            self._engine = D.make_engine(self._sqlite_url)
        return self._engine

    def _dispose(self) -> None:
        own, self._own = getattr(self, "_own", None), None
        if own is not None:
            with self._own_lock:
                own.close()
        engine = getattr(self, "_engine", None)
        if engine is not None:
            engine.dispose()

    @property
    def id(self) -> str:
        """The catalog's unique id (recorded in the directory of every run it creates)."""
        if self._id is None:
            self._id = D.catalog_id(self.engine)
        return self._id

    def integrity_check(self) -> list[str]:
        """Run the database engine's integrity check; returns the problems found (none: empty)."""
        return D.integrity_check(self.engine)

    def close(self) -> None:
        """Release the catalog's connections (its own and the engine's pool)."""
        self._dispose()

    def tx(self) -> AbstractContextManager[Connection]:
        """A write transaction (inside :meth:`batch`: the batch's, committed with it)."""
        if self._batch is not None:
            return nullcontext(self._batch)
        return D.write_transaction(self.engine)

    def connect(self) -> AbstractContextManager[Connection]:
        """A connection to read with (inside :meth:`batch`: the batch's, which sees its changes)."""
        if self._batch is not None:
            return nullcontext(self._batch)
        return self.engine.connect()

    @contextmanager
    def batch(self) -> Iterator[Connection]:
        """One write transaction for every change and read made in the block (``sdm rebuild``: one run).

        The methods called inside it commit nothing themselves: the block's end commits
        them all, an exception rolls them all back.
        """
        if self._batch is not None:
            yield self._batch
            return
        try:
            with D.write_transaction(self.engine) as con:
                self._batch = con
                yield con
        except BaseException:
            for hook in self.rollback_hooks:  # e.g. ids of files the rollback took back
                hook()
            raise
        finally:
            self._batch = None

    @contextmanager
    def read(self, what: str) -> Iterator[RD.Reader]:
        """A :class:`~sdm.catalog.reader.Reader` for one call's reads: on the lean read path, or
        inside :meth:`batch` on the batch's transaction; a database failure raised as
        :class:`CatalogError` (URL masked; ``errno.ENOSPC`` for a full disk)."""
        try:
            if self._batch is not None:
                yield RD.Reader.over(self._batch)
            elif self._own is not None:
                with self._own_lock, RD.transaction(self._own, "sqlite") as reader:
                    yield reader
            else:
                with RD.lean(self.engine) as reader:
                    yield reader
        except SQLAlchemyError as exc:
            raise CatalogError(f"catalog {self.url!r} failed to {what}: {short_error(exc)}") from None
        except self.driver_error() as exc:
            full = D.disk_full(exc, self._sqlite_file)
            raise CatalogError(f"catalog {self.url!r} failed to {what}: {short_error(exc)}",
                               errno=errno.ENOSPC if full else None) from None

    def driver_error(self) -> type[Exception]:
        """The base class of the driver's exceptions."""
        if self._sqlite_file is not None or self._engine is None:
            return sqlite3.Error
        return self._engine.dialect.loaded_dbapi.Error

    @contextmanager
    def reading(self, what: str) -> Iterator[None]:
        """Turn a database failure while reading into :class:`CatalogError` (URL masked)."""
        try:
            yield
        except SQLAlchemyError as exc:
            raise CatalogError(f"catalog {self.url!r} failed to {what}: {short_error(exc)}") from None


class Store:
    """One kind of record of the catalog, kept over its :class:`Database`."""

    def __init__(self, db: Database) -> None:
        self.db = db

    @property
    def url(self) -> str:
        """The catalog URL, its password masked (for messages)."""
        return self.db.url


def checked_id(value: Any) -> int | None:
    """A run id as int; ``None`` when it is an integer no run can have (outside int64).

    Raises
    ------
    InvalidArgumentError
        Not an integer.
    """
    np = loaded_numpy()
    numpy_bool, numpy_int = (np.bool_, np.integer) if np is not None else ((), ())
    if isinstance(value, (bool, numpy_bool)) or not isinstance(value, (int, numpy_int)):
        raise InvalidArgumentError(f"a run id is an integer, got {value!r} of type {type(value).__name__}")
    value = int(value)
    return value if -_ID_MAX - 1 <= value <= _ID_MAX else None


def jsonable(obj: Any) -> Any:
    """numpy scalars and arrays in problem sizes become plain JSON."""
    if hasattr(obj, "tolist"):
        return obj.tolist()
    raise TypeError(f"problem_size holds {type(obj).__name__}, which is not JSON")


def short_error(exc: BaseException) -> str:
    """The first line of a database error, any URL in it masked."""
    text = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return mask_urls(text[0]) if text else type(exc).__name__
