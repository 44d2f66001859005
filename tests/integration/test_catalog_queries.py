"""The database-side search against the Python-side filter it replaced, on both engines.

``Catalog.find``, ``Catalog.latest_run`` and ``Catalog.select_run`` evaluate attribute conditions in SQL
(:mod:`sdm.catalog.queries`). The reference here is the filter SDM used before: every
run loaded in full, then each dataset's effective attributes (run, overridden by group,
overridden by dataset) compared in Python with :meth:`Condition.matches`. It is kept,
unchanged, as :func:`_oracle` below, and both must return the same runs and, in each
run, the same datasets, on a catalog with overrides at every level, mixed value types
(integers beyond 2**53, floats next to them, infinities, -0.0, bools, text whose order
differs between byte and locale collations) and keys missing at some levels.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from sdm.catalog import Catalog, Condition, DatasetSpec, RunRecord
from sdm.errors import AmbiguousRunError, RunNotFoundError

pytestmark = pytest.mark.timeout(600)

KEYS = ["k0", "k1", "k2", "k3", "case"]
BIG = 2**53
VALUES: list[Any] = [
    0, 1, -1, 7, 64, BIG, BIG + 1, BIG - 1, 2**63 - 1, -(2**63), 2**62 + 1,
    0.0, -0.0, 0.5, 7.0, 64.0, 64.5, float(BIG), float(BIG + 2), 1e300, -1e300, math.inf, -math.inf,
    True, False,
    "", "a", "B", "b", "Z", "é", "z", "case-07", "case-7", "😀", "a b", "ä", "Ä",
]
OPS = ["=", "!=", "<", "<=", ">", ">="]


# ------------------------------------------------------------------- the oracle (the former filter)
def _matches_all(attrs: dict[str, Any], conds: list[Condition]) -> bool:
    return all(c.key in attrs and c.matches(attrs[c.key]) for c in conds)


def _oracle(runs: list[RunRecord], conds: list[Condition]) -> list[RunRecord]:
    """Keep runs whose own attributes match, or that hold datasets that match (those only)."""
    if not conds:
        return runs
    result = []
    for rec in runs:
        if not rec.groups:  # nothing to narrow down
            if _matches_all(rec.attributes, conds):
                result.append(rec)
            continue
        groups = []
        for g in rec.groups:
            ds = tuple(
                d for d in g.datasets if _matches_all({**rec.attributes, **g.attributes, **d.attributes}, conds)
            )
            if ds:
                groups.append(replace(g, datasets=ds))
        if groups or _matches_all(rec.attributes, conds):
            result.append(replace(rec, groups=tuple(groups)))
    return result


def _shape(runs: list[RunRecord]) -> list[tuple[int, list[tuple[str, list[str]]]]]:
    return [(r.id, [(g.name, [d.name for d in g.datasets]) for g in r.groups]) for r in runs]


# ------------------------------------------------------------------------------ the catalog
def _some(rng: random.Random, n: int) -> dict[str, Any]:
    return {k: rng.choice(VALUES) for k in rng.sample(KEYS, n)}


def _fill(cat: Catalog, seed: int = 7, nruns: int = 48) -> list[int]:
    """Runs with 0-3 groups of 0-3 datasets; attributes at every level, any key possibly missing."""
    rng = random.Random(seed)
    ids = []
    for i in range(nruns):
        app = "alpha" if i % 3 else "beta"
        run = cat.create_run(app, nprocs=2, root="/data", attributes=_some(rng, rng.randint(0, 4)))
        ids.append(run)
        for gi in range(rng.randint(0, 3)):
            specs = [DatasetSpec(f"d{j}", "<f8", (4,), "C") for j in range(rng.randint(0, 3))]
            g = cat.define_group(run, f"g{gi}", 2, specs)
            if rng.random() < 0.6:  # the group's own row, propagated or not to its datasets
                cat.set_attributes(run, _some(rng, rng.randint(1, 3)), group_id=g.id,
                                   dataset_ids=[d.id for d in g.datasets] if rng.random() < 0.3 else [])
            for d in g.datasets:
                if rng.random() < 0.5:
                    cat.set_attributes(run, _some(rng, rng.randint(1, 3)), group_id=g.id, dataset_ids=[d.id],
                                       on_group=False)
                for step in range(rng.randint(0, 3)):
                    cat.record_write(run_id=run, dataset_id=d.id, step=step * 2, path=f"r{run}/g{gi}.dat", level=2,
                                     offset=32 * step, nbytes=32, checksum="0" * 16, checksum_algo="sum64",
                                     method="posix", seconds=0.1, nprocs=2, overwrite=False)
    return ids


@pytest.fixture(scope="module")
def filled(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """One catalog per engine, shared by this module's tests (they only read it)."""
    if request.param == "postgresql":
        server = request.getfixturevalue("postgres_server")
        with server.fresh_database() as url:
            cat = Catalog(url)
            yield cat, _fill(cat), cat.find()
            cat.close()
        return
    cat = Catalog(f"sqlite:///{tmp_path_factory.mktemp('queries')}/catalog.db")
    yield cat, _fill(cat), cat.find()
    cat.close()


