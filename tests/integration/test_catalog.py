"""The catalog against the real engines: SQLite and a real PostgreSQL server.

Every test runs once per engine through the ``catalog_url`` fixture (tests/conftest.py).
Values are checked against what the test itself put in, never against a second call of
the same SDM code path.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa

from catalog_versions import make_version_1
from sdm.catalog import Catalog, DatasetSpec, FileRecord, parse_condition
from sdm.catalog import schema as S

from sdm.errors import (
    ApplicationNotFoundError,
    CatalogUnavailableError,
    CatalogDamagedError,
    CatalogVersionError,
    GroupExistsError,
    GroupNotFoundError,
    RunNotFoundError,
    SDMError,
    StepExistsError,
)

pytestmark = pytest.mark.timeout(120)

UTC = timezone.utc


@pytest.fixture
def cat(catalog_url: str):
    c = Catalog(catalog_url)
    yield c
    c.close()


def _specs() -> list[DatasetSpec]:
    return [DatasetSpec("rho", "<f8", (8, 6), "C"), DatasetSpec("e", "<f4", (8, 6), "F")]


def _write(cat: Catalog, run: int, dataset_id: int, step: int, *, path: str = "app/run/f.dat",
           offset: int = 0, nbytes: int = 384, checksum: str = "00000000deadbeef",
           method: str = "collective", overwrite: bool = False, level: int = 2, version: int = 1,
           replaces: int | None = None) -> None:
    cat.record_write(run_id=run, dataset_id=dataset_id, step=step, path=path, level=level,
                     offset=offset, nbytes=nbytes, checksum=checksum, checksum_algo="sum64",
                     method=method, seconds=0.25, nprocs=4, overwrite=overwrite, version=version,
                     replaces=replaces)


def _set_created(cat: Catalog, run: int, when: datetime) -> None:
    with cat.engine.begin() as con:
        con.execute(S.runs.update().where(S.runs.c.id == run).values(created_at=when))


def _dataset_only(cat: Catalog, run: int, group_id: int, dataset_id: int, attrs: dict) -> None:
    """Attributes on one dataset only (what Group.set_attributes(datasets=[...]) does)."""
    cat.set_attributes(run, attrs, group_id=group_id, dataset_ids=[dataset_id], on_group=False)


def _ids(runs) -> list[int]:
    return [r.id for r in runs]


def _names(rec) -> list[tuple[str, str]]:
    return [(g.name, d.name) for g in rec.groups for d in g.datasets]


# ---------------------------------------------------------------------------- schema
def _revisions(c: Catalog) -> list[str]:
    with c.engine.connect() as con:
        return [r[0] for r in con.execute(sa.text("SELECT version_num FROM alembic_version"))]


def test_schema_created_then_reopened(catalog_url: str) -> None:
    c = Catalog(catalog_url)
    tables = set(sa.inspect(c.engine).get_table_names())
    assert {"alembic_version", "catalog_info", "applications", "runs", "groups", "datasets", "attributes",
            "files", "writes"} <= tables
    assert "sdm_schema" not in tables  # the pre-Alembic version table is only read, never made
    assert _revisions(c) == ["0013"]
    assert c.schema_version == "0013" == S.SCHEMA_VERSION
    assert len(c.id) == 32 and int(c.id, 16) >= 0
    assert c.counts() == dict(applications=0, runs=0, groups=0, datasets=0, attributes=0, files=0, writes=0, infos=0)
    run = c.create_run("astro", nprocs=4, root="/data", attributes={"res": 64})
    first_id = c.id
    c.close()

    again = Catalog(catalog_url, create=False)  # an existing catalog, opened by a reader
    try:
        rec = again.run(run)
        assert (rec.application, rec.nprocs, rec.root, rec.attributes) == ("astro", 4, "/data", {"res": 64})
        assert (rec.dir, rec.state) == (None, "closed")  # registered without a directory
        assert _revisions(again) == ["0013"] and again.id == first_id
        assert again.integrity_check() == []
    finally:
        again.close()


def test_head_revision_is_the_schema_version() -> None:
    from sdm.catalog.database import known_revisions

    assert known_revisions() == ["0001", "0002", "0003", "0004", "0005", "0006", "0007", "0008", "0009", "0010", "0011", "0012", "0013"]
    assert known_revisions()[-1] == S.SCHEMA_VERSION


def test_other_schema_version_is_refused(catalog_url: str) -> None:
    c = Catalog(catalog_url)
    with c.engine.begin() as con:
        con.execute(sa.text("UPDATE alembic_version SET version_num = '9999'"))
    c.close()
    with pytest.raises(CatalogVersionError) as info:
        Catalog(catalog_url)
    assert str(info.value) == (
        f"catalog {catalog_url!r} has schema revision 9999; this SDM uses revision 0013. "
        "Open it with a matching SDM release."
    )
    assert isinstance(info.value, SDMError)


def test_reader_refuses_an_empty_database(catalog_url: str) -> None:
    if catalog_url.startswith("sqlite:///"):
        import sqlite3

        con = sqlite3.connect(catalog_url[len("sqlite:///"):])  # a valid database file with no tables
        con.execute("CREATE TABLE t (x)")
        con.execute("DROP TABLE t")
        con.close()
    with pytest.raises(CatalogDamagedError) as info:
        Catalog(catalog_url, create=False)
    assert str(info.value) == (f"catalog {catalog_url!r} holds no SDM catalog (no tables); open it for writing "
                               "to create one, or check the URL")


@pytest.mark.parametrize("content", [b"", b"garbage that is no database" * 100])
@pytest.mark.parametrize("create", [False, True])
def test_empty_or_foreign_sqlite_file_is_damage_never_a_new_catalog(tmp_path: Path, content: bytes,
                                                                       create: bool) -> None:
    path = tmp_path / "catalog.db"
    path.write_bytes(content)
    url = f"sqlite:///{path}"
    with pytest.raises(CatalogDamagedError) as info:
        Catalog(url, create=create)
    what = "is empty (0 bytes); a catalog file is never empty, so it was truncated or damaged" if not content else \
        "is not an SQLite database (its header is damaged or it is another kind of file)"
    assert str(info.value) == (f"catalog {url!r}: the file {path} {what}. Restore it from a backup; SDM does not "
                               "replace it by a new catalog")
    assert path.read_bytes() == content  # untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["catalog.db"]


def test_damaged_sqlite_pages_are_reported(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/catalog.db"
    c = Catalog(url)
    for i in range(200):
        c.create_run("astro", nprocs=1, root="/r", attributes={"i": i, "text": "x" * 200})
    c.close()
    raw = bytearray((tmp_path / "catalog.db").read_bytes())
    page = 4096
    raw[2 * page:2 * page + 2000] = bytes(range(256)) * 7 + bytes(208)  # scribble over a b-tree page
    (tmp_path / "catalog.db").write_bytes(bytes(raw))
    try:
        c = Catalog(url, create=False)
    except CatalogDamagedError as exc:  # the damage may be found on open already
        assert "is damaged" in str(exc)
        return
    try:
        problems = c.integrity_check()
    finally:
        c.close()
    assert problems and all(isinstance(p, str) for p in problems)


def test_reader_refuses_a_missing_sqlite_file(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/absent.db"
    with pytest.raises(CatalogUnavailableError, match=r"^catalog '.*absent\.db': no catalog file .*absent\.db$"):
        Catalog(url, create=False)
    assert not (tmp_path / "absent.db").exists()  # a reader creates nothing


def test_numpy_problem_size_is_stored_as_json(cat: Catalog) -> None:
    import numpy as np

    run = cat.create_run("np", nprocs=2, root="/r", problem_size=[np.int64(4), np.int32(8)])
    assert cat.run(run).problem_size == [4, 8]


# ------------------------------------------------------------------------------ runs
def test_create_run_run_and_latest_run(cat: Catalog) -> None:
    before = datetime.now(UTC)
    r1 = cat.create_run("astro", nprocs=4, root="/data/a", problem_size=[64, 32, 16], attributes={"res": 64})
    r2 = cat.create_run("astro", nprocs=8, root="/data/b", problem_size="large", attributes={"res": 128})
    r3 = cat.create_run("climate", nprocs=2, root="/data/c")
    after = datetime.now(UTC)
    assert r1 < r2 < r3

    rec = cat.run(r1)
    assert (rec.id, rec.application, rec.nprocs, rec.root) == (r1, "astro", 4, "/data/a")
    assert rec.problem_size == [64, 32, 16]
    assert rec.attributes == {"res": 64}
    assert rec.groups == ()
    assert rec.created_at.tzinfo is not None and rec.created_at.utcoffset() == timedelta(0)
    assert before - timedelta(seconds=1) <= rec.created_at <= after + timedelta(seconds=1)
    assert cat.run(r2).problem_size == "large"
    assert cat.run(r3).problem_size is None and cat.run(r3).attributes == {}

    assert cat.run(r2, application="astro").id == r2
    with pytest.raises(RunNotFoundError, match=rf"^no run {r3} of application 'astro' in catalog"):
        cat.run(r3, application="astro")
    with pytest.raises(KeyError):  # RunNotFoundError is a KeyError too
        cat.run(9999)

    assert cat.latest_run("astro").id == r2
    assert cat.latest_run("astro", {"res": 64}).id == r1
    assert cat.latest_run("astro", {"res": ("<", 100)}).id == r1
    with pytest.raises(RunNotFoundError, match=r"no run of 'astro' has attributes \{'res': 256\}"):
        cat.latest_run("astro", {"res": 256})
    with pytest.raises(ApplicationNotFoundError, match=r"^no application 'nope' in catalog"):
        cat.latest_run("nope")

    apps = {a["name"]: a for a in cat.applications()}
    assert [a["name"] for a in cat.applications()] == ["astro", "climate"]
    assert (apps["astro"]["runs"], apps["climate"]["runs"]) == (2, 1)
    assert apps["astro"]["last_run"] == cat.run(r2).created_at
    assert cat.counts()["runs"] == 3 and cat.counts()["applications"] == 2


# ------------------------------------------------------------------------ attributes
def test_typed_attributes_round_trip(cat: Catalog) -> None:
    attrs = {"i": 3, "neg": -7, "big": 2**53 + 1, "f": 2.5, "whole": 3.0, "tiny": 1e-300,
             "yes": True, "no": False, "s": "hello wörld", "empty": "", "digits": "007"}
    run = cat.create_run("astro", nprocs=1, root="/r", attributes=attrs)
    got = cat.run(run).attributes
    assert got == attrs
    for key, value in attrs.items():
        assert type(got[key]) is type(value), key  # 3.0 stays float, True stays bool, "007" str


def test_numpy_scalars_are_stored_as_python_values(cat: Catalog) -> None:
    run = cat.create_run("astro", nprocs=1, root="/r", attributes={
        "i32": np.int32(5), "i64": np.int64(-2**40), "u8": np.uint8(255),
        "f32": np.float32(0.5), "f64": np.float64(0.1), "b": np.bool_(True), "s": np.str_("x"),
    })
    got = cat.run(run).attributes
    assert got == {"i32": 5, "i64": -2**40, "u8": 255, "f32": 0.5, "f64": 0.1, "b": True, "s": "x"}
    assert [type(got[k]) for k in ("i32", "i64", "u8", "f32", "f64", "b", "s")] == [
        int, int, int, float, float, bool, str]


# Refused keys and values (limits, classes, messages, nothing changed): test_catalog_limits.py


def test_set_attributes_replaces_a_value_and_its_type(cat: Catalog) -> None:
    run = cat.create_run("astro", nprocs=1, root="/r", attributes={"res": 64, "tag": "a"})
    cat.set_attributes(run, {"res": 64.5, "new": False})
    assert cat.run(run).attributes == {"res": 64.5, "tag": "a", "new": False}
    assert type(cat.run(run).attributes["res"]) is float
    with cat.engine.connect() as con:  # replaced, not duplicated
        assert con.execute(sa.select(sa.func.count()).select_from(S.attributes)
                           .where(S.attributes.c.key == "res")).scalar_one() == 1


# ------------------------------------------------------------------------------ find
@pytest.fixture
def three_runs(cat: Catalog) -> list[int]:
    r1 = cat.create_run("astro", nprocs=4, root="/a", attributes={"res": 64, "model": "ideal", "cfl": 0.4})
    r2 = cat.create_run("astro", nprocs=8, root="/b", attributes={"res": 128, "model": "mhd", "cfl": 0.8})
    r3 = cat.create_run("climate", nprocs=2, root="/c", attributes={"res": 256, "ocean": True})
    _set_created(cat, r1, datetime(2024, 1, 1, 12, 0, tzinfo=UTC))
    _set_created(cat, r2, datetime(2024, 2, 1, 0, 0, tzinfo=UTC))
    _set_created(cat, r3, datetime(2024, 3, 1, 12, 0, tzinfo=UTC))
    return [r1, r2, r3]


def test_find_by_application_run_and_dates(cat: Catalog, three_runs: list[int]) -> None:
    r1, r2, r3 = three_runs
    assert _ids(cat.find()) == [r3, r2, r1]  # newest first, as sdm ls lists them
    assert _ids(cat.find(application="astro")) == [r2, r1]
    assert _ids(cat.find(application="climate")) == [r3]
    assert cat.find(application="unknown") == []
    assert _ids(cat.find(run=r2)) == [r2]
    assert cat.find(run=r2, application="climate") == []

    assert _ids(cat.find(since=datetime(2024, 1, 15, tzinfo=UTC))) == [r3, r2]
    assert _ids(cat.find(until=datetime(2024, 2, 1, tzinfo=UTC))) == [r2, r1]  # inclusive
    assert _ids(cat.find(since=datetime(2024, 2, 1), until=datetime(2024, 2, 1))) == [r2]  # naive = UTC
    assert _ids(cat.find(since=datetime(2024, 1, 2), until=datetime(2024, 1, 31))) == []
    plus_one = timezone(timedelta(hours=1))  # 01:00+01:00 is midnight UTC
    assert _ids(cat.find(since=datetime(2024, 2, 1, 1, 0, tzinfo=plus_one))) == [r3, r2]
    assert _ids(cat.find(until=datetime(2024, 2, 1, 0, 59, tzinfo=plus_one))) == [r1]
    assert _ids(cat.find(application="astro", since=datetime(2024, 1, 15))) == [r2]
    assert cat.run(r1).created_at == datetime(2024, 1, 1, 12, 0, tzinfo=UTC)


def test_find_equality_and_range_conditions(cat: Catalog, three_runs: list[int]) -> None:
    r1, r2, r3 = three_runs
    assert _ids(cat.find(attributes={"res": 64})) == [r1]
    assert _ids(cat.find(attributes={"res": 64.0})) == [r1]  # numbers compare as numbers
    assert _ids(cat.find(attributes={"model": "mhd"})) == [r2]
    assert _ids(cat.find(attributes={"ocean": True})) == [r3]
    assert _ids(cat.find(attributes={"res": ("!=", 64)})) == [r3, r2]
    assert _ids(cat.find(attributes={"res": (">=", 128)})) == [r3, r2]
    assert _ids(cat.find(attributes={"res": (">", 128)})) == [r3]
    assert _ids(cat.find(attributes={"res": ("<", 128)})) == [r1]
    assert _ids(cat.find(attributes={"res": ("<=", 128), "cfl": (">", 0.5)})) == [r2]
    assert _ids(cat.find(attributes={"model": ("<", "j")})) == [r1]  # text compares as text
    assert cat.find(attributes={"res": "64"}) == []  # a string never equals a number
    assert cat.find(attributes={"ocean": 1}) == []  # nor a number a bool
    assert cat.find(attributes={"missing": 1}) == []
    conds = [parse_condition("res>=100"), parse_condition("model=mhd")]
    assert _ids(cat.find(conditions=conds)) == [r2]
    assert _ids(cat.find(application="astro", conditions=[parse_condition("cfl<0.5")])) == [r1]


def test_find_matches_dataset_group_and_run_attributes(cat: Catalog) -> None:
    run = cat.create_run("astro", nprocs=4, root="/a", attributes={"res": 64})
    other = cat.create_run("astro", nprocs=4, root="/b", attributes={"res": 32})
    fields = cat.define_group(run, "fields", 3, _specs())
    diag = cat.define_group(run, "diag", 1, [DatasetSpec("spectrum", "<f8", (32,), "C"),
                                              DatasetSpec("energy", "<f8", (1,), "C")])
    cat.define_group(other, "fields", 3, _specs())
    # group-level, propagated to its datasets (what Group.set_attributes does)
    cat.set_attributes(run, {"kind": "field"}, group_id=fields.id, dataset_ids=[d.id for d in fields.datasets])
    # group-level only, not on the datasets' rows
    cat.set_attributes(run, {"cadence": 10}, group_id=diag.id)
    # dataset-level only
    _dataset_only(cat, run, diag.id, diag.dataset("spectrum").id, {"bins": 32})

    rec = cat.run(run)
    assert rec.groups[0].datasets[0].attributes == {"kind": "field"}
    assert rec.groups[1].attributes == {"cadence": 10}
    assert rec.groups[1].datasets[0].attributes == {"bins": 32}
    assert rec.groups[1].datasets[1].attributes == {}

    (found,) = cat.find(attributes={"bins": 32})  # dataset level: that dataset only
    assert found.id == run and _names(found) == [("diag", "spectrum")]
    (found,) = cat.find(attributes={"cadence": (">=", 5)})  # group level: the group's datasets
    assert _names(found) == [("diag", "spectrum"), ("diag", "energy")]
    (found,) = cat.find(attributes={"kind": "field"})
    assert _names(found) == [("fields", "rho"), ("fields", "e")]
    (found,) = cat.find(attributes={"res": 64})  # run level: every dataset of the run
    assert _names(found) == [("fields", "rho"), ("fields", "e"), ("diag", "spectrum"), ("diag", "energy")]
    (found,) = cat.find(attributes={"res": 64, "cadence": 10, "bins": 32})  # all levels at once
    assert _names(found) == [("diag", "spectrum")]
    assert cat.find(attributes={"kind": "field", "bins": 32}) == []  # no dataset carries both
    assert cat.find(attributes={"bins": 31}) == []
    found = cat.find(attributes={"res": (">", 0)})
    assert _ids(found) == [other, run]
    assert _names(found[0]) == [("fields", "rho"), ("fields", "e")]


def test_the_most_specific_attribute_value_wins(cat: Catalog) -> None:
    run = cat.create_run("astro", nprocs=4, root="/a", attributes={"res": 64})
    g = cat.define_group(run, "fields", 3, _specs())
    _dataset_only(cat, run, g.id, g.dataset("e").id, {"res": 128})  # e overrides the run
    (found,) = cat.find(attributes={"res": 64})
    assert _names(found) == [("fields", "rho")]
    (found,) = cat.find(attributes={"res": 128})
    assert _names(found) == [("fields", "e")]
    (found,) = cat.find(attributes={"res": ("!=", 128)})
    assert _names(found) == [("fields", "rho")]


# ---------------------------------------------------------------------------- groups
def test_define_group_is_idempotent_and_refuses_conflicts(cat: Catalog) -> None:
    run = cat.create_run("astro", nprocs=4, root="/a")
    g = cat.define_group(run, "fields", 2, _specs())
    assert (g.run_id, g.name, g.level) == (run, "fields", 2)
    assert [(d.name, d.dtype, d.shape, d.order, d.steps) for d in g.datasets] == [
        ("rho", "<f8", (8, 6), "C", ()), ("e", "<f4", (8, 6), "F", ())]
    assert g.datasets[0].nbytes == 8 * 6 * 8 and g.datasets[1].nbytes == 8 * 6 * 4
    counts = cat.counts()
    assert (counts["groups"], counts["datasets"]) == (1, 2)

    again = cat.define_group(run, "fields", 2, _specs())
    assert again == g and cat.counts() == counts

    conflicts = [
        (3, _specs()),  # other level
        (2, _specs()[:1]),  # fewer datasets
        (2, [*_specs(), DatasetSpec("p", "<f8", (8, 6), "C")]),  # more datasets
        (2, [DatasetSpec("rho", "<f8", (8, 7), "C"), _specs()[1]]),  # other shape
        (2, [DatasetSpec("rho", "<f4", (8, 6), "C"), _specs()[1]]),  # other dtype
        (2, [DatasetSpec("rho", "<f8", (8, 6), "F"), _specs()[1]]),  # other order
        (2, _specs()[::-1]),  # other order of datasets
    ]
    for level, specs in conflicts:
        with pytest.raises(GroupExistsError, match=rf"^group 'fields' already exists in run {run} with level 2"):
            cat.define_group(run, "fields", level, specs)
        assert cat.counts() == counts
    assert cat.group(run, "fields") == g

    h = cat.define_group(run, "diag", 1, [DatasetSpec("x", "|u1", (3,), "C")])
    assert [gr.name for gr in cat.run(run).groups] == ["fields", "diag"]
    assert h.id != g.id
    other = cat.create_run("astro", nprocs=4, root="/b")  # same name in another run is another group
    assert cat.define_group(other, "fields", 3, _specs()).id not in {g.id, h.id}
    with pytest.raises(GroupNotFoundError, match=r"has no group 'nope'; its groups are \['fields', 'diag'\]"):
        cat.group(run, "nope")


def test_set_distribution(cat: Catalog) -> None:
    run = cat.create_run("astro", nprocs=4, root="/a")
    g = cat.define_group(run, "fields", 3, _specs())
    view = {"kind": "block", "grid": [2, 2], "ghosts": 1}
    cat.set_distribution([g.datasets[0].id], view)
    rho, e = cat.group(run, "fields").datasets
    assert rho.distribution == view and e.distribution is None


# ---------------------------------------------------------------------------- writes
def test_record_and_look_up_writes(cat: Catalog) -> None:
    run = cat.create_run("astro", nprocs=4, root="/a")
    rho, e = cat.define_group(run, "fields", 2, _specs()).datasets
    big = 5 * 2**32  # offsets beyond 32 bits
    _write(cat, run, rho.id, 0, path="astro/run-1/fields.dat", offset=0, nbytes=384, checksum="0000000000000001")
    _write(cat, run, rho.id, 10, path="astro/run-1/fields.dat", offset=384, nbytes=384, checksum="0000000000000002")
    _write(cat, run, e.id, 0, path="astro/run-1/fields.dat", offset=768, nbytes=192, method="independent")
    _write(cat, run, e.id, 5, path="astro/run-1/big.dat", offset=big, nbytes=192, level=3)

    w = cat.lookup_write(rho.id, 10)
    assert (w.dataset_id, w.step, w.path, w.offset, w.nbytes) == (rho.id, 10, "astro/run-1/fields.dat", 384, 384)
    assert (w.checksum, w.checksum_algo, w.method, w.seconds, w.nprocs) == (
        "0000000000000002", "sum64", "collective", 0.25, 4)
    assert w.written_at.utcoffset() == timedelta(0)
    assert abs(w.written_at - datetime.now(UTC)) < timedelta(minutes=5)
    assert cat.lookup_write(e.id, 5).offset == big
    assert cat.lookup_write(rho.id, 1) is None
    assert cat.lookup_write(e.id, 10) is None

    assert cat.file_end(run, "astro/run-1/fields.dat") == 960
    assert cat.file_end(run, "astro/run-1/big.dat") == big + 192
    assert cat.file_end(run, "astro/run-1/none.dat") == 0

    assert cat.files(run) == [
        FileRecord("astro/run-1/big.dat", 3, 1, 192),
        FileRecord("astro/run-1/fields.dat", 2, 3, 960),
    ]
    assert [(g, d, w.step, w.path, w.offset) for g, d, w in cat.writes(run)] == [
        ("fields", "e", 5, "astro/run-1/big.dat", big),
        ("fields", "rho", 0, "astro/run-1/fields.dat", 0),
        ("fields", "rho", 10, "astro/run-1/fields.dat", 384),
        ("fields", "e", 0, "astro/run-1/fields.dat", 768),
    ]
    got = cat.group(run, "fields")
    assert (got.dataset("rho").steps, got.dataset("e").steps) == ((0, 10), (0, 5))
    assert cat.counts()["files"] == 2 and cat.counts()["writes"] == 4

    other = cat.create_run("astro", nprocs=4, root="/b")  # files belong to their run
    assert cat.files(other) == [] and cat.writes(other) == []
    assert cat.file_end(other, "astro/run-1/fields.dat") == 0


def test_same_step_twice_needs_overwrite(cat: Catalog) -> None:
    run = cat.create_run("astro", nprocs=4, root="/a")
    rho, _ = cat.define_group(run, "fields", 2, _specs()).datasets
    _write(cat, run, rho.id, 3, path="f.dat", offset=0, checksum="00000000000000aa")
    counts, files = cat.counts(), cat.files(run)

    with pytest.raises(StepExistsError, match=rf"^step 3 of dataset id {rho.id} is already recorded; pass overwrite=True to replace it$"):
        _write(cat, run, rho.id, 3, path="f.dat", offset=384, checksum="00000000000000bb")
    with pytest.raises(ValueError):  # StepExistsError is a ValueError; a new file row is rolled back too
        _write(cat, run, rho.id, 3, path="g.dat", offset=0)
    assert cat.counts() == counts and cat.files(run) == files
    w = cat.lookup_write(rho.id, 3)
    assert (w.path, w.offset, w.checksum, w.version) == ("f.dat", 0, "00000000000000aa", 1)

    _write(cat, run, rho.id, 3, path="f.dat", offset=384, checksum="00000000000000cc",
           method="list", overwrite=True, version=2, replaces=1)
    w = cat.lookup_write(rho.id, 3)
    assert (w.path, w.offset, w.checksum, w.method, w.version) == ("f.dat", 384, "00000000000000cc", "list", 2)
    assert cat.counts() == counts  # the row switched to the new bytes
    assert cat.file_end(run, "f.dat") == 768

    # a second job that still believes version 1 is current loses, and nothing changes
    with pytest.raises(StepExistsError, match=rf"^step 3 of dataset id {rho.id} was overwritten or removed by "
                                              r"another job while this write ran; nothing was recorded"):
        _write(cat, run, rho.id, 3, path="f.dat", offset=768, overwrite=True, version=2, replaces=1)
    assert cat.lookup_write(rho.id, 3).offset == 384 and cat.counts() == counts

    _write(cat, run, rho.id, 3, path="g.dat", offset=0, overwrite=True, level=3, version=3, replaces=2)
    assert cat.lookup_write(rho.id, 3).path == "g.dat"
    assert cat.counts()["writes"] == counts["writes"] and cat.counts()["files"] == counts["files"] + 1
    assert cat.files(run) == [FileRecord("f.dat", 2, 0, 0), FileRecord("g.dat", 3, 1, 384)]


def test_two_catalog_objects_share_one_catalog(catalog_url: str) -> None:
    a, b = Catalog(catalog_url), Catalog(catalog_url)
    try:
        run = a.create_run("astro", nprocs=2, root="/a", attributes={"x": 1})
        assert b.run(run).attributes == {"x": 1}
        b.set_attributes(run, {"x": 2})
        assert a.run(run).attributes == {"x": 2}
    finally:
        a.close()
        b.close()


# ------------------------------------------------------------------- unreachable URLs
def test_unreachable_postgresql_server() -> None:
    url = "postgresql://nobody@127.0.0.1:1/x"
    with pytest.raises(CatalogUnavailableError) as info:
        Catalog(url)
    assert str(info.value).startswith(f"cannot open catalog {url!r}: ")
    assert isinstance(info.value, ConnectionError)


def test_sqlite_under_a_missing_directory(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/missing/dir/catalog.db"
    with pytest.raises(CatalogUnavailableError) as info:
        Catalog(url, create=False)
    assert str(info.value) == f"catalog {url!r}: directory {tmp_path}/missing/dir does not exist"
    assert not (tmp_path / "missing").exists()


@pytest.mark.parametrize("url, message", [
    ("mysql://u@h/db", "catalog URL scheme 'mysql' is not supported; use sqlite:/// or postgresql://"),
    ("sqlite:/catalog.db", "catalog URL 'sqlite:/catalog.db' is not a URL; use sqlite:///path/to/catalog.db or "
                           "postgresql://user@host:port/dbname"),
    ("host:5432/db", "catalog URL 'host:5432/db' is not a URL; use sqlite:///path/to/catalog.db or "
                     "postgresql://user@host:port/dbname"),
])
def test_bad_catalog_urls(url: str, message: str) -> None:
    with pytest.raises(CatalogUnavailableError) as info:
        Catalog(url)
    assert str(info.value) == message


def test_version_1_catalog_is_migrated_in_place(catalog_url: str) -> None:
    """A catalog written before Alembic by schema version 1 opens at the head revision, data intact."""
    cat = Catalog(catalog_url)
    run = cat.create_run("old", nprocs=2, root="/r", attributes={"k": 1})
    g = cat.define_group(run, "g", 2, _specs())
    _write(cat, run, g.dataset("rho").id, 0, path="old/run/g.rho.sdm", offset=128)
    cat.close()
    make_version_1(catalog_url)  # turn it back into what version 1 created
    cat = Catalog(catalog_url, create=False)
    assert cat.schema_version == "0013" and _revisions(cat) == ["0013"]
    with cat.engine.connect() as con:
        assert "sources" in {c["name"] for c in sa.inspect(con).get_columns("index_histories")}
        assert con.execute(sa.select(S.files.c.alloc_end)).scalars().all() == [128 + 384]
    assert cat.find(attributes={"k": 1})[0].id == run
    rec = cat.run(run)
    assert (rec.dir, rec.state) == (f"old/run-{run:06d}", "closed")
    (w,) = [w for _, _, w in cat.writes(run)]
    assert (w.path, w.step, w.reason, w.version) == ("old/run/g.rho.sdm", 0, None, 1)
    insp = sa.inspect(cat.engine)
    assert all(insp.has_table(t.name) for t in S.V2_TABLES)
    assert len(cat.id) == 32
    cat.close()


def test_new_run_returns_what_run_reads_back(catalog_url: str, tmp_path: Path) -> None:
    """The record new_run builds from what it stored equals the one read back (no second query at open)."""
    cat = Catalog(catalog_url)
    try:
        attrs = {"res": np.int64(64), "dt": np.float32(0.5), "ok": np.bool_(True), "name": "x\u00e9", "big": 2**62}
        made = cat.new_run("astro", nprocs=3, root=str(tmp_path), problem_size=np.array([4, 5]), attributes=attrs,
                           make_dir=lambda rid: f"astro/run-{rid}")
        assert made == cat.run(made.id)
        assert (made.dir, made.state, made.problem_size) == (f"astro/run-{made.id}", "open", [4, 5])
        assert made.attributes == {"res": 64, "dt": 0.5, "ok": True, "name": "x\u00e9", "big": 2**62}
        assert type(made.attributes["res"]) is int and type(made.attributes["ok"]) is bool
        plain = cat.new_run("astro", nprocs=1, root="/r")
        assert plain == cat.run(plain.id) and (plain.dir, plain.state, plain.attributes) == (None, "closed", {})
    finally:
        cat.close()


def test_space_is_reserved_at_an_alignment_when_asked(catalog_url: str) -> None:
    """An aligned request (subfile extents) starts at the first multiple at or past the high-water mark, in
    SQLite's and PostgreSQL's integer arithmetic alike; plain requests follow the mark as before."""
    cat = Catalog(catalog_url)
    try:
        run = cat.create_run("align", nprocs=1, root="/data")
        got = cat.reserve(run, [("a/f.sub00000.sdm", 3, 100, False, 4096), ("a/f.sub00000.sdm", 3, 5000, False, 4096),
                                ("a/f.sub00000.sdm", 3, 10, False), ("a/f.sub00000.sdm", 3, 1, False, 4096),
                                ("a/f.sub00000.sdm", 3, 7, False, 4096)])
        assert got == [0, 4096, 9096, 12288, 16384]
        assert cat.file_end(run, "a/f.sub00000.sdm") == 0  # nothing committed yet
    finally:
        cat.close()
