"""Attribute limits of the catalog, the same on SQLite and a real PostgreSQL server.

Every refused key or value is refused before the database sees it, at every place an
attribute enters (``create_run``, ``set_attributes`` on a run, a group or datasets,
``find``, ``latest_run``, ``Condition``, ``sdm find key=value``), with
:class:`sdm.InvalidArgumentError` and the exact message; the catalog's row counts are
the same afterwards. Values at the limits are accepted, stored exactly and found again.
numpy scalars are stored and searched like the Python values they hold.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from sdm._cli.main import app
from sdm.catalog import Catalog, Condition, DatasetSpec, parse_condition
from sdm.catalog import schema as S
from sdm.errors import CatalogError, InvalidArgumentError, RunNotFoundError

pytestmark = pytest.mark.timeout(180)

TYPES = "use bool, int, float or str"
INT_RANGE = "[-9223372036854775808, 9223372036854775807]"
NAN = "NaN cannot be stored or searched (it equals nothing); use a finite number, inf, or a string such as 'nan'"


@pytest.fixture
def cat(catalog_url: str):
    c = Catalog(catalog_url)
    yield c
    c.close()


def _table_rows(cat: Catalog) -> dict[str, int]:
    """Row counts of every table, counted here (not through Catalog.counts)."""
    out = {}
    with cat.engine.connect() as con:
        for t in S.metadata.sorted_tables:
            if sa.inspect(con).has_table(t.name):
                out[t.name] = con.execute(sa.select(sa.func.count()).select_from(t)).scalar_one()
    return out


# (id, key, value, exact message)
BAD = [
    ("key-256-chars", "k" * 256, 1,
     "attribute key '" + "k" * 56 + "... has 256 characters; keys have at most 255"),
    ("key-nul", "a\x00b", 1, "attribute key 'a\\x00b' holds a NUL character; keys are text without NUL"),
    ("key-surrogate", "k\ud800", 1,
     "attribute key 'k\\ud800' cannot be encoded as UTF-8 (lone surrogate); keys are valid Unicode text"),
    ("key-empty", "", 1, "attribute key must be a non-empty string, got ''"),
    ("key-blank", "  ", 1, "attribute key must be a non-empty string, got '  '"),
    ("key-int", 5, 1, "attribute key must be a non-empty string, got 5"),
    ("value-nul", "note", "a\x00b", "attribute 'note': string value holds a NUL character; strings are text without NUL"),
    ("value-surrogate", "note", "\udc80",
     "attribute 'note': string value cannot be encoded as UTF-8 (lone surrogate); strings are valid Unicode text"),
    ("value-1026-bytes", "note", "\u00e9" * 513,
     "attribute 'note': string value has 1026 bytes in UTF-8; string values have at most 1024"),
    ("int-2**63", "n", 2**63,
     f"attribute 'n': integer 9223372036854775808 is outside the signed 64-bit range {INT_RANGE}; "
     "store it as a string (or a float) instead"),
    ("int-below-int64", "n", -(2**63) - 1,
     f"attribute 'n': integer -9223372036854775809 is outside the signed 64-bit range {INT_RANGE}; "
     "store it as a string (or a float) instead"),
    ("uint64-max", "n", np.uint64(2**64 - 1),
     f"attribute 'n': integer 18446744073709551615 is outside the signed 64-bit range {INT_RANGE}; "
     "store it as a string (or a float) instead"),
    ("int-10**400", "n", 10**400,
     f"attribute 'n': integer 1{'0' * 56}... is outside the signed 64-bit range {INT_RANGE}; "
     "store it as a string (or a float) instead"),
    ("nan", "x", float("nan"), f"attribute 'x': {NAN}"),
    ("np-float32-nan", "x", np.float32("nan"), f"attribute 'x': {NAN}"),
    ("list", "shape", [1, 2], f"attribute 'shape': value [1, 2] of type list is not supported; {TYPES}"),
    ("tuple", "shape", (1, 2), f"attribute 'shape': value (1, 2) of type tuple is not supported; {TYPES}"),
    ("none", "none", None, f"attribute 'none': value None of type NoneType is not supported; {TYPES}"),
    ("dict", "d", {"a": 1}, f"attribute 'd': value {{'a': 1}} of type dict is not supported; {TYPES}"),
    ("array", "arr", np.array([1, 2]), f"attribute 'arr': value array([1, 2]) of type ndarray is not supported; {TYPES}"),
    ("array-0d", "arr", np.array(5), f"attribute 'arr': value array(5) of type ndarray is not supported; {TYPES}"),
    ("bytes", "raw", b"x", f"attribute 'raw': value b'x' of type bytes is not supported; {TYPES}"),
    ("complex", "z", 1 + 2j, f"attribute 'z': value (1+2j) of type complex is not supported; {TYPES}"),
    ("np-complex", "z", np.complex128(1), f"attribute 'z': value np.complex128(1+0j) of type complex128 "
                                          f"is not supported; {TYPES}"),
    ("np-datetime", "t", np.datetime64("2020-01-01"),
     f"attribute 't': value np.datetime64('2020-01-01') of type datetime64 is not supported; {TYPES}"),
]


def _entries(cat: Catalog, run: int, group_id: int, dataset_ids: list[int]):
    """Every way an attribute enters the catalog, as (name, call taking the attributes dict)."""
    return [
        ("create_run", lambda a: cat.create_run("astro", nprocs=1, root="/r", attributes={"ok": 1, **a})),
        ("set_attributes run", lambda a: cat.set_attributes(run, {"ok": 2, **a})),
        ("set_attributes group", lambda a: cat.set_attributes(run, {"ok": 3, **a}, group_id=group_id,
                                                              dataset_ids=dataset_ids)),
        ("set_attributes datasets", lambda a: cat.set_attributes(run, {"ok": 4, **a}, group_id=group_id,
                                                                 dataset_ids=dataset_ids[:1], on_group=False)),
        ("find", lambda a: cat.find(attributes={"ok": 1, **a})),
        ("find range", lambda a: cat.find(attributes={k: ("<=", v) for k, v in a.items()})),
        ("latest_run", lambda a: cat.latest_run("astro", {"ok": 1, **a})),
        ("Condition", lambda a: cat.find(conditions=[Condition(k, "!=", v) for k, v in a.items()])),
    ]


@pytest.fixture
def one_run(cat: Catalog) -> tuple[int, int, list[int]]:
    run = cat.create_run("astro", nprocs=1, root="/r", attributes={"ok": 1})
    g = cat.define_group(run, "fields", 3, [DatasetSpec("rho", "<f8", (4,), "C"), DatasetSpec("e", "<f4", (4,), "C")])
    return run, g.id, [d.id for d in g.datasets]


@pytest.mark.parametrize("key, value, message", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_refused_everywhere_with_nothing_changed(cat: Catalog, one_run, key, value, message) -> None:
    run, gid, dids = one_run
    before = _table_rows(cat)
    stored_before = cat.run(run)
    for where, call in _entries(cat, run, gid, dids):
        with pytest.raises(InvalidArgumentError) as info:
            call({key: value})
        assert type(info.value) is InvalidArgumentError, where
        assert str(info.value) == message, where
        assert isinstance(info.value, ValueError)
    assert _table_rows(cat) == before
    assert cat.run(run) == stored_before


def test_attributes_that_are_not_a_mapping(cat: Catalog, one_run) -> None:
    run, gid, dids = one_run
    before = _table_rows(cat)
    for call in (lambda: cat.create_run("astro", nprocs=1, root="/r", attributes=[("a", 1)]),
                 lambda: cat.set_attributes(run, [("a", 1)]),
                 lambda: cat.set_attributes(run, "a=1", group_id=gid, dataset_ids=dids)):
        with pytest.raises(InvalidArgumentError) as info:
            call()
        assert type(info.value) is InvalidArgumentError
        assert str(info.value).startswith("attributes must be a dict of {key: value}, got ")
    with pytest.raises(InvalidArgumentError) as info:
        cat.find(attributes=["a"])
    assert str(info.value) == "attributes must be a dict of {key: value} or {key: (op, value)}, got list"
    with pytest.raises(InvalidArgumentError) as info:
        cat.find(conditions=["a=1"])
    assert str(info.value) == ("conditions must be Condition objects (see sdm.catalog.parse_condition), "
                               "got 'a=1'")
    with pytest.raises(InvalidArgumentError) as info:
        Condition("a", "~", 1)
    assert str(info.value) == "unknown comparison '~'; use one of ['!=', '<', '<=', '=', '==', '>', '>=']"
    with pytest.raises(InvalidArgumentError) as info:
        cat.find(run="1")
    assert str(info.value) == "a run id is an integer, got '1' of type str"
    assert _table_rows(cat) == before


def test_set_attributes_of_a_missing_run(cat: Catalog) -> None:
    before = _table_rows(cat)
    with pytest.raises(RunNotFoundError) as info:
        cat.set_attributes(12345, {"a": 1})
    assert str(info.value) == f"no run 12345 in catalog {cat.url!r}"
    with pytest.raises(RunNotFoundError):
        cat.set_attributes(2**70, {"a": 1})
    assert _table_rows(cat) == before


def test_huge_run_ids_are_not_found(cat: Catalog) -> None:
    with pytest.raises(RunNotFoundError) as info:
        cat.run(99999999999999999999999)
    assert str(info.value) == f"no run 99999999999999999999999 in catalog {cat.url!r}"
    assert cat.find(run=99999999999999999999999) == []


def test_values_at_the_limits_are_stored_exactly_and_found(cat: Catalog) -> None:
    rng = np.random.default_rng(7)
    # 1024 UTF-8 bytes that do not compress (PostgreSQL indexes (key, value) uncompressed
    # up to ~2.7 kB): 341 random 3-byte characters + 1 byte
    chars = rng.integers(0x800, 0xD7FF, size=341)
    long_value = "".join(chr(c) for c in chars) + "x"
    assert len(long_value.encode("utf-8")) == 1024
    long_key = "\U0001D11E" * 255  # 255 characters of 4 bytes each
    attrs = {
        long_key: long_value,
        "k" * 255: "v",
        "imax": 2**63 - 1,
        "imin": -(2**63),
        "pinf": float("inf"),
        "ninf": float("-inf"),
        "negzero": -0.0,
        "tiny": 5e-324,
        "huge": 1.7976931348623157e308,
        "unicode": "ü∂😀",
        "text_nan": "nan",
    }
    run = cat.create_run("limits", nprocs=1, root="/r", attributes=attrs)
    other = cat.create_run("limits", nprocs=1, root="/r", attributes={"imax": 0, "pinf": 1.0})
    got = cat.run(run).attributes
    assert got == attrs
    assert {k: type(v) for k, v in got.items()} == {k: type(v) for k, v in attrs.items()}
    for key, value in attrs.items():
        assert [r.id for r in cat.find(application="limits", attributes={key: value})] == [run], key
    assert [r.id for r in cat.find(attributes={"imax": (">", 2**62)})] == [run]
    assert [r.id for r in cat.find(attributes={"pinf": (">", 1e308)})] == [run]
    assert [r.id for r in cat.find(attributes={"pinf": ("<", float("inf"))})] == [other]
    # the CLI reads "nan" as text, which finds the text value (a NaN could find nothing)
    assert parse_condition("text_nan=nan").value == "nan"


def test_numpy_scalars_match_like_python_values(cat: Catalog) -> None:
    a = cat.create_run("sim", nprocs=1, root="/r", attributes={"nx": 64, "dt": 0.5, "ok": True, "name": "abc"})
    b = cat.create_run("sim", nprocs=1, root="/r", attributes={"nx": 32, "dt": 0.25, "ok": False, "name": "xyz"})
    # stored through numpy scalars: the same rows as Python values
    c = cat.create_run("sim", nprocs=1, root="/r", attributes={
        "nx": np.int16(16), "dt": np.float32(0.125), "ok": np.bool_(True), "name": np.str_("np")})
    assert cat.run(c).attributes == {"nx": 16, "dt": 0.125, "ok": True, "name": "np"}
    cases = [
        ({"nx": np.int64(64)}, [a]), ({"nx": np.int32(64)}, [a]), ({"nx": np.uint16(64)}, [a]),
        ({"nx": np.float64(64.0)}, [a]), ({"nx": np.int8(16)}, [c]),
        ({"dt": np.float32(0.5)}, [a]), ({"dt": np.float64(0.25)}, [b]), ({"dt": np.float16(0.125)}, [c]),
        ({"ok": np.bool_(True)}, [a, c]), ({"ok": np.bool_(False)}, [b]),
        ({"name": np.str_("abc")}, [a]),
        ({"nx": (">", np.int64(20))}, [a, b]), ({"dt": ("<=", np.float32(0.25))}, [b, c]),
        ({"nx": np.int64(64), "name": np.str_("abc"), "ok": np.bool_(True)}, [a]),
        ({"nx": np.int64(65)}, []),
    ]
    for attrs, want in cases:  # want: oldest first; found: newest first
        assert [r.id for r in cat.find(application="sim", attributes=attrs)] == want[::-1], attrs
    assert [r.id for r in cat.find(conditions=[Condition("nx", "=", np.int64(32))])] == [b]
    assert cat.latest_run("sim", {"nx": np.int64(64)}).id == a
    assert cat.latest_run("sim", {"ok": np.bool_(True)}).id == c
    # set_attributes takes numpy scalars too, and they are found as Python values
    cat.set_attributes(b, {"nx": np.uint32(128)})
    assert cat.run(b).attributes["nx"] == 128 and type(cat.run(b).attributes["nx"]) is int
    assert [r.id for r in cat.find(attributes={"nx": 128})] == [b]


def test_values_compare_exactly_beyond_float_precision_and_across_types(cat: Catalog) -> None:
    """The SQL prefilter compares floats; the result must still be Python's exact comparison."""
    big = 2**53
    runs = {name: cat.create_run("cmp", nprocs=1, root="/r", attributes={"n": value}) for name, value in [
        ("a", big + 1), ("b", big), ("c", True), ("d", "9"), ("e", 1.5), ("f", -(2**63)), ("g", 2**63 - 1)]}
    cases = [
        ({"n": big + 1}, "a"), ({"n": ("<", big + 1)}, "bef"), ({"n": ("<=", big)}, "bef"),
        ({"n": (">", big)}, "ag"), ({"n": (">=", big + 1)}, "ag"), ({"n": ("!=", big)}, "aefg"),
        ({"n": True}, "c"), ({"n": ("!=", True)}, ""), ({"n": 1}, ""), ({"n": "9"}, "d"),
        ({"n": ("<", "\u00e9")}, "d"), ({"n": ("<", "A")}, "d"), ({"n": (">", "A")}, ""), ({"n": 2**63 - 2}, ""),
        ({"n": (">", 2**63 - 2)}, "g"), ({"n": -(2**63)}, "f"), ({"n": ("<", -(2**63) + 1)}, "f"),
        ({"n": ("<", float("inf"))}, "abefg"),
    ]
    for attrs, want in cases:
        assert [r.id for r in cat.find(application="cmp", attributes=attrs)] == [runs[x] for x in want[::-1]], attrs
    # a dataset's own value overrides its run's: found through the dataset only
    run = cat.create_run("over", nprocs=1, root="/r", attributes={"m": 1})
    g = cat.define_group(run, "fields", 3, [DatasetSpec("rho", "<f8", (4,), "C"), DatasetSpec("e", "<f4", (4,), "C")])
    cat.set_attributes(run, {"m": 5}, group_id=g.id, dataset_ids=[g.datasets[1].id], on_group=False)
    (found,) = cat.find(application="over", attributes={"m": 5})
    assert [(grp.name, d.name) for grp in found.groups for d in grp.datasets] == [("fields", "e")]
    (found,) = cat.find(application="over", attributes={"m": 1})
    assert [(grp.name, d.name) for grp in found.groups for d in grp.datasets] == [("fields", "rho")]


