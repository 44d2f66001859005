"""NetCDF-4 through netCDF4: :class:`NetCDFSink` writes an export, :class:`NetCDFSource` reads a file to import.

CF-style: ``step`` is an unlimited dimension with a coordinate variable of the step
numbers (``long_name``, ``axis = "T"``); the other dimensions have no coordinate variable.
Floating-point variables carry ``_FillValue = NaN``; integer variables have no fill value
(a real 0 must not read as missing), a missing step of theirs is written as zeros.
A compressed dataset gets zstd or blosc where netCDF-C has them, zlib otherwise, and a
lossy one its values as SDM reads them, with zlib (:func:`sdm.exporting.codecs.netcdf_filter`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import netCDF4
import numpy as np

from .base import STEP, SourceArray, SteppedSink, inner_chunks, step_numbers
from .codecs import Applied, Choice, netcdf_filter, spec_of_attrs, spec_of_netcdf

__all__ = ["NetCDFSink", "NetCDFSource"]


class NetCDFSink(SteppedSink):
    """A NetCDF-4 file being written (see :class:`sdm.exporting.Sink`)."""

    def __init__(self, path: Path) -> None:
        self.file = netCDF4.Dataset(path, "w", format="NETCDF4")
        self.root: Any = self.file

    def group(self, parent: Any, name: str) -> Any:
        """A new NetCDF group."""
        return parent.createGroup(name)

    def dimension(self, group: Any, name: str, size: int, values: np.ndarray | None) -> None:
        """A dimension; the step dimension is unlimited and gets its coordinate variable."""
        if values is None:
            group.createDimension(name, size)
            return
        group.createDimension(name, None)
        var = group.createVariable(name, values.dtype, (name,))
        var.setncatts({"long_name": "time step", "axis": "T"})
        var[:] = values

    def array(self, group: Any, name: str, dtype: np.dtype, shape: tuple[int, ...], dims: tuple[str, ...],
              fill: Any, choice: Choice) -> tuple[Any, Applied]:
        """A variable chunked one step per chunk (a compressed dataset's cut to at most ``INNER_BYTES``)."""
        whole = all(shape) and len(shape) > 1 and dims[0] == STEP
        own = choice.spec is not None
        applied = netcdf_filter(choice, dtype) if all(shape) or choice.spec is None else Applied()
        kwargs = applied.kwargs or {"zlib": False, "complevel": 4}
        chunks = (1, *(inner_chunks(shape[1:], dtype.itemsize) if own else shape[1:])) if whole else None
        var = group.createVariable(name, dtype, dims, **kwargs, fill_value=fill if dtype.kind == "f" else False,
                                   chunksizes=chunks)
        var.set_auto_maskandscale(False)
        return var, applied

    def attrs(self, obj: Any, attrs: dict[str, Any]) -> None:
        """NetCDF attributes."""
        obj.setncatts(attrs)


    def close(self) -> None:
        """Close the file."""
        self.file.close()


def _attrs(obj: Any) -> dict[str, Any]:
    return {k: obj.getncattr(k) for k in obj.ncattrs()}


def _steps(group: Any, var: Any) -> list[int] | None:
    """The step coordinate of *var* seen from *group* (its own or an enclosing group's), checked."""
    where = f"{group.filepath()}: variable {var.name!r}"
    while group is not None:
        if STEP in group.variables:
            return step_numbers(np.asarray(group.variables[STEP][:]), var.shape[0], where)
        group = group.parent
    return None


class NetCDFSource:
    """A NetCDF file being imported (see :class:`sdm.exporting.Source`)."""

    def __init__(self, path: Path) -> None:
        self.file = netCDF4.Dataset(path, "r")
        self.file.set_auto_mask(False)

    def attrs(self) -> dict[str, Any]:
        """The root group's attributes."""
        return _attrs(self.file)

    def _arrays(self, group: Any) -> list[SourceArray]:
        arrays = []
        for name, var in group.variables.items():
            if var.dimensions == (name,):  # a coordinate variable
                continue
            steps = _steps(group, var) if var.dimensions[:1] == (STEP,) else None
            if var.dimensions[:1] == (STEP,) and steps is None:
                steps = list(range(var.shape[0]))

            def read(index: int | None, v: Any = var) -> np.ndarray:
                return np.asarray(v[...] if index is None else v[index])

            attrs = _attrs(var)
            spec = spec_of_attrs(attrs) if "sdm_export_compression" in attrs or "sdm_compression" in attrs else \
                spec_of_netcdf(var.filters() or {})
            arrays.append(SourceArray(name, np.dtype(var.dtype), tuple(var.shape[1:] if steps is not None else var.shape),
                                      steps, attrs, read, spec))
        return arrays

    def groups(self) -> Iterator[tuple[str | None, dict[str, Any], list[SourceArray], list[str]]]:
        """The root's variables (group None), then each top-level group."""
        yield None, _attrs(self.file), self._arrays(self.file), []
        for name, group in self.file.groups.items():
            yield name, _attrs(group), self._arrays(group), list(group.groups)

    def close(self) -> None:
        """Close the file."""
        self.file.close()
