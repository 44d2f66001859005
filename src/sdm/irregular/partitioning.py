"""Partitioning of irregular meshes: nodes, edges, ghosts and map arrays per rank.

From a replicated partitioning vector ``part[node] -> rank`` (the paper's
SDM_partition_table / SDM_partition_index), every rank gets

* its nodes: the nodes it owns (sorted), then its ghost nodes (sorted): the nodes its
  edges reach that other ranks own;
* its edges: every edge touching an owned node (ghost edges included: an edge between
  two ranks lives on both); the edge is *owned* by the rank of its first endpoint;
* the edges in local node numbers, ready for the computation;
* two map arrays, for node data and for edge data, with ghosts marked.

The edges are read in parallel in contiguous blocks and redistributed either by the
paper's ring (each block travels around the ranks, each keeps what touches its nodes,
stored in arrays that grow by doubling instead of a counting pass) or by one
all-to-all exchange (each edge is sent straight to the one or two ranks that need it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from mpi4py import MPI

from ..errors import DistributionError
from ..layout import MapArray
from .growable import GrowableArray
from .mesh import EdgeBlocks

__all__ = ["Partition", "compute_partition", "METHODS"]

METHODS = ("alltoall", "ring")


@dataclass
class Partition:
    """One rank's share of a partitioned mesh.

    Attributes
    ----------
    nodes : numpy.ndarray
        Global node ids: the ``n_owned_nodes`` owned ones (sorted), then ghosts (sorted).
    edges : numpy.ndarray
        Global edge ids: the ``n_owned_edges`` owned ones (sorted), then ghost edges.
    local_edges : numpy.ndarray
        ``(len(edges), 2)`` endpoints in local node numbers (indices into ``nodes``).
    source : str
        ``"computed"`` or ``"history"``.
    note : str
        What happened (which history was used, or why the partition was recomputed).
    stats : dict
        Sizes and times (``exchanged_edges``, ``seconds`` ...).
    """

    nprocs: int
    rank: int
    nodes: np.ndarray
    n_owned_nodes: int
    edges: np.ndarray
    n_owned_edges: int
    local_edges: np.ndarray
    source: str = "computed"
    note: str = ""
    stats: dict[str, Any] = field(default_factory=dict)
    _maps: dict[str, MapArray] = field(default_factory=dict, repr=False)

    @property
    def node_map(self) -> MapArray:
        """Map array for node data (ghost nodes marked); built once."""
        if "nodes" not in self._maps:
            ghost = np.arange(self.nodes.size) >= self.n_owned_nodes
            self._maps["nodes"] = MapArray(self.nodes, ghost=ghost)
        return self._maps["nodes"]

    @property
    def edge_map(self) -> MapArray:
        """Map array for edge data (ghost edges marked); built once."""
        if "edges" not in self._maps:
            ghost = np.arange(self.edges.size) >= self.n_owned_edges
            self._maps["edges"] = MapArray(self.edges, ghost=ghost)
        return self._maps["edges"]

    def global_edges(self) -> np.ndarray:
        """``(len(edges), 2)`` endpoints in global node ids."""
        return self.nodes[self.local_edges]


def _check_inputs(partvec: np.ndarray, edges: EdgeBlocks, nparts: int) -> None:
    if partvec.ndim != 1 or partvec.size != edges.n_nodes:
        raise DistributionError(f"the partitioning vector has {partvec.size} entries; the mesh has {edges.n_nodes} nodes")
    if partvec.size and (partvec.min() < 0 or partvec.max() >= nparts):
        raise DistributionError(
            f"the partitioning vector names ranks {int(partvec.min())}..{int(partvec.max())}; "
            f"a partition for {nparts} ranks needs values in 0..{nparts - 1}"
        )
    for name, e in (("edge1", edges.edge1), ("edge2", edges.edge2)):
        if e.size and (e.min() < 0 or e.max() >= edges.n_nodes):
            bad = int(np.flatnonzero((e < 0) | (e >= edges.n_nodes))[0])
            raise DistributionError(
                f"{name}[{edges.start + bad}] = {int(e[bad])} is not a node of a mesh with {edges.n_nodes} nodes"
            )


def _by_destination(dest: np.ndarray, rows: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(dest, kind="stable")
    return np.ascontiguousarray(rows[order]), np.bincount(dest, minlength=size).astype(np.int64)


def _alltoall(comm: MPI.Comm, edges: EdgeBlocks, owner: np.ndarray) -> tuple[np.ndarray, int]:
    """Send every edge to the actual ranks that need it; returns rows (gid, e1, e2)."""
    size = comm.Get_size()
    ids, e1, e2 = edges.ids, edges.edge1, edges.edge2
    d1, d2 = owner[e1], owner[e2]
    two = d2 != d1
    rows = np.stack([np.concatenate([ids, ids[two]]), np.concatenate([e1, e1[two]]), np.concatenate([e2, e2[two]])], axis=1)
    send, scount = _by_destination(np.concatenate([d1, d2[two]]), rows, size)
    rcount = np.empty(size, dtype=np.int64)
    comm.Alltoall(scount, rcount)
    recv = np.empty((int(rcount.sum()), 3), dtype=np.int64)
    sdisp = np.concatenate([[0], np.cumsum(scount)[:-1]]) * 3
    rdisp = np.concatenate([[0], np.cumsum(rcount)[:-1]]) * 3
    comm.Alltoallv([send, scount * 3, sdisp, MPI.INT64_T], [recv, rcount * 3, rdisp, MPI.INT64_T])
    return recv, int(len(rows))


def _ring(comm: MPI.Comm, edges: EdgeBlocks, owner: np.ndarray) -> tuple[np.ndarray, int]:
    """The paper's ring: blocks travel around; each rank keeps edges touching its nodes."""
    size, rank = comm.Get_size(), comm.Get_rank()
    block = np.stack([edges.ids, edges.edge1, edges.edge2], axis=1)
    kept = GrowableArray(3, np.int64, capacity=max(1024, 2 * len(block)))
    moved = 0
    nxt, prv = (rank + 1) % size, (rank - 1) % size
    for step in range(size):
        mine = (owner[block[:, 1]] == rank) | (owner[block[:, 2]] == rank)
        kept.append(block[mine])
        if step == size - 1:
            break
        n_in = comm.sendrecv(len(block), dest=nxt, source=prv)
        incoming = np.empty((n_in, 3), dtype=np.int64)
        comm.Sendrecv([np.ascontiguousarray(block), MPI.INT64_T], nxt, 0, [incoming, MPI.INT64_T], prv, 0)
        moved += len(block)
        block = incoming
    return kept.array.copy(), moved


