"""What one small write costs in collectives and in the catalog, at 1 to 64 ranks (docs/scale.md).

Run from the repository (no mpiexec: it starts one MPI job per rank count itself)::

    python benchmarks/rank_scale.py                              # P = 1..64, 30 rounds, /dev/shm
    python benchmarks/rank_scale.py --ranks 1,2,4 --rounds 5     # a smoke test
    python benchmarks/rank_scale.py --series before              # a second series beside the first

Each rank count P runs in its own ``mpiexec -n P`` (with a timeout); more ranks than cores
are oversubscribed (MPICH's default: ranks poll while they wait), which inflates the
latency of every collective far beyond what a network would give.  That is measured
rather than assumed: every round also times the machine's bare collectives with the
sizes of SDM's messages, and the model of docs/scale.md is fitted on those.

Contenders, interleaved within each round (their order rotated from round to round):

``barrier``, ``allgather<w>``, ``bcast<w>``, ``allreduce<w>``
    bare ``MPI.Barrier`` and mpi4py buffer collectives of ``w`` int64 words per rank
    (the sizes of SDM's exchanges for 1 and 4 datasets), each the mean of ``--reps``
    back-to-back calls after a barrier; the slowest rank's time.
``write1``, ``write4``
    one SDM dump (``write_step``) of 1 and of 4 float64 datasets of ``--per-rank``
    elements per rank (1-D ``Block``, level 3, checksum and sync on), a new step each
    round, from a barrier to the return on each rank.
``read1``
    one SDM read of the dataset ``write1`` wrote in the round before.

The time of rank 0 (the one that talks to the catalog, so the critical path) is split
by wrapping SDM's functions for the duration of the job (the library is not
instrumented): *catalog* (rank 0 inside ``Catalog.reserve``, ``record_writes`` and
``lookup_write``), *collective* (inside ``_collective.exchange``, ``root_vector`` and
the opening exchange ``Group._agree_call``, minus the catalog time inside them),
*I/O* (``Group._transfer`` and the syncs) and *other* (the rest: checks, planning,
checksum shares).  Two warm-up rounds are not recorded.

Writes ``benchmarks/results/rank_scale.{json,md,png}``; a run replaces its own
``--series`` in the JSON and keeps the others (e.g. before and after a change).
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
from typing import Any, Callable, Sequence

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

CATEGORIES = ("collective", "catalog", "io", "nested")  # nested: catalog time inside a collective
WRITES = ("write1", "write4")
SDM_OPS = (*WRITES, "read1")
WARMUP = 2
KEPT = ("total", "collective", "catalog", "io")  # what the results keep of each round (rank 0's split)


# ----------------------------------------------------------------------------- the MPI job
class Clocks:
    """Seconds this rank spent inside wrapped callables, per category (nested calls of one category count once)."""

    def __init__(self, targets: dict[str, list[tuple[Any, str]]]) -> None:
        self.seconds = dict.fromkeys([*targets, "nested"], 0.0)
        self._depth = dict.fromkeys(targets, 0)
        self._real: list[tuple[Any, str, Any]] = []
        for category, pairs in targets.items():
            for owner, name in pairs:
                real = getattr(owner, name)
                self._real.append((owner, name, real))
                setattr(owner, name, self._wrap(category, real))

    def _wrap(self, category: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            self._depth[category] += 1
            t0 = time.perf_counter()
            try:
                return real(*args, **kwargs)
            finally:
                self._depth[category] -= 1
                if not self._depth[category]:
                    self.seconds[category] += time.perf_counter() - t0
                    if category == "catalog" and self._depth.get("collective"):
                        self.seconds["nested"] += time.perf_counter() - t0
        return timed

    def snapshot(self) -> dict[str, float]:
        """The seconds so far, per category."""
        return dict(self.seconds)

    def restore(self) -> None:
        """Put the real callables back."""
        for owner, name, real in reversed(self._real):
            setattr(owner, name, real)


def bare_ops(comm: Any, words: dict[str, Sequence[int]]) -> dict[str, Callable[[], None]]:
    """The machine's own collectives with the sizes of SDM's messages (int64 words per rank)."""
    import numpy as np
    from mpi4py import MPI

    ops: dict[str, Callable[[], None]] = {"barrier": comm.Barrier}
    for w in words["allgather"]:
        v, out = np.zeros(w, dtype=np.int64), np.zeros((comm.Get_size(), w), dtype=np.int64)
        ops[f"allgather{w}"] = lambda v=v, out=out: comm.Allgather(v, out)
    for w in words["bcast"]:
        b = np.zeros(w, dtype=np.int64)
        ops[f"bcast{w}"] = lambda b=b: comm.Bcast(b, root=0)
    for w in words["allreduce"]:
        v, out = np.zeros(w, dtype=np.int64), np.zeros(w, dtype=np.int64)
        ops[f"allreduce{w}"] = lambda v=v, out=out: comm.Allreduce(v, out, op=MPI.MAX)
    return ops


def worker(a: argparse.Namespace) -> None:
    """One rank count: every round times the bare collectives and SDM's writes and read (collective)."""
    import numpy as np
    from mpi4py import MPI

    import sdm
    import sdm.group
    from _io_bench import meta, scratch
    from sdm.catalog.catalog import Catalog
    from sdm.storage import FileCache

    comm = MPI.COMM_WORLD
    P, rank = comm.Get_size(), comm.Get_rank()
    load_before = os.getloadavg()[0]
    n = a.per_rank
    ops = bare_ops(comm, {"allgather": (3, 9, 73), "bcast": (1, 4, 13), "allreduce": (4, 10, 73)})
    names = list(ops) + list(SDM_OPS)
    samples: dict[str, list[list[float]]] = {k: [] for k in names}  # per round: total then categories
    with scratch(comm, None, "sdm-ranks-", a.dir) as d:
        s = sdm.open("rankscale", root=d, catalog=f"sqlite:///{d}/catalog.db", comm=comm, method=a.method)
        groups = {1: s.make_group("one", ["a"], dtype="f8", shape=(P * n,), level=3),
                  4: s.make_group("four", ["a", "b", "c", "d"], dtype="f8", shape=(P * n,), level=3)}
        local = np.arange(n, dtype="f8") + rank * n
        exchanges = [(sdm.group, name) for name in ("exchange", "root_vector", "reduce_exchange")
                     if hasattr(sdm.group, name)]  # reduce_exchange: the closing Allreduce, where SDM has it
        clocks = Clocks({
            "collective": [*exchanges, (sdm.group.Group, "_agree_call")],
            "catalog": [(Catalog, "reserve"), (Catalog, "record_writes"), (Catalog, "lookup_write")],
            "io": [(sdm.group.Group, "_transfer"), (FileCache, "sync_unagreed")],
        })

        def sdm_op(kind: str, step: int) -> None:
            if kind == "read1":
                groups[1].read("a", step - 1)  # written in the round before (or before the rounds)
            else:
                g = groups[int(kind[-1])]
                g.write_step(step, {name: local + step for name in g.datasets})

        for g in groups.values():
            g.write_step(0, {name: local for name in g.datasets})
        try:
            for r in range(WARMUP + a.rounds):
                order = names[r % len(names):] + names[:r % len(names)]
                for kind in order:
                    comm.Barrier()
                    before = clocks.snapshot()
                    t0 = time.perf_counter()
                    if kind in ops:
                        for _ in range(a.reps):
                            ops[kind]()
                        total = (time.perf_counter() - t0) / a.reps
                    else:
                        sdm_op(kind, r + 1)
                        total = time.perf_counter() - t0
                    after = clocks.snapshot()
                    if r >= WARMUP:
                        samples[kind].append([total, *(after[c] - before[c] for c in CATEGORIES)])
        finally:
            clocks.restore()
        methods = sorted({w.method for _, _, w in s.catalog.writes(s.run_id)}) if rank == 0 and s.catalog else []
        s.close()
        info = meta(comm, Path(d), load_before, per_rank_bytes=n * 8, method=a.method, reps=a.reps,
                    rounds=a.rounds, methods_chosen=methods, closing=closing_kind())
    everyone = comm.gather(samples, root=0)
    if rank == 0:
        out: dict[str, Any] = {"meta": info, "ops": {}}
        for k in names:
            arr = np.array([e[k] for e in everyone])  # (ranks, rounds, 1 + categories)
            entry = {"slowest": arr[:, :, 0].max(axis=0).tolist()}
            if k in SDM_OPS:
                for i, c in enumerate(("total", *CATEGORIES)):
                    entry[f"rank0_{c}"] = arr[0, :, i].tolist()
            out["ops"][k] = entry
        Path(a.part).write_text(json.dumps(out))


