"""``sdm calibrate``, ``sdm predict`` and ``sdm bench ncio`` end to end (mpiexec, real catalogs).

A quick calibration (one rank, one repeat, one small pattern per method) is stored in a
real catalog (SQLite and PostgreSQL) and found again by ``sdm predict`` for the same
directory; ``bench ncio --quick`` on one sweep of two methods writes one report of the
run without and with a fresh calibration.  Nothing here depends on the machine's
timing: only on what was run and what was written.  The MPI commands start their own
ranks with ``--np``.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import sdm

TIMEOUT = 120


def sdm_cmd(*args: str, timeout: int = TIMEOUT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sdm", *args], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


@pytest.mark.timeout(TIMEOUT + 30)
def test_calibrate_stores_constants_that_predict_uses(tmp_path, catalog_url):
    target = tmp_path / "fast-tier"
    done = sdm_cmd("calibrate", str(target), "--quick", "--repeats", "1", "--catalog", catalog_url,  # one rank
                   "--json")
    assert done.returncode == 0, done.stderr
    stored = json.loads(done.stdout)
    assert stored["nprocs"] == 1 and stored["target"] == str(target.resolve())
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
    # a plain choice, or a tie the first accesses measure (which one depends on the calibration)
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
def test_bench_ncio_reports_auto_without_and_with_a_fresh_calibration(tmp_path):
    out, scratch = tmp_path / "results", tmp_path / "scratch"
    done = sdm_cmd("bench", "ncio", "--np", "2", "--quick", "--repeats", "1", "--sweep", "count", "--method",
                   "posix", "--method", "datatype", "--calibration", "both", "--dir", str(scratch), "--out", str(out))
    assert done.returncode == 0, done.stderr + done.stdout
    data = json.loads((out / "ncio.json").read_text())
    meta = data["meta"]
    assert meta["nprocs"] == 2 and meta["sdm_version"] == sdm.__version__ and meta["git_commit"]
    assert meta["cores"] and meta["mpi"] and meta["host"] and "load_before" in meta and "load_after" in meta
    assert meta["calibration"] == "both" and meta["repeats"] == 1
    plain, calibrated = data["configs"]
    assert (plain["calibrated"], calibrated["calibrated"]) == (False, True)
    assert plain["model"] == "defaults" and plain["name"].endswith(", no calibration")
    assert calibrated["name"].endswith(", calibrated") and calibrated["directory"] == str(scratch.resolve())
    for c in (plain, calibrated):
        assert c["goals"]["all_verified"] and c["goals"]["points"] == 6  # 3 region counts, write and read
        assert {s["direction"] for s in c["summary"]} == {"write", "read"}
        assert all(set(s["median"]) == {"posix", "datatype", "auto"} and s["spread"]["auto"] == [s["median"]["auto"]] * 2
                   for s in c["summary"])
        # auto chose among the methods asked for and says how (a plain choice or a trial)
        assert all(s["auto_chose"] in ("posix", "datatype") and s["auto_reason"].startswith("auto")
                   for s in c["summary"])
        ratios = [s["auto_vs_best"] for s in c["summary"]]
        assert c["goals"]["auto_vs_best_worst"] == max(ratios)
    # the fresh calibration's samples, timed again after the sweep: the same samples in the same order
    before, after = calibrated["calibration"]["samples"], calibrated["calibration"]["after"]
    assert [(s["method"], s["pattern"], s["writing"]) for s in after] == \
        [(s["method"], s["pattern"], s["writing"]) for s in before]
    assert calibrated["calibration_drift"]["samples"] == len(before) and not plain["calibration"]
    md = (out / "ncio.md").read_text()
    assert "## auto against the best method" in md and "## auto/best per point" in md
    assert f"| {plain['name']} |" in md and f"| {calibrated['name']} |" in md
    assert "### count sweep, write (ms)" in md
    assert f"* the calibration's {len(before)} samples timed again after the sweep" in md
    assert 5_000 < (out / "ncio.png").stat().st_size < 150_000
    assert "[1/" in done.stdout  # the progress, one line per step off a terminal
    assert scratch.is_dir() and not list(scratch.iterdir())  # its own scratch directory removed


def test_bench_ncio_rejects_unknown_sweeps_and_calibrations(tmp_path):
    done = sdm_cmd("bench", "ncio", "--sweep", "diagonal", "--dir", str(tmp_path), "--out", str(tmp_path / "o"))
    assert done.returncode == 2 and "diagonal" in done.stderr
    done = sdm_cmd("bench", "ncio", "--calibration", "sometimes", "--dir", str(tmp_path), "--out",
                   str(tmp_path / "o"))
    assert done.returncode == 2
    assert "--calibration 'sometimes': choose one of stored, none, fresh, both" in done.stderr
    assert list(tmp_path.iterdir()) == []  # nothing measured, nothing written
