"""``auto`` against the best fixed method on short runs (1, 2 and 3 dumps per run).

A run of a few dumps is where a planner that measures pays most: every access it
spends trying a method is a large share of the run.  Each run here writes one
workload for D dumps (D = 1, 2, 3) in a fresh catalog and data root, once with
``method="auto"`` and once with each fixed method; rounds interleave the contenders
(their order rotates each round).  The ratio of a run length is ``auto`` over the
fixed method with the lowest median time, taken within each round (median, min-max);
the geometric mean over the workloads is the figure the goal is about (at most 1.15).

Workloads (the SDM-only part of ``benchmarks/peers.py``'s patterns, small sizes, and the
ASTRO3D template's groups):

* ``a``: 4 arrays of 32^3 f8, (Block, Block, Block) -- 4 datasets of one shape per dump;
* ``b``: 128 x 4096 f8, block-cyclic 16 x 1024 -- one dataset per dump;
* ``d``: 64 datasets of 512 f8, Block -- many small datasets per dump;
* ``astro3d``: the three ASTRO3D groups on a 32^3 grid (6 + 6 arrays f4, 7 arrays u1),
  each group one dump.

``auto-learned`` is ``auto`` in a catalog where one earlier run (untimed) wrote the same
workload: it starts with what that run's trials learned (``planner_choices``).

Configurations: no calibration, and calibrated (``sdm.bench.calibrate`` quick, stored
in each fresh catalog, as ``sdm calibrate`` would; a degenerate fit is refused, as
``sdm calibrate`` refuses it, and then the calibrated runs use the defaults).  The time
of a run is from the session's open (catalog made) to its close, the slowest rank's.

Run::

    python benchmarks/auto_short.py                  # 2 and 4 ranks, 3 rounds
    python benchmarks/auto_short.py --ranks 2 --rounds 1

Writes ``benchmarks/results/auto_short.json``, ``auto_short.md`` and ``auto_short.png``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _io_bench import rounded  # noqa: E402

FIXED = ("posix", "list", "datatype", "sieving", "collective", "servers")
CONTENDERS = ("auto", "auto-learned", *FIXED)
WORKLOADS = ("a", "b", "d", "astro3d")
DUMPS = (1, 2, 3)
CONFIGS = ("uncalibrated", "calibrated")
GOAL = 1.15


# --------------------------------------------------------------------------- worker (under mpiexec)
def _groups(workload: str, size: int) -> list[tuple[str, list[str], str, tuple[int, ...], Any]]:
    """(group, datasets, dtype, shape, view) of one dump of *workload*."""
    import sdm
    from mpi4py import MPI

    dims3, dims2 = tuple(MPI.Compute_dims(size, [0] * 3)), tuple(MPI.Compute_dims(size, [0] * 2))
    if workload == "a":
        return [("a", [f"a{k}" for k in range(4)], "<f8", (32, 32, 32), sdm.Block(grid=dims3))]
    if workload == "b":
        return [("b", ["b0"], "<f8", (128, 4096), sdm.BlockCyclic(grid=dims2, blocks=(16, 1024)))]
    if workload == "d":
        return [("d", [f"d{k:03d}" for k in range(64)], "<f8", (512,), sdm.Block(grid=(size,)))]
    from sdm.examples.astro3d import astro3d_groups

    return [(g.name, list(g.datasets), g.dtype, g.shape, sdm.Block(grid=dims3)) for g in astro3d_groups(32)]


def _one_run(comm: Any, root: Path, workload: str, dumps: int, method: str, calibration: dict | None) -> dict:
    """Write *dumps* dumps of *workload* with *method* in a fresh catalog under *root* (collective)."""
    import sdm

    url = f"sqlite:///{root}/catalog.db"
    if comm.Get_rank() == 0:
        root.mkdir(parents=True)
        if calibration is not None:
            cat = sdm.Catalog(url)
            cat.save_calibration(str(root.resolve()), comm.Get_size(), calibration)
            cat.close()
    comm.Barrier()
    specs = _groups(workload, comm.Get_size())
    if method == "auto-learned":  # an earlier run of the workload teaches the catalog
        _session(comm, root, url, specs, dumps, "auto")
    seconds, run_id = _session(comm, root, url, specs, dumps, method.split("-")[0])
    used: dict[str, int] = {}
    if comm.Get_rank() == 0 and method.startswith("auto"):
        cat = sdm.Catalog(url, create=False)
        for _, _, w in cat.writes(run_id):
            used[w.method] = used.get(w.method, 0) + 1
        cat.close()
    return {"seconds": seconds, "methods": used}


def _session(comm: Any, root: Path, url: str, specs: list, dumps: int, method: str) -> tuple[float, int]:
    """One run: open, the dumps, close; the slowest rank's seconds and the run id."""
    import sdm
    from mpi4py import MPI

    comm.Barrier()
    t0 = time.perf_counter()
    with sdm.open("auto-short", "w", comm=comm, root=str(root.resolve()), catalog=url, method=method) as s:
        groups = [(s.make_group(name, names, dtype=dt, shape=shape, level=3, view=view), names)
                  for name, names, dt, shape, view in specs]
        data = [{n: np.full(g.local_shape(n), k + 1, dtype=g.dataset(n).dtype) for k, n in enumerate(names)}
                for g, names in groups]
        for step in range(dumps):
            for (g, _), arrays in zip(groups, data):
                g.write_step(step, arrays)
        run_id = s.run_id
    return comm.allreduce(time.perf_counter() - t0, op=MPI.MAX), run_id


