"""LBMPI benchmark: the original element-by-element I/O against SDM, one file and four.

Run under MPI (see benchmarks/README.md)::

    mpiexec -n 4 python benchmarks/lbmpi.py --n 64

For each repeat, in an order that rotates from repeat to repeat, every configuration
writes ``--steps`` dumps of the four interleaved fields (:mod:`sdm.examples.lbmpi`):

* the original code: every rank writes every element with its own ``pwrite`` into four
  files (then syncs them);
* SDM, one file (the 4-D array as one dataset) and four files (one dataset per field),
  each with ``collective`` and ``datatype`` (non-collective) I/O -- the paper's Table 1 --
  and with ``auto``.

Every configuration runs in a fresh directory, syncs its data, and is checked against
numpy after the first repeat.  A calibration of the scratch directory is measured first;
each configuration's time is compared with the cost model's prediction.

Writes ``benchmarks/results/lbmpi.{json,md,png}`` (``--out`` to change).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path
from statistics import median
from typing import Any, Sequence

from mpi4py import MPI

from _io_bench import RESULTS, calibrated, fresh, meta, provenance_text, say, scratch, store_model, write_results
from sdm.examples import lbmpi
from sdm.bench.measure import steady_memory

# (variant, method, SDM checksum): the paper's four MPI-IO solutions, auto, and collective without the checksum
CONFIGS = (("original", "-", False), ("one-file", "datatype", True), ("one-file", "collective", True),
           ("four-files", "datatype", True), ("four-files", "collective", True), ("one-file", "auto", True),
           ("four-files", "auto", True), ("one-file", "collective", False))


def measure(comm: MPI.Comm, base: Path, grid: lbmpi.Grid, steps: list[int], repeats: int, sync: bool,
            model: Any, say: Any) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Every configuration *repeats* times, rotated; the first repeat verified with numpy.

    Each fresh directory gets the calibration, so that ``auto`` decides as predicted.
    """
    out: dict[tuple[str, str, bool], list[dict[str, Any]]] = {c: [] for c in CONFIGS}
    order = list(CONFIGS)
    for rep in range(repeats):
        for variant, method, checksum in order[rep % len(order):] + order[:rep % len(order)]:
            root = fresh(comm, base, f"{variant}-{method}-{int(checksum)}-{rep}")
            if comm.Get_rank() == 0:
                store_model(f"sqlite:///{root}/catalog.db", root, model)
            comm.Barrier()
            res = lbmpi.run(comm, grid, variant, steps, root=root, method=method, sync=sync, checksum=checksum)
            if rep == 0:
                res["wrong_values"] = lbmpi.verify(comm, grid, res, root, steps)
            if variant != "original":
                res["chosen"] = _methods_used(comm, res)
            out[(variant, method, checksum)].append(res)
            comm.Barrier()
            if comm.Get_rank() == 0:
                shutil.rmtree(root, ignore_errors=True)
            say(f"repeat {rep + 1}/{repeats} {variant:10s} {method:10s} checksum {checksum!s:5s} {res['seconds']:8.3f} s")
    return out


def _methods_used(comm: MPI.Comm, res: dict[str, Any]) -> str:
    used = ""
    if comm.Get_rank() == 0:
        import sdm

        cat = sdm.Catalog(res["catalog"], create=False)
        try:
            used = ",".join(sorted({w.method for _, _, w in cat.writes(res["run_id"])}))
        finally:
            cat.close()
    return comm.bcast(used, root=0)


def summarize(samples: dict, model: Any, grid: lbmpi.Grid, nprocs: int, steps: int, sync: bool) -> list[dict]:
    base = median(r["seconds"] for r in samples[("original", "-", False)])
    rows = []
    for (variant, method, checksum), runs in samples.items():
        t = median(r["seconds"] for r in runs)
        pred, assumed = lbmpi.predicted(model, grid, variant, method, nprocs, steps, sync, checksum=checksum)
        rows.append({
            "variant": variant, "method": method, "checksum": checksum, "chosen": runs[0].get("chosen", "posix"),
            "files": runs[0]["files"],
            "seconds": t, "range": [min(r["seconds"] for r in runs), max(r["seconds"] for r in runs)],
            "mbps": runs[0]["bytes"] / 1e6 / t, "speedup": base / t, "predicted": pred, "predicted_method": assumed,
            "prediction_ratio": pred / t, "wrong_values": runs[0].get("wrong_values", 0),
        })
    return rows


