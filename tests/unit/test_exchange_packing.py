"""The integer packing behind the write path's fixed-size exchanges (no MPI needed)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from sdm import integrity
from sdm._collective import digest, pack_float, unpack_float
from sdm.engine.read import _pack_read_plan, _signed, _unpack_read_plan
from sdm.engine.state import _PLAN_WIDTH


def test_digest_is_the_same_in_every_process():
    """Ranks compare digests: a per-process salted hash (Python's hash of str) would never match."""
    value = (("rho", "e"), 3, False, None)
    code = "from sdm._collective import digest; print(digest((('rho', 'e'), 3, False, None)))"
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": "12345", "PYTHONPATH": ":".join(sys.path)})
    assert int(other.stdout) == digest(value)
    assert 0 <= digest(value) < 1 << 63
    assert digest(("rho", 3)) != digest(("rho", 4))


def test_floats_and_unsigned_shares_travel_as_int64():
    vec = np.array([pack_float(t) for t in (0.0, 1.5e-7, 12345.678)], dtype=np.int64)
    assert unpack_float(vec).tolist() == [0.0, 1.5e-7, 12345.678]
    for share in (0, 1, (1 << 63) - 1, 1 << 63, (1 << 64) - 1):
        assert int(np.int64(_signed(share))) & ((1 << 64) - 1) == share


@pytest.mark.parametrize("checksum, algorithm", [("", "none"), ("00ff00ff00ff00ff", "mix64-v2"),
                                                 ("ffffffffffffffff", "sum64-v1")])
def test_read_plans_round_trip(checksum, algorithm):
    plan = ("app-1a2b/run-000003-x/g.sdm", 123456789012, checksum, algorithm)
    words = _pack_read_plan(plan)
    assert words is not None and len(words) <= _PLAN_WIDTH
    assert _unpack_read_plan(np.array(words, dtype=np.int64)) == plan


def test_read_plans_that_do_not_fit_are_left_to_the_generic_exchange():
    assert _pack_read_plan(None) is None
    assert _pack_read_plan(("p" * 600, 0, "", "none")) is None  # too long a path
    assert _pack_read_plan(("p", 0, "0123456789abcdef", "sum64")) is None  # an algorithm known by name only
    assert "sum64" not in integrity.ALGORITHMS
    words = _pack_read_plan(("é" * 200, 7, "", "none"))  # UTF-8: 400 bytes still fit
    assert words is not None and _unpack_read_plan(np.array(words, dtype=np.int64))[0] == "é" * 200
