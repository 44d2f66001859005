"""Export throughput (``sdm export`` to HDF5, NetCDF-4, Zarr v3) against reading the same data through SDM.

Run from the repository with plain Python (one process, no mpiexec)::

    PYTHONPATH=src python benchmarks/export.py                  # 32 steps of 4 MiB, 5 rounds, /dev/shm and disk
    PYTHONPATH=src python benchmarks/export.py --quick --out /tmp/r

One run is written per place (``/dev/shm`` and a directory on disk, ``--disk``): one
float64 dataset of ``--rows`` x 512 (4 MiB a step at 1024 rows) over ``--steps`` steps.
Each round times, in a rotating order, the contenders on the same run: ``sdm read``
(open the run, read every step with :meth:`sdm.Group.read`: what an export reads) and
an uncompressed export to each format (the file written next to the run and removed
after the round). Throughput is the data's bytes over the wall time; the ratio export /
read is taken within a round. Figures: medians with min-max over ``--repeat`` rounds.
Goal: every export at least 0.5x the SDM read throughput. The disk figures are warm
(the run was just written and fits in the page cache); the exported file's bytes are
not synced, as with ``h5py``/``netCDF4``/``zarr`` by default.

``references`` (``--part references``; results in ``export_references.*``): the exports that
copy nothing (``sdm export --format references`` and ``icechunk``). On a run of
``--ref-steps`` steps (10^4) of one ``--ref-rows`` x 128 float64 dataset (128 KiB a step) on
``/dev/shm``: the seconds to make a JSON and a Parquet reference set and an Icechunk
repository (in this process, after one warm-up; contenders interleaved) and of a cold
``sdm export`` command (a new process: imports included), and each one's size against
the data's. Goals: under 1 s for the references of 10^4 steps (metadata only), under
0.1 % of the data. Then, on the run of the exports above (each place), the read
throughput of every step through ``xarray.open_dataset("reference://", engine="zarr")``
against SDM's own lazy read (``group["T"][...]``, goal at least 0.8x) and against xarray
reading the Zarr copy that ``--format zarr`` makes (made once, before the rounds).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import numpy as np
from mpi4py import MPI

import sdm
from sdm.exporting import ARRAY_FORMATS, export

from _io_bench import RESULTS, meta, per_place, write_results

GOAL = 0.5
SUFFIX = {"hdf5": "h5", "netcdf": "nc", "zarr": "zarr"}
#: references: seconds to make them (10^4 steps), their size over the data's, xarray's read over SDM's lazy read
REF_GOALS = {"seconds": 1.0, "size": 0.001, "read": 0.8}
REFERENCES = {"references JSON": ("references", "refs.json"), "references Parquet": ("references", "refs.parq"),
              "icechunk": ("icechunk", "repo")}


def write_run(root: Path, rows: int, steps: int, columns: int = 512) -> tuple[str, int, int]:
    """The run to export: catalog URL, run id, bytes of all its steps."""
    url = f"sqlite:///{root}/catalog.db"
    with sdm.open("exportbench", root=str(root), catalog=url) as s:
        g = s.make_group("fields", ["T"], dtype="<f8", shape=(rows, columns))
        for step in range(steps):
            g.write("T", step, np.random.default_rng(step).standard_normal((rows, columns)))
        return url, s.run_id, rows * columns * 8 * steps


def sdm_read(url: str, run: int) -> float:
    """Seconds to open the run and read every step through SDM."""
    t0 = time.perf_counter()
    with sdm.open("exportbench", "r", catalog=url, run=run) as s:
        g = s.group("fields")
        for step in g.steps("T"):
            g.read("T", step)
    return time.perf_counter() - t0


def export_once(url: str, run: int, fmt: str, place: Path) -> float:
    """Seconds of one uncompressed export (the output removed afterwards)."""
    out = place / f"out.{SUFFIX[fmt]}"
    t0 = time.perf_counter()
    export(run, format=fmt, out=out, catalog=url)
    seconds = time.perf_counter() - t0
    shutil.rmtree(out) if out.is_dir() else out.unlink()
    return seconds


def measure(place: Path, rows: int, steps: int, repeat: int) -> dict[str, Any]:
    """Interleaved rounds at *place*: throughputs (MB/s) and export / read ratios per contender."""
    url, run, nbytes = write_run(place, rows, steps)
    names = ["sdm read", *ARRAY_FORMATS]
    seconds: dict[str, list[float]] = {n: [] for n in names}
    for r in range(repeat):
        order = names[r % len(names):] + names[:r % len(names)]  # rotate who goes first
        for name in order:
            seconds[name].append(sdm_read(url, run) if name == "sdm read" else export_once(url, run, name, place))
    out: dict[str, Any] = {"bytes": nbytes, "contenders": {}}
    for name in names:
        mbs = [nbytes / s / 1e6 for s in seconds[name]]
        ratios = [b / a for a, b in zip(seconds[name], seconds["sdm read"])]  # export MB/s over read MB/s
        out["contenders"][name] = {"seconds": seconds[name], "mbs_median": statistics.median(mbs),
                                   "mbs_min": min(mbs), "mbs_max": max(mbs), "ratio_median": statistics.median(ratios),
                                   "ratio_min": min(ratios), "ratio_max": max(ratios)}
    return out


def markdown(data: dict[str, Any]) -> str:
    m = data["meta"]
    lines = [
        "# Export throughput vs reading through SDM",
        "",
        f"SDM {m['sdm_version']} ({m['git_commit']}), {m['date']}, {m['host']}, {m['cores']} cores, "
        f"Python {m['python']}; one process; {data['steps']} steps of {data['rows']}x512 float64 "
        f"({data['rows'] * 512 * 8 / 2**20:.0f} MiB a step); {data['repeat']} interleaved rounds, medians (min-max).",
        "",
        "| place | contender | MB/s | export / SDM read | goal >= 0.5 |",
        "|---|---|---:|---:|:---:|",
    ]
    for place, res in data["places"].items():
        for name, c in res["contenders"].items():
            ratio = "-" if name == "sdm read" else f"{c['ratio_median']:.2f} ({c['ratio_min']:.2f}-{c['ratio_max']:.2f})"
            ok = "-" if name == "sdm read" else ("yes" if c["ratio_median"] >= GOAL else "NO")
            lines.append(f"| {place} ({res['fs']}) | {name} | {c['mbs_median']:.0f} ({c['mbs_min']:.0f}-"
                         f"{c['mbs_max']:.0f}) | {ratio} | {ok} |")
    lines += ["", "Exports are uncompressed; the disk figures are warm (page cache). See benchmarks/export.py.", ""]
    return "\n".join(lines)


# ------------------------------------------------------------------ references
def _gone(path: Path) -> None:
    shutil.rmtree(path) if path.is_dir() else path.unlink()


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else path.stat().st_size


def _spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def _rounds(contenders: dict[str, Callable[[], float]], repeat: int) -> dict[str, list[float]]:
    """Seconds of every contender, *repeat* interleaved rounds (who goes first rotates)."""
    names = list(contenders)
    seconds: dict[str, list[float]] = {n: [] for n in names}
    for r in range(repeat):
        for name in names[r % len(names):] + names[:r % len(names)]:
            seconds[name].append(contenders[name]())
    return seconds


def reference_costs(place: Path, rows: int, steps: int, repeat: int) -> dict[str, Any]:
    """The seconds and sizes of the references (JSON, Parquet) and of an Icechunk repository of a run of
    *steps* steps, in this process (after a warm-up) and as a cold ``sdm export`` command."""
    url, run, nbytes = write_run(place, rows, steps, columns=128)
    sizes = {}
    for name, (fmt, leaf) in REFERENCES.items():  # warm-up: imports, the catalog's first queries; the sizes
        export(run, format=fmt, out=place / leaf, catalog=url)
        sizes[name] = _size(place / leaf)
        _gone(place / leaf)

    def made(fmt: str, leaf: str) -> float:
        t0 = time.perf_counter()
        export(run, format=fmt, out=place / leaf, catalog=url)
        seconds = time.perf_counter() - t0
        _gone(place / leaf)
        return seconds

    def cold() -> float:
        out = place / "cold.json"
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "sdm", "export", str(run), "--format", "references", "-o", str(out),
                        "-c", url], check=True, env=env, stdout=subprocess.DEVNULL)
        seconds = time.perf_counter() - t0
        out.unlink()
        return seconds

    contenders: dict[str, Callable[[], float]] = {name: (lambda f=fmt, o=leaf: made(f, o))
                                                  for name, (fmt, leaf) in REFERENCES.items()}
    contenders["sdm export command (cold)"] = cold
    seconds = _rounds(contenders, repeat)
    return {"steps": steps, "bytes": nbytes, "contenders": {
        name: {"seconds": _spread(s), "bytes": sizes.get(name), "size_ratio": sizes[name] / nbytes if name in sizes
               else None} for name, s in seconds.items()}}


def reference_reads(place: Path, rows: int, steps: int, repeat: int) -> dict[str, Any]:
    """Read throughput of every step: xarray through the references, SDM's lazy read, xarray on the Zarr copy."""
    import xarray as xr

    url, run, nbytes = write_run(place, rows, steps)
    refs, copy = place / "read.json", place / "copy.zarr"
    export(run, format="references", out=refs, catalog=url)
    export(run, format="zarr", out=copy, catalog=url)

    def lazy() -> float:
        t0 = time.perf_counter()
        with sdm.open("exportbench", "r", catalog=url, run=run) as s:
            s.group("fields")["T"][...]
        return time.perf_counter() - t0

    def through(store: str, **kwargs: Any) -> float:
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with xr.open_dataset(store, engine="zarr", group="fields", **kwargs) as ds:
                ds["T"].values
        return time.perf_counter() - t0

    contenders: dict[str, Callable[[], float]] = {
        "sdm lazy read": lazy,
        "xarray, references": lambda: through("reference://", backend_kwargs={"storage_options": {"fo": str(refs)}}),
        "xarray, zarr copy": lambda: through(str(copy)),
    }
    seconds = _rounds(contenders, repeat)
    out: dict[str, Any] = {"bytes": nbytes, "contenders": {}}
    for name, s in seconds.items():
        out["contenders"][name] = {
            "mbs": _spread([nbytes / x / 1e6 for x in s]),
            "vs_lazy": _spread([b / a for a, b in zip(s, seconds["sdm lazy read"])]),
            "vs_copy": _spread([b / a for a, b in zip(s, seconds["xarray, zarr copy"])])}
    return out


