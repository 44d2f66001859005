"""Pre-touching memory before measurements, on the host as it is (sdm.bench.measure)."""

from __future__ import annotations

import resource
import signal
from pathlib import Path

from mpi4py import MPI
from sdm.bench.measure import steady_memory, warm_memory


def _resident() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def test_warm_memory_touches_the_pages_and_gives_them_back():
    resident = _resident()  # what the tests before this one left in this process
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    rate = warm_memory(MPI.COMM_SELF, 256 << 20)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    assert rate > 0
    assert faults >= (256 << 20) // (2 << 20)  # at least one fault per huge page (4 KiB pages: 512 times more)
    # released: the resident set did not keep the 256 MiB
    assert _resident() - resident < (128 << 20)


# ---------------------------------------------------------------- the host as it is


def test_steady_memory_touches_memory_and_changes_nothing():
    before = signal.getsignal(signal.SIGTERM)
    with steady_memory(MPI.COMM_SELF, 1 << 20) as memory:
        assert memory == {"touch_rate": memory["touch_rate"]} and memory["touch_rate"] > 0
        assert signal.getsignal(signal.SIGTERM) is before  # no process-wide handler
    assert signal.getsignal(signal.SIGTERM) is before


def test_measuring_code_never_writes_host_settings_nor_sets_signal_handlers():
    """No source of the library or the benchmarks names kernel settings or installs signal handlers."""
    root = Path(__file__).resolve().parents[2]
    offenders = []
    for path in [*(root / "src").rglob("*.py"), *(root / "benchmarks").rglob("*.py")]:
        text = path.read_text()
        for needle in ("signal.signal(", "/sys/" + "module", "/sys/" + "kernel", "/proc/" + "sys", "sysctl"):
            if needle in text:
                offenders.append(f"{path.relative_to(root)}: {needle}")
    assert offenders == []
