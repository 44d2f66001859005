"""NCIO benchmark: every I/O method against region count, size and spacing, side by side.

Run under MPI (see benchmarks/README.md)::

    mpiexec -n 4 python benchmarks/ncio.py

The same as ``sdm bench ncio --calibrate``: a fresh calibration of the scratch
directory first (stored in a scratch catalog, used for the predictions and for
``auto``), then the sweeps of :mod:`sdm.bench.ncio` with every method and ``auto``
timed for writes and reads, ``--repeats`` times each in rotated order, medians
reported.  On a shared machine ``--quiet-load`` waits (up to ``--wait`` seconds) for the
1-minute load average to drop below a threshold before starting; the load before and
after is recorded.

Writes ``benchmarks/results/ncio.{json,md,png}`` (``--out`` to change): the latest run only.
Earlier runs stay in the git history, where ``benchmarks/refit.py --rev REV`` reads them.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Sequence

from mpi4py import MPI

from _io_bench import RESULTS, say, scratch
from sdm._cli.bench import run_ncio


def wait_for_quiet(comm: MPI.Comm, threshold: float, seconds: float) -> float:
    """Wait until the 1-minute load average is below *threshold* (or *seconds* pass); returns it."""
    deadline = time.monotonic() + seconds
    load = os.getloadavg()[0]
    while load >= threshold and time.monotonic() < deadline:
        time.sleep(5)
        load = os.getloadavg()[0]
    return comm.bcast(load, root=0)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=7, help="timed repeats per method and point (default 7)")
    p.add_argument("--root", default=None, help="scratch directory (default: a new temporary directory)")
    p.add_argument("--out", default=str(RESULTS), help="results directory")
    p.add_argument("--quick", action="store_true", help="tiny sweeps (a smoke test)")
    p.add_argument("--quiet-load", type=float, default=None, help="wait for a load average below this first")
    p.add_argument("--wait", type=float, default=600, help="longest wait for --quiet-load (seconds)")
    a = p.parse_args(argv)
    comm = MPI.COMM_WORLD
    if a.quiet_load is not None:
        wait_for_quiet(comm, a.quiet_load, a.wait)
    with scratch(comm, a.root, "sdm-ncio-") as base:
        run_ncio(comm, base, Path(a.out), quick=a.quick, repeats=a.repeats, calibrate=True,
                 catalog=f"sqlite:///{base}/catalog.db")
    say(comm)((Path(a.out) / "ncio.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
