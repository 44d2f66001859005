"""What the write-time checksum costs: bulk 3-D writes without it, with ``sum64-v1`` and ``mix64-v2``.

Run under MPI (4 ranks by default in the docs)::

    mpiexec -n 4 env PYTHONPATH=src python benchmarks/checksum.py
    mpiexec -n 4 env PYTHONPATH=src python benchmarks/checksum.py --n 128 --rounds 3 --dirs /dev/shm

Each rank holds its 3-D block (``sdm.Block()``) of ``--datasets`` float32 fields of
``n^3`` and writes them at ``--steps`` steps through SDM (``write_step``, level ``--level``,
sync on unless ``--no-sync``), then reads them back (``verify=True`` when a checksum was
recorded).  Three contenders run one after the other in every round, their order
rotated from round to round:

* ``off``       -- ``sdm.open(..., checksum=False)``
* ``sum64-v1``  -- the former, linear checksum (``sdm.integrity.ALGORITHM`` set to it for
  the run: a switch of this benchmark only)
* ``mix64-v2``  -- the checksum SDM writes now

Write and read times are barrier-aligned wall clock (slowest rank, catalog commits
included); the time every rank spent computing checksum shares is measured by wrapping
``sdm.integrity.piece_share``.  Ratios are taken within each round, then their median and
(min-max).  Before the rounds, rank 0 alone (the others wait without spinning) measures
the checksum kernels on 16 MiB of f4 and f8: GB/s on one core.  Output:
``benchmarks/results/checksum.json`` and ``checksum.md``.
"""

from __future__ import annotations

import argparse
import os
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

CONTENDERS = ("off", "sum64-v1", "mix64-v2")
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


def kernels(reps: int = 7) -> list[dict[str, Any]]:
    """GB/s of each checksum on 16 MiB, one process: 1-D contiguous and a 3-D block with ghosts."""
    rows = []
    rng = np.random.default_rng(0)
    for dtype in ("f4", "f8"):
        n = 16 * MiB // np.dtype(dtype).itemsize
        flat = rng.random(n).astype(dtype)
        inner = flat.reshape(64, 256, -1)
        ghosted = np.zeros(tuple(s + 2 for s in inner.shape), dtype=dtype)
        ghosted[1:-1, 1:-1, 1:-1] = inner
        cases = {
            "1-D contiguous": (flat, (np.arange(n),), (n,)),
            "3-D block, ghosts": (ghosted[1:-1, 1:-1, 1:-1], tuple(np.arange(s) for s in inner.shape), inner.shape),
        }
        for case, (values, idx, shape) in cases.items():
            row: dict[str, Any] = {"dtype": dtype, "case": case, "mbytes": 16 * MiB / 1e6}
            for algo in integrity.ALGORITHMS:
                wall, cpu = [], []
                for _ in range(reps):
                    t0, c0 = time.perf_counter(), time.process_time()
                    if algo == integrity.MIX64:  # as SDM calls it for a piece (indices known to increase)
                        integrity.partial_mix64(values, idx, shape, "C", increasing=True)
                    else:
                        integrity.partial_sum64(values, idx, shape, "C")
                    wall.append(time.perf_counter() - t0)
                    cpu.append(time.process_time() - c0)
                # CPU time: what one core does, even when other processes share it
                row[algo] = {"gbps": 16 * MiB / median(cpu) / 1e9, "gbps_min": 16 * MiB / max(cpu) / 1e9,
                             "gbps_max": 16 * MiB / min(cpu) / 1e9, "wall_gbps": 16 * MiB / median(wall) / 1e9}
            rows.append(row)
    return rows


def one_run(comm: MPI.Comm, d: Path, contender: str, a: argparse.Namespace, local: np.ndarray) -> dict[str, float]:
    """Write and read back every dataset and step once; slowest-rank seconds."""
    integrity.ALGORITHM = integrity.LEGACY_ALGORITHM if contender == "sum64-v1" else integrity.MIX64
    checksum = contender != "off"
    names = [f"f{i}" for i in range(a.datasets)]
    try:
        with sdm.open("ckbench", root=d, catalog=f"sqlite:///{d}/catalog.db", checksum=checksum, sync=a.sync,
                      comm=comm) as s:
            g = s.make_group("fields", names, dtype="f4", shape=(a.n,) * 3, level=a.level, view=sdm.Block())
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
        integrity.ALGORITHM = integrity.MIX64
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
            for base in ("off", "sum64-v1"):
                row[f"write_vs_{base}"] = [r["write_s"] / b["write_s"] for r, b in zip(runs, by[base])]
                row[f"read_vs_{base}"] = [r["read_s"] / b["read_s"] for r, b in zip(runs, by[base])]
            rows.append(row)
    return rows


