"""The planner's learned choices per storage target (table ``planner_choices``, revision 0012).

Rank 0 reads them when a session opens (:func:`load`) and stores what the session's
trials settled when it closes (:func:`store`); see :mod:`sdm.planner.learned`.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Iterable, Mapping

import sqlalchemy as sa

from . import schema as S

if TYPE_CHECKING:
    from .catalog import Catalog

__all__ = ["load", "store"]


def load(cat: "Catalog", target: str, limit: int) -> list[dict[str, Any]]:
    """The newest *limit* choices stored for *target*: dicts of ``pattern, method, summary, run_id``."""
    t = S.planner_choices
    q = (sa.select(t.c.pattern, t.c.method, t.c.summary, t.c.run_id).where(t.c.target == target)
         .order_by(t.c.measured_at.desc(), t.c.id.desc()).limit(int(limit)))
    with cat.engine.connect() as con:
        return [dict(row) for row in con.execute(q).mappings()]


def store(cat: "Catalog", target: str, rows: Iterable[Mapping[str, Any]]) -> int:
    """Record (or replace) the choices *rows* (``pattern, method, summary, run_id``) for *target*, in one
    transaction; returns how many."""
    t, now, n = S.planner_choices, datetime.now(timezone.utc), 0
    with cat._tx() as con:
        for row in rows:
            values = {k: row[k] for k in ("method", "summary", "run_id")} | {"measured_at": now}
            done = con.execute(t.update().where(t.c.target == target, t.c.pattern == row["pattern"])
                               .values(**values)).rowcount
            if not done:
                con.execute(t.insert().values(target=target, pattern=row["pattern"], **values))
            n += 1
    return n
