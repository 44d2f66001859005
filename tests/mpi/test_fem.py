"""The finite element model stored in SDM (sdm.fem.store), compared with a hex mesh built here with numpy.

The reference: an ``nx * ny * nz`` box of HEX8 elements split into three blocks along x,
elements given to ranks by slabs along x, each node owned by the lowest rank whose
elements use it (the others hold it as a ghost), local arrays shuffled. Written at N
ranks, read back at N ranks, on a sub-communicator of other sizes, by one process, and
compared value by value; bad inputs raise the exact message on every rank and leave
nothing in the catalog.
"""

from __future__ import annotations

import numpy as np
import pytest
import sdm
from mpi4py import MPI
from sdm.errors import CollectiveMismatchError, DistributionError, InvalidArgumentError, LocalArrayError
from sdm.fem.model import Block, Decomposition, Model, Nodes, NodeSet, SideSet, Variables
from sdm.fem.store import read_decomposition, read_mesh, read_results, write_mesh, write_results

RANK0 = " [rank 0]" if MPI.COMM_WORLD.Get_size() > 1 else ""
NX, NY, NZ = 6, 3, 2
BLOCKS = ((10, "left", 0, 2), (20, "middle", 2, 4), (30, "right", 4, 6))  # id, name, x range of elements
STEPS = (0, 3, 6)