def _cli(*args: str):
    return CliRunner().invoke(app, list(args))


@pytest.mark.parametrize("cond, message", [
    ("n=9223372036854775808",
     f"attribute 'n': integer 9223372036854775808 is outside the signed 64-bit range {INT_RANGE}; "
     "store it as a string (or a float) instead"),
    ("k" * 256 + "=1", "attribute key '" + "k" * 56 + "... has 256 characters; keys have at most 255"),
    ("note=" + "\u00e9" * 600, "attribute 'note': string value has 1200 bytes in UTF-8; string values have at most 1024"),
])
def test_cli_find_refuses_bad_conditions(catalog_url: str, cond: str, message: str) -> None:
    cat = Catalog(catalog_url)
    try:
        cat.create_run("astro", nprocs=1, root="/r", attributes={"n": 1})
        before = _table_rows(cat)
        result = _cli("find", "--catalog", catalog_url, cond)
        assert result.exit_code == 1
        assert result.stderr.strip() == f"error: {message}"
        assert "Traceback" not in result.output
        assert _table_rows(cat) == before
        ok = _cli("find", "--catalog", catalog_url, "--json", "n=1")
        assert ok.exit_code == 0 and len(json.loads(ok.stdout)["runs"]) == 1
    finally:
        cat.close()


