"""Subfiles: SDM's subfiled level 3 against one shared file and file-per-process POSIX (issue 23).

Run from the repository with plain Python; it starts one MPI job per measurement::

    PYTHONPATH=src python benchmarks/subfiles.py            # 4 ranks, 4 x 192^3 float64, 2 steps, 5 rounds
    PYTHONPATH=src python benchmarks/subfiles.py --quick --out /tmp/r --places /dev/shm

A bulk 3-D write and read: ``--arrays`` float64 arrays of ``--n``^3 per step, ``--steps``
steps, block-distributed along the slowest dimension over ``--ranks`` ranks (the first
``n % ranks`` slabs one row longer, as :class:`sdm.Block` splits), on each of ``--places``
(``/dev/shm`` and ``disk``, a directory under ``--disk``). Contenders:

``sdm-subfiled``
    SDM level 3 with ``subfiles=ranks`` (every rank writes its own subfile), checksum on
    (the session default), catalog included.
``sdm-subfiled-nochecksum``
    The same with ``sdm.open(..., checksum=False)``: the checksum's share of the time.
``sdm-shared``
    SDM level 3, one shared file (``subfiles=None``), checksum on.
``raw-shared``
    mpi4py alone: one shared file, each rank ``Write_at_all`` of its contiguous slab per
    array and step (``Read_at_all`` to read).
``fpp-posix``
    File per process: ``numpy.tofile`` of every array into the rank's own file, then
    ``os.fsync``; reads with ``numpy.fromfile``.

Each measurement is one ``mpiexec`` job of one contender: data generated and libraries
imported before the clock; the write is timed between two barriers around open, every
step, close and an ``fsync`` of every output file by rank 0 (SDM: ``sdm.open`` to
``close``, catalog included); then rank 0 drops the files' pages from the page cache
(``fdatasync`` + ``posix_fadvise(DONTNEED)``: cold reads on the disk, no host setting
touched; on tmpfs the pages are the storage) and the read is timed the same way, then
compared with the generator. Rounds interleave the contenders, their order rotating
each round. The first round also checks every contender's bytes on storage with numpy
alone (SDM: ``numpy.memmap`` at the extents the catalog records).

Writes ``subfiles.json`` (every sample, parameters, SDM version, git commit, host facts),
``subfiles.md`` and ``subfiles.png`` into ``--out`` (default ``benchmarks/results``).
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from statistics import median
from typing import Any, Callable

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "peer_stack"))
sys.path.insert(0, str(HERE))
import geometry as geo  # noqa: E402
from _mpijob import mpiexec, run_job, worker_env  # noqa: E402
from peers import columns, evict  # noqa: E402

CONTENDERS = ("sdm-subfiled", "sdm-subfiled-nochecksum", "sdm-shared", "raw-shared", "fpp-posix")
SUBFILED = ("sdm-subfiled", "sdm-subfiled-nochecksum")
PLACES = ("/dev/shm", "disk")
OPS = ("write", "read")
#: rank 0's split of SDM's timed ops (open with the group, data, close), reported by the SDM contenders
PHASES = tuple(f"{op}_{phase}" for op in OPS for phase in ("open", "data", "close"))
#: the issue's goal: file-per-process time over SDM subfiled time, on every place, for writes and reads
GOAL = 0.8
#: what SDM subfiled is compared with (the other contender's time over its own, in the same round)
VERSUS = {"fpp-posix": "file per process", "sdm-shared": "SDM one shared file", "raw-shared": "raw MPI-IO shared"}


# ----------------------------------------------------------------------------- worker (one MPI job)
def slab(n: int, nprocs: int, rank: int) -> tuple[int, int]:
    """``[lo, hi)`` rows of *rank*'s slab along the slowest dimension."""
    return geo.block_bounds(n, nprocs, rank)


def generate(n: int, arrays: int, steps: int, lo: int, hi: int) -> dict[tuple[int, int], np.ndarray]:
    """The rows ``lo:hi`` of every (step, array): ``geometry.values_at`` of the global C-order index."""
    flat = np.arange(lo * n * n, hi * n * n, dtype=np.int64).reshape(hi - lo, n, n)
    return {(s, v): geo.values_at(s, v, flat) for s in range(steps) for v in range(arrays)}


