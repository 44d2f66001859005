"""MPI derived datatypes for a :class:`~sdm.layout.distribution.Piece`.

The *file type* places a rank's elements in the global array stored in canonical
order (C or Fortran); the *memory type* picks the interior of the local array, ghost
layers skipped, straight from the user's buffer (no copy) whatever its layout.
Both enumerate elements in the same order: the storage order of the dataset.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Sequence, cast

import numpy as np
from mpi4py import MPI
from mpi4py.util import dtlib

from .distribution import Piece

__all__ = ["element_type", "file_type", "memory_spec", "mpi_order", "freeing"]


def mpi_order(order: str) -> int:
    """``MPI.ORDER_C`` or ``MPI.ORDER_FORTRAN`` for ``"C"`` / ``"F"``."""
    return MPI.ORDER_FORTRAN if order == "F" else MPI.ORDER_C


def element_type(dtype: np.dtype) -> MPI.Datatype:
    """An MPI datatype for one array element (uncommitted; free it when done).

    Native numeric dtypes map to the matching MPI type when its size is the dtype's;
    everything else (strings, structured dtypes, non-native byte order) moves as
    ``itemsize`` opaque bytes, which is what canonical files want (mpi4py maps ``S3`` to
    one ``MPI.CHAR`` and ``U2`` to one 4-byte character, which would move too few bytes).
    """
    dtype = np.dtype(dtype)
    if dtype.isnative and dtype.fields is None and dtype.subdtype is None and dtype.kind in "biufc":
        try:
            t = dtlib.from_numpy_dtype(dtype)
            if t.Get_size() == dtype.itemsize and t.Get_extent() == (0, dtype.itemsize):
                return t.Dup()
        except (ValueError, KeyError, TypeError):
            pass
    return MPI.BYTE.Create_contiguous(dtype.itemsize)


def file_type(piece: Piece, etype: MPI.Datatype, order: str) -> MPI.Datatype:
    """The committed file type of *piece* (extent: the whole global array)."""
    if piece.size == 0:
        t = etype.Create_contiguous(0)
    elif piece.kind == "map":
        row = etype.Create_contiguous(int(np.prod(piece.shape[1:], dtype=np.int64)))
        rowbytes = row.Get_extent()[1]
        rows = row.Create_hindexed_block(1, cast(Sequence[int], piece.indices[0] * rowbytes))
        t = rows.Create_resized(0, piece.shape[0] * rowbytes)
        rows.Free()
        row.Free()
    elif piece.kind == "cyclic":
        distribs, dargs, psizes, rank = piece.darray  # type: ignore[misc]
        t = etype.Create_darray(int(np.prod(psizes)), rank, list(piece.shape), distribs, dargs, psizes, mpi_order(order))
    elif piece.kind == "box":
        t = _product_type(piece, etype, order)
    else:
        t = etype.Create_subarray(list(piece.shape), list(piece.counts), list(piece.starts), mpi_order(order))
    return t.Commit()


def _product_type(piece: Piece, etype: MPI.Datatype, order: str) -> MPI.Datatype:
    """The file type of a piece that is a product of index lists (a strided box): one indexed block per
    dimension, the fastest storage dimension innermost, each index at its byte offset in the global array;
    resized to the whole array.  Uncommitted."""
    itemsize = etype.Get_extent()[1]
    shape = list(piece.shape)
    strides = [itemsize] * len(shape)  # bytes between neighbours in each dimension, in storage order
    dims = list(range(len(shape)))[::-1] if order == "C" else list(range(len(shape)))
    for prev, d in zip(dims, dims[1:]):
        strides[d] = strides[prev] * shape[prev]
    t = etype
    made: list[MPI.Datatype] = []
    for d in dims:
        step = np.diff(piece.indices[d])
        if piece.indices[d].size > 1 and (step == step[0]).all():  # evenly spaced: one vector
            t = t.Create_hvector(int(piece.indices[d].size), 1, int(step[0]) * strides[d])
            t = _shifted(t, int(piece.indices[d][0]) * strides[d], made)
        else:
            t = t.Create_hindexed_block(1, [int(i) * strides[d] for i in piece.indices[d]])
        made.append(t)
    whole = t.Create_resized(0, int(np.prod(shape, dtype=np.int64)) * itemsize)
    for m in made:
        m.Free()
    return whole


def _shifted(t: MPI.Datatype, offset: int, made: list[MPI.Datatype]) -> MPI.Datatype:
    """*t* placed at byte *offset* (one hindexed block); *t* goes to *made* to be freed."""
    if offset == 0:
        return t
    made.append(t)
    return t.Create_hindexed_block(1, [offset])


def memory_spec(array: np.ndarray, piece: Piece, etype: MPI.Datatype, order: str) -> tuple[list, list[MPI.Datatype]]:
    """Return an mpi4py buffer spec ``[array, count, type]`` and the types to free.

    The interior of *array* is described with nested hvectors built from the array's
    own strides, traversed in storage order *order*, so a C-ordered local array can
    feed a Fortran-ordered dataset and ghost cells are skipped without a copy.
    *array* must be C- or Fortran-contiguous (C-contiguous for map pieces; checked by
    the caller).
    """
    if piece.size == 0:
        return [array, 0, etype], []
    if piece.kind == "map":  # rows of a C-contiguous local array, permuted to the sorted file order
        row = etype.Create_contiguous(int(np.prod(piece.shape[1:], dtype=np.int64)))
        t = row.Create_hindexed_block(1, cast(Sequence[int], cast(np.ndarray, piece.memory_rows) * array.strides[0])).Commit()
        return [array, 1, t], [row, t]
    contiguous = array.flags.c_contiguous if order == "C" else array.flags.f_contiguous
    if contiguous and not piece.has_ghosts:
        return [array, piece.size, etype], []
    dims = range(array.ndim - 1, -1, -1) if order == "C" else range(array.ndim)
    made: list[MPI.Datatype] = []
    t = etype
    for d in dims:
        t = t.Create_hvector(piece.counts[d], 1, array.strides[d])
        made.append(t)
    offset = sum(lo * s for (lo, _), s in zip(piece.ghosts, array.strides))
    t = t.Create_hindexed_block(1, [offset]).Commit()
    made.append(t)
    return [array, 1, t], made


@contextmanager
def freeing(types: list[MPI.Datatype]) -> Iterator[None]:
    """Free derived datatypes when the block ends."""
    try:
        yield
    finally:
        for t in types:
            if t != MPI.DATATYPE_NULL:
                t.Free()