# ----------------------------------------------------------------------------- the model
def stats(values: Sequence[float]) -> list[float]:
    """``[median, min, max]``."""
    return [median(values), min(values), max(values)]


def split(entry: dict[str, list[float]]) -> dict[str, list[float]]:
    """Rank 0's time of each round split into collective (its own catalog time taken out), catalog, I/O, other."""
    if "rank0_total" not in entry:  # stored: already split
        tot, net, cat, io = (entry[k] for k in KEPT)
    else:
        tot, col, cat, io, nested = (entry[f"rank0_{c}"] for c in ("total", *CATEGORIES))
        net = [c - k for c, k in zip(col, nested)]
    other = [t - n_ - k - i for t, n_, k, i in zip(tot, net, cat, io)]
    return {"total": tot, "collective": net, "catalog": cat, "io": io, "other": other}


def closing_kind() -> str:
    """How the SDM measured closes an access: ``allreduce`` (``_collective.reduce_exchange``) or ``allgather``."""
    import sdm._collective

    return "allreduce" if hasattr(sdm._collective, "reduce_exchange") else "allgather"


def messages(datasets: int, kind: str = "write", closing: str = "allreduce") -> list[tuple[str, int]]:
    """SDM's collective messages of one access without failures: ``(collective, int64 words per rank)``.

    A write: the opening allgather (flag, kind, call hash, stats hash, plan length and a
    68-word plan field), the reservation's broadcast (flag and 3 words per dataset),
    the closing exchange (an allgather of flag, seconds and checksum share per dataset,
    or an allreduce of those and a header word) and the commit's one-word broadcast.  A
    read: the opening allgather and the closing exchange of one dataset.
    """
    close = ("allreduce", 2 + 2 * datasets) if closing == "allreduce" else ("allgather", 1 + 2 * datasets)
    if kind == "read":
        return [("allgather", 73), close]
    return [("allgather", 73), ("bcast", 1 + 3 * datasets), close, ("bcast", 1)]