ENGINES = pytest.mark.parametrize("filled", ["sqlite", "postgresql"], indirect=True)


def _check(cat: Catalog, everything: list[RunRecord], conds: list[Condition], application: str | None = None) -> int:
    """find and latest_run agree with the oracle; returns the number of runs found."""
    pool = [r for r in everything if application is None or r.application == application]
    expected = _oracle(pool, conds)
    got = cat.find(application=application, conditions=conds)
    assert _shape(got) == _shape(expected), conds
    if application is not None and len({c.key for c in conds}) == len(conds):  # latest_run takes a dict
        attributes = {c.key: (c.op, c.value) for c in conds}
        if expected:
            newest = max(expected, key=lambda r: (r.created_at, r.id))
            assert _shape([cat.latest_run(application, attributes)]) == _shape([newest])
            assert _shape([cat.select_run(application, attributes, "latest")]) == _shape([newest])
        else:
            with pytest.raises(RunNotFoundError):
                cat.latest_run(application, attributes)
    if application is not None:  # select_run: the one match, or the matches listed newest first
        newest_first = sorted(expected, key=lambda r: (r.created_at, r.id), reverse=True)
        if len(expected) == 1:
            assert _shape([cat.select_run(application, conditions=conds)]) == _shape(expected)
        elif expected:
            with pytest.raises(AmbiguousRunError) as info:
                cat.select_run(application, conditions=conds)
            listed = [int(i) for i in re.findall(r"run (\d+) \(created ", str(info.value))]
            assert listed == [r.id for r in newest_first[:10]], conds
            assert str(info.value).startswith(f"{len(expected)} runs of {application!r} match ")
        else:
            with pytest.raises(RunNotFoundError):
                cat.select_run(application, conditions=conds)
    return len(got)


# ------------------------------------------------------------------------------------ tests
@ENGINES
def test_the_catalog_has_what_the_oracle_needs(filled) -> None:
    cat, ids, everything = filled
    assert [r.id for r in everything] == ids[::-1]  # newest first
    kinds = {type(v) for r in everything for v in r.attributes.values()}
    assert kinds == {int, float, bool, str}
    assert any(d.attributes for r in everything for g in r.groups for d in g.datasets)
    assert any(g.attributes for r in everything for g in r.groups)
    assert any(not r.groups for r in everything) and any(not g.datasets for r in everything for g in r.groups)


@ENGINES
def test_every_single_condition_agrees_with_the_oracle(filled) -> None:
    """Each key, operator and value of the pool: 5 x 6 x 38 conditions."""
    cat, _, everything = filled
    found = 0
    for key in KEYS:
        for op in OPS:
            for value in VALUES:
                found += _check(cat, everything, [Condition(key, op, value)]) > 0
    assert found > 300  # the pool is not vacuous: most conditions find something


@ENGINES
def test_conditions_with_an_application_and_latest_run(filled) -> None:
    cat, _, everything = filled
    rng = random.Random(3)
    for _ in range(60):
        conds = [Condition(rng.choice(KEYS), rng.choice(OPS), rng.choice(VALUES)) for _ in range(rng.randint(1, 2))]
        _check(cat, everything, conds, application=rng.choice(["alpha", "beta"]))


@ENGINES
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
          phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(st.lists(st.tuples(st.sampled_from(KEYS), st.sampled_from(OPS),
                          st.one_of(st.sampled_from(VALUES), st.integers(-(2**63), 2**63 - 1),
                                    st.floats(allow_nan=False), st.text(max_size=3))),
                min_size=1, max_size=3))
def test_generated_conditions_agree_with_the_oracle(filled, raw: list[tuple[str, str, Any]]) -> None:
    cat, _, everything = filled
    conds = []
    for key, op, value in raw:
        try:
            conds.append(Condition(key, op, value))
        except Exception:  # text Hypothesis draws may hold NUL or surrogates: refused like any caller's
            return
    _check(cat, everything, conds)


@ENGINES
def test_exact_comparisons_where_floats_round(filled) -> None:
    """Integers beyond 2**53 are not rounded: 2**53 + 1 is above the float 2**53."""
    cat, _, everything = filled
    for conds in ([Condition("k0", ">", BIG)], [Condition("k0", "=", BIG + 1)], [Condition("k1", "<", float(BIG))],
                  [Condition("k2", "<=", BIG + 1), Condition("k2", ">=", BIG - 1)], [Condition("k3", "!=", -0.0)],
                  [Condition("case", "<", "é")], [Condition("case", ">", "Z")]):
        _check(cat, everything, conds)


