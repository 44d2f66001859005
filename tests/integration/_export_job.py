"""The MPI job of test_export.py: ``write ROOT URL [ranked]`` writes one run and prints ``RUN <id>``.

Group ``fields``: ``T`` (float64, 6x5) at steps 0-4 and ``n`` (int32, 4) at the even steps
only; group ``mesh``: ``x`` (float32, 9x2) through a :class:`sdm.MapArray` that gives rank r
the rows r, r + size, ... in reverse order, steps 0 and 1; with ``ranked``, group ``parts``:
``p`` (int64 rows of 2, :class:`sdm.Ranked`, rank r gives r + 1 rows) at steps 0 and 1.
Values come from :func:`reference`, numpy formulas the test uses as well.
"""

from __future__ import annotations

import sys

import numpy as np

ATTRIBUTES = {"case": "demo", "nx": 6, "dt": 0.5}
STEPS = {"T": [0, 1, 2, 3, 4], "n": [0, 2, 4], "x": [0, 1]}


def reference(name: str, step: int, ranks: int = 1) -> np.ndarray:
    """The global array of *name* at *step* (for ``p``: all rows of *ranks* writers, in rank order)."""
    if name == "T":
        return np.arange(30, dtype="<f8").reshape(6, 5) * 1.5 + step
    if name == "n":
        return (np.arange(4) * step + 7).astype("<i4")
    if name == "x":
        return np.arange(18, dtype="<f4").reshape(9, 2) * (step + 1) - 4
    rows = sum(r + 1 for r in range(ranks))
    return np.arange(rows * 2, dtype="<i8").reshape(rows, 2) + 100 * step


def write(root: str, url: str, ranked: bool) -> None:
    """Write the run on every rank of MPI.COMM_WORLD."""
    from mpi4py import MPI

    import sdm

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    with sdm.open("exported", root=root, catalog=url, attributes=ATTRIBUTES) as s:
        g = s.make_group("fields", [sdm.Dataset("T", shape=(6, 5), dtype="<f8"),
                                    sdm.Dataset("n", shape=(4,), dtype="<i4")], attributes={"units": "K"})
        mine = {d: np.ix_(*g.piece(d).indices) for d in ("T", "n")}  # this rank's box of the default Block view
        for step in STEPS["T"]:
            g.write("T", step, reference("T", step)[mine["T"]])
            if step in STEPS["n"]:
                g.write("n", step, reference("n", step)[mine["n"]])
        rows = np.arange(rank, 9, size)[::-1]
        m = s.make_group("mesh", ["x"], dtype="<f4", shape=(9, 2), view=sdm.MapArray(rows))
        for step in STEPS["x"]:
            m.write("x", step, reference("x", step)[rows])
        if ranked:
            p = s.make_group("parts", ["p"], dtype="<i8", shape=(2,), view=sdm.Ranked())
            for step in (0, 1):
                whole = reference("p", step, size)
                start = sum(r + 1 for r in range(rank))
                p.write("p", step, whole[start:start + rank + 1])
        if rank == 0:
            print(f"RUN {s.run_id}", flush=True)


if __name__ == "__main__":
    write(sys.argv[2], sys.argv[3], "ranked" in sys.argv[4:])