def _contenders() -> dict[str, Any]:
    """The worker's contender classes by name (defined here: they need MPI, imported in jobs only)."""
    from mpi4py import MPI
    from peer_python import SDM, Contender, names

    comm = MPI.COMM_WORLD

    class SDMSlabs(SDM):
        """SDM level 3, a Block view along the slowest dimension, *subfiles* per group (None: one shared file).

        ``phases``: rank 0's split of each timed op into open (with the group's definition or
        lookup), the data (every step) and close.
        """

        def __init__(self, p: dict[str, int], args: dict[str, str], where: Path, subfiles: int | None) -> None:
            super().__init__("a", p, args, where)
            self.subfiles = subfiles
            self.phases: dict[str, float] = {}

        def _view(self) -> Any:
            import sdm

            return sdm.Block(grid=(comm.Get_size(), 1, 1))

        def _phased(self, op: str, mode: str, start: Callable[[Any], Any], body: Callable[[Any], None]) -> None:
            """Open a session in *mode*, ``g = start(session)``, ``body(g)``, close; the three phases timed."""
            t0 = time.perf_counter()
            with self._open(mode) as s:
                g = start(s)
                t1 = time.perf_counter()
                body(g)
                t2 = time.perf_counter()
            t3 = time.perf_counter()
            self.phases.update({f"{op}_open": t1 - t0, f"{op}_data": t2 - t1, f"{op}_close": t3 - t2})

        def write(self, arrays: dict[tuple[int, int], np.ndarray]) -> None:
            vars_ = names("a", self.p)
            extra = {} if self.subfiles is None else {"subfiles": self.subfiles}

            def steps(g: Any) -> None:
                for step in range(self.p["steps"]):
                    g.write_step(step, {name: arrays[step, v] for v, name in enumerate(vars_)})
            self._phased("write", "w", lambda s: s.make_group("a", vars_, dtype="<f8", shape=(self.p["n"],) * 3,
                                                              level=3, view=self._view(), **extra), steps)

        def read(self, into: dict[tuple[int, int], np.ndarray]) -> None:
            vars_ = names("a", self.p)

            def group(s: Any) -> Any:
                g = s.group("a")
                g.data_view(self._view())
                return g

            def reads(g: Any) -> None:
                for (step, v), buf in into.items():
                    g.read(vars_[v], step, out=buf)
            self._phased("read", "r", group, reads)

    class RawShared(Contender):
        """One shared file; each rank's slab of each (step, array) is contiguous: ``Write_at_all``/``Read_at_all``."""

        name = "raw-shared"

        def _io(self, arrays: dict[tuple[int, int], np.ndarray], write: bool) -> None:
            n, nvars = self.p["n"], self.p["vars"]
            lo, _ = slab(n, comm.Get_size(), comm.Get_rank())
            mode = MPI.MODE_CREATE | MPI.MODE_WRONLY if write else MPI.MODE_RDONLY
            fh = MPI.File.Open(comm, str(self.dir / "out.raw"), mode)
            try:
                for (s, v), buf in arrays.items():
                    offset = ((s * nvars + v) * n + lo) * n * n * 8
                    (fh.Write_at_all if write else fh.Read_at_all)(offset, buf)
            finally:
                fh.Close()

        def write(self, arrays: dict[tuple[int, int], np.ndarray]) -> None:
            self._io(arrays, True)

        def read(self, into: dict[tuple[int, int], np.ndarray]) -> None:
            self._io(into, False)

    class FilePerProcess(Contender):
        """Each rank's own file: every (step, array) of its slab in order, ``tofile`` then ``fsync``."""

        name = "fpp-posix"

        def _path(self) -> Path:
            return fpp_path(self.dir, comm.Get_rank())

        def write(self, arrays: dict[tuple[int, int], np.ndarray]) -> None:
            with open(self._path(), "wb") as fh:
                for a in arrays.values():
                    a.tofile(fh)
                fh.flush()
                os.fsync(fh.fileno())

        def read(self, into: dict[tuple[int, int], np.ndarray]) -> None:
            with open(self._path(), "rb") as fh:
                for k, a in into.items():
                    into[k] = np.fromfile(fh, dtype=a.dtype, count=a.size).reshape(a.shape)

    return {"sdm": SDMSlabs, "raw-shared": RawShared, "fpp-posix": FilePerProcess}


