"""benchmarks/refit.py: stored NCIO runs judged with the current model, auto's trials replayed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from sdm.planner.model import DEFAULTS, CostModel
from sdm.bench.patterns import Pattern

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import refit  # noqa: E402

ZERO = {k: 0.0 for k in DEFAULTS}
# 4 regions of 64 B per rank: posix 4 calls, 100 us; list one call and 4 segments, 120 us; datatype
# 4 regions sieved and a window read and written, 200 us; the collective methods wait 1 s per synchronization
CALL = 2.5e-5
MODEL = CostModel({**ZERO, "call": CALL, "list": (1.2e-4 - CALL) / 4, "region": (2e-4 - 2 * CALL) / 4, "sync": 1.0},
                  nprocs=4, cores=2, calibrated=True)


def run(measured: dict[str, float]) -> dict:
    point = {"label": "64x4 sp0 m-c f-nc", "pattern": Pattern(64, 4).as_dict(), "direction": "write",
             "median": {**measured, "auto": 1.0}}
    return {"meta": {"nprocs": 4}, "summary": [point]}


def test_replay_tries_the_methods_within_the_margin_and_keeps_the_measured_fastest():
    # list is predicted 20 % slower than posix but measured 2x faster
    measured = {"posix": 2e-4, "list": 1e-4, "datatype": 3e-4}
    (narrow,) = refit.replay(run(measured), MODEL, 0.10)
    assert narrow == {"vs_best": 2.0, "tried": 1, "trial_cost": 1.0}  # posix alone: the model trusted
    (wide,) = refit.replay(run(measured), MODEL, 0.25)
    # posix and list tried, list kept; the trial's accesses average 1.5e-4 s against list's 1e-4
    assert wide == {"vs_best": 1.0, "tried": 2, "trial_cost": pytest.approx(1.5, rel=1e-12)}


def test_score_counts_predictions_within_25_percent_and_names_the_misses():
    measured = {"posix": 1e-4, "list": 1e-4, "datatype": 1e-4}  # predicted 1.0x, 1.2x, 2.0x
    result = refit.score(run(measured), MODEL)
    assert (result["within_25pct"], result["predictions"]) == (2, 3)
    assert [(m["method"], round(m["ratio"], 6)) for m in result["misses"]] == [("datatype", 2.0)]
