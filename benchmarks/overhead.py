"""What SDM's write and read paths cost over plain MPI-IO and over file-per-process POSIX I/O.

Run under MPI (4 ranks in the docs), once per directory given (``/dev/shm`` and a disk)::

    mpiexec -n 4 env PYTHONPATH=src python benchmarks/overhead.py --dir /dev/shm --dir /var/tmp
    mpiexec -n 4 env PYTHONPATH=src python benchmarks/overhead.py --dir /dev/shm --quick

Two workloads, each measured per round for every contender, contenders interleaved
(their order rotated from round to round):

* **bulk**: ``--datasets`` float32 fields of ``--n``^3 on a 3-D ``Block`` decomposition,
  written at ``--steps`` steps, one dump (``write_step``) per step, then read back.
* **small**: ``--count`` writes of ``--small`` bytes per rank (4 KiB and 64 KiB by
  default) of a 1-D dataset, one step each, synced each.

Contenders:

``raw``
    mpi4py alone: ``Set_view`` through the same subarray view (``Create_subarray``), one
    ``Write_at_all`` / ``Read_at_all`` per dataset, and the same syncs as SDM (one
    ``fsync`` of each written file per node after each dump, then a barrier).
``posix``
    file per process: ``numpy.tofile`` + ``os.fsync`` per dump, ``numpy.fromfile`` to read.
``sdm``, ``sdm+checksum``, ``sdm-async``
    SDM through the same view and calls as ``raw`` (``method="collective"``: a subarray
    file view and ``Write_at_all`` / ``Read_at_all``) with the checksum off, on
    (``mix64-v2``), and off with ``async_commit=True``.  Timed from the first write to
    the end of ``close()`` (the session's open is measured separately, ``open s``);
    reads with ``verify=False``.
``sdm-auto``
    (bulk) SDM with ``method="auto"``, checksum off: what a user gets by default (the
    methods it chose are recorded in the JSON).

Also measured per SDM run: the seconds rank 0 spent inside the catalog's ``reserve``
and ``record_writes`` (the catalog's share of the write time; with ``async_commit`` the
commits run beside the writes) and the seconds every rank spent computing checksum
shares (``integrity.piece_share``).  Times are barrier-aligned wall clock (slowest rank);
ratios are taken within each round, then their median (min-max).

Output: ``benchmarks/results/overhead.json`` and ``overhead.md``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from statistics import median
from typing import Any, Callable, Iterator

import numpy as np
from mpi4py import MPI

import sdm
from sdm import integrity
from sdm.catalog import Catalog

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _io_bench import RESULTS, fresh, meta, provenance, remove, say, scratch  # noqa: E402

BULK = ("raw", "posix", "sdm", "sdm+checksum", "sdm-auto")
SMALL = ("raw", "posix", "sdm", "sdm+checksum", "sdm-async")


# ----------------------------------------------------------------------------- clocks
class Clock:
    """Seconds spent in the wrapped callables while installed (this rank)."""

    def __init__(self, targets: list[tuple[Any, str]]) -> None:
        self.targets = targets
        self.seconds = 0.0
        self._real: list[Any] = []

    def __enter__(self) -> "Clock":
        for owner, name in self.targets:
            real = getattr(owner, name)
            self._real.append(real)

            def timed(*args: Any, _real: Callable[..., Any] = real, **kwargs: Any) -> Any:
                t0 = time.perf_counter()
                try:
                    return _real(*args, **kwargs)
                finally:
                    self.seconds += time.perf_counter() - t0

            setattr(owner, name, timed)
        return self

    def __exit__(self, *exc: Any) -> None:
        for (owner, name), real in zip(self.targets, self._real):
            setattr(owner, name, real)


@contextmanager
def timed(comm: MPI.Comm, out: dict[str, float], key: str) -> Iterator[None]:
    """Barrier-aligned wall clock of the block into ``out[key]`` (the slowest rank decides)."""
    comm.Barrier()
    t0 = time.perf_counter()
    yield
    comm.Barrier()
    out[key] = comm.allreduce(time.perf_counter() - t0, MPI.MAX)


def node_sync(comm: MPI.Comm, paths: list[Path]) -> None:
    """One ``fsync`` of each file by rank 0 (one node), then a barrier: what SDM's ``node`` sync does."""
    if comm.Get_rank() == 0:
        for p in paths:
            fd = os.open(p, os.O_WRONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    comm.Barrier()


# ----------------------------------------------------------------------------- layouts
def block_box(shape: tuple[int, ...], comm: MPI.Comm) -> tuple[list[int], list[int]]:
    """This rank's ``(counts, starts)`` of a block decomposition (numpy's array_split)."""
    dims = MPI.Compute_dims(comm.Get_size(), len(shape))
    coords, r = [], comm.Get_rank()
    for d in reversed(dims):
        coords.append(r % d)
        r //= d
    coords.reverse()
    counts, starts = [], []
    for n, p, c in zip(shape, dims, coords):
        part = np.array_split(np.arange(n), p)[c]
        counts.append(int(part.size))
        starts.append(int(part[0]) if part.size else 0)
    return counts, starts


# ----------------------------------------------------------------------------- contenders
def run_raw(comm: MPI.Comm, d: Path, shape: tuple[int, ...], names: list[str], steps: int,
            local: np.ndarray, out: dict[str, float]) -> None:
    counts, starts = block_box(shape, comm)
    ftype = MPI.FLOAT.Create_subarray(list(shape), counts, starts).Commit()
    nbytes = int(np.prod(shape)) * 4
    path = d / "raw.dat"
    try:
        with timed(comm, out, "write_s"):
            fh = MPI.File.Open(comm, str(path), MPI.MODE_RDWR | MPI.MODE_CREATE)
            for step in range(steps):
                for i, _ in enumerate(names):
                    fh.Set_view((step * len(names) + i) * nbytes, MPI.FLOAT, ftype)
                    fh.Write_at_all(0, local)
                node_sync(comm, [path])
            fh.Close()
        back = np.empty_like(local)
        with timed(comm, out, "read_s"):
            fh = MPI.File.Open(comm, str(path), MPI.MODE_RDONLY)
            for step in range(steps):
                for i, _ in enumerate(names):
                    fh.Set_view((step * len(names) + i) * nbytes, MPI.FLOAT, ftype)
                    fh.Read_at_all(0, back)
            fh.Close()
        check(back, local, "raw")
    finally:
        ftype.Free()


def run_posix(comm: MPI.Comm, d: Path, names: list[str], steps: int, local: np.ndarray,
              out: dict[str, float]) -> None:
    path = d / f"rank{comm.Get_rank()}.dat"
    with timed(comm, out, "write_s"):
        with open(path, "wb") as f:
            for _ in range(steps):
                for _ in names:
                    local.tofile(f)
                f.flush()
                os.fsync(f.fileno())
    back = np.empty_like(local)
    with timed(comm, out, "read_s"):
        with open(path, "rb") as f:
            for _ in range(steps * len(names)):
                back = np.fromfile(f, dtype=local.dtype, count=local.size).reshape(local.shape)
    check(back, local, "posix")


def run_sdm(comm: MPI.Comm, d: Path, contender: str, shape: tuple[int, ...], names: list[str], steps: int,
            local: np.ndarray, out: dict[str, float]) -> None:
    checksum = contender == "sdm+checksum"
    options = dict(root=d, catalog=f"sqlite:///{d}/catalog.db", comm=comm, checksum=checksum,
                   async_commit=contender == "sdm-async", method="auto" if contender == "sdm-auto" else "collective")
    catalog_clock = Clock([(Catalog, "reserve"), (Catalog, "record_writes")]) if comm.Get_rank() == 0 else Clock([])
    share_clock = Clock([(integrity, "piece_share")])
    with timed(comm, out, "open_s"):
        s = sdm.open("overhead", **options)
    g = s.make_group("fields", names, dtype="f4", shape=shape, level=3, view=sdm.Block())
    with catalog_clock, share_clock, timed(comm, out, "write_s"):
        for step in range(steps):
            g.write_step(step, {name: local for name in names})
        s.close()
    out["catalog_s"] = comm.bcast(catalog_clock.seconds, root=0)
    out["checksum_s"] = comm.allreduce(share_clock.seconds, MPI.MAX)
    with timed(comm, out, "read_open_s"):
        r = sdm.open("overhead", "r", root=d, catalog=f"sqlite:///{d}/catalog.db", comm=comm, run=s.run_id,
                     method=options["method"])
    g = r.group("fields")
    back = np.empty_like(local)
    with timed(comm, out, "read_s"):
        for step in range(steps):
            for name in names:
                g.read(name, step, out=back, verify=False)
        r.close()
    check(back, local, contender)
    if contender == "sdm-auto" and comm.Get_rank() == 0:
        cat = Catalog(f"sqlite:///{d}/catalog.db")
        try:
            CHOSEN.extend(w.method for _, _, w in cat.writes(s.run_id))
        finally:
            cat.close()


CHOSEN: list[str] = []  # methods auto chose for the bulk writes (rank 0)


def check(got: np.ndarray, want: np.ndarray, who: str) -> None:
    if not np.array_equal(got, want):
        raise RuntimeError(f"{who} read back different values")


# ----------------------------------------------------------------------------- workloads
def bulk_round(comm: MPI.Comm, base: Path, a: argparse.Namespace, order: list[str]) -> dict[str, dict[str, float]]:
    shape = (a.n,) * 3
    counts, _ = block_box(shape, comm)
    rng = np.random.default_rng(comm.Get_rank())
    local = rng.random(counts, dtype=np.float32)
    names = [f"f{i}" for i in range(a.datasets)]
    results: dict[str, dict[str, float]] = {}
    for c in order:
        d = fresh(comm, base, f"bulk-{c}")
        out: dict[str, float] = {}
        if c == "raw":
            run_raw(comm, d, shape, names, a.steps, local, out)
        elif c == "posix":
            run_posix(comm, d, names, a.steps, local, out)
        else:
            run_sdm(comm, d, c, shape, names, a.steps, local, out)
        remove(comm, d)
        results[c] = out
    return results


def small_round(comm: MPI.Comm, base: Path, a: argparse.Namespace, nbytes: int,
                order: list[str]) -> dict[str, dict[str, float]]:
    size = comm.Get_size()
    shape = (nbytes // 4 * size,)
    local = np.arange(nbytes // 4, dtype=np.float32) + comm.Get_rank()
    results: dict[str, dict[str, float]] = {}
    for c in order:
        d = fresh(comm, base, f"small-{c}")
        out: dict[str, float] = {}
        if c == "raw":
            path = d / "raw.dat"
            with timed(comm, out, "write_s"):
                fh = MPI.File.Open(comm, str(path), MPI.MODE_RDWR | MPI.MODE_CREATE)
                for step in range(a.count):
                    fh.Write_at_all((step * size + comm.Get_rank()) * nbytes, local)
                    node_sync(comm, [path])
                fh.Close()
        elif c == "posix":
            with timed(comm, out, "write_s"):
                with open(d / f"rank{comm.Get_rank()}.dat", "wb") as f:
                    for _ in range(a.count):
                        local.tofile(f)
                        f.flush()
                        os.fsync(f.fileno())
        else:
            options = dict(root=d, catalog=f"sqlite:///{d}/catalog.db", comm=comm, checksum=c == "sdm+checksum",
                           async_commit=c == "sdm-async", method="collective")
            clock = Clock([(Catalog, "reserve"), (Catalog, "record_writes")]) if comm.Get_rank() == 0 else Clock([])
            with timed(comm, out, "open_s"):
                s = sdm.open("small", **options)
            g = s.make_group("g", ["x"], dtype="f4", shape=shape, level=3)
            with clock, timed(comm, out, "write_s"):
                for step in range(a.count):
                    g.write("x", step, local)
                s.close()
            out["catalog_s"] = comm.bcast(clock.seconds, root=0)
        remove(comm, d)
        results[c] = out
    return results


# ----------------------------------------------------------------------------- report
def spread(values: list[float], fmt: str = "{:.3f}") -> str:
    return f"{fmt.format(median(values))} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def summarize(rounds: list[dict[str, dict[str, float]]], contenders: tuple[str, ...]) -> dict[str, Any]:
    """Per contender: every measured value per round, and ratios to ``raw`` within each round."""
    out: dict[str, Any] = {}
    for c in contenders:
        row: dict[str, Any] = {}
        for key in rounds[0][c]:
            row[key] = [r[c][key] for r in rounds]
        for key in ("write_s", "read_s"):
            if key in rounds[0][c] and key in rounds[0]["raw"]:
                row[f"{key[:-2]}_vs_raw"] = [r[c][key] / r["raw"][key] for r in rounds]
        out[c] = row
    return out


def bulk_shares(b: dict[str, Any]) -> dict[str, list[float]]:
    """Per round: the checksum's, the catalog's and the open's share of SDM's bulk write time."""
    ck, off = b["sdm+checksum"], b["sdm"]
    return {
        "checksum": [(w - o) / w for w, o in zip(ck["write_s"], off["write_s"])],
        "catalog": [c / w for c, w in zip(off["catalog_s"], off["write_s"])],
        "open": [o / (o + w) for o, w in zip(off["open_s"], off["write_s"])],
    }


def markdown(results: dict[str, Any], info: dict[str, Any]) -> str:
    lines = [
        "# SDM overhead over plain MPI-IO",
        "",
        f"{info['nprocs']} ranks on {info['cores']} cores; SDM {info['sdm_version']} ({info['git_commit']}), "
        f"{info['mpi']}, {info['date']}{', QUICK mode' if info['quick'] else ''}. Times: slowest rank, median "
        "(min-max) over the rounds; ratios within each round, then median (min-max). SDM times run from the "
        "first write to the end of `close()`; the session's open is `open s`. `catalog s`: rank 0 inside the "
        "catalog's reserve and commit; `checksum s`: the most any rank spent computing checksum shares.",
        "",
    ]
    for directory, res in results.items():
        b = res["bulk"]
        lines += [f"## {directory} ({res['fs']}; 1-min load {res['load_before']:.1f} before, "
                  f"{res['load_after']:.1f} after)", ""]
        if b:
            lines += [
                f"Bulk: {info['datasets']} float32 fields of {info['n']}^3 ({info['bulk_gbytes']:.2f} GB per run) at "
                f"{info['steps']} steps, level 3, 3-D Block; {info['rounds']} rounds.",
                "",
                "| contender | write s | write / raw | read s | read / raw | open s | catalog s | checksum s |",
                "|---|---|---|---|---|---|---|---|",
            ]
            for c, row in b.items():
                cells = [spread(row["write_s"]), spread(row["write_vs_raw"]), spread(row["read_s"]),
                         spread(row["read_vs_raw"])]
                cells += [spread(row[k]) if k in row else "-" for k in ("open_s", "catalog_s", "checksum_s")]
                lines.append(f"| {c} | " + " | ".join(cells) + " |")
            if res.get("auto_methods"):
                lines += ["", "`sdm-auto` chose: " + ", ".join(f"{m} ({k} writes)" for m, k in res["auto_methods"].items())
                          + "."]
            shares = bulk_shares(b)
            lines += ["", "Shares of the SDM bulk write time, within each round: the checksum = (sdm+checksum - sdm) / "
                      f"sdm+checksum: {spread(shares['checksum'])}; the catalog (rank 0 in reserve + commit) / write "
                      f"time: {spread(shares['catalog'])}; the session's open / (open + write): "
                      f"{spread(shares['open'])}."]
        for nbytes, rows in res["small"].items():
            lines += [
                "",
                f"Small writes: {info['count']} writes of {int(nbytes) // 1024} KiB per rank, one step each, synced "
                "each; ms per write over `raw` = (contender - raw) / writes, within each round.",
                "",
                "| contender | write s | write / raw | ms per write over raw | open s | catalog ms per write |",
                "|---|---|---|---|---|---|",
            ]
            for c, row in rows.items():
                over = [(w - r) / info["count"] * 1e3 for w, r in zip(row["write_s"], rows["raw"]["write_s"])]
                cat = [x / info["count"] * 1e3 for x in row["catalog_s"]] if "catalog_s" in row else None
                lines.append(f"| {c} | {spread(row['write_s'])} | {spread(row['write_vs_raw'])} | "
                             f"{spread(over)} | {spread(row['open_s']) if 'open_s' in row else '-'} | "
                             f"{spread(cat) if cat else '-'} |")
        lines.append("")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dir", action="append", help="parent of the scratch directories (repeatable; default /dev/shm)")
    p.add_argument("--n", type=int, default=None, help="edge of the bulk 3-D fields (256; --quick: 96)")
    p.add_argument("--datasets", type=int, default=3)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--count", type=int, default=None, help="small writes per run (500; --quick: 200)")
    p.add_argument("--small", type=int, action="append", help="bytes per rank of a small write (repeatable)")
    p.add_argument("--rounds", type=int, default=None, help="rounds (5; --quick: 3)")
    p.add_argument("--quick", action="store_true", help="n=96, 200 small writes, 3 rounds (for development)")
    p.add_argument("--only", choices=("bulk", "small"), help="measure one workload only")
    p.add_argument("--out", type=Path, default=RESULTS)
    a = p.parse_args()
    for key, full, quick in (("n", 256, 96), ("count", 500, 200), ("rounds", 5, 3)):
        if getattr(a, key) is None:
            setattr(a, key, quick if a.quick else full)
    dirs = a.dir or ["/dev/shm"]
    sizes = a.small or [4096, 65536]
    comm = MPI.COMM_WORLD
    show = say(comm)
    results: dict[str, Any] = {}
    for parent in dirs:
        CHOSEN.clear()
        load_before = os.getloadavg()[0]
        with scratch(comm, None, "sdm-overhead-", parent) as base:
            bulk, small = [], {n: [] for n in sizes}
            for k in range(a.rounds):
                order = list(BULK[k % len(BULK):] + BULK[:k % len(BULK)])
                if a.only != "small":
                    bulk.append(bulk_round(comm, base, a, order))
                    show(f"{parent} round {k + 1}/{a.rounds} bulk: " + ", ".join(
                        f"{c} {bulk[-1][c]['write_s']:.3f}/{bulk[-1][c]['read_s']:.3f} s" for c in BULK))
                for nbytes in sizes if a.only != "bulk" else []:
                    order = list(SMALL[k % len(SMALL):] + SMALL[:k % len(SMALL)])
                    small[nbytes].append(small_round(comm, base, a, nbytes, order))
                    show(f"{parent} round {k + 1}/{a.rounds} small {nbytes} B: " + ", ".join(
                        f"{c} {small[nbytes][-1][c]['write_s'] / a.count * 1e3:.3f} ms" for c in SMALL))
            m = meta(comm, base, load_before)
        summary = summarize(bulk, BULK) if bulk else {}
        results[parent] = {"fs": m["fs"], "load_before": m["load_before"], "load_after": m["load_after"],
                           "bulk": summary, "bulk_shares": bulk_shares(summary) if summary else {},
                           "auto_methods": {m: CHOSEN.count(m) for m in sorted(set(CHOSEN))},
                           "small": {str(n): summarize(r, SMALL) for n, r in small.items() if r}}
    info = {**{k: v for k, v in m.items() if k not in ("fs", "load_before", "load_after")}, **provenance(),
            "n": a.n, "datasets": a.datasets, "steps": a.steps, "count": a.count, "small_bytes": sizes,
            "rounds": a.rounds, "quick": a.quick, "bulk_gbytes": a.datasets * a.steps * a.n ** 3 * 4 / 1e9}
    if comm.Get_rank() == 0:
        import json

        a.out.mkdir(parents=True, exist_ok=True)
        text = markdown(results, info)
        (a.out / "overhead.json").write_text(json.dumps({"info": info, "results": results}, separators=(",", ":"), default=str))
        (a.out / "overhead.md").write_text(text)
        print(text)


if __name__ == "__main__":
    main()
