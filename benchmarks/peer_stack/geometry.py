"""The patterns of ``benchmarks/peers.py``: sizes, decompositions and values, in numpy.

Shared by the serial driver, the Python contenders (``peer_python.py``) and the tests;
``peers_common.h`` implements the same rules for the C drivers of PnetCDF and ADIOS2.

* Every value is exact in float64: ``value(s, v, i) = ((s * 1024 + v) << 32) + i`` for
  step ``s``, variable ``v`` and global linear (C order) index ``i``.
* ``a``: ``vars`` arrays ``n**3``, 3-D blocks over ``MPI_Dims_create(P, 3)``;
  ``b``: one ``rows x cols`` array, block-cyclic with ``br x bc`` blocks (ScaLAPACK layout);
  ``c``: one ``rows x width`` array written through a map (random chunks of 1-32 rows
  dealt to the ranks, each rank's chunks in random order); ``d``: ``count`` 1-D arrays of
  ``length`` values, blocks; ``box``: one process reads a sub-box of ``a0`` at the last
  step; ``f``: ``count`` runs or files with attributes ``case``, ``reynolds``, ``mesh``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["value", "values_at", "block_bounds", "dims", "cyclic_rows", "make_map", "map_path",
           "scan_attributes", "scan_expected", "Pattern", "PATTERNS", "SCAN_CONDITION"]

#: the query of pattern f (``Catalog.find(attributes=...)``); the file scans apply the same test
SCAN_CONDITION = {"mesh": "fine", "reynolds": (">", 800.0)}


def value(step: int, var: int) -> float:
    """The constant part of every value of variable *var* at *step*."""
    return float((step * 1024 + var) << 32)


def values_at(step: int, var: int, flat_index: np.ndarray) -> np.ndarray:
    """``value(step, var) + flat_index`` as float64 (exact below 2**53)."""
    return value(step, var) + np.asarray(flat_index, dtype=np.float64)


def dims(nprocs: int, ndim: int) -> tuple[int, ...]:
    """``MPI_Dims_create(nprocs, ndim)``."""
    from mpi4py import MPI

    return tuple(MPI.Compute_dims(nprocs, [0] * ndim))


def block_bounds(n: int, parts: int, coord: int) -> tuple[int, int]:
    """``[lo, hi)`` of block *coord* of *parts* along an axis of *n*: the first ``n % parts`` blocks one longer
    (as :class:`sdm.Block` splits)."""
    base, extra = divmod(n, parts)
    lo = coord * base + min(coord, extra)
    return lo, lo + base + (1 if coord < extra else 0)


def cyclic_rows(n: int, block: int, parts: int, coord: int) -> np.ndarray:
    """Global indices held by process coordinate *coord* of a block-cyclic axis, in local order."""
    if n % (block * parts):
        raise ValueError(f"{n} is not a multiple of block {block} x {parts} processes")
    starts = np.arange(coord * block, n, block * parts)
    return (starts[:, None] + np.arange(block)).ravel()


def make_map(rows: int, nprocs: int, seed: int = 22) -> list[np.ndarray]:
    """Pattern c's map: each rank's global rows in local order (chunks of 1-32 rows, dealt at random)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 33, size=rows // 8 + 32)
    starts = np.concatenate([[0], np.cumsum(lengths)])
    count = int(np.searchsorted(starts, rows))
    starts = starts[:count + 1].copy()
    starts[-1] = rows
    owner = rng.integers(0, nprocs, size=count)
    out = []
    for r in range(nprocs):
        mine = rng.permutation(np.flatnonzero(owner == r))
        chunks = [np.arange(starts[k], starts[k + 1], dtype=np.int64) for k in mine]
        out.append(np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int64))
    return out


def map_path(prefix: str | Path, nprocs: int, rank: int) -> Path:
    """Where rank *rank* of *nprocs* finds its part of the map (raw little-endian int64)."""
    return Path(f"{prefix}.{nprocs}.{rank}")


def scan_attributes(i: int) -> dict[str, Any]:
    """The attributes of run or file *i* of pattern f."""
    return {"case": i, "reynolds": 100.0 + (i * 37 % 1000), "mesh": "fine" if i % 3 == 0 else "coarse"}


def scan_expected(count: int) -> int:
    """How many of *count* runs match :data:`SCAN_CONDITION`."""
    return sum(1 for i in range(count) if (a := scan_attributes(i))["mesh"] == "fine" and a["reynolds"] > 800)


@dataclass(frozen=True)
class Pattern:
    """One pattern: its key, what it is, its parameters at full and at quick size."""

    key: str
    title: str
    full: dict[str, int]
    quick: dict[str, int]

    def nbytes(self, params: dict[str, int]) -> int:
        """Payload bytes of one write of the pattern (every step, every variable)."""
        p = params
        if self.key == "a":
            return 8 * p["n"] ** 3 * p["vars"] * p["steps"]
        if self.key == "b":
            return 8 * p["rows"] * p["cols"] * p["steps"]
        if self.key == "c":
            return 8 * p["rows"] * p["width"] * p["steps"]
        if self.key == "d":
            return 8 * p["count"] * p["length"] * p["steps"]
        return 0


PATTERNS = {
    "a": Pattern("a", "ASTRO3D-like 3-D blocks, several arrays per step",
                 {"n": 192, "vars": 4, "steps": 2}, {"n": 32, "vars": 2, "steps": 2}),
    "b": Pattern("b", "2-D block-cyclic, 8 KiB runs",
                 {"rows": 2048, "cols": 8192, "br": 16, "bc": 1024, "steps": 2},
                 {"rows": 128, "cols": 4096, "br": 16, "bc": 1024, "steps": 2}),
    "c": Pattern("c", "irregular map array (chunks of 1-32 rows of 64 B)",
                 {"rows": 1 << 20, "width": 8, "steps": 2}, {"rows": 5000, "width": 8, "steps": 2}),
    "d": Pattern("d", "many small datasets per step (4 KiB each)",
                 {"count": 256, "length": 512, "steps": 4}, {"count": 16, "length": 512, "steps": 2}),
    "f": Pattern("f", "finding data: runs matching a condition", {"count": 1000}, {"count": 30}),
}
