"""Map-array distributions for irregular (unstructured-mesh) data.

Each rank states, for every row of its local array, the global row it holds; rows may
come in any order and some may be *ghosts* (copies of rows owned elsewhere, never
written and left untouched by reads).  As CE-QUAL-ICM does with MPI (Cronk, Fagg, Moore,
section 3.2), SDM sorts the file side, permutes the memory side to match, and moves the
data with one indexed-block file type and one indexed-block memory type, so the file
view is monotonic whatever the order of the map.

Rows are the first dimension; trailing dimensions (components) travel whole, so a
map array serves ``(n_nodes,)`` and ``(n_nodes, 5)`` datasets alike.  Maps are checked
once per global shape, collectively and scalably: every rank sends its owned rows to
the rank responsible for their range (one ``Alltoallv``), which counts them; a row
owned twice, a row out of range, or (with ``coverage=True``) a row owned by nobody is
rejected on every rank before a byte is written.
"""

from __future__ import annotations

import uuid
from typing import Any, Sequence

import numpy as np

from .. import _validate as check
from ..errors import DistributionError, InvalidArgumentError
from .distribution import Distribution, Piece

__all__ = ["MapArray"]

_SHOW = 5  # examples named in an error message


class MapArray(Distribution):
    """Rows of the global array given by a map: ``global_row[local_row]``.

    Parameters
    ----------
    global_rows : array_like of int
        The global row of each local row (any order).
    ghost : array_like of bool, optional
        ``True`` for local rows that are ghosts (owned by another rank): never written,
        left as they are by reads. Default: no ghosts.
    coverage : bool
        Require every global row to be owned by exactly one rank (default). With
        ``False`` rows may be left unowned (their bytes are not written).

    Notes
    -----
    One ``MapArray`` is meant to be built once and shared by every dataset and step
    with the same rows: its sorted map, its check and its MPI types are computed once.
    """

    kind = "map"

    def __init__(self, global_rows: Any, ghost: Any = None, *, coverage: bool = True) -> None:
        try:
            rows = np.asarray(global_rows)
        except (TypeError, ValueError, OverflowError):
            rows = np.asarray([object()])
        if rows.ndim != 1 or not (rows.size == 0 or np.issubdtype(rows.dtype, np.integer)):
            raise DistributionError(f"a map array is a 1-D array of integer global rows, got {rows.dtype} of shape {rows.shape}")
        self.global_rows = rows.astype(np.int64, copy=False)
        if ghost is None:
            self.ghost = np.zeros(rows.size, dtype=bool)
        else:
            try:
                mask = np.asarray(ghost)
            except (TypeError, ValueError, OverflowError):
                mask = np.asarray([object()])
            if mask.dtype != np.bool_ and mask.size:
                raise InvalidArgumentError(f"ghost must be a mask of booleans, one per local row, got {mask.dtype}")
            self.ghost = mask.astype(bool)
            if self.ghost.shape != rows.shape:
                raise DistributionError(f"ghost mask has shape {self.ghost.shape}; the map has {rows.size} rows")
        self.coverage = check.flag(coverage, "coverage")
        self._pieces: dict[tuple, Piece] = {}
        self._checked: set[tuple] = set()
        self.types: dict[tuple, Any] = {}  # MPI types built for this map, reused across datasets
        self._all_rows: MapArray | None = None
        self._reading = False
        self._token = uuid.uuid4().hex  # names this map among the ranks' maps (see collective_state)
        self._signature: Any = None  # the tokens of all ranks' maps when the caches were last agreed

    @property
    def needs_coverage_check(self) -> bool:
        return True

    @property
    def local_rows(self) -> int:
        """Rows of the local array (ghosts included)."""
        return int(self.global_rows.size)

    @property
    def owned(self) -> int:
        """Rows this rank owns (and writes)."""
        return int(self.global_rows.size - np.count_nonzero(self.ghost))

    def piece(self, shape: Sequence[int], nprocs: int, rank: int) -> Piece:
        shape = tuple(int(s) for s in shape)
        key = (shape, nprocs, rank)
        cached = self._pieces.get(key)
        if cached is not None:
            return cached
        if not shape:
            raise DistributionError("a map array needs a dataset with at least one dimension")
        n = shape[0]
        bad = (self.global_rows < 0) | (self.global_rows >= n)
        if bad.any():
            where = np.flatnonzero(bad)[:_SHOW]
            raise DistributionError(
                f"map entries out of range [0, {n}) on rank {rank}: "
                + ", ".join(f"local row {i} -> {self.global_rows[i]}" for i in where)
                + f" ({int(bad.sum())} in all)"
            )
        positions = np.flatnonzero(~self.ghost)
        owned = self.global_rows[positions]
        order = np.argsort(owned, kind="stable")
        rows = owned[order]
        dup = np.flatnonzero(np.diff(rows) == 0)
        if dup.size:
            raise DistributionError(
                f"rank {rank} owns global rows more than once: {sorted(set(rows[dup[:_SHOW]].tolist()))} "
                f"({dup.size} duplicates); mark extra copies as ghosts"
            )
        piece = Piece(
            shape=shape,
            counts=(int(rows.size), *shape[1:]),
            ghosts=((0, 0),) * len(shape),
            indices=(rows, *(np.arange(m, dtype=np.int64) for m in shape[1:])),
            kind="map",
            memory_rows=positions[order],
            local_rows=self.local_rows,
        )
        self._pieces[key] = piece
        return piece

    def all_rows(self) -> "MapArray":
        """A view of every local row, ghosts included, for reading (built once).

        Ranks may read the same rows (ghost copies), so it is not checked for
        ownership; what is read lands in every local row.
        """
        if self._all_rows is None:
            self._all_rows = MapArray(self.global_rows, coverage=False)
            self._all_rows._reading = True
        return self._all_rows

    def check(self, shape: Sequence[int], piece: Piece, comm: Any) -> None:
        """See :meth:`check_ownership` (nothing to check for a reading view)."""
        if not self._reading:
            self.check_ownership(shape, comm)

    def check_ownership(self, shape: Sequence[int], comm: Any) -> None:
        """Collectively reject rows owned twice and (with coverage) rows owned by nobody.

        Raises
        ------
        DistributionError
            On every rank, naming example rows.
        """
        from mpi4py import MPI

        from .._collective import agree, capture

        shape = tuple(int(s) for s in shape)
        size, rank = comm.Get_size(), comm.Get_rank()
        key = (shape, size)
        if key in self._checked:
            return
        rows, failure = capture(lambda: self.piece(shape, size, rank).indices[0], rank=rank)
        agree(comm, failure)  # out of range / duplicates within a rank, everywhere
        assert rows is not None
        n = shape[0]
        chunk = max(1, -(-n // size))
        dest = rows // chunk
        order = np.argsort(dest, kind="stable")
        send = np.ascontiguousarray(rows[order])
        scount = np.bincount(dest, minlength=size).astype(np.int64)
        rcount = np.empty(size, dtype=np.int64)
        comm.Alltoall(scount, rcount)
        recv = np.empty(int(rcount.sum()), dtype=np.int64)
        sdisp = np.concatenate([[0], np.cumsum(scount)[:-1]])
        rdisp = np.concatenate([[0], np.cumsum(rcount)[:-1]])
        comm.Alltoallv([send, scount, sdisp, MPI.INT64_T], [recv, rcount, rdisp, MPI.INT64_T])
        lo, hi = min(n, rank * chunk), min(n, (rank + 1) * chunk)
        counts = np.bincount(recv - lo, minlength=hi - lo) if hi > lo else np.zeros(0, np.int64)
        problem = None
        twice = np.flatnonzero(counts > 1)
        if twice.size:
            problem = (
                f"global rows owned by more than one rank: {(twice[:_SHOW] + lo).tolist()} "
                f"({twice.size} rows in [{lo}, {hi})); each row must have one owner, mark copies as ghosts"
            )
        elif self.coverage:
            none = np.flatnonzero(counts == 0)
            if none.size:
                problem = (
                    f"global rows owned by no rank: {(none[:_SHOW] + lo).tolist()} ({none.size} rows in "
                    f"[{lo}, {hi})); cover every row or pass coverage=False"
                )
        failure = capture(_raise, problem, rank=rank)[1] if problem else None
        agree(comm, failure)
        self._checked.add(key)

    def agreement(self) -> dict[str, Any]:
        return {"kind": self.kind, "coverage": self.coverage, "reading": self._reading}

    def collective_state(self) -> Any:
        """``(token, signature)``: this map and the set of maps its cached checks and plans were made with.

        The ownership check and the exchange plans are collective and cached with the map;
        a rank may keep a map across views while another brings a new one. Every rank
        keeps its caches only when every rank's signature equals the new set of tokens
        (decided from one allgather, so the decision is the same everywhere).
        """
        return (self._token, self._signature)

    def reset_collective_state(self, signature: Any, keep: bool) -> None:
        if not keep:
            self._checked.clear()
            self._pieces.clear()  # new pieces: their caches (exchange plans) start empty
        self._signature = signature

    def to_json(self) -> dict[str, Any]:
        # each rank has its own map; the stored access pattern names the kind only
        return {"kind": self.kind, "coverage": self.coverage}

    def __eq__(self, other: object) -> bool:
        return other is self

    def __hash__(self) -> int:
        return id(self)

    def __repr__(self) -> str:
        return f"MapArray({self.local_rows} rows, {self.owned} owned, coverage={self.coverage})"


def _raise(message: str) -> None:
    raise DistributionError(message)