class Reference:
    """The global mesh and its distribution over *size* ranks, all numpy."""

    def __init__(self, size: int, sparse: bool) -> None:
        nn = (NX + 1) * (NY + 1) * (NZ + 1)
        grid = np.arange(nn).reshape(NZ + 1, NY + 1, NX + 1)
        self.node_ids = 7 * np.arange(nn) + 3 if sparse else np.arange(nn) + 1  # by global node index
        z, y, x = np.meshgrid(np.arange(NZ + 1), np.arange(NY + 1), np.arange(NX + 1), indexing="ij")
        self.coords = np.stack([x.ravel() * 0.5, y.ravel() * 1.5, z.ravel() * 2.0], axis=1)
        ez, ey, ex = (a.ravel() for a in np.meshgrid(np.arange(NZ), np.arange(NY), np.arange(NX), indexing="ij"))
        corners = [(0, 0, 0), (1, 0, 0), (1, 1, 0), (0, 1, 0), (0, 0, 1), (1, 0, 1), (1, 1, 1), (0, 1, 1)]
        conn_idx = np.stack([grid[ez + dz, ey + dy, ex + dx] for dx, dy, dz in corners], axis=1)
        self.blocks = []  # (id, name, element ids, connectivity as node ids, x of each element, z of each)
        next_id = 1
        for bid, name, lo, hi in BLOCKS:
            sel = np.flatnonzero((ex >= lo) & (ex < hi))
            ids = np.arange(next_id, next_id + sel.size)
            next_id += sel.size
            self.blocks.append((bid, name, ids, self.node_ids[conn_idx[sel]], ex[sel], ez[sel]))
        self.size = size
        owner_of_elem = [ex_ * size // NX for *_, ex_, _ in self.blocks]
        self.node_owner = np.full(nn, size, dtype=np.int64)
        for b, owners in zip(self.blocks, owner_of_elem):
            idx = np.searchsorted(self.node_ids, b[3])
            np.minimum.at(self.node_owner, idx.ravel(), np.repeat(owners, 8))
        self.elem_owner = owner_of_elem
        self.node_set = self.node_ids[grid[:, :, 0].ravel()]  # the face x = 0
        self.node_set_factors = {int(i): 0.5 * i for i in self.node_set}
        self.side_set = [(b[2][b[5] == 0], 5) for b in self.blocks]  # bottom faces z = 0: HEX8 side 5

    def nodal(self, name: str, step: int, ids: np.ndarray) -> np.ndarray:
        return ids * (1.0 if name == "dx" else -2.0) + 100.0 * step

    def element(self, step: int, ids: np.ndarray) -> np.ndarray:
        return ids * 0.25 + step

    def energy(self, step: int) -> float:
        return 1.5 * step + 0.125

    def used(self, rank: int) -> np.ndarray:
        """Global node indices used by rank's elements."""
        parts = [np.searchsorted(self.node_ids, b[3][o == rank]).ravel() for b, o in zip(self.blocks, self.elem_owner)]
        return np.unique(np.concatenate(parts))

    def decomposition(self, rank: int) -> Decomposition:
        mine_used = self.used(rank)
        owned = np.flatnonzero(self.node_owner == rank)
        shared: dict[int, np.ndarray] = {}
        for other in range(self.size):
            if other != rank:
                common = np.intersect1d(np.union1d(mine_used, owned), self.used(other))
                if common.size:
                    shared[other] = self.node_ids[common]
        border = np.intersect1d(owned, np.concatenate([np.searchsorted(self.node_ids, v) for v in shared.values()]
                                                      or [np.zeros(0, int)]))
        internal = np.setdiff1d(owned, border)
        local = np.union1d(owned, mine_used)
        outside = self.node_ids[np.setdiff1d(local, internal)]
        be, ie = [], []
        for b, o in zip(self.blocks, self.elem_owner):
            mine = o == rank
            touches = np.isin(b[3], outside).any(axis=1)
            be.append(b[2][mine & touches])
            ie.append(b[2][mine & ~touches])
        return Decomposition(rank, self.size, self.node_ids[internal], self.node_ids[border],
                             np.concatenate(ie), np.concatenate(be), shared)

    def model(self, rank: int, seed: int = 0) -> Model:
        rng = np.random.default_rng([seed, rank])
        owned = np.flatnonzero(self.node_owner == rank)
        ghosts = np.setdiff1d(self.used(rank), owned)
        idx = np.concatenate([owned, ghosts])
        ghost = np.concatenate([np.zeros(owned.size, bool), np.ones(ghosts.size, bool)])
        order = rng.permutation(idx.size)
        idx, ghost = idx[order], ghost[order]
        blocks = []
        for b, o in zip(self.blocks, self.elem_owner):
            sel = rng.permutation(np.flatnonzero(o == rank))
            blocks.append(Block(b[0], b[1], "HEX8", b[2][sel], b[3][sel]))
        local_ids = self.node_ids[idx]
        ns_ids = rng.permutation(local_ids[np.isin(local_ids, self.node_set)])  # ghosts too: listed twice
        ns = NodeSet(1, "x0", ns_ids, np.array([self.node_set_factors[int(i)] for i in ns_ids]))
        elems = np.concatenate([e[np.isin(e, b.element_ids)] for (e, _), b in zip(self.side_set, blocks)])
        ss = SideSet(2, "bottom", elems, np.full(elems.size, 5), np.repeat(elems * 1.0, 4) + np.tile(np.arange(4), elems.size))
        return Model("box", Nodes(local_ids, self.coords[idx]), blocks, [ns], [ss],
                     Variables(["dx", "vx"], ["stress"], ["energy"]),
                     qa=[("test", "1.0", "2024-01-01", "00:00:00")], info=["a hex box", "three blocks"],
                     ghost_nodes=ghost, decomposition=self.decomposition(rank))

    def results(self, model: Model, step: int) -> dict:
        ids = model.nodes.ids
        return dict(nodal={n: self.nodal(n, step, ids) for n in ("dx", "vx")},
                    element={"stress": {b.id: self.element(step, b.element_ids) for b in model.blocks}},
                    glob={"energy": self.energy(step)})


def _write(comm, tmp, ref, name="mesh", **open_kw):
    rank = comm.Get_rank()
    url = f"sqlite:///{tmp}/c.db"
    with sdm.open("fem", root=tmp, catalog=url, comm=comm, **open_kw) as s:
        model = ref.model(rank)
        stored = write_mesh(s, model, name)
        for step in STEPS:
            write_results(s, stored if step else model, step, 0.1 * step, **ref.results(model, step))
        run = s.run_id
    return url, run


def _check_read(comm, tmp, url, run, ref, share="balanced"):
    """Read at comm's size and compare everything with the reference."""
    size, rank = (1, 0) if share == "whole" else (comm.Get_size(), comm.Get_rank())
    with sdm.open("fem", "r", root=tmp, catalog=url, run=run, comm=comm) as s:
        m = read_mesh(s, share=share)
        assert m.title == "box" and m.qa == [("test", "1.0", "2024-01-01", "00:00:00")]
        assert m.info == ["a hex box", "three blocks"]
        assert m.variables == Variables(["dx", "vx"], ["stress"], ["energy"])
        # elements: a balanced contiguous share of each block, in global order
        for b, (bid, name, ids, conn, *_) in zip(m.blocks, ref.blocks):
            lo, hi = ids.size * rank // size, ids.size * (rank + 1) // size
            assert (b.id, b.name, b.type) == (bid, name, "HEX8")
            np.testing.assert_array_equal(b.element_ids, ids[lo:hi])
            np.testing.assert_array_equal(b.connectivity, conn[lo:hi])
        # nodes: every node used, coordinates right, each node owned by exactly one rank
        ids = m.nodes.ids
        assert np.all(np.diff(ids) > 0)
        used = np.unique(np.concatenate([b.connectivity.ravel() for b in m.blocks]))
        assert np.isin(used, ids).all()
        np.testing.assert_array_equal(m.nodes.coords, ref.coords[np.searchsorted(ref.node_ids, ids)])
        owned = ids[~m.ghost_nodes]
        every = np.sort(np.concatenate(comm.allgather(owned))) if share == "balanced" else owned
        np.testing.assert_array_equal(every, ref.node_ids)
        # sets: this rank's entries, each once, in global order
        (ns,), (ss,) = m.node_sets, m.side_sets
        want = np.sort(ref.node_set[np.isin(ref.node_set, owned)])
        np.testing.assert_array_equal(ns.node_ids, want)
        np.testing.assert_array_equal(ns.factors, 0.5 * want)
        mine = np.concatenate([b.element_ids for b in m.blocks])
        elems = np.sort(np.concatenate([e for e, _ in ref.side_set]))
        elems = elems[np.isin(elems, mine)]
        np.testing.assert_array_equal(ss.element_ids, elems)
        np.testing.assert_array_equal(ss.sides, np.full(elems.size, 5))
        np.testing.assert_array_equal(ss.factors, np.repeat(elems * 1.0, 4) + np.tile(np.arange(4), elems.size))
        # results at every step
        r = s.group("mesh.results")
        assert r.steps("time") == list(STEPS)
        for step in STEPS:
            res = read_results(s, m, step)
            assert res.time == 0.1 * step and res.glob == {"energy": ref.energy(step)}
            for n in ("dx", "vx"):
                np.testing.assert_array_equal(res.nodal[n], ref.nodal(n, step, ids))
            for b in m.blocks:
                np.testing.assert_array_equal(res.element["stress"][b.id], ref.element(step, b.element_ids))
        # the writer's decomposition, every writer rank
        decs = read_decomposition(s, ranks=(0, ref.size))
        for got in decs:
            want_d = ref.decomposition(got.rank)
            for f in ("internal_nodes", "border_nodes", "internal_elements", "border_elements"):
                np.testing.assert_array_equal(getattr(got, f), getattr(want_d, f))
            assert got.node_cmaps.keys() == want_d.node_cmaps.keys() and got.nranks == ref.size
            for k, v in want_d.node_cmaps.items():
                np.testing.assert_array_equal(got.node_cmaps[k], v)
        if size == ref.size and share == "balanced":
            (own,) = read_decomposition(s)
            assert own.rank == rank


@pytest.mark.parametrize("sparse", [False, True])
def test_fem_roundtrip_many_to_many(comm, mpi_tmp, sparse):
    ref = Reference(comm.Get_size(), sparse)
    url, run = _write(comm, mpi_tmp, ref)
    _check_read(comm, mpi_tmp, url, run, ref)  # the writer's rank count
    _check_read(comm, mpi_tmp, url, run, ref, share="whole")  # every rank the whole model
    for n in sorted({1, comm.Get_size() - 1} - {0}):  # other rank counts, one process included
        sub = comm.Split(0 if comm.Get_rank() < n else MPI.UNDEFINED, comm.Get_rank())
        if sub != MPI.COMM_NULL:
            try:
                _check_read(sub, mpi_tmp, url, run, ref)
            finally:
                sub.Free()
        comm.Barrier()


def test_fem_results_stored_in_global_order(comm, mpi_tmp):
    """The files hold node coordinates and a nodal variable in global id order (read with a plain box)."""
    ref = Reference(comm.Get_size(), True)
    url, run = _write(comm, mpi_tmp, ref)
    with sdm.open("fem", "r", root=mpi_tmp, catalog=url, run=run, comm=comm) as s:
        g, r = s.group("mesh"), s.group("mesh.results")
        np.testing.assert_array_equal(g.read("node_ids", 0, box=(...,)), ref.node_ids)
        np.testing.assert_array_equal(g.read("coords", 0, box=(...,)), ref.coords)
        np.testing.assert_array_equal(g.read("b1.conn", 0, box=(...,)), ref.blocks[1][3])
        np.testing.assert_array_equal(r.read("nod.dx", 6, box=(...,)), ref.nodal("dx", 6, ref.node_ids))
        assert g.kind == "topology" and r.kind == "state"
        assert [str(x) for x in g.info("block_types")] == ["HEX8"] * 3


def _bad(comm, tmp, change, error, message):
    """Writing a changed model raises *error* with *message* everywhere and records no group."""
    ref = Reference(comm.Get_size(), False)
    model = ref.model(comm.Get_rank())
    change(model, comm.Get_rank())
    with sdm.open("fem", root=tmp, catalog=f"sqlite:///{tmp}/c.db", comm=comm) as s:
        with pytest.raises(error) as info:
            write_mesh(s, model)
        assert str(info.value) == message
        assert s.groups == []


def test_fem_bad_node_in_connectivity(comm, mpi_tmp):
    def change(m, rank):
        if rank == 0:
            m.blocks[0].connectivity[0, 0] = 9999
    _bad(comm, mpi_tmp, change, DistributionError,
         f"connectivity of block 10 names node ids no rank owns: [9999]{RANK0}")


def test_fem_bad_duplicate_owned(comm, mpi_tmp):
    size = comm.Get_size()
    target = (NX - 1) * size // NX  # the last rank with elements (with more ranks than columns, some have none)
    last = Reference(size, False).model(target)
    dup = np.sort(last.nodes.ids[last.ghost_nodes]) if size > 1 else np.sort(last.nodes.ids)[:1]
    shown = f"{dup[:5].tolist()}" + (f" ({dup.size} in all)" if dup.size > 5 else "")

    def change(m, rank):
        if rank == target:
            if size == 1:  # one rank: a node listed twice
                m.nodes.ids[np.argmax(m.nodes.ids == np.sort(m.nodes.ids)[1])] = dup[0]
            m.ghost_nodes[:] = False  # owns its ghosts too
    _bad(comm, mpi_tmp, change, DistributionError,
         f"node ids owned more than once: {shown}; each node has one owner, mark the other copies in "
         f"ghost_nodes{RANK0}")


def test_fem_bad_element_type(comm, mpi_tmp):
    def change(m, rank):
        if rank == 0:
            m.blocks[1].type = "HEX27"
    _bad(comm, mpi_tmp, change, InvalidArgumentError,
         f"block 20: element type 'HEX27' is not one of BAR2, TRI3, QUAD4, TETRA4, HEX8, WEDGE6{RANK0}")


def test_fem_bad_model_mismatch(comm, mpi_tmp):
    if comm.Get_size() == 1:
        pytest.skip("needs two ranks")

    def change(m, rank):
        if rank == 1:
            m.variables.glob = ["energy", "momentum"]
    _bad(comm, mpi_tmp, change, CollectiveMismatchError,
         "ranks describe different models: global variables of rank 0: 'energy'; of rank 1: 'energy', 'momentum'; "
         "every rank lists the same blocks, sets, variables and records [rank 0]")


def test_fem_bad_results_length(comm, mpi_tmp):
    rank, size = comm.Get_rank(), comm.Get_size()
    ref = Reference(size, False)
    target = (NX - 1) * size // NX  # the last rank with elements (with more ranks than columns, some have none)
    with sdm.open("fem", root=mpi_tmp, catalog=f"sqlite:///{mpi_tmp}/c.db", comm=comm) as s:
        model = ref.model(rank)
        stored = write_mesh(s, model)
        good = ref.results(model, 1)
        bad = ref.results(model, 1)
        n_local, n_owned = model.nodes.ids.size, int((~model.ghost_nodes).sum())
        if rank == target:
            bad["nodal"]["vx"] = np.zeros(n_local + 1)
        with pytest.raises(LocalArrayError) as info:
            write_results(s, stored, 1, 0.1, **bad)
        last = ref.model(target)
        want = (f"nodal variable 'vx' needs one number per node of this rank ({last.nodes.ids.size}, ghosts included) "
                f"or per owned node ({int((~last.ghost_nodes).sum())}), got float64 of shape "
                f"({last.nodes.ids.size + 1},)" + (f" [rank {target}]" if size > 1 else ""))
        assert str(info.value) == want
        assert s.group("mesh.results").steps("time") == []
        bad = ref.results(model, 1)
        if rank == target:  # that rank has elements of block 30
            bad["element"]["stress"][30] = bad["element"]["stress"][30][:-1]
        with pytest.raises(LocalArrayError) as info:
            write_results(s, stored, 1, 0.1, **bad)
        ne = last.blocks[2].element_ids.size
        assert str(info.value) == (f"element variable 'stress' of block 30 must be numbers of shape ({ne},), got "
                                   f"float64 of shape ({ne - 1},)" + (f" [rank {target}]" if size > 1 else ""))
        with pytest.raises(InvalidArgumentError) as info2:
            write_results(s, stored, 1, 0.1, nodal=good["nodal"], element=good["element"], glob={})
        assert str(info2.value) == f"step 1: global variables [] given, ['energy'] declared; give every declared variable{RANK0}"
        assert s.group("mesh.results").steps("time") == []
        write_results(s, model, 1, 0.1, **good)  # and the right one goes through
        assert s.group("mesh.results").steps("nod.vx") == [1]
        assert n_owned <= n_local
