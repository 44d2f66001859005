"""``benchmarks/metafile_cost.py --quick`` end to end (real MPI jobs of 1 and 2 ranks, real SQLite catalogs).

Only what was run and written is checked, never the machine's timing: every contender
measured in every case, the rebuilt catalog checked by the script itself (it exits
non-zero when a row count or a read differs), and the three result files written.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 600


@pytest.mark.timeout(TIMEOUT + 60)
def test_quick_run_measures_every_contender_and_checks_the_rebuild(tmp_path: Path) -> None:
    out, work = tmp_path / "results", tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "metafile_cost.py"), "--quick", "--out", str(out),
                           "--dir", str(work)], capture_output=True, text=True, timeout=TIMEOUT, env=env,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    for name in ("metafile_cost.json", "metafile_cost.md", "metafile_cost.png"):
        assert (out / name).stat().st_size > 0
    data = json.loads((out / "metafile_cost.json").read_text())
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
