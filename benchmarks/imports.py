"""Import benchmark: FUN3D-like inputs read by all ranks in parallel (SDM) vs by rank 0 and broadcast.

Run under MPI (see benchmarks/README.md)::

    mpiexec -n 4 python benchmarks/imports.py                   # ~1.5 million edges, 5 repeats

The FUN3D template's start-up (:mod:`sdm.examples.fun3d`): the raw input file holds
``edge1``, ``edge2`` (int32), four edge arrays and four node arrays (float64).  Each
rank must end with its nodes and edges (ghosts included) and their values.

===============  ============================================================================
SDM computed     ``import_with_sdm(history=False)``: both edge arrays imported in contiguous
                 blocks in parallel, partition computed (all-to-all), then the eight arrays
                 imported through the edge and node map arrays (collective MPI-IO, ghost
                 rows filled), every import recorded in the catalog
SDM history      the same with the partition loaded from the index history of a previous
                 run (made, untimed, just before)
original         rank 0 reads the whole file, ``Bcast`` to every rank, every rank picks its
                 nodes, edges and values (the application without SDM)
===============  ============================================================================

Time is split into *read* (getting the values in: SDM's eight imports through the maps;
rank 0's read plus the broadcast) and *distribute* (SDM's partition, which imports the
edges in parallel when no history fits; the original's selection).  Every
configuration must give every rank the same local mesh (checked).  Writes
``benchmarks/results/imports.{json,md,png}``.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from mpi4py import MPI

import sdm
from sdm import irregular
from sdm.examples import fun3d
from sdm.examples._irregular import Phases

from _irregular_bench import Bench, med, mesh_problem, spread, stacked_bars, table

CONFIGS = ("SDM computed", "SDM history", "original")
READ = {"SDM computed": ("import arrays",), "SDM history": ("import arrays",),
        "original": ("read + broadcast",)}
DISTRIBUTE = {"SDM computed": "partition", "SDM history": "partition", "original": "distribute"}


def _digest(local: fun3d.LocalMesh) -> str:
    h = hashlib.sha256(f"{local.n_owned_nodes}:{local.n_owned_edges}".encode())
    for a in (local.nodes, local.edges, local.local_edges, local.x, local.y):
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def measure(comm: MPI.Comm, config: str, problem: fun3d.Problem, d: Path) -> dict[str, Any]:
    """One timed import in directory *d* (collective)."""
    ph = Phases(comm)
    if config == "original":
        local = fun3d.import_original(comm, problem, ph)
    else:
        url = f"sqlite:///{d}/catalog.db"
        history = config == "SDM history"
        if history:  # a previous run leaves the history (not timed)
            with sdm.open(fun3d.APPLICATION, root=d, catalog=url, comm=comm) as s:
                inp = problem.inputs
                ef = irregular.EdgeFile(inp.path, inp.n_edges, inp.n_nodes, inp.edge1_offset, inp.edge2_offset,
                                        inp.index_dtype)
                irregular.partition(s, problem.name, problem.partvec, ef)
        with sdm.open(fun3d.APPLICATION, root=d, catalog=url, comm=comm) as s:
            p, local = fun3d.import_with_sdm(s, problem, ph, history=history)
        if p.source != ("history" if history else "computed"):
            raise RuntimeError(f"{config}: partition source {p.source!r} ({p.note})")
    t = ph.totals()
    read = sum(t[k]["seconds"] for k in READ[config])
    dist = t[DISTRIBUTE[config]]["seconds"]
    return dict(config=config, read_s=read, distribute_s=dist, total_s=read + dist,
                phases={k: v["seconds"] for k, v in t.items()}, digests=comm.allgather(_digest(local)))


def summarize(samples: dict[str, list[dict[str, Any]]], nbytes: int) -> list[dict[str, Any]]:
    """Median rows with ratios to the original (original time / configuration time)."""
    orig = samples["original"]
    return [dict(config=c, read_s=med(samples[c], "read_s"), distribute_s=med(samples[c], "distribute_s"),
                 total_s=med(samples[c], "total_s"), total_range=spread(samples[c], "total_s"),
                 read_mbps=nbytes / 1e6 / med(samples[c], "read_s"),
                 speedup=float(np.median([o["total_s"] / r["total_s"] for r, o in zip(samples[c], orig)])),
                 read_speedup=float(np.median([o["read_s"] / r["read_s"] for r, o in zip(samples[c], orig)])))
            for c in CONFIGS]


def markdown(rows: list[dict[str, Any]], meta: dict[str, Any], bench: Bench) -> str:
    """Results table with the ratios."""
    head = (f"# Import: all ranks in parallel (SDM) vs rank 0 reads and broadcasts\n\nFUN3D-like inputs: "
            f"{meta['n_nodes']} nodes, {meta['n_edges']} edges, {meta['mbytes']:.1f} MB (edges + 4 edge arrays + "
            f"4 node arrays), {meta['partitioner']} partitioning vector; " + bench.conditions(meta) + "\n\n")
    body = table(["configuration", "read s", "read MB/s", "distribute s", "total s (min-max)", "original / this (total)",
                  "original / this (read)"],
                 [[r["config"], f"{r['read_s']:.3f}", f"{r['read_mbps']:.0f}", f"{r['distribute_s']:.3f}",
                   f"{r['total_s']:.3f} ({r['total_range'][0]:.3f}-{r['total_range'][1]:.3f})", f"{r['speedup']:.2f}",
                   f"{r['read_speedup']:.2f}"] for r in rows])
    tail = ("\n\n*read*: SDM's imports of the eight arrays through the map arrays (ghost rows included, each "
            "recorded in the catalog) / rank 0's read of the whole file plus the broadcast. *distribute*: SDM's "
            "partition (edges imported in parallel and redistributed, or the index history loaded without reading "
            "the unchanged edges) / the original's "
            "selection of each rank's nodes and edges from the broadcast arrays. Above 1 means faster than the "
            "original; ratios are taken within each repeat, then their median. Every configuration gave every rank "
            "the same local mesh.\n")
    return head + body + tail


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark (collective); rank 0 writes the results."""
    bench, problem = mesh_problem("imports", __doc__.splitlines()[0], argv)
    comm, inp = bench.comm, problem.inputs
    samples = bench.repeat(CONFIGS, lambda c, d: measure(comm, c, problem, d),
                           lambda r: f"read {r['read_s']:.3f} s  distribute {r['distribute_s']:.3f} s", warmup=CONFIGS)
    rows = summarize(samples, inp.nbytes - inp.header)
    meta = bench.meta(edges_target=bench.args.edges, n_edges=inp.n_edges, n_nodes=inp.n_nodes,
                      partitioner=problem.partitioner, mbytes=(inp.nbytes - inp.header) / 1e6)
    title = f"FUN3D-like import, {meta['mbytes']:.0f} MB, {meta['nprocs']} ranks"
    return bench.finish(meta, {"rows": rows, "samples": samples}, markdown(rows, meta, bench),
                        lambda path: stacked_bars(path, rows, [("read_s", "read (import / read + broadcast)"),
                                                               ("distribute_s", "distribute (partition / selection)")],
                                                  lambda r: f"{r['total_s']:.2f} s", "seconds (median)", title))


if __name__ == "__main__":
    sys.exit(main())
