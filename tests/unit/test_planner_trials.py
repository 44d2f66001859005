"""Ties the model cannot break are measured by the first accesses (sdm.planner.trials)."""

from __future__ import annotations

import pytest
from sdm.errors import HintError
from sdm.planner import Access, Planner
from sdm.planner.model import DEFAULTS, CostModel
from sdm.planner.trials import UNCALIBRATED, Trial, contenders

ZERO = {k: 0.0 for k in DEFAULTS}


def _access() -> Access:
    return Access(writing=True, level=3, itemsize=8, total_bytes=8192, rank_bytes=(4096, 4096),
                  rank_regions=(512, 512), rank_segments=(512, 512), rank_spans=((0, 8184), (8, 8192)))


def _planner(**hints) -> Planner:
    # posix: 512 calls, 100 us; list: one call and 512 segments, 105 us (a tie: within 1.5x);
    # datatype: 512 regions sieved, 200 us; nothing else costs
    call = 1e-4 / 512
    model = CostModel({**ZERO, "call": call, "list": (1.05e-4 - call) / 512, "region": 2e-4 / 512},
                      nprocs=2, cores=2, calibrated=True, label="calibration 7")
    return Planner(hints={"methods": "posix,list,datatype", **hints}, model=model)


def test_contenders_are_the_methods_within_the_margin_fastest_first():
    preds = [("servers", 1.0), ("sieving", 1.05), ("posix", 1.1), ("list", 1.2), ("collective", 1.0999)]
    assert contenders(preds) == ("servers", "sieving", "posix")  # at most three
    assert contenders([("servers", 1.0), ("posix", 1.6)]) == ("servers",)
    assert contenders([("servers", 1.0), ("posix", 1.5)]) == ("servers", "posix")
    assert contenders([("servers", 1.0), ("posix", 2.9)], UNCALIBRATED) == ("servers", "posix")
    assert contenders([("posix", 0.0), ("list", 0.0)]) == ("posix", "list")


def test_a_trial_alternates_warms_up_then_keeps_the_lower_median():
    t = Trial(("posix", "list"), runs=2)
    assert t.length == 6
    order = []
    for seconds in ({"posix": 9.0, "list": 9.0}, {"posix": 3.0, "list": 1.0}, {"posix": 2.0, "list": 5.0}):
        for _ in range(2):
            order.append(t.current())
            over = t.observe(t.current(), seconds[t.current()])
    assert over and order == ["posix", "list"] * 3
    assert t.times == {"posix": [3.0, 2.0], "list": [1.0, 5.0]}  # the warm-ups (9 s) are not counted
    assert t.winner() == "posix"  # medians 2.5 s against 3 s
    assert t.summary() == "posix 2.5e+03 ms, list 3e+03 ms"


def test_an_access_off_the_schedule_is_not_counted():
    t = Trial(("posix", "list"), runs=1)
    assert t.observe("list", 1.0) is False and t.done == 0  # posix's turn
    assert t.observe("posix", 1.0) is False and t.current() == "list"


def test_auto_measures_a_tie_on_the_first_accesses_and_keeps_the_fastest():
    planner, a = _planner(), _access()
    first = planner.choose("auto", a)
    assert first.method.name == "posix"
    assert first.reason == ("auto (trial, access 1 of 8): trying posix of posix, list; predicted posix 0.1 ms, "
                            "list 0.105 ms, within 1.5x of the fastest; calibration 7; hints: methods posix,list,datatype")
    assert planner.choose("auto", a).reason == first.reason  # nothing observed: the same turn
    measured = {"posix": 2e-3, "list": 1e-3}  # the model's runner-up is faster here
    tried = []
    for _ in range(8):
        d = planner.choose("auto", a)
        tried.append(d.method.name)
        planner.observe(a, d.method.name, measured[d.method.name])
    assert tried == ["posix", "list"] * 4
    final = planner.choose("auto", a)
    assert final.method.name == "list"
    assert final.reason == ("auto: list measured fastest of a tie (list 1 ms, posix 2 ms; median of 3 accesses each); "
                            "predicted posix 0.1 ms, list 0.105 ms, within 1.5x of the fastest; calibration 7; "
                            "hints: methods posix,list,datatype")
    planner.observe(a, "posix", 0.0)  # after the trial, timings change nothing
    assert planner.choose("auto", a) is final


def test_without_trials_auto_takes_the_prediction():
    d = _planner(trials=0).choose("auto", _access())
    assert d.method.name == "posix" and d.reason.startswith("auto: posix predicted 0.1 ms")
    assert "0 trial accesses per tied method" in d.reason


def test_a_clear_winner_needs_no_trial():
    d = _planner(methods="posix,datatype").choose("auto", _access())
    assert d.method.name == "posix" and d.reason.startswith("auto: posix predicted")


@pytest.mark.parametrize("value", ["-1", "2.5", "many", True, 1.5])
def test_a_bad_trials_hint_is_rejected(value):
    with pytest.raises(HintError) as exc:
        _planner(trials=value).choose("auto", _access())
    assert str(exc.value) == f"planner hint trials={value!r} must be a whole number >= 0"


def test_a_trials_cost_is_its_turns_then_the_method_predicted_fastest():
    t = Trial(("posix", "list"), runs=2)  # 6 accesses: posix, list, posix, list, posix, list
    seconds = {"posix": 1.0, "list": 3.0}
    assert t.cost(seconds, 10) == 3 * 1.0 + 3 * 3.0 + 4 * 1.0
    assert t.cost(seconds, 3) == 1.0 + 3.0 + 1.0  # fewer accesses than the trial: its first turns
    assert t.cost(seconds, 0) == 0.0


def test_the_predictor_charges_auto_the_turns_of_a_tie():
    from sdm.planner.predict import Workload, predict

    # posix (one call) 100 us and list (one call, one segment) 105 us per write: a tie; 8 writes,
    # trials of 3 timed accesses each
    model = CostModel({**ZERO, "call": 1e-4, "list": 0.05e-4}, nprocs=1, cores=1, calibrated=True, label="c")
    w = Workload(shape=(16,), dtype="f8", distribution="block", datasets=2, every=5, iterations=20, ranks=1)
    rows = {r["method"]: r for r in predict(w, model, hints={"methods": "posix,list"})["rows"]}
    assert w.writes == 8 and rows["auto"]["write_method"] == "posix"
    # 4 turns each (one untimed, three timed), in all 8 writes: 4 x 100 us + 4 x 105 us, no access left after
    assert rows["auto"]["total"][3] - rows["posix"]["total"][3] == pytest.approx(4 * 0.05e-4, rel=1e-9)
    # with trials=0 auto trusts the model: posix's total exactly
    rows = {r["method"]: r for r in predict(w, model, hints={"methods": "posix,list", "trials": 0})["rows"]}
    assert rows["auto"]["total"][3] == rows["posix"]["total"][3]
