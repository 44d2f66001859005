"""What the irregular-application benchmarks share (partition.py, cequal.py, imports.py).

A :class:`Bench` owns the scratch directory and the run's metadata; configurations run
in an order that rotates from repeat to repeat (:func:`rotated`), each in a fresh
directory removed afterwards; medians over the repeats are reported; the results go to
``<out>/<name>.json``, ``.md`` and ``.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from statistics import median
from typing import Any, Callable, Sequence

import numpy as np

from mpi4py import MPI

from _io_bench import fresh, provenance, provenance_text, remove  # scratch directories, SDM version and commit
from sdm._cli.bench import fs_type

__all__ = ["Bench", "arguments", "rotated", "med", "spread", "table", "pyplot", "stacked_bars", "mesh_problem"]

RESULTS = Path(__file__).resolve().parent / "results"


def arguments(description: str, repeats: int = 5) -> argparse.ArgumentParser:
    """Options every benchmark takes (``--repeats``, ``--root``, ``--out``)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--repeats", type=int, default=repeats, help=f"repeats per configuration (median reported, default {repeats})")
    p.add_argument("--root", default=None, help="scratch directory (default: a new temporary directory, removed afterwards)")
    p.add_argument("--out", default=str(RESULTS), help="results directory (default benchmarks/results)")
    return p


def rotated(configs: Sequence[Any], rep: int) -> list[Any]:
    """*configs* starting at position ``rep``: no configuration always runs first or last."""
    k = rep % len(configs)
    return list(configs[k:]) + list(configs[:k])


def med(samples: Sequence[dict[str, Any]], key: str) -> float:
    """Median of ``sample[key]``."""
    return float(median(s[key] for s in samples))


def spread(samples: Sequence[dict[str, Any]], key: str) -> tuple[float, float]:
    """``(min, max)`` of ``sample[key]``."""
    values = [s[key] for s in samples]
    return float(min(values)), float(max(values))


