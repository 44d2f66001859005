"""``sdm calibrate``, ``sdm predict`` and ``sdm bench ncio`` end to end (mpiexec, real catalogs).

The calibration is stored in a real catalog (SQLite and PostgreSQL) and found again by
``sdm predict`` for the same directory; ``bench ncio --quick`` writes its JSON,
Markdown and PNG.  The MPI commands start their own ranks with ``--np``.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import sdm

TIMEOUT = 240


def sdm_cmd(*args: str, timeout: int = TIMEOUT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sdm", *args], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


@pytest.mark.timeout(TIMEOUT + 30)
def test_calibrate_stores_constants_that_predict_uses(tmp_path, catalog_url):
    target = tmp_path / "fast-tier"
    done = sdm_cmd("calibrate", str(target), "--np", "2", "--quick", "--repeats", "1", "--catalog", catalog_url,
                   "--json")
    assert done.returncode == 0, done.stderr
    stored = json.loads(done.stdout)
    assert stored["nprocs"] == 2 and stored["target"] == str(target.resolve())
    assert stored["constants"]["call"] > 0
    cat = sdm.Catalog(catalog_url, create=False)
    try:
        record = cat.latest_calibration(str(target.resolve()))
    finally:
        cat.close()
    assert record["id"] == stored["id"] and record["constants"]["constants"] == stored["constants"]

    out = sdm_cmd("predict", "--shape", "64x64x64", "--ranks", "8", "--dist", "(Block, Block, *)",
                  "--datasets", "3", "--every", "5", "--iterations", "50", "--reads", "2",
                  "--dir", str(target), "--catalog", catalog_url, "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["calibrated"] and f"calibration {stored['id']}" in result["model"]
    assert result["workload"]["writes"] == 30
    rows = {r["method"]: r for r in result["rows"]}
    assert set(rows) == {"posix", "list", "datatype", "sieving", "collective", "servers", "auto"}
    open_s = stored["constants"]["open"]
    for r in rows.values():
        # level 1 opens a file per write (30, each opened again to read), level 2 one per
        # dataset (3), level 3 one; level 2 holds its 3 open, each with a new collective buffer
        assert r["total"]["3"] <= r["total"]["2"]
        assert r["total"]["1"] - r["total"]["2"] == pytest.approx(2 * (30 - 3) * open_s - (3 - 1) * r["per_held_file"],
                                                                  rel=1e-9)
    # a plain choice, or a tie the first accesses measure (which one depends on the machine's timing)
    assert result["auto"]["write"].startswith(("auto: ", "auto (trial, access 1 of "))


def test_predict_without_calibration_says_so(tmp_path):
    out = sdm_cmd("predict", "--shape", "100x100", "--ranks", "4", "--dir", str(tmp_path), "--catalog",
                  f"sqlite:///{tmp_path}/none.db")
    assert out.returncode == 0, out.stderr
    assert "no calibration" in out.stdout and "level 3" in out.stdout


def test_predict_rejects_a_bad_shape(tmp_path):
    out = sdm_cmd("predict", "--shape", "ten", "--dir", str(tmp_path))
    assert out.returncode == 2 and "shape" in out.stderr


@pytest.mark.timeout(TIMEOUT + 30)
def test_bench_ncio_quick_writes_json_markdown_and_png(tmp_path):
    out = tmp_path / "results"
    done = sdm_cmd("bench", "ncio", "--np", "2", "--quick", "--sweep", "size", "--method", "posix", "--method",
                   "datatype", "--dir", str(tmp_path / "scratch"), "--out", str(out))
    assert done.returncode == 0, done.stderr + done.stdout
    data = json.loads((out / "ncio.json").read_text())
    assert data["meta"]["nprocs"] == 2 and data["goals"]["all_verified"]
    assert data["meta"]["sdm_version"] == sdm.__version__ and data["meta"]["git_commit"]
    methods = {r["method"] for r in data["rows"]}
    assert methods == {"posix", "datatype", "auto"}
    # auto chose among the methods asked for, and says how (a plain choice or a trial: which one
    # depends on the predictions, not on the machine's timing)
    assert all(s["auto_chose"] in ("posix", "datatype") for s in data["summary"])
    assert all(s["auto_reason"].startswith("auto") for s in data["summary"])
    assert "[1/" in done.stdout  # the progress, one line per step off a terminal
    assert {r["direction"] for r in data["rows"]} == {"write", "read"}
    md = (out / "ncio.md").read_text()
    assert "## size sweep, write" in md and "## Goals" in md
    assert (out / "ncio.png").stat().st_size > 10_000
    assert not list((tmp_path / "scratch").glob(".sdm-*"))  # scratch files removed


@pytest.mark.timeout(TIMEOUT + 30)
def test_bench_ncio_times_a_fresh_calibrations_samples_again_after_the_sweep(tmp_path):
    out = tmp_path / "results"
    done = sdm_cmd("bench", "ncio", "--np", "2", "--quick", "--calibrate", "--sweep", "count", "--method", "posix",
                   "--dir", str(tmp_path / "scratch"), "--out", str(out))
    assert done.returncode == 0, done.stderr + done.stdout
    data = json.loads((out / "ncio.json").read_text())
    before, after = data["calibration"]["samples"], data["calibration"]["after"]
    assert [(s["method"], s["pattern"], s["writing"]) for s in after] == \
        [(s["method"], s["pattern"], s["writing"]) for s in before]  # the same samples, in the same order
    assert all(s["seconds"] > 0 for s in after)
    drift = data["meta"]["calibration_drift"]
    ratios = [a["seconds"] / b["seconds"] for b, a in zip(before, after)]
    assert drift["samples"] == len(before) and drift["over_25pct"] == sum(abs(r - 1) > 0.25 for r in ratios)
    assert f"* the calibration's {len(before)} samples timed again after the sweep" in (out / "ncio.md").read_text()


def test_bench_ncio_rejects_unknown_sweeps(tmp_path):
    done = sdm_cmd("bench", "ncio", "--sweep", "diagonal", "--dir", str(tmp_path))
    assert done.returncode == 2 and "diagonal" in done.stderr
