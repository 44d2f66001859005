"""Mesh inputs of a partitioning: edges and the replicated partitioning vector."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import integrity
from .. import _validate as check
from ..errors import DistributionError, InvalidArgumentError

if TYPE_CHECKING:
    from ..session import Session

__all__ = ["EdgeFile", "EdgeBlocks", "content_hash"]


@dataclass(frozen=True)
class EdgeFile:
    """Edges stored as two raw integer arrays (``edge1``, ``edge2``) in a file.

    Parameters
    ----------
    path : str or Path
    n_edges, n_nodes : int
    edge1_offset, edge2_offset : int
        Byte offsets of the two arrays; ``edge2_offset`` defaults to right after edge1.
    dtype : str
        Integer dtype with byte order, e.g. ``"<i4"``.
    """

    path: str | Path
    n_edges: int
    n_nodes: int
    edge1_offset: int = 0
    edge2_offset: int | None = None
    dtype: str = "<i4"

    def identity(self, partvec: np.ndarray) -> dict[str, Any]:
        """What the inputs are, without reading them: the edge file's identity and layout
        (size, inode, modification and change times in ns) and sha256 of the vector.

        The change time (ctime) is set by the kernel on every modification and cannot
        be set from user space, so equal identities mean unchanged contents.
        """
        st = Path(self.path).resolve().stat()
        return {
            "edges": {
                "path": str(Path(self.path).resolve()), "size": st.st_size, "ino": st.st_ino, "dev": st.st_dev,
                "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns, "n_edges": int(self.n_edges),
                "n_nodes": int(self.n_nodes), "edge1_offset": int(self.edge1_offset),
                "edge2_offset": None if self.edge2_offset is None else int(self.edge2_offset), "dtype": self.dtype,
            },
            "partvec": hashlib.sha256(np.ascontiguousarray(partvec, dtype=np.int64).tobytes()).hexdigest(),
        }

    def read(self, session: "Session") -> "EdgeBlocks":
        """Import both arrays in contiguous blocks, in parallel (recorded as imports)."""
        off2 = self.edge2_offset
        if off2 is None:
            off2 = self.edge1_offset + self.n_edges * np.dtype(self.dtype).itemsize
        e1 = session.import_array("edge1", self.path, dtype=self.dtype, count=self.n_edges, offset=self.edge1_offset)
        e2 = session.import_array("edge2", self.path, dtype=self.dtype, count=self.n_edges, offset=off2)
        return EdgeBlocks(e1, e2, self.n_nodes, self.n_edges, session.comm)


class EdgeBlocks:
    """This rank's contiguous block of the global edge list (blocks in rank order).

    Parameters
    ----------
    edge1, edge2 : array_like of int
        The endpoints of this rank's edges.
    n_nodes : int
        Nodes of the mesh.
    n_edges : int, optional
        Edges of the mesh (default: the sum of the blocks).
    comm : MPI.Comm
        The session communicator (to number the blocks).
    """

    def __init__(self, edge1: Any, edge2: Any, n_nodes: int, n_edges: int | None, comm: Any) -> None:
        check.integer(n_nodes, "n_nodes", maximum=check.MAX_BYTES)
        if n_edges is not None:
            check.integer(n_edges, "n_edges", maximum=check.MAX_BYTES)
        for what, e in (("edge1", edge1), ("edge2", edge2)):
            arr = np.asarray(e) if isinstance(e, (np.ndarray, list, tuple)) else None
            if arr is None or not (arr.size == 0 or np.issubdtype(arr.dtype, np.integer)):
                raise InvalidArgumentError(f"{what} must be a 1-D array of integer node ids")
        self.edge1 = np.ascontiguousarray(edge1, dtype=np.int64)
        self.edge2 = np.ascontiguousarray(edge2, dtype=np.int64)
        problem = None
        if self.edge1.shape != self.edge2.shape or self.edge1.ndim != 1:
            problem = (f"edge1 and edge2 blocks must be 1-D of equal length, got {self.edge1.shape} and "
                       f"{self.edge2.shape} on rank {comm.Get_rank()}")
        gathered = comm.allgather((problem, self.edge1.size))  # every rank, so a bad block never leaves others waiting
        first = next((q for q, _ in gathered if q is not None), None)
        if first is not None:
            raise DistributionError(first)
        counts = [c for _, c in gathered]
        self.start = int(sum(counts[: comm.Get_rank()]))
        self.n_edges = int(sum(counts)) if n_edges is None else int(n_edges)
        self.n_nodes = int(n_nodes)

    @property
    def ids(self) -> np.ndarray:
        """Global ids of this rank's edges."""
        return np.arange(self.start, self.start + self.edge1.size, dtype=np.int64)


def content_hash(edges: EdgeBlocks, partvec: np.ndarray, comm: Any) -> str:
    """A hash of the partitioning inputs that does not depend on the decomposition.

    sha256 over the mesh sizes, the decomposition-independent ``mix64-v2`` checksum of
    both edge arrays (one exchange), and the bytes of the (replicated) partitioning vector.
    (``sdm-mesh-v1`` hashes used the linear ``sum64``, blind to e.g. scaled or swapped ids;
    a history stored under one is simply not found again and is recomputed.)
    """
    ids = (edges.ids,)
    parts = [integrity.partial_mix64(a, ids, (edges.n_edges,), "C") for a in (edges.edge1, edges.edge2)]
    total = comm.allgather(parts)
    s1 = integrity.combine([p[0] for p in total])
    s2 = integrity.combine([p[1] for p in total])
    h = hashlib.sha256()
    h.update(f"sdm-mesh-v2:{edges.n_nodes}:{edges.n_edges}:{s1:016x}:{s2:016x}:".encode())
    h.update(np.ascontiguousarray(partvec, dtype=np.int64).tobytes())
    return h.hexdigest()
