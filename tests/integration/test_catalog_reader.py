"""The catalog's lean read path (:mod:`sdm.catalog.reader`) on SQLite and PostgreSQL.

A reader's lookups (run search, run and group loading, a dataset's writes, the latest
calibration) run as SQL text on the driver's connection: no SQLAlchemy statement is
compiled or executed for them, an SQLite catalog opened at the current revision makes no
engine at all, and what they return is what was stored (date-times as aware UTC values,
attributes decoded, groups and datasets in order), including what another connection
committed after the reader opened.
"""

from __future__ import annotations

from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Iterator

import pytest
import sqlalchemy as sa

from sdm.catalog import Catalog, DatasetSpec
from sdm.catalog import reader
from sdm.errors import RunNotFoundError


@contextmanager
def _statements() -> Iterator[dict[str, list[str]]]:
    """Statements sent meanwhile: ``"engine"`` through any SQLAlchemy engine, ``"lean"`` on the lean path."""
    seen: dict[str, list[str]] = {"engine": [], "lean": []}

    def count(conn, cursor, statement, parameters, context, executemany):  # noqa: ANN001
        seen["engine"].append(statement)

    sa.event.listen(sa.engine.Engine, "before_cursor_execute", count)
    reader.TRACE.append(seen["lean"].append)
    try:
        yield seen
    finally:
        reader.TRACE.remove(seen["lean"].append)
        sa.event.remove(sa.engine.Engine, "before_cursor_execute", count)


CREATED = datetime(2026, 3, 4, 5, 6, 7, 891011, tzinfo=timezone.utc)


def _fill(url: str) -> tuple[int, int]:
    """Two runs of ``app`` (the second newer), a group of two datasets in the second; their ids."""
    with _open(url) as cat:
        first = cat.new_run("app", nprocs=2, root="/r", attributes={"case": "x", "n": 1}, created_at=CREATED).id
        second = cat.new_run("app", nprocs=4, root="/r", attributes={"case": "y", "n": 2 ** 60 + 1},
                             created_at=CREATED.replace(year=2027)).id
        g = cat.define_group(second, "g", 2, [DatasetSpec("b", "<f8", (3, 4), "C"), DatasetSpec("a", "<i4", (5,), "F")])
        cat.set_attributes(second, {"unit": "K"}, group_id=g.id)
    return first, second


@contextmanager
def _open(url: str, create: bool = True) -> Iterator[Catalog]:
    cat = Catalog(url, create=create)
    try:
        yield cat
    finally:
        cat.close()


def test_a_reader_finds_loads_and_looks_up_without_sqlalchemy_statements(catalog_url: str) -> None:
    first, second = _fill(catalog_url)
    with _open(catalog_url, create=False) as cat, _statements() as seen:
        latest = cat.select_run("app", {"case": "y"}, "latest")
        one = cat.select_run("app", {"n": 2 ** 60 + 1})  # beyond 2**53: compared as an integer
        group = cat.group(second, "g")
        assert cat.dataset_writes(group.datasets[0].id) == {}
        assert cat.latest_calibration("/r") is None
        with pytest.raises(RunNotFoundError):
            cat.select_run("app", {"n": 2 ** 60})  # its nearest double equals 2**60 + 1's: no match
        if catalog_url.startswith("sqlite"):
            assert cat._engine is None  # an SQLite catalog at the current revision made no engine
    assert seen["engine"] == [] and len(seen["lean"]) > 0
    assert latest.id == one.id == second and latest.application == "app" and latest.nprocs == 4
    assert latest.created_at == CREATED.replace(year=2027) and latest.created_at.tzinfo is not None
    assert latest.attributes == {"case": "y", "n": 2 ** 60 + 1}
    assert [d.name for d in group.datasets] == ["b", "a"]  # in the order defined
    assert [(d.dtype, d.shape, d.order) for d in group.datasets] == [("<f8", (3, 4), "C"), ("<i4", (5,), "F")]
    assert group.attributes == {"unit": "K"} and group.datasets[0].attributes == {}
    with _open(catalog_url, create=False) as cat:
        old = cat.run(first)
    assert old.created_at == CREATED and old.attributes == {"case": "x", "n": 1} and old.groups == ()


def test_a_reader_sees_what_was_committed_after_it_opened(catalog_url: str) -> None:
    first, _ = _fill(catalog_url)
    with _open(catalog_url, create=False) as cat:
        assert cat.select_run("app", {"case": "x"}).id == first
        with _open(catalog_url) as writer:
            newer = writer.new_run("app", nprocs=1, root="/r", attributes={"case": "x"},
                                   created_at=CREATED.replace(year=2028)).id
        assert cat.select_run("app", {"case": "x"}, "latest").id == newer
        assert cat.find(application="app", attributes={"case": "x"})[0].id == newer


def test_text_is_rendered_for_each_driver() -> None:
    sql = "SELECT a FROM t WHERE t.b = :b AND t.c IN :ids AND t.d LIKE '5%'"
    assert reader.render(sql, "sqlite", (("ids", 3),)) == (
        "SELECT a FROM t WHERE t.b = :b AND t.c IN (:ids_0, :ids_1, :ids_2) AND t.d LIKE '5%'")
    assert reader.render(sql, "postgresql", (("ids", 2),)) == (
        "SELECT a FROM t WHERE t.b = %(b)s AND t.c IN (%(ids_0)s, %(ids_1)s) AND t.d LIKE '5%%'")
    with pytest.raises(ValueError, match="'ids' is empty"):
        reader.render(sql, "sqlite", (("ids", 0),))
    with pytest.raises(ValueError, match="'ids' has no length"):
        reader.render(sql, "sqlite")


def test_lookup_writes_finds_one_step_of_many_datasets_in_one_query(catalog_url: str, monkeypatch) -> None:
    """``lookup_writes``: the rows of one step of several datasets (absent: never written), one statement
    per batch of ids on the lean path, the same records ``lookup_write`` gives one by one."""
    from sdm.catalog import writes

    specs = [DatasetSpec(f"v{i}", "<f8", (4,), "C") for i in range(5)]
    with _open(catalog_url) as cat:
        run = cat.new_run("app", nprocs=1, root="/r", attributes={}, created_at=CREATED).id
        ids = [d.id for d in cat.define_group(run, "g", 3, specs).datasets]
        for step in (0, 1):
            for k, d in enumerate(ids[:4]):  # the last dataset is never written
                cat.record_write(run_id=run, dataset_id=d, step=step, path="g.sdm", level=3,
                                 offset=32 * (4 * step + k), nbytes=32, checksum=f"{k:016x}", checksum_algo="mix64-v2",
                                 method="collective", seconds=0.5, nprocs=1, overwrite=False)
    monkeypatch.setattr(writes, "_IDS_PER_QUERY", 2)  # three batches of ids
    with _open(catalog_url, create=False) as cat, _statements() as seen:
        found = cat.lookup_writes(ids, 1)
        one_by_one = {d: cat.lookup_write(d, 1) for d in ids}
    assert seen["engine"] == []
    batched = [q for q in seen["lean"] if "writes.dataset_id IN (" in q]
    assert len(batched) == 3  # five ids in batches of two
    assert sorted(found) == ids[:4] and ids[4] not in found
    assert {d: found.get(d) for d in ids} == one_by_one
    assert [(found[d].offset, found[d].checksum, found[d].step) for d in ids[:4]] == [
        (32 * (4 + k), f"{k:016x}", 1) for k in range(4)]
