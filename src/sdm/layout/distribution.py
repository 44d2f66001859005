"""Data views: how a global array is split over the ranks of a communicator.

A :class:`Distribution` is a description that every rank holds identically (it is
stored in the catalog as the writer's access pattern).  ``piece(shape, nprocs, rank)``
turns it into the :class:`Piece` one rank owns: the interior counts, the ghost layers
around it in memory, and the global index of every local position along each
dimension.  All distributions here are *separable*: local element ``(l0, l1, ...)`` is
global element ``(g0[l0], g1[l1], ...)`` with every ``g_d`` increasing.

===============  =======================================================================
Block            contiguous blocks in every dimension over a process grid (``1`` in a
                 grid entry means the dimension is not split, the paper's ``*``)
Cyclic           round-robin single elements over a process grid
BlockCyclic      round-robin blocks of given sizes over a process grid
Subarray         each rank states its own start and count (the paper's explicit view)
===============  =======================================================================

Block and Subarray may carry ghost cells: layers around the interior that exist in the
local array but are never written or read.  Irregular (unstructured-mesh) data uses
:class:`sdm.layout.maparray.MapArray`: a global row index per local row, in any order.
"""

from __future__ import annotations

import math

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from .. import _validate as check
from ..errors import DistributionError, InvalidArgumentError

__all__ = [
    "Piece",
    "Distribution",
    "Block",
    "Cyclic",
    "BlockCyclic",
    "Subarray",
    "distribution_from_json",
    "default_grid",
]


@dataclass(frozen=True)
class Piece:
    """The part of a global array one rank owns.

    Attributes
    ----------
    shape : tuple of int
        Global shape.
    counts : tuple of int
        Interior (owned) extent in each dimension.
    ghosts : tuple of (int, int)
        Ghost layers before and after the interior in each dimension.
    indices : tuple of numpy.ndarray
        ``indices[d][l]`` is the global index of local interior position ``l`` in dim ``d``.
    kind : str
        ``"subarray"`` when the piece is one box (``starts`` valid), ``"cyclic"`` for
        round-robin pieces, ``"map"`` for map-array pieces (rows in any order).
    starts : tuple of int
        Global start of the box (for ``kind == "subarray"``).
    darray : tuple or None
        ``(distribs, dargs, psizes, rank)`` for MPI ``Create_darray`` (cyclic kinds).
    memory_rows : numpy.ndarray or None
        Map pieces: the local row of each owned global row ``indices[0]`` (sorted), i.e.
        the memory side permuted to match the sorted file side.
    local_rows : int
        Map pieces: rows of the local array, ghost rows included.
    """

    shape: tuple[int, ...]
    counts: tuple[int, ...]
    ghosts: tuple[tuple[int, int], ...]
    indices: tuple[np.ndarray, ...]
    kind: str = "subarray"
    starts: tuple[int, ...] = ()
    darray: tuple | None = None
    memory_rows: np.ndarray | None = None
    local_rows: int = 0
    cache: dict = field(default_factory=dict, init=False, compare=False, repr=False)  # derived plans (I/O methods); a replace() starts empty

    def cached(self, key: Any, build: Callable[[], Any], keep: int | None = None) -> Any:
        """``build()``, computed once per *key* and kept in :attr:`cache`.

        With *keep*, at most *keep* entries whose tuple keys share *key*'s first item are
        kept (a method's plans for several memory layouts), the oldest dropped first.
        """
        value = self.cache.get(key)
        if value is None:
            value = build()
            if keep is not None:
                same = [k for k in self.cache if isinstance(k, tuple) and k[:1] == key[:1]]
                for k in same[: max(0, len(same) - keep + 1)]:
                    del self.cache[k]
            self.cache[key] = value
        return value

    @property
    def size(self) -> int:
        """Number of interior (owned) elements."""
        return math.prod(int(c) for c in self.counts)

    @property
    def memory_shape(self) -> tuple[int, ...]:
        """Shape of the local array including ghost layers (or ghost rows)."""
        if self.kind == "map":
            return (self.local_rows, *self.counts[1:])
        return tuple(c + lo + hi for c, (lo, hi) in zip(self.counts, self.ghosts))

    @property
    def interior(self) -> tuple[slice, ...]:
        """Index expression selecting the interior of the local array (box pieces)."""
        return tuple(slice(lo, lo + c) for c, (lo, _) in zip(self.counts, self.ghosts))

    @property
    def has_ghosts(self) -> bool:
        """Whether any ghost layer (or ghost row) is present."""
        if self.kind == "map":
            return self.local_rows > self.counts[0]
        return any(lo or hi for lo, hi in self.ghosts)

    def owned_values(self, array: np.ndarray) -> np.ndarray:
        """The owned elements of a local array, laid out along ``indices`` (ascending)."""
        if self.kind == "map":
            return array[self.memory_rows]
        return array[self.interior]


