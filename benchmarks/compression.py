"""Compressed datasets: SDM's codecs against uncompressed SDM, parallel HDF5's filters and ADIOS2's ZFP operator.

Run after ``make peers`` (the peer stack of ``benchmarks/peers.py``: one Open MPI for every contender)::

    python benchmarks/compression.py            # n=192, 3 rounds, 4 ranks, /dev/shm and /var/tmp (about 15 min)
    python benchmarks/compression.py --quick    # n=32, 1 round: a smoke test

Three fields of ``n^3`` values, two steps each (written by the driver to raw files before any
job): ``smooth``, the x velocity of a Taylor-Green vortex ``sin(x - 0.3 s) cos(y) cos(z)`` in
float32; ``noisy``, the same plus 1 % Gaussian noise; ``ids``, the int32 ids of a lattice of
particles displaced by that flow (each cell holds the id of the particle now in it). Every
measurement is one ``mpiexec`` job of one contender and one codec (``peer_stack/compress_python.py``:
SDM, h5py with ``driver="mpio"``; ``peer_stack/compress_adios2.c``): the values are read before the
clock; between barriers come the open, define, every step, close and an ``fsync`` of every
output file. A write is followed by a read of every rank's block and, for SDM, a one-process
read of a sub-cube of edge 0.215 n (1 % of a step) of the last step; the output's pages are
dropped from the page cache before each read (cold on the disk). Every read is checked with
numpy against the input, every value: lossless exact, lossy within its bound. Rounds interleave
the jobs (their order rotates); medians with min-max. HDF5 writes collectively with one chunk
per rank's block (filtered parallel writes must be collective); its zstd, blosc2, ZFP and SZ3
filters are hdf5plugin's, loaded by HDF5 itself from ``HDF5_PLUGIN_PATH``.

Without the peer stack (``--peers`` missing) only SDM runs, on this Python's MPI.

Writes ``benchmarks/results/compression.json`` (every sample), ``compression.md`` and ``compression.png``.
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

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
DRIVER = HERE / "peer_stack" / "compress_python.py"
from _peer_jobs import PeerJobs, dims3  # noqa: E402 - the peer stack's jobs
from peers import evict  # noqa: E402 - the peer benchmark's page-cache eviction
NOT_AVAILABLE = 3
LABELS = {"sdm": "SDM", "hdf5": "parallel HDF5", "adios2": "ADIOS2"}

#: field -> (dtype, the codecs measured: codec -> contenders)
FIELDS: dict[str, tuple[str, dict[str, tuple[str, ...]]]] = {
    "smooth": ("<f4", {"none": ("sdm", "hdf5", "adios2"), "zstd:1:shuffle": ("sdm", "hdf5"),
                       "deflate:1:shuffle": ("hdf5",), "blosc2:zstd:1:bitshuffle": ("sdm", "hdf5"),
                       "zfp:tolerance=0.001": ("sdm", "hdf5", "adios2"), "zfp:rate=8": ("sdm", "hdf5"),
                       "sz3:relative=0.0001": ("sdm", "hdf5")}),
    # uncompressed: only the smooth field's (raw bytes take the same time whatever their values)
    "noisy": ("<f4", {"zstd:1:shuffle": ("sdm", "hdf5"),
                      "zfp:tolerance=0.001": ("sdm", "hdf5", "adios2")}),
    "ids": ("<i4", {"zstd:1:shuffle": ("sdm", "hdf5"), "blosc2:zstd:1:bitshuffle": ("sdm", "hdf5")}),
}
STEPS = 2


# ----------------------------------------------------------------------------- fields

def make_fields(where: Path, n: int) -> dict[str, str]:
    """The raw input files ``<field>.s<step>.raw`` (global arrays in C order); field -> prefix."""
    x = (2 * np.pi * np.arange(n) / n).astype(np.float64)
    rng = np.random.default_rng(20240601)
    out = {}
    for field in FIELDS:
        out[field] = str(where / field)
    for s in range(STEPS):
        X = x[:, None, None] - 0.3 * s
        u = (np.sin(X) * np.cos(x[None, :, None]) * np.cos(x[None, None, :]))
        u.astype("<f4").tofile(where / f"smooth.s{s}.raw")
        (u + 0.01 * rng.standard_normal(u.shape)).astype("<f4").tofile(where / f"noisy.s{s}.raw")
        v = -np.cos(X) * np.sin(x[None, :, None]) * np.cos(x[None, None, :])
        i, j, k = np.meshgrid(*(np.arange(n),) * 3, indexing="ij")
        # the particle now in cell (i, j, k) came from 4 (s + 1) cells upstream
        src_i = (i - np.rint(4 * (s + 1) * u)).astype(np.int64) % n
        src_j = (j - np.rint(4 * (s + 1) * v)).astype(np.int64) % n
        ((src_i * n + src_j) * n + k).astype("<i4").tofile(where / f"ids.s{s}.raw")
        del u, v, i, j, k, src_i, src_j
    return out


# ----------------------------------------------------------------------------- jobs

class Launcher(PeerJobs):
    """The jobs of this benchmark (:class:`PeerJobs` with ADIOS2's ``compress_adios2`` driver)."""

    def __init__(self, peers: Path) -> None:
        super().__init__(peers, "compress_adios2")

    def contenders(self) -> tuple[str, ...]:
        if not self.stack:
            return ("sdm",)
        return ("sdm", "hdf5", "adios2") if self.adios2.exists() else ("sdm", "hdf5")

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SDM_", "OMPI_", "PMIX_", "HDF5_"))}
        env.update({"PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO / "src")})
        if self.stack:
            env["OMPI_MCA_btl_vader_single_copy_mechanism"] = "none"
            env["HDF5_PLUGIN_PATH"] = self.plugin_path()
        return env

    def plugin_path(self) -> str:
        site = next((self.peers / "venv" / "lib").glob("python3*/site-packages"), None)
        return str(site / "hdf5plugin" / "plugins") if site else ""

    def command(self, contender: str, nprocs: int, args: dict[str, Any]) -> list[str]:
        mpi = self.mpi(nprocs)
        if contender == "adios2":
            exe = [str(self.adios2)]
            args = {**args, "grid": ",".join(map(str, dims3(nprocs))), "codec": "zfp" if args["codec"].startswith("zfp") else args["codec"],
                    "dtype": "f4" if args["dtype"] == "<f4" else "i4", "tolerance": "0.001"}
        else:
            exe = [str(self.python), "-m", "mpi4py", str(DRIVER), f"contender={contender}"]
        return mpi + exe + [f"{k}={v}" for k, v in args.items()]

    def job(self, contender: str, nprocs: int, args: dict[str, Any], limit: float = 600) -> dict[str, Any]:
        ended = self.run(self.command(contender, nprocs, args), self.env(), limit)
        if isinstance(ended, dict):
            return ended
        returncode, out, err = ended
        if returncode == NOT_AVAILABLE:  # the driver's own line, not MPI's banners
            said = [line for line in err.splitlines() if "compress_" in line or "this ADIOS2" in line]
            return {"na": (said or ["not available"])[-1][:240]}
        return self.answer(returncode, out, err)

    def facts(self) -> dict[str, Any]:
        def run(code: str) -> str:
            done = subprocess.run([str(self.python), "-c", code], capture_output=True, text=True, timeout=120,
                                  env=self.env())
            return done.stdout.strip() or done.stderr.strip()[-200:]
        facts = {"mpi": run("from mpi4py import MPI; print(MPI.Get_library_version().replace(chr(0), '')"
                            ".splitlines()[0])"),
                 "codecs": run("import importlib.metadata as m; print(', '.join(f'{p} {m.version(p)}' for p in "
                               "('numcodecs', 'blosc2', 'zfpy', 'pysz')))")}
        if self.stack:
            # which filters HDF5 loads from HDF5_PLUGIN_PATH alone (hdf5plugin not imported)
            facts["hdf5"] = run("import h5py; print(h5py.version.hdf5_version, 'h5py', h5py.version.version)")
            facts["hdf5_plugins"] = run(
                "import h5py; print(', '.join(f'{k} {h5py.h5z.filter_avail(i)}' for k, i in (('zstd', 32015), "
                "('blosc2', 32026), ('zfp', 32013), ('sz3', 32024))))")
            text = self.adios2_config()
            facts["adios2"] = self.adios2_version()
            defined = {line.split()[1] for line in text.splitlines() if line.startswith("#define ADIOS2_HAVE_")}
            facts["adios2_operators"] = ", ".join(op for op in ("Blosc2", "ZFP", "SZ", "SZ3", "MGARD")
                                                  if f"ADIOS2_HAVE_{op.upper()}" in defined) or "none"
        return facts


def box_of(n: int) -> tuple[str, str]:
    """A sub-cube of edge round(0.215 n) (1 % of a step) from n/3 on every axis."""
    edge = max(1, round(0.215 * n))
    lo = n // 3
    return ",".join([str(lo)] * 3), ",".join([str(lo + edge)] * 3)


def jobs_of(contenders: tuple[str, ...], fields: tuple[str, ...] = tuple(FIELDS),
            codecs: tuple[str, ...] | None = None) -> list[tuple[str, str, str]]:
    """Every (field, codec, contender) measured, in a fixed order."""
    return [(f, codec, c) for f, (_, cs_of) in FIELDS.items() for codec, cs in cs_of.items() for c in cs
            if c in contenders and f in fields and (codecs is None or codec in codecs)]


def round_(launcher: Launcher, place: str, base: Path, inputs: dict[str, str], n: int, rnd: int,
           opts: argparse.Namespace, samples: list[dict[str, Any]], problems: list[str]) -> None:
    # a codec a contender lacks (exit code 3) is not asked again
    gone = {(s["field"], s["codec"], s["contender"]) for s in samples if "na" in s}
    todo = [j for j in jobs_of(launcher.contenders(), opts.fields, opts.codecs) if j not in gone]
    nprocs = opts.nprocs
    shift = (rnd * 7) % len(todo)
    order = todo[shift:] + todo[:shift]
    lo, hi = box_of(n)
    for field, codec, c in order:
        where = base / f"{field}-{c}-{codec.replace(':', '_').replace('=', '_')}-r{rnd}"
        shutil.rmtree(where, ignore_errors=True)
        where.mkdir(parents=True)
        args = {"dir": where, "input": inputs[field], "n": n, "steps": STEPS, "dtype": FIELDS[field][0],
                "codec": codec, **({"chunk": opts.chunk} if opts.chunk else {})}
        key = {"place": place, "round": rnd, "field": field, "codec": codec, "contender": c}
        for op in ("write", "read", "box"):
            if op == "box" and c != "sdm":
                continue
            if op != "write":
                evict(where)
            extra = {"op": op, **({"lo": lo, "hi": hi} if op == "box" else {})}
            report = launcher.job(c, 1 if op == "box" else nprocs, {**extra, **args})
            if op != "write" and c == "adios2" and codec.startswith("zfp:tolerance=") and "max_error" in report:
                report["bound"] = float(codec.split("=")[1])  # the C driver reports the error, not the bound
            samples.append({**key, "op": op, **report})
            what = f"{place} {field} {codec} {c} {op}"
            if "error" in report:
                problems.append(f"{what}: {report['error']}")
            elif report.get("bound") is not None and report.get("max_error", 0) > report["bound"]:
                problems.append(f"{what}: error {report['max_error']:.3g} above its bound {report['bound']:.3g}")
            elif op != "write" and "na" not in report and not codec.startswith(("zfp", "sz3")) \
                    and report.get("mismatches"):
                problems.append(f"{what}: {report['mismatches']} values differ (lossless)")
            if "error" in report or "na" in report:
                break
        shutil.rmtree(where, ignore_errors=True)


# ----------------------------------------------------------------------------- summary

def stat(values: list[float]) -> dict[str, float] | None:
    return {"median": median(values), "min": min(values), "max": max(values), "n": len(values)} if values else None


def summarise(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Per place|field|codec|contender: write and read MB/s, box seconds, ratio, largest error."""
    cells: dict[str, dict[str, Any]] = {}
    for s in samples:
        if "seconds" not in s:
            continue
        key = "|".join((s["place"], s["field"], s["codec"], s["contender"]))
        cell = cells.setdefault(key, {"write": [], "read": [], "box": [], "ratio": [], "error": [], "box_error": []})
        if s["op"] == "box":
            cell["box"].append(s["seconds"])
            cell["box_error"].append(s["max_error"])
            continue
        cell[s["op"]].append(s["bytes"] / s["seconds"] / 1e6)
        if s["op"] == "write" and s.get("stored"):
            cell["ratio"].append(s["bytes"] / s["stored"])
        if s["op"] == "read":
            cell["error"].append(s["max_error"])
            cell["bound"] = s.get("bound")
    out = {}
    for key, cell in cells.items():
        out[key] = {k: stat(cell[k]) for k in ("write", "read", "box", "ratio")}
        out[key]["max_error"] = max(cell["error"] + cell["box_error"], default=None)
        out[key]["bound"] = cell.get("bound")
    return out


def per_round(samples: list[dict[str, Any]], place: str, field: str, op: str,
              a: tuple[str, str], b: tuple[str, str]) -> dict[str, float] | None:
    """Time of *a* (codec, contender) over time of *b*, round by round: median and min-max (uncompressed:
    the smooth field's, the only one measured)."""
    t: dict[tuple[int, tuple[str, str]], float] = {}
    for s in samples:
        if "seconds" in s and s["place"] == place and s["op"] == op and \
                s["field"] == ("smooth" if s["codec"] == "none" else field):
            t[s["round"], (s["codec"], s["contender"])] = s["seconds"]
    rounds = sorted({r for r, _ in t})
    return stat([t[r, a] / t[r, b] for r in rounds if (r, a) in t and (r, b) in t])


def goals(samples: list[dict[str, Any]], summary: dict[str, Any], places: list[str]) -> list[dict[str, Any]]:
    """The issue's goals, each met or missed with its figures."""
    out: list[dict[str, Any]] = []
    for place in places:
        for field in FIELDS:
            r = per_round(samples, place, field, "write", ("zstd:1:shuffle", "hdf5"), ("zstd:1:shuffle", "sdm"))
            if r:
                rs = summary.get(f"{place}|{field}|zstd:1:shuffle|sdm", {}).get("ratio")
                rh = summary.get(f"{place}|{field}|zstd:1:shuffle|hdf5", {}).get("ratio")
                same = bool(rs and rh and abs(rs["median"] / rh["median"] - 1) <= 0.1)
                out.append({"goal": f"{place} {field}: zstd:1:shuffle write >= 1.5x parallel HDF5's, same ratio",
                            "met": r["median"] >= 1.5 and same,
                            "figures": f"HDF5 time / SDM time {r['median']:.2f} ({r['min']:.2f}-{r['max']:.2f}); "
                                       f"ratio SDM {rs['median']:.2f}, HDF5 {rh['median']:.2f}"})
        z = summary.get(f"{place}|smooth|zfp:tolerance=0.001|sdm")
        if z and z["ratio"]:
            ok = z["max_error"] is not None and z["max_error"] <= 1e-3
            out.append({"goal": f"{place} smooth: ZFP tolerance 1e-3 ratio >= 5, every value within 1e-3",
                        "met": z["ratio"]["median"] >= 5 and ok,
                        "figures": f"ratio {z['ratio']['median']:.2f}, largest error {z['max_error']:.3g}"})
    if "disk" in places:
        for field, (_, codecs) in FIELDS.items():
            for codec in codecs:
                cell = summary.get(f"disk|{field}|{codec}|sdm")
                if codec == "none" or not cell or not cell["ratio"] or cell["ratio"]["median"] < 3:
                    continue
                r = per_round(samples, "disk", field, "write", ("none", "sdm"), (codec, "sdm"))
                out.append({"goal": f"disk {field}: {codec} (ratio {cell['ratio']['median']:.1f} >= 3) writes faster "
                                    "than uncompressed",
                            "met": bool(r and r["median"] > 1),
                            "figures": f"uncompressed time / compressed time {r['median']:.2f} "
                                       f"({r['min']:.2f}-{r['max']:.2f})" if r else "no uncompressed reference"})
    for place in places:
        for field, (_, codecs) in FIELDS.items():
            for codec in codecs:
                if codec == "none":
                    continue
                r = per_round(samples, place, field, "box", (codec, "sdm"), ("none", "sdm"))
                if r:
                    out.append({"goal": f"{place} {field}: 1 % box of {codec} in <= 3x the uncompressed box's time",
                                "met": r["median"] <= 3,
                                "figures": f"compressed / uncompressed {r['median']:.2f} ({r['min']:.2f}-{r['max']:.2f})"})
    return out


def fmt(cell: dict[str, float] | None, digits: str = ".3g") -> str:
    if not cell:
        return "-"
    return f"{cell['median']:{digits}} ({cell['min']:{digits}}-{cell['max']:{digits}})"


def markdown(data: dict[str, Any], summary: dict[str, Any], goal_rows: list[dict[str, Any]]) -> str:
    meta, opts, stack = data["meta"], data["options"], data["meta"]["stack"]
    lines = ["# Compressed datasets: SDM, parallel HDF5 and ADIOS2", "",
             f"{meta['date']}, SDM {meta['sdm_version']} ({meta['git_commit']}), {meta['host']}, {meta['cores']} cores, "
             f"load {meta['load_before']:.1f} -> {meta['load_after']:.1f}; {stack.get('mpi')}; codecs {stack.get('codecs')}; "
             f"HDF5 {stack.get('hdf5', 'not run')}; ADIOS2 {stack.get('adios2', 'not run')} "
             f"(operators: {stack.get('adios2_operators', '-')}).",
             f"n={opts['n']} ({opts['n'] ** 3 * 4 * STEPS / 2**20:.0f} MiB per write, {STEPS} steps), {opts['nprocs']} "
             f"ranks, {opts['rounds']} interleaved rounds, chunks of SDM's compressed and HDF5's filtered datasets: "
             f"{opts.get('chunk', 0) and 'edge ' + str(opts['chunk']) or 'one rank' + chr(39) + 's block'}; wall time {data['wall_seconds'] / 60:.1f} min. MB/s of "
             "uncompressed bytes (open, define, steps, close and fsync included), median (min-max); ratio: raw bytes / "
             "stored bytes; box: one process reads a sub-cube of edge 0.215 n (1 % of a step), ms; error: largest "
             "|read - written| over every value read (numpy).",
             f"HDF5 filters loaded from HDF5_PLUGIN_PATH alone: {stack.get('hdf5_plugins', 'not run')}."]
    if data.get("not_run"):
        lines.append(f"Not run: {data['not_run']}.")
    lines += ["", "## Goals", ""] + [f"* {'met' if g['met'] else 'MISSED'}: {g['goal']}: {g['figures']}"
                                     for g in goal_rows]
    for place in opts["places"]:
        lines += ["", f"## {place} ({data['fs'].get(place, '?')})", "",
                  "| field | codec | contender | ratio | write MB/s | read MB/s | box ms | error |", "|---" * 8 + "|"]
        for field, codec, c in jobs_of(("sdm", "hdf5", "adios2"), tuple(opts["fields"]), tuple(opts["codecs"]) or None):
            cell = summary.get(f"{place}|{field}|{codec}|{c}")
            na = data["na"].get(f"{field}|{codec}|{c}")
            if not cell:
                if na:
                    lines.append(f"| {field} | {codec} | {LABELS[c]} | n/a | | | | |")
                continue
            box = {k: v * 1e3 for k, v in cell["box"].items() if k != "n"} if cell["box"] else None
            err = "-" if cell["max_error"] is None else f"{cell['max_error']:.2g}"
            lines.append(f"| {field} | {codec} | {LABELS[c]} | {fmt(cell['ratio'], '.2f')} | {fmt(cell['write'])} | "
                         f"{fmt(cell['read'])} | {fmt(box)} | {err} |")
    if data["na"]:
        lines += ["", "Not available:", ""] + [f"* {k.replace('|', ' ')}: {v}" for k, v in sorted(data["na"].items())]
    if data["problems"]:
        lines += ["", "Problems:", ""] + [f"* {p}" for p in data["problems"]]
    return "\n".join(lines) + "\n"


def plot(summary: dict[str, Any], places: list[str], path: Path) -> None:
    """Write MB/s against ratio of every (field, codec, contender), one panel per place."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from _plots import save_png

    fig, axes = plt.subplots(1, len(places), figsize=(4.2 * len(places), 3.0), squeeze=False)
    marks = {"sdm": "o", "hdf5": "s", "adios2": "^"}
    colours = {"smooth": "tab:blue", "noisy": "tab:orange", "ids": "tab:green"}
    for ax, place in zip(axes[0], places):
        for key, cell in summary.items():
            p, field, codec, c = key.split("|")
            if p != place or not cell["write"] or not cell["ratio"]:
                continue
            ax.scatter(cell["ratio"]["median"], cell["write"]["median"], marker=marks[c], color=colours[field], s=18)
        for c, m in marks.items():
            ax.scatter([], [], marker=m, color="k", s=18, label=LABELS[c])
        for f, col in colours.items():
            ax.scatter([], [], marker="o", color=col, s=18, label=f)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("ratio", fontsize=8)
        ax.set_ylabel("write MB/s", fontsize=8)
        ax.set_title(place, fontsize=9)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=6)
    fig.tight_layout()
    save_png(fig, path, dpi=72)
    plt.close(fig)


def columns(samples: list[dict[str, Any]]) -> dict[str, Any]:
    fields = sorted({k for s in samples for k in s})
    return {"fields": fields, "rows": [[s.get(k) for k in fields] for s in samples]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=None, help="edge of the fields (default 192; --quick 32)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    ap.add_argument("--nprocs", type=int, default=4, help="ranks (default 4)")
    ap.add_argument("--disk", default="/var/tmp", help="directory on the disk (default /var/tmp)")
    ap.add_argument("--places", default="/dev/shm,disk", help="comma list of /dev/shm and disk")
    ap.add_argument("--fields", default=",".join(FIELDS), help="comma list of the fields (default all)")
    ap.add_argument("--codecs", default="", help="comma list of the codecs measured (default all of each field)")
    ap.add_argument("--quick", action="store_true", help="n=32, 1 round")
    ap.add_argument("--chunk", type=int, default=0,
                    help="chunk edge of SDM's compressed datasets and HDF5's filtered ones (default 0: one rank's block)")
    ap.add_argument("--peers", default=str(REPO / ".peers"), help="the stack built by `make peers`")
    ap.add_argument("--out", default=str(HERE / "results"), help="results directory")
    opts = ap.parse_args(argv)
    if opts.quick:
        opts.rounds = 1
    opts.fields = tuple(f for f in opts.fields.split(",") if f)
    opts.codecs = tuple(c for c in opts.codecs.split(",") if c) or None
    known = {c for _, cs in FIELDS.values() for c in cs}
    unknown = sorted(set(opts.fields) - set(FIELDS)) + sorted(set(opts.codecs or ()) - known)
    if unknown:
        ap.error(f"unknown fields or codecs: {unknown}")
    n = opts.n or (32 if opts.quick else 192)
    launcher = Launcher(Path(opts.peers))
    places = [p for p in opts.places.split(",") if p]
    parents = {"/dev/shm": Path("/dev/shm"), "disk": Path(opts.disk)}
    start, load_before = time.monotonic(), os.getloadavg()[0]
    samples: list[dict[str, Any]] = []
    problems: list[str] = []
    bases = {p: Path(tempfile.mkdtemp(prefix="sdm-compress-", dir=parents[p])) for p in places}
    inputs_dir = Path(tempfile.mkdtemp(prefix="sdm-compress-in-", dir="/dev/shm"))
    try:
        inputs = make_fields(inputs_dir, n)
        for rnd in range(opts.rounds):
            for place in places:
                print(f"round {rnd + 1}/{opts.rounds} on {place}", flush=True)
                round_(launcher, place, bases[place], inputs, n, rnd, opts, samples, problems)
        from sdm._cli.bench import fs_type

        fs = {p: fs_type(bases[p]) or "unknown" for p in places}
    finally:
        for b in (*bases.values(), inputs_dir):
            shutil.rmtree(b, ignore_errors=True)
    import mpi4py

    mpi4py.rc.initialize = mpi4py.rc.finalize = False  # the driver only starts jobs
    from _io_bench import provenance, write_results

    na = {f"{s['field']}|{s['codec']}|{s['contender']}": s["na"] for s in samples if "na" in s}
    data = {"meta": {**provenance(), "host": platform.node(), "cores": os.cpu_count(), "load_before": load_before,
                     "load_after": os.getloadavg()[0], "python": platform.python_version(),
                     "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "stack": launcher.facts()},
            "options": {"n": n, "rounds": opts.rounds, "nprocs": opts.nprocs, "places": places, "quick": opts.quick,
                        "chunk": opts.chunk or "one rank's block",
                        "disk": opts.disk, "steps": STEPS, "box": box_of(n),
                        "fields": list(opts.fields), "codecs": list(opts.codecs or [])},
            "fs": fs, "wall_seconds": time.monotonic() - start, "not_run": launcher.why,
            "samples": columns(samples), "na": na, "problems": problems}
    summary = summarise(samples)
    goal_rows = goals(samples, summary, places)
    data["goals"] = goal_rows
    name = "compression"
    write_results(Path(opts.out), name, data, markdown(data, summary, goal_rows),
                  lambda path: plot(summary, places, path))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
