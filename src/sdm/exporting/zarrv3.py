"""Zarr v3 through zarr-python: :class:`ZarrSink` writes an export, :class:`ZarrSource` reads a store to import.

An array of shape ``(steps, *shape)`` has chunks of one step along ``step`` and goes
through zarr's sharding codec with one shard per step: a step is encoded and stored
once, whole (a shard of several steps would be read back and rewritten at every step
added to it). Inside the shard the step is cut along its first dimension into inner
chunks of at most :data:`INNER_BYTES` (a divisor of that dimension), so a reader of a
few rows decodes only their chunks. ``dimension_names`` name the dimensions; the
``step`` array holds the step numbers.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from .base import INNER_BYTES, STEP, SourceArray, SteppedSink, inner_chunks, step_numbers
from .codecs import Applied, Choice, spec_of_attrs, spec_of_zarr, zarr_codecs

__all__ = ["INNER_BYTES", "ZarrSink", "ZarrSource", "inner_chunks"]


class ZarrSink(SteppedSink):
    """A Zarr v3 store being written (see :class:`sdm.exporting.Sink`)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.root: Any = zarr.open_group(store=str(path), mode="w", zarr_format=3)

    def group(self, parent: Any, name: str) -> Any:
        """A new Zarr group."""
        return parent.create_group(name)

    def dimension(self, group: Any, name: str, size: int, values: np.ndarray | None) -> None:
        """The ``step`` array (other dimensions exist only as ``dimension_names``)."""
        if values is not None:
            arr = group.create_array(name, shape=values.shape, dtype=values.dtype, dimension_names=(name,),
                                     compressors=None)
            arr[:] = values

    def array(self, group: Any, name: str, dtype: np.dtype, shape: tuple[int, ...], dims: tuple[str, ...],
              fill: Any, choice: Choice) -> tuple[Any, Applied]:
        """A sharded array, one shard per step (a whole array in one shard otherwise), its inner chunks
        encoded as *choice* asks."""
        stepped = bool(dims) and dims[0] == STEP
        if stepped:
            shards: tuple[int, ...] | None = (1, *(max(n, 1) for n in shape[1:]))
            chunks = (1, *inner_chunks(shape[1:], dtype.itemsize))
        else:
            shards = tuple(max(n, 1) for n in shape) if shape else None
            chunks = inner_chunks(shape, dtype.itemsize) if shape else ()
        applied = zarr_codecs(choice, dtype, tuple(chunks))
        with warnings.catch_warnings():  # numcodecs' codecs in zarr: "not part of the Zarr v3 specification"
            warnings.simplefilter("ignore", UserWarning)
            arr = group.create_array(name, shape=shape, dtype=dtype, chunks=chunks or "auto", shards=shards,
                                     fill_value=fill, dimension_names=dims, **applied.kwargs)
        return arr, applied

    def attrs(self, obj: Any, attrs: dict[str, Any]) -> None:
        """Attributes in the group's or array's ``zarr.json``."""
        obj.attrs.update(attrs)


    def close(self) -> None:
        """Consolidate the metadata (readers such as xarray then open the store with one read)."""
        if self.path.is_dir():
            with warnings.catch_warnings():  # "not part of the v3 specification": readers that know it use it
                warnings.simplefilter("ignore", UserWarning)
                zarr.consolidate_metadata(str(self.path))


class ZarrSource:
    """A Zarr v3 store being imported (see :class:`sdm.exporting.Source`)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.root = zarr.open_group(store=str(path), mode="r")

    def attrs(self) -> dict[str, Any]:
        """The root group's attributes."""
        return dict(self.root.attrs)

    def _arrays(self, group: Any) -> tuple[list[SourceArray], list[str]]:
        arrays: list[SourceArray] = []
        subs: list[str] = []
        for name, obj in group.members():
            if isinstance(obj, zarr.Group):
                subs.append(name)
                continue
            dims = tuple(getattr(obj.metadata, "dimension_names", None) or ())
            if dims == (name,):  # a coordinate
                continue
            steps = None
            if dims[:1] == (STEP,):
                steps = (step_numbers(group[STEP][:], obj.shape[0], f"{self.path}: array {obj.path!r}")
                         if STEP in group else list(range(obj.shape[0])))

            def read(index: int | None, a: Any = obj) -> np.ndarray:
                return np.asarray(a[...] if index is None else a[index])

            attrs = dict(obj.attrs)
            spec = spec_of_attrs(attrs) if "sdm_export_compression" in attrs or "sdm_compression" in attrs else \
                spec_of_zarr(getattr(obj.metadata, "codecs", ()))
            arrays.append(SourceArray(name, np.dtype(obj.dtype), tuple(obj.shape[1:] if steps is not None else obj.shape),
                                      steps, attrs, read, spec))
        return arrays, subs

    def groups(self) -> Iterator[tuple[str | None, dict[str, Any], list[SourceArray], list[str]]]:
        """The root's arrays (group None), then each top-level group."""
        arrays, subs = self._arrays(self.root)
        yield None, dict(self.root.attrs), arrays, []
        for name in subs:
            inner, nested = self._arrays(self.root[name])
            yield name, dict(self.root[name].attrs), inner, nested

    def close(self) -> None:
        """Nothing to close."""
