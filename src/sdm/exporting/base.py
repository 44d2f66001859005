"""What every format's writer and reader shares: the step dimension, the sink and source interfaces."""

from __future__ import annotations

import math
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ..errors import IntegrityError, InvalidArgumentError, StorageError

if TYPE_CHECKING:
    from ..codecs import CompressionSpec
    from .codecs import Applied, Choice

__all__ = ["STEP", "INNER_BYTES", "Progress", "SteppedSink", "Sink", "SourceArray", "Source", "inner_chunks",
           "step_numbers", "beside", "remove_path"]

#: The name of the step dimension and of its coordinate.
STEP = "step"
#: The largest chunk (Zarr: inner chunk of a shard; HDF5, NetCDF: chunk of a compressed array), in bytes
#: (unless one row of a step is larger).
INNER_BYTES = 1 << 20


def inner_chunks(shape: tuple[int, ...], itemsize: int, limit: int = INNER_BYTES) -> tuple[int, ...]:
    """Chunks of one step of *shape*: its first dimension cut to a divisor of it, at most *limit* bytes per
    chunk when a row allows."""
    if not shape or not all(shape):
        return tuple(max(n, 1) for n in shape)
    row = math.prod(shape[1:]) * itemsize
    fit = max(1, limit // max(row, 1))
    first = max(d for d in range(1, min(fit, shape[0]) + 1) if shape[0] % d == 0)
    return (first, *shape[1:])

Progress = Callable[[int, int], None]


def remove_path(path: Path) -> None:
    """Remove a file, a link or a directory tree, if there."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists() or path.is_symlink():
        path.unlink(missing_ok=True)


@contextmanager
def beside(out: Path, overwrite: bool) -> Iterator[Path]:
    """A temporary path beside *out*, renamed to *out* when the block ends well, removed otherwise."""
    if out.exists() and not overwrite:
        raise InvalidArgumentError(f"{out} already exists; pass --overwrite (overwrite=True) to replace it")
    if not out.parent.is_dir():
        raise StorageError(f"cannot write {out}: directory {out.parent} does not exist")
    tmp = out.with_name(f".{out.name}.partial-{os.getpid()}")
    remove_path(tmp)
    try:
        yield tmp
        if out.exists():
            remove_path(out)
        os.replace(tmp, out)
    finally:
        remove_path(tmp)



class SteppedSink:
    """What every format's writer shares: the file's root, writing a step and reading it back.

    Subclasses open their file and set :attr:`root`.
    """

    root: Any

    def put(self, array: Any, index: int | None, data: np.ndarray) -> None:
        """Write one step of *array* (its leading index), or the whole array when *index* is None."""
        if index is None:
            array[...] = data
        else:
            array[index] = data

    def get(self, array: Any, index: int | None) -> np.ndarray:
        """Read back step *index* of *array* (the whole array when None), decoded from the file."""
        return np.asarray(array[...] if index is None else array[index])


class Sink(Protocol):
    """A file being written (one per format): groups, dimensions, arrays and attributes."""

    root: Any

    def group(self, parent: Any, name: str) -> Any:
        """A new group *name* in *parent*."""

    def dimension(self, group: Any, name: str, size: int, values: np.ndarray | None) -> None:
        """Declare dimension *name* of *size* in *group*; *values*: its coordinate (the steps), if any."""

    def array(self, group: Any, name: str, dtype: np.dtype, shape: tuple[int, ...], dims: tuple[str, ...],
              fill: Any, choice: Choice) -> tuple[Any, Applied]:
        """A new array (first dimension ``step`` when *dims* start with it), compressed as *choice* asks,
        and what the format gave it (:mod:`sdm.exporting.codecs`)."""

    def attrs(self, obj: Any, attrs: dict[str, Any]) -> None:
        """Set attributes on a group or an array."""

    def put(self, array: Any, index: int | None, data: np.ndarray) -> None:
        """Write step *index* of *array* (``None``: the whole array)."""

    def get(self, array: Any, index: int | None) -> np.ndarray:
        """Read step *index* of *array* back from the file (``None``: the whole array)."""

    def close(self) -> None:
        """Finish the file."""


@dataclass
class SourceArray:
    """One array of a file to import."""

    name: str
    dtype: np.dtype
    shape: tuple[int, ...]  #: one step's shape
    steps: list[int] | None  #: step numbers along the first dimension; None: no step dimension
    attrs: dict[str, Any]
    read: Callable[[int | None], np.ndarray]  #: step index (None: the whole array) -> values
    #: the SDM spec nearest to the array's codec in the file (:mod:`sdm.exporting.codecs`); None: none maps
    compression: CompressionSpec | None = None


class Source(Protocol):
    """A file being imported (one per format)."""

    def groups(self) -> Iterator[tuple[str | None, dict[str, Any], list[SourceArray], list[str]]]:
        """``(name or None for the root, attributes, arrays, names of sub-groups)`` per group."""

    def attrs(self) -> dict[str, Any]:
        """The root's attributes."""

    def close(self) -> None:
        """Close the file."""


# ------------------------------------------------------------------ arguments


def step_numbers(values: Any, length: int, where: str) -> list[int]:
    """The step numbers a file gives along an array's first dimension (its ``step`` coordinate), checked.

    Parameters
    ----------
    values : array_like
        The coordinate's values as the file holds them.
    length : int
        The array's first dimension.
    where : str
        The file and array, for the message.

    Raises
    ------
    IntegrityError
        Not *length* distinct integers in ``0 .. 2**63 - 1`` (whole numbers stored as
        floating point are taken as the integers they are).
    """
    arr = np.asarray(values)
    ok = arr.ndim == 1 and arr.size == length and arr.dtype.kind in "iuf"
    if ok and arr.dtype.kind == "f":
        ok = bool(np.isfinite(arr).all() and (arr == np.floor(arr)).all())
    steps = [int(x) for x in arr] if ok else []
    if not ok or any(not 0 <= x <= 2**63 - 1 for x in steps) or len(set(steps)) != len(steps):
        shown = repr(arr.tolist() if arr.size <= 8 else f"{arr.size} values of {arr.dtype}")[:80]
        raise IntegrityError(f"{where}: its {STEP!r} coordinate must hold {length} distinct integers >= 0 (one per "
                             f"index of the first dimension), not {shown}; the file was not written as SDM exports")
    return steps