def default_grid(nprocs: int, ndim: int) -> tuple[int, ...]:
    """A balanced process grid (``MPI_Dims_create``) for *nprocs* ranks and *ndim* dims."""
    from mpi4py import MPI

    return tuple(MPI.Compute_dims(nprocs, [0] * ndim))


_MAX_GHOST = 2**31 - 1


def _check_ghosts(ghosts: Any) -> int | list:
    """Ghost widths in plain Python form: one int, or per dimension an int or a ``(lo, hi)`` pair.

    Raises
    ------
    InvalidArgumentError
    """
    if ghosts is None:
        return 0
    if isinstance(ghosts, (int, np.integer)) and not isinstance(ghosts, (bool, np.bool_)):
        return check.integer(ghosts, "ghosts", maximum=_MAX_GHOST)
    if isinstance(ghosts, np.ndarray) and ghosts.ndim in (1, 2):
        ghosts = ghosts.tolist()
    if not isinstance(ghosts, (list, tuple)):
        raise InvalidArgumentError(
            f"ghosts must be an int, or one int or (lo, hi) pair per dimension, got {type(ghosts).__name__} {ghosts!r}"
        )
    items = list(ghosts)
    out: list = []
    for d, g in enumerate(items):
        if isinstance(g, (int, np.integer)) and not isinstance(g, (bool, np.bool_)):
            out.append(check.integer(g, f"ghosts[{d}]", maximum=_MAX_GHOST))
        else:
            pair = check.int_list(g, f"ghosts[{d}]", maximum=_MAX_GHOST)
            if len(pair) != 2:
                raise InvalidArgumentError(f"ghosts[{d}] must be an int or a (lo, hi) pair, got {g!r}")
            out.append(list(pair))
    return out


def _norm_ghosts(ghosts: Any, ndim: int, shape: Sequence[int] | None = None) -> tuple[tuple[int, int], ...]:
    ghosts = _check_ghosts(ghosts)
    if shape is not None:
        out = _norm_ghosts(ghosts, ndim)
        for d, ((lo, hi), n) in enumerate(zip(out, shape)):
            if max(lo, hi) > max(int(n), 1):
                raise DistributionError(
                    f"ghost layers {(lo, hi)} in dimension {d} are wider than the global extent {int(n)} of shape "
                    f"{tuple(shape)}; ghost layers hold neighbours' cells, at most the array's extent"
                )
        return out
    if ghosts == 0:
        return ((0, 0),) * ndim
    if isinstance(ghosts, (int, np.integer)):
        g = int(ghosts)
        out = ((g, g),) * ndim
    else:
        gl = list(ghosts)
        if len(gl) != ndim:
            raise DistributionError(f"ghosts {ghosts!r} has {len(gl)} entries; the array has {ndim} dimensions")
        out = tuple((int(g), int(g)) if isinstance(g, (int, np.integer)) else (int(g[0]), int(g[1])) for g in gl)
    if any(lo < 0 or hi < 0 for lo, hi in out):
        raise DistributionError(f"ghost widths must be >= 0, got {ghosts!r}")
    return out


def _ghosts_json(ghosts: Any) -> Any:
    if ghosts is None or isinstance(ghosts, (int, np.integer)):
        return int(ghosts or 0)
    return [g if isinstance(g, (int, np.integer)) else list(g) for g in ghosts]


def _coords(rank: int, grid: Sequence[int]) -> tuple[int, ...]:
    """Row-major (C order) process coordinates, as MPI_Cart_create and darray use."""
    return tuple(int(c) for c in np.unravel_index(rank, tuple(grid)))


