"""``sdm.catalog.bulk.insert_rows`` stores exactly what SQLAlchemy's own insert stores (SQLite and PostgreSQL).

Two sets of write rows, equal but for their steps, go in side by side: one through
``con.execute(table.insert(), rows)``, one through :func:`insert_rows`. Every column read
back (and, on SQLite, the stored text and type of each value) must be the same. A
duplicate step is refused with SQLAlchemy's IntegrityError and the transaction keeps none
of the call's rows; a row lacking a key is refused before anything is sent.
"""

from __future__ import annotations

import sqlite3
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError as SAIntegrityError

from sdm.catalog import Catalog, DatasetSpec
from sdm.catalog import database as D
from sdm.catalog import schema as S
from sdm.catalog.bulk import insert_rows


def _setup(cat: Catalog, root: Path) -> tuple[int, int]:
    """A run with one dataset and one data file; their ids."""
    run = cat.create_run("bulk", nprocs=1, root=str(root))
    group = cat.define_group(run, "g", 3, [DatasetSpec("a", "<f8", (4,), "C")])
    with D.write_transaction(cat.engine) as con:
        fid = con.execute(S.files.insert().values(run_id=run, path="bulk/g.sdm", level=3,
                                                  created_at=datetime.now(timezone.utc), alloc_end=0)
                          ).inserted_primary_key[0]
    return group.datasets[0].id, int(fid)


def _rows(dataset: int, file_id: int, first: int) -> list[dict[str, Any]]:
    t0 = datetime(2026, 3, 4, 5, 6, 7, 891011, tzinfo=timezone.utc)
    return [dict(dataset_id=dataset, step=first + k, file_id=file_id, offset=32 * k, nbytes=32,
                 checksum=f"{k:016x}", checksum_algo="mix64", method="posix", reason=None if k % 2 else "why",
                 seconds=0.25 * k + 1e-9, nprocs=1 + k % 3, written_at=t0 + timedelta(seconds=k // 2),
                 version=1, extents=0) for k in range(7)]


def _read(cat: Catalog, first: int) -> list[tuple[Any, ...]]:
    w = S.writes
    cols = [c for c in w.c if c.name not in ("id", "step")]
    with cat.engine.connect() as con:
        return [tuple(r) for r in con.execute(sa.select(w.c.step - first, *cols).where(
            w.c.step.between(first, first + 99)).order_by(w.c.step))]


def test_insert_rows_stores_what_sqlalchemy_stores(catalog_url: str, tmp_path: Path) -> None:
    cat = Catalog(catalog_url, create=True)
    try:
        dataset, fid = _setup(cat, tmp_path)
        with D.write_transaction(cat.engine) as con:
            con.execute(S.writes.insert(), _rows(dataset, fid, 0))
            insert_rows(con, S.writes, _rows(dataset, fid, 100))
        plain, bulk = _read(cat, 0), _read(cat, 100)
        assert len(plain) == 7 and bulk == plain
        at = 1 + [c.name for c in S.writes.c if c.name not in ("id", "step")].index("written_at")
        assert bulk[0][at].astimezone(timezone.utc) == datetime(2026, 3, 4, 5, 6, 7, 891011, tzinfo=timezone.utc)
    finally:
        cat.close()
    if catalog_url.startswith("sqlite"):  # the stored text and types themselves
        con = sqlite3.connect(D.sqlite_path(catalog_url))
        try:
            cols = ", ".join(c.name for c in S.writes.c if c.name not in ("id", "step"))
            stored = [con.execute(f"SELECT {cols} FROM writes WHERE step BETWEEN ? AND ? ORDER BY step",
                                  (a, a + 99)).fetchall() for a in (0, 100)]
            kinds = [con.execute("SELECT typeof(written_at), typeof(seconds), typeof(reason) FROM writes "
                                 "WHERE step BETWEEN ? AND ? ORDER BY step", (a, a + 99)).fetchall() for a in (0, 100)]
        finally:
            con.close()
        assert len(stored[0]) == 7 and stored[0] == stored[1]
        assert kinds[0] == kinds[1]


def test_insert_rows_refusal_keeps_nothing(catalog_url: str, tmp_path: Path) -> None:
    cat = Catalog(catalog_url, create=True)
    try:
        dataset, fid = _setup(cat, tmp_path)
        with D.write_transaction(cat.engine) as con:
            insert_rows(con, S.writes, _rows(dataset, fid, 0)[:2])
        again = _rows(dataset, fid, 5)[:3] + _rows(dataset, fid, 1)[:1]  # step 1 is taken
        with pytest.raises(SAIntegrityError):
            with D.write_transaction(cat.engine) as con:
                insert_rows(con, S.writes, again)
        with cat.engine.connect() as con:
            assert [r[0] for r in con.execute(sa.select(S.writes.c.step).order_by(S.writes.c.step))] == [0, 1]
        short = _rows(dataset, fid, 10)
        del short[1]["checksum"]
        with pytest.raises(KeyError, match="checksum"):
            with D.write_transaction(cat.engine) as con:
                insert_rows(con, S.writes, short)
        with cat.engine.connect() as con:
            assert con.execute(sa.select(sa.func.count()).select_from(S.writes)).scalar_one() == 2
        with D.write_transaction(cat.engine) as con:
            insert_rows(con, S.writes, [])  # nothing to do
    finally:
        cat.close()
