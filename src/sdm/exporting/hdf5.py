"""HDF5 through h5py: :class:`HDF5Sink` writes an export, :class:`HDF5Source` reads a file to import.

Every dimension is an h5py dimension scale: ``step`` holds the step numbers, the others
``0..n-1``; arrays are chunked one step per chunk (gzip level 4 with compression).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from .base import STEP, SourceArray, SteppedSink, step_numbers

__all__ = ["HDF5Sink", "HDF5Source"]


class HDF5Sink(SteppedSink):
    """An HDF5 file being written (see :class:`sdm.exporting.Sink`)."""

    def __init__(self, path: Path, compression: bool) -> None:
        self.file = h5py.File(path, "w", libver="earliest")
        self.root: Any = self.file
        self.compression = compression

    def group(self, parent: Any, name: str) -> Any:
        """A new HDF5 group."""
        return parent.create_group(name)

    def dimension(self, group: Any, name: str, size: int, values: np.ndarray | None) -> None:
        """A dimension scale *name*: *values*, or ``0..size-1``."""
        data = values if values is not None else np.arange(size, dtype=np.int64)
        group.create_dataset(name, data=data).make_scale(name)

    def array(self, group: Any, name: str, dtype: np.dtype, shape: tuple[int, ...], dims: tuple[str, ...],
              fill: Any) -> Any:
        """A dataset with its dimension scales attached (chunks of one step when stepped)."""
        stepped = bool(dims) and dims[0] == STEP
        whole = all(shape)  # no empty dimension: chunks and filters are possible
        chunks: Any = (1, *shape[1:]) if stepped and whole and len(shape) > 1 else (True if self.compression and whole
                                                                                    else None)
        ds = group.create_dataset(name, shape=shape, dtype=dtype, chunks=chunks,
                                  compression="gzip" if self.compression and whole else None,
                                  fillvalue=fill if dtype.kind in "fc" else None)  # 0 is h5py's own
        for axis, dim in enumerate(dims):
            ds.dims[axis].attach_scale(group[dim])
            ds.dims[axis].label = dim
        return ds

    def attrs(self, obj: Any, attrs: dict[str, Any]) -> None:
        """HDF5 attributes."""
        for key, value in attrs.items():
            obj.attrs[key] = value


    def close(self) -> None:
        """Close the file."""
        self.file.close()


def _attrs(obj: Any) -> dict[str, Any]:
    return {k: obj.attrs[k] for k in obj.attrs}


def _scale_name(ds: Any, axis: int) -> str | None:
    """The name of the first scale attached to *axis* of *ds* (None: none)."""
    if ds.ndim <= axis or len(ds.dims[axis]) == 0:
        return None
    return str(ds.dims[axis][0].name).rsplit("/", 1)[-1]


class HDF5Source:
    """An HDF5 file being imported (see :class:`sdm.exporting.Source`)."""

    def __init__(self, path: Path) -> None:
        self.file = h5py.File(path, "r")

    def attrs(self) -> dict[str, Any]:
        """The root group's attributes."""
        return _attrs(self.file)

    def _arrays(self, group: Any) -> tuple[list[SourceArray], list[str]]:
        arrays: list[SourceArray] = []
        subs: list[str] = []
        for name, obj in group.items():
            if isinstance(obj, h5py.Group):
                subs.append(name)
                continue
            if h5py.h5ds.is_scale(obj.id):
                continue
            steps = None
            if _scale_name(obj, 0) == STEP:
                steps = step_numbers(obj.dims[0][0][()], obj.shape[0], f"{self.file.filename}: array {obj.name!r}")

            def read(index: int | None, ds: Any = obj) -> np.ndarray:
                return np.asarray(ds[()] if index is None else ds[index])

            arrays.append(SourceArray(name, obj.dtype, tuple(obj.shape[1:] if steps is not None else obj.shape),
                                      steps, _attrs(obj), read))
        return arrays, subs

    def groups(self) -> Iterator[tuple[str | None, dict[str, Any], list[SourceArray], list[str]]]:
        """The root's arrays (group None), then each top-level group."""
        arrays, subs = self._arrays(self.file)
        yield None, _attrs(self.file), arrays, []
        for name in subs:
            inner, nested = self._arrays(self.file[name])
            yield name, _attrs(self.file[name]), inner, nested

    def close(self) -> None:
        """Close the file."""
        self.file.close()