def table(cols: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table (first column left-aligned, the others right-aligned)."""
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join(["---"] + ["---:"] * (len(cols) - 1)) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


class Bench:
    """Scratch space, progress lines and results of one benchmark run (collective)."""

    def __init__(self, comm: MPI.Comm, name: str, args: argparse.Namespace) -> None:
        self.comm, self.name, self.args = comm, name, args
        self.rank = comm.Get_rank()
        base = (args.root or tempfile.mkdtemp(prefix=f"sdm-bench-{name}-")) if self.rank == 0 else None
        self.base = Path(comm.bcast(base, root=0)).resolve()
        self.t0, self.load_before = time.perf_counter(), os.getloadavg()[0]

    def say(self, text: str) -> None:
        """A progress line on rank 0."""
        if self.rank == 0:
            print(text, flush=True)

    def fresh(self, name: str) -> Path:
        """An empty directory under the scratch space (collective)."""
        return fresh(self.comm, self.base, name)

    def remove(self, path: Path) -> None:
        """Remove a directory made by :meth:`fresh` (collective)."""
        remove(self.comm, path)

    def meta(self, **extra: Any) -> dict[str, Any]:
        """The run's conditions: ranks, cores, load, file system, MPI, date, duration."""
        return dict(
            **provenance(), nprocs=self.comm.Get_size(), cores=os.cpu_count(), repeats=self.args.repeats,
            fs=fs_type(self.base) or "unknown", mpi=MPI.Get_library_version().splitlines()[0].strip(),
            load_before=self.load_before, load_after=os.getloadavg()[0], python=platform.python_version(),
            host=platform.node(), seconds=time.perf_counter() - self.t0,
            date=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), **extra,
        )

    def conditions(self, meta: dict[str, Any]) -> str:
        """One sentence for a Markdown header."""
        return (f"{meta['nprocs']} ranks on {meta['cores']} cores, {meta['fs']} file system; median of "
                f"{meta['repeats']} repeats (order rotated), {meta['date']} (1-min load average "
                f"{meta['load_before']:.1f} before, {meta['load_after']:.1f} after). {provenance_text(meta)}")

    def repeat(self, configs: Sequence[str], measure: Callable[[str, Path], dict[str, Any]],
               line: Callable[[dict[str, Any]], str], warmup: Sequence[str] = ()) -> dict[str, list[dict[str, Any]]]:
        """Measure every configuration ``repeats`` times, order rotated, each in a fresh directory.

        ``measure(config, directory)`` returns a sample; ``line(sample)`` its progress text.
        The *warmup* configurations run once first, not recorded (code paths, page cache).
        Samples carrying ``digests`` (what every rank ended with) must all agree; the
        key is removed.

        Raises
        ------
        RuntimeError
            When two samples' digests differ (the configurations computed different things).
        """
        if warmup:
            d = self.fresh("warmup")
            for config in warmup:
                measure(config, d)
            self.remove(d)
        samples: dict[str, list[dict[str, Any]]] = {c: [] for c in configs}
        for rep in range(self.args.repeats):
            for config in rotated(configs, rep):
                d = self.fresh(f"{config.replace('/', '-').replace(' ', '-')}-r{rep}")
                sample = measure(config, d)
                self.remove(d)
                samples[config].append(sample)
                self.say(f"repeat {rep + 1}/{self.args.repeats}  {config:<18s} {line(sample)}")
        digests = {tuple(r.pop("digests", ())) for runs in samples.values() for r in runs}
        if len(digests) > 1:
            raise RuntimeError(f"the configurations {list(configs)} gave different results on some rank")
        return samples

    def finish(self, meta: dict[str, Any], data: dict[str, Any], markdown: str,
               plot: Callable[[Path], None]) -> int:
        """Remove the scratch space; rank 0 writes JSON, Markdown and PNG. Returns 0."""
        self.comm.Barrier()
        if self.rank == 0 and not self.args.root:
            shutil.rmtree(self.base, ignore_errors=True)
        if self.rank != 0:
            return 0
        out = Path(self.args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{self.name}.json").write_text(json.dumps({"meta": meta, **data}, separators=(",", ":"), default=float))
        (out / f"{self.name}.md").write_text(markdown)
        plot(out / f"{self.name}.png")
        print(markdown)
        print(f"wrote {out}/{self.name}.json, {self.name}.md, {self.name}.png in {meta['seconds']:.0f} s")
        return 0


def pyplot():
    """matplotlib's pyplot on the Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def stacked_bars(path: Path, rows: Sequence[dict[str, Any]], parts: Sequence[tuple[str, str]], label: Callable[[dict], str],
                 ylabel: str, title: str) -> None:
    """One stacked bar per row: ``parts`` are ``(key, legend)`` from bottom to top; *label* tops each bar."""
    plt = pyplot()
    x = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    bottom = np.zeros(len(rows))
    for key, legend in parts:
        height = np.array([r.get(key, 0.0) for r in rows])
        ax.bar(x, height, 0.6, bottom=bottom, label=legend)
        bottom += height
    for xi, top, r in zip(x, bottom, rows):
        ax.annotate(label(r), (xi, top), ha="center", va="bottom", fontsize=9)
    ax.set_xticks(x, [r["config"] for r in rows])
    ax.set_ylabel(ylabel)
    ax.margins(y=0.12)
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    from _plots import save_png
    save_png(fig, path, dpi=120)
    plt.close(fig)


def mesh_problem(name: str, description: str, argv: Sequence[str] | None) -> tuple[Bench, Any]:
    """Options, scratch space and the FUN3D-like inputs of the mesh benchmarks (collective).

    Returns the :class:`Bench` and the :class:`sdm.examples.fun3d.Problem` (made once, not timed).
    """
    from sdm.examples import fun3d

    p = arguments(description)
    p.add_argument("--edges", type=int, default=1_500_000, help="target edge count (default 1.5 million)")
    p.add_argument("--partitioner", choices=("auto", "metis", "rcb"), default="auto", help="partitioning vector")
    a = p.parse_args(argv)
    bench = Bench(MPI.COMM_WORLD, name, a)
    problem = fun3d.prepare(bench.comm, bench.base / "inputs", a.edges, partitioner=a.partitioner)
    inp = problem.inputs
    bench.say(f"mesh {problem.name}: {inp.n_nodes} nodes, {inp.n_edges} edges, inputs {inp.nbytes / 1e6:.1f} MB")
    return bench, problem
