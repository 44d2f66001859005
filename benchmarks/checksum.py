"""What the write-time checksum costs: bulk 3-D writes without it and with ``mix64-v2`` (numpy, compiled).

Run under MPI (4 ranks by default in the docs)::

    mpiexec -n 4 env PYTHONPATH=src python benchmarks/checksum.py
    mpiexec -n 4 env PYTHONPATH=src python benchmarks/checksum.py --n 128 --rounds 3 --dirs /dev/shm,/tmp

Each rank holds its 3-D block (``sdm.Block()``) of ``--datasets`` fields of ``--dtype``
(float64) and ``n^3`` (192) and writes them at ``--steps`` steps through SDM
(``write_step``, level ``--level``, sync on unless ``--no-sync``), then reads them back
(``verify=True`` when a checksum was recorded).  Three contenders run one after the
other in every round, their order rotated from round to round:

* ``off``            -- ``sdm.open(..., checksum=False)``
* ``mix64-v2 numpy`` -- the checksum computed by numpy (``SDM_CHECKSUM_KERNEL=numpy``)
* ``mix64-v2 numba`` -- the same checksum by the compiled loop (``SDM_CHECKSUM_KERNEL=numba``)

Write and read times are barrier-aligned wall clock (slowest rank, catalog commits
included); the time every rank spent computing checksum shares is measured by wrapping
``sdm.integrity.piece_share``.  Ratios are taken within each round, then their median and
(min-max); the checksum's cost is ``write / off - 1``.  Before the rounds, rank 0 alone
(the others wait without spinning) measures the kernels on 16 MiB of f4 and f8 (GB/s of
CPU time on one core: the compiled loop, numpy's ``mix64-v2``, ``sum64-v1``, a copy)
and what loading the compiled loop costs a new process (importing numba and loading the
cached machine code).  Output: ``benchmarks/results/checksum.json`` and ``checksum.md``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from statistics import median
from typing import Any

import numpy as np
from mpi4py import MPI

import sdm
from sdm import integrity

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _io_bench import RESULTS, fresh, meta, remove, say, scratch, write_results  # noqa: E402

CONTENDERS = ("off", "mix64-v2 numpy", "mix64-v2 numba")
KERNEL = {"mix64-v2 numpy": "numpy", "mix64-v2 numba": "numba"}
MiB = 1 << 20


class ShareClock:
    """Seconds spent in ``integrity.piece_share`` on this rank while installed."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._real = integrity.piece_share

    def __enter__(self) -> "ShareClock":
        real = self._real

        def timed(*args: Any, **kwargs: Any) -> int:
            t0 = time.perf_counter()
            try:
                return real(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - t0

        integrity.piece_share = timed  # type: ignore[assignment]
        return self

    def __exit__(self, *exc: Any) -> None:
        integrity.piece_share = self._real  # type: ignore[assignment]


def wait_quietly(comm: MPI.Comm) -> None:
    """A barrier that sleeps instead of spinning (so rank 0 has a core to itself)."""
    req = comm.Ibarrier()
    while not req.Test():
        time.sleep(0.005)


KERNELS = ("numba", "numpy", "sum64-v1", "copy")  # the compiled loop, numpy's mix64-v2, the legacy sum, a copy


def kernels(reps: int = 7) -> list[dict[str, Any]]:
    """GB/s (CPU time, one core) of each kernel on 16 MiB: 1-D contiguous and a 3-D block with ghosts."""
    rows = []
    rng = np.random.default_rng(0)
    integrity.kernel_for(0, "numba")  # loaded (and compiled or read from its cache) before timing
    for dtype in ("f4", "f8"):
        n = 16 * MiB // np.dtype(dtype).itemsize
        flat = rng.random(n).astype(dtype)
        inner = flat.reshape(64, 256, -1)
        ghosted = np.zeros(tuple(s + 2 for s in inner.shape), dtype=dtype)
        ghosted[1:-1, 1:-1, 1:-1] = inner
        cases = {
            "1-D contiguous": (flat, (range(n),), (n,)),
            "3-D block, ghosts": (ghosted[1:-1, 1:-1, 1:-1], tuple(np.arange(s) for s in inner.shape), inner.shape),
        }
        for case, (values, idx, shape) in cases.items():
            row: dict[str, Any] = {"dtype": dtype, "case": case, "mbytes": 16 * MiB / 1e6}
            out = np.empty(values.shape, values.dtype)
            calls = {
                "numba": lambda: integrity.partial_mix64(values, idx, shape, "C", increasing=True, kernel="numba"),
                "numpy": lambda: integrity.partial_mix64(values, idx, shape, "C", increasing=True, kernel="numpy"),
                "sum64-v1": lambda: integrity.partial_sum64(values, [np.arange(len(i)) for i in idx], shape, "C"),
                "copy": lambda: np.copyto(out, values),
            }
            if calls["numba"]() != calls["numpy"]():
                raise RuntimeError(f"the compiled loop and numpy disagree on {dtype} {case}")
            samples: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in KERNELS}
            for _ in range(reps):  # kernels interleaved: the machine's load hits them alike
                for name in KERNELS:
                    t0, c0 = time.perf_counter(), time.process_time()
                    calls[name]()
                    samples[name][0].append(time.perf_counter() - t0)
                    samples[name][1].append(time.process_time() - c0)
            for name, (wall, cpu) in samples.items():
                # CPU time: what one core does, even when other processes share it
                row[name] = {"gbps": 16 * MiB / median(cpu) / 1e9, "gbps_min": 16 * MiB / max(cpu) / 1e9,
                             "gbps_max": 16 * MiB / min(cpu) / 1e9, "wall_gbps": 16 * MiB / median(wall) / 1e9}
            rows.append(row)
    return rows


