"""The MPI job of test_remote_read.py: reads of a run whose data files are on the archive tier only.

``read ROOT URL RUN METHOD...`` reads every step of every dataset (see :data:`DATASETS`)
with every view of :func:`views` and every method given, ``verify=True``, and compares
each local array byte for byte with :func:`expected`, a numpy reference built from the
views' definitions (not from SDM's pieces); prints ``READ OK n``.
``cache ROOT URL RUN`` reads one dataset twice with ``remote-subfile`` and prints the
ranged GETs of all ranks in each read: ``GETS first second``.
``counts ROOT URL RUN`` prints the ranged GETs of one read with each method:
``COUNTS remote-naive=n ...`` (the subfile twice: staged, then cached).
``error ROOT URL RUN METHOD`` reads a step whose object is gone and prints each rank's
error as ``ERROR rank class: message``.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
from mpi4py import MPI

import sdm
from sdm.io import remote

SHAPE = (12, 10)
#: (group, level, dataset, dtype, order, steps)
DATASETS = [
    ("fields", 3, "T", "<f8", "C", [0, 1]),
    ("fields", 3, "P", "<f8", "C", [0, 1]),
    ("snap", 1, "Q", ">i4", "F", [0, 2]),
]


def reference(name: str, step: int, dtype: str) -> np.ndarray:
    """The global array of *name* at *step* (what the test writes)."""
    base = np.arange(np.prod(SHAPE), dtype=np.int64).reshape(SHAPE) * (step + 1) + 1000 * ord(name)
    return base.astype(dtype)


def _balanced(n: int, parts: int, k: int) -> tuple[int, int]:
    base, extra = divmod(n, parts)
    lo = k * base + min(k, extra)
    return lo, lo + base + (1 if k < extra else 0)


def views(size: int, rank: int) -> dict[str, tuple[object, tuple, tuple[int, ...], tuple]]:
    """Each view: ``(distribution, (rows, cols) selected, local shape, where the interior goes)``."""
    rows, cols = np.arange(SHAPE[0]), np.arange(SHAPE[1])
    c0, c1 = _balanced(SHAPE[1], size, rank)
    r0, r1 = _balanced(SHAPE[0], size, rank)
    cyc = rows[rows % size == rank]
    bc = cols[(cols // 3) % size == rank]
    owned = rows[rows % size == rank][::-1]  # a map in descending order
    ghost_row = [(int(owned[0]) + 1) % SHAPE[0]] if size > 1 else []
    out: dict[str, tuple[object, tuple, tuple[int, ...], tuple]] = {
        "block": (sdm.Block(grid=[1, size]), (rows, cols[c0:c1]), (SHAPE[0], c1 - c0), (slice(None), slice(None))),
        "cyclic": (sdm.Cyclic(grid=[size, 1]), (cyc, cols), (cyc.size, SHAPE[1]), (slice(None), slice(None))),
        "blockcyclic": (sdm.BlockCyclic(grid=[1, size], blocks=3), (rows, bc), (SHAPE[0], bc.size),
                        (slice(None), slice(None))),
        "subarray": (sdm.Subarray(start=(r0, 0), count=(r1 - r0, SHAPE[1]), ghosts=1), (rows[r0:r1], cols),
                     (r1 - r0 + 2, SHAPE[1] + 2), (slice(1, -1), slice(1, -1))),
        "map": (sdm.MapArray(np.concatenate([owned, ghost_row]).astype(np.int64),
                             ghost=np.array([False] * owned.size + [True] * len(ghost_row))),
                (owned, cols), (owned.size + len(ghost_row), SHAPE[1]), (slice(0, owned.size), slice(None))),
    }
    return out


def expected(view: tuple, name: str, step: int, dtype: str, ref: Any = None) -> np.ndarray:
    """This rank's local array: the selected rows and columns of ``ref(name, step, dtype)``
    (default :func:`reference`), zero ghosts."""
    _, (rows, cols), shape, inner = view
    out = np.zeros(shape, dtype=dtype)
    out[inner] = (ref or reference)(name, step, dtype)[np.ix_(rows, cols)]
    return out


def read(root: str, url: str, run: int, methods: list[str]) -> None:
    comm = MPI.COMM_WORLD
    compared = 0
    with sdm.open("remote", "r", root=root, catalog=url, run=run) as s:
        for key, view in views(comm.size, comm.rank).items():
            for group, _, name, dtype, order, steps in DATASETS:
                if key == "map" and order == "F":
                    continue  # map arrays need C order
                g = s.group(group)
                g.data_view(view[0], [name])
                for method in methods:
                    for step in steps:
                        got = g.read(name, step, method=method, verify=True)
                        want = expected(view, name, step, dtype)
                        assert got.dtype == want.dtype and got.shape == want.shape, (key, name, method, got.shape)
                        assert got.tobytes() == want.tobytes() and np.array_equal(got, want), \
                            (key, name, step, method, comm.rank)
                        compared += 1
    total = comm.reduce(compared, root=0)
    if comm.rank == 0:
        print(f"READ OK {total}", flush=True)


def gets(comm: MPI.Comm) -> int:
    return int(comm.allreduce(remote.counters()["requests"]))


def cache(root: str, url: str, run: int) -> None:
    comm = MPI.COMM_WORLD
    counts = []
    with sdm.open("remote", "r", root=root, catalog=url, run=run) as s:
        g = s.group("fields")
        view = views(comm.size, comm.rank)["cyclic"]
        g.data_view(view[0], ["T"])
        for _ in range(2):
            before = gets(comm)
            got = g.read("T", 1, method="remote-subfile", verify=True)
            assert got.tobytes() == expected(view, "T", 1, "<f8").tobytes()
            counts.append(gets(comm) - before)
    if comm.rank == 0:
        print("GETS " + " ".join(map(str, counts)), flush=True)


def counts(root: str, url: str, run: int) -> None:
    """Ranged GETs of all ranks for one read of ``T`` (cyclic rows) with each method, then ``auto``'s choice."""
    comm = MPI.COMM_WORLD
    made = []
    with sdm.open("remote", "r", root=root, catalog=url, run=run) as s:
        g = s.group("fields")
        view = views(comm.size, comm.rank)["cyclic"]
        g.data_view(view[0], ["T"])
        for method in (*remote.METHODS, "remote-subfile"):
            before = gets(comm)
            assert g.read("T", 0, method=method).tobytes() == expected(view, "T", 0, "<f8").tobytes()
            made.append(f"{method}={gets(comm) - before}")
    if comm.rank == 0:
        print("COUNTS " + " ".join(made), flush=True)


