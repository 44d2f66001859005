"""NetCDF-4 through netCDF4: :class:`NetCDFSink` writes an export, :class:`NetCDFSource` reads a file to import.

CF-style: ``step`` is an unlimited dimension with a coordinate variable of the step
numbers (``long_name``, ``axis = "T"``); the other dimensions have no coordinate variable.
Floating-point variables carry ``_FillValue = NaN``; integer variables have no fill value
(a real 0 must not read as missing), a missing step of theirs is written as zeros.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import netCDF4
import numpy as np

from .base import STEP, SourceArray, SteppedSink, step_numbers

__all__ = ["NetCDFSink", "NetCDFSource"]


class NetCDFSink(SteppedSink):
    """A NetCDF-4 file being written (see :class:`sdm.exporting.Sink`)."""

    def __init__(self, path: Path, compression: bool) -> None:
        self.file = netCDF4.Dataset(path, "w", format="NETCDF4")
        self.root: Any = self.file
        self.compression = compression

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
              fill: Any) -> Any:
        """A variable chunked one step per chunk."""
        whole = all(shape) and len(shape) > 1 and dims[0] == STEP
        var = group.createVariable(name, dtype, dims, zlib=self.compression, complevel=4,
                                   fill_value=fill if dtype.kind == "f" else False,
                                   chunksizes=(1, *shape[1:]) if whole else None)
        var.set_auto_maskandscale(False)
        return var

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

            arrays.append(SourceArray(name, np.dtype(var.dtype), tuple(var.shape[1:] if steps is not None else var.shape),
                                      steps, _attrs(var), read))
        return arrays

    def groups(self) -> Iterator[tuple[str | None, dict[str, Any], list[SourceArray], list[str]]]:
        """The root's variables (group None), then each top-level group."""
        yield None, _attrs(self.file), self._arrays(self.file), []
        for name, group in self.file.groups.items():
            yield name, _attrs(group), self._arrays(group), list(group.groups)

    def close(self) -> None:
        """Close the file."""
        self.file.close()
