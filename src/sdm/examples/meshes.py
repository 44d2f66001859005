"""Synthetic unstructured meshes and their input files for the irregular templates.

Everything here is plain numpy (vectorized, no MPI): it stands for the mesh generator
and the partitioner an application would have run before SDM sees its data.

* :func:`tet_mesh` -- a tetrahedral mesh after FUN3D: a structured grid of nodes whose
  cubes are each split into six tetrahedra (Kuhn / Freudenthal subdivision, conforming
  across cubes), so every node has up to 14 edges in 7 directions; sized by a target
  edge count (1-2 million edges for the benchmarks, tens for the tests).
* :func:`tri_mesh` -- a 2-D triangle mesh for the Rayleigh-Taylor template (each grid
  square split in two).
* :func:`write_fun3d_inputs` -- the raw input file FUN3D would find: ``edge1``,
  ``edge2`` (int32), four edge arrays and four node arrays (float64), back to back at
  offsets recorded in :class:`Fun3DInputs` (the layout of the paper's figure 7).
* :func:`partition_vector` -- a node -> rank vector from METIS (``pymetis``, when it
  is importable) or else from recursive coordinate bisection.

Input values come from :func:`field`: multiples of 1/16 in [-32, 32), so products and
sums of a few of them are exact in float64 whatever the summation order; results that
a template computes in parallel can then be compared bit for bit with a serial numpy
computation.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

__all__ = [
    "KUHN_DIRECTIONS",
    "TetMesh",
    "TriMesh",
    "Fun3DInputs",
    "EDGE_ARRAYS",
    "NODE_ARRAYS",
    "field",
    "grid_edges",
    "tet_mesh",
    "tet_shape_for_edges",
    "tri_mesh",
    "write_fun3d_inputs",
    "partition_vector",
    "rcb",
    "metis_available",
]

# the 7 edge directions of a Kuhn-subdivided cube grid: 3 axes, 3 face diagonals, 1 body diagonal
KUHN_DIRECTIONS = ((1, 0, 0), (0, 1, 0), (0, 0, 1), (1, 1, 0), (1, 0, 1), (0, 1, 1), (1, 1, 1))
TRI_DIRECTIONS = ((1, 0), (0, 1), (1, 1))
EDGE_ARRAYS = ("x0", "x1", "x2", "x3")  # data on edges (the paper's figure 6: x)
NODE_ARRAYS = ("y0", "y1", "y2", "y3")  # data on nodes (figure 6: y)


def field(name: str, ids: Any, step: int = 0) -> np.ndarray:
    """Deterministic float64 values of array *name* at global indices *ids*.

    ``((ids * 2654435761 + crc32(name) + 7919 * step) mod 1024 - 512) / 16``: multiples
    of 1/16 in [-32, 32), exact in float32 and float64.
    """
    i = np.asarray(ids, dtype=np.uint64)
    salt = np.uint64((zlib.crc32(name.encode()) + 7919 * int(step)) % 2**32)
    h = (i * np.uint64(2654435761) + salt) & np.uint64(1023)
    return (h.astype(np.float64) - 512.0) / 16.0


def grid_edges(shape: Sequence[int], directions: Sequence[Sequence[int]]) -> np.ndarray:
    """Unique edges ``(lower, upper)`` of a node grid, one per (node, direction).

    Node ids are C-order positions in *shape*; an edge joins node ``i`` to ``i + d``
    for every direction ``d`` that stays inside the grid.  Edges come sorted by lower
    node, then direction (node-major, as a mesh generator emits them).
    """
    shape = tuple(int(n) for n in shape)
    ids = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    strides = np.array([int(np.prod(shape[k + 1:])) for k in range(len(shape))], dtype=np.int64)
    lower, kind = [], []
    for k, d in enumerate(directions):
        box = tuple(slice(0, n - dd) for n, dd in zip(shape, d))
        lo = ids[box].ravel()
        lower.append(lo)
        kind.append(np.full(lo.size, k, dtype=np.int8))
    lo = np.concatenate(lower)
    kd = np.concatenate(kind)
    order = np.lexsort((kd, lo))
    step = np.array([int(np.dot(strides, d)) for d in directions], dtype=np.int64)
    lo = lo[order]
    return np.stack([lo, lo + step[kd[order]]], axis=1)


def _edge_count(shape: Sequence[int], directions: Sequence[Sequence[int]]) -> int:
    return sum(int(np.prod([max(0, n - dd) for n, dd in zip(shape, d)])) for d in directions)


def tet_shape_for_edges(n_edges: int) -> tuple[int, int, int]:
    """Node grid ``(n, n, m)`` whose Kuhn mesh has about *n_edges* edges (at least 2x2x2)."""
    n = max(2, int(round((max(n_edges, 1) / 7.0) ** (1.0 / 3.0))))
    best = min(range(2, 4 * n + 2), key=lambda m: abs(_edge_count((n, n, m), KUHN_DIRECTIONS) - n_edges))
    return (n, n, best)


@dataclass(frozen=True)
class TetMesh:
    """A tetrahedral mesh: nodes on a grid, edges of the Kuhn subdivision.

    Attributes
    ----------
    shape : tuple of int
        Nodes along x, y, z (node id = C-order position).
    edges : numpy.ndarray
        ``(n_edges, 2)`` int64 node ids.
    """

    shape: tuple[int, int, int]
    edges: np.ndarray

    @property
    def n_nodes(self) -> int:
        return int(np.prod(self.shape))

    @property
    def n_edges(self) -> int:
        return int(len(self.edges))

    def coords(self, ids: Any = None) -> np.ndarray:
        """``(k, 3)`` float64 coordinates (unit spacing) of nodes *ids* (default all)."""
        ids = np.arange(self.n_nodes) if ids is None else np.asarray(ids)
        return np.stack(np.unravel_index(ids, self.shape), axis=1).astype(np.float64)


def tet_mesh(n_edges: int | None = None, shape: Sequence[int] | None = None, *, shuffle: int | None = None) -> TetMesh:
    """A FUN3D-like tetrahedral mesh with about *n_edges* edges (or on a node grid *shape*).

    Parameters
    ----------
    n_edges : int, optional
        Target edge count (the grid is chosen by :func:`tet_shape_for_edges`).
    shape : sequence of 3 int, optional
        Node grid instead of a target.
    shuffle : int, optional
        Seed of a random permutation of the edge order and of each edge's orientation
        (default: node-major order, lower node first).
    """
    if shape is None:
        if n_edges is None:
            raise ValueError("tet_mesh needs n_edges or shape")
        shape = tet_shape_for_edges(n_edges)
    shp = tuple(int(n) for n in shape)
    edges = grid_edges(shp, KUHN_DIRECTIONS)
    if shuffle is not None:
        edges = _shuffled(edges, shuffle)
    return TetMesh(shp, edges)  # type: ignore[arg-type]


def _shuffled(edges: np.ndarray, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    out = edges[rng.permutation(len(edges))]
    flip = rng.random(len(out)) < 0.5
    out[flip] = out[flip][:, ::-1]
    return out


@dataclass(frozen=True)
class TriMesh:
    """A 2-D triangle mesh on a node grid (each square split along its diagonal).

    Attributes
    ----------
    shape : tuple of int
        Nodes along x and y (node id = C-order position).
    triangles : numpy.ndarray
        ``(n_triangles, 3)`` int64 node ids.
    """

    shape: tuple[int, int]
    triangles: np.ndarray

    @property
    def n_nodes(self) -> int:
        return int(np.prod(self.shape))

    @property
    def n_triangles(self) -> int:
        return int(len(self.triangles))

    def edges(self) -> np.ndarray:
        """``(n_edges, 2)`` unique edges of the triangulation."""
        return grid_edges(self.shape, TRI_DIRECTIONS)

    def coords(self, ids: Any = None) -> np.ndarray:
        """``(k, 2)`` float64 coordinates of nodes *ids* (default all)."""
        ids = np.arange(self.n_nodes) if ids is None else np.asarray(ids)
        return np.stack(np.unravel_index(ids, self.shape), axis=1).astype(np.float64)


def tri_mesh(nx: int, ny: int) -> TriMesh:
    """Triangles of an ``nx x ny`` node grid: two per square, square-major order."""
    ids = np.arange(nx * ny, dtype=np.int64).reshape(nx, ny)
    a, b = ids[:-1, :-1].ravel(), ids[1:, :-1].ravel()
    c, d = ids[:-1, 1:].ravel(), ids[1:, 1:].ravel()
    tris = np.stack([np.stack([a, b, d], axis=1), np.stack([a, d, c], axis=1)], axis=1).reshape(-1, 3)
    return TriMesh((int(nx), int(ny)), tris)


@dataclass(frozen=True)
class Fun3DInputs:
    """Where the arrays are in a FUN3D-like raw input file.

    ``edge1``, ``edge2`` (int32), then the edge arrays (float64, ``n_edges`` each), then
    the node arrays (float64, ``n_nodes`` each), back to back after ``header`` bytes.
    """

    path: Path
    n_nodes: int
    n_edges: int
    header: int = 0
    index_dtype: str = "<i4"
    value_dtype: str = "<f8"

    @property
    def edge1_offset(self) -> int:
        return self.header

    @property
    def edge2_offset(self) -> int:
        return self.header + self.n_edges * np.dtype(self.index_dtype).itemsize

    def edge_offset(self, k: int) -> int:
        """Byte offset of edge array *k* (0..3)."""
        return self.header + 2 * self.n_edges * np.dtype(self.index_dtype).itemsize + k * self.n_edges * 8

    def node_offset(self, k: int) -> int:
        """Byte offset of node array *k* (0..3)."""
        return self.edge_offset(len(EDGE_ARRAYS)) + k * self.n_nodes * 8

    @property
    def nbytes(self) -> int:
        """Size of the file."""
        return self.node_offset(len(NODE_ARRAYS))

    def read_edges(self) -> np.ndarray:
        """``(n_edges, 2)`` int64 edges, read with numpy (no MPI, no SDM)."""
        e = np.fromfile(self.path, dtype=self.index_dtype, count=2 * self.n_edges, offset=self.header)
        return e.reshape(2, self.n_edges).T.astype(np.int64)

    def read_array(self, name: str) -> np.ndarray:
        """One input array read with numpy (float64)."""
        if name in EDGE_ARRAYS:
            return np.fromfile(self.path, self.value_dtype, self.n_edges, offset=self.edge_offset(EDGE_ARRAYS.index(name)))
        k = NODE_ARRAYS.index(name)
        return np.fromfile(self.path, self.value_dtype, self.n_nodes, offset=self.node_offset(k))


def write_fun3d_inputs(path: str | Path, mesh: TetMesh, header: int = 0) -> Fun3DInputs:
    """Write the raw input file of *mesh* (edges, 4 edge arrays, 4 node arrays).

    Array values come from :func:`field` on the global edge or node ids.  Written in
    one pass with numpy; returns the layout.
    """
    layout = Fun3DInputs(Path(path), mesh.n_nodes, mesh.n_edges, header)
    layout.path.parent.mkdir(parents=True, exist_ok=True)
    tmp = layout.path.with_suffix(layout.path.suffix + ".tmp")
    with open(tmp, "wb") as f:
        f.write(b"\0" * header)
        for col in (0, 1):
            f.write(np.ascontiguousarray(mesh.edges[:, col], dtype=layout.index_dtype).tobytes())
        eids, nids = np.arange(mesh.n_edges), np.arange(mesh.n_nodes)
        for name in EDGE_ARRAYS:
            f.write(field(name, eids).astype(layout.value_dtype).tobytes())
        for name in NODE_ARRAYS:
            f.write(field(name, nids).astype(layout.value_dtype).tobytes())
    tmp.replace(layout.path)  # complete files only: a reader never sees half an input
    return layout


# ---------------------------------------------------------------------- partitioning


def metis_available() -> bool:
    """Whether ``pymetis`` can be imported (the optional ``metis`` extra)."""
    try:
        import pymetis  # noqa: F401
    except ImportError:
        return False
    return True


def rcb(coords: np.ndarray, nparts: int) -> np.ndarray:
    """Recursive coordinate bisection: a part in ``0..nparts-1`` for every point.

    Each step splits a set of points across its longest extent at the position that
    gives the two halves sizes proportional to their numbers of parts, so any
    ``nparts`` (not only powers of two) yields balanced parts.
    """
    pts = np.asarray(coords, dtype=np.float64)
    out = np.zeros(len(pts), dtype=np.int64)
    todo = [(np.arange(len(pts)), 0, int(nparts))]
    while todo:
        ids, first, k = todo.pop()
        if k <= 1 or ids.size == 0:
            out[ids] = first
            continue
        sub = pts[ids]
        axis = int(np.argmax(sub.max(axis=0) - sub.min(axis=0))) if ids.size else 0
        left = k // 2
        cut = int(round(ids.size * left / k))
        order = np.argsort(sub[:, axis], kind="stable")
        todo.append((ids[order[:cut]], first, left))
        todo.append((ids[order[cut:]], first + left, k - left))
    return out


def _metis(n_nodes: int, edges: np.ndarray, nparts: int) -> np.ndarray:
    import pymetis

    src = np.concatenate([edges[:, 0], edges[:, 1]])
    dst = np.concatenate([edges[:, 1], edges[:, 0]])
    order = np.argsort(src, kind="stable")
    xadj = np.concatenate([[0], np.cumsum(np.bincount(src, minlength=n_nodes))]).astype(np.int64)
    adjncy = dst[order].astype(np.int64)
    if hasattr(pymetis, "CSRAdjacency"):  # pymetis >= 2025
        _, membership = pymetis.part_graph(nparts, pymetis.CSRAdjacency(xadj, adjncy))
    else:
        _, membership = pymetis.part_graph(nparts, xadj=xadj, adjncy=adjncy)
    return np.asarray(membership, dtype=np.int64)


def partition_vector(
    n_nodes: int, edges: np.ndarray, coords: np.ndarray, nparts: int, method: str = "auto"
) -> tuple[np.ndarray, str]:
    """A replicated partitioning vector ``part[node] -> 0..nparts-1``.

    Parameters
    ----------
    n_nodes : int
    edges : numpy.ndarray
        ``(n_edges, 2)`` node ids (the graph METIS cuts).
    coords : numpy.ndarray
        ``(n_nodes, d)`` coordinates (for bisection).
    nparts : int
    method : {"auto", "metis", "rcb"}
        ``auto``: METIS when ``pymetis`` is importable, else bisection.

    Returns
    -------
    (numpy.ndarray, str)
        The vector (int64) and the method used.
    """
    if method not in ("auto", "metis", "rcb"):
        raise ValueError(f"unknown partitioner {method!r}; choose auto, metis or rcb")
    if nparts <= 1 or n_nodes == 0:
        return np.zeros(n_nodes, dtype=np.int64), "trivial"
    if method == "metis" or (method == "auto" and metis_available()):
        return _metis(n_nodes, np.asarray(edges, dtype=np.int64), nparts), "metis"
    return rcb(coords, nparts), "rcb"
