"""``Catalog.truncate`` and the group columns of revision 0006, on SQLite and PostgreSQL.

Every test runs once per engine through the ``catalog_url`` fixture (tests/conftest.py).
Rows are placed with ``reserve`` and ``record_writes`` as a session would; what a
truncation leaves is compared with sums computed here from the rows themselves.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from sdm.catalog import Catalog, DatasetSpec
from sdm.catalog import schema as S
from sdm.errors import GroupExistsError, GroupNotFoundError, InvalidArgumentError, RunNotFoundError, RunStateError

NB = 96


@pytest.fixture
def cat(catalog_url: str):
    c = Catalog(catalog_url)
    yield c
    c.close()


def _put(cat: Catalog, run: int, dataset_id: int, step: int, path: str, level: int) -> int:
    """Reserve and commit one write as a session does; returns its offset."""
    offset = cat.reserve(run, [(path, level, NB, level == 1)])[0]
    assert offset is not None
    cat.record_write(run_id=run, dataset_id=dataset_id, step=step, path=path, level=level, offset=offset, nbytes=NB,
                     checksum="", checksum_algo="none", method="collective", seconds=0.1, nprocs=2, overwrite=False)
    return offset


def _table(cat: Catalog, table: sa.Table) -> list[dict]:
    with cat.engine.connect() as con:
        return [dict(r) for r in con.execute(sa.select(table).order_by(table.c.id)).mappings()]


def _run(cat: Catalog) -> tuple[int, dict[str, int]]:
    """A run with a state group (level 3, two datasets, one file per 2 steps) and a topology group (level 1)."""
    run = cat.create_run("seg", nprocs=2, root="/data")
    state = cat.define_group(run, "fields", 3, [DatasetSpec("T", "<f8", (12,), "C"), DatasetSpec("q", "<f8", (12,), "C")],
                             steps_per_file=2)
    mesh = cat.define_group(run, "mesh", 1, [DatasetSpec("xy", "<f8", (12,), "C")], kind="topology")
    ids = {d.name: d.id for g in (state, mesh) for d in g.datasets}
    for step in range(5):
        for name in ("T", "q"):
            _put(cat, run, ids[name], step, f"seg/r/fields.s{step // 2 * 2:08d}-{step // 2 * 2 + 1:08d}.sdm", 3)
    for step in (0, 3):
        _put(cat, run, ids["xy"], step, f"seg/r/mesh.xy.s{step:08d}.sdm", 1)
    return run, ids


def test_group_columns(cat: Catalog) -> None:
    run, _ = _run(cat)
    groups = {g.name: g for g in cat.run(run).groups}
    assert [(g.kind, g.steps_per_file, g.truncated_after) for g in groups.values()] == [("state", 2, None),
                                                                                       ("topology", None, None)]
    with pytest.raises(GroupExistsError, match="^group 'mesh' already exists in run .* with level 1, kind 'topology'"):
        cat.define_group(run, "mesh", 1, [DatasetSpec("xy", "<f8", (12,), "C")])
    assert cat.define_group(run, "mesh", 1, [DatasetSpec("xy", "<f8", (12,), "C")], kind="topology") == groups["mesh"]


def test_truncate_rows_summaries_and_files(cat: Catalog) -> None:
    run, ids = _run(cat)
    done = cat.truncate(run, 2)
    assert done.groups == ("fields", "mesh") and done.after_step == 2
    assert done.writes == (("fields", "T", 3), ("fields", "T", 4), ("fields", "q", 3), ("fields", "q", 4),
                           ("mesh", "xy", 3))
    assert done.nbytes == 5 * NB
    # the file of steps 4-5 and the level-1 file of step 3 lost every row; the file of 2-3 its tail
    assert done.removed_files == ("seg/r/fields.s00000004-00000005.sdm", "seg/r/mesh.xy.s00000003.sdm")
    assert done.cut_files == (("seg/r/fields.s00000002-00000003.sdm", 2 * NB),)
    writes = _table(cat, S.writes)
    assert sorted((w["dataset_id"], w["step"]) for w in writes) == sorted(
        [(ids["T"], s) for s in range(3)] + [(ids["q"], s) for s in range(3)] + [(ids["xy"], 0)])
    for d in _table(cat, S.datasets):  # the summaries equal the aggregates of the rows that remain
        mine = [w for w in writes if w["dataset_id"] == d["id"]]
        assert (d["nsteps"], d["first_step"], d["last_step"], d["nbytes_written"]) == (
            len(mine), min(w["step"] for w in mine), max(w["step"] for w in mine), sum(w["nbytes"] for w in mine))
    files = {f["path"]: f for f in _table(cat, S.files)}
    assert sorted(files) == ["seg/r/fields.s00000000-00000001.sdm", "seg/r/fields.s00000002-00000003.sdm",
                             "seg/r/mesh.xy.s00000000.sdm"]
    assert files["seg/r/fields.s00000002-00000003.sdm"]["alloc_end"] == 2 * NB
    assert [g.truncated_after for g in cat.run(run).groups] == [2, 2]
    # new steps reuse the space given back; a removed file's row is made again
    assert _put(cat, run, ids["T"], 3, "seg/r/fields.s00000002-00000003.sdm", 3) == 2 * NB
    assert _put(cat, run, ids["xy"], 3, "seg/r/mesh.xy.s00000003.sdm", 1) == 0
    again = cat.truncate(run, 2, ["mesh"])
    assert again.writes == (("mesh", "xy", 3),) and again.removed_files == ("seg/r/mesh.xy.s00000003.sdm",)
    nothing = cat.truncate(run, 10)
    assert (nothing.writes, nothing.nbytes, nothing.removed_files, nothing.cut_files) == ((), 0, (), ())
    assert [g.truncated_after for g in cat.run(run).groups] == [10, 10]


def test_truncate_refusals_change_nothing(cat: Catalog) -> None:
    run, _ = _run(cat)
    before = [_table(cat, t) for t in (S.groups, S.datasets, S.writes, S.files)]
    cases = [
        (lambda: cat.truncate(run, -1), InvalidArgumentError, "after_step must be an integer >= 0, got -1"),
        (lambda: cat.truncate(run, 1.5), InvalidArgumentError, "after_step must be an integer >= 0, got 1.5"),
        (lambda: cat.truncate(run, 1, "fields"), InvalidArgumentError,
         "groups must be a list of group names, got 'fields'"),
        (lambda: cat.truncate(run, 1, ["fields", "nope"]), GroupNotFoundError,
         f"run {run} has no group 'nope'; its groups are ['fields', 'mesh']"),
        (lambda: cat.truncate(run + 1, 1), RunNotFoundError, f"no run {run + 1} in catalog {cat.url!r}"),
    ]


    def two_writers() -> None:  # two live sessions write the run; the caller holds one
        with cat.engine.begin() as con:
            con.execute(S.runs.update().where(S.runs.c.id == run).values(state="open", writers=2))
        cat.truncate(run, 1, writers=1)

    cases.append((two_writers, RunStateError,
                  f"run {run} is being written by 1 other session(s); truncate it when it has no other writer"))
    for call, cls, message in cases:
        with pytest.raises(cls) as info:
            call()
        assert info.value.args[0] == message
        assert [_table(cat, t) for t in (S.groups, S.datasets, S.writes, S.files)] == before
