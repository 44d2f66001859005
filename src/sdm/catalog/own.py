"""An SQLite catalog opened without SQLAlchemy: the schema revision this SDM uses, and the catalog's own connection.

A catalog at the current revision is read through a connection of its own
(:func:`sqlite_connection`, set up as the engine's connections are) with the SQL text of
:mod:`sdm.catalog.reader`; nothing here imports SQLAlchemy, so a command that only
reads such a catalog (``sdm ls``, :mod:`sdm.catalog.listing`) starts without it.
:mod:`sdm.catalog.database` builds the rest (engines, creation, upgrades) on this.
"""

from __future__ import annotations

import sqlite3
import urllib.parse
from pathlib import Path
from typing import Any

from .reader import TRACE

__all__ = ["SCHEMA_VERSION", "sqlite_path", "sqlite_connection", "is_damage"]

#: The Alembic revision of the schema this SDM writes (the head of ``migrations/versions``).
SCHEMA_VERSION = "0013"

_REVISION_AND_ID = ("SELECT (SELECT version_num FROM alembic_version), "
                    "(SELECT value FROM catalog_info WHERE \"key\" = 'uuid')")


def sqlite_path(sa_url: str) -> Path | None:
    """The database file of a ``sqlite:///`` URL (None for other engines and ``:memory:``)."""
    if not sa_url.startswith("sqlite"):
        return None
    path = sa_url[len("sqlite:///"):]
    return Path(path) if path and path != ":memory:" else None


def is_damage(exc: BaseException) -> bool:
    """Whether a database error says the catalog file is damaged (not merely busy or missing)."""
    text = str(getattr(exc, "orig", None) or exc)
    return "malformed" in text or "not a database" in text


def sqlite_connection(path: Path) -> tuple[sqlite3.Connection, str] | None:
    """A connection of the catalog's own to the existing SQLite catalog *path*, and its id, when
    the catalog is at the current revision (one statement); None otherwise.

    The connection is set up as the engine's are (autocommit, WAL, foreign keys) and may
    be used from any thread, one at a time. A reader of such a catalog needs no engine
    (:mod:`sdm.catalog.reader`). Any other answer (another revision, a missing table, a
    busy or full disk) leaves the decision to :func:`sdm.catalog.database.ensure_schema`;
    damage is raised as the driver's error.
    """
    uri = "file:" + urllib.parse.quote(str(path)) + "?mode=rw"  # never creates the file
    try:
        con = sqlite3.connect(uri, uri=True, timeout=60, isolation_level=None, check_same_thread=False)
    except sqlite3.Error:
        return None
    try:
        _sqlite_connect(con, None)
        for callback in TRACE:
            callback(_REVISION_AND_ID)
        rev, uid = con.execute(_REVISION_AND_ID).fetchone()
    except sqlite3.Error as exc:
        con.close()
        if is_damage(exc):
            raise
        return None
    if rev == SCHEMA_VERSION and uid is not None:
        return con, str(uid)
    con.close()
    return None


def _sqlite_connect(dbapi_con: Any, _record: Any) -> None:
    dbapi_con.isolation_level = None  # SQLAlchemy's "begin" event issues BEGIN itself
    cur = dbapi_con.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.close()
