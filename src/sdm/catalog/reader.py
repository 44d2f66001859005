"""The catalog's lean read path: fixed SQL text, run on the driver's connection, rows converted here.

A process's first read of a catalog (a one-process reader: open a run by its attributes,
look up a group, read a box) used to spend most of its time in SQLAlchemy compiling the
statements it ran once each. The reads of :class:`~sdm.catalog.Catalog` (run search,
run and group loading, a dataset's writes, the latest calibration) are therefore written
as SQL text (:mod:`sdm.catalog.queries`, :mod:`sdm.catalog.loading`) with named
parameters (``:name``; a list parameter as ``IN :name``) and run through a
:class:`Reader`:

* outside a write transaction, on a driver connection (``sqlite3`` or ``psycopg``), in
  one read transaction (a consistent snapshot over the several statements of one call)
  rolled back at the end (:func:`transaction`): an SQLite catalog at the current
  revision is read through its own connection, made when it is opened (no SQLAlchemy
  engine is made until a method needs one); other catalogs through a connection of the
  engine's pool (:func:`lean`). No SQLAlchemy statement, compilation or result
  processing;
* inside one (``Catalog.batch``, e.g. ``sdm rebuild``), the same text runs on the
  transaction's SQLAlchemy connection (``exec_driver_sql``), which sees its changes.

Either way the text is rendered once per process for its dialect and list lengths
(``:name`` to ``%(name)s`` for psycopg; ``IN :ids`` to one parameter per id), and the
rows come back as dicts whose date-time columns are :class:`datetime` on both engines.
Errors of the driver are left to the caller (``Database.read`` of :mod:`sdm.catalog.connection` masks the URL).

This module imports no SQLAlchemy: ``sdm ls`` of an SQLite catalog reads through it with
:mod:`sqlite3` alone (:mod:`sdm.catalog.listing`).
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from datetime import datetime
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Sequence

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection, Engine

__all__ = ["Reader", "lean", "transaction", "render", "TRACE", "DATETIMES"]

#: Callbacks given each statement the lean path sends (tests count statements with it; the
#: SQLAlchemy path has its own ``before_cursor_execute`` event).
TRACE: list[Callable[[str], None]] = []

#: Columns of the schema that hold date-times (SQLite hands them back as text); a test keeps it equal to the
#: schema's ``DateTime`` columns
DATETIMES = frozenset({"created_at", "finished_at", "imported_at", "measured_at", "started_at", "used_at",
                       "verified_at", "written_at"})
_PARAM = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")
_LIST = re.compile(r"IN :([A-Za-z_]\w*)")


@lru_cache(maxsize=1024)
def render(sql: str, dialect: str, lists: tuple[tuple[str, int], ...] = ()) -> str:
    """*sql* (named ``:params``; ``IN :name`` for a list) as the driver of *dialect* takes it.

    *lists* gives the length of each list parameter: ``IN :ids`` becomes ``IN (:ids_0,
    :ids_1, ...)``. SQLite's driver takes ``:name`` itself; psycopg takes ``%(name)s``.
    """
    sizes = dict(lists)

    def expand(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in sizes:
            raise ValueError(f"list parameter {name!r} has no length")
        if sizes[name] < 1:
            raise ValueError(f"list parameter {name!r} is empty")
        return "IN (" + ", ".join(f":{name}_{k}" for k in range(sizes[name])) + ")"

    sql = _LIST.sub(expand, sql)
    if dialect == "postgresql":
        sql = _PARAM.sub(lambda m: f"%({m.group(1)})s", sql.replace("%", "%%"))
    return sql


def _bound(params: Mapping[str, Any], dialect: str) -> tuple[dict[str, Any], tuple[tuple[str, int], ...]]:
    """*params* with each list spread into one parameter per item, and the lists' lengths."""
    out: dict[str, Any] = {}
    lists: list[tuple[str, int]] = []
    for name, value in params.items():
        if isinstance(value, (list, tuple)):
            lists.append((name, len(value)))
            out.update((f"{name}_{k}", v) for k, v in enumerate(value))
        elif isinstance(value, datetime) and dialect == "sqlite":  # as SQLAlchemy stores them there
            out[name] = value.strftime("%Y-%m-%d %H:%M:%S.%f")
        else:
            out[name] = value
    return out, tuple(sorted(lists))


def _converted(names: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[dict[str, Any]]:
    when = [i for i, n in enumerate(names) if n in DATETIMES]
    out = []
    for row in rows:
        d = dict(zip(names, row))
        for i in when:
            v = row[i]
            if isinstance(v, str):
                d[names[i]] = datetime.fromisoformat(v)
        out.append(d)
    return out


class Reader:
    """Runs SQL text of the catalog's reads on one connection (see the module documentation).

    Parameters
    ----------
    dialect : str
        ``"sqlite"`` or ``"postgresql"``.
    run : callable
        ``run(sql, params) -> (column names, rows)`` for rendered text and bound parameters.
    connection : Connection, optional
        The SQLAlchemy connection underneath (inside a write transaction), else None.
    """

    def __init__(self, dialect: str, run: Callable[[str, dict[str, Any]], tuple[list[str], list[Any]]],
                 connection: Connection | None = None) -> None:
        self.dialect = dialect
        self._run = run
        self.connection = connection

    @classmethod
    def over(cls, con: Connection) -> "Reader":
        """A reader on an SQLAlchemy connection (its transaction, its events)."""
        def run(sql: str, params: dict[str, Any]) -> tuple[list[str], list[Any]]:
            result = con.exec_driver_sql(sql, params)
            return list(result.keys()), list(result.fetchall())

        return cls(con.dialect.name, run, con)

    def rows(self, sql: str, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        """The rows of *sql* as dicts (date-times as :class:`datetime`)."""
        bound, lists = _bound(params or {}, self.dialect)
        names, rows = self._run(render(sql, self.dialect, lists), bound)
        return _converted(names, rows)

    def scalars(self, sql: str, params: Mapping[str, Any] | None = None) -> list[Any]:
        """The first column of the rows of *sql*."""
        bound, lists = _bound(params or {}, self.dialect)
        return [row[0] for row in self._run(render(sql, self.dialect, lists), bound)[1]]


@contextmanager
def lean(engine: Engine) -> Iterator[Reader]:
    """A :class:`Reader` on a driver connection of *engine*'s pool, in one read transaction
    (see :func:`transaction`); the connection goes back to the pool at the end."""
    raw = engine.raw_connection()
    try:
        with transaction(raw, engine.dialect.name) as reader:
            yield reader
    finally:
        raw.close()


@contextmanager
def transaction(raw: Any, dialect: str) -> Iterator[Reader]:
    """A :class:`Reader` on the driver connection *raw*, in one read transaction rolled back at
    the end (a read changes nothing). The driver's own exceptions pass through.

    SQLite connections of SDM run in autocommit (the engine's, and the catalog's own, see
    :func:`sdm.catalog.database.sqlite_connection`): the transaction is begun here;
    psycopg's begins with the first statement.
    """
    cur = raw.cursor()

    def run(sql: str, params: dict[str, Any]) -> tuple[list[str], list[Any]]:
        for callback in TRACE:
            callback(sql)
        cur.execute(sql, params)
        return [d[0] for d in cur.description or ()], list(cur.fetchall())

    try:
        if dialect == "sqlite":
            run("BEGIN", {})
        yield Reader(dialect, run)
    finally:
        try:
            cur.close()
        finally:
            raw.rollback()
