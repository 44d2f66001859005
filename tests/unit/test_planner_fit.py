"""The calibration's fit: nonnegative least squares and constants recovered from samples."""

from __future__ import annotations

import numpy as np
import pytest
from sdm.bench.calibrate import Sample, fit, nnls
from sdm.planner.model import CONSTANTS, DEFAULTS
from sdm.bench.patterns import Pattern


def test_nnls_solves_a_nonnegative_problem_exactly():
    a = np.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
    x = np.array([3.0, 0.5])
    np.testing.assert_allclose(nnls(a, a @ x), x, rtol=1e-10)


def test_nnls_clamps_at_zero():
    a = np.array([[1.0, 1.0], [1.0, 2.0]])
    b = np.array([1.0, 0.5])  # the unconstrained solution has a negative component
    x = nnls(a, b)
    assert (x >= 0).all()
    assert np.linalg.norm(a @ x - b) <= np.linalg.norm(a @ np.array([0.8, 0.0]) - b) + 1e-12


def test_fit_recovers_constants_from_exact_samples():
    rng = np.random.default_rng(3)
    truth = {k: DEFAULTS[k] * float(rng.uniform(0.5, 2.0)) for k in CONSTANTS}
    samples = []
    for _ in range(200):  # random counts: every constant is well determined
        counts = {k: float(rng.uniform(0, 1) / DEFAULTS[k]) * 1e-4 for k in CONSTANTS if rng.random() < 0.4}
        seconds = sum(n * truth[k] for k, n in counts.items()) or 1e-6
        samples.append(Sample("posix", Pattern(8, 1), True, counts, seconds))
    got = fit(samples, weight=1e-6)
    for k in CONSTANTS:
        assert got[k] == pytest.approx(truth[k], rel=1e-3), k


def test_constants_no_sample_sees_fall_back_to_the_prior():
    samples = [Sample("posix", Pattern(8, 1), True, {"call": 1000.0}, 1000 * 3e-6)]
    got = fit(samples)
    assert got["call"] == pytest.approx(3e-6, rel=0.01)
    assert got["region"] == pytest.approx(DEFAULTS["region"], rel=1e-6)


def test_constants_measured_directly_are_taken_off_the_samples_before_fitting():
    # every sample pays 2 us per copied unit (known) plus 3 us per call; the fit must find
    # the calls' 3 us, not share the time out between the two
    samples = [Sample("servers", Pattern(8, 1), True, {"call": float(n), "copy": float(2 * n + 1)},
                      n * 3e-6 + (2 * n + 1) * 2e-6) for n in (10, 100, 1000)]
    got = fit(samples, weight=1e-6, known={"copy": 2e-6, "open": 1e-3})
    assert got["call"] == pytest.approx(3e-6, rel=1e-6)
    assert got["copy"] == 2e-6
    assert "open" not in got  # not a fitted constant: left to the caller
