"""``benchmarks/archive.py --quick`` end to end (its own versitygw and toxiproxy, real MPI jobs of 4 ranks).

Only what was run and written is checked, never the machine's timing: every contender of
every case measured once, every read compared with the written array by the script itself
(it exits non-zero otherwise), the calibration and the predictions there, the result files
written, and no server or scratch directory left behind.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from quick_bench import TIMEOUT, run_quick  # tests/integration is on sys.path


def _scratch() -> set[str]:
    """Scratch directories of benchmark runs (this test's, and any other run's meanwhile, which it leaves alone)."""
    return {p.name for p in Path(tempfile.gettempdir()).glob("sdm-archive-bench-*")}


@pytest.mark.timeout(TIMEOUT + 60)
def test_quick_run_measures_every_case(tmp_path: Path) -> None:
    before = _scratch()
    data = run_quick("archive", tmp_path)
    cases = data["cases"]
    assert list(cases) == ["block", "noncontig", "migrate", "superfile", "write", "predicted"]
    assert set(cases["block"]["stats"]) == {"remote-naive", "remote-sieving", "remote-collective",
                                            "remote-subfile first", "remote-subfile second"}
    assert set(cases["noncontig"]["stats"]) == {"remote-naive", "remote-sieving", "remote-collective"}
    assert set(cases["migrate"]["stats"]) == {"migrate", "migrate-upload", "plain"}
    assert set(cases["superfile"]["stats"]) == {"10 files: one object per file", "10 files: superfile"}
    assert cases["superfile"]["ratios"]["10 files: one object per file / superfile"]["goal"] == 8
    assert set(cases["write"]["stats"]) == {"archive write", "fast write + migrate", "plain upload"}
    for name in ("block", "noncontig", "migrate", "superfile", "write"):
        for s in cases[name]["stats"].values():
            assert s["n"] == 1 and s["median"] > 0
    assert cases["block"]["ratios"]["naive / collective"]["goal"] == 30
    assert cases["migrate"]["ratios"]["plain / migrate (time)"]["goal"] == 0.9
    assert cases["migrate"]["ratios"]["plain / migrate --verify upload (time)"]["goal"] == 0.9
    rows = cases["predicted"]["rows"]
    assert {(r["case"], r["method"]) for r in rows} == {
        (c, m) for c in ("block", "noncontig") for m in cases[c]["stats"]}
    assert all(r["predicted"] >= 0 and r["measured"] > 0 for r in rows)
    assert cases["predicted"]["target"] == "archive:s3://sdm-bench/calibration"
    assert data["latency_ms"] == 20 and "20 ms latency toxic" in data["setup"]
    assert data["meta"]["git_commit"] and data["meta"]["sdm_version"]
    assert (tmp_path / "archive.png").stat().st_size < 20_000
    assert _scratch() == before  # the scratch directory is gone
