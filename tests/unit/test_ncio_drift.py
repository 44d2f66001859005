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
