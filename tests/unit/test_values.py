"""Typed attribute values and search conditions."""

from __future__ import annotations

import numpy as np
import pytest
import sdm
from sdm.catalog.values import Condition, decode, encode, parse_condition


@pytest.mark.parametrize("value", [3, -2.5, True, "hello", np.int32(4), np.float64(0.5)])
def test_encode_decode_keeps_type(value):
    t, num, text = encode("k", value)
    back = decode(t, num, text)
    assert back == value and type(back) is type(getattr(value, "item", lambda: value)())


def test_rejected_values():
    with pytest.raises(sdm.InvalidArgumentError, match=r"attribute 'k': value \[1\] of type list is not supported"):
        encode("k", [1])
    with pytest.raises(sdm.InvalidArgumentError, match="attribute key must be a non-empty string"):
        encode("", 1)


def test_parse_and_match():
    c = parse_condition("res>=64")
    assert (c.key, c.op, c.value) == ("res", ">=", 64)
    assert c.matches(64) and c.matches(128.0) and not c.matches(32) and not c.matches("64")
    assert parse_condition("kind=analysis").matches("analysis")
    assert parse_condition("ok=true").matches(True)
    assert not Condition("x", "=", 1).matches(True)  # bools are not numbers here
    with pytest.raises(sdm.InvalidArgumentError, match="cannot read condition 'novalue'"):
        parse_condition("novalue")
