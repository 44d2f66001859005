"""Rayleigh-Taylor instability template (No, Thakur, Choudhary: sections 4.2 and 4.2.2).

A 2-D triangle-mesh code (the paper's RT template, from the FLASH project) writes two
data sets whenever the simulation reaches an output time:

=========  ===============  ======================  =====================================
group      dataset          global shape            view
=========  ===============  ======================  =====================================
nodes      ``density``      ``(n_nodes,)`` f8       node map (owned nodes + ghost nodes)
triangles  ``interface``    ``(n_triangles,)`` f8   contiguous block per rank (Subarray)
=========  ===============  ======================  =====================================

Nodes are spread over the ranks by a partitioning vector (METIS or bisection); a
triangle belongs to the rank of its first vertex, and triangles are numbered rank by
rank, so each rank's triangles are one contiguous block of the triangle data set.
The node map is the application's own (owned nodes, then the vertices of its
triangles owned elsewhere as ghosts): SDM's partitioning phase is optional.  Since
every group holds one data set, levels 2 and 3 give the same two files.

The values at output ``t``: ``density[n] = field("density", n, t)`` and
``interface[k] = density[a] + density[b] + density[c] + t`` for triangle ``(a, b, c)``
(exact sums of multiples of 1/16).

The original application writes sequentially: the ranks take turns, each seeks to
where its part belongs and writes it (one seek and write per run of consecutive owned
nodes, one for its block of triangles).  ``--original`` runs that too, into files of
the same layout as SDM's level 2, and checks both give the same bytes.

Run it under MPI::

    mpiexec -n 4 python -m sdm.examples.rt --nodes 512 --steps 5 --original --verify
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from mpi4py import MPI

import sdm
from sdm._collective import root_call

from . import meshes
from ._template import _connect_url
from ._irregular import (Phases, add_arguments, compare_writes, exit_status, inputs_dir, parts_for, print_catalog,
                         print_phases, print_verdict, sequential, shared_result)

__all__ = ["APPLICATION", "RTMesh", "decompose", "values", "write_original", "run", "main"]

APPLICATION = "RT"
NODE_DATA, TRIANGLE_DATA = "density", "interface"


@dataclass
class RTMesh:
    """One rank's part of the triangle mesh.

    Attributes
    ----------
    n_nodes, n_triangles : int
        Global sizes.
    nodes : numpy.ndarray
        Global node ids: owned (sorted), then ghosts (sorted).
    n_owned : int
    triangles : numpy.ndarray
        ``(count, 3)`` vertices of this rank's triangles as indices into ``nodes``.
    start : int
        Global number of this rank's first triangle (its block is ``start .. start+count``).
    partitioner : str
    """

    n_nodes: int
    n_triangles: int
    nodes: np.ndarray
    n_owned: int
    triangles: np.ndarray
    start: int
    partitioner: str
    _map: sdm.MapArray | None = field(default=None, repr=False)

    @property
    def node_map(self) -> sdm.MapArray:
        """The node map array (built once per mesh, shared by every step)."""
        if self._map is None:
            self._map = sdm.MapArray(self.nodes, ghost=np.arange(self.nodes.size) >= self.n_owned)
        return self._map

    @property
    def triangle_view(self) -> sdm.Subarray:
        """This rank's contiguous block of triangles."""
        return sdm.Subarray((self.start,), (len(self.triangles),))


