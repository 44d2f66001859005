"""The planner's decisions: requested methods, auto with and without a calibration, hints."""

from __future__ import annotations

import pytest
from sdm.errors import HintError, InvalidArgumentError
from sdm.planner import Access, Planner, choose_method
from sdm.planner.hints import Hints, conforms, parse_pattern
from sdm.planner.model import DEFAULTS, METHODS, CostModel


def _access(writing=True, hints=None):
    # 4 ranks, each 512 regions of 8 bytes interleaved with the others (a cyclic-like pattern)
    return Access(writing=writing, level=3, itemsize=8, total_bytes=16384, rank_bytes=(4096,) * 4,
                  rank_regions=(512,) * 4, rank_segments=(512,) * 4,
                  rank_spans=tuple((8 * r, 16384 - 24 + 8 * r) for r in range(4)), hints=hints or {})


def _calibration(**overrides):
    model = CostModel(constants={**DEFAULTS, **overrides}, nprocs=4, cores=2, calibrated=True)
    return {"id": 7, "nprocs": 4, "constants": model.to_json()}


def test_a_requested_method_is_used_as_is():
    d = Planner(_calibration()).choose("posix", _access())
    assert d.method.name == "posix" and d.reason == "requested: posix"


def test_unknown_method_names_are_rejected():
    with pytest.raises(InvalidArgumentError, match="unknown I/O method"):
        choose_method("fastest")


def test_without_calibration_auto_measures_the_methods_the_defaults_shortlist():
    planner, a = Planner(), _access()
    d = planner.choose("auto", a)
    trial = planner.trial(a)
    assert trial is not None and len(trial.methods) > 1 and d.method.name == trial.methods[0]
    assert "no calibration" in d.reason and "sdm calibrate" in d.reason and "within 3x of the fastest" in d.reason
    preds = {p.method: p.seconds for p in planner.predictions(a)}
    assert all(preds[m] <= 3 * min(preds.values()) for m in trial.methods)


def test_a_conforming_pattern_hint_selects_independent_io_without_calibration():
    d = Planner(hints={"pattern": "(Block, *, *)"}).choose("auto", _access())
    assert d.method.name == "datatype" and "conforms" in d.reason and "pattern (Block, *, *)" in d.reason
    d = Planner(hints={"pattern": "(Block, Block)"}).choose("auto", _access())
    assert "conforms" not in d.reason  # the model and the trials decide


def test_auto_takes_the_fastest_predicted_method_and_says_why():
    planner = Planner(_calibration())
    a = _access()
    preds = planner.predictions(a)
    d = planner.choose("auto", a)
    assert d.method.name == preds[0].method
    assert d.reason.startswith(f"auto: {preds[0].method} predicted")
    assert "calibration 7" in d.reason
    assert all(p.method in d.reason for p in preds)


def test_making_posix_calls_free_makes_auto_choose_posix():
    free = {k: 0.0 for k in ("base", "call", "byte_w", "page")}
    assert Planner(_calibration(**free)).choose("auto", _access()).method.name == "posix"


def test_decisions_are_cached_per_access_and_identical():
    planner = Planner(_calibration())
    first = planner.choose("auto", _access())
    assert planner.choose("auto", _access()) is first
    assert planner.choose("auto", _access(writing=False)) is not first
    from dataclasses import fields, replace

    a = _access()
    changed = {"rank_memory": (9,) * 4, "row_bytes": 4096, "kind": "map", "order": "F"}
    assert set(changed) <= {f.name for f in fields(a)}
    for name, value in changed.items():  # every field the decision depends on is in the key
        assert replace(a, **{name: value}).key() != a.key(), name


def test_hints_restrict_the_candidates():
    planner = Planner(_calibration(), hints={"methods": "collective,servers"})
    assert planner.choose("auto", _access()).method.name in ("collective", "servers")
    planner = Planner(_calibration(), hints={"buffer_limit": 0})
    assert planner.choose("auto", _access()).method.name in ("posix", "list")
    with pytest.raises(HintError, match="unknown methods"):
        Planner(_calibration(), hints={"methods": "magic"}).choose("auto", _access())


@pytest.mark.parametrize("hints, message", [
    ({"mostly": "sometimes"}, "mostly"), ({"frequency": "often"}, "frequency"),
    ({"buffer_limit": "-3"}, "buffer_limit"), ({"pattern": "(Block, Diagonal)"}, "Diagonal"),
])
def test_bad_hints_raise_a_clear_error(hints, message):
    with pytest.raises(HintError, match=message):
        Planner(_calibration(), hints=hints).choose("auto", _access())


def test_hints_are_described_in_the_reason():
    h = Hints.parse({"pattern": "block,*", "mostly": "read", "frequency": 10, "ignored_mpi_hint": "x"})
    assert h.describe() == "pattern (Block, *); read-mostly; 10 accesses per step"
    d = Planner(_calibration(), hints={"mostly": "write"}).choose("auto", _access())
    assert d.reason.endswith("hints: write-mostly")


def test_patterns_and_conformance():
    assert parse_pattern("(Block, Block, *)") == ("block", "block", "*")
    assert parse_pattern(["cyclic", "*"]) == ("cyclic", "*")
    assert conforms(("block", "*", "*")) and conforms(("*", "*"))
    assert not conforms(("block", "block")) and not conforms(("cyclic", "*"))
    assert conforms(("*", "block"), order="F") and not conforms(("block", "*"), order="F")


def test_access_without_segments_and_spans_falls_back_to_estimates():
    a = Access(writing=True, level=3, itemsize=8, total_bytes=64, rank_bytes=(32, 32), rank_regions=(1, 4))
    assert a.segments == (1, 4)
    assert a.spans == ((0, 32), (0, 64))
    # every method can still be predicted (auto works before group.py sends the richer stats)
    assert {p.method for p in Planner(_calibration()).predictions(a)} == set(METHODS)


def test_access_from_stats():
    a = Access.from_stats([(16, 2, 3, 0, 40), (0, 0, 0, 0, 0)], writing=False, level=2, itemsize=8, total_bytes=48)
    assert a.rank_bytes == (16, 0) and a.rank_regions == (2, 0) and a.segments == (3, 0)
    assert a.spans == ((0, 40), (0, 0)) and a.nprocs == 2 and not a.writing
