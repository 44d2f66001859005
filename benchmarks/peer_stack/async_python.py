"""The SDM contender of ``benchmarks/async.py``: an ASTRO3D-like code that computes and dumps every step.

One job per measurement, under mpiexec::

    mpiexec -n 2 python -m mpi4py async_python.py mode=sync|async|compute dir=D n=128 arrays=4 steps=6 sweeps=3

``arrays`` float32 arrays ``a0``, ``a1``, ... of ``n^3`` values, block-distributed (``sdm.Block``
over ``MPI.Compute_dims(ranks, 3)``), as ``peer_stack/async_adios2.c``: every step, ``sweeps``
sweeps of the 7-point stencil ``b = 0.4 a + 0.1 (sum of the six neighbours)`` over the interior
of each local block (numpy, no allocation: into a second buffer, then the two swap), then one
``write_step`` of every array (mode ``sync``: blocking; ``async``: ``wait=False``, the arrays
reused by the next sweep at once; ``compute``: no dump, no session). Every module SDM uses is
imported, its compiled checksum loop loaded and run once, and the SQLite catalog created before
the clock; timed between barriers: open, every
step, close (which waits for the dumps). SDM syncs every dump's bytes before its catalog commit
(its default). Rank 0 prints one JSON line: ``seconds``, ``compute``, ``dump`` (seconds in
``write_step`` calls), ``close``, ``cpu`` (CPU seconds of the
rank's process, every thread and the kernel's work for it; the largest over the ranks of each), ``bytes``, ``checksum``
(the sum of the last step's values, as the C driver's) and, mode ``async``, per handle
``handle_seconds``, ``handle_blocked``, ``handle_waited`` (sums over the steps: rank 0's and the
largest over the ranks) and ``peak`` (bytes of copies held at once, rank 0).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
from mpi4py import MPI

COMM = MPI.COMM_WORLD
RANK, SIZE = COMM.Get_rank(), COMM.Get_size()


def grid() -> tuple[int, int, int]:
    return tuple(MPI.Compute_dims(SIZE, [0] * 3))  # type: ignore[return-value]


def bounds(n: int, parts: int, coord: int) -> tuple[int, int]:
    """As ``sdm.Block`` splits an axis (the first ``n % parts`` blocks one longer)."""
    base, extra = divmod(n, parts)
    lo = coord * base + min(coord, extra)
    return lo, lo + base + (1 if coord < extra else 0)


def initial(n: int, arrays: int) -> list[np.ndarray]:
    """This rank's blocks: ``((gz*7 + gy*3 + gx + a) mod 97) / 97`` (as the C driver's)."""
    g = grid()
    sl = [bounds(n, p, int(c)) for p, c in zip(g, np.unravel_index(RANK, g))]
    z, y, x = (np.arange(lo, hi, dtype=np.int64) for lo, hi in sl)
    base = z[:, None, None] * 7 + y[None, :, None] * 3 + x[None, None, :]
    return [(((base + a) % 97).astype(np.float32) / np.float32(97)) for a in range(arrays)]


class Stencil:
    """Sweeps of ``b = 0.4 a + 0.1 (six neighbours)`` over the interior, with preallocated buffers."""

    def __init__(self, arrays: list[np.ndarray]) -> None:
        self.cur = arrays
        self.nxt = [a.copy() for a in arrays]  # the faces stay as they were, in both buffers
        inner = tuple(s - 2 for s in arrays[0].shape)
        self.tmp = np.empty(inner, np.float32)
        self.c4, self.c1 = np.float32(0.4), np.float32(0.1)

    def sweep(self) -> None:
        t, mid = self.tmp, (slice(1, -1),) * 3
        for i, (a, b) in enumerate(zip(self.cur, self.nxt)):
            np.add(a[:-2, 1:-1, 1:-1], a[2:, 1:-1, 1:-1], out=t)
            np.add(t, a[1:-1, :-2, 1:-1], out=t)
            np.add(t, a[1:-1, 2:, 1:-1], out=t)
            np.add(t, a[1:-1, 1:-1, :-2], out=t)
            np.add(t, a[1:-1, 1:-1, 2:], out=t)
            np.multiply(t, self.c1, out=t)
            out = b[mid]
            np.multiply(a[mid], self.c4, out=out)
            np.add(out, t, out=out)
            self.cur[i], self.nxt[i] = b, a


def main(argv: list[str]) -> int:
    args = dict(a.partition("=")[::2] for a in argv)
    mode, n = args["mode"], int(args["n"])
    narrays, steps, sweeps = int(args.get("arrays", 4)), int(args.get("steps", 6)), int(args.get("sweeps", 1))
    where = Path(args["dir"])
    names = [f"a{i}" for i in range(narrays)]
    stencil = Stencil(initial(n, narrays))
    if mode != "compute":
        import importlib
        import pkgutil

        import sdm

        skip = ("sdm._cli", "sdm.xarray", "sdm.exporting", "sdm.plot", "sdm.fem", "sdm.bench", "sdm.examples",
                "sdm.__main__", "sdm.catalog.migrations", "sdm.codecs")
        for mod in pkgutil.walk_packages(sdm.__path__, "sdm."):  # every module a session uses, before the clock
            if not mod.name.startswith(skip):
                importlib.import_module(mod.name)
        # the compiled checksum loop loaded and run once for float32 words, as SDM does after its first
        # COMPILED_AFTER bytes: a steady-state step, not the first dumps of a process, is measured
        import sdm.integrity as integrity

        small = np.zeros((4, 4, 4), np.float32)
        integrity.kernel_for(small.nbytes, "numba")
        integrity.partial_mix64(small, [np.arange(4)] * 3, (4, 4, 4), "C", increasing=True)
        url = f"sqlite:///{where / 'catalog.db'}"
        if RANK == 0:
            sdm.Catalog(url).close()
    COMM.Barrier()
    t0, cpu0 = time.perf_counter(), time.process_time()
    tc = td = tclose = 0.0
    handles = []
    session = None
    if mode != "compute":
        session = sdm.open("ASTRO3D", "w", comm=COMM, root=str(where), catalog=url)
        g = session.make_group("analysis", names, dtype="f4", shape=(n, n, n), level=3, view=sdm.Block(grid=grid()))
    for step in range(steps):
        c0 = time.perf_counter()
        for _ in range(sweeps):
            stencil.sweep()
        c1 = time.perf_counter()
        tc += c1 - c0
        if session is not None:
            h = g.write_step(step, dict(zip(names, stencil.cur)), wait=mode == "sync")
            td += time.perf_counter() - c1
            if h is not None:
                handles.append(h)
    if session is not None:
        bg = session._ops.background  # None after close
        c0 = time.perf_counter()
        session.close()
        tclose = time.perf_counter() - c0
    COMM.Barrier()
    seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    total = COMM.reduce(float(sum(float(a.sum(dtype=np.float64)) for a in stencil.cur)), op=MPI.SUM)
    most = COMM.reduce([tc, td, tclose, cpu], op=lambda a, b, _=None: [max(x, y) for x, y in zip(a, b)])
    sums = [sum(h.seconds for h in handles), sum(h.blocked for h in handles), sum(h.waited for h in handles),
            sum(h.cpu for h in handles)]
    hmost = COMM.reduce(sums, op=lambda a, b, _=None: [max(x, y) for x, y in zip(a, b)])
    if RANK == 0:
        out = {"seconds": seconds, "compute": most[0], "dump": most[1], "close": most[2], "cpu": most[3],
               "bytes": n ** 3 * 4 * narrays * steps if session is not None else 0, "checksum": total,
               "thread_level": MPI.Query_thread()}
        if mode == "async":
            states = sorted({h.state for h in handles})
            out.update({"handles": len(handles), "states": ",".join(states),
                        "handle_seconds": sums[0], "handle_blocked": sums[1], "handle_waited": sums[2],
                        "handle_seconds_max": hmost[0], "handle_blocked_max": hmost[1],
                        "handle_waited_max": hmost[2], "handle_cpu": sums[3], "handle_cpu_max": hmost[3],
                        "handle_seconds_each": [h.seconds for h in handles],
                        "handle_blocked_each": [h.blocked for h in handles],
                        "peak": bg.peak if bg is not None else None})
        print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