def fpp_path(where: Path, rank: int) -> Path:
    """Rank *rank*'s file of the file-per-process contender."""
    return where / f"rank{rank:05d}.raw"


def worker(cfg: dict[str, Any]) -> None:
    """One contender writes, then (cold) reads, in one job; rank 0 prints one JSON line."""
    from mpi4py import MPI
    from peer_python import timed

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    n, nvars, steps, name = cfg["n"], cfg["arrays"], cfg["steps"], cfg["contender"]
    where = Path(cfg["dir"])
    p = {"n": n, "vars": nvars, "steps": steps}
    classes = _contenders()
    if name.startswith("sdm"):
        args = {"checksum": "off" if name.endswith("nochecksum") else "on"}
        c = classes["sdm"](p, args, where, size if name in SUBFILED else None)
    else:
        c = classes[name]("a", p, {}, where)
    arrays = generate(n, nvars, steps, *slab(n, size, rank))
    c.prepare()
    write_s, _, files = timed(lambda: c.write(arrays), where, True)
    if rank == 0:
        evict(where)
    comm.Barrier()
    into = {k: np.full_like(a, np.nan) for k, a in arrays.items()}
    read_s, _, _ = timed(lambda: c.read(into), None, False)
    wrong = int(comm.allreduce(sum(int(np.count_nonzero(into[k] != a)) for k, a in arrays.items())))
    nbytes = int(comm.allreduce(sum(a.nbytes for a in arrays.values())))
    if rank == 0:
        print(json.dumps({"write": write_s, "read": read_s, "bytes": nbytes, "files": files, "mismatches": wrong,
                          **getattr(c, "phases", {})}), flush=True)


# ----------------------------------------------------------------------------- byte checks (driver, numpy only)
def expected_global(n: int, step: int, var: int) -> np.ndarray:
    """The whole array of *var* at *step*, flat in C order, from the value formula."""
    return geo.values_at(step, var, np.arange(n ** 3, dtype=np.int64))


def stored_bytes(contender: str, where: Path, opts: argparse.Namespace) -> tuple[dict[tuple[int, int], np.ndarray],
                                                                                   dict[str, Any]]:
    """Every (step, array) as the contender left it on storage, read with numpy alone (flat, C order),
    and what the layout was (files; for SDM the extents per step and the checksum algorithms)."""
    n, arrays, steps, ranks = opts.n, opts.arrays, opts.steps, opts.ranks
    per = n ** 3
    files = sum(1 for p in where.iterdir() if p.is_file())
    if contender == "raw-shared":
        whole = np.fromfile(where / "out.raw", dtype="<f8")
        return {(s, v): whole[(s * arrays + v) * per:(s * arrays + v + 1) * per]
                for s in range(steps) for v in range(arrays)}, {"files": files}
    if contender == "fpp-posix":
        parts: dict[tuple[int, int], list[np.ndarray]] = {}
        for r in range(ranks):
            lo, hi = slab(n, ranks, r)
            mine = np.fromfile(fpp_path(where, r), dtype="<f8")
            size = (hi - lo) * n * n
            for i, key in enumerate((s, v) for s in range(steps) for v in range(arrays)):
                parts.setdefault(key, []).append(mine[i * size:(i + 1) * size])
        return {k: np.concatenate(v) for k, v in parts.items()}, {"files": files}
    return sdm_extents(where)


