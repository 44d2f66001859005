"""A degenerate calibration fit is refused: said in ``sdm calibrate``'s output, never stored."""

from __future__ import annotations

import math

import numpy as np
import pytest
from typer.testing import CliRunner

from sdm._cli import bench as cli_bench
from sdm._cli.main import app
from sdm.bench.calibrate import MIN_SIZES, QUICK_RUNS, Sample, check_fit, fit, fit_problems, store
from sdm.bench.patterns import Pattern
from sdm.catalog import Catalog
from sdm.errors import CalibrationError, SDMError
from sdm.planner.model import DEFAULTS, CostModel

TRUTH = {**DEFAULTS, "call": 3e-6, "byte_w": 5e-10}


def _samples(sizes=(4096, 65536, 1 << 20), noise=None) -> list[Sample]:
    """posix writes of one region per rank: ``call + size * byte_w`` seconds each (times *noise*)."""
    out = []
    for k, size in enumerate(sizes):
        counts = {"call": 1.0, "byte_w": float(size)}
        seconds = TRUTH["call"] + size * TRUTH["byte_w"]
        out.append(Sample("posix", Pattern(size, 1), True, counts, seconds * (noise[k] if noise else 1.0)))
    return out


def test_a_sound_fit_passes():
    samples = _samples()
    assert fit_problems(samples, {**TRUTH}) == []
    check_fit(samples, {**DEFAULTS, **fit(samples)})  # the fit of exact samples is sound


def test_a_byte_cost_of_zero_is_refused_with_what_to_do():
    samples = _samples()
    with pytest.raises(CalibrationError) as info:
        check_fit(samples, {**TRUTH, "byte_w": 0.0})
    assert isinstance(info.value, SDMError) and isinstance(info.value, ValueError)
    flat = np.array([s.seconds for s in samples])
    assert str(info.value) == (
        "the fit is degenerate: byte_w fitted to 0 (a byte would cost nothing); its error on the samples "
        f"(rms {_rms(np.full(3, 3e-6), flat):.0%} of the measured times) is no smaller than one constant time's "
        f"({_rms(np.full(3, _flat(flat)), flat):.0%}). Not stored: calibrate again when the machine is quieter, "
        "or with more --repeats; until then `auto` uses the default constants (or the calibration stored before)")


def _rms(pred, meas):
    return math.sqrt(np.mean((pred / meas - 1) ** 2))


def _flat(meas):
    return np.sum(1 / meas) / np.sum(1 / meas ** 2)


def test_constants_that_are_not_finite_or_negative_are_refused():
    assert fit_problems([], {**TRUTH, "call": float("nan"), "list": -1e-9}) == [
        "call, list not a finite number >= 0"]
    assert fit_problems([], {**TRUTH, "byte_r": float("inf")}) == ["byte_r not a finite number >= 0"]


def test_too_few_distinct_sizes_are_refused():
    samples = _samples(sizes=(4096, 4096, 65536))
    assert fit_problems(samples, {**TRUTH}) == [
        f"the samples move 2 distinct sizes per rank (at least {MIN_SIZES} tell a byte's cost from a call's)"]
    # the quick calibration's runs move enough sizes
    assert len({p.size * p.count for _, p in QUICK_RUNS}) >= MIN_SIZES


def test_a_fit_no_better_than_a_constant_is_refused():
    # times that do not grow with the bytes (all 10 us, +-10 %): a model that says they do is worse
    samples = [Sample("posix", Pattern(size, 1), True, {"call": 1.0, "byte_w": float(size)}, 1e-5 * f)
               for size, f in ((4096, 1.1), (65536, 0.9), (1 << 20, 1.0))]
    problems = fit_problems(samples, {**TRUTH})
    assert len(problems) == 1 and problems[0].startswith("its error on the samples (rms ")


def test_store_refuses_and_leaves_the_catalog_without_a_calibration(tmp_path):
    url = f"sqlite:///{tmp_path}/cat.db"
    model = CostModel({**TRUTH, "byte_w": 0.0}, nprocs=2, cores=2, calibrated=True)
    with pytest.raises(CalibrationError, match=r"^the fit is degenerate: byte_w fitted to 0 "):
        store(url, tmp_path, model, _samples())
    assert not (tmp_path / "cat.db").exists()  # refused before the catalog was even opened
    assert store(url, tmp_path, CostModel(TRUTH, nprocs=2, cores=2, calibrated=True), _samples()) >= 1


def test_sdm_calibrate_says_the_fit_is_degenerate_and_stores_nothing(tmp_path, monkeypatch):
    target, url = tmp_path / "fast", f"sqlite:///{tmp_path}/cat.db"
    degenerate = CostModel({**TRUTH, "byte_w": 0.0}, nprocs=1, cores=1, calibrated=True)
    monkeypatch.setattr(cli_bench, "run_calibration", lambda *a, **k: (degenerate, _samples(), {}))
    done = CliRunner().invoke(app, ["calibrate", str(target), "--catalog", url])
    assert done.exit_code == 2
    said = " ".join(done.output.split())
    said = said[said.index("error: "):]
    assert said.startswith(f"error: calibration of {target.resolve()} not stored: the fit is degenerate: "
                           "byte_w fitted to 0 (a byte would cost nothing);")
    assert said.endswith("until then `auto` uses the default constants (or the calibration stored before)")
    assert not (tmp_path / "cat.db").exists()  # nothing stored, no catalog made
