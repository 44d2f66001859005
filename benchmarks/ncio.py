"""NCIO benchmark: auto against every I/O method, without and with a calibration, on memory and on disk.

Run under MPI (see benchmarks/README.md)::

    mpiexec -n 4 python benchmarks/ncio.py --quiet-load 1.0

The same as ``sdm bench ncio --dir /dev/shm,/var/tmp --calibration both``: for each
directory (a storage target: tmpfs and the disk by default) the sweeps of
:mod:`sdm.bench.ncio` run twice -- first with the cost model's defaults (what a new user
gets), then after a fresh calibration of that directory -- every method and ``auto``
timed for writes and reads, ``--repeats`` times each in shuffled order, medians
reported.  Scratch files go to a new directory inside each target, removed afterwards.
On a shared machine ``--quiet-load`` waits (up to ``--wait`` seconds) for the 1-minute
load average to drop below a threshold before starting; the load before and after
every configuration is recorded.

Writes one ``benchmarks/results/ncio.{json,md,png}`` (``--out`` to change) for the four
configurations: auto/best per point and its geometric mean, median and worst per
configuration, with the SDM version, git commit and host facts.  Earlier runs stay in
the git history, where ``benchmarks/refit.py --rev REV`` reads them.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Sequence

from mpi4py import MPI

from _io_bench import RESULTS
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
    p.add_argument("--dirs", default="/dev/shm,/var/tmp", help="storage targets, comma-separated "
                   "(default: /dev/shm,/var/tmp)")
    p.add_argument("--calibration", default="both", choices=("both", "none", "fresh", "stored"),
                   help="models per directory (default both: the defaults, then a fresh calibration)")
    p.add_argument("--repeats", type=int, default=5, help="timed repeats per method and point (default 5)")
    p.add_argument("--out", default=str(RESULTS), help="results directory")
    p.add_argument("--quick", action="store_true", help="tiny sweeps (a smoke test)")
    p.add_argument("--quiet-load", type=float, default=None, help="wait for a load average below this first")
    p.add_argument("--wait", type=float, default=600, help="longest wait for --quiet-load (seconds)")
    a = p.parse_args(argv)
    comm = MPI.COMM_WORLD
    if a.quiet_load is not None:
        wait_for_quiet(comm, a.quiet_load, a.wait)
    dirs = [Path(d) for d in a.dirs.split(",") if d]
    run_ncio(comm, dirs, Path(a.out), quick=a.quick, repeats=a.repeats, calibration=a.calibration)
    if comm.Get_rank() == 0:  # the only rank that wrote it
        print((Path(a.out) / "ncio.md").read_text(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