def _cell(s: dict[str, float], fmt: str = "{:.2f}") -> str:
    return f"{fmt.format(s['median'])} ({fmt.format(s['min'])}-{fmt.format(s['max'])})"


def references_markdown(data: dict[str, Any]) -> str:
    m, costs = data["meta"], data["costs"]
    lines = [
        "# References (virtual Zarr) vs copies and SDM's own read",
        "",
        f"SDM {m['sdm_version']} ({m['git_commit']}), {m['date']}, {m['host']}, {m['cores']} cores, "
        f"Python {m['python']}; one process; load average {m['load_before']:.1f} before, {m['load_after']:.1f} after "
        f"(the cores are shared); {data['repeat']} interleaved rounds, medians (min-max).",
        "",
        f"Making them: a run of {costs['steps']} steps of {data['ref_rows']}x128 float64 "
        f"({data['ref_rows'] * 128 * 8 / 1024:.0f} KiB a step, {costs['bytes'] / 2**30:.2f} GiB) on /dev/shm "
        f"({costs['fs']}).",
        "",
        f"| contender | seconds | goal < {REF_GOALS['seconds']:.0f} s | size | size / data | goal < "
        f"{REF_GOALS['size'] * 100:.1f} % |",
        "|---|---:|:---:|---:|---:|:---:|",
    ]
    for name, c in costs["contenders"].items():
        ok = "yes" if c["seconds"]["median"] < REF_GOALS["seconds"] else "NO"
        size = "-" if c["bytes"] is None else f"{c['bytes'] / 1e6:.2f} MB"
        ratio = "-" if c["size_ratio"] is None else f"{c['size_ratio'] * 100:.3f} %"
        size_ok = "-" if c["size_ratio"] is None else ("yes" if c["size_ratio"] < REF_GOALS["size"] else "NO")
        lines.append(f"| {name} | {_cell(c['seconds'])} | {ok if c['bytes'] is not None else '-'} | {size} | {ratio} "
                     f"| {size_ok} |")
    lines += ["", f"Reading every step ({data['rows']}x512 float64, {data['steps']} steps, "
                  f"{data['rows'] * 512 * 8 / 2**20:.0f} MiB a step):", "",
              f"| place | contender | MB/s | / SDM lazy read | goal >= {REF_GOALS['read']} | / zarr copy |",
              "|---|---|---:|---:|:---:|---:|"]
    for place, res in data["reads"].items():
        for name, c in res["contenders"].items():
            ok = "yes" if c["vs_lazy"]["median"] >= REF_GOALS["read"] else "NO"
            lines.append(f"| {place} ({res['fs']}) | {name} | {_cell(c['mbs'], '{:.0f}')} | {_cell(c['vs_lazy'])} | "
                         f"{ok if name == 'xarray, references' else '-'} | {_cell(c['vs_copy'])} |")
    lines += ["", "The cold command includes starting Python and its imports. See benchmarks/export.py.", ""]
    return "\n".join(lines)


