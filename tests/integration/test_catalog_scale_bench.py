"""``benchmarks/catalog_scale.py --quick`` end to end on SQLite (real catalog, real CLI subprocesses).

The expected results are derived here from the shape the populate module documents
(run index ``i`` has id ``i + 1``, application ``i % 4``, ``case = case-{(i // 4) % 100:02d}``,
``re = 1000 + 10 * ((379 * i) % 1000)``, ``mesh`` the ``i % 5``-th of five names, ``nx``
the ``i % 3``-th of 64, 128, 256), never by asking SDM. Nothing depends on the machine's timing.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from quick_bench import TIMEOUT, run_quick  # tests/integration is on sys.path

WRITES = 10_000  # --quick
OPS = ("find_eq", "find_range", "find_two", "open", "ls_inproc", "ls_subproc", "show_inproc", "show_subproc",
       "startup_subproc", "commit")


def _ids(match) -> list[int]:
    """Ids of the runs of application 0 (``astro3d``) whose index satisfies *match*, newest first (as ``find`` lists)."""
    return [i + 1 for i in range(0, 1000, 4) if match(i)][::-1]


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> tuple[dict, Path]:
    tmp = tmp_path_factory.mktemp("catalog-scale")
    out, cache = tmp / "results", tmp / "cache"
    return run_quick("catalog_scale", out, "--cache", str(cache)), cache


@pytest.mark.timeout(TIMEOUT + 60)
def test_every_operation_is_timed(report):
    data, _ = report
    results = data["results"]["sqlite"][str(WRITES)]
    assert set(results) == set(OPS)
    for op in OPS:
        assert results[op]["n"] >= 1 and 0 < results[op]["min"] <= results[op]["median"] <= results[op]["max"]
        assert results[op]["first"] > 0
    assert data["meta"]["git_commit"] and data["meta"]["sdm_version"]
    md = {g["op"] for g in data["goals"]}
    assert {"find_eq", "find_range", "find_two", "open", "ls_inproc"} <= md


@pytest.mark.timeout(TIMEOUT + 60)
def test_searches_find_exactly_the_runs_of_the_documented_shape(report):
    data, _ = report
    found = data["catalogs"][f"sqlite:{WRITES}"]["found"]
    case07 = _ids(lambda i: (i // 4) % 100 == 7)
    assert found["find_eq"] == case07 and len(case07) == 3
    assert found["find_range"] == _ids(lambda i: 1000 + 10 * ((379 * i) % 1000) >= 10900)
    assert 1 <= len(found["find_range"]) <= 5  # about 1% of 250 runs
    assert found["find_two"] == _ids(lambda i: i % 5 == 2 and i % 3 == 1)
    assert found["open"] == max(case07)  # the newest matching run
    assert found["ls_total"] == 250
    assert found["ls_runs"] == min(250, found["ls_limit"] or 250)  # the first page
    assert found["show_datasets"] == 10


@pytest.mark.timeout(TIMEOUT + 60)
def test_commits_are_undone_in_the_cached_catalog(report):
    _, cache = report
    (db,) = cache.glob("*.db")
    con = sqlite3.connect(db)
    try:
        count, top = con.execute("SELECT count(*), max(step) FROM writes").fetchone()
        used = con.execute("SELECT count(*) FROM files f WHERE alloc_end != "
                           "(SELECT max(offset + nbytes) FROM writes w WHERE w.file_id = f.id)").fetchone()[0]
        stale = con.execute(
            "SELECT count(*) FROM datasets d WHERE nsteps != (SELECT count(*) FROM writes w WHERE w.dataset_id = d.id) "
            "OR last_step != (SELECT max(step) FROM writes w WHERE w.dataset_id = d.id) "
            "OR nbytes_written != (SELECT sum(nbytes) FROM writes w WHERE w.dataset_id = d.id)").fetchone()[0]
    finally:
        con.close()
    # one step (0) per dataset at 10^4 writes, and the probe run's 10 datasets x 10 steps (0-90)
    assert count == WRITES + 100 and top == 90
    assert used == 0  # every file's high-water mark is the end of its last write again
    assert stale == 0  # and every dataset's step summary what its writes say
