"""The catalog's database: engines, write locks, damage checks and schema migrations.

Everything here is about keeping the catalog whole when many jobs open it at once or
when its file was damaged:

* A new SQLite catalog is built in a private temporary file and linked into place in one
  atomic step, so no other job ever sees a half-made catalog, and a file that exists is
  always expected to hold one: an empty (0-byte) or foreign file raises
  :class:`~sdm.errors.CatalogDamagedError`, never becomes a new empty catalog. The file
  is built with :mod:`sqlite3` directly from the schema's ``CREATE`` statements (rendered
  from ``schema.metadata`` once per process) and stamped with the head revision, so
  creating a catalog imports neither Alembic nor runs its migrations; a test checks that
  the result equals what the migrations make.
* The schema's versions are Alembic revisions (``migrations/``). Creating or upgrading
  the schema runs in one transaction holding the catalog's schema lock (``BEGIN
  IMMEDIATE`` on SQLite, a transaction-level advisory lock on PostgreSQL) and checks the
  revision again once it holds the lock, so any number of jobs may start at once.
* :func:`write_transaction` is a transaction that takes the write lock up front
  (``BEGIN IMMEDIATE`` on SQLite; PostgreSQL's row locks are taken by the statements),
  for read-then-write work such as reserving file space.
* A full disk under the catalog (SQLite's ``SQLITE_FULL``, "database or disk is full";
  PostgreSQL's SQLSTATE 53100, "could not extend file") raises
  :class:`~sdm.errors.CatalogError` with ``errno.ENOSPC`` from whichever statement,
  commit or connection met it (:func:`disk_full`, hooked into every engine); the
  transaction is rolled back, so the catalog stays as it was.
* Reading needs no free space: SQLite in WAL mode makes a shared-memory index file
  (``-shm``) beside the catalog when its first connection opens, which a full disk
  refuses. A reader that meets that opens the catalog through :func:`reading_engine`
  instead, whose connections keep the index in their own memory (``locking_mode=
  EXCLUSIVE``: the file is locked while one of them reads, for one call at a time).
"""

from __future__ import annotations

import errno
import os
import sqlite3
import uuid
from collections import OrderedDict
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Iterator

import sqlalchemy as sa
import sqlalchemy.dialects.sqlite  # noqa: F401 (the default catalog's dialect: imported with this module, not at the first open)
from sqlalchemy.engine import Connection, Engine

from ..errors import CatalogDamagedError, CatalogError, CatalogUnavailableError, CatalogVersionError
from ..storage.mounts import free_bytes
from . import schema as S
from .own import _REVISION_AND_ID, _sqlite_connect, is_damage, sqlite_connection, sqlite_path

__all__ = [
    "make_engine", "sqlite_path", "write_transaction", "schema_transaction", "check_sqlite_file",
    "create_sqlite_file", "ensure_schema", "known_revisions", "catalog_id", "integrity_check", "is_damage",
    "disk_full", "reading_engine", "sqlite_connection",
]

_SQLITE_MAGIC = b"SQLite format 3\x00"
_SCHEMA_LOCK = 0x53444D53  # "SDMS": the PostgreSQL advisory lock key of schema changes
_MIGRATIONS = Path(__file__).with_name("migrations")
_ALEMBIC_VERSION = ("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL, "
                    "CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num))")  # as Alembic makes it


_ENGINES: OrderedDict[str, Engine] = OrderedDict()  # the process's engines, newest last
_ENGINES_KEPT = 8
_SHM_BLOCK = 32768  # SQLite grows a WAL index (-shm) in blocks of this size
_DISK_FULL_SQLSTATE = "53100"  # PostgreSQL's disk_full (could not extend file, ...)


def make_engine(sa_url: str) -> Engine:
    """The process's engine for a catalog URL (made on first use; the last few are kept).

    An engine keeps its compiled statements, so a catalog opened again (a second session,
    ``sdm`` commands in one process) does not compile its queries again; closing a
    :class:`~sdm.catalog.Catalog` disposes of the engine's connections, never of the
    engine. SQLite is set up for WAL and explicit ``BEGIN`` statements.
    """
    engine = _ENGINES.pop(sa_url, None)
    if engine is None:
        engine = _new_engine(sa_url)
    _ENGINES[sa_url] = engine
    while len(_ENGINES) > _ENGINES_KEPT:
        _ENGINES.popitem(last=False)[1].dispose()
    return engine


