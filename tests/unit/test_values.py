"""Typed attribute values and search conditions."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

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
    with pytest.raises(sdm.QuerySyntaxError) as info:
        parse_condition("novalue")
    assert (info.value.text, info.value.position) == ("novalue", 7)
    assert str(info.value) == ("cannot read condition 'novalue' at its end: no comparison after 'novalue'; write "
                               "key=value (or key>=value, key<value, ...)")


@pytest.mark.parametrize("text, position, what", [
    ("nx>>32", 3, "a value cannot start with '>' (after the comparison '>')"),
    ("nx=<3", 3, "a value cannot start with '<' (after the comparison '=')"),
    ("nx=== 3", 4, "a value cannot start with '=' (after the comparison '==')"),
    ("nx >= =3", 6, "a value cannot start with '=' (after the comparison '>=')"),
    (">=3", 0, "no attribute name before the comparison"),
    ("  =3", 2, "no attribute name before the comparison"),
    ("n x=3", 2, "'x' where a comparison (= == != < <= > >=) should be"),
    ("nx!3", 2, "'!' where a comparison (= == != < <= > >=) should be"),
    ("", 0, "no attribute name"),
])
def test_a_condition_that_does_not_read_says_where(text, position, what):
    with pytest.raises(sdm.QuerySyntaxError) as info:
        parse_condition(text)
    err = info.value
    assert isinstance(err, sdm.InvalidArgumentError) and (err.text, err.position) == (text, position)
    where = "at its end" if position >= len(text) else f"at character {position + 1}"
    assert str(err) == f"cannot read condition {text!r} {where}: {what}; write key=value (or key>=value, key<value, ...)"
    assert pickle.loads(pickle.dumps(err)).position == position  # travels between ranks whole


@pytest.mark.parametrize("text, key, op, value", [
    ("nx==32", "nx", "==", 32), (" nx >= 2.5 ", "nx", ">=", 2.5), ("a=b<c", "a", "=", "b<c"), ("k!=x", "k", "!=", "x"),
    ("nx=", "nx", "=", ""), ("t<-1", "t", "<", -1),
])
def test_conditions_that_read(text, key, op, value):
    c = parse_condition(text)
    assert (c.key, c.op, c.value) == (key, op, value)


_HALF_IMPORTED = r'''
import importlib.abc, importlib.machinery, sys, threading, time
started = threading.Event()

class Slow(importlib.abc.MetaPathFinder):
    """Holds numpy's import open for a moment, with the half-built module already in sys.modules."""
    def find_spec(self, name, path=None, target=None):
        if name != "numpy":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        real = spec.loader.exec_module
        def exec_module(module):
            started.set()
            time.sleep(0.5)
            real(module)
        spec.loader.exec_module = exec_module
        return spec

sys.meta_path.insert(0, Slow())
from sdm.catalog.values import loaded_numpy
assert loaded_numpy() is None
threading.Thread(target=lambda: __import__("numpy")).start()
started.wait()
assert "numpy" in sys.modules
np = loaded_numpy()
print(hasattr(np, "bool_") and hasattr(np, "integer"))
'''


def test_loaded_numpy_waits_for_an_import_under_way_in_another_thread():
    """A thread of the archive's copy pool may be importing numpy while the catalog asks whether a
    value is a numpy scalar: the half-initialized module must never be used (it has no ``bool_``)."""
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", _HALF_IMPORTED], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True"]
