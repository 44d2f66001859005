"""CE-QUAL-ICM benchmark: monthly output through SDM vs per-process files plus sequential post-processing.

Run under MPI (see benchmarks/README.md)::

    mpiexec -n 4 python benchmarks/cequal.py                    # 500 x 500 cells, 12 months, 5 repeats
    mpiexec -n 4 python benchmarks/cequal.py --methods auto,collective,servers,datatype,sieving

The template :mod:`sdm.examples.cequal`: eight float32 arrays over irregularly
distributed cells, 25 % of every local array ghost cells in between the resident ones,
memory order unlike file order; every simulated month all arrays are appended.  End to
end, barrier to barrier on the slowest rank:

==============  ===========================================================================
SDM <method>    read the maps, open a session, one map array with the ghost mask, every
                month eight collective writes (level 3: one file, months appended; sync
                and catalog commit per write as by default), close
original        every month each process appends its whole arrays (ghosts included, memory
                order) to its own file; then one process reads both mapping files and
                merges, month by month and process by process, into one global file
                (fsync at the end when SDM syncs too)
==============  ===========================================================================

Computing the monthly values is inside both.  Before the measurements one run writes
both ways and checks that SDM's data file and the merged file are byte-identical (and
equal to numpy's values).  Writes ``benchmarks/results/cequal.{json,md,png}``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from mpi4py import MPI

from sdm import config
from sdm.examples import cequal

from _irregular_bench import Bench, arguments, med, spread, stacked_bars, table


def measure(comm: MPI.Comm, cfg: str, a: Any, sync: bool, d: Path) -> dict[str, Any]:
    """One end-to-end run in directory *d* (collective)."""
    original = cfg == "original"
    res = cequal.run(comm, a.cells, a.months, 3, d, f"sqlite:///{d}/catalog.db", inputs=d.parent / "inputs",
                     ghost_fraction=a.ghosts, partitioner=a.partitioner, io_method=cfg.split()[-1], sdm_run=not original,
                     original=original, sync=sync)
    ph = res["phases"]
    parts = ("per-process write", "post-process") if original else ("sdm",)
    out = dict(config=cfg, total_s=sum(ph[k]["seconds"] for k in parts), ghost_fraction=res["ghost_fraction"],
               partitioner=res["partitioner"])
    if original:
        out.update(write_s=ph["per-process write"]["seconds"], merge_s=ph["post-process"]["seconds"])
    return out


def summarize(samples: dict[str, list[dict[str, Any]]], nbytes: int) -> list[dict[str, Any]]:
    """Median rows with the speed-up over the original (original time / configuration time)."""
    orig = samples["original"]
    rows = []
    for cfg, runs in samples.items():
        row = dict(config=cfg, total_s=med(runs, "total_s"), total_range=spread(runs, "total_s"),
                   mbps=nbytes / 1e6 / med(runs, "total_s"),
                   speedup=float(np.median([o["total_s"] / r["total_s"] for r, o in zip(runs, orig)])))
        if cfg == "original":
            row.update(write_s=med(runs, "write_s"), merge_s=med(runs, "merge_s"))
        else:
            row.update(sdm_s=row["total_s"])
        rows.append(row)
    return rows


def markdown(rows: list[dict[str, Any]], meta: dict[str, Any], bench: Bench) -> str:
    """Results table and the goal."""
    head = (f"# CE-QUAL-ICM: SDM vs per-process files + sequential post-processing\n\n{meta['cells']} x "
            f"{meta['cells']} cells, {meta['arrays']} float32 arrays, {meta['months']} months ({meta['mbytes']:.0f} MB "
            f"of results), {100 * meta['ghost_fraction']:.1f} % ghost cells, {meta['partitioner']} partition, sync "
            f"{'on' if meta['sync'] else 'off'}, SDM level 3; " + bench.conditions(meta) + "\n\n")
    body = table(["configuration", "end to end s (min-max)", "MB/s", "of which", "speed-up over original"],
                 [[r["config"], f"{r['total_s']:.3f} ({r['total_range'][0]:.3f}-{r['total_range'][1]:.3f})",
                   f"{r['mbps']:.0f}",
                   f"per-process writes {r['write_s']:.3f} s, post-processing {r['merge_s']:.3f} s" if "merge_s" in r else "",
                   f"{r['speedup']:.2f}"] for r in rows])
    best = max((r for r in rows if r["config"] != "original"), key=lambda r: r["speedup"])
    verdict = "met" if best["speedup"] >= 3 else "missed"
    tail = (f"\n\nGoal (SDM at least 3x faster end to end): **{verdict}** (best: {best['config']}, "
            f"{best['speedup']:.2f}x). Speed-up = original time / SDM time within each repeat, then the median. "
            "SDM's data file and the merged global file were checked byte-identical before the measurements.\n")
    return head + body + tail


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark (collective); rank 0 writes the results."""
    p = arguments(__doc__.splitlines()[0])
    p.add_argument("--cells", type=int, default=500, help="cells along each side (default 500)")
    p.add_argument("--months", type=int, default=12, help="simulated months (default 12)")
    p.add_argument("--ghosts", type=float, default=0.25, help="ghost share of each local array (default 0.25)")
    p.add_argument("--partitioner", choices=("auto", "metis", "rcb"), default="auto", help="cell partitioner")
    p.add_argument("--methods", default="auto,servers,datatype",
                   help="comma-separated SDM I/O methods to measure (default auto,servers,datatype)")
    p.add_argument("--no-sync", action="store_true", help="no sync (SDM) and no fsync of the merged file")
    a = p.parse_args(argv)
    comm = MPI.COMM_WORLD
    sync = False if a.no_sync else config.sync_enabled()
    bench = Bench(comm, "cequal", a)
    configs = [f"SDM {m}" for m in a.methods.split(",")] + ["original"]
    d = bench.fresh("verify")  # both ways once, compared byte for byte (also warms code paths and caches)
    res = cequal.run(comm, a.cells, a.months, 3, d, f"sqlite:///{d}/catalog.db", True, inputs=bench.base / "inputs",
                     ghost_fraction=a.ghosts, partitioner=a.partitioner, original=True, sync=sync)
    bench.remove(d)
    if res["mismatches"]:
        bench.say(f"SDM and the original differ: {res['bad_files'][:3]}")
        return 1
    bench.say(f"verified: SDM's file and the merged file are byte-identical ({res['ghost_fraction']:.3f} ghosts)")
    samples = bench.repeat(configs, lambda c, d: measure(comm, c, a, sync, d), lambda r: f"{r['total_s']:.3f} s")
    nbytes = a.months * len(cequal.ARRAYS) * a.cells * a.cells * cequal.DTYPE.itemsize
    rows = summarize(samples, nbytes)
    meta = bench.meta(cells=a.cells, months=a.months, arrays=len(cequal.ARRAYS), mbytes=nbytes / 1e6, sync=sync,
                      ghost_fraction=res["ghost_fraction"], partitioner=res["partitioner"], methods=a.methods)
    title = f"CE-QUAL-ICM {a.cells}^2 cells, {a.months} months, {nbytes / 1e6:.0f} MB, {meta['nprocs']} ranks"
    parts = [("sdm_s", "SDM"), ("write_s", "original: per-process writes"), ("merge_s", "original: post-processing")]
    return bench.finish(meta, {"rows": rows, "samples": samples}, markdown(rows, meta, bench),
                        lambda path: stacked_bars(path, rows, parts, lambda r: f"{r['total_s']:.2f} s",
                                                  "seconds end to end (median)", title))


if __name__ == "__main__":
    sys.exit(main())