def fit(points: list[tuple[int, int, float]], cores: int) -> tuple[float, float, float]:
    """Least squares of ``t = a*log2(P) + b*(P-1)*bytes + o*max(0, P-cores)`` over ``(P, bytes, t)``.

    ``a`` and ``b`` are the network's latency per step and time per byte; ``o`` the
    oversubscription's cost per rank beyond the cores (ranks polling for the CPU).
    Returns ``(a, b, o)`` (non-negative).
    """
    import numpy as np

    rows = np.array([(math.log2(p), (p - 1) * m, max(0, p - cores)) for p, m, _ in points if p > 1], dtype=float)
    t = np.array([x for p, _, x in points if p > 1], dtype=float)
    coef = np.zeros(3)
    keep = [j for j in range(3) if rows.size and rows[:, j].any()]
    while keep:  # least squares; a term that comes out negative is dropped and the rest fitted again
        got, *_ = np.linalg.lstsq(rows[:, keep], t, rcond=None)
        if (got >= 0).all():
            coef[keep] = got
            break
        keep = [j for j, g in zip(keep, got) if g >= 0]
    return float(coef[0]), float(coef[1]), float(coef[2])


def model(parts: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Fit the collective and catalog models; the model against the measurement at every P.

    Collectives: each message costs SDM's own software time ``sigma`` (its Python around
    the MPI call, from the 1-rank job, where MPI's share is nil) plus the machine's
    ``a*log2(P) + b*(P-1)*bytes`` fitted on the bare collectives' medians.  The catalog:
    ``c + d*D`` on rank 0, fitted on the jobs with no more ranks than cores (where no
    polling rank takes rank 0's core).
    """
    import numpy as np

    cores = next(iter(parts.values()))["meta"]["cores"]
    closing = next(iter(parts.values()))["meta"].get("closing", "allgather")
    med = {p: {k: median(v["slowest"] if "slowest" in v else v["total"]) for k, v in part["ops"].items()}
           for p, part in parts.items()}
    consts: dict[str, Any] = {}
    for coll in ("allgather", "bcast", "allreduce"):
        pts = [(p, int(k[len(coll):]) * 8, t) for p, m in med.items() for k, t in m.items()
               if k.startswith(coll) and k[len(coll):].isdigit()]
        consts[coll] = fit(pts, cores)
    consts["barrier"] = fit([(p, 0, m["barrier"]) for p, m in med.items()], cores)
    low = [part for p, part in parts.items() if p <= cores]
    cat = [(D, x) for part in low for D, w in ((1, "write1"), (4, "write4")) for x in split(part["ops"][w])["catalog"]]
    (c, dd), *_ = np.linalg.lstsq(np.array([(1.0, D) for D, _ in cat]), np.array([x for _, x in cat]), rcond=None)
    consts["catalog"] = (float(c), float(dd))
    one = parts.get(1) or parts[min(parts)]
    sigma = {op: median(split(one["ops"][op])["collective"]) / len(messages(D, kind, closing))
             for op, D, kind in (("write1", 1, "write"), ("write4", 4, "write"), ("read1", 1, "read"))}
    consts["sigma"] = sigma

    def bare(p: int, coll: str, words: int) -> float:
        sizes = [int(k[len(coll):]) for k in med[p] if k.startswith(coll) and k[len(coll):].isdigit()]
        return med[p][f"{coll}{min(sizes, key=lambda w: abs(w - words))}"]

    table = []
    for p in sorted(parts):
        row: dict[str, Any] = {"P": p}
        for op, D, kind in (("write1", 1, "write"), ("write4", 4, "write"), ("read1", 1, "read")):
            msgs = messages(D, kind, closing)
            row[op] = {k: stats(v) for k, v in split(parts[p]["ops"][op]).items()}
            soft = sigma[op] * len(msgs)
            row[op]["model_collective"] = soft + (sum(consts[k][0] * math.log2(p) + consts[k][1] * (p - 1) * w * 8
                                                      + consts[k][2] * max(0, p - cores) for k, w in msgs)
                                                  if p > 1 else 0.0)
            row[op]["bare_collective"] = soft + sum(bare(p, k, w) for k, w in msgs)
            if kind == "write":
                row[op]["model_catalog"] = consts["catalog"][0] + consts["catalog"][1] * D
        table.append(row)
    return {"constants": consts, "closing": closing, "cores": cores, "table": table,
            "bare": {str(p): med[p] for p in sorted(med)}}


# ----------------------------------------------------------------------------- report
def ms(x: float) -> str:
    return f"{x * 1e3:.3f}"


def spread(s: Sequence[float]) -> str:
    return f"{ms(s[0])} ({ms(s[1])}-{ms(s[2])})"


def markdown(data: dict[str, Any]) -> str:
    """The report: per series the split of rank 0's time per write and the model against it."""
    lines = ["# What one small write costs at 1-64 ranks", "",
             "Times in ms: median (min-max) over the rounds. `collective`: rank 0 inside SDM's exchanges, the "
             "catalog time inside them (reservation, commit) taken out; `catalog`: rank 0 in `reserve` + `record_writes` (+ `lookup_write` for "
             "a read); `io`: MPI-IO and sync; `other`: the rest. `model`: the fitted model of docs/scale.md "
             "(collectives: a*log2(P) + b*(P-1)*bytes + o*max(0, P-cores) per message, fitted on the bare collectives); `bare`: the sum "
             "of the bare collectives measured at that P with the sizes of SDM's messages (both plus SDM's software time "
             "per message, sigma, measured at P=1). Ranks beyond the "
             "2 cores are oversubscribed (MPICH polls while waiting): latencies from P=4 on are the scheduler's.", ""]
    for name, series in data["series"].items():
        m, mod = series["meta"], series["model"]
        lines += [f"## Series `{name}`", "",
                  f"SDM {m['sdm_version']} ({m['git_commit']}), {m['mpi']}, {m['cores']} cores, {m['fs']}, "
                  f"{m['per_rank_bytes']} B per rank and dataset, {m['rounds']} rounds, method {m['method']} "
                  f"(chose {', '.join(m['methods_chosen'])}), closing exchange {mod['closing']}, {m['date']}; 1-min load "
                  f"before/after each P: " + ", ".join(f"{p}: {a:.1f}/{b:.1f}" for p, (a, b) in series["loads"].items())
                  + ".", ""]
        c = mod["constants"]
        lines += ["Fitted: " + "; ".join(f"{k} a={v[0] * 1e6:.1f} us, b={v[1] * 1e9:.3f} ns/B, o={v[2] * 1e6:.1f} us"
                                         for k, v in c.items() if k not in ("catalog", "sigma"))
                  + "; SDM's software time per message sigma " + ", ".join(f"{k} {v * 1e6:.0f} us"
                                                                          for k, v in c["sigma"].items())
                  + f"; catalog c={c['catalog'][0] * 1e3:.3f} ms + d={c['catalog'][1] * 1e3:.3f} ms per dataset.", ""]
        for op in SDM_OPS:
            lines += [f"### {op}", "",
                      "| P | total | collective | model | bare | catalog | model | io | other | collective share | "
                      "catalog share |", "|---|---|---|---|---|---|---|---|---|---|---|"]
            for row in mod["table"]:
                r = row[op]
                tot = r["total"][0]
                lines.append(
                    f"| {row['P']} | {spread(r['total'])} | {spread(r['collective'])} | {ms(r['model_collective'])} | "
                    f"{ms(r['bare_collective'])} | {spread(r['catalog'])} | "
                    f"{ms(r['model_catalog']) if 'model_catalog' in r else '-'} | {spread(r['io'])} | "
                    f"{spread(r['other'])} | {r['collective'][0] / tot:.2f} | {r['catalog'][0] / tot:.2f} |")
            lines.append("")
        lines += ["### Bare collectives (slowest rank, median ms)", "",
                  "| P | " + " | ".join(next(iter(mod["bare"].values()))) + " |",
                  "|---|" + "---|" * len(next(iter(mod["bare"].values())))]
        for p, row in mod["bare"].items():
            lines.append(f"| {p} | " + " | ".join(ms(v) for v in row.values()) + " |")
        lines.append("")
    return "\n".join(lines)


def plot(data: dict[str, Any], path: Path) -> None:
    """Rank 0's collective and catalog time per 4-dataset write against P, measured and modelled (small PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3), dpi=64)
    for i, (name, series) in enumerate(data["series"].items()):
        t = series["model"]["table"]
        P = [row["P"] for row in t]
        for key, label, marker in (("collective", "collective", "o"), ("catalog", "catalog", "s")):
            med = [row["write4"][key][0] * 1e3 for row in t]
            lo = [m - row["write4"][key][1] * 1e3 for m, row in zip(med, t)]
            hi = [row["write4"][key][2] * 1e3 - m for m, row in zip(med, t)]
            ax.errorbar(P, med, yerr=[lo, hi], marker=marker, ls="-" if i == 0 else ":", capsize=2,
                        label=f"{label} ({name})")
        ax.plot(P, [row["write4"]["model_collective"] * 1e3 for row in t], "k--" if i == 0 else "k:", lw=1,
                label=f"collective model ({name})")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("ranks P (2 cores)")
    ax.set_ylabel("ms per 4-dataset write (rank 0)")
    ax.legend(fontsize=6)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    from _plots import save_png
    save_png(fig, path)
    plt.close(fig)


# ----------------------------------------------------------------------------- driver
def run(a: argparse.Namespace) -> None:
    """One ``mpiexec`` per rank count, then the model, the report and the plot."""
    from _io_bench import RESULTS
    from _mpijob import mpiexec, worker_env

    out_dir = a.out or RESULTS
    parts: dict[int, dict[str, Any]] = {}
    tmp = tempfile.mkdtemp(prefix="sdm-rankscale-")
    try:
        for p in a.ranks:
            part = Path(tmp) / f"p{p}.json"
            cmd = [mpiexec(), "-n", str(p), sys.executable, str(Path(__file__).resolve()), "--worker",
                   "--part", str(part), "--rounds", str(a.rounds), "--reps", str(a.reps), "--per-rank",
                   str(a.per_rank), "--dir", a.dir, "--method", a.method]
            t0 = time.perf_counter()
            subprocess.run(cmd, env=worker_env(), check=True, timeout=a.timeout)
            parts[p] = json.loads(part.read_text())
            w = parts[p]["ops"]["write4"]["rank0_total"]
            print(f"P={p}: {time.perf_counter() - t0:.0f} s, write4 median {median(w) * 1e3:.2f} ms", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    path = out_dir / "rank_scale.json"
    data = json.loads(path.read_text()) if path.exists() else {"series": {}}
    first = next(iter(parts.values()))["meta"]
    series = {"meta": {k: v for k, v in first.items() if k not in ("nprocs", "load_before", "load_after")},
              # the slowest rank's samples of SDM's operations and every rank's means, rounded
              "loads": {str(p): [x["meta"]["load_before"], x["meta"]["load_after"]] for p, x in parts.items()},
              "model": model(parts),
              "samples": {str(p): {k: {f: [round(x, 6) for x in v] for f, v in e.items()}
                                   for k, e in x["ops"].items() if k in SDM_OPS} for p, x in parts.items()}}
    data["series"][a.series] = series
    write(out_dir, data)


def refit(out_dir: Path) -> None:
    """Fit the model again on every stored series (its SDM samples and bare medians) and rewrite the report."""
    path = out_dir / "rank_scale.json"
    data = json.loads(path.read_text())
    for series in data["series"].values():
        bare = series["model"]["bare"]
        samples = {p: {k: {f: list(v) for f, v in e.items()} for k, e in ops.items()}  # seconds
                   for p, ops in series["samples"].items()}
        parts = {int(p): {"meta": series["meta"],
                          "ops": {**{k: {"slowest": [v]} for k, v in bare[p].items() if k not in SDM_OPS},
                                  **samples[p]}} for p in samples}
        series["model"] = model(parts)
    write(out_dir, data)


def write(out_dir: Path, data: dict[str, Any]) -> None:
    """``rank_scale.json``, ``.md`` and ``.png`` in *out_dir*; prints the Markdown."""
    from sdm.bench import rounded

    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "rank_scale.json").write_text(json.dumps(rounded(data), separators=(",", ":")))
    text = markdown(data)
    (out_dir / "rank_scale.md").write_text(text)
    plot(data, out_dir / "rank_scale.png")
    print(text)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", default="1,2,4,8,16,32,64", help="rank counts, comma-separated")
    p.add_argument("--rounds", type=int, default=30, help="recorded rounds per rank count (30)")
    p.add_argument("--reps", type=int, default=5, help="back-to-back calls per bare collective sample (5)")
    p.add_argument("--per-rank", type=int, default=512, help="float64 elements per rank and dataset (512: 4 KiB)")
    p.add_argument("--dir", default="/dev/shm", help="where the scratch data root goes (/dev/shm)")
    p.add_argument("--method", default="auto", help="SDM I/O method (auto)")
    p.add_argument("--timeout", type=float, default=900, help="seconds per mpiexec job (900)")
    p.add_argument("--series", default="current", help="name of this run's series in the results (current)")
    p.add_argument("--out", type=Path, default=None, help="results directory (benchmarks/results)")
    p.add_argument("--refit", action="store_true", help="fit the model again on the stored results, no measuring")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--part", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        worker(a)
        return
    if a.refit:
        from _io_bench import RESULTS

        refit(a.out or RESULTS)
        return
    a.ranks = [int(x) for x in a.ranks.split(",")]
    run(a)


if __name__ == "__main__":
    main()