class Distribution(ABC):
    """A data view: how a global array maps onto the ranks."""

    kind: str = ""

    @abstractmethod
    def piece(self, shape: Sequence[int], nprocs: int, rank: int) -> Piece:
        """Return the piece *rank* owns of a global array of *shape*.

        Raises
        ------
        DistributionError
            The view does not fit the shape or the number of ranks.
        """

    @abstractmethod
    def to_json(self) -> dict[str, Any]:
        """A JSON-able description (stored in the catalog)."""

    def agreement(self) -> dict[str, Any]:
        """What every rank must give identically: the kind and the parameters that place data in the file.

        Checked collectively when a view is set (:func:`sdm.layout.agreement.agree_view`).
        Ghost layers are left out: they shape each rank's local array, never the file.
        """
        return {k: v for k, v in self.to_json().items() if k != "ghosts"}

    def collective_state(self) -> Any:
        """A token of rank-local state that decides collective calls (None: there is none)."""
        return None

    def reset_collective_state(self, signature: Any, keep: bool) -> None:
        """Adopt *signature* (every rank's token); unless *keep*, forget rank-local state kept for collective calls.

        *keep* is decided collectively, so every rank keeps or forgets alike.
        """

    @property
    def needs_coverage_check(self) -> bool:
        """Whether pieces are user-given and must be checked for gaps and overlaps."""
        return False

    def check(self, shape: Sequence[int], piece: Piece, comm: Any) -> None:
        """Collective check that the pieces of all ranks fit together (default: by construction).

        Raises
        ------
        DistributionError
            On every rank.
        """

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Distribution) and self.to_json() == other.to_json()

    def __hash__(self) -> int:
        return hash(repr(self.to_json()))

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.to_json().items() if k != "kind")
        return f"{type(self).__name__}({args})"


class _Grid(Distribution):
    """Common part of distributions over a process grid."""

    def __init__(self, grid: Sequence[int] | None = None) -> None:
        self.grid = None if grid is None else check.int_list(grid, "process grid", minimum=1, maximum=2**31 - 1)

    def _grid_for(self, shape: Sequence[int], nprocs: int) -> tuple[int, ...]:
        grid = self.grid if self.grid is not None else default_grid(nprocs, len(shape))
        if len(grid) != len(shape):
            raise DistributionError(
                f"process grid {grid} has {len(grid)} dimensions but the array shape {tuple(shape)} has {len(shape)}"
            )
        if any(g < 1 for g in grid):
            raise DistributionError(f"process grid {grid} must have entries >= 1 (1 leaves a dimension unsplit)")
        if int(np.prod(grid)) != nprocs:
            raise DistributionError(
                f"process grid {grid} has {int(np.prod(grid))} cells but the communicator has {nprocs} ranks; "
                "make the product of the grid equal the number of ranks"
            )
        return grid


class Block(_Grid):
    """Block distribution in every dimension over a process grid.

    Parameters
    ----------
    grid : sequence of int, optional
        Ranks along each dimension (product = number of ranks). ``1`` leaves a
        dimension unsplit. Default: a balanced grid from ``MPI_Dims_create``.
    ghosts : int or sequence, optional
        Ghost layer width: one int for all sides, one per dimension, or ``(lo, hi)``
        pairs per dimension.

    Notes
    -----
    Block sizes are balanced: with ``n`` elements over ``p`` ranks the first
    ``n % p`` ranks get one more element. Ranks may own nothing when ``p > n``.
    """

    kind = "block"

    def __init__(self, grid: Sequence[int] | None = None, ghosts: Any = 0) -> None:
        super().__init__(grid)
        self.ghosts = _check_ghosts(ghosts)

    def piece(self, shape: Sequence[int], nprocs: int, rank: int) -> Piece:
        shape = tuple(int(s) for s in shape)
        grid = self._grid_for(shape, nprocs)
        coords = _coords(rank, grid)
        starts, counts = [], []
        for n, p, c in zip(shape, grid, coords):
            base, extra = divmod(n, p)
            starts.append(c * base + min(c, extra))
            counts.append(base + (1 if c < extra else 0))
        return Piece(
            shape=shape,
            counts=tuple(counts),
            ghosts=_norm_ghosts(self.ghosts, len(shape), shape),
            indices=tuple(np.arange(s, s + c, dtype=np.int64) for s, c in zip(starts, counts)),
            kind="subarray",
            starts=tuple(starts),
        )

    def to_json(self):
        return {"kind": self.kind, "grid": None if self.grid is None else list(self.grid), "ghosts": _ghosts_json(self.ghosts)}


