"""One row of the ``copies`` table written in a caller's transaction (the commit of a write to the archive tier,
``sdm migrate``/``stage``): apart from :mod:`sdm.catalog.tiers` so that the catalog's writes
(:mod:`sdm.catalog.writes`) need nothing that needs it."""

from __future__ import annotations

from datetime import datetime, timezone

import sqlalchemy as sa

from . import schema as S

__all__ = ["upsert_copy"]


def upsert_copy(con: sa.Connection, file_id: int, *, tier: str, location: str, size: int, checksum: str | None,
                state: str, verified_at: datetime | None, created_at: datetime | None = None) -> None:
    """Record (or replace) the copy of file *file_id* on *tier*, in the transaction of *con* (*created_at*: of a
    new row, default now)."""
    c = S.copies
    values = dict(location=location, size=int(size), checksum=checksum, state=state, verified_at=verified_at)
    done = con.execute(c.update().where(c.c.file_id == file_id, c.c.tier == tier).values(**values)).rowcount
    if not done:
        con.execute(c.insert().values(file_id=file_id, tier=tier, created_at=created_at or datetime.now(timezone.utc), **values))