# ---------------------------------------------------------------- catalogs at scale
N_RUNS = 30_000
N_WITH_GROUPS = 22_000  # runs with 3 groups each: 66,000 group ids, over PostgreSQL's 65,535 parameters


@pytest.fixture
def few_sqlite_parameters():
    """Every SQLite connection opened meanwhile allows 999 bound parameters per statement.

    999 is SQLite's compiled-in default before 3.32 (32,766 since; this host's build allows
    250,000), so the searches are shown to use a fixed, small number of parameters.
    """
    from sqlalchemy.engine import Engine

    def limit(dbapi_con, _record):
        if isinstance(dbapi_con, sqlite3.Connection):
            dbapi_con.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 999)

    sa.event.listen(Engine, "connect", limit)
    yield
    sa.event.remove(Engine, "connect", limit)


def _bulk_runs(cat: Catalog, n: int) -> list[int]:
    """n runs of application 'bulk' inserted with executemany; returns their ids, oldest first.

    Every run has nx=64 except the newest 600 (nx=32), and 'i' = its index; the oldest
    N_WITH_GROUPS runs have three empty groups g0, g1, g2; the first run also has a group
    'fields' with dataset 'rho' written at steps 0 and 5.
    """
    from datetime import datetime, timedelta, timezone

    t0 = datetime(2024, 1, 1, tzinfo=timezone.utc)
    with cat.engine.begin() as con:
        app_id = con.execute(S.applications.insert().values(name="bulk", created_at=t0)).inserted_primary_key[0]
        con.execute(S.runs.insert(), [
            {"application_id": app_id, "created_at": t0 + timedelta(seconds=i), "nprocs": 2,
             "problem_size": None, "root": "/bulk"} for i in range(n)])
        ids = [r[0] for r in con.execute(sa.select(S.runs.c.id).where(S.runs.c.application_id == app_id)
                                         .order_by(S.runs.c.created_at))]
        rows = []
        for i, rid in enumerate(ids):
            nx = 32 if i >= n - 600 else 64
            rows.append({"run_id": rid, "group_id": None, "dataset_id": None, "key": "nx",
                         "value_type": "int", "value_num": float(nx), "value_str": str(nx)})
            rows.append({"run_id": rid, "group_id": None, "dataset_id": None, "key": "i",
                         "value_type": "int", "value_num": float(i), "value_str": str(i)})
        con.execute(S.attributes.insert(), rows)
        con.execute(S.groups.insert(), [{"run_id": rid, "name": f"g{k}", "level": 2, "position": k}
                                        for rid in ids[:N_WITH_GROUPS] for k in range(3)])
    g = cat.define_group(ids[0], "fields", 2, [DatasetSpec("rho", "<f8", (4,), "C")])
    for step in (0, 5):
        cat.record_write(run_id=ids[0], dataset_id=g.datasets[0].id, step=step, path="bulk/f.dat", level=2,
                         offset=32 * step, nbytes=32, checksum="0" * 16, checksum_algo="sum64",
                         method="posix", seconds=0.1, nprocs=2, overwrite=False)
    return ids


