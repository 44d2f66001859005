"""Catalog records of irregular applications: imports and index histories.

The paper's import_table, index_table and index_history_table (section 3.2.2), as
functions over a :class:`~sdm.catalog.Catalog` (rank 0 only, one transaction each).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Sequence

import sqlalchemy as sa

from . import schema as S
from .catalog import Catalog
from .connection import inserted_id as _inserted_id
from .loading import utc as _utc

__all__ = [
    "ImportRecord",
    "HistoryRecord",
    "HistoryPart",
    "record_import",
    "imports",
    "find_history",
    "find_history_by_sources",
    "histories",
    "register_history",
    "record_history_use",
    "history_uses",
]


def _now() -> datetime:
    return datetime.now(timezone.utc)


@dataclass(frozen=True)
class ImportRecord:
    """Data read from a file SDM did not write."""

    id: int
    run_id: int
    name: str
    source: str
    offset: int
    dtype: str
    count: int
    shape: tuple[int, ...]
    mode: str
    nbytes: int
    checksum: str
    seconds: float
    nprocs: int
    imported_at: datetime
    checksum_algo: str = "sum64-v1"


@dataclass(frozen=True)
class HistoryPart:
    """Where one rank's part of one index set lives in a history file."""

    name: str
    rank: int
    offset: int
    count: int
    dtype: str


@dataclass(frozen=True)
class HistoryRecord:
    """An index distribution kept for reuse (index_table + index_history_table)."""

    id: int
    application: str
    problem: str
    content_hash: str
    nprocs: int
    root: str
    path: str
    nbytes: int
    created_at: datetime
    run_id: int | None
    parts: tuple[HistoryPart, ...] = ()
    sources: dict[str, Any] | None = None

    def part(self, name: str, rank: int) -> HistoryPart:
        """The part *name* of *rank* (KeyError when absent)."""
        for p in self.parts:
            if p.name == name and p.rank == rank:
                return p
        raise KeyError((name, rank))


def record_import(cat: Catalog, **values: Any) -> int:
    """Insert an import row (columns of ``imports``); returns its id."""
    values = dict(values, shape=json.dumps(list(values["shape"])), imported_at=values.get("imported_at") or _now())
    with cat._tx() as con:
        return _inserted_id(con.execute(S.imports.insert().values(**values)))


def imports(cat: Catalog, *, run_id: int | None = None, source: str | None = None) -> list[ImportRecord]:
    """Imports of a run, or of a source file, oldest first."""
    t = S.imports
    q = sa.select(t).order_by(t.c.imported_at, t.c.id)
    if run_id is not None:
        q = q.where(t.c.run_id == run_id)
    if source is not None:
        q = q.where(t.c.source == source)
    with cat.engine.connect() as con:
        rows = con.execute(q).mappings().all()
    return [
        ImportRecord(**{**dict(r), "shape": tuple(json.loads(r["shape"])), "imported_at": _utc(r["imported_at"])})
        for r in rows
    ]


def _app_id(con, application: str) -> int | None:
    return con.execute(sa.select(S.applications.c.id).where(S.applications.c.name == application)).scalar()


def _history(con, row, application: str) -> HistoryRecord:
    p = S.index_history_parts
    parts = con.execute(
        sa.select(p.c.name, p.c.rank, p.c.offset, p.c.count, p.c.dtype)
        .where(p.c.history_id == row["id"])
        .order_by(p.c.name, p.c.rank)
    ).all()
    return HistoryRecord(
        id=row["id"],
        application=application,
        problem=row["problem"],
        content_hash=row["content_hash"],
        nprocs=row["nprocs"],
        root=row["root"],
        path=row["path"],
        nbytes=int(row["nbytes"]),
        created_at=_utc(row["created_at"]),
        run_id=row["run_id"],
        parts=tuple(HistoryPart(n, int(r), int(o), int(c), d) for n, r, o, c, d in parts),
        sources=json.loads(row["sources"]) if row["sources"] else None,
    )


