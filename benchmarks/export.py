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
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
from mpi4py import MPI

import sdm
from sdm.exporting import ARRAY_FORMATS, export

from _io_bench import RESULTS, meta, per_place, write_results

GOAL = 0.5
SUFFIX = {"hdf5": "h5", "netcdf": "nc", "zarr": "zarr"}


def write_run(root: Path, rows: int, steps: int) -> tuple[str, int, int]:
    """The run to export: catalog URL, run id, bytes of all its steps."""
    url = f"sqlite:///{root}/catalog.db"
    with sdm.open("exportbench", root=str(root), catalog=url) as s:
        g = s.make_group("fields", ["T"], dtype="<f8", shape=(rows, 512))
        for step in range(steps):
            g.write("T", step, np.random.default_rng(step).standard_normal((rows, 512)))
        return url, s.run_id, rows * 512 * 8 * steps


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--disk", default=str(Path(__file__).resolve().parents[1]),
                    help="a directory on disk for the scratch run (default: the repository)")
    ap.add_argument("--quick", action="store_true", help="tiny sizes, 1 round (smoke test)")
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args()
    if args.quick:
        args.rows, args.steps, args.repeat = 64, 4, 1
    load = os.getloadavg()[0]
    places = per_place(args.disk, ".sdm-export-bench-", lambda where: measure(where, args.rows, args.steps, args.repeat))
    data = {"meta": meta(MPI.COMM_WORLD, Path(args.disk), load), "rows": args.rows, "steps": args.steps,
            "repeat": args.repeat, "goal": GOAL, "places": places}
    write_results(Path(args.out), "export", data, markdown(data), lambda path: None)  # no PNG: results are near their size limit


if __name__ == "__main__":
    main()
