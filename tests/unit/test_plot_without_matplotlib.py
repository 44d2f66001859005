"""`make demo` installs no matplotlib: a plot then says what to install, not an internal error."""

from __future__ import annotations

import sys

import pytest

import sdm.plot
from sdm.errors import SDMError


def test_a_plot_without_matplotlib_names_what_installs_it(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    with pytest.raises(SDMError, match=r"plots need matplotlib.*make analysis"):
        sdm.plot._figure()
