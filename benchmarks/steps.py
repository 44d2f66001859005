"""Does the cost of a step stay flat as a run grows? One run of many small steps, and one dump of 1,000 datasets.

Run from the repository with plain Python; the measurements run as one MPI job that this
driver starts (``mpiexec -n R python steps.py --worker``)::

    PYTHONPATH=src python benchmarks/steps.py                          # 10^5 steps, 2 ranks, /dev/shm
    PYTHONPATH=src python benchmarks/steps.py --steps 20000 --ranks 4 --dir /var/tmp
    PYTHONPATH=src python benchmarks/steps.py --quick --out /tmp/r     # tiny sizes (smoke test)

**Steps**: one run (SQLite catalog, meta-file on, ``sync=True``, checksums on, level 3)
writes ``--steps`` steps of ``--datasets`` datasets of ``--length`` float64 each (split
over the ranks; 2 x 512 = two datasets of 4 KiB per step by default) with
``Group.write_step``. Each step is timed on every rank, from its call to its return; the
step's time is the slowest rank's. Reported: the median and min-max of the per-step
seconds over the first ``--window`` steps (step 0, which makes the file, left out) and
the last ``--window`` (goal: last within 1.2x of first); the SQL statements rank 0 sends
per step over the same windows (an ``executemany`` counts once); the metadata bytes per
step (growth of the catalog's files, database and WAL, and of the run's meta-file, from
before the first step to the end after ``close()``, divided by the steps); and, for the
plot, both sampled every ``--window`` steps.

**Wide dump**: a group of ``--wide`` datasets of ``--length`` float64 written in one
``write_step`` (``--repeat`` dumps, each its own step; the group's definition timed
apart), then one more dump under :mod:`cProfile` on rank 0 whose time is split by where
it went (catalog and SQL, meta-file, checksums, MPI file I/O, MPI exchanges, the rest).

**ADIOS2 BP5** (``--adios2``, default on): the same steps (pattern ``d`` of
``peer_stack``: ``count`` = datasets, ``length``, ``steps``) written by the peer stack's
``peer_adios2`` when ``make peers`` built it into ``.peers/``; its seconds per step (the
driver reports the whole run's time only) and the metadata files of its BP5 directory
(``md.*``, ``mmd.*``) per step. Without the stack the results say that it was not run.

Writes ``steps.json``, ``.md`` and ``.png`` into ``--out`` (default ``benchmarks/results``).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import shutil
import sys
import tempfile
import time
from pathlib import Path
from statistics import median
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _io_bench import RESULTS, meta  # noqa: E402
from _mpijob import REPO, mpiexec, run_job, worker_env  # noqa: E402

GOAL = 1.2  # last window's median per-step time over the first's
#: Where a profiled dump's time went: (area, substrings of the profiled function's file or name), first match wins.
AREAS = (
    ("meta-file", ("sdm/catalog/metafile", "sdm/catalog/recorder", "json/encoder", "posix.write")),
    ("catalog and SQL", ("sdm/catalog/", "sqlalchemy/", "sqlite3", "_sqlite")),
    ("checksums", ("sdm/integrity", "_mix64_kernel", "xxhash")),
    ("MPI file I/O", ("mpi4py.MPI.File", "Write_at", "Read_at", "Set_view", "Sync", "posix.fsync", "posix.pwrite",
                      "sdm/io/", "sdm/storage/")),
    ("MPI exchanges", ("mpi4py.MPI.Comm", "mpi4py.MPI.Intracomm", "Barrier", "bcast", "gather", "allreduce",
                       "sdm/_collective")),
    ("SDM's bookkeeping (group, layout, engine, planner)", ("sdm/group", "sdm/layout/", "sdm/engine/",
                                                           "sdm/planner/", "sdm/session", "sdm/_ranked_io")),
)


# ----------------------------------------------------------------------------- worker (MPI)
def _sizes(catalog: Path, metafile: Path) -> tuple[int, int]:
    """Bytes of the catalog's database and WAL files, and of the meta-file."""
    def size(p: Path) -> int:
        try:
            return p.stat().st_size
        except OSError:
            return 0
    return size(catalog) + size(catalog.with_name(catalog.name + "-wal")), size(metafile)


class _Statements:
    """Counts the SQL statements an engine sends (an ``executemany`` once)."""

    def __init__(self, engine: Any) -> None:
        import sqlalchemy as sa

        self.count = 0
        self.engine = engine
        sa.event.listen(engine, "before_cursor_execute", self._seen)

    def _seen(self, *args: Any) -> None:
        self.count += 1

    def close(self) -> None:
        import sqlalchemy as sa

        sa.event.remove(self.engine, "before_cursor_execute", self._seen)