def sdm_extents(where: Path) -> tuple[dict[tuple[int, int], np.ndarray], dict[str, Any]]:
    """An SDM run's datasets assembled with ``numpy.memmap`` from the byte ranges its catalog records.

    A subfiled step's row lists its extents (subfile, offset, bytes, first byte of the step's
    stream it holds); one in a shared file is one range. Extents that do not tile the stream
    from its first byte leave the step out (every value then counts as wrong).
    """
    from sdm.catalog import Catalog

    cat = Catalog(f"sqlite:///{where / 'catalog.db'}", create=False)
    try:
        rows = cat.writes(1)  # the job's catalog holds its one run
    finally:
        cat.close()
    out: dict[tuple[int, int], np.ndarray] = {}
    paths: set[str] = set()
    counts: set[int] = set()
    algos: set[str] = set()
    for _, dname, w in rows:
        extents = sorted(getattr(w, "extents", ()), key=lambda e: e.start)
        spans = [(e.start, e.path, e.offset, e.nbytes) for e in extents] or [(0, w.path, w.offset, w.nbytes)]
        algos.update([e.checksum_algo for e in extents] or [w.checksum_algo])
        counts.add(len(spans))
        paths.update(path for _, path, _, _ in spans)
        ends = np.cumsum([0] + [nbytes for *_, nbytes in spans])
        if [start for start, *_ in spans] != ends[:-1].tolist() or ends[-1] != w.nbytes:
            continue
        out[w.step, int(dname[1:])] = np.concatenate([
            np.memmap(where / path, dtype="<f8", mode="r", offset=offset, shape=(nbytes // 8,))
            for _, path, offset, nbytes in spans])
    return out, {"files": len(paths), "extents_per_step": sorted(counts), "checksum_algos": sorted(algos)}


def byte_mismatches(contender: str, where: Path, opts: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    """Values on storage that differ from the formula (a missing (step, array) counts all its values),
    and the layout found."""
    got, layout = stored_bytes(contender, where, opts)
    wrong = 0
    for s in range(opts.steps):
        for v in range(opts.arrays):
            want = expected_global(opts.n, s, v)
            have = got.get((s, v))
            wrong += want.size if have is None or have.shape != want.shape else int(np.count_nonzero(have != want))
    return wrong, layout


# ----------------------------------------------------------------------------- driver
def subfiles_available() -> bool:
    """Whether this checkout's ``Session.make_group`` takes ``subfiles=``."""
    from sdm.session import Session

    return "subfiles" in inspect.signature(Session.make_group).parameters


def summarise(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Per (place, op, contender): seconds and GB/s, median and min-max; per round ratios to SDM subfiled;
    median phases of SDM's ops (``phases[place|contender]``).

    ``ratios[place|op|other]``: the other's time over SDM subfiled's in the same round (above 1:
    subfiled faster); ``checksum[place|op]``: ``1 - t(no checksum) / t(checksum)`` of SDM subfiled.
    """
    cells: dict[tuple[str, str, str], list[tuple[float, int]]] = {}
    phases: dict[str, dict[str, list[float]]] = {}
    rounds: dict[tuple[str, str, int], dict[str, float]] = {}
    for s in samples:
        for op in OPS:
            if op in s:
                cells.setdefault((s["place"], op, s["contender"]), []).append((s[op], s["bytes"]))
                rounds.setdefault((s["place"], op, s["round"]), {})[s["contender"]] = s[op]
        for phase in PHASES:
            if s.get(phase) is not None:
                phases.setdefault(f"{s['place']}|{s['contender']}", {}).setdefault(phase, []).append(s[phase])
    out: dict[str, Any] = {"cells": {}, "ratios": {}, "checksum": {},
                           "phases": {k: {ph: median(v) for ph, v in by.items()} for k, by in phases.items()}}
    for (place, op, c), got in cells.items():
        secs = [t for t, _ in got]
        rates = [b / t / 1e9 for t, b in got]
        out["cells"][f"{place}|{op}|{c}"] = {"median": median(secs), "min": min(secs), "max": max(secs),
                                             "gbs": median(rates), "gbs_min": min(rates), "gbs_max": max(rates),
                                             "n": len(secs)}
    ratios: dict[str, list[float]] = {}
    for (place, op, _), times in rounds.items():
        ref = times.get("sdm-subfiled")
        if ref is None:
            continue
        for other in VERSUS:
            if other in times:
                ratios.setdefault(f"ratios|{place}|{op}|{other}", []).append(times[other] / ref)
        if "sdm-subfiled-nochecksum" in times:
            ratios.setdefault(f"checksum|{place}|{op}", []).append(1 - times["sdm-subfiled-nochecksum"] / ref)
    for key, rs in ratios.items():
        kind, rest = key.split("|", 1)
        out[kind][rest] = {"median": median(rs), "min": min(rs), "max": max(rs), "n": len(rs)}
    return out


def _range(cell: dict[str, Any] | None, fmt: str = ".3g", key: str = "") -> str:
    """``median (min-max)`` of a summary cell (``key`` picks ``gbs``), or ``-``."""
    if not cell:
        return "-"
    m, lo, hi = (cell[key], cell[key + "_min"], cell[key + "_max"]) if key else (cell["median"], cell["min"],
                                                                                  cell["max"])
    return f"{m:{fmt}} ({lo:{fmt}}-{hi:{fmt}})"


def _loads(samples: dict[str, Any]) -> str:
    """``median (min-max)`` of the load averages recorded with the samples (a table of fields and rows)."""
    col = samples["fields"].index("load") if "load" in samples["fields"] else None
    loads = [row[col] for row in samples["rows"]] if col is not None else []
    return f"{median(loads):.1f} ({min(loads):.1f}-{max(loads):.1f})" if loads else "-"


def markdown(data: dict[str, Any]) -> str:
    """The report: per place, each contender's seconds and GB/s; SDM subfiled against the others; checksum share."""
    m, o, summary = data["meta"], data["options"], data["summary"]
    gib = o["arrays"] * o["steps"] * o["n"] ** 3 * 8 / 2 ** 30
    lines = ["# Subfiles: SDM subfiled vs one shared file vs file per process", "",
             f"{m['date']}, SDM {m['sdm_version']} ({m['git_commit']}), {m['host']}, {m['cores']} cores, "
             f"load {m['load_before']:.1f} -> {m['load_after']:.1f}; {m['mpi']}; Python {m['python']}.",
             f"{o['ranks']} ranks; {o['arrays']} arrays of {o['n']}^3 float64 x {o['steps']} steps "
             f"({gib:.2f} GiB per write), block along the slowest dimension; {o['rounds']} interleaved rounds "
             f"(one mpiexec job per contender and round: write, page-cache eviction, read); whole run "
             f"{data['wall_seconds'] / 60:.1f} min; load average at the jobs' starts {_loads(data['samples'])}. "
             "Median (min-max).", ""]
    if data["na"]:
        lines += [f"Not measured: {', '.join(data['na'])} ({data['na_reason']}).", ""]
    for place in o["places"]:
        lines += [f"## {place} ({data['fs'].get(place, '?')})", "",
                  "| contender | write s | write GB/s | read s | read GB/s |", "|---|---|---|---|---|"]
        for c in o["contenders"]:
            cells = [summary["cells"].get(f"{place}|{op}|{c}") for op in OPS]
            lines.append(f"| {c} | " + " | ".join(f"{_range(cell)} | {_range(cell, '.2f', 'gbs')}"
                                                   for cell in cells) + " |")
        lines += ["", "| SDM subfiled against | write | read |", "|---|---|---|"]
        for other, label in VERSUS.items():
            cells = [summary["ratios"].get(f"{place}|{op}|{other}") for op in OPS]
            goal = ""
            if other == "fpp-posix" and all(cells):
                met = all(c["median"] >= GOAL for c in cells if c)
                goal = f" [goal >= {GOAL:g}: {'met' if met else 'missed'}]"
            lines.append(f"| {label}: its time / subfiled time{goal} | "
                         + " | ".join(_range(c, ".2f") for c in cells) + " |")
        share = [summary["checksum"].get(f"{place}|{op}") for op in OPS]
        lines.append("| checksum share of subfiled: 1 - t(no checksum) / t(checksum) | "
                     + " | ".join(_range(c, ".1%") for c in share) + " |")
        sdm_phases = [(c, summary["phases"][f"{place}|{c}"]) for c in o["contenders"]
                      if f"{place}|{c}" in summary["phases"]]
        if sdm_phases:
            lines += ["", "SDM's time split on rank 0, medians in seconds: open (with the group), data, close.", "",
                      "| contender | write: open | data | close | read: open | data | close |",
                      "|---|---|---|---|---|---|---|"]
            lines += [f"| {c} | " + " | ".join(f"{ph[k]:.3g}" if k in ph else "-" for k in PHASES) + " |"
                      for c, ph in sdm_phases]
        lines.append("")
    checks = data["checks"]
    lines += ["Layout and bytes on storage, first round, read with numpy alone (SDM: `numpy.memmap` at the extents "
              "its catalog records):", "", "| place, contender | files | extents per step | checksum | values wrong |",
              "|---|---|---|---|---|"]
    for key, wrong in sorted(checks["values_wrong"].items()):
        lay = checks["layout"].get(key, {})
        lines.append(f"| {key} | {lay.get('files', '-')} | {', '.join(map(str, lay.get('extents_per_step', []))) or '-'}"
                     f" | {', '.join(a or 'none' for a in lay.get('checksum_algos', [])) or '-'} | {wrong} |")
    if data["problems"]:
        lines += ["", "Problems:", ""] + [f"* {p}" for p in data["problems"]]
    return "\n".join(lines) + "\n"


def plot(data: dict[str, Any], path: Path) -> None:
    """GB/s of every contender, write and read, one panel per place (bars: medians, whiskers: min-max)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from _plots import save_png

    o, cells = data["options"], data["summary"]["cells"]
    fig, axes = plt.subplots(1, len(o["places"]), figsize=(4.2 * len(o["places"]), 3.2), squeeze=False)
    width = 0.8 / len(o["contenders"])
    for ax, place in zip(axes[0], o["places"]):
        for i, c in enumerate(o["contenders"]):
            xs: list[float] = []
            ys: list[float] = []
            errs: tuple[list[float], list[float]] = ([], [])
            for j, op in enumerate(OPS):
                cell = cells.get(f"{place}|{op}|{c}")
                if cell:
                    xs.append(j + (i - len(o["contenders"]) / 2 + 0.5) * width)
                    ys.append(cell["gbs"])
                    errs[0].append(cell["gbs"] - cell["gbs_min"])
                    errs[1].append(cell["gbs_max"] - cell["gbs"])
            ax.bar(xs, ys, width, yerr=errs, capsize=2, label=c)
        ax.set_xticks(range(len(OPS)), list(OPS), fontsize=8)
        ax.set_ylabel("GB/s", fontsize=8)
        ax.set_title(f"{place}, {o['ranks']} ranks", fontsize=9)
        ax.tick_params(labelsize=7)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    save_png(fig, path, dpi=80)
    plt.close(fig)


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The command line; a bad one ends with exit code 2 and a message saying what is expected."""
    ap = argparse.ArgumentParser(prog="subfiles.py", description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=4, help="MPI ranks (default 4)")
    ap.add_argument("--places", default=",".join(PLACES), help="comma list of /dev/shm and disk (default both)")
    ap.add_argument("--disk", default="/var/tmp", help="directory on the disk (default /var/tmp)")
    ap.add_argument("--n", type=int, default=192, help="edge of each 3-D array (default 192)")
    ap.add_argument("--arrays", type=int, default=4, help="arrays per step (default 4)")
    ap.add_argument("--steps", type=int, default=2, help="steps (default 2)")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    ap.add_argument("--contenders", default=",".join(CONTENDERS), help="comma list (default all)")
    ap.add_argument("--quick", action="store_true", help="a smoke test: --n 24 --rounds 1 (other sizes as given)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds allowed to one job (default 600)")
    ap.add_argument("--out", default=str(HERE / "results"), help="results directory")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    opts = ap.parse_args(argv)
    if opts.worker:
        return opts
    if opts.quick:
        opts.n, opts.rounds = 24, 1
    for flag in ("ranks", "n", "arrays", "steps", "rounds"):
        if getattr(opts, flag) < 1:
            ap.error(f"--{flag} must be at least 1, got {getattr(opts, flag)}")
    if opts.n < opts.ranks:
        ap.error(f"--n {opts.n} gives some of the {opts.ranks} ranks no rows: use --n >= --ranks")
    opts.places = [p for p in opts.places.split(",") if p]
    opts.contenders = [c for c in opts.contenders.split(",") if c]
    for flag, given, known in (("places", opts.places, PLACES), ("contenders", opts.contenders, CONTENDERS)):
        unknown = [x for x in given if x not in known]
        if unknown or not given:
            ap.error(f"--{flag}: unknown {', '.join(map(repr, unknown)) or 'empty list'} (choose from "
                     f"{', '.join(known)})")
    if "disk" in opts.places and not Path(opts.disk).is_dir():
        ap.error(f"--disk {opts.disk} is not a directory")
    if opts.timeout <= 0:
        ap.error(f"--timeout must be positive, got {opts.timeout:g}")
    return opts


def main(argv: list[str] | None = None) -> int:
    opts = parse(argv)
    if opts.worker:
        worker(json.loads(opts.worker))
        return 0
    start, load_before = time.monotonic(), os.getloadavg()[0]
    na = [c for c in opts.contenders if c in SUBFILED] if not subfiles_available() else []
    contenders = [c for c in opts.contenders if c not in na]
    parents = {"/dev/shm": Path("/dev/shm"), "disk": Path(opts.disk)}
    bases = {place: Path(tempfile.mkdtemp(prefix="sdm-subfiles-", dir=parents[place])) for place in opts.places}
    samples: list[dict[str, Any]] = []
    checks: dict[str, int] = {}
    layouts: dict[str, dict[str, Any]] = {}
    problems: list[str] = []
    try:
        for rnd in range(opts.rounds):
            order = contenders[rnd % len(contenders):] + contenders[:rnd % len(contenders)]
            for place in opts.places:
                print(f"round {rnd + 1}/{opts.rounds} on {place}: {', '.join(order)}", flush=True)
                for c in order:
                    where = bases[place] / f"{c}-r{rnd}"
                    where.mkdir()
                    cfg = {"contender": c, "dir": str(where), "n": opts.n, "arrays": opts.arrays,
                           "steps": opts.steps}
                    cmd = [mpiexec(), "-n", str(opts.ranks), sys.executable, str(Path(__file__).resolve()),
                           "--worker", json.dumps(cfg)]
                    load = os.getloadavg()[0]  # other work on the host shows here
                    report = json.loads(run_job(cmd, worker_env(), opts.timeout))
                    samples.append({"place": place, "round": rnd, "contender": c, "load": load, **report})
                    if report["mismatches"]:
                        problems.append(f"{place} {c} round {rnd + 1}: {report['mismatches']} values read back wrong")
                    if rnd == 0:
                        wrong, layouts[f"{place} {c}"] = byte_mismatches(c, where, opts)
                        checks[f"{place} {c}"] = wrong
                        if wrong:
                            problems.append(f"{place} {c}: {wrong} values on storage differ from numpy's")
                        got = layouts[f"{place} {c}"].get("extents_per_step")
                        if c in SUBFILED and got != [opts.ranks]:  # else it is not the organization measured
                            problems.append(f"{place} {c}: {got} extents per step, expected {opts.ranks}")
                    shutil.rmtree(where, ignore_errors=True)
        fs = {place: _fs(bases[place]) for place in opts.places}
    finally:
        for base in bases.values():
            shutil.rmtree(base, ignore_errors=True)
    return report_results(opts, samples, {"values_wrong": checks, "layout": layouts}, problems, na, fs, start,
                          load_before)


def report_results(opts: argparse.Namespace, samples: list[dict[str, Any]], checks: dict[str, Any],
                   problems: list[str], na: list[str], fs: dict[str, str], start: float, load_before: float) -> int:
    """Write JSON (samples, parameters, provenance, host facts), Markdown and PNG; 1 if anything was wrong."""
    from mpi4py import MPI

    from _io_bench import meta, write_results
    from sdm.bench import rounded

    info = meta(MPI.COMM_SELF, HERE, load_before, nprocs=opts.ranks, fs=fs)  # MPI starts here, after every job
    data = {"meta": info,
            "options": {"ranks": opts.ranks, "n": opts.n, "arrays": opts.arrays, "steps": opts.steps,
                        "rounds": opts.rounds, "places": opts.places, "disk": opts.disk, "quick": opts.quick,
                        "contenders": [c for c in opts.contenders if c not in na], "subfiles": opts.ranks},
            "fs": fs, "wall_seconds": time.monotonic() - start, "samples": rounded(columns(samples)),
            "checks": checks, "na": na, "na_reason": "this SDM has no subfiles= in make_group" if na else "",
            "problems": problems}
    shown = {**data, "summary": summarise(samples)}  # derived from the samples: not stored
    write_results(Path(opts.out), "subfiles", data, markdown(shown), lambda path: plot(shown, path))
    return 1 if problems else 0


def _fs(path: Path) -> str:
    from sdm._cli.bench import fs_type

    return fs_type(path) or "unknown"


if __name__ == "__main__":
    sys.exit(main())
