"""Nonblocking dumps: how much of the dump time SDM's ``wait=False`` hides behind compute, against ADIOS2 BP5's AsyncWrite.

Run after ``make peers`` (the peer stack of ``benchmarks/peers.py``: one Open MPI for both contenders)::

    python benchmarks/async.py            # n=128, 4 arrays, 16 steps, 2 and 4 ranks, disk and /dev/shm, 3 rounds
    python benchmarks/async.py --quick    # n=32, 3 steps, 2 ranks, 1 round: a smoke test

The ASTRO3D template in compact form (``peer_stack/async_python.py`` for SDM,
``peer_stack/async_adios2.c`` for ADIOS2): ``arrays`` float32 arrays of ``n^3`` values,
block-distributed over a 3-D grid of ranks, every step a compute phase (sweeps of a 7-point
stencil over each local block: numpy for SDM, the same stencil in C for ADIOS2) and a dump of
every array. Three modes per contender, each one fresh ``mpiexec`` job: ``compute`` (no dumps),
``sync`` (SDM: blocking ``write_step``; ADIOS2: BP5 with ``AsyncWrite=Off``) and ``async`` (SDM:
``write_step(..., wait=False)``, the arrays reused by the next sweep at once, ``close`` waits for
the dumps; ADIOS2: ``AsyncWrite=On``). Totals between barriers include open, every step, close
and the data on storage (SDM syncs every dump before its commit; the ADIOS2 driver fsyncs every
file after close). Before the rounds, one short ``sync`` job per contender, place and rank count
calibrates the sweeps per step so that the compute of a step takes about as long as its
synchronous dump (the C stencil is faster than numpy's, so ADIOS2 gets more sweeps: each
contender hides its own dump behind compute of the same length). Rounds interleave the
configurations, the three jobs of one next to each other (the load of other work changes over
minutes), their order rotating; medians with min-max. The hidden fraction of one round is
``h = 1 - (T_async - T_compute) / (T_sync - T_compute)``.

Without the peer stack (``--peers`` missing) only SDM runs, on this Python's MPI.

Writes ``benchmarks/results/async.json`` (every sample), ``async.md`` and ``async.png``.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
DRIVER = HERE / "peer_stack" / "async_python.py"
from _peer_jobs import PeerJobs, dims3  # noqa: E402 - the peer stack's jobs
LABELS = {"sdm": "SDM", "adios2": "ADIOS2 BP5"}
MODES = ("compute", "sync", "async")


class Launcher(PeerJobs):
    """The jobs of this benchmark (:class:`PeerJobs` with ADIOS2's ``async_adios2`` driver)."""

    def __init__(self, peers: Path) -> None:
        super().__init__(peers, "async_adios2")
        if self.stack and not self.adios2.exists():
            self.why = f"{self.adios2} is not built: run `make peers`"

    def contenders(self) -> tuple[str, ...]:
        return ("sdm", "adios2") if self.stack and self.adios2.exists() else ("sdm",)

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SDM_", "OMPI_", "PMIX_"))}
        env.update({"PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1"})
        if self.stack:
            env["OMPI_MCA_btl_vader_single_copy_mechanism"] = "none"
        return env

    def job(self, contender: str, nprocs: int, args: dict[str, Any], limit: float = 300) -> dict[str, Any]:
        if contender == "adios2":
            exe = [str(self.adios2), f"grid={','.join(map(str, dims3(nprocs)))}"]
        else:
            exe = [str(self.python), "-m", "mpi4py", str(DRIVER)]
        ended = self.run(self.mpi(nprocs) + exe + [f"{k}={v}" for k, v in args.items()], self.env(), limit)
        return ended if isinstance(ended, dict) else self.answer(*ended)

    def facts(self) -> dict[str, Any]:
        done = subprocess.run([str(self.python), "-c", "from mpi4py import MPI; import numpy; print(MPI.Get_library_"
                               "version().replace(chr(0), '').splitlines()[0], '| numpy', numpy.__version__)"],
                              capture_output=True, text=True, timeout=120, env=self.env())
        facts: dict[str, Any] = {"mpi": done.stdout.strip() or done.stderr.strip()[-200:]}
        if self.adios2_config():
            facts["adios2"] = self.adios2_version()
        return facts


# ----------------------------------------------------------------------------- jobs

def run_one(launcher: Launcher, base: Path, contender: str, nprocs: int, args: dict[str, Any]) -> dict[str, Any]:
    where = Path(tempfile.mkdtemp(prefix=f"{contender}-{args['mode']}-", dir=base))
    try:
        return launcher.job(contender, nprocs, {**args, "dir": where})
    finally:
        shutil.rmtree(where, ignore_errors=True)


def calibrate(launcher: Launcher, base: Path, contender: str, nprocs: int, opts: argparse.Namespace) -> dict[str, Any]:
    """Sweeps per step so that a step's compute takes about as long as its synchronous dump (one short job)."""
    steps = max(2, min(3, opts.steps))
    r = run_one(launcher, base, contender, nprocs, {"mode": "sync", "n": opts.n, "arrays": opts.arrays,
                                                    "steps": steps, "sweeps": 1})
    if "error" in r:
        return r
    dump = (r["dump"] + r["close"]) / steps  # the synchronous dump of a step, its share of close included
    sweep = r["compute"] / steps
    return {"dump_per_step": dump, "sweep_seconds": sweep, "sweeps": max(1, round(dump / max(sweep, 1e-9)))}


def stat(values: list[float]) -> dict[str, float] | None:
    return {"median": median(values), "min": min(values), "max": max(values), "n": len(values)} if values else None


def summarise(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Per place|nprocs|contender: T of each mode, h per round, the handles' sums (SDM)."""
    cells: dict[str, dict[str, Any]] = {}
    for s in samples:
        if "seconds" not in s:
            continue
        key = f"{s['place']}|{s['nprocs']}|{s['contender']}"
        cell = cells.setdefault(key, {"rounds": {}})
        cell["rounds"].setdefault(s["round"], {})[s["mode"]] = s
    out = {}
    for key, cell in cells.items():
        rounds = cell["rounds"]
        t = {m: [r[m]["seconds"] for r in rounds.values() if m in r] for m in MODES}
        hs, bounds = [], []
        for r in rounds.values():
            if all(m in r for m in MODES) and r["sync"]["seconds"] > r["compute"]["seconds"]:
                c = r["compute"]["seconds"]
                hs.append(1 - (r["async"]["seconds"] - c) / (r["sync"]["seconds"] - c))
                if "cpu" in r["async"] and "cpu" in r["compute"]:  # CPU the dumps added, with every core computing
                    bounds.append(1 - (r["async"]["cpu"] - r["compute"]["cpu"]) / (r["sync"]["seconds"] - c))
        asy = [r["async"] for r in rounds.values() if "async" in r]
        row: dict[str, Any] = {f"T_{m}": stat(t[m]) for m in MODES}
        row["h"] = stat(hs)
        row["h_bound"] = stat(bounds)
        row["dump_sync"] = stat([r["sync"]["dump"] + r["sync"]["close"] for r in rounds.values() if "sync" in r])
        for m in MODES:
            row[f"cpu_{m}"] = stat([r[m]["cpu"] for r in rounds.values() if m in r and "cpu" in r[m]])
        row["submit_async"] = stat([a["dump"] for a in asy])
        row["close_async"] = stat([a["close"] for a in asy])
        for k in ("handle_seconds", "handle_blocked", "handle_waited", "handle_cpu_max"):
            if any(k in a for a in asy):
                row[k] = stat([a[k] for a in asy if k in a])
        out[key] = row
    return out


def goals(summary: dict[str, Any], places: list[str], nprocs: list[int]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    sdm = summary.get("disk|2|sdm", {}).get("h")
    if "disk" in places and 2 in nprocs:
        out.append({"goal": "disk, 2 ranks: SDM hides h >= 0.8 of its dump time",
                    "met": bool(sdm and sdm["median"] >= 0.8),
                    "figures": f"h {fmt(sdm, '.2f')}" if sdm else "not measured"})
    for place in places:
        for p in nprocs:
            a = summary.get(f"{place}|{p}|sdm", {}).get("h")
            b = summary.get(f"{place}|{p}|adios2", {}).get("h")
            if a and b:
                out.append({"goal": f"{place}, {p} ranks: SDM's h at least ADIOS2 BP5's with AsyncWrite=On",
                            "met": a["median"] >= b["median"],
                            "figures": f"SDM {fmt(a, '.2f')}, ADIOS2 {fmt(b, '.2f')}"})
    return out


def fmt(cell: dict[str, float] | None, digits: str = ".3g") -> str:
    if not cell:
        return "-"
    return f"{cell['median']:{digits}} ({cell['min']:{digits}}-{cell['max']:{digits}})"


def markdown(data: dict[str, Any], summary: dict[str, Any], goal_rows: list[dict[str, Any]]) -> str:
    meta, opts = data["meta"], data["options"]
    mib = opts["n"] ** 3 * 4 * opts["arrays"] / 2**20
    lines = ["# Nonblocking dumps: SDM's wait=False against ADIOS2 BP5's AsyncWrite", "",
             f"{meta['date']}, SDM {meta['sdm_version']} ({meta['git_commit']}), {meta['host']}, {meta['cores']} cores, "
             f"load {meta['load_before']:.1f} -> {meta['load_after']:.1f}; {meta['stack'].get('mpi')}; "
             f"ADIOS2 {meta['stack'].get('adios2', 'not run')}.",
             f"n={opts['n']}, {opts['arrays']} float32 arrays ({mib:.0f} MiB per dump), {opts['steps']} steps, a dump "
             f"every step; {opts['rounds']} interleaved rounds; wall time {data['wall_seconds'] / 60:.1f} min. "
             "Seconds of the whole job between barriers (open, steps, close, data on storage), median (min-max). "
             "h = 1 - (T_async - T_compute) / (T_sync - T_compute), per round. sweeps: stencil sweeps per step, "
             "calibrated so that a step's compute takes about its synchronous dump's time. SDM handles: sums over "
             "the steps of rank 0's `seconds` (background run time), `blocked` (time the application waited; at "
             "close every pending handle counts the same wait from its start, so the sum overlaps) and `waited` "
             "(memory bound); submit: seconds in the `write_step(wait=False)` calls (the copies), close: in "
             "`close` (the wait for the last dumps); worker CPU: CPU seconds of the worker thread for the dumps "
             "(the largest rank's sum). CPU: CPU seconds of a rank's process (every thread, the "
             "kernel's work for it included), the largest rank, median. h bound: 1 - (CPU_async - CPU_compute) / "
             "(T_sync - T_compute) per round, the fraction that could hide if every core computes and the "
             "dumps' CPU work cannot overlap it.",
             f"Ranks share {meta['cores']} cores with the worker threads (SDM: one per rank; ADIOS2: AsyncWrite's) "
             "and with compute: with as many ranks as cores the background dump takes cycles from compute, which "
             "bounds h below 1 whatever the library does; at 4 ranks on 2 cores it is oversubscribed."]
    if data.get("not_run"):
        lines.append(f"Not run: {data['not_run']}.")
    lines += ["", "## Goals", ""] + [f"* {'met' if g['met'] else 'MISSED'}: {g['goal']}: {g['figures']}"
                                     for g in goal_rows]
    lines += ["", "## Times", "", "| place | ranks | contender | sweeps | T_compute s | T_sync s | T_async s | h | "
              "h bound | sync dump s | submit s | close s | handles seconds | handles blocked | handles waited | "
              "worker CPU s | CPU s compute / sync / async |", "|---" * 17 + "|"]
    for key, row in summary.items():
        place, p, c = key.split("|")
        cal = data["calibration"].get(key, {})
        lines.append(f"| {place} | {p} | {LABELS[c]} | {cal.get('sweeps', '-')} | {fmt(row['T_compute'])} | "
                     f"{fmt(row['T_sync'])} | {fmt(row['T_async'])} | {fmt(row['h'], '.2f')} | "
                     f"{fmt(row.get('h_bound'), '.2f')} | {fmt(row['dump_sync'])} | "
                     + " | ".join(fmt(row.get(k)) for k in ("submit_async", "close_async", "handle_seconds",
                                                            "handle_blocked", "handle_waited", "handle_cpu_max"))
                     + " | " + " / ".join(f"{row[f'cpu_{m}']['median']:.3g}" if row.get(f"cpu_{m}") else "-"
                                          for m in MODES) + " |")
    lines += ["", "File systems: " + ", ".join(f"{k} {v}" for k, v in data["fs"].items()) + "."]
    if data["problems"]:
        lines += ["", "Problems:", ""] + [f"* {p}" for p in data["problems"]]
    return "\n".join(lines) + "\n"


def plot(summary: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from _plots import save_png

    configs = sorted({tuple(k.split("|")[:2]) for k in summary})
    fig, ax = plt.subplots(figsize=(5.0, 2.8))
    for i, (c, colour) in enumerate((("sdm", "tab:blue"), ("adios2", "tab:orange"))):
        xs, ys, lo, hi = [], [], [], []
        for j, (place, p) in enumerate(configs):
            h = summary.get(f"{place}|{p}|{c}", {}).get("h")
            if h:
                xs.append(j + (i - 0.5) * 0.35)
                ys.append(h["median"])
                lo.append(h["median"] - h["min"])
                hi.append(h["max"] - h["median"])
        if xs:
            ax.bar(xs, ys, width=0.35, yerr=[lo, hi], color=colour, label=LABELS[c], capsize=2)
    ax.axhline(0.8, color="k", lw=0.6, ls="--")
    ax.set_xticks(range(len(configs)), [f"{pl}\n{p} ranks" for pl, p in configs], fontsize=7)
    ax.set_ylabel("hidden fraction h", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=7)
    fig.tight_layout()
    save_png(fig, path, dpi=72)
    plt.close(fig)


def columns(samples: list[dict[str, Any]]) -> dict[str, Any]:
    fields = sorted({k for s in samples for k in s})
    return {"fields": fields, "rows": [[s.get(k) for k in fields] for s in samples]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=None, help="edge of the global arrays (default 128; --quick 32)")
    ap.add_argument("--arrays", type=int, default=4, help="float32 arrays per dump (default 4)")
    ap.add_argument("--steps", type=int, default=None, help="steps, a dump each (default 16; --quick 3)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3; --quick 1)")
    ap.add_argument("--nprocs", default=None, help="comma list of rank counts (default 2,4; --quick 2)")
    ap.add_argument("--disk", default="/var/tmp", help="directory on the disk (default /var/tmp)")
    ap.add_argument("--places", default="disk,/dev/shm", help="comma list of disk and /dev/shm")
    ap.add_argument("--contenders", default="sdm,adios2", help="comma list of sdm and adios2 (those available)")
    ap.add_argument("--quick", action="store_true", help="n=32, 3 steps, 2 ranks, 1 round")
    ap.add_argument("--peers", default=str(REPO / ".peers"), help="the stack built by `make peers`")
    ap.add_argument("--out", default=str(HERE / "results"), help="results directory")
    opts = ap.parse_args(argv)
    if opts.quick:
        opts.rounds = 1
    opts.n = opts.n or (32 if opts.quick else 128)
    opts.steps = opts.steps or (3 if opts.quick else 16)
    nprocs = [int(p) for p in (opts.nprocs or ("2" if opts.quick else "2,4")).split(",") if p]
    launcher = Launcher(Path(opts.peers))
    contenders = [c for c in launcher.contenders() if c in opts.contenders.split(",")]
    places = [p for p in opts.places.split(",") if p]
    parents = {"/dev/shm": Path("/dev/shm"), "disk": Path(opts.disk)}
    start, load_before = time.monotonic(), os.getloadavg()[0]
    samples: list[dict[str, Any]] = []
    problems: list[str] = []
    calibration: dict[str, Any] = {}
    bases = {p: Path(tempfile.mkdtemp(prefix="sdm-async-", dir=parents[p])) for p in places}
    try:
        for place in places:
            for p in nprocs:
                for c in contenders:
                    cal = calibrate(launcher, bases[place], c, p, opts)
                    calibration[f"{place}|{p}|{c}"] = cal
                    print(f"calibration {place} {p} ranks {c}: {cal}", flush=True)
                    if "error" in cal:
                        problems.append(f"calibration {place} {p} ranks {c}: {cal['error']}")
        # the three modes of a configuration run one after the other (the load of other work on the host
        # changes over minutes: the jobs of one h share it); the configurations and the modes rotate per round
        configs = [(place, p, c) for place in places for p in nprocs for c in contenders
                   if "error" not in calibration[f"{place}|{p}|{c}"]]
        for rnd in range(opts.rounds):
            shift = (rnd * 3) % max(1, len(configs))
            modes = MODES[rnd % 3:] + MODES[:rnd % 3]
            todo = [(*cfg, m) for cfg in configs[shift:] + configs[:shift] for m in modes]
            print(f"round {rnd + 1}/{opts.rounds}: {len(todo)} jobs", flush=True)
            for place, p, c, m in todo:
                args = {"mode": m, "n": opts.n, "arrays": opts.arrays, "steps": opts.steps,
                        "sweeps": calibration[f"{place}|{p}|{c}"]["sweeps"]}
                r = run_one(launcher, bases[place], c, p, args)
                samples.append({"place": place, "nprocs": p, "contender": c, "mode": m, "round": rnd,
                                "sweeps": args["sweeps"], **r})
                if "error" in r:
                    problems.append(f"{place} {p} ranks {c} {m} round {rnd}: {r['error']}")
                elif m == "async" and c == "sdm" and r.get("states") != "done":
                    problems.append(f"{place} {p} ranks sdm async round {rnd}: handles {r.get('states')}")
        # every job of a configuration computed the same values (the same checksum, contender by contender)
        for key in calibration:
            sums = {s["checksum"] for s in samples if f"{s['place']}|{s['nprocs']}|{s['contender']}" == key
                    and "checksum" in s}
            if len(sums) > 1:
                problems.append(f"{key}: the jobs' checksums differ: {sorted(sums)}")
        from sdm._cli.bench import fs_type

        fs = {p: fs_type(bases[p]) or "unknown" for p in places}
    finally:
        for b in bases.values():
            shutil.rmtree(b, ignore_errors=True)
    import mpi4py

    mpi4py.rc.initialize = mpi4py.rc.finalize = False  # the driver only starts jobs
    from _io_bench import provenance, write_results

    data = {"meta": {**provenance(), "host": platform.node(), "cores": os.cpu_count(), "load_before": load_before,
                     "load_after": os.getloadavg()[0], "python": platform.python_version(),
                     "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "stack": launcher.facts()},
            "options": {"n": opts.n, "arrays": opts.arrays, "steps": opts.steps, "rounds": opts.rounds,
                        "nprocs": nprocs, "places": places, "disk": opts.disk, "quick": opts.quick,
                        "contenders": contenders},
            "fs": fs, "wall_seconds": time.monotonic() - start, "not_run": launcher.why,
            "calibration": calibration, "samples": columns(samples), "problems": problems}
    summary = summarise(samples)
    goal_rows = goals(summary, places, nprocs)
    data["summary"], data["goals"] = summary, goal_rows
    write_results(Path(opts.out), "async", data, markdown(data, summary, goal_rows), lambda path: plot(summary, path))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