def _assemble(target: int, partvec: np.ndarray, received: np.ndarray, nparts: int, rank: int) -> Partition:
    """Build one (virtual) rank's partition from the edges that touch its nodes."""
    mine = (partvec[received[:, 1]] == target) | (partvec[received[:, 2]] == target)
    got = received[mine]
    got = got[np.argsort(got[:, 0], kind="stable")]
    owned_edge = partvec[got[:, 1]] == target
    got = np.concatenate([got[owned_edge], got[~owned_edge]])
    owned_nodes = np.flatnonzero(partvec == target).astype(np.int64)
    ends = np.unique(got[:, 1:])
    ghost_nodes = ends[partvec[ends] != target]
    nodes = np.concatenate([owned_nodes, ghost_nodes])
    flat = got[:, 1:].ravel()
    is_owned = partvec[flat] == target
    local = np.where(is_owned, np.searchsorted(owned_nodes, flat), owned_nodes.size + np.searchsorted(ghost_nodes, flat))
    return Partition(
        nprocs=nparts,
        rank=target,
        nodes=nodes,
        n_owned_nodes=int(owned_nodes.size),
        edges=np.ascontiguousarray(got[:, 0]),
        n_owned_edges=int(np.count_nonzero(owned_edge)),
        local_edges=local.reshape(-1, 2).astype(np.int64),
    )


def compute_partition(
    comm: MPI.Comm, partvec: Any, edges: EdgeBlocks, *, nparts: int | None = None, method: str = "alltoall"
) -> list[Partition]:
    """Partition the mesh for ``nparts`` ranks (default: the communicator's size).

    Parts ``v`` are computed by actual rank ``v % size``, so a job on any number of ranks
    can prepare partitions (and histories) for other rank counts. Returns this rank's
    parts in increasing order (exactly one, its own, when ``nparts`` is the size).

    Raises
    ------
    DistributionError
        Bad partitioning vector or edges (raised on every rank by the caller's agree).
    """
    from .._collective import agree, capture

    size, rank = comm.Get_size(), comm.Get_rank()
    nparts = size if nparts is None else int(nparts)
    pv = np.ascontiguousarray(partvec, dtype=np.int64)

    def check() -> None:
        if method not in METHODS:
            raise DistributionError(f"unknown redistribution {method!r}; choose one of {METHODS}")
        _check_inputs(pv, edges, nparts)

    agree(comm, capture(check, rank=rank)[1])
    owner = pv % size  # the actual rank computing each part
    received, moved = (_ring if method == "ring" else _alltoall)(comm, edges, owner)
    parts = [_assemble(v, pv, received, nparts, rank) for v in range(rank, nparts, size)]
    for p in parts:
        p.stats.update(exchanged_edges=moved, method=method)
    return parts
