"""SDM side by side with raw MPI-IO, parallel HDF5, PnetCDF and ADIOS2 on one MPI stack.

Run after ``make peers`` (which builds the stack into ``.peers/``)::

    python benchmarks/peers.py                 # 5 rounds, 4 ranks, /dev/shm and /var/tmp (about 25 min)
    python benchmarks/peers.py --quick         # small sizes, 1 round: a smoke test (about 2 min)

Every measurement is one ``mpiexec`` job of Debian's Open MPI running one contender:
``peer_python.py`` (SDM, raw MPI-IO through mpi4py, h5py with ``driver="mpio"``) or the C
drivers ``peer_pnetcdf`` and ``peer_adios2``. All follow the contract of
``peer_stack/peers_common.h``: data generated before the clock, then between barriers
open, define, every step, close and an ``fsync`` of every output file; rank 0 prints one
JSON line. Rounds interleave the contenders (their order rotates each round); ratios are
taken within a round, then summarised as medians with min-max. Before every read the
driver drops the output files' pages from the page cache with
``posix_fadvise(POSIX_FADV_DONTNEED)`` (cold reads on the disk; on tmpfs the pages are the
storage and stay). The first round checks every contender's output: ``op=check`` reads it
back through the same library and compares every value with the formula of
``peer_stack/geometry.py``; ``tests/benchmarks/test_peers.py`` compares the raw and SDM
files byte for byte with numpy.

Writes ``benchmarks/results/peers.json`` (every sample), ``peers.md`` and ``peers.png``.
"""

from __future__ import annotations

import argparse
import json
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
sys.path.insert(0, str(HERE / "peer_stack"))
sys.path.insert(0, str(HERE))
import geometry as geo  # noqa: E402

REPO = HERE.parent
CONTENDERS = ("sdm", "mpiio", "hdf5", "pnetcdf", "adios2")
PEERS = ("mpiio", "hdf5", "pnetcdf", "adios2")
LABELS = {"sdm": "SDM", "mpiio": "raw MPI-IO", "hdf5": "parallel HDF5", "pnetcdf": "PnetCDF", "adios2": "ADIOS2"}
#: (pattern, op) rows of the table, in order; "e" is the one-process box read of pattern a's output
ROWS = (("a", "write"), ("a", "read"), ("b", "write"), ("c", "write"), ("d", "write"), ("e", "box"), ("f", "scan"))
#: the issue's goals: SDM's speed over each peer's (time ratio peer / SDM) must reach these
GOALS: dict[tuple[str, str], float] = {
    ("a", "mpiio"): 0.95, ("a", "hdf5"): 1.0, ("a", "pnetcdf"): 1.0,
    ("b", "hdf5"): 1.5, ("b", "pnetcdf"): 1.0, ("c", "hdf5"): 1.5, ("c", "pnetcdf"): 1.0,
    ("d", "hdf5"): 2.0, ("d", "pnetcdf"): 2.0, ("d", "adios2"): 1.0,
    ("f", "hdf5"): 100.0, ("f", "pnetcdf"): 100.0,
}
NOT_AVAILABLE = 3  # exit code of a driver that cannot do an op ("n/a" in the table)