def test_find_and_latest_run_over_30000_runs(catalog_url: str, few_sqlite_parameters) -> None:
    cat = Catalog(catalog_url)
    try:
        ids = _bulk_runs(cat, N_RUNS)
        found = cat.find(application="bulk")[::-1]  # newest first: reversed, the oldest first
        assert [r.id for r in found] == ids
        assert found[0].attributes == {"nx": 64, "i": 0}
        assert [(g.name, [(d.name, d.steps, d.nsteps, d.first_step, d.last_step) for d in g.datasets])
                for g in found[0].groups] == [("g0", []), ("g1", []), ("g2", []), ("fields", [("rho", None, 2, 0, 5)])]
        assert cat.find(run=ids[0], steps=True)[0].groups[3].datasets[0].steps == (0, 5)
        assert all([g.name for g in r.groups] == ["g0", "g1", "g2"] for r in found[1:N_WITH_GROUPS])
        assert all(r.groups == () for r in found[N_WITH_GROUPS:])
        assert found[-1].attributes == {"nx": 32, "i": N_RUNS - 1}
        assert [r.id for r in cat.find(attributes={"nx": np.int64(32), "i": (">=", N_RUNS - 2)})] == ids[-2:][::-1]
        # the newest matching run lies three pages of newer, non-matching runs back
        assert cat.latest_run("bulk", {"nx": 64}).id == ids[N_RUNS - 601]
        assert cat.latest_run("bulk").id == ids[-1]
        with pytest.raises(RunNotFoundError):
            cat.latest_run("bulk", {"nx": 1})
        result = _cli("find", "--catalog", catalog_url, "--app", "bulk", "--json", "nx=64")
        assert result.exit_code == 0, result.output[-2000:]
        runs = json.loads(result.stdout)["runs"][::-1]  # newest first: reversed, the oldest first
        assert [r["id"] for r in runs] == ids[: N_RUNS - 600]
        assert (runs[0]["datasets"][0]["nsteps"], runs[0]["datasets"][0]["last_step"]) == (2, 5) and runs[0]["attributes"] == {"nx": 64, "i": 0}
    finally:
        cat.close()


def test_cli_find_failure_prints_no_traceback(tmp_path: Path) -> None:
    """A catalog failure while searching is one `error:` line, never a traceback."""
    url = f"sqlite:///{tmp_path}/catalog.db"
    cat = Catalog(url)
    cat.create_run("astro", nprocs=1, root="/r", attributes={"n": 1})
    with cat.engine.begin() as con:  # damage: the attributes table disappears
        con.execute(sa.text("DROP TABLE attributes"))
    cat.close()
    result = _cli("find", "--catalog", url, "n=1")
    assert result.exit_code == 1
    assert result.stderr.startswith(f"error: catalog {url!r}")  # failed to load runs (or found it damaged)
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.output
    with pytest.raises(CatalogError):
        Catalog(url).find(attributes={"n": 1})