def _new_engine(sa_url: str) -> Engine:
    if sa_url.startswith("sqlite"):
        engine = sa.create_engine(sa_url, connect_args={"timeout": 60})
        sa.event.listen(engine, "connect", _sqlite_connect)
        sa.event.listen(engine, "begin", _sqlite_begin)
    else:
        url, secrets = _without_query_secrets(sa.engine.make_url(sa_url))
        engine = sa.create_engine(url, connect_args={"connect_timeout": 10, **secrets}, pool_pre_ping=True)
    sa.event.listen(engine, "handle_error", _disk_full_hook)
    return engine


def _without_query_secrets(url: sa.engine.URL) -> tuple[sa.engine.URL, dict[str, str]]:
    """*url* without the password parameters of its query, and those parameters.

    SQLAlchemy masks the URL's own password in an engine's ``repr``, never a
    ``?password=`` of its query; handed to the driver as connection arguments instead
    (which take precedence over the URL's, as the query did), they never show.
    """
    secrets = {}
    for key in ("password", "sslpassword"):  # the libpq parameters that hold a secret
        if key in url.query:
            value = url.query[key]
            secrets[key] = value[-1] if isinstance(value, tuple) else value
    return (url.difference_update_query(list(secrets)) if secrets else url), secrets


def reading_engine(sa_url: str) -> Engine:
    """An engine for reading an SQLite catalog whose disk is full (see the module documentation).

    Its connections keep SQLite's WAL index in their own memory (``PRAGMA locking_mode=
    EXCLUSIVE`` before the first read), so opening one creates no ``-shm`` file; each is
    closed when the call that used it ends (no pool), which releases the file's lock.
    Writes through it still work where space allows, and raise :class:`CatalogError`
    with ``ENOSPC`` where it does not.
    """
    engine = sa.create_engine(sa_url, connect_args={"timeout": 60}, poolclass=sa.pool.NullPool)
    sa.event.listen(engine, "connect", _sqlite_connect_alone)
    sa.event.listen(engine, "begin", _sqlite_begin)
    sa.event.listen(engine, "handle_error", _disk_full_hook)
    return engine


def _sqlite_connect_alone(dbapi_con, record) -> None:
    dbapi_con.isolation_level = None
    dbapi_con.execute("PRAGMA locking_mode=EXCLUSIVE")  # first: the WAL index then lives in this process's memory
    _sqlite_connect(dbapi_con, record)


def disk_full(exc: BaseException, sqlite_file: Path | None = None) -> bool:
    """Whether a database error says the disk under the catalog is full.

    SQLite's ``SQLITE_FULL`` ("database or disk is full"); its ``SQLITE_IOERR_SHMSIZE``
    (the WAL index could not grow) when the file system of *sqlite_file* has less than
    a block of that index free; PostgreSQL's SQLSTATE 53100 (``DiskFull``: "could not
    extend file").
    """
    orig = getattr(exc, "orig", None) or exc
    if getattr(orig, "sqlstate", None) == _DISK_FULL_SQLSTATE:
        return True
    name = getattr(orig, "sqlite_errorname", "")
    if name == "SQLITE_FULL" or "database or disk is full" in str(orig):
        return True
    if name == "SQLITE_IOERR_SHMSIZE" and sqlite_file is not None:
        free = free_bytes(sqlite_file)
        return free is not None and free < 2 * _SHM_BLOCK
    return False


