"""User names never become raw path components."""

from __future__ import annotations

from pathlib import Path

import pytest
import sdm
from sdm.storage import check_name, component, inside, relative_path


@pytest.mark.parametrize("bad, match", [
    ("", "must not be empty"),
    ("a/b", "would leave the data root"),
    ("..", "would leave the data root"),
    ("x\\y", "would leave the data root"),
    ("a..b/c", "would leave the data root"),
    ("tab\there", "contains control characters"),
    ("x" * 256, "the limit is 255"),
])
def test_rejected_names(bad, match):
    with pytest.raises(sdm.InvalidNameError, match=match):
        check_name(bad, "dataset")


def test_components_are_safe_and_distinct():
    assert component("rho") == "rho"
    a, b = component("a b"), component("a_b")
    assert a != b and "/" not in a and " " not in a
    assert component(".hidden").startswith("hidden-")


def test_level_paths():
    run = "ASTRO3D/run-000007-20261125T010203Z-0123456789ab"
    assert str(relative_path(run, 1, "analysis", "a0", 12)) == f"{run}/analysis.a0.s00000012.sdm"
    assert str(relative_path(run, 1, "analysis", "a0", 12, 3)) == f"{run}/analysis.a0.s00000012.v3.sdm"
    assert str(relative_path(run, 2, "analysis", "a0", 12)) == f"{run}/analysis.a0.sdm"
    assert str(relative_path(run, 3, "analysis", "a0", 12, 5)) == f"{run}/analysis.sdm"


def test_inside_refuses_escape(tmp_path):
    assert inside(tmp_path, Path("a/b.sdm")) == (tmp_path / "a/b.sdm").resolve()
    with pytest.raises(sdm.InvalidNameError, match="would leave the data root"):
        inside(tmp_path, Path("../x"))
