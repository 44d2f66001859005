"""The NCIO benchmark's drift check: the calibration's samples timed again after the sweep."""

from __future__ import annotations

import pytest
from sdm.bench import ncio


def test_drift_counts_samples_that_moved_by_more_than_a_quarter_either_way():
    d = ncio.drift([1.0, 2.0, 4.0, 1.0], [1.1, 2.0, 2.0, 1.3])  # +10 %, 0, -50 %, +30 %
    assert d == {"samples": 4, "median_change": pytest.approx(0.2, rel=1e-12), "over_25pct": 2,
                 "worst": pytest.approx(2.0, rel=1e-12)}


def test_drift_needs_the_same_samples_twice():
    with pytest.raises(ValueError, match=r"^drift needs the same samples twice, got 2 and 1 times$"):
        ncio.drift([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match=r"^drift needs the same samples twice, got 0 and 0 times$"):
        ncio.drift([], [])


def test_the_drift_line_names_the_noise_floor_of_the_prediction_goal():
    d = ncio.drift([1.0, 2.0, 4.0, 1.0], [1.1, 2.0, 2.0, 1.3])
    assert ncio.drift_markdown(d) == (
        "* the calibration's 4 samples timed again after the sweep: median change 20 %, 2 of 4 moved by more "
        "than 25 % (worst 2.00x): how far the machine itself drifts while the model's inputs stay the same\n")


def _rows(times: dict[str, float], label: str = "64x1 sp0 m-c f-nc", sweep: str = "count", chose: str = "posix"):
    pattern = {"size": 64, "count": 1, "spacing": 0, "mem_contig": True, "file_contig": False}
    return [{"sweep": sweep, "label": label, "pattern": pattern, "direction": "write", "nbytes": 128, "method": m,
             "median": t / 1e3, "times": [t / 1e3, t * 1.2 / 1e3], "predicted": t / 1e3, "verified": True,
             "chosen": chose if m == "auto" else m, "reason": "auto: posix predicted"} for m, t in times.items()]


def test_a_report_gives_each_configuration_its_goal_and_counts_a_point_shared_by_two_sweeps_once():
    rows = (_rows({"posix": 1.0, "datatype": 2.0, "auto": 1.5})
            + _rows({"posix": 1.0, "datatype": 2.0, "auto": 1.5}, sweep="size")  # the same point again
            + _rows({"posix": 4.0, "datatype": 1.0, "auto": 4.0}, label="64x64 sp0 m-c f-nc"))
    plain = ncio.configuration("tmpfs, no calibration", rows, directory="/dev/shm", fs="tmpfs", calibrated=False,
                               model="defaults", load_before=0.5, load_after=0.7, seconds=12.0)
    g = plain["goals"]
    assert g["points"] == 2 and g["auto_vs_best_worst"] == 4.0
    assert g["auto_vs_best_geomean"] == pytest.approx((1.5 * 4.0) ** 0.5, rel=1e-12)
    assert not ncio.met(plain)  # worst 4x > 3x
    good = ncio.configuration("ext4, calibrated", _rows({"posix": 1.0, "datatype": 2.0, "auto": 1.05}),
                              directory="/var/tmp", fs="ext4", calibrated=True, model="calibration 3",
                              load_before=0.1, load_after=0.2, seconds=3.0)
    assert ncio.met(good)  # 1.05 <= 1.1
    meta = {"nprocs": 4, "cores": 2, "host": "h", "mpi": "MPICH", "sdm_version": "0.1", "git_commit": "abc",
            "date": "d", "repeats": 5, "quick": False, "load_before": 0.5, "load_after": 0.2, "seconds": 15.0,
            "methods": ["posix", "datatype"]}
    md = ncio.markdown({"meta": meta, "configs": [plain, good]})
    assert "| tmpfs, no calibration | /dev/shm (tmpfs) | defaults | 2 | 2.449 | 2.750 | 4.00 | 0 | missed |" in md
    assert "| ext4, calibrated | /var/tmp (ext4) | calibration 3 | 1 | 1.050 | 1.050 | 1.05 | 1 | met |" in md
    assert "| 64x1 sp0 m-c f-nc write | 1.50 (posix) | 1.05 (posix) |" in md
    assert "| 64x64 sp0 m-c f-nc write | 4.00 (posix) | - |" in md
    assert "| 64x1 sp0 m-c f-nc | **1** (1-1.2) | 2 | 1.5 (posix) |" in md  # ms; the best's median, min-max
