"""A finite element model written in parallel through SDM against the classic way (rank 0 gathers, writes Exodus II).

Run from the repository with plain Python; it starts the MPI job itself::

    PYTHONPATH=src python benchmarks/fem.py                     # 1M HEX8 elements, 10 steps, 4 ranks, 3 rounds
    PYTHONPATH=src python benchmarks/fem.py --quick --out /tmp/r

The model is the transient template's bar (:mod:`sdm.examples.transient`: three HEX8
blocks, two node sets, a side set, six nodal variables, an element and a global one),
``--nx x --ny x --nz`` elements (200 x 100 x 50 = 1,000,000), results at ``--steps``
steps, on ``--ranks`` ranks.  Each round times, in rotating order, from a barrier to the
slowest rank's return; the results are computed before the rounds (untimed: the same for
both, and in the template's physics they cost about as much as SDM's whole output):

``sdm``
    :func:`sdm.fem.store.write_mesh` and one :func:`~sdm.fem.store.write_results` per step:
    every rank writes its own part (map arrays, ranked sections), a catalog commit per step.
``gather + exodus``
    rank 0 gathers every rank's nodes and elements, then each step's results (``gather``),
    and writes the Exodus II file with netCDF4 (:func:`sdm.fem.exodus.write`, one step at a
    time) while the others wait: the classic way of a code without parallel output.

and, after the rounds, ``sdm export --format exodus`` of the last SDM run (one process).
Goal: gather + exodus / sdm >= 3.  Writes ``fem.json`` and ``fem.md`` in ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _io_bench import RESULTS, meta, write_results  # noqa: E402
from _mpijob import mpiexec, run_job, worker_env  # noqa: E402

GOAL = 3.0


# ----------------------------------------------------------------------------- worker (MPI)
def _gathered_model(comm: Any, model: Any) -> Any:
    """Rank 0: the whole model from every rank's owned nodes and elements, with the permutations that put
    gathered node and element values in its order (None elsewhere)."""
    from sdm.fem.model import Block, Model, NodeSet, Nodes, SideSet

    owned = ~model.ghost_nodes
    parts = comm.gather((model.nodes.ids[owned], model.nodes.coords[owned],
                         [(b.element_ids, b.connectivity) for b in model.blocks], model.node_sets, model.side_sets),
                        root=0)
    if parts is None:
        return None
    ids = np.concatenate([p[0] for p in parts])
    order = np.argsort(ids)
    coords = np.concatenate([p[1] for p in parts])[order]
    blocks, orders = [], {}
    for k, b in enumerate(model.blocks):
        eids = np.concatenate([p[2][k][0] for p in parts])
        conn = np.concatenate([p[2][k][1] for p in parts])
        orders[b.id] = o = np.argsort(eids)
        blocks.append(Block(b.id, b.name, b.type, eids[o], conn[o]))
    node_sets = [NodeSet(ns.id, ns.name, np.unique(np.concatenate([p[3][k].node_ids for p in parts])))
                 for k, ns in enumerate(model.node_sets)]
    side_sets = [SideSet(ss.id, ss.name, np.concatenate([p[4][k].element_ids for p in parts]),
                         np.concatenate([p[4][k].sides for p in parts]),
                         None if ss.factors is None else np.concatenate([p[4][k].factors for p in parts]))
                 for k, ss in enumerate(model.side_sets)]
    return Model(model.title, Nodes(ids[order], coords), blocks, node_sets, side_sets, model.variables,
                 model.qa, model.info), order, orders


def _classic(comm: Any, model: Any, steps: list[int], path: Path, computed: dict[int, Any]) -> None:
    """Rank 0 gathers everything and writes Exodus II; the others send their part of each step."""
    from sdm.examples.transient import DT
    from sdm.fem import exodus

    got = _gathered_model(comm, model)
    owned = ~model.ghost_nodes

    def step_values(step: int) -> Any:
        values = computed[step]
        nodal = {k: v[owned] for k, v in values["nodal"].items()}
        return comm.gather((nodal, values["element"]), root=0), values["glob"], step * DT

    if comm.rank != 0:
        for step in steps:
            step_values(step)
        return
    whole, order, orders = got

    def results() -> Iterator[Any]:
        for step in steps:
            parts, glob, t = step_values(step)
            nodal = {k: np.concatenate([p[0][k] for p in parts])[order] for k in parts[0][0]}
            element = {var: {b.id: np.concatenate([p[1][var][b.id] for p in parts])[orders[b.id]]
                             for b in whole.blocks} for var in parts[0][1]}
            yield exodus.Step(t, nodal, element, glob)

    exodus.write(path, whole, results())


def _sdm(comm: Any, model: Any, steps: list[int], root: Path, computed: dict[int, Any]) -> int:
    import sdm
    from sdm.examples.transient import DT
    from sdm.fem.store import write_mesh, write_results

    with sdm.open("fembench", "w", comm=comm, root=str(root), catalog=f"sqlite:///{root}/catalog.db") as s:
        stored = write_mesh(s, model)
        for step in steps:
            write_results(s, stored, step, step * DT, **computed[step])
        return s.run_id


def worker(args: argparse.Namespace) -> None:
    from mpi4py import MPI

    from sdm.examples.transient import DT, Bar, _results

    comm = MPI.COMM_WORLD
    bar = Bar(args.nx, args.ny, args.nz, comm.size)
    model = bar.model(comm.rank)
    steps = list(range(args.steps))
    computed = {step: _results(comm, model, step * DT) for step in steps}  # untimed: the same for both
    base = Path(args.root)
    samples: dict[str, list[float]] = {"sdm": [], "gather + exodus": []}
    last_run = None
    for r in range(args.repeat):
        order = list(samples) if r % 2 == 0 else list(samples)[::-1]
        for who in order:
            place = base / f"{who.split()[0]}-{r}"
            if comm.rank == 0:
                place.mkdir(parents=True)
            comm.Barrier()
            t0 = time.perf_counter()
            if who == "sdm":
                last_run = (_sdm(comm, model, steps, place, computed), place)
            else:
                _classic(comm, model, steps, place / "model.exo", computed)
            seconds = float(comm.allreduce(time.perf_counter() - t0, op=MPI.MAX))
            samples[who].append(seconds)
            if comm.rank == 0 and who != "sdm" and r < args.repeat - 1:  # the last one is compared below
                shutil.rmtree(place)
    if comm.rank == 0:
        assert last_run is not None
        print(json.dumps({"samples": samples, "run": last_run[0], "root": str(last_run[1]),
                          "classic": str(base / f"gather-{args.repeat - 1}" / "model.exo"),
                          "elements": int(sum(b[2].size for b in bar.blocks)), "nodes": int(bar.node_ids.size)}),
              flush=True)


# ----------------------------------------------------------------------------- driver
def _same_files(ours: Path, classic: Path) -> None:
    """The export of the SDM run and the classic file hold the same model and results (else exit)."""
    from sdm.fem import exodus

    (a, sa), (b, sb) = exodus.read(ours), exodus.read(classic)
    same = np.array_equal(a.nodes.ids, b.nodes.ids) and np.array_equal(a.nodes.coords, b.nodes.coords) and all(
        np.array_equal(x.connectivity, y.connectivity) for x, y in zip(a.blocks, b.blocks))
    for x, y in zip(sa, sb):
        same = same and x.time == y.time and all(np.array_equal(x.nodal[k], y.nodal[k]) for k in x.nodal) and all(
            np.array_equal(x.element[k][i], y.element[k][i]) for k in x.element for i in x.element[k])
    if not same:
        raise SystemExit("the SDM run exported and the classic Exodus II file differ")


def markdown(data: dict[str, Any]) -> str:
    m = data["meta"]
    s = data["samples"]
    lines = ["# Finite element output: SDM (parallel) vs rank 0 gathering and writing Exodus II", "",
             f"SDM {m['sdm_version']} ({m['git_commit']}), {m['date']}, {m['cores']} cores, Python {m['python']}, "
             f"load average {m['load_before']:.2f} before, {m['load_after']:.2f} after; {data['ranks']} ranks; "
             f"{data['elements']:,} HEX8 elements, {data['nodes']:,} nodes, {data['steps']} steps of results "
             f"(6 nodal, 1 element, 1 global variable); {data['repeat']} interleaved rounds, medians (min-max); "
             f"{m['fs']}.", "", "| contender | seconds |", "|---|---|"]
    for who, v in s.items():
        lines.append(f"| {who} | {statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f}) |")
    q = data["ratio"]
    lines += ["", f"gather + exodus / sdm: **{q['median']:.2f}** ({q['min']:.2f}-{q['max']:.2f}); goal >= {GOAL}: "
              f"{'met' if q['median'] >= GOAL else 'NOT met'}.", "",
              f"`sdm export --format exodus` of the SDM run (one process): {data['export_seconds']:.2f} s, "
              f"{data['export_bytes'] / 2**20:.0f} MiB.", ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nx", type=int, default=200)
    ap.add_argument("--ny", type=int, default=100)
    ap.add_argument("--nz", type=int, default=50)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--disk", default=str(HERE.parent), help="where the scratch runs go (default: the repository)")
    ap.add_argument("--quick", action="store_true", help="a tiny model, 1 round (a smoke test)")
    ap.add_argument("--timeout", type=float, default=3600)
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--root", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.quick:
        args.nx, args.ny, args.nz, args.steps, args.repeat = 12, 4, 3, 2, 1
    if args.worker:
        worker(args)
        return
    from mpi4py import MPI

    import sdm

    load = os.getloadavg()[0]
    base = Path(tempfile.mkdtemp(prefix=".sdm-fem-bench-", dir=args.disk))
    try:
        command = [mpiexec(), "-n", str(args.ranks), sys.executable, str(Path(__file__).resolve()), "--worker",
                   "--root", str(base), "--nx", str(args.nx), "--ny", str(args.ny), "--nz", str(args.nz),
                   "--steps", str(args.steps), "--repeat", str(args.repeat)]
        out = json.loads(run_job(command, worker_env(), args.timeout).strip().splitlines()[-1])
        t0 = time.perf_counter()
        report = sdm.export(out["run"], format="exodus", out=base / "export.exo",
                            catalog=f"sqlite:///{out['root']}/catalog.db")
        export_seconds = time.perf_counter() - t0
        _same_files(base / "export.exo", Path(out["classic"]))
        info = meta(MPI.COMM_SELF, base, load)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    s = out["samples"]
    ratios = [b / a for a, b in zip(s["sdm"], s["gather + exodus"])]
    data = {"meta": info, "ranks": args.ranks, "steps": args.steps, "repeat": args.repeat, "quick": args.quick,
            "elements": out["elements"], "nodes": out["nodes"], "samples": s,
            "ratio": {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)},
            "export_seconds": export_seconds, "export_bytes": report.nbytes}
    write_results(Path(args.out), "fem", data, markdown(data), lambda path: None)


if __name__ == "__main__":
    main()