@ENGINES
def test_steps_are_read_only_when_asked(filled) -> None:
    cat, _, everything = filled
    with_steps = cat.find(steps=True)
    assert all(d.steps is None for r in everything for g in r.groups for d in g.datasets)
    for a, b in zip(everything, with_steps):
        for ga, gb in zip(a.groups, b.groups):
            for da, db in zip(ga.datasets, gb.datasets):
                assert db.steps == tuple(range(0, 2 * db.nsteps, 2))  # what _fill wrote
                assert (da.nsteps, da.first_step, da.last_step) == (
                    db.nsteps, db.steps[0] if db.steps else None, db.steps[-1] if db.steps else None)


def test_step_summaries_are_rebuilt_when_a_0004_catalog_is_upgraded(catalog_url: str) -> None:
    """Revision 0005 fills each dataset's summary from the writes a 0004 catalog already holds."""
    import sqlalchemy as sa

    cat = Catalog(catalog_url)
    _fill(cat, seed=11, nruns=12)
    expected = {d.id: (d.nsteps, d.first_step, d.last_step) for r in cat.find(steps=True) for g in r.groups
                for d in g.datasets}
    with cat.engine.begin() as con:  # back to revision 0004: the summary columns did not exist
        for column in ("nsteps", "first_step", "last_step", "nbytes_written", "dims", "compression", "chunks"):  # and 0010, 0013's
            con.execute(sa.text(f"ALTER TABLE datasets DROP COLUMN {column}"))
        for column in ("kind", "steps_per_file", "truncated_after", "archive", "subfiles"):  # and 0006, 0009, 0011's
            con.execute(sa.text(f"ALTER TABLE groups DROP COLUMN {column}"))
        for column in ("extents", "codec", "stored_nbytes", "max_error"):  # 0011, 0013
            con.execute(sa.text(f"ALTER TABLE writes DROP COLUMN {column}"))
        for table in ("planner_choices", "extents", "tier_operations", "copies", "infos"):  # of 0012, 0011, 0008, 0007
            con.execute(sa.text(f"DROP TABLE {table}"))
        con.execute(sa.text("UPDATE alembic_version SET version_num = '0004'"))
        sums = dict(con.execute(sa.text("SELECT dataset_id, SUM(nbytes) FROM writes GROUP BY dataset_id")).all())
    cat.close()
    cat = Catalog(catalog_url)  # upgraded in place
    try:
        got = cat.find()
        assert {d.id: (d.nsteps, d.first_step, d.last_step) for r in got for g in r.groups for d in g.datasets} == expected
        assert any(n for n, _, _ in expected.values()) and any(not n for n, _, _ in expected.values())
        runs, totals, _ = cat.list_runs("alpha", limit=100)
        assert sum(t["bytes"] for t in totals.values()) == sum(
            int(sums.get(d.id, 0)) for r in runs for g in r.groups for d in g.datasets)
    finally:
        cat.close()


@ENGINES
def test_list_runs_pages_newest_first_with_totals(filled) -> None:
    cat, ids, everything = filled
    alpha = [r for r in everything if r.application == "alpha"]
    newest_first = sorted(alpha, key=lambda r: (r.created_at, r.id), reverse=True)
    seen = []
    for offset in range(0, len(alpha) + 5, 7):
        page, totals, total = cat.list_runs("alpha", limit=7, offset=offset)
        assert total == len(alpha)
        seen += [r.id for r in page]
        for r in page:
            datasets = [d for g in r.groups for d in g.datasets]
            assert totals[r.id] == {"datasets": len(datasets), "writes": sum(d.nsteps for d in datasets),
                                    "bytes": 32 * sum(d.nsteps for d in datasets)}  # _fill writes 32 bytes a step
    assert seen == [r.id for r in newest_first]
    assert [r.id for r in cat.list_runs("alpha")[0]] == seen  # no limit: every run


@ENGINES
def test_list_runs_refuses_bad_pages(filled) -> None:
    from sdm.errors import ApplicationNotFoundError, InvalidArgumentError

    cat, _, everything = filled
    for kwargs, message in (({"limit": 0}, "limit must be an integer >= 1, got 0"),
                            ({"limit": True}, "limit must be an integer >= 1, got True"),
                            ({"limit": "5"}, "limit must be an integer >= 1, got '5'"),
                            ({"offset": -1}, "offset must be an integer >= 0, got -1"),
                            ({"offset": 1.5}, "offset must be an integer >= 0, got 1.5")):
        with pytest.raises(InvalidArgumentError) as info:
            cat.list_runs("alpha", **kwargs)
        assert str(info.value) == message
    with pytest.raises(ApplicationNotFoundError, match="no application 'gamma'"):
        cat.list_runs("gamma")
    assert [r.id for r in cat.find()] == [r.id for r in everything]  # nothing changed
