"""ASTRO3D benchmark: SDM at organization levels 1-3 against plain MPI-IO, side by side.

Run under MPI (see benchmarks/README.md)::

    mpiexec -n 4 python benchmarks/astro3d.py --n 128

For each repeat: the ASTRO3D template (:mod:`sdm.examples.astro3d`) at levels 1, 2
and 3 through SDM (write, then read back on the same view), and the same bytes with
plain ``MPI.File.Write_at_all`` / ``Read_at_all``: one file per group (the level-3
file count), the same block subarray file views, the same sync after every write, no
catalog, no checksum.  The order of the four configurations rotates from repeat to
repeat; each measurement runs in a fresh directory that is removed afterwards; a small
warm-up run comes first and is not recorded.  Medians over the repeats are reported;
the SDM/raw ratios are taken within each repeat, then their median.

Writes ``benchmarks/results/astro3d.{json,md,png}`` (``--out`` to change).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from statistics import median
from typing import Any, Sequence

import numpy as np
from mpi4py import MPI
from mpi4py.util import dtlib

from sdm import config
from sdm._cli.bench import fs_type
from sdm.examples import astro3d
from sdm.examples._template import MB, Stopwatch, make_view, pattern
from sdm.examples.astro3d import astro3d_groups

from _io_bench import fresh, provenance, provenance_text, remove

LEVELS = (1, 2, 3)


def raw_run(comm: MPI.Comm, n: int, steps: int, root: Path, sync: bool) -> dict[str, Any]:
    """Write and read the ASTRO3D dumps with plain MPI-IO (collective, subarray views).

    One file per group, kept open for all its writes; the datasets are appended in
    the order SDM's level 3 uses; ``fh.Sync()`` after each write when *sync*.  Timed
    like :func:`sdm.examples.astro3d.run_template` (barrier-aligned sections, data
    generation excluded, file opens and closes included).

    Returns
    -------
    dict
        ``files``, ``bytes``, ``write_seconds``, ``write_mbps``, ``read_seconds``,
        ``read_mbps``, ``mismatches`` (values read back that differ from what was written).
    """
    size, rank = comm.Get_size(), comm.Get_rank()
    specs = astro3d_groups(n)
    types: dict[str, tuple[MPI.Datatype, MPI.Datatype, Any]] = {}
    for spec in specs:
        piece = make_view("block", spec, size).piece(spec.shape, size, rank)
        etype = dtlib.from_numpy_dtype(np.dtype(spec.dtype)).Dup().Commit()
        if piece.size == 0:
            ftype = etype.Create_contiguous(0).Commit()
        else:
            ftype = etype.Create_subarray(list(spec.shape), list(piece.counts), list(piece.starts), MPI.ORDER_C).Commit()
        types[spec.name] = (etype, ftype, piece)
    paths = {s.name: root / f"{s.name}.raw" for s in specs}
    if rank == 0:
        root.mkdir(parents=True, exist_ok=True)
    comm.Barrier()

    def sweep(writing: bool, clock: Stopwatch) -> tuple[int, int]:
        amode = (MPI.MODE_RDWR | MPI.MODE_CREATE) if writing else MPI.MODE_RDONLY
        handles: dict[str, MPI.File] = {}
        ends = {s.name: 0 for s in specs}
        nbytes = bad = 0
        for step in range(1, steps + 1):
            for spec in specs:
                if step % spec.every:
                    continue
                etype, ftype, piece = types[spec.name]
                if spec.name not in handles:
                    with clock():
                        handles[spec.name] = MPI.File.Open(comm, str(paths[spec.name]), amode)
                fh = handles[spec.name]
                for name in spec.datasets:
                    want = np.ascontiguousarray(pattern(name, step, piece.indices, spec.shape, spec.dtype))
                    buf = want if writing else np.empty_like(want)
                    with clock():
                        fh.Set_view(ends[spec.name], etype, ftype)
                        if writing:
                            fh.Write_at_all(0, [buf, piece.size, etype])
                            if sync:
                                fh.Sync()
                        else:
                            fh.Read_at_all(0, [buf, piece.size, etype])
                    if not writing:
                        bad += int(np.count_nonzero(buf != want))
                    ends[spec.name] += spec.nbytes
                    nbytes += spec.nbytes
        with clock():
            for fh in handles.values():
                fh.Close()
        return nbytes, bad

    tw, tr = Stopwatch(comm), Stopwatch(comm)
    nbytes, _ = sweep(True, tw)
    _, bad = sweep(False, tr)
    for etype, ftype, _ in types.values():
        ftype.Free()
        etype.Free()
    ws, rs = tw.total(), tr.total()
    return dict(files=len(paths), bytes=nbytes, write_seconds=ws, read_seconds=rs, write_mbps=nbytes / MB / ws,
                read_mbps=nbytes / MB / rs, mismatches=comm.allreduce(bad, op=MPI.SUM))


def summarize(samples: dict[str, list[dict[str, Any]]], raw: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Median rows per configuration (levels 1-3, then raw) with per-repeat SDM/raw ratios."""
    rows = []

    for level, runs in samples.items():
        rows.append(dict(
            config=f"SDM level {level}", level=int(level), files=runs[0]["files"], writes=runs[0]["writes"],
            mbytes=runs[0]["bytes_written"] / MB,
            write_mbps=median(r["write_mbps"] for r in runs), read_mbps=median(r["read_mbps"] for r in runs),
            write_seconds=median(r["write_seconds"] for r in runs), read_seconds=median(r["read_seconds"] for r in runs),
            catalog_seconds=median(r["write_catalog_seconds"] for r in runs),
            catalog_calls=runs[0]["write_catalog_calls"],
            catalog_share=median(r["write_catalog_share"] for r in runs),
            read_catalog_share=median(r["read_catalog_share"] for r in runs),
            write_ratio=median(q["write_seconds"] / r["write_seconds"] for r, q in zip(runs, raw)),
            read_ratio=median(q["read_seconds"] / r["read_seconds"] for r, q in zip(runs, raw)),
            write_range=[min(r["write_mbps"] for r in runs), max(r["write_mbps"] for r in runs)],
            read_range=[min(r["read_mbps"] for r in runs), max(r["read_mbps"] for r in runs)],
        ))
    rows.append(dict(
        config="raw MPI-IO", level=None, files=raw[0]["files"], writes=rows[0]["writes"], mbytes=raw[0]["bytes"] / MB,
        write_mbps=median(q["write_mbps"] for q in raw), read_mbps=median(q["read_mbps"] for q in raw),
        write_seconds=median(q["write_seconds"] for q in raw), read_seconds=median(q["read_seconds"] for q in raw),
        catalog_seconds=0.0, catalog_calls=0, catalog_share=0.0, read_catalog_share=0.0, write_ratio=1.0, read_ratio=1.0,
        write_range=[min(q["write_mbps"] for q in raw), max(q["write_mbps"] for q in raw)],
        read_range=[min(q["read_mbps"] for q in raw), max(q["read_mbps"] for q in raw)],
    ))
    return rows


