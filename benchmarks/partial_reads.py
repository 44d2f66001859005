"""Partial reads through SDM's lazy arrays against ``numpy.memmap`` at the catalog's offsets.

Run from the repository with plain Python (one process, no mpiexec)::

    PYTHONPATH=src python benchmarks/partial_reads.py          # 7 rounds, /dev/shm and disk
    PYTHONPATH=src python benchmarks/partial_reads.py --quick --out /tmp/r

Two cases, on ``/dev/shm`` and on a directory on disk (``--disk``; warm: the files were
just written and sit in the page cache):

``slab``
    A 4 MiB slab (64 whole rows) of a 64 MiB step (1024 x 8192 float64):
    ``g["T"][0, r:r + 64, :]`` against ``numpy.array(mm[r:r + 64])`` with ``mm`` a
    memmap of the step at the offset the catalog records.  Goal: SDM / memmap <= 1.5.
``series``
    One point over 100 steps of a 256 x 256 float64 dataset: ``g["S"][:, i, j]`` against
    ``numpy.array([m[i, j] for m in maps])`` with one memmap per step.  Goal: <= 2.

Both contenders are made once (the lazy array looks up its rows at the first index, the
memmaps are opened before the rounds: the catalog lookup and the opens are not timed);
each round reads a new slab or point (so no result is reused), the contenders in
rotating order; ``--repeat`` rounds of ``--inner`` reads each, the median per read with
min-max over the rounds.  Every read is compared with the memmap's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
from mpi4py import MPI

import sdm

from _io_bench import RESULTS, meta, per_place, write_results

GOALS = {"slab": 1.5, "series": 2.0}
SLAB_SHAPE, SLAB_ROWS = (1024, 8192), 64
SERIES_SHAPE, SERIES_STEPS = (256, 256), 100


def write_run(root: Path, quick: bool) -> tuple[str, int]:
    url = f"sqlite:///{root}/catalog.db"
    slab_shape = (128, 1024) if quick else SLAB_SHAPE
    steps = 10 if quick else SERIES_STEPS
    rng = np.random.default_rng(1)
    with sdm.open("partial", root=str(root), catalog=url) as s:
        g = s.make_group("g", [sdm.Dataset("T", shape=slab_shape), sdm.Dataset("S", shape=SERIES_SHAPE)],
                         dtype="<f8", level=3)
        g.write("T", 0, rng.standard_normal(slab_shape))
        for step in range(steps):
            g.write("S", step, rng.standard_normal(SERIES_SHAPE))
        return url, s.run_id


def memmaps(url: str, run: int, root: Path, name: str) -> list[np.memmap]:
    """One memmap per step of *name*, at the file and offset the catalog records."""
    from sdm.catalog import Catalog

    cat = Catalog(url, create=False)
    try:
        rec = cat.run(run)
        (d,) = [d for g in rec.groups for d in g.datasets if d.name == name]
        rows = cat.dataset_writes(d.id)
    finally:
        cat.close()
    return [np.memmap(root / rows[k].path, dtype=d.dtype, mode="r", offset=rows[k].offset, shape=d.shape)
            for k in sorted(rows)]


def timed(fn: Callable[[int], np.ndarray], picks: list[int]) -> tuple[float, list[np.ndarray]]:
    """Seconds per call of *fn* over *picks*, and what it returned."""
    out = []
    t0 = time.perf_counter()
    for p in picks:
        out.append(fn(p))
    return (time.perf_counter() - t0) / len(picks), out


def measure(place: Path, repeat: int, inner: int, quick: bool) -> dict[str, Any]:
    url, run = write_run(place, quick)
    results: dict[str, Any] = {}
    with sdm.open("partial", "r", catalog=url, run=run) as s:
        g = s.group("g")
        T, S = g["T"], g["S"]
        mt, ms = memmaps(url, run, place, "T")[0], memmaps(url, run, place, "S")
        rows = SLAB_ROWS if not quick else 8
        cases = {
            "slab": {"sdm": lambda r: T[0, r:r + rows, :], "memmap": lambda r: np.array(mt[r:r + rows]),
                     "picks": lambda rng: [int(x) for x in rng.integers(0, T.shape[1] - rows, inner)]},
            "series": {"sdm": lambda p: S[:, p // SERIES_SHAPE[1], p % SERIES_SHAPE[1]],
                       "memmap": lambda p: np.array([m[p // SERIES_SHAPE[1], p % SERIES_SHAPE[1]] for m in ms]),
                       "picks": lambda rng: [int(x) for x in rng.integers(0, np.prod(SERIES_SHAPE), inner)]},
        }
        for name, case in cases.items():
            samples: dict[str, list[float]] = {"sdm": [], "memmap": []}
            rng = np.random.default_rng(7)
            timed(case["sdm"], case["picks"](rng))  # warm-up: rows looked up, pages touched
            for r in range(repeat):
                picks = case["picks"](rng)
                got: dict[str, list[np.ndarray]] = {}
                for who in (["sdm", "memmap"] if r % 2 == 0 else ["memmap", "sdm"]):
                    seconds, got[who] = timed(case[who], picks)
                    samples[who].append(seconds)
                if not all(np.array_equal(a, b) for a, b in zip(got["sdm"], got["memmap"])):
                    raise SystemExit(f"{name}: SDM read other values than the memmap")
            ratios = [a / b for a, b in zip(samples["sdm"], samples["memmap"])]
            results[name] = {"samples": samples, "ratio": {"median": statistics.median(ratios), "min": min(ratios),
                                                            "max": max(ratios)}, "goal": GOALS[name]}
    return results


def _us(values: list[float]) -> str:
    return f"{statistics.median(values) * 1e6:.0f} µs ({min(values) * 1e6:.0f}-{max(values) * 1e6:.0f})"


def markdown(data: dict[str, Any]) -> str:
    m = data["meta"]
    lines = ["# Partial reads: SDM's lazy arrays vs numpy.memmap at the catalog's offsets", "",
             f"SDM {m['sdm_version']} ({m['git_commit']}), {m['date']}, {m['cores']} cores, Python {m['python']}, "
             f"load average {m['load_before']:.2f} before, {m['load_after']:.2f} after; one process; "
             f"{data['repeat']} interleaved rounds of {data['inner']} reads, per-read medians (min-max). "
             "slab: 64 rows (4 MiB) of a 1024 x 8192 float64 step; series: one point of 256 x 256 float64 over "
             "100 steps.", "",
             "| place | case | SDM | memmap | SDM / memmap | goal |", "|---|---|---|---|---|---|"]
    for place, res in data["places"].items():
        for case, r in res["cases"].items():
            q = r["ratio"]
            ok = "met" if q["median"] <= r["goal"] else "NOT met"
            lines.append(f"| {place} ({res['fs']}) | {case} | {_us(r['samples']['sdm'])} | "
                         f"{_us(r['samples']['memmap'])} | {q['median']:.2f} ({q['min']:.2f}-{q['max']:.2f}) | "
                         f"<= {r['goal']}: {ok} |")
    return "\n".join(lines + [""])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--inner", type=int, default=20, help="reads per round and contender (20)")
    ap.add_argument("--disk", default=str(Path(__file__).resolve().parents[1]),
                    help="a directory on disk for the scratch run (default: the repository)")
    ap.add_argument("--quick", action="store_true", help="tiny sizes, 1 round (smoke test)")
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args()
    if args.quick:
        args.repeat, args.inner = 1, 3
    load = os.getloadavg()[0]
    places = per_place(args.disk, ".sdm-partial-bench-",
                       lambda where: {"cases": measure(where, args.repeat, args.inner, args.quick)})
    data = {"meta": meta(MPI.COMM_WORLD, Path(args.disk), load), "repeat": args.repeat, "inner": args.inner,
            "quick": args.quick, "places": places}
    write_results(Path(args.out), "partial_reads", data, markdown(data), lambda path: None)


if __name__ == "__main__":
    main()
