"""Infos in the catalog (table ``infos``, revision 0007), on SQLite and PostgreSQL, without MPI."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
import sqlalchemy as sa

from sdm.catalog import Catalog, DatasetSpec
from sdm.catalog import schema as S
from sdm.errors import (
    DatasetNotFoundError,
    GroupNotFoundError,
    IntegrityError,
    InvalidArgumentError,
    NotFoundError,
    RunNotFoundError,
    UnsupportedDtypeError,
)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def filled(catalog_url: str):
    cat = Catalog(catalog_url)
    run = cat.create_run("app", nprocs=2, root="/data")
    g = cat.define_group(run, "g", 3, [DatasetSpec("a", "<f8", (4,), "C"), DatasetSpec("b", "<i4", (2, 2), "C")])
    yield cat, run, g
    cat.close()


def _rows(cat: Catalog) -> list[tuple]:
    with cat.engine.connect() as con:
        return [tuple(r) for r in con.execute(sa.select(S.infos).order_by(S.infos.c.id))]


def test_set_and_read_at_every_place(filled) -> None:
    cat, run, g = filled
    a, b = g.datasets
    refs = {
        (None, None, None, "units"): np.array(["K", "Pa"], dtype=">U2"),
        ("g", None, None, "table"): np.arange(6, dtype=">f8").reshape(2, 3),
        ("g", "a", None, "flags"): np.array([True, False]),
        ("g", "b", 7, "dt"): np.float64(0.25),
        ("g", "b", 8, "dt"): np.array([b"x", b"yz"]),
    }
    ids = {None: None, "a": a.id, "b": b.id}
    for (group, dataset, step, name), arr in refs.items():
        cat.set_info(run, name, arr, group_id=None if group is None else g.id, dataset_id=ids[dataset], step=step)
    for (group, dataset, step, name), ref in refs.items():
        rec = cat.info(run, name, group=group, dataset=dataset, step=step)
        got = rec.array()
        assert got.dtype == np.asarray(ref).dtype and got.shape == np.shape(ref)
        np.testing.assert_array_equal(got, ref)
        assert rec.data == np.ascontiguousarray(ref).tobytes() and (rec.group, rec.dataset, rec.step) == (
            group, dataset, step)
    every = cat.infos(run, everywhere=True)
    assert [(r.place, r.name) for r in every] == [
        ("run", "units"), ("group 'g'", "table"), ("dataset 'g/a'", "flags"), ("step 7 of 'g/b'", "dt"),
        ("step 8 of 'g/b'", "dt")]
    assert [r.name for r in cat.infos(run)] == ["units"]
    listed = cat.infos(run, group="g", dataset="b", step=8, data=False)
    assert [(r.name, r.dtype, r.shape, r.data) for r in listed] == [("dt", "|S2", (2,), b"")]


def test_setting_again_replaces_the_row(filled) -> None:
    cat, run, g = filled
    cat.set_info(run, "x", np.arange(3), group_id=g.id)
    cat.set_info(run, "x", np.array(["new"]), group_id=g.id)
    cat.set_info(run, "x", np.arange(2))  # another place: another info
    assert len(_rows(cat)) == 2
    np.testing.assert_array_equal(cat.info(run, "x", group="g").array(), np.array(["new"]))
    np.testing.assert_array_equal(cat.info(run, "x").array(), np.arange(2))


@pytest.mark.parametrize("call, cls, message", [
    (lambda c, r, g: c.set_info(r, "x", np.zeros(2, "V3")), UnsupportedDtypeError,
     "info 'x': dtype |V3 (raw bytes (void)) cannot be an info; infos hold bool, integer, float, complex or "
     "fixed-width string ('S<n>', 'U<n>') arrays"),
    (lambda c, r, g: c.set_info(r, "x", np.zeros(4 * 2**20 + 1, "f4")), InvalidArgumentError,
     "info 'x' holds 16777220 bytes; an info holds at most 16777216 bytes (16 MiB): store a larger array as a dataset"),
    (lambda c, r, g: c.set_info(r, "x", [[1, 2], [3]]), InvalidArgumentError, None),
    (lambda c, r, g: c.set_info(999, "x", 1), RunNotFoundError, "no run 999 in catalog {url!r}"),
    (lambda c, r, g: c.set_info(r, "x", 1, group_id=999), GroupNotFoundError,
     "no group id 999 in run {run} of catalog {url!r}"),
    (lambda c, r, g: c.set_info(r, "x", 1, group_id=g.id, dataset_id=999), DatasetNotFoundError,
     "no dataset id 999 in group id {gid} of catalog {url!r}"),
    (lambda c, r, g: c.set_info(r, "x", 1, group_id=g.id, step=3), InvalidArgumentError,
     "info 'x': a step belongs to a dataset and a dataset to a group"),
], ids=["void", "too-big", "ragged", "no-run", "no-group", "no-dataset", "step-without-dataset"])
def test_refused_infos_store_nothing(filled, call, cls, message) -> None:
    cat, run, g = filled
    cat.set_info(run, "kept", np.arange(3))
    before = _rows(cat)
    with pytest.raises(cls) as info:
        call(cat, run, g)
    assert type(info.value) is cls
    if message is not None:
        assert str(info.value) == message.format(url=cat.url, run=run, gid=g.id)
    else:  # numpy's own words for a ragged list follow ours
        assert str(info.value).startswith("info 'x': cannot make an array of list (")
    assert _rows(cat) == before


def test_a_missing_info_and_damaged_bytes(filled) -> None:
    cat, run, g = filled
    with pytest.raises(NotFoundError) as info:
        cat.info(run, "x", group="g", dataset="a")
    assert str(info.value) == f"no info 'x' on dataset 'g/a' of run {run} in catalog {cat.url!r}"
    cat.set_info(run, "x", np.arange(4, dtype="<i8"))
    with cat.engine.begin() as con:
        con.execute(S.infos.update().values(data=np.arange(1, 5, dtype="<i8").tobytes()))
    with pytest.raises(IntegrityError) as err:
        cat.info(run, "x")
    crc = f"{zlib.crc32(np.arange(1, 5, dtype='<i8').tobytes()):08x}"
    good = f"{zlib.crc32(np.arange(4, dtype='<i8').tobytes()):08x}"
    assert str(err.value) == (f"info 'x' on run {run} is damaged in the catalog: its bytes have CRC-32 {crc}, "
                              f"its row says {good}")


def test_a_truncation_erases_the_infos_of_later_steps_only(filled) -> None:
    cat, run, g = filled
    a, b = g.datasets
    for step in range(4):
        cat.set_info(run, "dt", np.array([step]), group_id=g.id, dataset_id=a.id, step=step)
    cat.set_info(run, "whole", np.arange(2), group_id=g.id, dataset_id=a.id)
    cat.set_info(run, "run", np.arange(2))
    cat.truncate(run, 1)
    assert [(r.place, r.name) for r in cat.infos(run, everywhere=True)] == [
        ("run", "run"), ("dataset 'g/a'", "whole"), ("step 0 of 'g/a'", "dt"), ("step 1 of 'g/a'", "dt")]


def test_a_0006_catalog_is_upgraded_and_takes_infos(catalog_url: str) -> None:
    cat = Catalog(catalog_url)
    run = cat.create_run("app", nprocs=1, root="/data", attributes={"k": 1})
    with cat.engine.begin() as con:  # back to revision 0006: no table infos (nor those of 0008, nor 0009's column)
        for table in ("planner_choices", "extents", "tier_operations", "copies", "infos"):
            con.execute(sa.text(f"DROP TABLE {table}"))
        con.execute(sa.text("ALTER TABLE groups DROP COLUMN archive"))
        con.execute(sa.text("ALTER TABLE datasets DROP COLUMN dims"))
        con.execute(sa.text("ALTER TABLE groups DROP COLUMN subfiles"))  # 0011
        con.execute(sa.text("ALTER TABLE writes DROP COLUMN extents"))
        for table, column in (("datasets", "compression"), ("datasets", "chunks"), ("writes", "codec"), ("writes", "stored_nbytes"),
                              ("writes", "max_error")):  # 0013
            con.execute(sa.text(f"ALTER TABLE {table} DROP COLUMN {column}"))
        con.execute(sa.text("UPDATE alembic_version SET version_num = '0006'"))
    cat.close()
    cat = Catalog(catalog_url, create=False)  # upgraded in place
    try:
        assert cat.schema_version == "0013" and sa.inspect(cat.engine).has_table("infos")
        assert cat.run(run).attributes == {"k": 1} and cat.infos(run) == []
        cat.set_info(run, "units", np.array(["m"]))
        np.testing.assert_array_equal(cat.info(run, "units").array(), np.array(["m"]))
    finally:
        cat.close()
