"""What the run's meta-file costs on the write path, and how long ``sdm rebuild`` takes.

Run from the repository with plain Python; the write measurements run as MPI jobs of 1
and 2 ranks that this driver starts (``mpiexec -n R python metafile_cost.py --worker``)::

    PYTHONPATH=src python benchmarks/metafile_cost.py                       # /dev/shm and /var/tmp
    PYTHONPATH=src python benchmarks/metafile_cost.py --dir /dev/shm --dir /work/tmp --repeat 7
    PYTHONPATH=src python benchmarks/metafile_cost.py --quick --out /tmp/r  # tiny sizes (smoke test)

Write path, per directory and rank count, ``sync=True`` (the default), SQLite catalog,
``method="posix"``, checksums on: the contenders ``on`` and ``off`` (``sdm.open(...,
metafile=False)``), and the same two with ``async_commit=True`` (``on-async``,
``off-async``), interleaved (their order rotates from round to round), ``--repeat`` rounds:

Each timing runs from the first write to the return of the last (with ``async_commit``, to
the end of ``close()``, which waits for the last background commit).

* **small**: ``--count`` writes per size (``--small``, bytes per rank: 512 B and 64 KiB),
  each its own step of a 1-D level-3 dataset; the figure is milliseconds per write
  (the slowest rank's time for all of them, divided by their number).
* **bulk**: ``--dumps`` writes of ``--bulk`` MiB in all (split over the ranks); the
  figure is seconds per dump.

The cost is ``on - off`` of the same round (per write, and as a share of ``off``), then
its median with min-max over the rounds.

Rebuild: a run of ``--rebuild-writes`` write rows (10 datasets of one float64 each per
dump, one ``writes`` record per dump) is synthesized with :class:`sdm.catalog.metafile.MetaFile`
itself (``sync=False``) beside a level-3 data file holding the matching bytes; ``sdm
rebuild``'s function (:func:`sdm.catalog.rebuild.rebuild`) then makes a SQLite catalog of
it, timed ``--repeat`` times (a new catalog each time). The rebuilt catalog is checked:
its row count, and a few steps read back through ``sdm.open(..., "r")`` with
``verify=True`` against the values written.

Writes ``metafile_cost.json``, ``.md`` and ``.png`` into ``--out`` (default ``benchmarks/results``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from statistics import median
from types import SimpleNamespace
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _io_bench import RESULTS, meta, provenance  # noqa: E402
from _mpijob import mpiexec, run_job, worker_env  # noqa: E402

CONTENDERS = ("on", "off", "on-async", "off-async")
MiB = 1 << 20


# ----------------------------------------------------------------------------- worker (MPI)
def _session_kwargs(contender: str, base: Path) -> dict[str, Any]:
    return dict(root=base, catalog=f"sqlite:///{base}/catalog.db", method="posix", sync=True,
                metafile=contender.startswith("on"), async_commit=contender.endswith("async"))


def _timed_writes(comm: Any, base: Path, contender: str, per_rank: int, count: int) -> float:
    """Seconds (slowest rank) for *count* writes of *per_rank* bytes per rank, one step each."""
    import sdm

    local = np.frombuffer(np.random.default_rng(comm.rank).bytes(per_rank), "u1")
    with sdm.open("metacost", **_session_kwargs(contender, base)) as s:
        g = s.make_group("g", ["a"], dtype="u1", shape=(per_rank * comm.size,), level=3)
        g.write("a", 0, local)  # file opened, first commit: not timed
        comm.Barrier()
        t = time.perf_counter()
        for step in range(1, count + 1):
            g.write("a", step, local)
        if s.async_commit:
            s.close()  # the last background commit included
        seconds = time.perf_counter() - t
    return float(comm.allreduce(seconds, op=_max()))


def _max() -> Any:
    from mpi4py import MPI

    return MPI.MAX


def worker(args: argparse.Namespace) -> None:
    """One rank count, one directory: every round, every contender; rank 0 prints JSON."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    base = Path(args.dir)
    cases = [("small", size, args.count) for size in args.small] + \
        [("bulk", args.bulk * MiB // comm.size, args.dumps)]
    samples: dict[str, dict[str, list[float]]] = {}
    for r in range(args.repeat):
        for kind, per_rank, count in cases:
            key = f"{kind}:{per_rank * comm.size if kind == 'bulk' else per_rank}"
            order = CONTENDERS[r % len(CONTENDERS):] + CONTENDERS[:r % len(CONTENDERS)]
            for contender in order:
                where = base / f"r{r}-{contender}"
                if comm.rank == 0:
                    where.mkdir()
                comm.Barrier()
                seconds = _timed_writes(comm, where, contender, per_rank, count)
                comm.Barrier()
                if comm.rank == 0:
                    shutil.rmtree(where)
                samples.setdefault(key, {}).setdefault(contender, []).append(seconds / count)
    if comm.rank == 0:
        print(json.dumps(samples))


# ----------------------------------------------------------------------------- rebuild
def synthesize(data_root: Path, writes: int, datasets: int = 10) -> tuple[Path, np.ndarray]:
    """A run of *writes* rows made with MetaFile itself; its directory and the values of every write."""
    from sdm import integrity
    from sdm.catalog import DatasetSpec
    from sdm.catalog.changes import GroupDefined, WritesRecorded
    from sdm.catalog.metafile import MetaFile
    from sdm.storage import runs

    rel = runs.make_run_dir(data_root, "metacost", 1, "c0ffee" * 5 + "00")
    run_dir = data_root / rel
    dumps = writes // datasets
    values = np.arange(dumps * datasets, dtype="<f8").reshape(dumps, datasets) * 0.5
    values.tofile(run_dir / "g.sdm")
    mf = MetaFile(run_dir, sync=False)
    created = datetime.now(timezone.utc)
    mf.run(application="metacost", run_id=1, catalog_id="c0ffee" * 5 + "00", nprocs=1, problem_size=None,
           attributes={"writes": writes}, created=created, root=str(data_root), directory=rel)
    names = [f"d{i}" for i in range(datasets)]
    specs = [DatasetSpec(n, "<f8", (1,), "C") for n in names]
    mf.append(GroupDefined(1, "g", 3, tuple(specs)).to_record(mf.names))
    mf.names.learn(SimpleNamespace(id=1, name="g", datasets=[SimpleNamespace(id=i, name=n) for i, n in enumerate(names)]))
    sums = [integrity.checksum_of_bytes(v.tobytes(), "<f8") for v in values.reshape(-1)]
    path = f"{rel}/g.sdm"
    for step in range(dumps):
        rows = [dict(dataset_id=i, step=step, path=path, level=3, offset=8 * (step * datasets + i), nbytes=8,
                     checksum=sums[step * datasets + i], checksum_algo=integrity.ALGORITHM, method="posix",
                     reason="synthesized", seconds=1e-4, nprocs=1, overwrite=False) for i in range(datasets)]
        mf.append(WritesRecorded.of(1, rows).to_record(mf.names))
    mf.append({"t": "close", "at": created.isoformat()})
    mf.close()
    return run_dir, values


def time_rebuild(base: Path, writes: int, repeat: int) -> dict[str, Any]:
    """Seconds to rebuild the synthesized run into a new SQLite catalog; the checks made of it."""
    import sdm
    from sdm.catalog.rebuild import rebuild

    data_root = base / "root"
    data_root.mkdir()
    t = time.perf_counter()
    run_dir, values = synthesize(data_root, writes)
    made = time.perf_counter() - t
    seconds = []
    for r in range(repeat):
        db = base / f"rebuilt-{r}.db"
        t = time.perf_counter()
        report = rebuild(run_dir, f"sqlite:///{db}")
        seconds.append(time.perf_counter() - t)
        con = sqlite3.connect(db)
        rows = con.execute("SELECT count(*) FROM writes").fetchone()[0]
        con.close()
        if report.added != [1] or report.writes != values.size or rows != values.size:
            raise SystemExit(f"rebuild made {rows} rows ({report}), expected {values.size}")
    dumps, datasets = values.shape
    checked = sorted({0, 1, dumps // 2, dumps - 1})
    with sdm.open("metacost", "r", catalog=f"sqlite:///{base}/rebuilt-0.db", run=1) as s:
        g = s.group("g")
        for step in checked:
            for i in (0, datasets - 1):
                got = g.read(f"d{i}", step, verify=True)
                if not np.array_equal(got, values[step, i:i + 1]):
                    raise SystemExit(f"step {step} of d{i}: read {got}, wrote {values[step, i]}")
    return {"writes": int(values.size), "meta_bytes": (run_dir / ".sdm-meta.jsonl").stat().st_size,
            "synthesize_s": made, "seconds": seconds, "checked_steps": checked, "rows": int(values.size)}


# ----------------------------------------------------------------------------- driver
def run_worker(ranks: int, directory: Path, args: argparse.Namespace, limit: float) -> dict[str, Any]:
    """Start one MPI job of the worker; its samples."""
    command = [mpiexec(), "-n", str(ranks), sys.executable, str(Path(__file__).resolve()), "--worker",
               "--dir", str(directory), "--repeat", str(args.repeat), "--count", str(args.count),
               "--dumps", str(args.dumps), "--bulk", str(args.bulk), "--small", *map(str, args.small)]
    return dict(json.loads(run_job(command, worker_env(), limit)))


def stats(values: list[float]) -> dict[str, float]:
    return {"median": median(values), "min": min(values), "max": max(values), "n": len(values)}


def summarize(samples: dict[str, dict[str, list[float]]]) -> dict[str, Any]:
    """Per case: each contender's stats, and the cost of the meta-file (paired within rounds)."""
    out: dict[str, Any] = {}
    for case, by in samples.items():
        row: dict[str, Any] = {c: stats(v) for c, v in by.items()}
        for on, off in (("on", "off"), ("on-async", "off-async")):
            pairs = list(zip(by[on], by[off]))
            row[f"cost {on}"] = stats([a - b for a, b in pairs])
            row[f"share {on}"] = stats([(a - b) / b for a, b in pairs])
        out[case] = row
    return out


def _fmt(s: dict[str, float], scale: float, digits: int) -> str:
    return f"{s['median'] * scale:.{digits}f} ({s['min'] * scale:.{digits}f} to {s['max'] * scale:.{digits}f})"


def markdown(data: dict[str, Any]) -> str:
    m = data["meta"]
    lines = ["# Meta-file cost and rebuild time", "",
             f"SDM {m['sdm_version']} ({m['git_commit']}), {m['cores']} cores, {m['mpi']}, Python {m['python']}, "
             f"{m['date']}; {data['repeat']} interleaved rounds, `sync=True`, SQLite catalog, `method=\"posix\"`, "
             "checksums on. Medians (min to max over the rounds). Cost = time with the meta-file minus without it, "
             "paired within a round.", "",
             "Goals: at most 3 % of bulk-write time, at most 0.1 ms per small write.", "",
             "| dir | ranks | case | on | off | cost | share | async on | async off | async cost |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for d, by_ranks in data["results"].items():
        for ranks, cases in by_ranks.items():
            for case, r in cases.items():
                kind, size = case.split(":")
                small = kind == "small"
                scale, unit, digits = (1e3, "ms", 3) if small else (1.0, "s", 3)
                label = f"{int(size)} B / rank" if small else f"bulk {int(size) // MiB} MiB"
                lines.append(f"| {d} ({data['fs'][d]}) | {ranks} | {label} ({unit}/write) | {_fmt(r['on'], scale, digits)} "
                             f"| {_fmt(r['off'], scale, digits)} | {_fmt(r['cost on'], scale, digits)} "
                             f"| {_fmt(r['share on'], 100, 1)} % | {_fmt(r['on-async'], scale, digits)} "
                             f"| {_fmt(r['off-async'], scale, digits)} | {_fmt(r['cost on-async'], scale, digits)} |")
    rb = data["rebuild"]
    lines += ["", f"`sdm rebuild` of {rb['writes']:,} write rows (one run, 10 datasets x {rb['writes'] // 10:,} dumps, "
              f"a {rb['meta_bytes'] / 1e6:.1f} MB meta-file) into a new SQLite catalog under {rb['dir']}: "
              f"{_fmt(stats(rb['seconds']), 1.0, 2)} s (goal: under 30 s); checked: {rb['rows']:,} rows, "
              f"steps {rb['checked_steps']} of two datasets read back with `verify=True`.", ""]
    return "\n".join(lines)


def plot(data: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from _plots import save_png

    labels, costs, lows, highs = [], [], [], []
    for d, by_ranks in data["results"].items():
        for ranks, cases in by_ranks.items():
            for case, r in cases.items():
                kind, size = case.split(":")
                labels.append(f"{Path(d).name or d} n={ranks} {kind} {int(size) // 1024 if int(size) >= 1024 else size}"
                              f"{'K' if int(size) >= 1024 else 'B'}")
                s = r["share on"]
                costs.append(s["median"] * 100)
                lows.append((s["median"] - s["min"]) * 100)
                highs.append((s["max"] - s["median"]) * 100)
    fig, ax = plt.subplots(figsize=(7.6, 0.25 * len(labels) + 1.2), dpi=72)
    ax.barh(range(len(labels)), costs, xerr=[lows, highs], color="tab:blue", error_kw={"lw": 0.8})
    ax.axvline(3.0, color="tab:red", lw=0.8, ls="--")
    ax.set_yticks(range(len(labels)), labels, fontsize=6)
    ax.set_xlabel("meta-file cost, % of the write time without it (median, min-max); goal for bulk: 3 %", fontsize=7)
    ax.grid(True, axis="x", lw=0.3)
    fig.tight_layout()
    save_png(fig, path, dpi=72)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", action="append", help="directory to measure in (repeatable; default /dev/shm and /var/tmp)")
    p.add_argument("--ranks", default="1,2", help="rank counts, comma separated")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--count", type=int, default=200, help="small writes per size and round")
    p.add_argument("--small", type=int, nargs="+", default=[512, 65536], help="small write sizes, bytes per rank")
    p.add_argument("--bulk", type=int, default=128, help="MiB per bulk dump, all ranks together")
    p.add_argument("--dumps", type=int, default=3, help="bulk dumps per round")
    p.add_argument("--rebuild-writes", type=int, default=100_000)
    p.add_argument("--quick", action="store_true", help="tiny sizes, one round (a smoke test, not a measurement)")
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(argparse.Namespace(**{**vars(args), "dir": args.dir[0]}))
        return
    if args.quick:
        args.repeat, args.count, args.small, args.bulk, args.dumps, args.rebuild_writes = 1, 3, [512], 1, 1, 1000
    dirs = [Path(d).resolve() for d in (args.dir or ["/dev/shm", "/var/tmp"])]
    load = os.getloadavg()[0]
    data: dict[str, Any] = {"repeat": args.repeat, "count": args.count, "dumps": args.dumps, "results": {},
                            "samples": {}, "fs": {}}
    for d in dirs:
        from sdm._cli.bench import fs_type

        data["fs"][str(d)] = fs_type(d) or "unknown"
        for ranks in (int(r) for r in args.ranks.split(",")):
            base = Path(tempfile.mkdtemp(prefix="sdm-metacost-", dir=d))
            try:
                print(f"{d}, {ranks} ranks ...", flush=True)
                samples = run_worker(ranks, base, args, limit=3600)
            finally:
                shutil.rmtree(base, ignore_errors=True)
            data["samples"].setdefault(str(d), {})[str(ranks)] = samples
            data["results"].setdefault(str(d), {})[str(ranks)] = summarize(samples)
    base = Path(tempfile.mkdtemp(prefix="sdm-metacost-rebuild-", dir=dirs[-1]))
    try:
        print(f"rebuild of {args.rebuild_writes} writes in {dirs[-1]} ...", flush=True)
        data["rebuild"] = {**time_rebuild(base, args.rebuild_writes, args.repeat), "dir": str(dirs[-1])}
    finally:
        shutil.rmtree(base, ignore_errors=True)
    from mpi4py import MPI

    data["meta"] = meta(MPI.COMM_SELF, dirs[-1], load, **provenance())
    from _io_bench import write_results

    write_results(args.out, "metafile_cost", data, markdown(data), lambda path: plot(data, path))


if __name__ == "__main__":
    main()
