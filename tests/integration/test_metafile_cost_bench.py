"""``benchmarks/metafile_cost.py --quick`` end to end (real MPI jobs of 1 and 2 ranks, real SQLite catalogs).

Only what was run and written is checked, never the machine's timing: every contender
measured in every case, the rebuilt catalog checked by the script itself (it exits
non-zero when a row count or a read differs), and the three result files written.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from quick_bench import TIMEOUT, run_quick  # tests/integration is on sys.path



@pytest.mark.timeout(TIMEOUT + 60)
def test_quick_run_measures_every_contender_and_checks_the_rebuild(tmp_path: Path) -> None:
    out, work = tmp_path / "results", tmp_path / "work"
    work.mkdir()
    data = run_quick("metafile_cost", out, "--dir", str(work))
    results = data["results"][str(work.resolve())]
    assert set(results) == {"1", "2"}
    for by_case in results.values():
        assert set(by_case) == {"small:512", "bulk:1048576"}
        for row in by_case.values():
            for contender in ("on", "off", "on-async", "off-async"):
                assert row[contender]["n"] == 1 and row[contender]["median"] > 0
    rebuilt = data["rebuild"]
    assert rebuilt["writes"] == rebuilt["rows"] == 1000 and rebuilt["checked_steps"] == [0, 1, 50, 99]
    assert data["meta"]["git_commit"] and data["meta"]["sdm_version"]
    assert list(work.iterdir()) == []  # nothing left behind