def _disk_full_hook(context: sa.engine.ExceptionContext) -> None:
    """``handle_error``: a full disk under the catalog is :class:`CatalogError` with ``ENOSPC`` (see :func:`disk_full`)."""
    exc = context.original_exception
    database = context.dialect.name
    sqlite_file = None
    if database == "sqlite" and context.engine is not None:
        sqlite_file = sqlite_path(str(context.engine.url))
    if not disk_full(exc, sqlite_file):
        return
    if sqlite_file is not None:
        free = free_bytes(sqlite_file)
        where = (f"the file system holding the catalog file {sqlite_file} is full "
                 f"({'unknown' if free is None else free} bytes free)")
    else:
        where = "the disk of the catalog's database server is full"
    raise CatalogError(
        f"{where}: {_first_line(exc)}; the catalog was left as it was (the transaction was rolled back). "
        "Free space there and try again",
        errno=errno.ENOSPC,
    ) from None


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _sqlite_begin(con: Connection) -> None:
    con.exec_driver_sql("BEGIN IMMEDIATE" if con.get_execution_options().get("sdm_write_lock") else "BEGIN")


@contextmanager
def write_transaction(engine: Engine) -> Iterator[Connection]:
    """A transaction that holds the database's write lock from its first statement.

    On SQLite this is ``BEGIN IMMEDIATE`` (readers go on; a second writer waits for the
    busy timeout); on PostgreSQL an ordinary transaction, whose ``UPDATE`` statements lock
    the rows they change until the commit.
    """
    with engine.connect() as con:
        con.execution_options(sdm_write_lock=True)
        with con.begin():
            yield con


# ----------------------------------------------------------------------------- SQLite files
def check_sqlite_file(path: Path, shown: str) -> None:
    """Refuse an existing SQLite catalog file that cannot hold a catalog.

    Raises
    ------
    CatalogDamagedError
        The file is empty or does not start with SQLite's header.
    """
    try:
        with open(path, "rb") as f:
            head = f.read(len(_SQLITE_MAGIC))
    except OSError as exc:
        raise CatalogUnavailableError(f"catalog {shown}: cannot read {path}: {exc.strerror}") from None
    if not head:
        raise CatalogDamagedError(
            f"catalog {shown}: the file {path} is empty (0 bytes); a catalog file is never empty, so it was "
            "truncated or damaged. Restore it from a backup; SDM does not replace it by a new catalog"
        )
    if head != _SQLITE_MAGIC:
        raise CatalogDamagedError(
            f"catalog {shown}: the file {path} is not an SQLite database (its header is damaged or it is "
            "another kind of file). Restore it from a backup; SDM does not replace it by a new catalog"
        )


def create_sqlite_file(path: Path, shown: str) -> str | None:
    """Create a new SQLite catalog at *path* atomically (no-op when another job made it first).

    The schema is made in a private file beside *path*, which is then hard-linked to
    *path*: the link either creates the catalog whole or fails because it exists.

    Returns
    -------
    str or None
        The new catalog's unique id, or None when another job created the file first
        (its schema is then checked like any existing catalog's).

    Raises
    ------
    CatalogUnavailableError
        The directory cannot be written.
    """
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.new")
    made = uuid.uuid4().hex
    try:
        try:
            con = sqlite3.connect(tmp, isolation_level=None)
            try:
                # a private file, deleted unless whole: no journal and no syncs while it is built ...
                con.execute("PRAGMA journal_mode=OFF")
                con.execute("PRAGMA synchronous=OFF")
                con.execute("BEGIN IMMEDIATE")
                for statement in schema_ddl("sqlite"):
                    con.execute(statement)
                con.execute("INSERT INTO catalog_info (key, value) VALUES ('uuid', ?)", (made,))
                con.execute(_ALEMBIC_VERSION)
                con.execute("INSERT INTO alembic_version (version_num) VALUES (?)", (S.SCHEMA_VERSION,))
                con.execute("COMMIT")
                con.execute("PRAGMA journal_mode=WAL")  # the catalog's mode, kept in the file
            finally:
                con.close()
        except sqlite3.Error as exc:
            raise CatalogUnavailableError(f"catalog {shown}: cannot create {path}: {exc}",
                                          errno=errno.ENOSPC if disk_full(exc, path) else None) from None
        fd = os.open(tmp, os.O_RDONLY | os.O_CLOEXEC)  # ... then one sync, before the catalog appears
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)
        except FileExistsError:
            return None  # another job created it first: use theirs
        return made
    except OSError as exc:
        raise CatalogUnavailableError(f"catalog {shown}: cannot create {path}: {exc.strerror}", errno=exc.errno) from None
    finally:
        for leftover in (tmp, tmp.with_name(tmp.name + "-wal"), tmp.with_name(tmp.name + "-shm")):
            leftover.unlink(missing_ok=True)