def markdown(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    """The results as a Markdown table with a short header."""
    head = (f"# ASTRO3D benchmark\n\n{meta['n']}^3 grid, {meta['steps']} steps ({meta['writes']} writes, "
            f"{meta['mbytes']:.1f} MB), {meta['nprocs']} ranks on {meta['cores']} cores, {meta['fs']} file system, "
            f"sync {'on' if meta['sync'] else 'off'}, method {meta['method']}, catalog {meta['catalog_kind']}; "
            f"median of {meta['repeats']} repeats, {meta['date']} (1-min load average {meta['load_before']:.1f} "
            f"before, {meta['load_after']:.1f} after). {provenance_text(meta)}\n\n")
    cols = ["config", "files", "write MB/s", "read MB/s", "catalog s", "catalog share (write)",
            "catalog share (read)", "SDM/raw write", "SDM/raw read"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join(["---"] + ["---:"] * (len(cols) - 1)) + "|"]
    for r in rows:
        lines.append("| " + " | ".join([
            r["config"], str(r["files"]),
            f"{r['write_mbps']:.0f} ({r['write_range'][0]:.0f}-{r['write_range'][1]:.0f})",
            f"{r['read_mbps']:.0f} ({r['read_range'][0]:.0f}-{r['read_range'][1]:.0f})",
            f"{r['catalog_seconds']:.3f}", f"{100 * r['catalog_share']:.1f} %", f"{100 * r['read_catalog_share']:.1f} %",
            f"{r['write_ratio']:.2f}", f"{r['read_ratio']:.2f}",
        ]) + " |")
    note = ("\n\nBandwidths: median (min-max) over the repeats. SDM/raw is bandwidth over bandwidth (time of raw over time of SDM) for the same bytes in the same "
            "repeat; below 1 means SDM is slower. Raw MPI-IO: one file per group, the same subarray views, "
            "the same sync, no catalog and no checksum.\n")
    return head + "\n".join(lines) + note


def plot(rows: list[dict[str, Any]], meta: dict[str, Any], path: Path) -> None:
    """Grouped bars of write and read bandwidth per configuration, catalog share annotated."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    def err(key: str) -> np.ndarray:
        return np.array([[r[f"{key}_mbps"] - r[f"{key}_range"][0], r[f"{key}_range"][1] - r[f"{key}_mbps"]]
                         for r in rows]).T

    w = ax.bar(x - 0.2, [r["write_mbps"] for r in rows], 0.4, yerr=err("write"), capsize=3, label="write")
    ax.bar(x + 0.2, [r["read_mbps"] for r in rows], 0.4, yerr=err("read"), capsize=3, label="read")
    for xi, r, bar in zip(x, rows, w):
        if r["level"] is not None:
            ax.annotate(f"catalog\n{100 * r['catalog_share']:.0f}%", (xi - 0.2, bar.get_height() / 2),
                        ha="center", va="center", fontsize=8, color="white")
    ax.set_xticks(x, [f"{r['config']}\n{r['files']} files" for r in rows])
    ax.set_ylabel("MB/s (median; bars: min-max)")
    ax.set_title(f"ASTRO3D {meta['n']}^3, {meta['mbytes']:.0f} MB, {meta['nprocs']} ranks, {meta['fs']}")
    ax.legend()
    fig.tight_layout()
    from _plots import save_png
    save_png(fig, path, dpi=120)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark (collective); rank 0 writes the results."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=128, help="grid edge (default 128)")
    p.add_argument("--steps", type=int, default=12, help="time steps (default 12: 45 writes)")
    p.add_argument("--repeats", type=int, default=5, help="repeats per configuration (median reported)")
    p.add_argument("--root", default=None, help="scratch directory for the data (default: a new temp dir)")
    p.add_argument("--catalog", default=None, help="catalog URL (default: a fresh SQLite file per measurement)")
    p.add_argument("--method", default="auto", help="SDM I/O method")
    p.add_argument("--no-sync", action="store_true", help="no sync after writes (SDM and raw alike)")
    p.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"), help="results directory")
    a = p.parse_args(argv)
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    sync = False if a.no_sync else config.sync_enabled()
    base = None
    if rank == 0:
        base = a.root or tempfile.mkdtemp(prefix="sdm-bench-")
    base = Path(comm.bcast(base, root=0)).resolve()

    def say(text: str) -> None:
        if rank == 0:
            print(text, flush=True)

    samples: dict[str, list[dict[str, Any]]] = {str(lv): [] for lv in LEVELS}
    raw: list[dict[str, Any]] = []
    t_start, load_before = time.perf_counter(), os.getloadavg()[0]
    # warm-up (MPI-IO, SQLAlchemy and numpy code paths), not recorded
    d = fresh(comm, base, "warmup")
    astro3d.run(comm, 16, 4, 3, root=d, catalog=f"sqlite:///{d}/catalog.db", method=a.method, sync=sync)
    raw_run(comm, 16, 4, d / "raw", sync)
    remove(comm, d)
    configs: list[int | None] = [*LEVELS, None]  # None: raw MPI-IO
    for rep in range(a.repeats):
        # rotate the order every repeat so no configuration always runs first or last
        for level in configs[rep % len(configs):] + configs[:rep % len(configs)]:
            d = fresh(comm, base, f"{'raw' if level is None else f'sdm-l{level}'}-r{rep}")
            if level is None:
                q = raw_run(comm, a.n, a.steps, d, sync)
                remove(comm, d)
                if q["mismatches"]:
                    say(f"raw MPI-IO read back {q['mismatches']} wrong values")
                    return 1
                raw.append(q)
                say(f"repeat {rep + 1}/{a.repeats}  raw MPI-IO   : {q['files']:3d} files  write "
                    f"{q['write_mbps']:8.1f} MB/s  read {q['read_mbps']:8.1f} MB/s")
                continue
            url = a.catalog or f"sqlite:///{d}/catalog.db"
            res = astro3d.run(comm, a.n, a.steps, level, root=d, catalog=url, method=a.method, read=True,
                              read_view="same", sync=sync)
            remove(comm, d)
            samples[str(level)].append(res)
            say(f"repeat {rep + 1}/{a.repeats}  SDM level {level}: {res['files']:3d} files  write "
                f"{res['write_mbps']:8.1f} MB/s  read {res['read_mbps']:8.1f} MB/s  catalog "
                f"{100 * res['write_catalog_share']:5.1f} % of write")
    if rank == 0 and not a.root:
        shutil.rmtree(base, ignore_errors=True)
    if rank != 0:
        return 0

    rows = summarize(samples, raw)
    first = samples["1"][0]
    meta = dict(
        **provenance(), n=a.n, steps=a.steps, repeats=a.repeats, nprocs=comm.Get_size(), cores=os.cpu_count(), sync=sync,
        method=a.method, writes=first["writes"], mbytes=first["bytes_written"] / MB, fs=fs_type(base) or "unknown",
        catalog_kind=(a.catalog or "sqlite").split(":", 1)[0], mpi=MPI.Get_library_version().splitlines()[0].strip(),
        load_before=load_before, load_after=os.getloadavg()[0], python=platform.python_version(),
        host=platform.node(), seconds=time.perf_counter() - t_start,
        date=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    )
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    strip = ("file_paths", "groups", "catalog", "root")
    samples_out = {lv: [{k: v for k, v in r.items() if k not in strip} for r in runs] for lv, runs in samples.items()}
    (out / "astro3d.json").write_text(json.dumps({"meta": meta, "rows": rows, "sdm": samples_out, "raw": raw}, indent=1))
    md = markdown(rows, meta)
    (out / "astro3d.md").write_text(md)
    plot(rows, meta, out / "astro3d.png")
    print(md)
    print(f"wrote {out}/astro3d.json, astro3d.md, astro3d.png in {meta['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
