"""HDF5 through h5py: :class:`HDF5Sink` writes an export, :class:`HDF5Source` reads a file to import.

Every dimension is an h5py dimension scale: ``step`` holds the step numbers, the others
``0..n-1``; arrays are chunked one step per chunk (gzip level 4 with ``compression=True``),
a compressed dataset's in chunks of one step cut to at most :data:`~sdm.exporting.base.INNER_BYTES`
along its first dimension, through hdf5plugin's filters (:func:`sdm.exporting.codecs.hdf5_filter`;
a reader needs ``import hdf5plugin``, or ``HDF5_PLUGIN_PATH`` set to its plugins).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from .base import STEP, SourceArray, SteppedSink, inner_chunks, step_numbers
from .codecs import Applied, Choice, hdf5_filter, spec_of_attrs, spec_of_hdf5

__all__ = ["HDF5Sink", "HDF5Source"]


class HDF5Sink(SteppedSink):
    """An HDF5 file being written (see :class:`sdm.exporting.Sink`)."""

    def __init__(self, path: Path, measure: bool = False) -> None:
        # measure: a lossy filter's error is measured by reading steps back, so no chunk cache may hand back
        # what was written instead of what the filter stored
        self.file = h5py.File(path, "w", libver="earliest", **({"rdcc_nbytes": 0} if measure else {}))
        self.root: Any = self.file

    def group(self, parent: Any, name: str) -> Any:
        """A new HDF5 group."""
        return parent.create_group(name)

    def dimension(self, group: Any, name: str, size: int, values: np.ndarray | None) -> None:
        """A dimension scale *name*: *values*, or ``0..size-1``."""
        data = values if values is not None else np.arange(size, dtype=np.int64)
        group.create_dataset(name, data=data).make_scale(name)

    def array(self, group: Any, name: str, dtype: np.dtype, shape: tuple[int, ...], dims: tuple[str, ...],
              fill: Any, choice: Choice) -> tuple[Any, Applied]:
        """A dataset with its dimension scales attached (chunks of one step when stepped), filtered as *choice* asks."""
        stepped = bool(dims) and dims[0] == STEP
        whole = all(shape)  # no empty dimension: chunks and filters are possible
        own = choice.spec is not None  # a codec of SDM's: chunks of at most INNER_BYTES
        if stepped and whole and len(shape) > 1:
            chunks: Any = (1, *(inner_chunks(shape[1:], dtype.itemsize) if own else shape[1:]))
        elif whole and (own or choice.default):
            chunks = inner_chunks(shape, dtype.itemsize) if own and shape else True
        else:
            chunks = None
        applied = hdf5_filter(choice, dtype, chunks if isinstance(chunks, tuple) else shape) if whole else Applied()
        ds = group.create_dataset(name, shape=shape, dtype=dtype, chunks=chunks, **applied.kwargs,
                                  fillvalue=fill if dtype.kind in "fc" else None)  # 0 is h5py's own
        for axis, dim in enumerate(dims):
            ds.dims[axis].attach_scale(group[dim])
            ds.dims[axis].label = dim
        return ds, applied

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

            attrs = _attrs(obj)
            spec = spec_of_attrs(attrs) if "sdm_export_compression" in attrs or "sdm_compression" in attrs else \
                spec_of_hdf5(dict(obj._filters))
            arrays.append(SourceArray(name, obj.dtype, tuple(obj.shape[1:] if steps is not None else obj.shape),
                                      steps, attrs, read, spec))
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