def worker(rounds: int, out: Path) -> None:
    """Every configuration, workload, run length and contender, *rounds* times (collective)."""
    from mpi4py import MPI

    from sdm.bench.calibrate import calibrate, fit_problems

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    base = Path(comm.bcast(tempfile.mkdtemp(prefix="sdm-auto-short-", dir="/dev/shm" if os.path.isdir("/dev/shm")
                                            else None) if rank == 0 else None, root=0))
    try:
        t0 = time.perf_counter()
        model, samples, _ = calibrate(comm, base / "calibration", quick=True, repeats=3)
        problems = fit_problems(samples, dict(model.constants))
        calibration = None if problems else model.to_json()
        cal_info = {"seconds": time.perf_counter() - t0, "refused": problems,
                    "constants": {k: model.constants[k] for k in ("call", "byte_w", "byte_r", "sync", "base")}}
        samples_out: list[dict] = []
        k = 0
        for rnd in range(rounds):
            for config in CONFIGS:
                for workload in WORKLOADS:
                    for dumps in DUMPS:
                        order = CONTENDERS[rnd % len(CONTENDERS):] + CONTENDERS[:rnd % len(CONTENDERS)]
                        for method in order:
                            k += 1
                            got = _one_run(comm, base / f"r{k}", workload, dumps, method,
                                           calibration if config == "calibrated" else None)
                            if rank == 0:
                                shutil.rmtree(base / f"r{k}", ignore_errors=True)
                                samples_out.append({"round": rnd, "config": config, "workload": workload,
                                                    "dumps": dumps, "method": method, **got})
            if rank == 0:
                print(f"{comm.Get_size()} ranks: round {rnd + 1}/{rounds} done", flush=True)
        if rank == 0:
            out.write_text(json.dumps({"nprocs": comm.Get_size(), "calibration": cal_info, "samples": samples_out}))
    finally:
        comm.Barrier()
        if rank == 0:
            shutil.rmtree(base, ignore_errors=True)


# --------------------------------------------------------------------------- driver
def summarise(samples: list[dict]) -> dict[str, Any]:
    """Per (config, workload, dumps): the best fixed method and auto's ratio to it; per (config, dumps): the geomean."""
    cells: dict[tuple, dict] = {}
    for s in samples:
        cells.setdefault((s["config"], s["workload"], s["dumps"]), {}).setdefault(s["method"], {})[s["round"]] = s
    rows = []
    for (config, workload, dumps), by in sorted(cells.items()):
        best = min(FIXED, key=lambda m: median(x["seconds"] for x in by[m].values()))
        row: dict[str, Any] = {"config": config, "workload": workload, "dumps": dumps, "best": best,
                               "best_seconds": median(x["seconds"] for x in by[best].values())}
        for auto in ("auto", "auto-learned"):
            ratios = [by[auto][r]["seconds"] / by[best][r]["seconds"] for r in by[auto]]
            used: dict[str, int] = {}
            for x in by[auto].values():
                for m, n in x["methods"].items():
                    used[m] = used.get(m, 0) + n
            row[auto] = {"seconds": median(x["seconds"] for x in by[auto].values()), "ratio": median(ratios),
                         "ratio_min": min(ratios), "ratio_max": max(ratios), "used": used}
        rows.append(row)
    geo = {}
    for config in CONFIGS:
        for dumps in DUMPS:
            for auto in ("auto", "auto-learned"):
                r = [row[auto]["ratio"] for row in rows if row["config"] == config and row["dumps"] == dumps]
                if r:
                    geo[f"{config}/{dumps}/{auto}"] = math.exp(sum(math.log(x) for x in r) / len(r))
    return {"rows": rows, "geomean": geo}


COLUMNS = ("round", "config", "workload", "dumps", "method", "seconds", "methods")