@cache
def schema_ddl(dialect: str) -> tuple[str, ...]:
    """The ``CREATE TABLE`` and ``CREATE INDEX`` statements of the current schema for *dialect*.

    Rendered from ``schema.metadata`` (tables in dependency order, each followed by its
    indexes, as ``metadata.create_all`` emits them), once per process.
    """
    from sqlalchemy.dialects import postgresql, sqlite
    from sqlalchemy.schema import CreateIndex, CreateTable

    engine_dialect = {"sqlite": sqlite.dialect, "postgresql": postgresql.dialect}[dialect]()
    out: list[str] = []
    for table in S.metadata.sorted_tables:
        out.append(str(CreateTable(table).compile(dialect=engine_dialect)).strip())
        out += [str(CreateIndex(index).compile(dialect=engine_dialect)).strip()
                for index in sorted(table.indexes, key=lambda ix: ix.name or "")]
    return tuple(out)


# ----------------------------------------------------------------------------- schema
def _create(con: Connection) -> None:
    S.metadata.create_all(con)
    con.execute(S.catalog_info.insert().values(key="uuid", value=uuid.uuid4().hex))
    con.execute(sa.text(_ALEMBIC_VERSION.replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS", 1)))
    con.execute(sa.text("INSERT INTO alembic_version (version_num) VALUES (:v)"), {"v": S.SCHEMA_VERSION})


def _revision(con: Connection) -> str | None:
    """The catalog's Alembic revision, or None when it has none (raises on damage)."""
    if not sa.inspect(con).has_table("alembic_version"):  # a plain query (to_regclass may use a stale cache)
        return None
    return con.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()


def _legacy_version(con: Connection) -> int | None:
    if not sa.inspect(con).has_table(S.schema_info.name):
        return None
    return con.execute(sa.select(sa.func.max(S.schema_info.c.version))).scalar()


def _alembic(con: Connection, verb: str, revision: str) -> None:
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(_MIGRATIONS))
    cfg.attributes["connection"] = con
    getattr(command, verb)(cfg, revision)


def known_revisions() -> list[str]:
    """The revisions this SDM can upgrade from, oldest first."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory(str(_MIGRATIONS))
    return [r.revision for r in reversed(list(script.walk_revisions()))]


def ensure_schema(engine: Engine, shown: str, *, create: bool) -> str | None:
    """Make the catalog's schema the current revision (creating it if allowed).

    The fast path is one statement: the revision, and the catalog's id with it;
    creation and upgrades hold the schema lock and check the revision again under it.

    Returns
    -------
    str or None
        The catalog's unique id when the fast path read it (None: read it with :func:`catalog_id`).

    Raises
    ------
    CatalogVersionError
        The catalog has a revision this SDM does not know (made by a newer SDM).
    CatalogDamagedError
        The database holds SDM tables but no revision, or (readers) holds nothing.
    """
    current = _current_id(engine)
    if current is not None:
        return current
    with engine.connect() as con:
        if _revision(con) == S.SCHEMA_VERSION:
            try:
                return _uuid(con)
            except sa.exc.DatabaseError as exc:  # its table is gone: reading still works, writers get the error later
                if not _missing_table(exc):
                    raise
                return None
    with schema_transaction(engine) as con:
        rev = _revision(con)
        if rev == S.SCHEMA_VERSION:
            return None  # another job made or upgraded it while this one waited
        if rev is None:
            legacy = _legacy_version(con)
            if legacy is not None:
                rev = f"{legacy:04d}"
                if rev not in known_revisions():
                    raise CatalogVersionError(
                        f"catalog {shown} has schema version {legacy}; this SDM uses revision {S.SCHEMA_VERSION}. "
                        "Open it with a matching SDM release."
                    )
                _alembic(con, "stamp", rev)
            elif sa.inspect(con).has_table(S.runs.name):
                raise CatalogDamagedError(
                    f"catalog {shown} holds SDM tables but no schema revision (its version table was lost); "
                    "restore it from a backup"
                )
            elif not create:
                raise CatalogDamagedError(
                    f"catalog {shown} holds no SDM catalog (no tables); open it for writing to create one, or "
                    "check the URL"
                )
            else:
                _create(con)
                return None
        if rev not in known_revisions():
            raise CatalogVersionError(
                f"catalog {shown} has schema revision {rev}; this SDM uses revision {S.SCHEMA_VERSION}. "
                "Open it with a matching SDM release."
            )
        _alembic(con, "upgrade", S.SCHEMA_VERSION)
    return None


#: The revision and the catalog's id in one statement (the open of a catalog at the current revision)
def _current_id(engine: Engine) -> str | None:
    """The catalog's id when it is at the current revision and has one (one statement), else None.

    Any other answer (another revision, a missing table, several revision rows) leaves the
    decision to the full checks of :func:`ensure_schema`; damage is raised as it is.
    """
    try:
        with engine.connect() as con:
            rev, uid = con.exec_driver_sql(_REVISION_AND_ID).one()
    except sa.exc.DatabaseError as exc:
        if is_damage(exc):
            raise
        return None
    return str(uid) if rev == S.SCHEMA_VERSION and uid is not None else None


@contextmanager
def schema_transaction(engine: Engine) -> Iterator[Connection]:
    """A transaction holding the catalog's schema lock (see the module documentation)."""
    with write_transaction(engine) as con:
        if con.dialect.name == "postgresql":
            con.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _SCHEMA_LOCK})
        yield con


