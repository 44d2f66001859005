"""Pre-touching memory before measurements (see sdm.planner.measure.warm_memory)."""

from __future__ import annotations

import resource

from mpi4py import MPI
from sdm.planner.measure import warm_memory


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
