"""Many rows inserted into one table in one ``executemany`` of the database driver.

``con.execute(table.insert(), rows)`` spends most of a large insert in SQLAlchemy's
per-row parameter handling (about 20 us a row, several times SQLite's own work): a
rebuild of 100,000 write rows or a long run's commits pay it on every row.
:func:`insert_rows` does the same insert with the statement compiled once and each value
converted by its column type's bind processor, exactly as SQLAlchemy converts it, then
hands every row to the driver at once. Errors are SQLAlchemy's (the engine's error hooks,
such as the full-disk one, see them), so callers catch what they caught before.
"""

from __future__ import annotations

from functools import lru_cache
from operator import itemgetter
from typing import Any, Callable, Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Dialect

__all__ = ["insert_rows"]

_Processor = Callable[[Any], Any] | None


def insert_rows(con: Connection, table: sa.Table, rows: Sequence[dict[str, Any]]) -> None:
    """``INSERT`` *rows* (dicts with the same keys, columns of *table*) in one driver ``executemany``.

    Parameters
    ----------
    con : Connection
        An open connection (its transaction commits the rows).
    table : sa.Table
        The table.
    rows : sequence of dict
        The rows; every row has the keys of the first.

    Raises
    ------
    KeyError
        A row lacks a key of the first row.
    sqlalchemy.exc.DBAPIError
        The database refused a row (nothing of this call is kept when the transaction rolls back).
    """
    if not rows:
        return
    keys = tuple(rows[0])
    sql, names, procs = _compiled(table, keys, con.dialect)
    get = itemgetter(*names)
    single = len(names) == 1
    converted = [(i, proc, [None, None]) for i, proc in enumerate(procs) if proc is not None]
    positional = con.dialect.positional
    params: list[Any] = []
    for row in rows:
        values = [get(row)] if single else list(get(row))
        for i, proc, last in converted:  # consecutive rows often share a value (a write time): converted once
            v = values[i]
            if v is not None:
                if v is not last[0]:
                    last[0], last[1] = v, proc(v)
                values[i] = last[1]
        params.append(tuple(values) if positional else dict(zip(names, values)))
    con.exec_driver_sql(sql, params)


@lru_cache(maxsize=64)
def _compiled(table: sa.Table, keys: tuple[str, ...], dialect: Dialect) -> tuple[str, tuple[str, ...],
                                                                            tuple[_Processor, ...]]:
    """The ``INSERT`` of *keys* into *table* for *dialect*: its text, its parameters' names in their order, and
    each one's bind processor (None where the driver takes the value as it is)."""
    compiled = table.insert().compile(dialect=dialect, column_keys=list(keys))
    names = tuple(compiled.positiontup or ()) if dialect.positional else tuple(compiled.params)
    if sorted(names) != sorted(keys):  # parameters named otherwise than their columns: not a plain insert
        raise ValueError(f"INSERT into {table.name} binds {names}, not the columns {keys}")
    procs = tuple(table.c[k].type.dialect_impl(dialect).bind_processor(dialect) for k in names)
    return str(compiled), names, procs