def global_triangles(mesh: meshes.TriMesh, partvec: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Triangles numbered rank by rank: ``(triangles in that order, first triangle of each rank)``."""
    owner = partvec[mesh.triangles[:, 0]]
    order = np.argsort(owner, kind="stable")
    counts = np.bincount(owner, minlength=int(partvec.max(initial=0)) + 1)
    return mesh.triangles[order], np.concatenate([[0], np.cumsum(counts)])


def decompose(comm: MPI.Comm, nx: int, ny: int, partvec: np.ndarray, partitioner: str) -> RTMesh:
    """This rank's nodes, ghost nodes and block of triangles (every rank builds the mesh itself)."""
    rank, size = comm.Get_rank(), comm.Get_size()
    mesh = meshes.tri_mesh(nx, ny)
    tris, first = global_triangles(mesh, partvec)
    first = np.concatenate([first, np.full(max(0, size + 1 - first.size), first[-1])])
    mine = tris[first[rank]:first[rank + 1]]
    owned = np.flatnonzero(partvec == rank)
    ends = np.unique(mine)
    nodes = np.concatenate([owned, ends[partvec[ends] != rank]])
    local = np.searchsorted(np.sort(nodes), mine)
    perm = np.argsort(nodes, kind="stable")  # position in `nodes` of each sorted id
    return RTMesh(mesh.n_nodes, mesh.n_triangles, nodes, int(owned.size), perm[local].reshape(-1, 3),
                  int(first[rank]), partitioner)


def values(m: RTMesh, step: int) -> tuple[np.ndarray, np.ndarray]:
    """This rank's node values (ghosts included, as after a halo exchange) and triangle values."""
    density = meshes.field(NODE_DATA, m.nodes, step)
    interface = density[m.triangles].sum(axis=1) + float(step) if len(m.triangles) else np.zeros(0)
    return density, interface


def partition(comm: MPI.Comm, directory: Path, nx: int, ny: int, nparts: int, partitioner: str) -> tuple[np.ndarray, str]:
    """The replicated node partitioning vector, made once by rank 0 and kept in *directory*."""
    kind = partitioner if partitioner != "auto" else ("metis" if meshes.metis_available() else "rcb")
    kind = "trivial" if nparts <= 1 else kind
    path = directory / f"rt-{nx}x{ny}" / f"part.{nparts}.{kind}.i4"

    def make() -> None:
        if path.exists():
            return
        mesh = meshes.tri_mesh(nx, ny)
        pv, _ = meshes.partition_vector(mesh.n_nodes, mesh.edges(), mesh.coords(), nparts, "auto" if kind == "trivial" else kind)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        pv.astype("<i4").tofile(tmp)
        tmp.replace(path)

    root_call(comm, make)
    return np.fromfile(path, dtype="<i4").astype(np.int64), kind


def _runs(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Starts (indices into *ids*, sorted) and lengths of runs of consecutive ids."""
    if ids.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    starts = np.concatenate([[0], np.flatnonzero(np.diff(ids) != 1) + 1])
    return starts, np.diff(np.concatenate([starts, [ids.size]]))


def write_original(comm: MPI.Comm, m: RTMesh, directory: Path, steps: int, phases: Phases,
                   sync: bool = False) -> dict[str, Path]:
    """The original sequential output: ranks take turns; each seeks and writes its parts.

    Files ``density.dat`` and ``interface.dat`` in *directory*, steps appended (the
    layout of SDM's level 2); with *sync* each rank flushes its writes to storage
    before passing the turn on (as SDM syncs before its catalog commits).  Phase
    ``original write``.
    """
    paths = {NODE_DATA: directory / f"{NODE_DATA}.dat", TRIANGLE_DATA: directory / f"{TRIANGLE_DATA}.dat"}
    if comm.Get_rank() == 0:
        directory.mkdir(parents=True, exist_ok=True)
        for p in paths.values():
            p.write_bytes(b"")
    owned = m.nodes[: m.n_owned]
    order = np.argsort(owned, kind="stable")
    starts, lengths = _runs(owned[order])
    for step in range(1, steps + 1):
        density, interface = values(m, step)
        ordered = np.ascontiguousarray(density[: m.n_owned][order])
        with phases("original write", 8 * (m.n_nodes + m.n_triangles)), sequential(comm):
            base = (step - 1) * 8 * m.n_nodes
            fd = os.open(paths[NODE_DATA], os.O_WRONLY)
            try:
                for s, n in zip(starts.tolist(), lengths.tolist()):
                    os.pwrite(fd, ordered[s:s + n].tobytes(), base + 8 * int(owned[order[s]]))
                if sync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            fd = os.open(paths[TRIANGLE_DATA], os.O_WRONLY)
            try:
                os.pwrite(fd, interface.tobytes(), (step - 1) * 8 * m.n_triangles + 8 * m.start)
                if sync:
                    os.fsync(fd)
            finally:
                os.close(fd)
    return paths


def _reference(nx: int, ny: int, partvec: np.ndarray, step: int) -> dict[str, np.ndarray]:
    """Global arrays of output *step*, computed serially with numpy."""
    mesh = meshes.tri_mesh(nx, ny)
    tris, _ = global_triangles(mesh, partvec)
    density = meshes.field(NODE_DATA, np.arange(mesh.n_nodes), step)
    return {NODE_DATA: density, TRIANGLE_DATA: density[tris].sum(axis=1) + float(step)}


def _check(url: str, run_id: int, root: Path, nx: int, ny: int, partvec: np.ndarray, steps: int,
           original: dict[str, Path] | None) -> list[str]:
    """Rank 0: SDM's files and the original's against the serial reference."""
    ref = {step: _reference(nx, ny, partvec, step) for step in range(1, steps + 1)}
    bad = compare_writes(url, run_id, root, lambda g, d, step: ref[step][d])
    for name, path in (original or {}).items():
        want = np.concatenate([ref[step][name] for step in range(1, steps + 1)])
        if path.read_bytes() != want.tobytes():
            bad.append(f"original {path.name} differs from the reference")
    return bad


def run(
    comm: MPI.Comm,
    nodes: int = 512,
    steps: int = 5,
    level: int = 3,
    root: str | Path | None = None,
    catalog: str | None = None,
    verify: bool = False,
    *,
    inputs: str | Path | None = None,
    partitioner: str = "auto",
    io_method: str = "auto",
    original: bool = False,
    idle_last: bool = False,
    progress: bool = False,
) -> dict[str, Any]:
    """Run the RT template on a ``nodes x nodes`` grid of mesh nodes (collective).

    Parameters
    ----------
    comm : MPI.Comm
    nodes : int
        Mesh nodes along each side (``2 (nodes - 1)**2`` triangles).
    steps : int
        Output times; both data sets are written at each.
    level : {1, 2, 3}
    root, catalog, inputs, partitioner, io_method, idle_last, progress
        As for :func:`sdm.examples.fun3d.run`.
    verify : bool
        Compare every write (and the original's files) with a serial numpy computation.
    original : bool
        Also write with the original sequential method (into ``<root>/rt-original-<run>``).

    Returns
    -------
    dict
        The same on every rank: ``run_id``, ``phases`` (``write``, ``original write``),
        sizes, ``mismatches``, ``bad_files`` and the catalog summary.
    """
    rank = comm.Get_rank()
    nx = ny = int(nodes)
    partvec, kind = partition(comm, inputs_dir(root, inputs), nx, ny, parts_for(comm, idle_last), partitioner)
    m = decompose(comm, nx, ny, partvec, kind)
    phases = Phases(comm)
    with phases("write"):
        s = sdm.open(APPLICATION, "w", comm=comm, root=root, catalog=catalog, method=io_method,
                     attributes={"nodes": m.n_nodes, "triangles": m.n_triangles, "steps": steps, "level": level},
                     problem_size=[m.n_nodes, m.n_triangles])
    try:
        with phases("write"):
            gn = s.make_group("nodes", [NODE_DATA], dtype="f8", shape=(m.n_nodes,), level=level, view=m.node_map)
            gt = s.make_group("triangles", [TRIANGLE_DATA], dtype="f8", shape=(m.n_triangles,), level=level,
                              view=m.triangle_view)
        for step in range(1, steps + 1):
            density, interface = values(m, step)
            with phases("write", 8 * (m.n_nodes + m.n_triangles)):
                gn.write(NODE_DATA, step, density)
                gt.write(TRIANGLE_DATA, step, interface)
            if progress and rank == 0:
                print(f"output {step}: wrote {NODE_DATA} and {TRIANGLE_DATA}", flush=True)
    finally:
        with phases("write"):
            s.close()
    run_id, url, data_root = s.run_id, _connect_url(catalog, s.root), s.root
    paths = write_original(comm, m, Path(data_root) / f"rt-original-{run_id}", steps, phases, s.sync) if original else None
    bad = root_call(comm, _check, url, run_id, data_root, nx, ny, partvec, steps, paths) if verify else []
    owned = comm.allreduce(m.nodes.size, op=MPI.SUM)
    return shared_result(
        comm, url, run_id, application=APPLICATION, root=str(data_root), nprocs=comm.Get_size(), level=level,
        steps=steps, n_nodes=m.n_nodes, n_triangles=m.n_triangles, local_nodes=int(owned), partitioner=kind,
        phases=phases.totals(), verified=verify, mismatches=len(bad), bad_files=bad,
        original=str(paths[NODE_DATA].parent) if paths else None,
    )


def print_report(result: dict[str, Any]) -> None:
    """The run as rich tables (call on rank 0)."""
    from rich.console import Console

    con = Console()
    con.print(f"[b]{result['application']}[/b] run {result['run_id']}: {result['n_nodes']} nodes "
              f"({result['local_nodes'] - result['n_nodes']} ghost copies), {result['n_triangles']} triangles on "
              f"{result['nprocs']} ranks ({result['partitioner']} partition)")
    print_catalog(f"catalog contents (level {result['level']})", result["groups"])
    ph = result["phases"]
    notes = {"write": "SDM: collective MPI-IO, node map + contiguous triangle blocks",
             "original write": "ranks in turn, seek + write per run of nodes"}
    if "original write" in ph:
        ratio = ph["original write"]["seconds"] / ph["write"]["seconds"]
        notes["original write"] += f" ({ratio:.2f} x SDM's time)"
    print_phases(f"output on {result['nprocs']} ranks", ph, notes)
    print_verdict(result, "every write" + (" and the original's files" if result["original"] else "") + " against numpy")


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point (run under mpiexec)."""
    p = argparse.ArgumentParser(prog="python -m sdm.examples.rt", description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=512, help="mesh nodes along each side (default 512)")
    add_arguments(p, steps=5, steps_help="output times (default 5, as in the paper)")
    p.add_argument("--partitioner", choices=("auto", "metis", "rcb"), default="auto", help="node partitioner")
    p.add_argument("--original", action="store_true", help="also write with the original sequential method")
    a = p.parse_args(argv)
    comm = MPI.COMM_WORLD
    result = run(comm, a.nodes, a.steps, a.level, a.root, a.catalog, a.verify, inputs=a.inputs,
                 partitioner=a.partitioner, io_method=a.method, original=a.original, idle_last=a.idle_last,
                 progress=not a.quiet)
    return exit_status(comm, result, print_report)


if __name__ == "__main__":
    sys.exit(main())
