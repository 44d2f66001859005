"""The MPI job of test_interrupt.py (started by ``benchmarks/_mpijob.Job`` with a JSON config).

Every rank writes its pid to ``pid.<task>.<rank>``; rank 0 appends ``step K`` to
``progress.<task>`` after each committed step. Step ``k`` of ``T`` is :func:`reference`
``(k)``. ``cfg["mode"]``:

``loop``
    write steps until interrupted (the test sends SIGINT to mpiexec);
``one-raises``
    after step 3, rank 1 raises ``ValueError`` in the application's code while the other
    ranks go on writing (their next write meets rank 1's close in the opening exchange);
``one-raises-others-elsewhere``
    after step 3, rank 1 raises while the other ranks wait in an application's
    ``MPI_Barrier`` that rank 1 never joins (nobody joins rank 1's close in time).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
from mpi4py import MPI

import sdm

SHAPE = (64, 48)
MAX_STEPS = 100_000


def reference(step: int) -> np.ndarray:
    return np.arange(np.prod(SHAPE), dtype="<f8").reshape(SHAPE) + 1000.0 * step


def main(cfg: dict) -> None:
    here, task, mode = Path(cfg["dir"]), cfg["task"], cfg["mode"]
    rank = MPI.COMM_WORLD.Get_rank()
    (here / f"pid.{task}.{rank}").write_text(str(os.getpid()))
    with sdm.open("interrupt", root=cfg["root"], catalog=cfg["url"], sync=True) as s:
        g = s.make_group("fields", ["T"], dtype="<f8", shape=SHAPE, level=3)
        p = g.piece("T")
        for step in range(MAX_STEPS):
            if step == 4 and mode != "loop":
                if rank == 1:
                    raise ValueError("the application failed on rank 1")
                if mode == "one-raises-others-elsewhere":
                    MPI.COMM_WORLD.Barrier()
            g.write("T", step, np.ascontiguousarray(reference(step)[np.ix_(*p.indices)]))
            if rank == 0:
                with open(here / f"progress.{task}", "a") as f:
                    f.write(f"step {step}\n")


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