class Stack:
    """The peer stack built by ``make peers``: its mpiexec, Python and C drivers."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.python = root / "venv" / "bin" / "python"
        self.mpiexec = Path(shutil.which("mpiexec.openmpi") or "/usr/bin/mpiexec.openmpi")
        missing = [p for p in (self.python, self.mpiexec, root / "bin" / "peer_pnetcdf", root / "bin" / "peer_adios2")
                   if not p.exists()]
        if missing:
            raise SystemExit(f"the peer stack is incomplete ({', '.join(map(str, missing))} missing): run `make peers`")

    def mpiexec_args(self, nprocs: int) -> list[str]:
        """``mpiexec -n nprocs`` of Open MPI: as root, oversubscribed, unbound (as MPICH's Hydra runs by default)."""
        return [str(self.mpiexec), "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-n", str(nprocs)]

    def command(self, contender: str, nprocs: int, args: dict[str, Any]) -> list[str]:
        """The mpiexec command line of one job."""
        mpi = self.mpiexec_args(nprocs)
        if contender in ("pnetcdf", "adios2"):
            exe = [str(self.root / "bin" / f"peer_{contender}")]
        else:
            exe = [str(self.python), "-m", "mpi4py", str(HERE / "peer_stack" / "peer_python.py"), f"contender={contender}"]
        return mpi + exe + [f"{k}={v}" for k, v in args.items()]

    def facts(self) -> dict[str, Any]:
        """Versions of what is compared."""
        def run(code: str) -> str:
            out = subprocess.run([str(self.python), "-c", code], capture_output=True, text=True, timeout=120)
            return out.stdout.strip() or out.stderr.strip()[-200:]
        pnetcdf = subprocess.run(["pkg-config", "--modversion", "pnetcdf"], capture_output=True, text=True).stdout.strip()
        adios2 = (self.root / "adios2" / "include" / "adios2" / "common" / "ADIOSConfig.h")
        adios_version = next((line.split()[-1].strip('"') for line in adios2.read_text().splitlines()
                              if "ADIOS2_VERSION_STR" in line), "?") if adios2.exists() else "?"
        return {"mpi": run("from mpi4py import MPI; print(MPI.Get_library_version().replace(chr(0), '').splitlines()[0])"),
                "hdf5": run("import h5py; print(h5py.version.hdf5_version, 'h5py', h5py.version.version)"),
                "pnetcdf": pnetcdf, "adios2": adios_version,
                "mpi4py": run("import mpi4py; print(mpi4py.__version__)")}


def job_env() -> dict[str, str]:
    """The environment of every job: no SDM settings of the caller's, this checkout's sources first.

    Open MPI's shared-memory transport is told to copy through its buffers
    (``btl_vader_single_copy_mechanism=none``): the single-copy mechanism (CMA) needs
    ptrace rights that containers often refuse; it is the same for every contender.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SDM_", "OMPI_", "PMIX_"))}
    env.update({"OMPI_MCA_btl_vader_single_copy_mechanism": "none", "PYTHONUNBUFFERED": "1"})
    env["PYTHONPATH"] = str(REPO / "src")
    return env


def launch(cmd: list[str], env: dict[str, str], limit: float) -> tuple[int, str, str] | None:
    """Run one job in its own session: ``(exit status, stdout, stderr)``, or None when it did not end within
    *limit* seconds (then its whole process group is killed)."""
    proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.communicate()
        return None
    return proc.returncode, out, err


def job(stack: Stack, contender: str, nprocs: int, args: dict[str, Any], limit: float) -> dict[str, Any]:
    """Run one job; its report, or ``{"error": ...}`` / ``{"na": reason}``."""
    ended = launch(stack.command(contender, nprocs, args), job_env(), limit)
    if ended is None:
        return {"error": f"no answer within {limit:.0f} s"}
    returncode, out, err = ended
    if returncode == NOT_AVAILABLE:
        return {"na": (err.strip().splitlines() or ["not available"])[-1][:200]}
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if returncode != 0 or not lines:
        return {"error": f"exit {returncode}: {err.strip()[-600:]}"}
    return json.loads(lines[-1])


def evict(path: Path) -> None:
    """Drop the page-cache pages of every file under *path* (``POSIX_FADV_DONTNEED``; no host setting changes)."""
    for base, _, names in os.walk(path):
        for name in names:
            fd = os.open(os.path.join(base, name), os.O_RDONLY)
            try:
                os.fdatasync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def pattern_args(key: str, quick: bool, where: Path, maps: Path) -> dict[str, Any]:
    """The command-line sizes of pattern *key* (``e`` uses pattern a's)."""
    pat = geo.PATTERNS["a" if key == "e" else key]
    args: dict[str, Any] = dict(pat.quick if quick else pat.full)
    if key == "c":
        args["map"] = str(maps / "map")
    if key == "e":
        n = args["n"]
        args["lo"] = ",".join(str(n // 4) for _ in range(3))
        args["hi"] = ",".join(str(n // 4 + n // 2) for _ in range(3))
    return {"pattern": "a" if key == "e" else key, **args, "dir": str(where)}


def write_maps(maps: Path, rows: int, nprocs: int) -> None:
    """Pattern c's map files for *nprocs* ranks."""
    for r, part in enumerate(geo.make_map(rows, nprocs)):
        part.astype("<i8").tofile(geo.map_path(maps / "map", nprocs, r))


class Run:
    """One place (a directory on tmpfs or disk) measured for several rounds."""

    def __init__(self, stack: Stack, place: str, parent: Path, opts: argparse.Namespace) -> None:
        self.stack, self.place, self.opts = stack, place, opts
        self.base = Path(tempfile.mkdtemp(prefix="sdm-peers-", dir=parent))
        self.samples: list[dict[str, Any]] = []
        self.problems: list[str] = []

    def calibrate(self, nprocs: int) -> None:
        """``sdm calibrate`` a directory of this place once (outside every timing), as an installation does;
        SDM's jobs copy the constants into their catalogs, so ``auto`` plans with this file system's figures."""
        where, url = self.base / "calibration", f"sqlite:///{self.base / 'calibration.db'}"
        where.mkdir()
        env = job_env()
        cmd = [*self.stack.mpiexec_args(nprocs), str(self.stack.python.parent / "sdm"), "calibrate", str(where),
               "--catalog", url, *(["--quick"] if self.opts.quick else [])]
        done = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=1800)
        if done.returncode == 2 and "degenerate" in done.stderr:  # refused (sdm calibrate): SDM runs uncalibrated
            why = next(line for line in done.stderr.splitlines() if "degenerate" in line)  # not MPI's banners
            self.problems.append(f"{self.place}: sdm calibrate refused its fit, SDM ran uncalibrated: {why.strip()}")
            print(self.problems[-1], flush=True)
            shutil.rmtree(where, ignore_errors=True)
            return
        done.check_returncode()
        code = ("import json, sys; from sdm.catalog import Catalog; c = Catalog(sys.argv[1], create=False); "
                "print(json.dumps(c.latest_calibration(sys.argv[2])))")
        out = subprocess.run([str(self.stack.python), "-c", code, url, str(where.resolve())], env=env, check=True,
                             capture_output=True, text=True, timeout=300).stdout
        (self.base / "calibration.json").write_text(out)
        shutil.rmtree(where, ignore_errors=True)

    def record(self, rnd: int, key: str, op: str, contender: str, nprocs: int, report: dict[str, Any]) -> None:
        self.samples.append({"place": self.place, "round": rnd, "pattern": key, "op": op, "contender": contender,
                             "nprocs": nprocs, **report})
        if "error" in report:
            self.problems.append(f"{self.place} {key}/{op} {contender} at {nprocs}: {report['error']}")
        if report.get("mismatches"):
            self.problems.append(f"{self.place} {key}/{op} {contender}: {report['mismatches']} wrong values")
        if "matches" in report and report["matches"] != geo.scan_expected(int(self.opts.scan_count)):
            self.problems.append(f"{self.place} f/scan {contender}: {report['matches']} matches, "
                                 f"expected {geo.scan_expected(int(self.opts.scan_count))}")

    def go(self, rnd: int, key: str, op: str, contender: str, nprocs: int, where: Path, limit: float = 900) -> dict:
        args = {"op": op, **pattern_args(key, self.opts.quick, where, self.base)}
        if key == "f":
            args["count"] = self.opts.scan_count
        if contender == "sdm" and (self.base / "calibration.json").exists():
            args["calibration"] = str(self.base / "calibration.json")
        report = job(self.stack, contender, nprocs, args, limit)
        # one-process reads and scans (e, f) belong to the table of the main rank count
        if key in ("e", "f"):
            self.record(rnd, key, op, contender, self.opts.nprocs, {**report, "ranks": nprocs})
        else:
            self.record(rnd, key, op, contender, nprocs, report)
        return report

    def round(self, rnd: int, order: list[str], nprocs: int, keys: list[str]) -> None:
        """One round: every pattern, every contender in *order*."""
        for key in keys:
            if key in ("e", "f"):
                continue
            for c in order:
                where = self.base / f"{key}-{c}-{nprocs}-r{rnd}"
                shutil.rmtree(where, ignore_errors=True)
                where.mkdir(parents=True)
                w = self.go(rnd, key, "write", c, nprocs, where)
                if "error" in w or "na" in w:
                    shutil.rmtree(where, ignore_errors=True)
                    continue
                if rnd == 0 and nprocs == self.opts.nprocs:  # the first round proves every output right
                    self.go(rnd, key, "check", c, nprocs, where)
                if key == "a":
                    evict(where)
                    self.go(rnd, "a", "read", c, nprocs, where)
                    if "e" in keys and nprocs == self.opts.nprocs:
                        evict(where)
                        self.go(rnd, "e", "box", c, 1, where)
                shutil.rmtree(where, ignore_errors=True)
        if "f" in keys and nprocs == self.opts.nprocs:
            for c in order:
                if c == "mpiio":
                    continue
                where = self.base / f"f-{c}"
                if not where.exists():
                    where.mkdir(parents=True)
                    self.go(rnd, "f", "make", c, 1, where, limit=1800)
                evict(where)
                self.go(rnd, "f", "scan", c, 1, where)

    def close(self) -> None:
        shutil.rmtree(self.base, ignore_errors=True)


def columns(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Every sample as one row of a table (``{"fields": [...], "rows": [[...], ...]}``: a small JSON file)."""
    fields = sorted({k for s in samples for k in s})
    return {"fields": fields, "rows": [[s.get(k) for k in fields] for s in samples]}


def summarise(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Per (place, nprocs, pattern, op, contender): median and min-max seconds; per peer: SDM's speed ratio."""
    cells: dict[tuple, list[float]] = {}
    by_round: dict[tuple, dict[str, float]] = {}
    for s in samples:
        if "seconds" not in s or s["op"] in ("check", "make"):
            continue
        key = (s["place"], s["nprocs"], s["pattern"], s["op"])
        cells.setdefault((*key, s["contender"]), []).append(s["seconds"])
        by_round.setdefault((*key, s["round"]), {})[s["contender"]] = s["seconds"]
    out: dict[str, Any] = {"cells": {}, "ratios": {}}
    for (place, n, pat, op, c), secs in cells.items():
        out["cells"]["|".join(map(str, (place, n, pat, op, c)))] = {
            "median": median(secs), "min": min(secs), "max": max(secs), "n": len(secs)}
    ratios: dict[tuple, list[float]] = {}
    for (place, n, pat, op, _), times in by_round.items():
        if "sdm" not in times:
            continue
        for peer, t in times.items():
            if peer != "sdm":
                ratios.setdefault((place, n, pat, op, peer), []).append(t / times["sdm"])
    for (place, n, pat, op, peer), rs in ratios.items():
        out["ratios"]["|".join(map(str, (place, n, pat, op, peer)))] = {
            "median": median(rs), "min": min(rs), "max": max(rs), "n": len(rs)}
    return out


def markdown(data: dict[str, Any]) -> str:
    """The report: per place, seconds of every contender and SDM's speed ratio to each peer."""
    summary, meta, opts = data["summary"], data["meta"], data["options"]
    lines = ["# SDM and its peers on one MPI stack", "",
             f"{meta['date']}, SDM {meta['sdm_version']} ({meta['git_commit']}), {meta['host']}, "
             f"{meta['cores']} cores, load {meta['load_before']:.1f} -> {meta['load_after']:.1f}; "
             f"{meta['stack']['mpi']}; HDF5 {meta['stack']['hdf5']}; PnetCDF {meta['stack']['pnetcdf']}; "
             f"ADIOS2 {meta['stack']['adios2']}; mpi4py {meta['stack']['mpi4py']}.",
             f"{opts['rounds']} interleaved rounds, {opts['nprocs']} ranks; wall time of the whole run "
             f"{data['wall_seconds'] / 60:.1f} min. Seconds: median (min-max). Ratio: the peer's time over SDM's "
             "in the same round (above 1: SDM faster), median (min-max); goals from the issue in brackets.", ""]
    for pattern_key in ("a", "b", "c", "d", "f"):
        p = geo.PATTERNS[pattern_key]
        params = p.quick if opts["quick"] else p.full
        lines.append(f"* **{pattern_key}**: {p.title}: " + ", ".join(f"{k}={v}" for k, v in params.items())
                     + (f", {p.nbytes(params) / 2**20:.0f} MiB per write" if p.nbytes(params) else ""))
    lines.append("* **e**: one process reads a sub-box (half the edge in every dimension) of `a0` at the last step "
                 "of pattern a's output (cold on the disk)")
    for place in opts["places"]:
        for nprocs in [opts["nprocs"], *opts["scale"]]:
            rows = [(pat, op) for pat, op in ROWS if any(k.startswith(f"{place}|{nprocs}|{pat}|{op}|")
                                                      for k in summary["cells"])]
            if not rows:
                continue
            lines += ["", f"## {place} ({data['fs'].get(place, '?')}), {nprocs} ranks", "",
                      "| pattern | " + " | ".join(f"{LABELS[c]} s" for c in CONTENDERS) + " | "
                      + " | ".join(f"vs {LABELS[c]}" for c in PEERS) + " |",
                      "|---" * (1 + len(CONTENDERS) + len(PEERS)) + "|"]
            for pat, op in rows:
                cells = []
                for c in CONTENDERS:
                    cell = summary["cells"].get(f"{place}|{nprocs}|{pat}|{op}|{c}")
                    na = data["na"].get(f"{pat}|{op}|{c}")
                    cells.append(f"{cell['median']:.3g} ({cell['min']:.3g}-{cell['max']:.3g})" if cell
                                 else ("n/a" if na or c == "mpiio" and pat == "f" else "-"))
                for c in PEERS:
                    r = summary["ratios"].get(f"{place}|{nprocs}|{pat}|{op}|{c}")
                    goal = GOALS.get((pat, c)) if op in ("write", "scan") else None
                    mark = "" if goal is None else (f" [>= {goal:g}: {'met' if r and r['median'] >= goal else 'missed'}]")
                    cells.append(f"{r['median']:.2f} ({r['min']:.2f}-{r['max']:.2f}){mark}" if r else "-")
                lines.append(f"| {pat} {op} | " + " | ".join(cells) + " |")
    if data["na"]:
        lines += ["", "Not available:", ""] + [f"* {k.replace('|', ' ')}: {v}" for k, v in sorted(data["na"].items())]
    if data["problems"]:
        lines += ["", "Problems:", ""] + [f"* {p}" for p in data["problems"]]
    return "\n".join(lines) + "\n"


def plot(data: dict[str, Any], path: Path) -> None:
    """SDM's speed ratio to each peer per pattern (log scale), one panel per place."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from _plots import save_png

    opts, summary = data["options"], data["summary"]
    places = opts["places"]
    fig, axes = plt.subplots(1, len(places), figsize=(5.2 * len(places), 3.4), squeeze=False)
    rows = [r for r in ROWS if r != ("a", "read")] + [("a", "read")]
    for ax, place in zip(axes[0], places):
        width = 0.8 / len(PEERS)
        for i, peer in enumerate(PEERS):
            xs, ys = [], []
            for j, (pat, op) in enumerate(rows):
                r = summary["ratios"].get(f"{place}|{opts['nprocs']}|{pat}|{op}|{peer}")
                if r:
                    xs.append(j + (i - len(PEERS) / 2 + 0.5) * width)
                    ys.append(r["median"])
            ax.bar(xs, ys, width, label=LABELS[peer])
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_yscale("log")
        ax.set_xticks(range(len(rows)), [f"{p} {o}" for p, o in rows], fontsize=7)
        ax.set_title(f"{place}, {opts['nprocs']} ranks: peer time / SDM time", fontsize=9)
        ax.legend(fontsize=6)
    fig.tight_layout()
    save_png(fig, path)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    ap.add_argument("--nprocs", type=int, default=4, help="ranks (default 4)")
    ap.add_argument("--scale", default="2,8", help="other rank counts for patterns a and d ('' for none)")
    ap.add_argument("--disk", default="/var/tmp", help="directory on the disk (default /var/tmp)")
    ap.add_argument("--places", default="/dev/shm,disk", help="comma list of /dev/shm and disk")
    ap.add_argument("--patterns", default="a,b,c,d,e,f", help="patterns to run")
    ap.add_argument("--contenders", default=",".join(CONTENDERS))
    ap.add_argument("--scan-count", type=int, default=None, help="runs or files of pattern f (default 1000)")
    ap.add_argument("--quick", action="store_true", help="small sizes, 1 round, no other rank counts")
    ap.add_argument("--peers", default=str(REPO / ".peers"), help="the stack built by `make peers`")
    ap.add_argument("--out", default=str(HERE / "results"), help="results directory")
    opts = ap.parse_args(argv)
    if opts.quick:
        opts.rounds, opts.scale = 1, ""
    opts.scan_count = opts.scan_count or geo.PATTERNS["f"].__dict__["quick" if opts.quick else "full"]["count"]
    scale = [int(x) for x in opts.scale.split(",") if x]
    keys = [k for k in opts.patterns.split(",") if k]
    contenders = [c for c in opts.contenders.split(",") if c]
    unknown = sorted(set(contenders) - set(CONTENDERS)) + sorted(set(keys) - set("abcdef"))
    if unknown:
        ap.error(f"unknown contenders or patterns: {unknown}")
    stack = Stack(Path(opts.peers))
    start, load_before = time.monotonic(), os.getloadavg()[0]
    places = [p for p in opts.places.split(",") if p]
    parents = {"/dev/shm": Path("/dev/shm"), "disk": Path(opts.disk)}
    runs = [Run(stack, place, parents[place], opts) for place in places]
    try:
        for run in runs:
            if "sdm" in contenders:
                print(f"calibrating {run.place} for SDM (sdm calibrate, {opts.nprocs} ranks)", flush=True)
                run.calibrate(opts.nprocs)
            for n in {opts.nprocs, *scale}:
                if "c" in keys:
                    write_maps(run.base, (geo.PATTERNS["c"].quick if opts.quick else geo.PATTERNS["c"].full)["rows"], n)
        for rnd in range(opts.rounds):
            order = contenders[rnd % len(contenders):] + contenders[:rnd % len(contenders)]
            for run in runs:
                print(f"round {rnd + 1}/{opts.rounds} on {run.place}: {', '.join(order)}", flush=True)
                run.round(rnd, order, opts.nprocs, keys)
                for n in scale:
                    run.round(rnd, order, n, [k for k in keys if k in ("a", "d")])
        fs = {run.place: _fs(run.base) for run in runs}
    finally:
        for run in runs:
            run.close()
    samples = [s for run in runs for s in run.samples]
    na = {f"{s['pattern']}|{s['op']}|{s['contender']}": s["na"] for s in samples if "na" in s}
    import mpi4py

    mpi4py.rc.initialize = mpi4py.rc.finalize = False  # the driver only starts jobs: no MPI in this process
    from _io_bench import provenance, write_results  # noqa: E402 (needs sdm importable)

    from sdm.bench import rounded

    data = {"meta": {**provenance(), "host": platform.node(), "cores": os.cpu_count(), "load_before": load_before,
                     "load_after": os.getloadavg()[0], "python": platform.python_version(),
                     "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "stack": stack.facts()},
            "options": {"rounds": opts.rounds, "nprocs": opts.nprocs, "scale": scale, "places": places,
                        "quick": opts.quick, "scan_count": opts.scan_count, "disk": opts.disk},
            "fs": fs, "wall_seconds": time.monotonic() - start, "samples": rounded(columns(samples)),
            "na": na, "problems": [p for run in runs for p in run.problems]}
    shown = {**data, "summary": summarise(samples)}  # derived from the samples: not stored
    name = "peers-quick" if opts.quick else "peers"
    write_results(Path(opts.out), name, data, markdown(shown), lambda path: plot(shown, path))
    return 1 if data["problems"] else 0


def _fs(path: Path) -> str:
    from sdm._cli.bench import fs_type

    return fs_type(path) or "unknown"


if __name__ == "__main__":
    sys.exit(main())
