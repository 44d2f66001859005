"""Catalogs of older schema versions, and what a catalog's schema is, for the catalog tests.

:func:`make_version_1` turns a catalog into what schema version 1 (before Alembic) made;
:func:`describe` reads a database's schema back through SQLAlchemy's inspector (tables,
columns with their types, nullability and defaults, keys, foreign keys, indexes), so two
catalogs made by different paths can be compared.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa

from sdm.catalog import schema as S

__all__ = ["engine_for", "make_version_1", "describe"]


def engine_for(url: str) -> sa.Engine:
    """A plain SQLAlchemy engine (not SDM's) for a catalog URL."""
    return sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://"))


def make_version_1(url: str) -> None:
    """Turn the (current) catalog at *url* back into what schema version 1 made."""
    engine = engine_for(url)
    try:
        with engine.begin() as con:
            for table in ("planner_choices", "extents", "tier_operations", "copies", "infos"):  # 0012, 0011, 0008, 0007
                con.execute(sa.text(f"DROP TABLE {table}"))
            for t in reversed(S.V2_TABLES):
                con.execute(sa.text(f"DROP TABLE {t.name}"))
            con.execute(sa.text("ALTER TABLE writes DROP COLUMN reason"))
            for table, column in (("runs", "dir"), ("runs", "state"), ("runs", "writers"), ("files", "alloc_end"),
                                  ("writes", "version"), ("datasets", "nsteps"), ("datasets", "first_step"),
                                  ("datasets", "last_step"), ("datasets", "nbytes_written"), ("groups", "kind"),
                                  ("groups", "steps_per_file"), ("groups", "truncated_after"), ("groups", "archive"),
                                  ("datasets", "dims"), ("groups", "subfiles"), ("writes", "extents"),
                                  ("datasets", "compression"), ("datasets", "chunks"), ("writes", "codec"), ("writes", "stored_nbytes"),
                                  ("writes", "max_error")):  # ..., 0011, 0013
                con.execute(sa.text(f"ALTER TABLE {table} DROP COLUMN {column}"))
            con.execute(sa.text("DROP TABLE catalog_info"))
            con.execute(sa.text("DROP TABLE IF EXISTS alembic_version"))
            S.schema_info.create(con)
            con.execute(S.schema_info.insert().values(version=1, created_at=datetime.now(timezone.utc)))
    finally:
        engine.dispose()


def _default(value: Any) -> str | None:
    """A column default as text, without the casts PostgreSQL adds (``'closed'::character varying``)."""
    if value is None:
        return None
    return str(value).split("::", 1)[0]


def describe(url: str) -> dict[str, Any]:
    """The schema of the database at *url*: ``{table: {columns, primary key, foreign keys, indexes, uniques}}``.

    Columns are compared by name (a column added by a migration comes last in its table,
    which changes no query); everything else as the database reports it.
    """
    engine = engine_for(url)
    try:
        insp = sa.inspect(engine)
        dialect = engine.dialect
        out: dict[str, Any] = {}
        for table in sorted(insp.get_table_names()):
            out[table] = {
                "columns": {c["name"]: (c["type"].compile(dialect=dialect), c["nullable"], _default(c.get("default")))
                            for c in insp.get_columns(table)},
                "primary key": tuple(insp.get_pk_constraint(table)["constrained_columns"]),
                "foreign keys": sorted((tuple(fk["constrained_columns"]), fk["referred_table"],
                                        tuple(fk["referred_columns"]), fk.get("options", {}).get("ondelete"))
                                       for fk in insp.get_foreign_keys(table)),
                "indexes": sorted((ix["name"], tuple(ix["column_names"]), bool(ix["unique"]))
                                  for ix in insp.get_indexes(table)),
                "uniques": sorted((u["name"], tuple(u["column_names"])) for u in insp.get_unique_constraints(table)),
            }
        return out
    finally:
        engine.dispose()