class BlockCyclic(_Grid):
    """Block-cyclic distribution (ScaLAPACK / HPF ``CYCLIC(b)``) over a process grid.

    Parameters
    ----------
    grid : sequence of int, optional
        Ranks along each dimension, as for :class:`Block`.
    blocks : int or sequence of int
        Block size in each dimension (one int for all).
    ghosts : int or sequence, optional
        Ghost layers of the local array, as for :class:`Block`: the interior holds this
        rank's elements (its blocks, in global order), the layers around it are left to
        the application (reads leave them untouched, writes ignore them).
    """

    kind = "block_cyclic"

    def __init__(self, grid: Sequence[int] | None = None, blocks: int | Sequence[int] = 1, ghosts: Any = 0) -> None:
        super().__init__(grid)
        self.ghosts = _check_ghosts(ghosts)
        if isinstance(blocks, (int, np.integer)) and not isinstance(blocks, (bool, np.bool_)):
            self.blocks: int | tuple[int, ...] = check.integer(blocks, "block size", minimum=1, maximum=2**31 - 1)
        else:
            self.blocks = check.int_list(blocks, "block sizes", minimum=1, maximum=2**31 - 1)

    def _blocks_for(self, ndim: int) -> tuple[int, ...]:
        b = self.blocks
        out = (int(b),) * ndim if isinstance(b, (int, np.integer)) else tuple(int(x) for x in b)
        if len(out) != ndim or any(x < 1 for x in out):
            raise DistributionError(f"block sizes {b!r} must be {ndim} integers >= 1")
        return out

    def piece(self, shape: Sequence[int], nprocs: int, rank: int) -> Piece:
        from mpi4py import MPI

        shape = tuple(int(s) for s in shape)
        grid = self._grid_for(shape, nprocs)
        blocks = self._blocks_for(len(shape))
        coords = _coords(rank, grid)
        indices = []
        for n, p, b, c in zip(shape, grid, blocks, coords):
            g = np.arange(n, dtype=np.int64)
            indices.append(g[(g // b) % p == c])
        distribs = [MPI.DISTRIBUTE_CYCLIC] * len(shape)
        return Piece(
            shape=shape,
            counts=tuple(len(i) for i in indices),
            ghosts=_norm_ghosts(self.ghosts, len(shape), shape),
            indices=tuple(indices),
            kind="cyclic",
            darray=(distribs, list(blocks), list(grid), rank),
        )

    def to_json(self):
        b = self.blocks
        return {
            "kind": self.kind,
            "grid": None if self.grid is None else list(self.grid),
            "blocks": int(b) if isinstance(b, (int, np.integer)) else [int(x) for x in b],
            "ghosts": _ghosts_json(self.ghosts),
        }


class Cyclic(BlockCyclic):
    """Cyclic (round-robin, block size 1) distribution over a process grid (*ghosts* as for :class:`BlockCyclic`)."""

    kind = "cyclic"

    def __init__(self, grid: Sequence[int] | None = None, ghosts: Any = 0) -> None:
        super().__init__(grid, 1, ghosts)

    def to_json(self):
        return {"kind": self.kind, "grid": None if self.grid is None else list(self.grid),
                "ghosts": _ghosts_json(self.ghosts)}


class Subarray(Distribution):
    """An explicit box per rank: each rank gives its own ``start`` and ``count``.

    The pieces of all ranks must tile the global array exactly: SDM checks this
    collectively when the view is set and raises :class:`~sdm.errors.DistributionError`
    on every rank for a gap or an overlap.

    Parameters
    ----------
    start, count : sequence of int
        This rank's box in global coordinates (``count`` entries may be 0).
    ghosts : int or sequence, optional
        Ghost layers around the box in the local array, as for :class:`Block`.
    """

    kind = "subarray"

    def __init__(self, start: Sequence[int], count: Sequence[int], ghosts: Any = 0) -> None:
        self.start = check.int_list(start, "subarray start")
        self.count = check.int_list(count, "subarray count")
        self.ghosts = _check_ghosts(ghosts)
        if len(self.start) != len(self.count):
            raise DistributionError(f"start {self.start} and count {self.count} differ in length")

    @property
    def needs_coverage_check(self) -> bool:
        return True

    def check(self, shape: Sequence[int], piece: Piece, comm: Any) -> None:
        """Gather the boxes of all ranks and check they tile the array."""
        check_tiling(shape, comm.allgather((piece.starts, piece.counts)))

    def piece(self, shape, nprocs, rank):
        shape = tuple(int(s) for s in shape)
        if len(shape) != len(self.start):
            raise DistributionError(
                f"subarray start {self.start} has {len(self.start)} dimensions; the array shape {shape} has {len(shape)}"
            )
        for d, (s, c, n) in enumerate(zip(self.start, self.count, shape)):
            if c < 0 or s < 0 or s + c > n:
                raise DistributionError(
                    f"subarray start {self.start} count {self.count} leaves the global shape {shape} in dimension {d}"
                )
        return Piece(
            shape=shape,
            counts=self.count,
            ghosts=_norm_ghosts(self.ghosts, len(shape), shape),
            indices=tuple(np.arange(s, s + c, dtype=np.int64) for s, c in zip(self.start, self.count)),
            kind="subarray",
            starts=self.start,
        )

    def agreement(self) -> dict[str, Any]:
        return {"kind": self.kind}  # each rank has its own box, checked for tiling afterwards

    def to_json(self):
        # Each rank has its own box; the stored access pattern names the kind only.
        return {"kind": self.kind, "ghosts": _ghosts_json(self.ghosts)}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Subarray) and (self.start, self.count, self.ghosts) == (
            other.start,
            other.count,
            other.ghosts,
        )

    __hash__ = Distribution.__hash__

    def __repr__(self) -> str:
        return f"Subarray(start={self.start}, count={self.count}, ghosts={self.ghosts!r})"


def check_tiling(shape: Sequence[int], boxes: Sequence[tuple[Sequence[int], Sequence[int]]]) -> None:
    """Check that the boxes ``(start, count)`` of all ranks tile *shape* exactly.

    Raises
    ------
    DistributionError
        Naming the first overlapping pair of ranks, or the number of uncovered elements.
    """
    starts = np.array([b[0] for b in boxes], dtype=np.int64).reshape(len(boxes), -1)
    counts = np.array([b[1] for b in boxes], dtype=np.int64).reshape(len(boxes), -1)
    ends = starts + counts
    nonempty = np.all(counts > 0, axis=1)
    idx = np.flatnonzero(nonempty)
    s, e = starts[idx], ends[idx]
    # pairwise overlap of boxes: overlap in every dimension
    over = np.all((s[:, None, :] < e[None, :, :]) & (s[None, :, :] < e[:, None, :]), axis=2)
    np.fill_diagonal(over, False)
    if over.any():
        a, b = (int(idx[k]) for k in np.argwhere(over)[0])
        box = lambda r: f"start {tuple(starts[r].tolist())} count {tuple(counts[r].tolist())}"  # noqa: E731
        raise DistributionError(
            f"the pieces of ranks {a} and {b} overlap ({box(a)} and {box(b)}); every element must have one owner"
        )
    total = int(np.prod(shape, dtype=np.int64))
    covered = int(np.prod(counts[idx], axis=1).sum()) if len(idx) else 0
    if covered != total:
        raise DistributionError(
            f"the pieces of all ranks cover {covered} of the {total} elements of shape {tuple(shape)}; "
            f"{total - covered} elements have no owner"
        )


_KINDS = {"block": Block, "cyclic": Cyclic, "block_cyclic": BlockCyclic}


def distribution_from_json(data: dict[str, Any]) -> Distribution:
    """Rebuild a grid distribution from :meth:`Distribution.to_json` output.

    Raises
    ------
    DistributionError
        For ``subarray`` (per-rank boxes are not stored) and unknown kinds.
    """
    kind = data.get("kind")
    args = {k: v for k, v in data.items() if k != "kind"}
    if kind in _KINDS:
        return _KINDS[kind](**args)
    raise DistributionError(f"a {kind!r} view cannot be rebuilt from the catalog; give a data view explicitly")
