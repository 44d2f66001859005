"""Subfiles: one logical dataset step stored as K extents in K files (file-per-process speed).

A group made with ``subfiles=K`` (levels 2 and 3) cuts each dataset step's canonical
byte stream (global C order, or Fortran order when the dataset says so) into K
contiguous *extents* along the slowest dimension, split as :class:`sdm.Block` splits
rows (the first ``rows % K`` extents one row longer; never more extents than rows), and
stores extent ``k`` in subfile ``k`` of the group's file: ``group.sub00003.sdm`` next to
``group.sdm`` (the same rule at level 2 and with ``steps_per_file``). Each subfile
still holds raw bytes in canonical order: extent ``k`` of a step is the numpy slab
``array[rows_k]`` (C order) at the offset the catalog records, so ``numpy.memmap`` and
the catalog read it back without SDM.

Space in a subfile is reserved through the catalog as in any appended file (its
high-water mark raised in one transaction), each extent starting at the first multiple
of the alignment (``sdm_subfile_align``, default 4096 bytes: set it to the stripe size of
a parallel file system) past the mark, so every extent starts on a block boundary.

Extent ``k`` is written and read whole by rank ``k % P`` (its *owner*) with plain
POSIX calls on its own subfile, so no two ranks share a file: with a block
distribution along the slowest dimension and K equal to the number of ranks every
rank's piece is its own extent and goes straight from its array to its subfile
(``pwrite``, and one ``fsync`` per subfile and dump, as file-per-process output does); otherwise the ranks first
move the bytes to the owners with the ``servers`` method's exchange
(:mod:`sdm.io.servers`: shared memory on one node, ``Alltoallv`` across nodes).
The owner computes the extent's ``xxh3-64`` checksum from its contiguous buffer
(:func:`sdm.integrity.xxh3`); the step's row carries ``xxh3-64-extents``. Extents are written
and read through the storage seam (:meth:`Backend.write <sdm.storage.backends.base.Backend.write>`,
``read_into``; :mod:`sdm.io.subfiles`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..errors import InvalidArgumentError
from .failures import storage_error

__all__ = ["ALIGN", "Extent", "check_subfiles", "cut", "subfile_path"]

ALIGN = 4096  #: default alignment of extents in their subfiles (hint ``sdm_subfile_align``)
AUTO = 0  #: ``subfiles="auto"`` as the catalog stores it


@dataclass(frozen=True)
class Extent:
    """Rows ``rows[0] .. rows[1]`` (slowest dimension) of a step: bytes ``start .. start + nbytes`` of its stream."""

    rows: tuple[int, int]
    start: int
    nbytes: int


def check_subfiles(subfiles: object, level: int, archive: bool) -> int | None:
    """``make_group(subfiles=...)`` as the catalog stores it: K, 0 for ``"auto"``, None for one file.

    Raises
    ------
    InvalidArgumentError
        Not a positive integer, ``"auto"`` or None; given at level 1 or on the archive tier.
    """
    if subfiles is None:
        return None
    if subfiles == "auto":
        value = AUTO
    elif isinstance(subfiles, (bool, np.bool_)) or not isinstance(subfiles, (int, np.integer)) or int(subfiles) < 1:
        raise InvalidArgumentError(f"subfiles must be a positive integer, 'auto' or None, got {subfiles!r}")
    else:
        value = int(subfiles)
    if level == 1:
        raise InvalidArgumentError("subfiles apply to levels 2 and 3 (extents appended to subfiles); level 1 writes "
                                   "a file per dataset and step")
    if archive:
        raise InvalidArgumentError("subfiles apply to the fast tier; the archive tier writes one object per dataset "
                                   "and step (subfiled groups migrate to it as files)")
    return value


def subfile_path(rel: str | Path, k: int) -> str:
    """Subfile *k* of the data file *rel*: ``group.sdm`` -> ``group.sub0000k.sdm``."""
    p = Path(rel)
    return str(p.with_name(f"{p.stem}.sub{int(k):05d}{p.suffix}"))


def cut(shape: Sequence[int], itemsize: int, order: str, k: int) -> list[Extent]:
    """The extents of a step of *shape* cut into *k* (at most one per row of the slowest dimension).

    A 0-d dataset is one row; an empty one has no extents.
    """
    shape = tuple(int(n) for n in shape)
    slow = (0 if order == "C" else len(shape) - 1) if shape else None
    rows = shape[slow] if slow is not None else 1
    total = int(np.prod(shape, dtype=np.int64)) * int(itemsize)
    if rows == 0 or total == 0:
        return []
    per_row = total // rows
    k = max(1, min(int(k), rows))
    base, extra = divmod(rows, k)
    out, a = [], 0
    for j in range(k):
        b = a + base + (1 if j < extra else 0)
        out.append(Extent((a, b), a * per_row, (b - a) * per_row))
        a = b
    return out
