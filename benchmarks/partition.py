"""Partitioning benchmark: a FUN3D-like mesh partitioned from an index history vs computed.

Run under MPI (see benchmarks/README.md)::

    mpiexec -n 4 python benchmarks/partition.py                 # ~1.5 million edges, 5 repeats

The mesh (:func:`sdm.examples.meshes.tet_mesh`) and its partitioning vector (METIS when
``pymetis`` is installed, else recursive bisection) are made once and not timed.  Each
measurement opens a session on a fresh catalog (not timed), then times, barrier to
barrier on the slowest rank, the two steps of :func:`sdm.irregular.partition`'s use in
the FUN3D template: the application hands ``partition`` its ``EdgeFile``; *import edges*
(both edge arrays read in parallel when needed, as recorded in the catalog) and the rest,
*partition*:

=================  ==========================================================================
computed/alltoall  ``history=False``: edges redistributed with one all-to-all exchange
computed/ring      ``history=False``: the paper's ring (blocks travel around the ranks)
first run          ``history=True`` on a catalog without a history: computed (all-to-all),
                   then written to a history file and registered
history            ``history=True`` with the history of a previous run (made, untimed, just
                   before): the edge file and partitioning vector are unchanged (same file
                   identity), so the edges are not read: catalog lookup, three contiguous
                   reads per rank
history, file      as *history*, but the edge file was touched (new identity, same bytes):
touched            the edges are imported and hashed, the content hash finds the history
=================  ==========================================================================

Every configuration must give every rank the same partition (checked).  Writes
``benchmarks/results/partition.{json,md,png}``.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from mpi4py import MPI

import sdm
from sdm import irregular
from sdm._collective import root_call
from sdm.catalog import irregular as records
from sdm.examples import fun3d
from sdm.examples._irregular import Phases

from _irregular_bench import Bench, med, mesh_problem, spread, stacked_bars, table

CONFIGS = ("computed/alltoall", "computed/ring", "first run", "history", "history, file touched")


def _digest(p: irregular.Partition) -> str:
    h = hashlib.sha256()
    for a in (p.nodes, p.edges, p.local_edges):
        h.update(np.ascontiguousarray(a, dtype=np.int64).tobytes())
    return h.hexdigest()


def measure(comm: MPI.Comm, config: str, problem: fun3d.Problem, d: Path) -> dict[str, Any]:
    """One timed partitioning in directory *d* (collective).

    The application hands :func:`sdm.irregular.partition` the edge file, as the FUN3D
    template does; *import edges* is the time the catalog recorded for the imports of
    the edges inside it (zero when the history spares them), *partition* the rest.
    """
    inp = problem.inputs
    ef = irregular.EdgeFile(inp.path, inp.n_edges, inp.n_nodes, inp.edge1_offset, inp.edge2_offset, inp.index_dtype)
    url = f"sqlite:///{d}/catalog.db"
    history = config.startswith(("first run", "history"))
    method = "ring" if config == "computed/ring" else "alltoall"
    if config.startswith("history"):  # a previous run leaves the history (not timed)
        with sdm.open(fun3d.APPLICATION, root=d, catalog=url, comm=comm) as s:
            irregular.partition(s, problem.name, problem.partvec, ef)
        if config == "history, file touched" and comm.Get_rank() == 0:
            os.utime(inp.path)  # new identity, same content: checked by content hash
        comm.Barrier()
    with sdm.open(fun3d.APPLICATION, root=d, catalog=url, comm=comm) as s:
        ph = Phases(comm)
        with ph("partition"):
            p = irregular.partition(s, problem.name, problem.partvec, ef, history=history, method=method)
        total = ph.totals()["partition"]["seconds"]
        imported = root_call(comm, lambda: sum(i.seconds for i in records.imports(s.catalog, run_id=s.run_id)))
    expected_source = "history" if config.startswith("history") else "computed"
    if p.source != expected_source:
        raise RuntimeError(f"{config}: partition source {p.source!r} ({p.note})")
    return dict(config=config, import_s=imported, partition_s=total - imported, total_s=total, source=p.source,
                exchanged_edges=int(comm.allreduce(int(p.stats.get("exchanged_edges", 0)), op=MPI.SUM)),
                digests=comm.allgather(_digest(p)))


def summarize(samples: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Median rows per configuration, with ratios to the history configuration."""
    hist = samples["history"]
    rows = []
    for config in CONFIGS:
        runs = samples[config]
        rows.append(dict(
            config=config, import_s=med(runs, "import_s"), partition_s=med(runs, "partition_s"),
            total_s=med(runs, "total_s"), total_range=spread(runs, "total_s"), exchanged_edges=runs[0]["exchanged_edges"],
            total_ratio=float(np.median([r["total_s"] / h["total_s"] for r, h in zip(runs, hist)])),
            partition_ratio=float(np.median([r["partition_s"] / h["partition_s"] for r, h in zip(runs, hist)])),
        ))
    return rows


