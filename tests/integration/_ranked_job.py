"""The MPI job of test_ranked_ranks.py: ``write ROOT URL`` writes ranked rows, ``read URL RUN`` checks them.

Row counts and values come from :func:`counts` and :func:`table`, numpy formulas the
test and this job compute independently of SDM.  ``write`` prints ``RUN <id>``;
``read`` reads every step on this job's ranks (own rows, a balanced share, a range of
writer ranks, each with ``verify=True``) and prints ``READ OK n`` (n arrays compared).
"""

from __future__ import annotations

import sys

import numpy as np
from mpi4py import MPI

import sdm

STEPS = (0, 1, 2)
LEVELS = (1, 3)
ROW = (2,)


def counts(writers: int, step: int) -> list[int]:
    """Rows of each writer rank at *step*: rank r gives (r + step) % 4 rows, so some give none."""
    return [(r + step) % 4 for r in range(writers)]


def table(writers: int, step: int) -> np.ndarray:
    """All rows of a step in writer-rank order."""
    total = sum(counts(writers, step))
    return (np.arange(total * 2, dtype="<i8").reshape(total, *ROW) + 1000 * step)


def write(root: str, url: str) -> None:
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    with sdm.open("ranked", root=root, catalog=url) as s:
        for level in LEVELS:
            g = s.make_group(f"l{level}", ["p"], dtype="<i8", shape=ROW, level=level, view=sdm.Ranked())
            for step in STEPS:
                c = counts(size, step)
                start = sum(c[:rank])
                g.write("p", step, table(size, step)[start:start + c[rank]])
        if rank == 0:
            print(f"RUN {s.run_id}", flush=True)


def read(url: str, run: int, writers: int) -> None:
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    done = 0
    with sdm.open("ranked", "r", catalog=url, run=run) as s:
        for level in LEVELS:
            g = s.group(f"l{level}")
            for step in STEPS:
                c, whole = counts(writers, step), table(writers, step)
                facts = g.ranked_counts("p", step)
                assert facts.counts == tuple(c) and facts.nranks == writers, facts
                base, extra = divmod(len(whole), size)
                first = rank * base + min(rank, extra)
                got = g.read("p", step, verify=True)
                assert np.array_equal(got, whole[first:first + base + (rank < extra)]), (level, step, got)
                a, b = rank % writers, min(writers, rank % writers + 2)
                got = g.read("p", step, ranks=(a, b), verify=True)
                assert np.array_equal(got, whole[sum(c[:a]):sum(c[:b])]), (level, step, a, b)
                done += 2
    total = comm.allreduce(done)
    if rank == 0:
        print(f"READ OK {total}", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write(sys.argv[2], sys.argv[3])
    else:
        read(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