_LOAD = """
import sys, time
t0, c0 = time.perf_counter(), time.process_time()
import numpy as np
from sdm import integrity
t1, c1 = time.perf_counter(), time.process_time()
if sys.argv[1] == "numba":
    integrity.kernel_for(0, "numba").mix64_share(np.zeros(8), (range(8),), (8,), "C", None, True)
else:
    integrity.partial_mix64(np.zeros(8), (range(8),), (8,), "C", kernel="numpy")
print(time.perf_counter() - t1, time.process_time() - c1)
"""


def load_cost(reps: int = 5) -> dict[str, Any]:
    """Seconds a new process spends on its first share: the compiled loop (import numba, load the
    cached code) against numpy, each in a fresh interpreter, interleaved; median (min-max) of *reps*."""
    got: dict[str, dict[str, list[float]]] = {k: {"wall": [], "cpu": []} for k in ("numba", "numpy")}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(integrity.__file__).parents[1]),
                                                        os.environ.get("PYTHONPATH", "")])}
    for _ in range(reps):
        for k in got:
            res = subprocess.run([sys.executable, "-c", _LOAD, k], env=env, capture_output=True, text=True,
                                 check=True)
            wall, cpu = map(float, res.stdout.split())
            got[k]["wall"].append(wall)
            got[k]["cpu"].append(cpu)
    return got


def one_run(comm: MPI.Comm, d: Path, contender: str, a: argparse.Namespace, local: np.ndarray) -> dict[str, float]:
    """Write and read back every dataset and step once; slowest-rank seconds."""
    checksum = contender != "off"
    os.environ[integrity.KERNEL_ENV] = KERNEL.get(contender, "numpy")
    names = [f"f{i}" for i in range(a.datasets)]
    try:
        with sdm.open("ckbench", root=d, catalog=f"sqlite:///{d}/catalog.db", checksum=checksum, sync=a.sync,
                      comm=comm) as s:
            g = s.make_group("fields", names, dtype=a.dtype, shape=(a.n,) * 3, level=a.level, view=sdm.Block())
            with ShareClock() as clock:
                comm.Barrier()
                t0 = time.perf_counter()
                for step in range(a.steps):
                    g.write_step(step, {name: local for name in names})
                comm.Barrier()
                write_s = time.perf_counter() - t0
                share_w = clock.seconds
                out = np.empty_like(local)
                comm.Barrier()
                t0 = time.perf_counter()
                for step in range(a.steps):
                    for name in names:
                        g.read(name, step, out=out, verify=checksum)
                comm.Barrier()
                read_s = time.perf_counter() - t0
                share_r = clock.seconds - share_w
            if not np.array_equal(out, local):
                raise RuntimeError("read back different values")
    finally:
        os.environ.pop(integrity.KERNEL_ENV, None)
    return {"write_s": comm.allreduce(write_s, MPI.MAX), "read_s": comm.allreduce(read_s, MPI.MAX),
            "checksum_write_s": comm.allreduce(share_w, MPI.MAX), "checksum_read_s": comm.allreduce(share_r, MPI.MAX)}