def run_steps(comm: Any, base: Path, steps: int, datasets: int, length: int, window: int) -> dict[str, Any]:
    """One run of *steps* small steps; per-step times (slowest rank), statements and metadata sizes (rank 0)."""
    import sdm

    names = [f"d{i:03d}" for i in range(datasets)]
    db = base / "catalog.db"
    seconds = np.zeros(steps)
    statements = np.zeros(steps, dtype=np.int64)
    samples: list[dict[str, int]] = []
    with sdm.open("steps", root=base, catalog=f"sqlite:///{db}", sync=True) as s:
        g = s.make_group("g", names, dtype="<f8", shape=(length,), level=3)
        local = np.arange(int(np.prod(g.local_shape(names[0]))), dtype="<f8") + comm.rank
        meta_path = Path(s.root) / s.run_dir / ".sdm-meta.jsonl"
        counter = _Statements(s.catalog.engine) if comm.rank == 0 else None
        if comm.rank == 0:
            before = _sizes(db, meta_path)
        comm.Barrier()
        for step in range(steps):
            arrays = {n: local + step for n in names}
            n0 = counter.count if counter else 0
            t = time.perf_counter()
            g.write_step(step, arrays)
            seconds[step] = time.perf_counter() - t
            if counter:
                statements[step] = counter.count - n0
                if (step + 1) % window == 0 or step + 1 == steps:
                    cat, mf = _sizes(db, meta_path)
                    samples.append({"step": step + 1, "catalog": cat, "metafile": mf})
        if counter:
            counter.close()
    slowest = np.empty_like(seconds) if comm.rank == 0 else None
    comm.Reduce(seconds, slowest, op=_max(), root=0)
    if comm.rank != 0:
        return {}
    after = _sizes(db, meta_path)
    first, last = slowest[1:window + 1], slowest[-window:]
    return {
        "steps": steps, "datasets": datasets, "length": length, "window": window,
        "bytes_per_step": 8 * length * datasets,
        "first": _stats(first), "last": _stats(last), "ratio": float(np.median(last) / np.median(first)),
        "statements": {"first": _stats(statements[1:window + 1]), "last": _stats(statements[-window:])},
        "catalog_bytes_per_step": (after[0] - before[0]) / steps, "metafile_bytes_per_step": (after[1] - before[1]) / steps,
        "catalog_bytes": after[0], "metafile_bytes": after[1], "samples": samples,
        "blocks": [_stats(slowest[i:i + window]) for i in range(0, steps, window)],
        "total_s": float(slowest.sum()),
    }


def run_wide(comm: Any, base: Path, datasets: int, length: int, repeat: int) -> dict[str, Any]:
    """One group of *datasets* datasets written in one dump, *repeat* times, then once profiled on rank 0."""
    import sdm

    names = [f"w{i:04d}" for i in range(datasets)]
    profile = cProfile.Profile() if comm.rank == 0 else None
    with sdm.open("wide", root=base, catalog=f"sqlite:///{base}/catalog.db", sync=True) as s:
        comm.Barrier()
        t = time.perf_counter()
        g = s.make_group("wide", names, dtype="<f8", shape=(length,), level=3)
        define = time.perf_counter() - t
        local = np.arange(int(np.prod(g.local_shape(names[0]))), dtype="<f8") + comm.rank
        dumps = []
        for step in range(repeat + 1):
            arrays = {n: local + step for n in names}
            comm.Barrier()
            if step == repeat and profile is not None:
                profile.enable()
            t = time.perf_counter()
            g.write_step(step, arrays)
            took = time.perf_counter() - t
            if profile is not None:
                profile.disable()
            dumps.append(float(comm.allreduce(took, op=_max())))
    define = float(comm.allreduce(define, op=_max()))
    if comm.rank != 0:
        return {}
    split, total = _split(pstats.Stats(profile))
    return {"datasets": datasets, "length": length, "define_s": define, "dumps": _stats(np.array(dumps[:repeat])),
            "first_dump_s": dumps[0], "profiled_s": dumps[-1], "split": split, "profiled_cpu_s": total}


