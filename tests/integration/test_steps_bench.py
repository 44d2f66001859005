"""``benchmarks/steps.py --quick`` end to end (a real MPI job of 2 ranks, a real SQLite catalog).

Only what was run and written is checked, never the machine's timing: every step timed,
both windows and the statement counts present, the metadata growth measured (positive: the
run did write its rows and records), the wide dump's time split adding up to its profiled
time, ADIOS2 either run or said not run, and nothing left in the scratch directory.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from quick_bench import TIMEOUT, run_quick  # tests/integration is on sys.path


@pytest.mark.timeout(TIMEOUT + 60)
def test_quick_run_reports_both_windows_metadata_and_the_wide_dump(tmp_path: Path) -> None:
    out, work = tmp_path / "results", tmp_path / "work"
    work.mkdir()
    data = run_quick("steps", out, "--dir", str(work), "--peers", str(tmp_path / "no-stack"))
    st = data["steps"]
    assert (st["steps"], st["window"], st["datasets"], st["length"]) == (120, 20, 2, 512)
    for window in ("first", "last"):
        assert st[window]["n"] == 20 and 0 < st[window]["min"] <= st[window]["median"] <= st[window]["max"]
        counts = st["statements"][window]
        assert counts["n"] == 20 and counts["min"] >= 1  # rank 0 commits every step
    assert st["ratio"] == pytest.approx(st["last"]["median"] / st["first"]["median"])
    assert st["catalog_bytes_per_step"] > 0 and st["metafile_bytes_per_step"] > 0
    assert [s["step"] for s in st["samples"]] == list(range(20, 121, 20))
    assert sum(b["n"] for b in st["blocks"]) == 120
    wide = data["wide"]
    assert wide["datasets"] == 40 and wide["dumps"]["n"] == 1 and wide["define_s"] > 0
    assert sum(wide["split"].values()) == pytest.approx(wide["profiled_cpu_s"])
    assert "peer stack is not built" in data["adios2"]["not_run"]
    assert data["meta"]["git_commit"] and data["meta"]["sdm_version"] and data["ranks"] == 2
    assert "Not run: the peer stack is not built" in (out / "steps.md").read_text()
    assert list(work.iterdir()) == []  # nothing left behind