def spread(values: list[float], fmt: str = "{:.2f}") -> str:
    return f"{fmt.format(median(values))} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def summarize(samples: dict[str, dict[str, list[dict[str, float]]]]) -> list[dict[str, Any]]:
    rows = []
    for directory, by in samples.items():
        for c in CONTENDERS:
            runs = by[c]
            row: dict[str, Any] = {"dir": directory, "contender": c}
            for key in ("write_s", "read_s", "checksum_write_s", "checksum_read_s"):
                row[key] = [r[key] for r in runs]
            row["write_vs_off"] = [r["write_s"] / b["write_s"] for r, b in zip(runs, by["off"])]
            row["read_vs_off"] = [r["read_s"] / b["read_s"] for r, b in zip(runs, by["off"])]
            row["share_of_write"] = [r["checksum_write_s"] / r["write_s"] for r in runs]
            rows.append(row)
    return rows


def markdown(rows: list[dict[str, Any]], kern: list[dict[str, Any]], load: dict[str, Any],
             info: dict[str, Any]) -> str:
    lines = [
        "# Checksum cost in bulk writes",
        "",
        f"{info['nprocs']} ranks on {info['cores']} cores, {info['datasets']} {info['dtype']} fields of {info['n']}^3 "
        f"({info['gbytes']:.2f} GB per run) at {info['steps']} steps, level {info['level']}, sync "
        f"{'on' if info['sync'] else 'off'}, 3-D Block view; {info['rounds']} rounds, contenders interleaved "
        f"(order rotated). SDM {info['sdm_version']} ({info['git_commit']}), {info['mpi']}, {info['date']}, "
        f"1-min load {info['load_before']:.1f} before, {info['load_after']:.1f} after (a machine shared with other "
        "work: the absolute times are noisy, the ratios within a round less so).",
        "",
        "Times: slowest rank, median (min-max) over the rounds; ratios: taken within each round, then median (min-max). "
        "Checksum s: the most any rank spent computing its shares (wrapped `integrity.piece_share`; with 4 ranks on 2 "
        "cores the share competes with the other ranks' I/O for a core).",
        "",
        "| directory (fs) | contender | write s | write / off | checksum s (write) | checksum / write | read s "
        "| read / off |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['dir']} ({info['fs'][r['dir']]}) | {r['contender']} | {spread(r['write_s'])} | "
            f"{spread(r['write_vs_off'])} | {spread(r['checksum_write_s'], '{:.3f}')} | "
            f"{spread(r['share_of_write'])} | {spread(r['read_s'])} | {spread(r['read_vs_off'])} |"
        )
    lines += [
        "",
        "## Checksum kernels, one core",
        "",
        "16 MiB per call, rank 0 alone (the other ranks sleep), the four interleaved; GB/s = 10^9 bytes per second of "
        "this process's CPU time (so other load on the machine slows it less than wall clock; wall-clock figures are "
        "in the JSON), median (min-max) of 7 calls. `numba`: `mix64-v2` by the compiled loop; `numpy`: the same "
        "checksum in numpy; `sum64-v1`: the former, linear checksum; `copy`: `np.copyto` of the same elements.",
        "",
        "| dtype | case | numba GB/s | numpy GB/s | sum64-v1 GB/s | copy GB/s | numba / numpy |",
        "|---|---|---|---|---|---|---|",
    ]
    for k in kern:
        cell = [f"{k[x]['gbps']:.2f} ({k[x]['gbps_min']:.2f}-{k[x]['gbps_max']:.2f})" for x in KERNELS]
        lines.append(f"| {k['dtype']} | {k['case']} | {' | '.join(cell)} | {k['numba']['gbps'] / k['numpy']['gbps']:.1f} |")
    lines += [
        "",
        "## Loading the compiled loop",
        "",
        f"A fresh interpreter's first share (after `import sdm`), {len(load['numba']['cpu'])} of each, interleaved: "
        f"with the compiled loop (importing numba, loading the machine code cached on disk) "
        f"{spread(load['numba']['cpu'], '{:.3f}')} s of CPU ({spread(load['numba']['wall'], '{:.3f}')} s wall), "
        f"with numpy {spread(load['numpy']['cpu'], '{:.3f}')} s of CPU. This is why SDM loads the compiled loop only "
        f"once a process has hashed {integrity.COMPILED_AFTER >> 20} MiB with numpy (`SDM_CHECKSUM_KERNEL=auto`, the "
        "default; `numba` loads it at the first share, `numpy` never).",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=192, help="edge of each cubic field (192)")
    p.add_argument("--dtype", default="f8", help="element type of the fields (f8)")
    p.add_argument("--datasets", type=int, default=4, help="fields per step (4)")
    p.add_argument("--steps", type=int, default=2, help="steps written per run (2)")
    p.add_argument("--level", type=int, default=3, choices=(1, 2, 3), help="organization level (3)")
    p.add_argument("--rounds", type=int, default=5, help="rounds of the three contenders (5)")
    p.add_argument("--dirs", default="/dev/shm", help="comma-separated directories to write under (/dev/shm)")
    p.add_argument("--no-sync", dest="sync", action="store_false", help="skip the sync before each commit")
    p.add_argument("--out", default=str(RESULTS), help="results directory")
    a = p.parse_args(argv)
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    show = say(comm)
    load_before = os.getloadavg()[0]
    t_start = time.perf_counter()

    kern: list[dict[str, Any]] = []
    load: dict[str, Any] = {}
    integrity.kernel_for(0, "numba")  # every rank loads the compiled loop before anything is timed
    wait_quietly(comm)
    if rank == 0:
        load = load_cost()
        show(f"first share in a new process: numba {median(load['numba']['cpu']):.3f} s CPU, "
             f"numpy {median(load['numpy']['cpu']):.3f} s CPU")
        kern = kernels()
        for k in kern:
            show(f"kernel {k['dtype']} {k['case']:18s}: " + ", ".join(f"{x} {k[x]['gbps']:.2f}" for x in KERNELS)
                 + " GB/s")
    wait_quietly(comm)

    shape = (a.n,) * 3
    piece = sdm.Block().piece(shape, comm.Get_size(), rank)
    local = np.random.default_rng(rank).random(piece.memory_shape).astype(a.dtype)
    samples: dict[str, dict[str, list[dict[str, float]]]] = {}
    fs: dict[str, str] = {}
    for directory in [x for x in a.dirs.split(",") if x]:
        samples[directory] = {c: [] for c in CONTENDERS}
        with scratch(comm, None, "sdm-ckbench-", parent=directory) as base:
            fs[directory] = meta(comm, base, load_before)["fs"]
            d = fresh(comm, base, "warmup")  # code paths and page cache, not recorded
            small = argparse.Namespace(**{**vars(a), "n": 32, "steps": 1})
            small_local = np.zeros(sdm.Block().piece((32,) * 3, comm.Get_size(), rank).memory_shape, a.dtype)
            for c in CONTENDERS:
                one_run(comm, fresh(comm, d, c), c, small, small_local)
            remove(comm, d)
            for rnd in range(a.rounds):
                order = CONTENDERS[rnd % 3:] + CONTENDERS[:rnd % 3]
                for c in order:
                    d = fresh(comm, base, f"{c}-r{rnd}")
                    res = one_run(comm, d, c, a, local)
                    remove(comm, d)
                    samples[directory][c].append(res)
                    show(f"{directory} round {rnd + 1}/{a.rounds} {c:14s}: write {res['write_s']:.3f} s "
                         f"(checksum {res['checksum_write_s']:.3f} s)  read {res['read_s']:.3f} s")
    if rank != 0:
        return 0
    rows = summarize(samples)
    info = {**meta(comm, Path(a.dirs.split(",")[0]), load_before), "fs": fs, "n": a.n,
            "datasets": a.datasets, "dtype": a.dtype, "steps": a.steps, "level": a.level, "rounds": a.rounds, "sync": a.sync,
            "gbytes": a.datasets * a.steps * a.n ** 3 * np.dtype(a.dtype).itemsize / 1e9, "seconds": time.perf_counter() - t_start}
    write_results(Path(a.out), "checksum", {"meta": info, "rows": rows, "kernels": kern, "load": load,
                                            "samples": samples}, markdown(rows, kern, load, info), lambda path: None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
