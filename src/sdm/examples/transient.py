"""Transient dynamics template (PDS/PIO paper, section "PXI": ALEGRA and PRONTO runs).

A hexahedral model of a bar, ``nx * ny * nz`` HEX8 elements in three element blocks
along x, given to the ranks by slabs along x (each node owned by the lowest rank whose
elements use it, a ghost on the others), with two node sets (the faces x = 0 and x = L),
a side set (the top faces, side 6) and each rank's Nemesis-like decomposition maps. The
bar vibrates: every ``every`` steps the template writes displacement and velocity per
node, a stress per element and the kinetic energy as a global variable, through
:mod:`sdm.fem.store` (mesh as topology, results as state).

=========  ==========================================  ========================
kind       variables                                   written
=========  ==========================================  ========================
nodal      ``disp_x``, ``disp_y``, ``disp_z``,          steps 0, k, 2k, ...
           ``vel_x``, ``vel_y``, ``vel_z``
element    ``stress`` (every block)                    steps 0, k, 2k, ...
global     ``energy`` (kinetic, summed over ranks)     steps 0, k, 2k, ...
=========  ==========================================  ========================

Every value is a function of the node's coordinates (the element's centroid) and the
time, so ``--verify`` re-reads the model on a balanced share of the elements (another
decomposition than the writer's slabs) and checks every coordinate, connectivity entry,
set entry, variable and the decomposition maps against what it computes.

Run it under MPI::

    mpiexec -n 4 python -m sdm.examples.transient --root DIR --verify
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from mpi4py import MPI

import sdm
from sdm import config
from sdm.fem.model import Block, Decomposition, Model, Nodes, NodeSet, SideSet, Variables
from sdm.fem.store import read_decomposition, read_mesh, read_results, write_mesh, write_results

__all__ = ["Bar", "run", "main"]

NODAL = ["disp_x", "disp_y", "disp_z", "vel_x", "vel_y", "vel_z"]
DT, OMEGA, AMPLITUDE, DENSITY, MODULUS = 1e-3, 40.0, 1e-2, 7.8, 200.0
_CORNERS = ((0, 0, 0), (1, 0, 0), (1, 1, 0), (0, 1, 0), (0, 0, 1), (1, 0, 1), (1, 1, 1), (0, 1, 1))


class Bar:
    """The global mesh of the bar (every rank builds it: a template, not a mesh generator)."""

    def __init__(self, nx: int, ny: int, nz: int, size: int) -> None:
        self.nx, self.size = nx, size
        grid = np.arange((nx + 1) * (ny + 1) * (nz + 1)).reshape(nz + 1, ny + 1, nx + 1)
        z, y, x = np.meshgrid(np.arange(nz + 1), np.arange(ny + 1), np.arange(nx + 1), indexing="ij")
        self.coords = np.stack([x.ravel(), y.ravel(), z.ravel()], axis=1) / float(nx)
        self.node_ids = np.arange(grid.size, dtype=np.int64) + 1
        ez, ey, ex = (a.ravel() for a in np.meshgrid(np.arange(nz), np.arange(ny), np.arange(nx), indexing="ij"))
        conn = np.stack([grid[ez + dz, ey + dy, ex + dx] for dx, dy, dz in _CORNERS], axis=1) + 1
        cuts = [0, nx // 3, 2 * nx // 3, nx]
        self.blocks: list[tuple[int, str, np.ndarray, np.ndarray, np.ndarray]] = []
        first, top = 1, []
        for k, name in enumerate(("left", "middle", "right")):
            sel = np.flatnonzero((ex >= cuts[k]) & (ex < cuts[k + 1]))
            ids = np.arange(first, first + sel.size)
            self.blocks.append((k + 1, name, ids, conn[sel], ex[sel] * size // nx))
            top.append(ids[ez[sel] == nz - 1])
            first += sel.size
        self.top = np.concatenate(top)
        self.node_owner = np.full(grid.size, size, dtype=np.int64)
        for b in self.blocks:
            np.minimum.at(self.node_owner, (b[3] - 1).ravel(), np.repeat(b[4], 8))
        self.faces = (self.node_ids[grid[:, :, 0].ravel()], self.node_ids[grid[:, :, nx].ravel()])

    def used(self, rank: int) -> np.ndarray:
        """Global node indices the elements of *rank* use."""
        return np.unique(np.concatenate([(b[3][b[4] == rank] - 1).ravel() for b in self.blocks]))

    def decomposition(self, rank: int) -> Decomposition:
        """Nemesis-like maps of *rank*: border nodes are shared with a neighbour, border elements use one."""
        owned = np.flatnonzero(self.node_owner == rank)
        local = np.union1d(owned, self.used(rank))
        cmaps = {}
        for other in range(self.size):
            common = np.intersect1d(local, self.used(other)) if other != rank else np.zeros(0, np.int64)
            if common.size:
                cmaps[other] = self.node_ids[common]
        shared = np.unique(np.concatenate([m - 1 for m in cmaps.values()] or [np.zeros(0, np.int64)]))
        border = np.intersect1d(owned, shared)
        inner = np.setdiff1d(owned, border)
        outer = self.node_ids[np.setdiff1d(local, inner)]
        elems = [(b[2][b[4] == rank], np.isin(b[3][b[4] == rank], outer).any(axis=1)) for b in self.blocks]
        return Decomposition(rank, self.size, self.node_ids[inner], self.node_ids[border],
                             np.concatenate([e[~t] for e, t in elems]), np.concatenate([e[t] for e, t in elems]),
                             cmaps)

    def model(self, rank: int, stamp: tuple[str, str] = ("", "")) -> Model:
        """The part of *rank*, as an application holds it (*stamp*: the QA record's date and time)."""
        owned = np.flatnonzero(self.node_owner == rank)
        ghosts = np.setdiff1d(self.used(rank), owned)
        idx = np.concatenate([owned, ghosts])
        ids = self.node_ids[idx]
        blocks = [Block(b[0], b[1], "HEX8", b[2][b[4] == rank], b[3][b[4] == rank]) for b in self.blocks]
        mine = np.concatenate([b.element_ids for b in blocks])
        top = self.top[np.isin(self.top, mine)]
        sets = [NodeSet(k + 1, name, f[np.isin(f, ids[: owned.size])]) for k, (name, f) in
                enumerate(zip(("fixed", "loaded"), self.faces))]
        return Model("vibrating bar", Nodes(ids, self.coords[idx]), blocks, sets,
                     [SideSet(1, "top", top, np.full(top.size, 6), np.ones(4 * top.size))],
                     Variables(list(NODAL), ["stress"], ["energy"]),
                     qa=[("sdm transient", "1", *stamp)],
                     info=[f"{self.nx} elements along x, {self.size} writer ranks"],
                     ghost_nodes=np.concatenate([np.zeros(owned.size, bool), np.ones(ghosts.size, bool)]),
                     decomposition=self.decomposition(rank))


def nodal(coords: np.ndarray, t: float) -> dict[str, np.ndarray]:
    """Displacement and velocity of nodes at *coords* at time *t* (a standing wave along x)."""
    x, y, z = coords[:, 0], coords[:, 1], coords[:, 2]
    shape = np.sin(0.5 * np.pi * x) * AMPLITUDE
    s, c = np.sin(OMEGA * t), np.cos(OMEGA * t)
    u = (shape * s, 0.1 * y * shape * s, 0.2 * z * shape * s)
    v = (shape * OMEGA * c, 0.1 * y * shape * OMEGA * c, 0.2 * z * shape * OMEGA * c)
    return dict(zip(NODAL, (*u, *v)))


def stress(centroids: np.ndarray, t: float) -> np.ndarray:
    """An axial stress at element centroids (modulus times the strain of the wave)."""
    return MODULUS * AMPLITUDE * 0.5 * np.pi * np.cos(0.5 * np.pi * centroids[:, 0]) * np.sin(OMEGA * t)


def _centroids(coords: np.ndarray, ids: np.ndarray, conn: np.ndarray) -> np.ndarray:
    return coords[np.searchsorted(ids, conn)].mean(axis=1) if conn.size else np.zeros((0, 3))


def energy(comm: MPI.Comm, model: Model, t: float) -> float:
    """Kinetic energy of the owned nodes, summed over the ranks (lumped mass per node)."""
    v = nodal(model.nodes.coords, t)
    owned = ~model.ghost_nodes if model.ghost_nodes is not None else slice(None)
    mine = sum(float(np.sum(v[n][owned] ** 2)) for n in NODAL[3:]) * 0.5 * DENSITY
    return float(comm.allreduce(mine, op=MPI.SUM))


def _results(comm: MPI.Comm, model: Model, t: float) -> dict[str, Any]:
    order = np.argsort(model.nodes.ids)
    ids, coords = model.nodes.ids[order], model.nodes.coords[order]
    return dict(nodal=nodal(model.nodes.coords, t),
                element={"stress": {b.id: stress(_centroids(coords, ids, b.connectivity), t) for b in model.blocks}},
                glob={"energy": energy(comm, model, t)})


def _mismatches(bar: Bar, comm: MPI.Comm, s: sdm.Session, steps: Sequence[int], energies: dict[int, float]) -> int:
    """Re-read the model and count the values that differ from what the template computes."""
    m = read_mesh(s)
    bad = 0
    ids = m.nodes.ids
    bad += int(np.count_nonzero(m.nodes.coords != bar.coords[ids - 1]))
    for b, ref in zip(m.blocks, bar.blocks):
        rows = np.searchsorted(ref[2], b.element_ids)
        bad += int(np.count_nonzero(b.connectivity != ref[3][rows])) + int(np.count_nonzero(ref[2][rows] != b.element_ids))
    owned = ids[~m.ghost_nodes] if m.ghost_nodes is not None else ids
    for ns, face in zip(m.node_sets, bar.faces):
        bad += int(not np.array_equal(ns.node_ids, np.sort(face[np.isin(face, owned)])))
    mine = np.concatenate([b.element_ids for b in m.blocks])
    bad += int(not np.array_equal(m.side_sets[0].element_ids, np.sort(bar.top[np.isin(bar.top, mine)])))
    for step in steps:
        r = read_results(s, m, step)
        want = _results(comm, m, step * DT)
        bad += int(r.time != step * DT) + int(r.glob["energy"] != energies[step])
        bad += sum(int(np.count_nonzero(r.nodal[n] != want["nodal"][n])) for n in NODAL)
        bad += sum(int(np.count_nonzero(r.element["stress"][b.id] != want["element"]["stress"][b.id]))
                   for b in m.blocks)
    for d in read_decomposition(s, ranks=(0, bar.size)) if comm.Get_rank() == 0 else read_decomposition(s, ranks=(0, 0)):
        want_d = bar.decomposition(d.rank)
        same = all(np.array_equal(getattr(d, f), getattr(want_d, f)) for f in
                   ("internal_nodes", "border_nodes", "internal_elements", "border_elements"))
        same = same and d.node_cmaps.keys() == want_d.node_cmaps.keys() and all(
            np.array_equal(d.node_cmaps[k], v) for k, v in want_d.node_cmaps.items())
        bad += int(not same)
    return int(comm.allreduce(bad, op=MPI.SUM))


def run(comm: MPI.Comm, nx: int = 30, ny: int = 10, nz: int = 10, steps: int = 20, every: int = 5,
        root: str | Path | None = None, catalog: str | None = None, verify: bool = False) -> dict[str, Any]:
    """Run the template (collective).

    Parameters
    ----------
    comm : MPI.Comm
    nx, ny, nz : int
        Elements along each axis (``nx >= 3`` and at least one element column per rank).
    steps : int
        Time steps ``0 .. steps``; results are written at the multiples of *every*.
    every : int
    root, catalog : optional
        Data root and catalog URL (SDM's defaults otherwise).
    verify : bool
        Re-read everything on a balanced share and compare.

    Returns
    -------
    dict
        The same on every rank: ``run_id``, ``elements``, ``nodes``, ``steps`` written,
        ``write_seconds``, ``read_seconds``, ``mismatches`` (None without *verify*).
    """
    size, rank = comm.Get_size(), comm.Get_rank()
    if nx < max(3, size):
        raise sdm.InvalidArgumentError(f"nx must be at least 3 and at least the number of ranks ({size}), got {nx}")
    bar = Bar(nx, ny, nz, size)
    model = bar.model(rank, comm.bcast((time.strftime("%Y-%m-%d"), time.strftime("%H:%M:%S")), root=0))
    written = list(range(0, steps + 1, every))
    energies: dict[int, float] = {}
    comm.Barrier()
    t0 = time.perf_counter()
    with sdm.open("transient", "w", comm=comm, root=root, catalog=catalog,
                  attributes={"nx": nx, "ny": ny, "nz": nz, "every": every}) as s:
        stored = write_mesh(s, model)
        for step in written:
            values = _results(comm, model, step * DT)
            energies[step] = values["glob"]["energy"]
            write_results(s, stored, step, step * DT, **values)
        run_id, url = s.run_id, catalog or config.default_catalog_url(Path(s.root))
    comm.Barrier()
    t1 = time.perf_counter()
    bad = None
    if verify:
        with sdm.open("transient", "r", comm=comm, root=root, catalog=url, run=run_id) as s:
            bad = _mismatches(bar, comm, s, written, energies)
    t2 = time.perf_counter()
    return dict(run_id=run_id, catalog=url, elements=sum(b[2].size for b in bar.blocks), nodes=int(bar.node_ids.size),
                nprocs=size, steps=written, write_seconds=t1 - t0, read_seconds=t2 - t1 if verify else None,
                mismatches=bad)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point (run under mpiexec)."""
    p = argparse.ArgumentParser(prog="python -m sdm.examples.transient", description=__doc__.splitlines()[0])
    p.add_argument("--nx", type=int, default=30, help="elements along x (3 blocks along x)")
    p.add_argument("--ny", type=int, default=10, help="elements along y")
    p.add_argument("--nz", type=int, default=10, help="elements along z")
    p.add_argument("--steps", type=int, default=20, help="time steps")
    p.add_argument("--every", type=int, default=5, help="write results every k steps")
    p.add_argument("--root", default=None, help="data root (default $SDM_ROOT or ./sdm-data)")
    p.add_argument("--catalog", default=None, help="catalog URL (default sqlite in the data root)")
    p.add_argument("--verify", action="store_true", help="re-read everything on another decomposition and compare")
    a = p.parse_args(argv)
    comm = MPI.COMM_WORLD
    r = run(comm, a.nx, a.ny, a.nz, a.steps, a.every, a.root, a.catalog, a.verify)
    if comm.Get_rank() == 0:
        print(f"transient run {r['run_id']}: {r['elements']} HEX8 elements, {r['nodes']} nodes, 3 blocks, "
              f"results at steps {r['steps']} on {r['nprocs']} ranks; wrote in {r['write_seconds']:.2f} s")
        if a.verify:
            print(f"verify: re-read on a balanced share in {r['read_seconds']:.2f} s, "
                  + ("every value matches" if not r["mismatches"] else f"{r['mismatches']} MISMATCHES"))
        print(f"  sdm show {r['run_id']} --writes --catalog {r['catalog']}")
    return 1 if r["mismatches"] else 0


if __name__ == "__main__":
    sys.exit(main())