def markdown(rows: list[dict[str, Any]], meta: dict[str, Any], bench: Bench) -> str:
    """Results table, goal and the faster redistribution."""
    by = {r["config"]: r for r in rows}
    goal = min(by["computed/alltoall"]["total_ratio"], by["computed/ring"]["total_ratio"])
    faster = min(("computed/alltoall", "computed/ring"), key=lambda c: by[c]["partition_s"])
    other = "computed/ring" if faster == "computed/alltoall" else "computed/alltoall"
    head = (f"# Partitioning: index history vs computed\n\nFUN3D-like tetrahedral mesh, {meta['n_nodes']} nodes, "
            f"{meta['n_edges']} edges ({meta['mbytes']:.1f} MB of edges), {meta['partitioner']} partitioning vector; "
            + bench.conditions(meta) + "\n\n")
    body = table(
        ["configuration", "import edges s", "partition s", "total s (min-max)", "edges exchanged", "total / history",
         "partition / history"],
        [[r["config"], f"{r['import_s']:.3f}", f"{r['partition_s']:.3f}",
          f"{r['total_s']:.3f} ({r['total_range'][0]:.3f}-{r['total_range'][1]:.3f})", str(r["exchanged_edges"]),
          f"{r['total_ratio']:.1f}", f"{r['partition_ratio']:.1f}"] for r in rows])
    verdict = "met" if goal >= 5 else "missed"
    tail = (f"\n\nGoal (at least 5x faster with a history, edge import included, both redistributions): **{verdict}** "
            f"({goal:.1f}x for the slower of the two). Redistribution: **{faster.split('/')[1]}** is faster "
            f"({by[faster]['partition_s']:.3f} s against {by[other]['partition_s']:.3f} s for {other.split('/')[1]}). "
            "Ratios are taken within each repeat, then their median. Every configuration gave every rank the same "
            "partition.\n")
    return head + body + tail


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark (collective); rank 0 writes the results."""
    bench, problem = mesh_problem("partition", __doc__.splitlines()[0], argv)
    comm = bench.comm
    samples = bench.repeat(CONFIGS, lambda c, d: measure(comm, c, problem, d),
                           lambda r: f"import {r['import_s']:.3f} s  partition {r['partition_s']:.3f} s  ({r['source']})",
                           warmup=["first run"])
    rows = summarize(samples)
    inp = problem.inputs
    meta = bench.meta(edges_target=bench.args.edges, n_edges=inp.n_edges, n_nodes=inp.n_nodes,
                      partitioner=problem.partitioner, mbytes=2 * 4 * inp.n_edges / 1e6)
    title = f"Partitioning {inp.n_edges / 1e6:.1f} M edges on {meta['nprocs']} ranks ({problem.partitioner})"
    return bench.finish(meta, {"rows": rows, "samples": samples}, markdown(rows, meta, bench),
                        lambda path: stacked_bars(path, rows, [("import_s", "import edges"), ("partition_s", "partition")],
                                                  lambda r: f"{r['total_ratio']:.1f}x",
                                                  "seconds (median); label: total / history", title))


if __name__ == "__main__":
    sys.exit(main())