def markdown(rows: list[dict[str, Any]], kern: list[dict[str, Any]], info: dict[str, Any]) -> str:
    lines = [
        "# Checksum cost in bulk writes",
        "",
        f"{info['nprocs']} ranks on {info['cores']} cores, {info['datasets']} float32 fields of {info['n']}^3 "
        f"({info['gbytes']:.2f} GB per run) at {info['steps']} steps, level {info['level']}, sync "
        f"{'on' if info['sync'] else 'off'}, 3-D Block view; {info['rounds']} rounds, contenders interleaved "
        f"(order rotated). SDM {info['sdm_version']} ({info['git_commit']}), {info['mpi']}, {info['date']}, "
        f"1-min load {info['load_before']:.1f} before, {info['load_after']:.1f} after.",
        "",
        "Times: slowest rank, median (min-max) over the rounds; ratios: taken within each round, then median (min-max). "
        "Checksum s: the most any rank spent computing its shares (wrapped `integrity.piece_share`).",
        "",
        "| directory (fs) | contender | write s | write / off | write / sum64-v1 | checksum s (write) | read s | read / off |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['dir']} ({info['fs'][r['dir']]}) | {r['contender']} | {spread(r['write_s'])} | "
            f"{spread(r['write_vs_off'])} | {spread(r['write_vs_sum64-v1'])} | {spread(r['checksum_write_s'])} | "
            f"{spread(r['read_s'])} | {spread(r['read_vs_off'])} |"
        )
    lines += [
        "",
        "## Checksum kernels, one core",
        "",
        "16 MiB per call, rank 0 alone (the other ranks sleep); GB/s = 10^9 bytes per second of this process's CPU "
        "time (so other load on the machine slows it less than wall clock; wall-clock figures are in the JSON), "
        "median (min-max) of 7 calls.",
        "",
        "| dtype | case | sum64-v1 GB/s | mix64-v2 GB/s | mix64-v2 / sum64-v1 time |",
        "|---|---|---|---|---|",
    ]
    for k in kern:
        old, new = k["sum64-v1"], k["mix64-v2"]
        lines.append(
            f"| {k['dtype']} | {k['case']} | {old['gbps']:.2f} ({old['gbps_min']:.2f}-{old['gbps_max']:.2f}) | "
            f"{new['gbps']:.2f} ({new['gbps_min']:.2f}-{new['gbps_max']:.2f}) | {old['gbps'] / new['gbps']:.2f} |"
        )
    lines += [
        "",
        "No pass over the data exists to fold the checksum into (MPI-IO packs through derived datatypes inside the "
        "library), so both checksums are a separate pass over each rank's elements. `mix64-v2` costs about eleven "
        "vectorised uint64 operations per word in cache-sized chunks; `sum64-v1` needs only two sums over the data "
        "(it is linear), which is why it was cheaper and why it was blind.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=256, help="edge of each cubic float32 field (256)")
    p.add_argument("--datasets", type=int, default=2, help="fields per step (2)")
    p.add_argument("--steps", type=int, default=2, help="steps written per run (2)")
    p.add_argument("--level", type=int, default=3, choices=(1, 2, 3), help="organization level (3)")
    p.add_argument("--rounds", type=int, default=5, help="rounds of the three contenders (5)")
    p.add_argument("--dirs", default="/dev/shm,/tmp", help="comma-separated directories to write under")
    p.add_argument("--no-sync", dest="sync", action="store_false", help="skip the sync before each commit")
    p.add_argument("--out", default=str(RESULTS), help="results directory")
    a = p.parse_args(argv)
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    show = say(comm)
    load_before = os.getloadavg()[0]
    t_start = time.perf_counter()

    kern: list[dict[str, Any]] = []
    if rank == 0:
        kern = kernels()
        for k in kern:
            show(f"kernel {k['dtype']} {k['case']:18s}: sum64-v1 {k['sum64-v1']['gbps']:.2f} GB/s, "
                 f"mix64-v2 {k['mix64-v2']['gbps']:.2f} GB/s")
    wait_quietly(comm)

    shape = (a.n,) * 3
    piece = sdm.Block().piece(shape, comm.Get_size(), rank)
    local = np.random.default_rng(rank).random(piece.memory_shape, dtype=np.float32)
    samples: dict[str, dict[str, list[dict[str, float]]]] = {}
    fs: dict[str, str] = {}
    for directory in [x for x in a.dirs.split(",") if x]:
        samples[directory] = {c: [] for c in CONTENDERS}
        with scratch(comm, None, "sdm-ckbench-", parent=directory) as base:
            fs[directory] = meta(comm, base, load_before)["fs"]
            d = fresh(comm, base, "warmup")  # code paths and page cache, not recorded
            small = argparse.Namespace(**{**vars(a), "n": 32, "steps": 1})
            small_local = np.zeros(sdm.Block().piece((32,) * 3, comm.Get_size(), rank).memory_shape, np.float32)
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
                    show(f"{directory} round {rnd + 1}/{a.rounds} {c:9s}: write {res['write_s']:.3f} s "
                         f"(checksum {res['checksum_write_s']:.3f} s)  read {res['read_s']:.3f} s")
    if rank != 0:
        return 0
    rows = summarize(samples)
    info = {**meta(comm, Path(a.dirs.split(",")[0]), load_before), "fs": fs, "n": a.n,
            "datasets": a.datasets, "steps": a.steps, "level": a.level, "rounds": a.rounds, "sync": a.sync,
            "gbytes": a.datasets * a.steps * a.n ** 3 * 4 / 1e9, "seconds": time.perf_counter() - t_start}
    write_results(Path(a.out), "checksum", {"meta": info, "rows": rows, "kernels": kern, "samples": samples},
                  markdown(rows, kern, info), lambda path: None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