def _uuid(con: Connection) -> str | None:
    value = con.execute(sa.select(S.catalog_info.c.value).where(S.catalog_info.c.key == "uuid")).scalar()
    return None if value is None else str(value)


def _missing_table(exc: sa.exc.DatabaseError) -> bool:
    """Whether a database error says a table does not exist (SQLite's message, PostgreSQL's SQLSTATE 42P01)."""
    return getattr(exc.orig, "sqlstate", None) == "42P01" or "no such table" in str(exc.orig)


def catalog_id(engine: Engine) -> str:
    """The catalog's unique id (made with the catalog, recorded in every run directory)."""
    try:
        with engine.connect() as con:
            value = _uuid(con)
    except sa.exc.DatabaseError as exc:
        if not _missing_table(exc):  # busy, unreachable, ...: raised as it is
            raise
        value = None
    if value is None:
        raise CatalogDamagedError("the catalog has lost its unique id (table catalog_info); restore it from a backup")
    return str(value)


def integrity_check(engine: Engine) -> list[str]:
    """The database engine's own integrity check: a list of problems (empty when whole).

    SQLite: ``PRAGMA integrity_check`` and ``PRAGMA foreign_key_check``. PostgreSQL keeps
    no such check for tables; the foreign keys of SDM's tables are checked with queries.
    """
    try:
        return _integrity_check(engine)
    except sa.exc.DatabaseError as exc:
        if not is_damage(exc):
            raise
        return [f"the database cannot be read: {getattr(exc, 'orig', exc)}"]


def _integrity_check(engine: Engine) -> list[str]:
    problems: list[str] = []
    with engine.connect() as con:
        if con.dialect.name == "sqlite":
            rows = [r[0] for r in con.exec_driver_sql("PRAGMA integrity_check")]
            problems += [r for r in rows if r != "ok"]
            problems += [f"table {r[0]} row {r[1]} refers to a missing row of {r[2]}"
                         for r in con.exec_driver_sql("PRAGMA foreign_key_check")]
        else:
            for table in S.metadata.sorted_tables:
                for fk in table.foreign_keys:
                    parent, col = fk.column.table, fk.parent
                    q = (sa.select(sa.func.count()).select_from(table)
                         .where(col.is_not(None), ~sa.exists().where(fk.column == col)))
                    n = con.execute(q).scalar_one()
                    if n:
                        problems.append(f"table {table.name}: {n} rows refer to missing rows of {parent.name}")
        rev = _revision(con)
        if rev != S.SCHEMA_VERSION:
            problems.append(f"schema revision {rev}, expected {S.SCHEMA_VERSION}")
    return problems

