"""Typed attribute values and search conditions."""

from __future__ import annotations

import os
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
    with pytest.raises(sdm.InvalidArgumentError, match="cannot read condition 'novalue'"):
        parse_condition("novalue")


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
