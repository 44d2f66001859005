"""Pre-touching memory before measurements, and keeping it backed (sdm.planner.measure)."""

from __future__ import annotations

import os
import resource
from pathlib import Path

import pytest
from mpi4py import MPI
from sdm.planner import measure
from sdm.planner.measure import steady_memory, warm_memory


def test_warm_memory_touches_the_pages_and_gives_them_back():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    rate = warm_memory(MPI.COMM_SELF, 256 << 20)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    assert rate > 0
    assert faults >= (256 << 20) // (2 << 20)  # at least one fault per huge page (4 KiB pages: 512 times more)
    # released: the resident set did not keep the 256 MiB
    with open("/proc/self/statm") as f:
        resident = int(f.read().split()[1]) * resource.getpagesize()
    assert resident < (256 << 20)


# ---------------------------------------------------------------- free page reporting held

REAL = Path("/sys/module/page_reporting/parameters/page_reporting_order")


def _orders() -> int:
    """Buddy orders of this kernel, counted independently: the columns of /proc/buddyinfo after the zone name."""
    return max(len(line.split()[4:]) for line in Path("/proc/buddyinfo").read_text().splitlines() if line)


@pytest.fixture
def knob(tmp_path, monkeypatch):
    """A file standing in for the kernel parameter, holding the kernel's default order."""
    path = tmp_path / "page_reporting_order"
    path.write_text("9\n")
    monkeypatch.setattr(measure, "REPORTING_ORDER", path)
    return path


def test_steady_memory_suspends_reporting_and_restores_it(knob):
    with steady_memory(MPI.COMM_SELF, 8 << 20) as memory:
        assert memory["free_page_reporting"] == "held"
        assert memory["touch_rate"] > 0
        assert knob.read_text() == str(_orders())  # no free block is of that order or above
    assert knob.read_text() == "9"


def test_steady_memory_nested_blocks_restore_once_at_the_end(knob):
    with steady_memory(MPI.COMM_SELF, 1 << 20):
        with steady_memory(MPI.COMM_SELF, 1 << 20) as inner:
            assert inner["free_page_reporting"] == "held"
        assert knob.read_text() == str(_orders())  # the outer block still holds it
    assert knob.read_text() == "9"


def test_steady_memory_restores_after_an_error_in_the_block(knob):
    with pytest.raises(ZeroDivisionError, match="division by zero"):
        with steady_memory(MPI.COMM_SELF, 1 << 20):
            1 / 0
    assert knob.read_text() == "9"
    assert measure._HOLDS == []


def test_steady_memory_without_the_parameter_only_warms(tmp_path, monkeypatch):
    missing = tmp_path / "none" / "page_reporting_order"
    monkeypatch.setattr(measure, "REPORTING_ORDER", missing)
    with steady_memory(MPI.COMM_SELF, 1 << 20) as memory:
        assert memory["free_page_reporting"] == "absent"
        assert memory["touch_rate"] > 0
    assert not missing.exists() and not missing.parent.exists()


def test_steady_memory_not_permitted_reports_active_and_changes_nothing(monkeypatch):
    readonly = Path("/proc/version")  # readable, never writable, even by root
    before = readonly.read_text()
    monkeypatch.setattr(measure, "REPORTING_ORDER", readonly)
    with steady_memory(MPI.COMM_SELF, 1 << 20) as memory:
        assert memory["free_page_reporting"] == "active"
    assert readonly.read_text() == before


@pytest.mark.skipif(not REAL.exists() or not os.access(REAL, os.W_OK), reason="no free page reporting to hold here")
def test_steady_memory_holds_the_real_kernel_parameter_and_gives_it_back():
    before = REAL.read_text().strip()
    with steady_memory(MPI.COMM_SELF, 1 << 20) as memory:
        assert memory["free_page_reporting"] == "held"
        assert REAL.read_text().strip() == str(_orders())
    assert REAL.read_text().strip() == before


def test_steady_memory_gives_the_parameter_back_when_terminated(knob):
    import signal

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit) as stop:
        with steady_memory(MPI.COMM_SELF, 1 << 20):
            os.kill(os.getpid(), signal.SIGTERM)  # what mpiexec sends to the ranks left when one fails
    assert stop.value.code == 128 + signal.SIGTERM
    assert knob.read_text() == "9"
    assert signal.getsignal(signal.SIGTERM) is before
