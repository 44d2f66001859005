"""A new catalog is made directly at the head revision; its schema must be what the migrations make.

New SQLite catalogs are built with :mod:`sqlite3` from the rendered ``CREATE`` statements
of ``schema.metadata`` (PostgreSQL ones with ``metadata.create_all``), and stamped with the
head revision without running Alembic. Here a catalog of schema version 1 is upgraded
through every Alembic migration and both schemas are read back from the real engine.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import sqlalchemy as sa

from catalog_versions import describe, engine_for, make_version_1
from sdm.catalog import Catalog
from sdm.catalog import schema as S

pytestmark = pytest.mark.timeout(120)


@contextmanager
def _second_catalog(catalog_url: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """Another empty catalog URL on the same engine as *catalog_url*."""
    if catalog_url.startswith("sqlite:///"):
        yield f"sqlite:///{tmp_path}/migrated.db"
    else:
        with request.getfixturevalue("postgres_server").fresh_database() as url:
            yield url


def test_a_new_catalog_has_the_schema_the_migrations_make(catalog_url: str, request: pytest.FixtureRequest,
                                                          tmp_path: Path) -> None:
    Catalog(catalog_url).close()  # made directly at the head revision
    with _second_catalog(catalog_url, request, tmp_path) as old_url:
        engine = engine_for(old_url)
        try:
            S.metadata.create_all(engine)  # SQLAlchemy's own DDL, then back to version 1
        finally:
            engine.dispose()
        make_version_1(old_url)
        assert "runs" in describe(old_url) and "alembic_version" not in describe(old_url)
        Catalog(old_url, create=False).close()  # stamped 0001, upgraded through 0002 ... 0005
        migrated = describe(old_url)
    made = describe(catalog_url)
    assert migrated.pop("sdm_schema")  # the pre-Alembic version table stays in an upgraded catalog
    assert set(made) == {t.name for t in S.metadata.sorted_tables} | {"alembic_version"}
    for table in made:
        assert made[table] == migrated[table], table
    assert made == migrated


def test_the_sqlite_statements_are_what_create_all_emits(tmp_path: Path) -> None:
    """The rendered DDL of a new SQLite catalog equals SQLAlchemy's create_all, statement for statement."""
    from sdm.catalog.database import schema_ddl

    engine = sa.create_engine(f"sqlite:///{tmp_path}/plain.db")
    emitted: list[str] = []
    sa.event.listen(engine, "before_cursor_execute",
                    lambda con, cursor, statement, *rest: emitted.append(statement.strip()))
    try:
        S.metadata.create_all(engine)
    finally:
        engine.dispose()
    creates = [s for s in emitted if s.startswith("CREATE")]
    assert sorted(creates) == sorted(schema_ddl("sqlite"))
    assert len(creates) == len(S.metadata.sorted_tables) + sum(len(t.indexes) for t in S.metadata.sorted_tables)


def test_making_a_catalog_imports_no_alembic(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from sdm.catalog import Catalog\n"
        f"c = Catalog('sqlite:///{tmp_path}/new.db'); c.create_run('a', nprocs=1, root='/r'); c.close()\n"
        f"c = Catalog('sqlite:///{tmp_path}/new.db', create=False); c.close()\n"
        "print(sorted(m for m in ('alembic', 'mako') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_a_new_sqlite_catalog_is_whole_in_wal_mode_and_leaves_nothing_else(tmp_path: Path) -> None:
    import sqlite3

    cat = Catalog(f"sqlite:///{tmp_path}/catalog.db")
    assert cat.created and len(cat.id) == 32
    run = cat.create_run("app", nprocs=1, root=str(tmp_path))
    cat.close()
    con = sqlite3.connect(tmp_path / "catalog.db")
    try:
        assert con.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert con.execute("SELECT version_num FROM alembic_version").fetchall() == [(S.SCHEMA_VERSION,)]
        assert con.execute("SELECT id FROM runs").fetchall() == [(run,)]
    finally:
        con.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["catalog.db"]
    again = Catalog(f"sqlite:///{tmp_path}/catalog.db")
    assert not again.created and again.id == cat.id
    again.close()


def test_a_catalog_that_lost_its_id_still_reads_and_refuses_to_name_itself(catalog_url: str) -> None:
    from sdm.errors import CatalogDamagedError

    cat = Catalog(catalog_url)
    run = cat.create_run("app", nprocs=1, root="/r")
    cat.close()
    engine = engine_for(catalog_url)
    try:
        with engine.begin() as con:
            con.execute(sa.text("DROP TABLE catalog_info"))
    finally:
        engine.dispose()
    reader = Catalog(catalog_url, create=False)
    try:
        assert reader.run(run).application == "app"
        with pytest.raises(CatalogDamagedError) as info:
            reader.id
        assert str(info.value) == "the catalog has lost its unique id (table catalog_info); restore it from a backup"
    finally:
        reader.close()
