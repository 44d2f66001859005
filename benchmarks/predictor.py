"""Predictor benchmark: the I/O performance predictor against measured SDM runs.

Run under MPI (see benchmarks/README.md)::

    mpiexec -n 4 python benchmarks/predictor.py

A calibration of the scratch directory is measured first.  Then, for a few workloads
(array sizes, distributions, datasets, dump periods, iterations), every organization
level and the methods ``auto`` and ``collective``, the predictor's totals
(:func:`sdm.planner.predict.predict`, what ``sdm predict`` prints) are compared with
the time of the same run through SDM: every write (open, I/O, sync, catalog commit) and
every read, timed between barriers, data generation excluded.  The NCIO and LBMPI
results in the results directory, when present, are summarized too, so one table
reports the predictor's accuracy at every measured point.

Writes ``benchmarks/results/predictor.{json,md,png}`` (``--out`` to change).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path
from statistics import median
from typing import Any, Sequence

import numpy as np
from mpi4py import MPI

import sdm
from _io_bench import RESULTS, calibrated, fresh, meta, provenance_text, say, scratch, store_model, write_results
from sdm.examples._template import Stopwatch, pattern
from sdm.bench.measure import steady_memory
from sdm.layout.patterns import distribution_of
from sdm.planner.predict import Workload, held_files, opened_files, predict

WORKLOADS = (
    Workload(shape=(96, 96, 96), dtype="f8", distribution="(Block, Block, Block)", datasets=2, every=2,
             iterations=6, reads=1),
    Workload(shape=(512, 512), dtype="f4", distribution="cyclic", datasets=3, every=1, iterations=4, reads=1),
    Workload(shape=(64, 64, 32), dtype="f8", distribution="(Block, Block, *)", ghosts=1, datasets=4, every=5,
             iterations=10, reads=1),
)
METHODS = ("auto", "collective")


def run_workload(comm: MPI.Comm, w: Workload, level: int, method: str, root: Path, model: Any) -> dict[str, float]:
    """Write (then read back) the workload through SDM; seconds of the writes and of the reads.

    The calibration is stored for *root* first, so that ``auto`` decides as predicted.
    """
    size = comm.Get_size()
    names = [f"d{i}" for i in range(w.datasets)]
    tw, tr = Stopwatch(comm), Stopwatch(comm)
    url = f"sqlite:///{root}/catalog.db"
    if comm.Get_rank() == 0:
        store_model(url, root, model)
    comm.Barrier()
    view = distribution_of(w.distribution, w.shape, size, w.ghosts)
    with sdm.open("predictor", root=root, catalog=url, method=method, sync=w.sync, comm=comm) as s:
        g = s.make_group("g", names, dtype=w.dtype, shape=w.shape, order=w.order, level=level, view=view)
        piece = g.piece(names[0])
        local = np.zeros(piece.memory_shape, dtype=w.dtype, order=w.order)
        dumps = list(range(w.every, w.iterations + 1, w.every))
        for step in dumps:
            for name in names:
                local[piece.interior] = pattern(name, step, piece.indices, w.shape, w.dtype)
                with tw():
                    g.write(name, step, local)
        out = np.zeros_like(local)
        for step in dumps:
            for name in names:
                for _ in range(int(w.reads)):
                    with tr():
                        g.read(name, step, out=out)
        run_id = s.run_id
    used = ""
    if comm.Get_rank() == 0:
        cat = sdm.Catalog(url, create=False)
        used = ",".join(sorted({wr.method for _, _, wr in cat.writes(run_id)}))
        cat.close()
    return {"write": tw.total(), "read": tr.total(), "used": comm.bcast(used, root=0)}


def measure(comm: MPI.Comm, base: Path, model: Any, repeats: int, say: Any) -> list[dict[str, Any]]:
    """Every (workload, level, method) *repeats* times, in rounds over all of them.

    Rounds, not one configuration's repeats in a row: a disturbance of a few seconds (one
    run here saw a configuration's writes and reads 2.5-3x slow in two repeats of three,
    against 0.044-0.049 s when re-run) then spoils one repeat of several configurations,
    which their medians discard.
    """
    workloads = [Workload(**{**w0.__dict__, "ranks": comm.Get_size()}) for w0 in WORKLOADS]
    configs = [(wi, level, method) for wi in range(len(workloads)) for level in (1, 2, 3) for method in METHODS]
    times: dict[tuple, list[dict[str, Any]]] = {c: [] for c in configs}
    for rep in range(repeats):
        for wi, level, method in configs:
            root = fresh(comm, base, f"w{wi}-l{level}-{method}-{rep}")
            times[(wi, level, method)].append(run_workload(comm, workloads[wi], level, method, root, model))
            comm.Barrier()
            if comm.Get_rank() == 0:
                shutil.rmtree(root, ignore_errors=True)
        say(f"round {rep + 1}/{repeats} of {len(configs)} runs")
    rows = []
    for wi, w in enumerate(workloads):
        pred = predict(w, model, hints={"frequency": w.reads})
        by = {r["method"]: r for r in pred["rows"]}
        for level in (1, 2, 3):
            for method in METHODS:
                runs = times[(wi, level, method)]
                p = by[method]
                opens = opened_files(level, w) * model.constants["open"]
                pw = (w.writes * p["per_write"] + opens + held_files(level, w) * p["per_held_file"])
                pr = w.writes * w.reads * p["per_read"] + opens
                mw, mr = median(t["write"] for t in runs), median(t["read"] for t in runs)
                rows.append({"workload": wi, "shape": list(w.shape), "distribution": w.distribution,
                             "level": level, "method": method, "write_method": p["write_method"],
                             "read_method": p["read_method"], "used": ",".join(sorted({t["used"] for t in runs})),
                             "writes": w.writes, "bytes": w.nbytes,
                             "predicted_write": pw, "measured_write": mw, "predicted_read": pr, "measured_read": mr})
                say(f"workload {wi} level {level} {method:10s} write {mw:.3f} s (pred {pw:.3f}) "
                    f"read {mr:.3f} s (pred {pr:.3f})")
    return rows


def other_points(out: Path) -> list[dict[str, Any]]:
    """Predicted and measured seconds of every NCIO and LBMPI point already in *out*."""
    points = []
    ncio = out / "ncio.json"
    if ncio.exists():
        for config in json.loads(ncio.read_text())["configs"]:
            if not config["calibrated"]:  # the predictor's figures are those of a calibrated model
                continue
            for r in config["summary"]:
                for method, measured in r["median"].items():
                    if method != "auto" and method in r["predicted"]:
                        points.append({"source": f"ncio ({config['name']})",
                                       "point": f"{r['label']} {r['direction']} {method}",
                                       "predicted": r["predicted"][method], "measured": measured})
    lb = out / "lbmpi.json"
    if lb.exists():
        for r in json.loads(lb.read_text())["rows"]:
            points.append({"source": "lbmpi", "point": f"{r['variant']} {r['method']}",
                           "predicted": r["predicted"], "measured": r["seconds"]})
    return points


def markdown(rows: list[dict], points: list[dict], meta: dict) -> str:
    head = (f"# Predictor benchmark\n\n{meta['nprocs']} ranks on {meta['cores']} cores, {meta['date']}; "
            f"median of {meta['repeats']} repeats in rounds; load average {meta['load_before']:.1f} before, "
            f"{meta['load_after']:.1f} after; "
            f"model: {meta['model']}. {provenance_text(meta)}\n\n"
            "Whole SDM runs (every write: open, I/O, sync, catalog commit; then every step read back once) "
            "against `sdm predict` for the same workload.\n\n")
    cols = ["workload", "level", "method (write/read)", "writes", "pred write s", "meas write s", "ratio",
            "pred read s", "meas read s", "ratio"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join(["---"] * 3 + ["---:"] * (len(cols) - 3)) + "|"]
    for r in rows:
        wl = f"{'x'.join(map(str, r['shape']))} {r['distribution']}"
        lines.append("| " + " | ".join([
            wl, str(r["level"]), f"{r['method']} ({r['write_method']}/{r['read_method']}; ran {r['used']})",
            str(r["writes"]),
            f"{r['predicted_write']:.3f}", f"{r['measured_write']:.3f}",
            f"{r['predicted_write'] / r['measured_write']:.2f}", f"{r['predicted_read']:.3f}",
            f"{r['measured_read']:.3f}", f"{r['predicted_read'] / r['measured_read']:.2f}",
        ]) + " |")
    ratios = [r["predicted_write"] / r["measured_write"] for r in rows] + \
             [r["predicted_read"] / r["measured_read"] for r in rows]
    summary = ["\n\n## Accuracy at every point (goal: within 25 %)\n", "| source | points | within 25 % | "
               "median \\|error\\| | worst ratio pred/meas |", "|---|---:|---:|---:|---:|"]
    groups = {"workloads (this run)": ratios}
    for p in points:
        groups.setdefault(p["source"], []).append(p["predicted"] / p["measured"])
    for name, rs in groups.items():
        errs = [abs(x - 1) for x in rs]
        worst = max(rs, key=lambda x: abs(x - 1))
        summary.append(f"| {name} | {len(rs)} | {sum(e <= 0.25 for e in errs)} | {100 * median(errs):.0f} % | "
                       f"{worst:.2f} |")
    return head + "\n".join(lines) + "\n".join(summary) + "\n"


def plot(rows: list[dict], points: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 6))
    series = {"workloads": ([r["measured_write"] for r in rows] + [r["measured_read"] for r in rows],
                            [r["predicted_write"] for r in rows] + [r["predicted_read"] for r in rows])}
    for p in points:
        m, q = series.setdefault(p["source"], ([], []))
        m.append(p["measured"])
        q.append(p["predicted"])
    for name, (m, q) in series.items():
        ax.scatter(m, q, s=12, label=name, alpha=0.7)
    lo = min(min(m + q) for m, q in series.values())
    hi = max(max(m + q) for m, q in series.values())
    xs = np.array([lo, hi])
    ax.plot(xs, xs, "k-", lw=1)
    ax.fill_between(xs, xs * 0.75, xs * 1.25, color="grey", alpha=0.2, label="within 25 %")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("measured seconds")
    ax.set_ylabel("predicted seconds")
    ax.legend(fontsize=8)
    ax.set_title("cost model: predicted vs measured")
    fig.tight_layout()
    from _plots import save_png
    save_png(fig, path, dpi=64)  # small: results keep PNGs well under 150 KB
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3, help="repeats per configuration (default 3)")
    p.add_argument("--root", default=None, help="scratch directory (default: a new temporary directory)")
    p.add_argument("--out", default=str(RESULTS), help="results directory")
    p.add_argument("--quick", action="store_true", help="a quick calibration (a smoke test)")
    a = p.parse_args(argv)
    comm = MPI.COMM_WORLD
    load_before = os.getloadavg()[0]
    with scratch(comm, a.root, "sdm-predictor-") as base, steady_memory(comm):
        model = calibrated(comm, fresh(comm, base, "calibration"), a.quick)
        say(comm)(f"model: {model.label}")
        rows = measure(comm, base, model, a.repeats, say(comm))
        info = meta(comm, base, load_before, repeats=a.repeats, model=model.label)
    if comm.Get_rank() != 0:
        return 0
    out = Path(a.out)
    points = other_points(out)
    # the other points stay in ncio.json and lbmpi.json (not copied here)
    write_results(out, "predictor", {"meta": info, "model": model.to_json(), "rows": rows,
                                     "other_points_from": sorted({p["source"] for p in points})},
                  markdown(rows, points, info), lambda path: plot(rows, points, path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
