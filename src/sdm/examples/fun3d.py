"""FUN3D application template (No, Thakur, Choudhary: sections 3.2 and 4.2.1).

A tetrahedral, vertex-centred unstructured-mesh CFD code sweeps over the edges of its
mesh (the paper's figure 6).  At start-up it *imports* what a mesh generator left in a
raw file -- ``edge1``, ``edge2`` (int32), four arrays on edges ``x0..x3`` and four on
nodes ``y0..y3`` (float64) -- and partitions nodes and edges over the ranks from a
replicated partitioning vector (METIS, or recursive bisection when ``pymetis`` is not
installed).  Each time step it writes five result arrays in global order through
the map arrays of the partition:

=======  =========================  =====================  ==============
group    datasets                   global shape           view
=======  =========================  =====================  ==============
nodes    ``p0``, ``p1``, ``p2``,    ``(n_nodes,)`` f8      node map
         ``p3``
edges    ``q``                      ``(n_edges,)`` f8      edge map
=======  =========================  =====================  ==============

(level 1: five files per step; level 2: five files; level 3: two files, as in the
paper's figure 17).  The computation of a step, on each rank's local mesh::

    q  = x0 (y0[a] - y0[b]) + x1 (y1[a] - y1[b]) + step x2 + x3      for every edge (a, b)
    pk = yk + sum over edges (a, .) of q xk - sum over edges (., b) of q xk

Every edge touching an owned node is local, so owned nodes get exact sums; the inputs
are multiples of 1/16 (:func:`sdm.examples.meshes.field`), so every sum is exact and
the files can be compared bit for bit with a serial numpy computation (``--verify``).

The partition comes from :func:`sdm.irregular.partition`: a second run of the same
mesh on the same number of ranks loads it from the index history the first run left.
``--original`` also runs the original application's import (rank 0 reads the whole
file and broadcasts it; every rank then picks its nodes and edges) and checks that it
gives every rank the same local mesh.

Run it under MPI::

    mpiexec -n 4 python -m sdm.examples.fun3d --edges 200000 --verify --original
    mpiexec -n 4 python -m sdm.examples.fun3d --edges 200000       # partition from the history
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from mpi4py import MPI

import sdm
from sdm import irregular
from sdm._collective import root_call

from . import meshes
from ._template import _connect_url
from ._irregular import (Phases, add_arguments, compare_writes, exit_status, inputs_dir, parts_for, print_catalog,
                         print_phases, print_verdict, shared_result)
from .meshes import EDGE_ARRAYS, NODE_ARRAYS, Fun3DInputs

__all__ = [
    "APPLICATION",
    "NODE_RESULTS",
    "EDGE_RESULTS",
    "Problem",
    "LocalMesh",
    "prepare",
    "import_with_sdm",
    "import_original",
    "sweep",
    "reference",
    "run",
    "main",
]

APPLICATION = "FUN3D"
NODE_RESULTS = ("p0", "p1", "p2", "p3")
EDGE_RESULTS = ("q",)
DEFAULT_EDGES = 200_000


@dataclass(frozen=True)
class Problem:
    """The inputs of a run: the raw mesh file, the partitioning vector, the problem name."""

    inputs: Fun3DInputs
    partvec: np.ndarray
    partitioner: str
    name: str


@dataclass
class LocalMesh:
    """One rank's part of the mesh and of the input arrays.

    Attributes
    ----------
    nodes, edges : numpy.ndarray
        Global ids: owned ones first (sorted), then ghosts (sorted).
    n_owned_nodes, n_owned_edges : int
    local_edges : numpy.ndarray
        ``(len(edges), 2)`` endpoints as indices into ``nodes``.
    x, y : numpy.ndarray
        ``(4, len(edges))`` edge arrays and ``(4, len(nodes))`` node arrays.
    """

    nodes: np.ndarray
    n_owned_nodes: int
    edges: np.ndarray
    n_owned_edges: int
    local_edges: np.ndarray
    x: np.ndarray
    y: np.ndarray

    def same_as(self, other: "LocalMesh") -> bool:
        """Whether both hold the same ids, connectivity and values."""
        return (self.n_owned_nodes, self.n_owned_edges) == (other.n_owned_nodes, other.n_owned_edges) and all(
            np.array_equal(getattr(self, k), getattr(other, k)) for k in ("nodes", "edges", "local_edges", "x", "y")
        )


def prepare(
    comm: MPI.Comm, directory: str | Path, n_edges: int, *, nparts: int | None = None, partitioner: str = "auto",
    shuffle: int | None = None,
) -> Problem:
    """Make (once, on rank 0) the mesh input file and the partitioning vector; read the vector.

    Inputs are kept in ``directory/tet-<n_edges>[-s<seed>]/`` (``mesh.bin``, ``mesh.json``,
    ``part.<nparts>.<partitioner>.i4``) and reused by later runs, as an application
    finds its mesh where the generator left it.  Every rank reads the whole vector
    (it is replicated, as the paper requires).  Collective.
    """
    nparts = comm.Get_size() if nparts is None else int(nparts)

    def make() -> tuple[dict[str, Any], str, str]:
        d = Path(directory) / (f"tet-{n_edges}" + (f"-s{shuffle}" if shuffle is not None else ""))
        meta_path = d / "mesh.json"
        mesh = None
        if not meta_path.exists():
            mesh = meshes.tet_mesh(n_edges, shuffle=shuffle)
            meshes.write_fun3d_inputs(d / "mesh.bin", mesh)
            meta_path.write_text(json.dumps({"shape": mesh.shape, "n_nodes": mesh.n_nodes, "n_edges": mesh.n_edges}))
        meta = json.loads(meta_path.read_text())
        layout = Fun3DInputs(d / "mesh.bin", meta["n_nodes"], meta["n_edges"])
        kind = partitioner
        if kind == "auto":
            kind = "metis" if meshes.metis_available() else "rcb"
        if nparts <= 1:
            kind = "trivial"
        pfile = d / f"part.{nparts}.{kind}.i4"
        if not pfile.exists():
            edges = mesh.edges if mesh is not None else layout.read_edges()
            coords = np.stack(np.unravel_index(np.arange(layout.n_nodes), meta["shape"]), axis=1)
            pv, _ = meshes.partition_vector(layout.n_nodes, edges, coords, nparts, "auto" if kind == "trivial" else kind)
            tmp = pfile.with_suffix(".tmp")
            pv.astype("<i4").tofile(tmp)
            tmp.replace(pfile)
        return meta, str(pfile), kind

    meta, pfile, kind = root_call(comm, make)
    partvec = np.fromfile(pfile, dtype="<i4").astype(np.int64)
    layout = Fun3DInputs(Path(pfile).parent / "mesh.bin", meta["n_nodes"], meta["n_edges"])
    return Problem(layout, partvec, kind, f"tet{layout.n_edges}.{kind}")


def import_with_sdm(
    s: sdm.Session, problem: Problem, phases: Phases, *, history: bool = True, method: str = "alltoall"
) -> tuple[irregular.Partition, LocalMesh]:
    """SDM's way (figure 7): import the edges in parallel, partition, import the arrays through the maps.

    Phases ``partition`` (history lookup; the edges are imported in parallel only when no
    history fits the unchanged inputs, then redistributed and kept as a history) and
    ``import arrays`` (eight imports through the maps, ghost rows included).
    """
    inp = problem.inputs
    ef = irregular.EdgeFile(inp.path, inp.n_edges, inp.n_nodes, inp.edge1_offset, inp.edge2_offset, inp.index_dtype)
    with phases("partition"):
        p = irregular.partition(s, problem.name, problem.partvec, ef, history=history, method=method)
    with phases("import arrays", 8 * (len(EDGE_ARRAYS) * inp.n_edges + len(NODE_ARRAYS) * inp.n_nodes)):
        x = [s.import_array(n, inp.path, dtype=inp.value_dtype, count=inp.n_edges, offset=inp.edge_offset(k),
                            view=p.edge_map) for k, n in enumerate(EDGE_ARRAYS)]
        y = [s.import_array(n, inp.path, dtype=inp.value_dtype, count=inp.n_nodes, offset=inp.node_offset(k),
                            view=p.node_map) for k, n in enumerate(NODE_ARRAYS)]
    local = LocalMesh(p.nodes, p.n_owned_nodes, p.edges, p.n_owned_edges, p.local_edges,
                      np.stack(x).reshape(len(x), -1), np.stack(y).reshape(len(y), -1))
    return p, local


def import_original(comm: MPI.Comm, problem: Problem, phases: Phases) -> LocalMesh:
    """The original application's way: rank 0 reads everything and broadcasts it.

    Phase ``read + broadcast``: rank 0 reads the whole input file, ``Bcast`` sends it
    to every rank. Phase ``distribute``: every rank picks the edges touching its nodes
    and their values (the result equals SDM's partition, ids in the same order).
    """
    inp, rank = problem.inputs, comm.Get_rank()
    nbytes = inp.nbytes - inp.header
    with phases("read + broadcast", nbytes):
        raw = np.fromfile(inp.path, dtype=np.uint8, count=nbytes, offset=inp.header) if rank == 0 else np.empty(nbytes, np.uint8)
        comm.Bcast(raw, root=0)
    with phases("distribute"):
        isize, E, N = np.dtype(inp.index_dtype).itemsize, inp.n_edges, inp.n_nodes
        e = raw[: 2 * E * isize].view(inp.index_dtype).reshape(2, E).astype(np.int64)
        values = raw[2 * E * isize:].view(inp.value_dtype)
        x_all = values[: len(EDGE_ARRAYS) * E].reshape(len(EDGE_ARRAYS), E)
        y_all = values[len(EDGE_ARRAYS) * E:].reshape(len(NODE_ARRAYS), N)
        pv = problem.partvec
        first, second = pv[e[0]] == rank, pv[e[1]] == rank
        edges = np.concatenate([np.flatnonzero(first), np.flatnonzero(second & ~first)])
        owned = np.flatnonzero(pv == rank)
        ends = np.unique(e[:, edges])
        nodes = np.concatenate([owned, ends[pv[ends] != rank]])
        local_id = np.empty(N, dtype=np.int64)
        local_id[nodes] = np.arange(nodes.size)
        local = LocalMesh(nodes, int(owned.size), edges, int(np.count_nonzero(first)), local_id[e[:, edges]].T.copy(),
                          np.ascontiguousarray(x_all[:, edges], dtype=np.float64),
                          np.ascontiguousarray(y_all[:, nodes], dtype=np.float64))
    return local


def sweep(step: int, local_edges: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One time step over the edges: returns node results ``(4, n_nodes)`` and edge results ``q``.

    Exact in float64 for the template's inputs (see the module docstring), so the sums
    do not depend on the order of the edges.
    """
    a, b = local_edges[:, 0], local_edges[:, 1]
    q = x[0] * (y[0][a] - y[0][b]) + x[1] * (y[1][a] - y[1][b]) + float(step) * x[2] + x[3]
    n = y.shape[1]
    p = np.empty_like(y)
    for k in range(len(p)):
        w = q * x[k]
        p[k] = y[k] + np.bincount(a, w, minlength=n) - np.bincount(b, w, minlength=n)
    return p, q


def reference(inputs: Fun3DInputs, step: int) -> tuple[np.ndarray, np.ndarray]:
    """The results of *step* computed serially on the whole mesh read with numpy (no SDM, no MPI)."""
    x = np.stack([inputs.read_array(n) for n in EDGE_ARRAYS])
    y = np.stack([inputs.read_array(n) for n in NODE_ARRAYS])
    return sweep(step, inputs.read_edges(), x, y)


def _write(s: sdm.Session, p: irregular.Partition, local: LocalMesh, inputs: Fun3DInputs, steps: int, level: int,
           phases: Phases, progress: bool) -> None:
    """Every step: compute, then write p0..p3 through the node map and q through the edge map."""
    N, E = inputs.n_nodes, inputs.n_edges
    with phases("write"):
        gn = s.make_group("nodes", list(NODE_RESULTS), dtype="f8", shape=(N,), level=level, view=p.node_map)
        ge = s.make_group("edges", list(EDGE_RESULTS), dtype="f8", shape=(E,), level=level, view=p.edge_map)
    for step in range(1, steps + 1):
        pres, q = sweep(step, local.local_edges, local.x, local.y)
        with phases("write", 8 * (len(NODE_RESULTS) * N + E)):
            gn.write_step(step, {name: pres[k] for k, name in enumerate(NODE_RESULTS)})
            ge.write(EDGE_RESULTS[0], step, q)
        if progress and s.rank == 0:
            print(f"step {step}: wrote {', '.join(NODE_RESULTS + EDGE_RESULTS)}", flush=True)


def _read(comm: MPI.Comm, url: str, run_id: int, p: irregular.Partition, inputs: Fun3DInputs, steps: int,
          phases: Phases, view: str, verify: bool) -> int:
    """Read every result back (on the partition's maps or in contiguous blocks); count wrong values."""
    N, E = inputs.n_nodes, inputs.n_edges
    wrong = 0
    with phases("read"):
        r = sdm.open(APPLICATION, "r", comm=comm, catalog=url, run=run_id)
    try:
        with phases("read"):
            gn, ge = r.group("nodes"), r.group("edges")
            gn.data_view(p.node_map if view == "map" else sdm.Block())
            ge.data_view(p.edge_map if view == "map" else sdm.Block())
        for step in range(1, steps + 1):
            with phases("read", 8 * (len(NODE_RESULTS) * N + E)):
                got = {name: gn.read(name, step, verify=verify) for name in NODE_RESULTS}
                got[EDGE_RESULTS[0]] = ge.read(EDGE_RESULTS[0], step, verify=verify)
            if verify:
                P, Q = reference(inputs, step)
                for k, name in enumerate(NODE_RESULTS):
                    piece = gn.piece(name)
                    wrong += int(np.count_nonzero(piece.owned_values(got[name]) != P[k][piece.indices[0]]))
                piece = ge.piece(EDGE_RESULTS[0])
                wrong += int(np.count_nonzero(piece.owned_values(got[EDGE_RESULTS[0]]) != Q[piece.indices[0]]))
    finally:
        with phases("read"):
            r.close()
    return wrong


def _check_imports(local: LocalMesh) -> int:
    """Imported values that differ from the generator's formula (ghost rows included)."""
    bad = sum(int(np.count_nonzero(local.x[k] != meshes.field(n, local.edges))) for k, n in enumerate(EDGE_ARRAYS))
    return bad + sum(int(np.count_nonzero(local.y[k] != meshes.field(n, local.nodes))) for k, n in enumerate(NODE_ARRAYS))


def _check_files(url: str, run_id: int, root: Path, inputs: Fun3DInputs, steps: int) -> list[str]:
    """Rank 0: every write's bytes on disk against the serial numpy computation."""
    ref = {step: reference(inputs, step) for step in range(1, steps + 1)}

    def expected(group: str, name: str, step: int) -> np.ndarray:
        P, Q = ref[step]
        return Q if name in EDGE_RESULTS else P[NODE_RESULTS.index(name)]

    return compare_writes(url, run_id, root, expected)


def run(
    comm: MPI.Comm,
    n_edges: int = DEFAULT_EDGES,
    steps: int = 2,
    level: int = 3,
    root: str | Path | None = None,
    catalog: str | None = None,
    verify: bool = False,
    *,
    inputs: str | Path | None = None,
    history: bool = True,
    method: str = "alltoall",
    partitioner: str = "auto",
    io_method: str = "auto",
    read: bool = True,
    read_view: str = "map",
    original: bool = False,
    idle_last: bool = False,
    shuffle: int | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    """Run the FUN3D template (collective).

    Parameters
    ----------
    comm : MPI.Comm
    n_edges : int
        Target edge count of the generated mesh.
    steps : int
        Time steps; five arrays are written at each.
    level : {1, 2, 3}
        File organization level of both result groups.
    root, catalog : optional
        SDM data root and catalog URL.
    verify : bool
        Check the imported values, the files on disk and the values read back against
        the serial numpy computation.
    inputs : str or Path, optional
        Directory of the generated inputs (default ``<root>/inputs``).
    history : bool
        Use (and create) index histories.
    method : {"alltoall", "ring"}
        Edge redistribution when the partition is computed.
    partitioner : {"auto", "metis", "rcb"}
    io_method : str
        SDM I/O method of the session.
    read : bool
        Read everything back (implied by *verify*).
    read_view : {"map", "block"}
        The reader's view: the partition's maps (a restart) or contiguous blocks.
    original : bool
        Also run the original import (rank 0 reads, broadcasts) and compare.
    idle_last : bool
        Give the last rank no nodes (and so no edges).
    shuffle : int, optional
        Seed to shuffle the edge order of the generated mesh.
    progress : bool
        Progress lines on rank 0.

    Returns
    -------
    dict
        The same on every rank: ``run_id``, ``catalog``, ``root``, ``phases`` (seconds,
        bytes, MB/s of each phase), ``partition`` (source, note, seconds,
        exchanged edges, history id), sizes, ``mismatches`` and, with *original*,
        ``original`` (its phases and whether it gave the same local meshes).
    """
    read = read or verify
    rank = comm.Get_rank()
    problem = prepare(comm, inputs_dir(root, inputs), n_edges, nparts=parts_for(comm, idle_last),
                      partitioner=partitioner, shuffle=shuffle)
    inp = problem.inputs
    phases = Phases(comm)
    with phases("open"):
        s = sdm.open(APPLICATION, "w", comm=comm, root=root, catalog=catalog, method=io_method,
                     attributes={"mesh": problem.name, "edges": inp.n_edges, "nodes": inp.n_nodes, "steps": steps,
                                 "level": level}, problem_size=[inp.n_nodes, inp.n_edges])
    try:
        p, local = import_with_sdm(s, problem, phases, history=history, method=method)
        if progress and rank == 0:
            print(f"partition: {p.note}", flush=True)
        bad_imports = _check_imports(local) if verify else 0
        _write(s, p, local, inp, steps, level, phases, progress)
    finally:
        with phases("write"):
            s.close()
    run_id, url, data_root = s.run_id, _connect_url(catalog, s.root), s.root
    wrong = _read(comm, url, run_id, p, inp, steps, phases, read_view, verify) if read else 0
    bad_files = root_call(comm, _check_files, url, run_id, data_root, inp, steps) if verify else []
    orig = None
    if original:
        ophases = Phases(comm)
        mine = import_original(comm, problem, ophases)
        orig = {"phases": ophases.totals(), "same": bool(comm.allreduce(int(not mine.same_as(local)), op=MPI.SUM) == 0)}
    counts = np.array([local.n_owned_nodes, local.nodes.size, local.n_owned_edges, local.edges.size], dtype=np.int64)
    comm.Allreduce(MPI.IN_PLACE, counts, op=MPI.SUM)
    mismatches = comm.allreduce(bad_imports + wrong, op=MPI.SUM) + len(bad_files)
    return shared_result(
        comm, url, run_id, application=APPLICATION, root=str(data_root), nprocs=comm.Get_size(), level=level,
        steps=steps, mesh=problem.name, n_nodes=inp.n_nodes, n_edges=inp.n_edges, partitioner=problem.partitioner,
        local_nodes=int(counts[1]), local_edges=int(counts[3]),
        partition=dict(source=p.source, note=p.note, method=method, seconds=float(p.stats.get("seconds", 0.0)),
                       exchanged_edges=int(comm.allreduce(int(p.stats.get("exchanged_edges", 0)), op=MPI.SUM)),
                       history_id=p.stats.get("history_id")),
        phases=phases.totals(), verified=verify, read_view=read_view if read else None, mismatches=mismatches,
        bad_files=bad_files, original=orig,
    )


def print_report(result: dict[str, Any]) -> None:
    """The run as rich tables (call on rank 0)."""
    from rich.console import Console

    con = Console()
    part = result["partition"]
    ghosts_n = result["local_nodes"] - result["n_nodes"]
    ghosts_e = result["local_edges"] - result["n_edges"]
    con.print(f"[b]{result['application']}[/b] run {result['run_id']}: mesh {result['mesh']} with {result['n_nodes']} "
              f"nodes and {result['n_edges']} edges on {result['nprocs']} ranks ({result['partitioner']} partition; "
              f"ghosts: {ghosts_n} nodes, {ghosts_e} edges)")
    con.print(f"partition [b]{part['source']}[/b] in {part['seconds']:.3f} s ({part['method']}, "
              f"{part['exchanged_edges']} edges exchanged): {part['note']}")
    print_catalog(f"catalog contents (level {result['level']})", result["groups"])
    notes = {"partition": part["source"], "import arrays": "4 edge + 4 node arrays through the maps, ghosts filled"}
    print_phases(f"SDM on {result['nprocs']} ranks", result["phases"], notes)
    if result["original"]:
        o = result["original"]
        print_phases("original import (rank 0 reads, broadcasts)", o["phases"],
                     {"distribute": "same local meshes as SDM" if o["same"] else "DIFFERENT local meshes"})
    print_verdict(result, f"imports, files on disk and read-back on the {result['read_view']} view against numpy")


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point (run under mpiexec)."""
    p = argparse.ArgumentParser(prog="python -m sdm.examples.fun3d", description=__doc__.splitlines()[0])
    p.add_argument("--edges", type=int, default=DEFAULT_EDGES, help=f"target edge count (default {DEFAULT_EDGES})")
    add_arguments(p, steps=2, steps_help="time steps (default 2, as in the paper)")
    p.add_argument("--no-history", action="store_true", help="always compute the partition; create no history")
    p.add_argument("--redistribution", choices=irregular.METHODS, default="alltoall", help="edge exchange (default alltoall)")
    p.add_argument("--partitioner", choices=("auto", "metis", "rcb"), default="auto",
                   help="partitioning vector from METIS (pymetis) or bisection (default: METIS when installed)")
    p.add_argument("--read-view", choices=("map", "block"), default="map", help="reader's view (default map)")
    p.add_argument("--no-read", action="store_true", help="skip the read phase")
    p.add_argument("--original", action="store_true", help="also run the original import (rank 0 reads + broadcasts)")
    a = p.parse_args(argv)
    comm = MPI.COMM_WORLD
    result = run(comm, a.edges, a.steps, a.level, a.root, a.catalog, a.verify, inputs=a.inputs, history=not a.no_history,
                 method=a.redistribution, partitioner=a.partitioner, io_method=a.method, read=not a.no_read,
                 read_view=a.read_view, original=a.original, idle_last=a.idle_last, progress=not a.quiet)
    return exit_status(comm, result, print_report)


if __name__ == "__main__":
    sys.exit(main())
