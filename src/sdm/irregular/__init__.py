"""Irregular applications: map arrays, partitioning with index histories, mesh inputs.

>>> mesh = sdm.irregular.EdgeFile("mesh.bin", n_edges=E, n_nodes=N)       # doctest: +SKIP
>>> p = sdm.irregular.partition(session, "wing", partvec, mesh)            # history or compute
>>> x = session.import_array("x", "mesh.bin", dtype="<f8", count=E, offset=o, view=p.edge_map)
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import numpy as np
from mpi4py import MPI

from .. import _validate as check
from .._collective import agree, capture, root_call
from ..engine.operations import collective
from ..errors import InvalidArgumentError
from ..storage import check_name
from ..catalog import irregular as records
from .growable import GrowableArray
from .history import load_history, save_history
from .mesh import EdgeBlocks, EdgeFile, content_hash
from .partitioning import METHODS, Partition, compute_partition

if TYPE_CHECKING:
    from ..session import Session

__all__ = [
    "EdgeBlocks",
    "EdgeFile",
    "GrowableArray",
    "METHODS",
    "Partition",
    "compute_partition",
    "content_hash",
    "partition",
    "prepare_history",
]

log = logging.getLogger("sdm")


def _check_call(session: "Session", problem: Any, partvec: Any, edges: Any, history: Any, method: Any,
                nparts: Any = None) -> np.ndarray:
    """Check the arguments of :func:`partition` / :func:`prepare_history` (every rank, agreed).

    Returns the partitioning vector as int64.

    Raises
    ------
    InvalidNameError, InvalidArgumentError
    """
    def local() -> np.ndarray:
        check_name(problem, "problem")
        check.flag(history, "history")
        check.text(method, "method", choices=METHODS)
        if nparts is not None:
            check.integer(nparts, "nparts", minimum=1, maximum=2**31 - 1)
        if isinstance(edges, EdgeFile):
            check.path(edges.path, "edge file path")
            for value, what in ((edges.n_edges, "n_edges"), (edges.n_nodes, "n_nodes"),
                                (edges.edge1_offset, "edge1_offset")):
                check.integer(value, what, maximum=check.MAX_BYTES)
            if edges.edge2_offset is not None:
                check.integer(edges.edge2_offset, "edge2_offset", maximum=check.MAX_BYTES)
            try:
                dt = np.dtype(edges.dtype)
            except (TypeError, ValueError):
                dt = np.dtype(object)
            if dt.kind not in "iu":
                raise InvalidArgumentError(f"edge file dtype must be an integer dtype such as '<i4', got {edges.dtype!r}")
        elif not isinstance(edges, EdgeBlocks):
            raise InvalidArgumentError(f"edges must be an EdgeFile or EdgeBlocks, got {type(edges).__name__}")
        try:
            pv = np.asarray(partvec)
        except (TypeError, ValueError, OverflowError):
            pv = np.asarray([object()])
        if pv.ndim != 1 or not (pv.size == 0 or np.issubdtype(pv.dtype, np.integer)):
            raise InvalidArgumentError(f"the partitioning vector must be a 1-D array of integer ranks, got {pv.dtype} "
                                       f"of shape {pv.shape}")
        return np.ascontiguousarray(pv, dtype=np.int64)

    pv, failure = capture(local, rank=session.rank)
    agree(session.comm, failure)
    return pv  # type: ignore[return-value]


def _blocks(session: "Session", edges: EdgeFile | EdgeBlocks) -> EdgeBlocks:
    return edges.read(session) if isinstance(edges, EdgeFile) else edges


@collective("partition", label="sdm.irregular.partition")
def partition(
    session: "Session",
    problem: str,
    partvec: Any,
    edges: EdgeFile | EdgeBlocks,
    *,
    history: bool = True,
    method: str = "alltoall",
) -> Partition:
    """Partition a mesh over the session's ranks, reusing an index history when one fits.

    Collective. With ``history=True`` the catalog is asked for a history of *problem*
    with the same inputs (content hash of the edges and the partitioning vector) on the
    same number of ranks: if there is one, each rank reads its part from the history
    file and nothing is exchanged (the reuse is recorded in the catalog); otherwise
    the partition is computed, written to a new history and registered. A history
    whose inputs differ (the mesh changed) is never used; ``Partition.note`` says
    what happened and why.

    Parameters
    ----------
    session : Session
    problem : str
        The problem's identity (mesh name); histories are looked up by it.
    partvec : array_like of int
        Replicated partitioning vector, ``partvec[node]`` = rank, values ``0..size-1``.
    edges : EdgeFile or EdgeBlocks
        The mesh edges: a raw file (imported in parallel) or this rank's block.
    history : bool
        Look up and create histories (default).
    method : {"alltoall", "ring"}
        How edges are redistributed when the partition is computed.

    Returns
    -------
    Partition
    """
    s = session
    t0 = time.perf_counter()
    pv = _check_call(s, problem, partvec, edges, history, method)
    sources = None
    if history and isinstance(edges, EdgeFile):  # unchanged inputs need not be read at all
        sources, found = root_call(s.comm, _lookup_sources, s, problem, edges, pv)
        if found is not None:
            p = load_history(s, found)
            p.note = (f"loaded from index history {found.id} ({found.path}) for {found.nprocs} ranks; "
                      "edge file and partitioning vector unchanged since it was made, edges not read")
            p.stats["seconds"] = s.comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
            _say(s, p.note)
            return p
    blocks = _blocks(s, edges)
    digest = content_hash(blocks, pv, s.comm)
    note = ""
    if history:
        found, others = root_call(s.comm, _lookup, s, problem, digest)
        if found is not None:
            p = load_history(s, found)
            p.note = f"loaded from index history {found.id} ({found.path}) for {found.nprocs} ranks"
            p.stats["seconds"] = s.comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
            _say(s, p.note)
            return p
        stale = [h for h in others if h.nprocs == s.size]
        if stale:
            note = (
                f"index history {stale[-1].id} of {problem!r} on {s.size} ranks was made for other inputs "
                f"(hash {stale[-1].content_hash[:12]}, now {digest[:12]}): the mesh or partitioning vector "
                "changed, so the partition is recomputed"
            )
        else:
            have = sorted({h.nprocs for h in others})
            note = f"no index history of {problem!r} for {s.size} ranks" + (f" (histories exist for {have} ranks)" if have else "") + "; computing the partition"
    (p,) = compute_partition(s.comm, pv, blocks, method=method)
    if history:
        p.stats["history_id"] = save_history(s, problem, digest, [p], s.size, sources)
    p.note = note or "computed (history not requested)"
    p.stats["seconds"] = s.comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
    _say(s, p.note)
    return p


@collective("prepare_history", label="sdm.irregular.prepare_history")
def prepare_history(
    session: "Session", problem: str, partvec: Any, edges: EdgeFile | EdgeBlocks, nparts: int, *, method: str = "alltoall"
) -> int:
    """Compute the partition for ``nparts`` ranks on this job's ranks and store its history.

    Lets a job create histories ahead of time for rank counts it does not run on
    (``partvec`` must name ranks ``0..nparts-1``). Collective; returns the history id.
    """
    s = session
    pv = _check_call(s, problem, partvec, edges, True, method, nparts)
    sources = root_call(s.comm, _identity, edges, pv)
    blocks = _blocks(s, edges)
    digest = content_hash(blocks, pv, s.comm)
    parts = compute_partition(s.comm, pv, blocks, nparts=nparts, method=method)
    hid = save_history(s, problem, digest, parts, nparts, sources)
    _say(s, f"index history {hid} of {problem!r} prepared for {nparts} ranks")
    return hid


def _lookup(s: "Session", problem: str, digest: str):
    assert s.catalog is not None
    found = records.find_history(s.catalog, s.application, problem, digest, s.size)
    return found, ([] if found is not None else records.histories(s.catalog, s.application, problem))


def _identity(edges: EdgeFile | EdgeBlocks, pv: np.ndarray) -> dict | None:
    """Rank 0: the identity of file inputs (None for in-memory blocks or an unreadable file)."""
    try:
        return edges.identity(pv) if isinstance(edges, EdgeFile) else None
    except OSError:
        return None  # the import reports the missing file


def _lookup_sources(s: "Session", problem: str, edges: EdgeFile, pv: np.ndarray):
    """Rank 0: the inputs' identity (taken before any read) and a history made from it."""
    assert s.catalog is not None
    sources = _identity(edges, pv)
    if sources is None:
        return None, None
    return sources, records.find_history_by_sources(s.catalog, s.application, problem, s.size, sources)


def _say(s: "Session", text: str) -> None:
    if s.rank == 0:
        log.info(text)
