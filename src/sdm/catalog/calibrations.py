"""What the planner keeps in the catalog: measured cost-model constants and learned choices.

Calibrations (table ``io_calibrations``): the constants ``sdm calibrate`` measured for a
storage target. Learned choices (table ``planner_choices``, revision 0012): rank 0 reads
them when a session opens (:meth:`Calibrations.planner_choices`) and stores what the
session's trials settled when it closes (:meth:`Calibrations.store_planner_choices`); see
:mod:`sdm.planner.learned`.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Mapping

import sqlalchemy as sa

from . import schema as S
from .connection import Store, inserted_id, jsonable, utcnow
from .loading import utc as _utc

__all__ = ["Calibrations"]

_CALIBRATION = ('SELECT ' + ", ".join(f'io_calibrations."{c.name}"' for c in S.io_calibrations.c) +
                ' FROM io_calibrations WHERE io_calibrations.target = :target '
                'ORDER BY io_calibrations.created_at DESC, io_calibrations.id DESC LIMIT 1')


class Calibrations(Store):
    """The planner's calibrations and learned choices per storage target."""

    def save_calibration(
        self, target: str, nprocs: int, constants: dict[str, Any], samples: Any = None
    ) -> int:
        """Store measured cost-model constants for a storage target; return the row id."""
        with self.db.tx() as con:
            return inserted_id(
                con.execute(
                    S.io_calibrations.insert().values(
                        target=target,
                        nprocs=int(nprocs),
                        constants=json.dumps(constants),
                        samples=None if samples is None else json.dumps(samples, default=jsonable),
                        created_at=utcnow(),
                    )
                )
            )

    def latest_calibration(self, target: str) -> dict[str, Any] | None:
        """The newest constants stored for *target* (with ``nprocs`` and ``created_at``), or None."""
        with self.db.read("read the latest calibration") as con:
            rows = con.rows(_CALIBRATION, {"target": target})
        if not rows:
            return None
        row = rows[0]
        return {
            "id": row["id"],
            "target": row["target"],
            "nprocs": row["nprocs"],
            "created_at": _utc(row["created_at"]).isoformat(),
            "constants": json.loads(row["constants"]),
        }

    def planner_choices(self, target: str, limit: int) -> list[dict[str, Any]]:
        """The newest *limit* choices stored for *target*: dicts of ``pattern, method, summary, run_id``."""
        t = S.planner_choices
        q = (sa.select(t.c.pattern, t.c.method, t.c.summary, t.c.run_id).where(t.c.target == target)
             .order_by(t.c.measured_at.desc(), t.c.id.desc()).limit(int(limit)))
        with self.db.engine.connect() as con:
            return [dict(row) for row in con.execute(q).mappings()]

    def store_planner_choices(self, target: str, rows: Iterable[Mapping[str, Any]]) -> int:
        """Record (or replace) the choices *rows* (``pattern, method, summary, run_id``) for *target*, in one
        transaction; returns how many."""
        t, now, n = S.planner_choices, utcnow(), 0
        with self.db.tx() as con:
            for row in rows:
                values = {k: row[k] for k in ("method", "summary", "run_id")} | {"measured_at": now}
                done = con.execute(t.update().where(t.c.target == target, t.c.pattern == row["pattern"])
                                   .values(**values)).rowcount
                if not done:
                    con.execute(t.insert().values(target=target, pattern=row["pattern"], **values))
                n += 1
        return n