def error(root: str, url: str, run: int, method: str) -> None:
    comm = MPI.COMM_WORLD
    with sdm.open("remote", "r", root=root, catalog=url, run=run) as s:
        g = s.group("fields")
        g.data_view(views(comm.size, comm.rank)["block"][0], ["T"])
        try:
            g.read("T", 0, method=method, verify=True)
            line = "NO ERROR"
        except sdm.SDMError as exc:
            line = f"{type(exc).__name__}: {exc}"
        lines = comm.gather(line, root=0)
        snap = s.group("snap")  # the session goes on: another object reads
        view = views(comm.size, comm.rank)["block"]
        snap.data_view(view[0], ["Q"])
        assert snap.read("Q", 2, method=method, verify=True).tobytes() == expected(view, "Q", 2, ">i4").tobytes()
    if comm.rank == 0:
        assert lines is not None
        for r, text in enumerate(lines):
            print(f"ERROR {r} {text}", flush=True)


def main(argv: list[str]) -> None:
    mode, root, url, run = argv[0], argv[1], argv[2], int(argv[3])
    if mode == "read":
        read(root, url, run, argv[4:])
    elif mode == "cache":
        cache(root, url, run)
    elif mode == "counts":
        counts(root, url, run)
    else:
        error(root, url, run, argv[4])


if __name__ == "__main__":
    main(sys.argv[1:])