def compact(result: dict[str, Any]) -> dict[str, Any]:
    """*result* with its samples as rows of :data:`COLUMNS` (seconds to 4 digits; auto's methods only)."""
    rows = [[x["round"], x["config"], x["workload"], x["dumps"], x["method"], float(f"{x['seconds']:.4g}"),
             x["methods"] or None] for x in result["samples"]]
    return rounded({**result, "samples": {"columns": COLUMNS, "rows": rows}})



def markdown(results: list[dict], meta: dict[str, Any]) -> str:
    lines = ["# `auto` against the best fixed method on short runs", "",
             f"SDM {meta['sdm_version']} ({meta['git_commit']}), {meta['date']}, host {meta['host']} with "
             f"{meta['cores']} cores shared with other work (timings are noisy: ratios are taken within a round), "
             f"data on {meta['fs']}, {meta['rounds']} rounds. Time of a run: open (fresh catalog) to close, slowest "
             f"rank. Ratio: auto's time over the best fixed method's (lowest median), per round; median (min-max). "
             f"Goal: geomean at most {GOAL} on every run length.", ""]
    for res in results:
        n, cal, summ = res["nprocs"], res["calibration"], res["summary"]
        lines += [f"## {n} ranks", ""]
        lines.append("Calibration (quick): " + ("refused: " + "; ".join(cal["refused"]) + " (the calibrated runs use "
                     "the defaults)" if cal["refused"] else "accepted, " + ", ".join(
                         f"{k} {v:.3g}" for k, v in cal["constants"].items())))
        lines += ["", "| config | dumps | geomean auto/best (fresh catalog) | goal | auto-learned/best |",
                  "|---|---|---|---|---|"]
        for config in CONFIGS:
            for dumps in DUMPS:
                g, gl = (summ["geomean"][f"{config}/{dumps}/{x}"] for x in ("auto", "auto-learned"))
                lines.append(f"| {config} | {dumps} | {g:.2f} | {'met' if g <= GOAL else 'missed'} | {gl:.2f} |")
        lines += ["", "| config | workload | dumps | best fixed | best s | auto/best | auto wrote with | "
                  "auto-learned/best | auto-learned wrote with |", "|---|---|---|---|---|---|---|---|---|"]
        for r in summ["rows"]:
            cells = []
            for auto in ("auto", "auto-learned"):
                x = r[auto]
                used = ", ".join(f"{m} {c}" for m, c in sorted(x["used"].items(), key=lambda kv: -kv[1]))
                cells.append(f"{x['ratio']:.2f} ({x['ratio_min']:.2f}-{x['ratio_max']:.2f}) | {used}")
            lines.append(f"| {r['config']} | {r['workload']} | {r['dumps']} | {r['best']} | {r['best_seconds']:.3f} | "
                         f"{cells[0]} | {cells[1]} |")
        lines.append("")
    return "\n".join(lines)


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from _plots import save_png

    fig, ax = plt.subplots(figsize=(6, 3.2))
    for res in results:
        for config, style in zip(CONFIGS, ("o-", "s--")):
            ys = [res["summary"]["geomean"].get(f"{config}/{d}/auto", float("nan")) for d in DUMPS]
            ax.plot(DUMPS, ys, style, label=f"{res['nprocs']} ranks, {config}")
    ax.axhline(GOAL, color="grey", lw=0.8, ls=":", label=f"goal {GOAL}")
    ax.axhline(1.0, color="black", lw=0.5)
    ax.set_xticks(DUMPS)
    ax.set_xlabel("dumps per run")
    ax.set_ylabel("geomean auto / best fixed")
    ax.legend(fontsize=7)
    fig.tight_layout()
    save_png(fig, path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, default=HERE / "results")
    a = ap.parse_args()
    if a.worker is not None:
        worker(a.rounds, a.worker)
        return
    from _io_bench import provenance
    from _mpijob import mpiexec, worker_env
    from platform import node

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in a.ranks:
            out = Path(tmp) / f"{n}.json"
            subprocess.run([mpiexec(), "-n", str(n), sys.executable, __file__, "--worker", str(out), "--rounds",
                            str(a.rounds)], env=worker_env(), check=True, timeout=3600)
            res = json.loads(out.read_text())
            res["summary"] = summarise(res["samples"])
            results.append(res)
    meta = {**provenance(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "host": node(),
            "cores": os.cpu_count(), "fs": "/dev/shm (tmpfs)" if os.path.isdir("/dev/shm") else "the temp dir",
            "rounds": a.rounds, "load": os.getloadavg()}
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "auto_short.json").write_text(json.dumps({"meta": meta, "results": [compact(r) for r in results]},
                                                      separators=(",", ":")))
    text = markdown(results, meta)
    (a.out / "auto_short.md").write_text(text)
    plot(results, a.out / "auto_short.png")
    print(text)


if __name__ == "__main__":
    main()
