"""The MPI job of test_archive_write.py: writes to an archive-tier group, and reads of them.

``write ROOT URL ARCHIVE BIG`` makes group ``a`` (``tier="archive"``) with one dataset per
view of :func:`_remote_job.views` (Block, Cyclic, BlockCyclic, Subarray with ghosts,
MapArray with a ghost row) and a C and a Fortran order dataset, and group ``r`` with the
ranked dataset ``particles`` (rank k gives k + 2 rows), writes steps 0 and 1 of each from
numpy references, and with ``BIG`` > 0 a ``BIG x 1024`` float64 dataset
``big`` (an object of several parts at several ranks); prints ``RUN id``.
``read ROOT URL RUN [appended]`` reads every step back with ``auto`` and ``verify=True`` under the
views of this job's rank count and compares each local array with the reference;
prints ``READ OK n`` (``appended``: after ``append``).
``append ROOT URL RUN`` reopens the run, writes step 2 of ``block`` and overwrites
step 0 of ``cyclic`` with other values; prints ``APPEND OK``.
``error ROOT URL ARCHIVE CASE`` makes a bad call and prints each rank's error as
``ERROR rank class: message``.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request

import numpy as np
from mpi4py import MPI

import sdm

from _remote_job import SHAPE, views
from _remote_job import expected as _expected

BIG_COLUMNS = 1024


def reference(name: str, step: int, dtype: str, shape: tuple[int, ...] = SHAPE) -> np.ndarray:
    """The global array of *name* at *step*."""
    base = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape) * (step + 3) - 7 * len(name)
    return base.astype(dtype)


def expected(view: tuple, name: str, step: int, dtype: str) -> np.ndarray:
    """This rank's local array of *name* under *view* (zero ghosts)."""
    return _expected(view, name, step, dtype, reference)


DTYPES = {"block": "<f8", "cyclic": ">i4", "blockcyclic": "<f4", "subarray": "<i8", "map": "<f8"}


def write(root: str, url: str, archive: str, big: int) -> None:
    comm = MPI.COMM_WORLD
    size, rank = comm.Get_size(), comm.Get_rank()
    mine = views(size, rank)
    with sdm.open("archived", root=root, catalog=url) as s:
        names = [sdm.Dataset(v, dtype=DTYPES[v]) for v in mine] + [sdm.Dataset("fortran", dtype="<f8", order="F")]
        g = s.make_group("a", names, shape=SHAPE, tier="archive", archive=archive)
        assert (g.tier, g.level, g.archive) == ("archive", 1, archive.rstrip("/"))
        for v, view in mine.items():
            g.data_view(view[0], [v])
        g.data_view(sdm.Block(grid=[size, 1]), ["fortran"])
        for step in (0, 1):
            g.write_step(step, {v: expected(view, v, step, DTYPES[v]) for v, view in mine.items()})
            g.write("fortran", step, np.asfortranarray(_block_rows("fortran", step, "<f8", SHAPE, size, rank)))
        r = s.make_group("r", [sdm.Dataset("particles", dtype="<f8", shape=(3,))], tier="archive", archive=archive)
        r.data_view(sdm.Ranked())
        for step in (0, 1):  # rank k writes k + 2 rows
            r.write("particles", step, particles(step, size)[sum(range(2, rank + 2)):sum(range(2, rank + 3))])
        if big:
            b = s.make_group("b", [sdm.Dataset("big", dtype="<f8")], shape=(big, BIG_COLUMNS), tier="archive",
                             archive=archive)
            b.data_view(sdm.Block(grid=[size, 1]))
            b.write("big", 0, _block_rows("big", 0, "<f8", (big, BIG_COLUMNS), size, rank))
        if rank == 0:
            print("RUN", s.run_id, flush=True)


def particles(step: int, writers: int) -> np.ndarray:
    """Every row of the ranked dataset at *step*, in writer order (writer k gave k + 2 rows)."""
    n = sum(range(2, writers + 2))
    return (np.arange(3 * n, dtype="<f8").reshape(n, 3) + 0.5) * (step + 1)


def _block_rows(name: str, step: int, dtype: str, shape: tuple[int, ...], size: int, rank: int) -> np.ndarray:
    lo, hi = rank * shape[0] // size, (rank + 1) * shape[0] // size
    return reference(name, step, dtype, shape)[lo:hi]