def find_history(cat: Catalog, application: str, problem: str, content_hash: str, nprocs: int) -> HistoryRecord | None:
    """The history for exactly these inputs and rank count, or None."""
    h = S.index_histories
    with cat.engine.connect() as con:
        app = _app_id(con, application)
        if app is None:
            return None
        row = con.execute(
            sa.select(h).where(
                h.c.application_id == app,
                h.c.problem == problem,
                h.c.content_hash == content_hash,
                h.c.nprocs == int(nprocs),
            )
        ).mappings().first()
        return None if row is None else _history(con, row, application)


def find_history_by_sources(cat: Catalog, application: str, problem: str, nprocs: int, sources: dict[str, Any]) -> HistoryRecord | None:
    """The newest history of *problem* on *nprocs* ranks made from exactly these sources."""
    h = S.index_histories
    text = json.dumps(sources, sort_keys=True)
    with cat.engine.connect() as con:
        app = _app_id(con, application)
        if app is None:
            return None
        row = con.execute(
            sa.select(h)
            .where(h.c.application_id == app, h.c.problem == problem, h.c.nprocs == int(nprocs), h.c.sources == text)
            .order_by(h.c.created_at.desc(), h.c.id.desc())
            .limit(1)
        ).mappings().first()
        return None if row is None else _history(con, row, application)


def histories(cat: Catalog, application: str, problem: str | None = None) -> list[HistoryRecord]:
    """Every history of an application (optionally of one problem), oldest first."""
    h = S.index_histories
    with cat.engine.connect() as con:
        app = _app_id(con, application)
        if app is None:
            return []
        q = sa.select(h).where(h.c.application_id == app).order_by(h.c.created_at, h.c.id)
        if problem is not None:
            q = q.where(h.c.problem == problem)
        return [_history(con, row, application) for row in con.execute(q).mappings().all()]


def register_history(
    cat: Catalog,
    *,
    application: str,
    problem: str,
    content_hash: str,
    nprocs: int,
    root: str,
    path: str,
    nbytes: int,
    run_id: int | None,
    parts: Sequence[HistoryPart],
    sources: dict[str, Any] | None = None,
    created_at: datetime | None = None,
) -> int:
    """Record a history file and where every rank's index sets are in it.

    ``sources`` (optional) identifies the input files and the partitioning vector
    exactly as they were hashed, so an unchanged input need not be read again;
    ``created_at`` (default now) is given by ``sdm rebuild``.
    """
    with cat.engine.begin() as con:
        app = cat._runs.app_id(con, application, create=True)
        hid = _inserted_id(con.execute(
            S.index_histories.insert().values(
                application_id=app,
                problem=problem,
                content_hash=content_hash,
                nprocs=int(nprocs),
                root=root,
                path=path,
                nbytes=int(nbytes),
                created_at=created_at or _now(),
                run_id=run_id,
                sources=None if sources is None else json.dumps(sources, sort_keys=True),
            )
        ))
        con.execute(
            S.index_history_parts.insert(),
            [dict(history_id=hid, name=p.name, rank=p.rank, offset=p.offset, count=p.count, dtype=p.dtype) for p in parts],
        )
    return int(hid)


def record_history_use(cat: Catalog, history_id: int, run_id: int | None, seconds: float) -> None:
    """Note that a run loaded its partition from a history (the proof of reuse)."""
    with cat.engine.begin() as con:
        con.execute(
            S.index_history_uses.insert().values(history_id=history_id, run_id=run_id, used_at=_now(), seconds=float(seconds))
        )


def history_uses(cat: Catalog, history_id: int) -> list[dict[str, Any]]:
    """Runs that reused a history, oldest first."""
    u = S.index_history_uses
    with cat.engine.connect() as con:
        rows = con.execute(sa.select(u).where(u.c.history_id == history_id).order_by(u.c.used_at, u.c.id)).mappings()
        return [{"run_id": r["run_id"], "used_at": _utc(r["used_at"]), "seconds": r["seconds"]} for r in rows]