def references_plot(data: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from _plots import save_png

    fig, ax = plt.subplots(figsize=(5.2, 2.4))
    names = list(next(iter(data["reads"].values()))["contenders"])
    for k, (place, res) in enumerate(data["reads"].items()):
        values = [res["contenders"][n]["mbs"]["median"] for n in names]
        ax.bar([i + 0.4 * k for i in range(len(names))], values, width=0.38, label=place)
    ax.set_xticks([i + 0.2 for i in range(len(names))], names, fontsize=8)
    ax.set_ylabel("MB/s", fontsize=8)
    ax.tick_params(labelsize=8)
    ax.legend(fontsize=7)
    refs = data["costs"]["contenders"]["references JSON"]
    ax.set_title(f"reading every step; references of {data['costs']['steps']} steps made in "
                 f"{refs['seconds']['median']:.2f} s", fontsize=8)
    fig.tight_layout()
    save_png(fig, path, dpi=80)
    plt.close(fig)


def references_part(args: argparse.Namespace) -> None:
    load = os.getloadavg()[0]
    from _io_bench import scratch
    from sdm._cli.bench import fs_type

    with scratch(MPI.COMM_SELF, None, ".sdm-export-refs-", "/dev/shm") as where:
        costs = {"fs": fs_type(where) or "unknown", **reference_costs(where, args.ref_rows, args.ref_steps,
                                                                       args.repeat)}
    reads = per_place(args.disk, ".sdm-export-read-", lambda where: reference_reads(where, args.rows, args.steps,
                                                                                  args.repeat))
    data = {"meta": meta(MPI.COMM_WORLD, Path(args.disk), load), "rows": args.rows, "steps": args.steps,
            "ref_rows": args.ref_rows, "repeat": args.repeat, "goals": REF_GOALS, "costs": costs, "reads": reads}
    write_results(Path(args.out), "export_references", data, references_markdown(data),
                  lambda path: references_plot(data, path))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--disk", default=str(Path(__file__).resolve().parents[1]),
                    help="a directory on disk for the scratch run (default: the repository)")
    ap.add_argument("--quick", action="store_true", help="tiny sizes, 1 round (smoke test)")
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--part", choices=("all", "exports", "references"), default="all")
    ap.add_argument("--ref-steps", type=int, default=10_000, help="references: steps of the run (default 10^4)")
    ap.add_argument("--ref-rows", type=int, default=128, help="references: rows of 128 float64 a step")
    args = ap.parse_args()
    if args.quick:
        args.rows, args.steps, args.repeat, args.ref_steps = 64, 4, 1, 50
    if args.part in ("all", "references"):
        references_part(args)
    if args.part == "references":
        return
    load = os.getloadavg()[0]
    places = per_place(args.disk, ".sdm-export-bench-", lambda where: measure(where, args.rows, args.steps, args.repeat))
    data = {"meta": meta(MPI.COMM_WORLD, Path(args.disk), load), "rows": args.rows, "steps": args.steps,
            "repeat": args.repeat, "goal": GOAL, "places": places}
    write_results(Path(args.out), "export", data, markdown(data), lambda path: None)  # no PNG: results are near their size limit


if __name__ == "__main__":
    main()