def read(root: str, url: str, run: int, appended: bool = False) -> None:
    comm = MPI.COMM_WORLD
    size, rank = comm.Get_size(), comm.Get_rank()
    compared = 0
    with sdm.open("archived", "r", root=root, catalog=url, run=run) as s:
        g = s.group("a")
        mine = views(size, rank)
        for v, view in mine.items():
            g.data_view(view[0], [v])
            for step in g.steps(v):
                got = g.read(v, step, verify=True)
                want = expected(view, v, step, DTYPES[v])
                if appended and (v, step) == ("cyclic", 0):  # overwritten by append()
                    want = (want + 5).astype(DTYPES[v])
                assert got.tobytes() == want.tobytes(), (v, step)
                compared += 1
        g.data_view(sdm.Block(grid=[size, 1]), ["fortran"])
        for step in g.steps("fortran"):
            assert g.read("fortran", step, verify=True).tobytes(order="A") == np.asfortranarray(
                _block_rows("fortran", step, "<f8", SHAPE, size, rank)).tobytes(order="A")
            compared += 1
        r = s.group("r")
        writers = s.run.nprocs
        for step in r.steps("particles"):
            every = particles(step, writers)
            if size == writers:  # each rank its own rows
                lo, n = sum(range(2, rank + 2)), rank + 2
            else:  # a balanced share
                base, extra = divmod(len(every), size)
                lo, n = rank * base + min(rank, extra), base + (rank < extra)
            got = r.read("particles", step, verify=True)
            assert got.tobytes() == every[lo:lo + n].tobytes(), ("particles", step)
            first = r.read("particles", step, ranks=(0, 1))  # the first writer's rows, on every rank
            assert first.tobytes() == every[:2].tobytes()
            compared += 1
        if "b" in s.groups:
            b = s.group("b")
            shape = b.dataset("big").shape
            b.data_view(sdm.Block(grid=[size, 1]))
            assert b.read("big", 0, verify=True).tobytes() == _block_rows("big", 0, "<f8", shape, size, rank).tobytes()
            compared += 1
    total = comm.allreduce(compared)
    if rank == 0:
        print("READ OK", total, flush=True)


def append(root: str, url: str, run: int) -> None:
    comm = MPI.COMM_WORLD
    size, rank = comm.Get_size(), comm.Get_rank()
    mine = views(size, rank)
    with sdm.open("archived", "a", root=root, catalog=url, run=run) as s:
        g = s.group("a")
        for v in ("block", "cyclic"):
            g.data_view(mine[v][0], [v])
        g.write("block", 2, expected(mine["block"], "block", 2, DTYPES["block"]))
        g.write("cyclic", 0, expected(mine["cyclic"], "cyclic", 0, DTYPES["cyclic"]) + 5, overwrite=True)
    if rank == 0:
        print("APPEND OK", flush=True)


def _reset_connections(api: str) -> None:
    """Add a ``reset_peer`` toxic to a toxiproxy proxy (its toxics URL)."""
    body = {"name": "reset", "type": "reset_peer", "stream": "upstream", "toxicity": 1.0, "attributes": {"timeout": 0}}
    request = urllib.request.Request(api, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10):
        pass


def error(root: str, url: str, archive: str, case: str) -> None:
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    try:
        with sdm.open("archived", root=root, catalog=url) as s:
            if case == "no-archive":
                s.make_group("e", ["x"], dtype="<f8", shape=SHAPE, tier="archive")
            elif case == "level":
                s.make_group("e", ["x"], dtype="<f8", shape=SHAPE, tier="archive", archive=archive, level=3)
            elif case == "tier":
                s.make_group("e", ["x"], dtype="<f8", shape=SHAPE, tier="tape", archive=archive)
            elif case == "bucket":
                s.make_group("e", ["x"], dtype="<f8", shape=SHAPE, tier="archive", archive="s3://No_Such/x")
            elif case in ("naive", "fast-remote"):
                g = s.make_group("e", ["x"], dtype="<f8", shape=SHAPE,
                                 **({"tier": "archive", "archive": archive} if case == "naive" else {}))
                local = np.zeros(g.local_shape("x"))
                g.write("x", 0, local, method="remote-naive" if case == "naive" else "remote-collective")
            elif case == "fault":  # then the proxy in front of the server resets every connection
                g = s.make_group("e", ["x"], dtype="<f8", shape=SHAPE, tier="archive", archive=archive)
                if rank == 0:
                    _reset_connections(os.environ["TOXIPROXY_API"])
                comm.Barrier()
                g.write("x", 0, np.ones(g.local_shape("x")))
    except sdm.SDMError as exc:
        message: str | None = f"{type(exc).__name__}: {exc}"
    else:
        message = None
    for r, text in enumerate(comm.gather(message, root=0) or []):  # one line per rank, in rank order
        print(f"ERROR {r} {text}" if text else f"NO ERROR {r}", flush=True)


if __name__ == "__main__":
    what, args = sys.argv[1], sys.argv[2:]
    if what == "write":
        write(args[0], args[1], args[2], int(args[3]))
    elif what == "read":
        read(args[0], args[1], int(args[2]), args[3:] == ["appended"])
    elif what == "append":
        append(args[0], args[1], int(args[2]))
    else:
        error(*args)