def _split(stats: pstats.Stats) -> tuple[dict[str, float], float]:
    """Own time of the profiled functions summed by area (seconds), and their total."""
    out = {area: 0.0 for area, _ in AREAS}
    out["the rest"] = 0.0
    total = 0.0
    for (path, _line, name), (_cc, _nc, own, _cum, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        where = f"{path}:{name}".replace(os.sep, "/")
        area = next((a for a, keys in AREAS if any(k in where for k in keys)), "the rest")
        out[area] += own
        total += own
    return out, total


def _stats(values: np.ndarray) -> dict[str, float]:
    return {"median": float(np.median(values)), "min": float(np.min(values)), "max": float(np.max(values)),
            "n": int(len(values))}


def _max() -> Any:
    from mpi4py import MPI

    return MPI.MAX


def worker(args: argparse.Namespace) -> None:
    """The steps run and the wide dump, each in a fresh directory; rank 0 prints one JSON line."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    out: dict[str, Any] = {}
    for part in ("steps", "wide"):
        where = Path(args.dir) / part
        if comm.rank == 0:
            where.mkdir()
        comm.Barrier()
        if part == "steps":
            out[part] = run_steps(comm, where, args.steps, args.datasets, args.length, args.window)
        else:
            out[part] = run_wide(comm, where, args.wide, args.length, args.repeat)
        comm.Barrier()
        if comm.rank == 0:
            shutil.rmtree(where)
    if comm.rank == 0:
        print(json.dumps(out))


# ----------------------------------------------------------------------------- ADIOS2 BP5 (peer stack)
def run_adios2(args: argparse.Namespace, directory: Path) -> dict[str, Any]:
    """The same steps written by the peer stack's ADIOS2 driver (BP5); ``{"not_run": why}`` without the stack."""
    peers = Path(args.peers)
    if not (peers / "bin" / "peer_adios2").exists():
        return {"not_run": f"the peer stack is not built ({peers / 'bin' / 'peer_adios2'} missing: run `make peers`)"}
    from peers import Stack, job  # the stack's mpiexec (Open MPI) and job runner

    base = Path(tempfile.mkdtemp(prefix="sdm-steps-adios2-", dir=directory))
    try:
        report = job(Stack(peers), "adios2", args.ranks, {"op": "write", "pattern": "d", "dir": base,
                                                          "count": args.datasets, "length": args.length,
                                                          "steps": args.steps}, limit=3600)
        if "seconds" not in report:
            return {"not_run": f"peer_adios2 failed: {report}"}
        md = sum(p.stat().st_size for p in base.rglob("*") if p.is_file() and p.name.startswith(("md.", "mmd.")))
        return {"seconds_per_step": report["seconds"] / args.steps, "metadata_bytes_per_step": md / args.steps,
                "total_s": report["seconds"], "steps": args.steps}
    finally:
        shutil.rmtree(base, ignore_errors=True)


# ----------------------------------------------------------------------------- report
def _fmt(s: dict[str, float], scale: float, digits: int) -> str:
    return f"{s['median'] * scale:.{digits}f} ({s['min'] * scale:.{digits}f} to {s['max'] * scale:.{digits}f})"


def markdown(data: dict[str, Any]) -> str:
    m, st, w, ad = data["meta"], data["steps"], data["wide"], data["adios2"]
    verdict = "met" if st["ratio"] <= GOAL else "missed"
    lines = ["# Cost per step as a run grows", "",
             f"SDM {m['sdm_version']} ({m['git_commit']}), {data['ranks']} ranks, {m['cores']} cores, {m['mpi']}, "
             f"Python {m['python']}, {m['date']}, {data['dir']} ({m['fs']}), load {m['load_before']:.1f} before, "
             f"{m['load_after']:.1f} after. SQLite catalog, meta-file on, `sync=True`, checksums on, level 3.", "",
             f"## {st['steps']:,} steps of {st['datasets']} datasets x {st['length']} float64 "
             f"({st['bytes_per_step'] // 1024} KiB per step, `write_step`)", "",
             f"Per-step seconds (slowest rank), median (min to max) over {st['window']:,} steps; goal: last within "
             f"{GOAL}x of first ({verdict}).", "",
             "| window | ms per step | SQL statements per step (rank 0) |", "|---|---|---|",
             f"| first {st['window']:,} (steps 1-{st['window']}) | {_fmt(st['first'], 1e3, 3)} "
             f"| {_fmt(st['statements']['first'], 1, 1)} |",
             f"| last {st['window']:,} | {_fmt(st['last'], 1e3, 3)} | {_fmt(st['statements']['last'], 1, 1)} |",
             f"| last / first (medians) | {st['ratio']:.3f} | |", "",
             f"Metadata per step: catalog (database and WAL) {st['catalog_bytes_per_step']:.0f} B, meta-file "
             f"{st['metafile_bytes_per_step']:.0f} B (at the end: catalog {st['catalog_bytes'] / 1e6:.1f} MB, "
             f"meta-file {st['metafile_bytes'] / 1e6:.1f} MB); the whole run {st['total_s']:.1f} s.", "",
             f"## One dump of {w['datasets']:,} datasets x {w['length']} float64", "",
             f"Group defined in {w['define_s']:.3f} s; first dump {w['first_dump_s']:.3f} s; dumps "
             f"{_fmt(w['dumps'], 1, 3)} s (median, min to max of {w['dumps']['n']}). One more dump under cProfile on "
             f"rank 0 ({w['profiled_s']:.3f} s with the profiler): its own time by area:", "",
             "| area | s | share |", "|---|---|---|"]
    for area, secs in w["split"].items():
        lines.append(f"| {area} | {secs:.3f} | {100 * secs / max(w['profiled_cpu_s'], 1e-12):.0f} % |")
    lines += ["", "## ADIOS2 BP5 on the same steps (peer stack)", ""]
    if "not_run" in ad:
        lines.append(f"Not run: {ad['not_run']}.")
    else:
        lines.append(f"{ad['seconds_per_step'] * 1e3:.3f} ms per step (its whole run over its steps; the driver "
                     f"times the run only), metadata files (md.*, mmd.*) {ad['metadata_bytes_per_step']:.0f} B per "
                     f"step; SDM's mean over the same steps: {st['total_s'] / st['steps'] * 1e3:.3f} ms.")
    return "\n".join(lines) + "\n"


def plot(data: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from _plots import save_png

    st = data["steps"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(8.0, 3.0), dpi=72)
    x = [min(i * st["window"] + st["window"], st["steps"]) for i in range(len(st["blocks"]))]
    a.fill_between(x, [1e3 * s["min"] for s in st["blocks"]], [1e3 * s["max"] for s in st["blocks"]],
                   color="tab:blue", alpha=0.2, lw=0)
    a.plot(x, [1e3 * s["median"] for s in st["blocks"]], color="tab:blue", lw=1)
    a.axhline(GOAL * 1e3 * st["first"]["median"], color="tab:red", lw=0.8, ls="--")
    a.set_xlabel("step", fontsize=7)
    a.set_ylabel(f"ms per step (median, min-max of {st['window']})", fontsize=7)
    steps = [s["step"] for s in st["samples"]]
    b.plot(steps, [s["catalog"] / 1e6 for s in st["samples"]], label="catalog", color="tab:blue", lw=1)
    b.plot(steps, [s["metafile"] / 1e6 for s in st["samples"]], label="meta-file", color="tab:orange", lw=1)
    b.set_xlabel("step", fontsize=7)
    b.set_ylabel("MB", fontsize=7)
    b.legend(fontsize=6)
    for ax in (a, b):
        ax.tick_params(labelsize=6)
        ax.grid(True, lw=0.3)
    fig.tight_layout()
    save_png(fig, path, dpi=72)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", default="/dev/shm", help="directory to measure in")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--steps", type=int, default=100_000)
    p.add_argument("--datasets", type=int, default=2, help="datasets per step")
    p.add_argument("--length", type=int, default=512, help="float64 per dataset (all ranks together)")
    p.add_argument("--window", type=int, default=1000, help="steps per window (first, last, and plot samples)")
    p.add_argument("--wide", type=int, default=1000, help="datasets of the wide dump")
    p.add_argument("--repeat", type=int, default=3, help="wide dumps timed")
    p.add_argument("--peers", default=str(REPO / ".peers"), help="the stack built by `make peers`")
    p.add_argument("--no-adios2", dest="adios2", action="store_false", help="leave ADIOS2 out")
    p.add_argument("--quick", action="store_true", help="tiny sizes (a smoke test, not a measurement)")
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.quick:
        args.steps, args.window, args.wide, args.repeat = 120, 20, 40, 1
    args.window = max(1, min(args.window, (args.steps - 1) // 2))
    if args.worker:
        worker(args)
        return
    directory = Path(args.dir).resolve()
    load = os.getloadavg()[0]
    base = Path(tempfile.mkdtemp(prefix="sdm-steps-", dir=directory))
    try:
        print(f"{args.steps} steps and a dump of {args.wide} datasets, {args.ranks} ranks, in {directory} ...",
              flush=True)
        command = [mpiexec(), "-n", str(args.ranks), sys.executable, str(Path(__file__).resolve()), "--worker",
                   "--dir", str(base), "--steps", str(args.steps), "--datasets", str(args.datasets),
                   "--length", str(args.length), "--window", str(args.window), "--wide", str(args.wide),
                   "--repeat", str(args.repeat)]
        data: dict[str, Any] = dict(json.loads(run_job(command, worker_env(), limit=6 * 3600)))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    data["adios2"] = run_adios2(args, directory) if args.adios2 else {"not_run": "--no-adios2"}
    data.update(ranks=args.ranks, dir=str(directory))
    from mpi4py import MPI

    data["meta"] = meta(MPI.COMM_SELF, directory, load)
    from _io_bench import write_results

    write_results(args.out, "steps", data, markdown(data), lambda path: plot(data, path))


if __name__ == "__main__":
    main()