def markdown(rows: list[dict], meta: dict) -> str:
    head = (f"# LBMPI benchmark\n\n{meta['grid']} grid x 4 fields (float64, one ghost layer), {meta['steps']} dumps "
            f"({meta['mbytes']:.1f} MB), block-block over (x, y) on {meta['nprocs']} ranks ({meta['procs']}), "
            f"{meta['cores']} cores, {meta['fs']}, sync {'on' if meta['sync'] else 'off'}; median of "
            f"{meta['repeats']} repeats in rotated order, {meta['date']}; load average {meta['load_before']:.1f} "
            f"before, {meta['load_after']:.1f} after. {provenance_text(meta)}\n\n")
    cols = ["variant", "method", "checksum", "files", "seconds (min-max)", "MB/s", "vs original", "predicted s",
            "pred/meas", "files ok"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join(["---"] * 2 + ["---:"] * (len(cols) - 2)) + "|"]
    for r in rows:
        method = r["method"] if r["method"] != "auto" else f"auto ({r['chosen']})"
        lines.append("| " + " | ".join([
            r["variant"], method, "-" if r["variant"] == "original" else ("yes" if r["checksum"] else "no"),
            str(r["files"]), f"{r['seconds']:.3f} ({r['range'][0]:.3f}-{r['range'][1]:.3f})",
            f"{r['mbps']:.1f}", f"{r['speedup']:.1f}x", f"{r['predicted']:.3f}", f"{r['prediction_ratio']:.2f}",
            "yes" if r["wrong_values"] == 0 else f"NO ({r['wrong_values']})",
        ]) + " |")
    by = {(r["variant"], r["method"], r["checksum"]): r for r in rows}
    one_c, one_d = by[("one-file", "collective", True)], by[("one-file", "datatype", True)]
    four_c, four_d = by[("four-files", "collective", True)], by[("four-files", "datatype", True)]
    bare, one_a = by[("one-file", "collective", False)], by[("one-file", "auto", True)]
    errors = [abs(r["prediction_ratio"] - 1) for r in rows]
    goals = (
        "\n\n## Goals\n\n"
        "* collective single file vs the original (goal >= 40x; the paper: 49x): SDM's own two-phase I/O "
        f"(auto's choice, {one_a['chosen']}) **{one_a['speedup']:.1f}x**; ROMIO's (`collective`) "
        f"**{one_c['speedup']:.1f}x** with SDM's write-time checksum, **{bare['speedup']:.1f}x** without it "
        "(the original computes none)\n"
        f"* collective vs non-collective: one file {one_d['seconds'] / one_c['seconds']:.2f}x, four files "
        f"{four_d['seconds'] / four_c['seconds']:.2f}x (the paper: 8.1x and 70.7x)\n"
        f"* one file vs four files, collective: {four_c['seconds'] / one_c['seconds']:.2f}x (the paper: 0.53x, "
        "four files faster there because they sat on different disks)\n"
        f"* predictions within 25 %: {sum(e <= 0.25 for e in errors)} of {len(errors)} "
        f"(worst {max(errors) * 100:.0f} %)\n"
    )
    return head + "\n".join(lines) + goals


def plot(rows: list[dict], meta: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    labels = [f"{r['variant']}\n{r['method'] if r['method'] != 'auto' else 'auto: ' + r['chosen']}"
              + ("" if r["checksum"] or r["variant"] == "original" else "\nno checksum") for r in rows]
    x = range(len(rows))
    ax.bar([i - 0.2 for i in x], [r["seconds"] for r in rows], 0.4, label="measured (median)")
    ax.bar([i + 0.2 for i in x], [r["predicted"] for r in rows], 0.4, label="predicted")
    ax.set_yscale("log")
    ax.set_xticks(list(x), labels, fontsize=7)
    ax.set_ylabel("seconds (log)")
    ax.set_title(f"LBMPI {meta['grid']} x 4 fields, {meta['steps']} dumps, {meta['nprocs']} ranks")
    ax.legend()
    fig.tight_layout()
    from _plots import save_png
    save_png(fig, path, dpi=120)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=64, help="grid edge (default 64)")
    p.add_argument("--steps", type=int, default=6, help="dumps per configuration (default 6)")
    p.add_argument("--repeats", type=int, default=3, help="repeats (default 3)")
    p.add_argument("--no-sync", action="store_true", help="no sync (original and SDM alike)")
    p.add_argument("--root", default=None, help="scratch directory (default: a new temporary directory)")
    p.add_argument("--out", default=str(RESULTS), help="results directory")
    p.add_argument("--name", default="lbmpi", help="results file name (default lbmpi)")
    p.add_argument("--quick", action="store_true", help="a quick calibration (a smoke test)")
    a = p.parse_args(argv)
    comm = MPI.COMM_WORLD
    load_before = os.getloadavg()[0]
    grid = lbmpi.Grid.of(a.n, comm.Get_size())
    steps = list(range(1, a.steps + 1))
    sync = not a.no_sync
    with scratch(comm, a.root, "sdm-lbmpi-") as base, steady_memory(comm):
        model = calibrated(comm, fresh(comm, base, "calibration"), a.quick)
        say(comm)(f"model: {model.label}")
        samples = measure(comm, base, grid, steps, a.repeats, sync, model, say(comm))
        info = meta(comm, base, load_before, grid="x".join(map(str, grid.shape)), procs="x".join(map(str, grid.procs)),
                    steps=len(steps), mbytes=4 * grid.field_bytes * len(steps) / 1e6, sync=sync, repeats=a.repeats,
                    model=model.label)
    if comm.Get_rank() != 0:
        return 0
    rows = summarize(samples, model, grid, comm.Get_size(), len(steps), sync)
    runs = {f"{v}/{m}/checksum={c}": [{k: x for k, x in r.items() if k != "catalog"} for r in rs]
            for (v, m, c), rs in samples.items()}
    write_results(Path(a.out), a.name, {"meta": info, "model": model.to_json(), "rows": rows, "samples": runs},
                  markdown(rows, info), lambda path: plot(rows, info, path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
