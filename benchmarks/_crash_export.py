"""An export of ``sdm export`` read back with its format's own library and compared with numpy.

Used by the ``export`` kind of ``benchmarks/crash.py``: the file (HDF5 with h5py, NetCDF-4 with
netCDF4, a Zarr v3 store with zarr) must hold, in the file group named after each SDM group,
one array per dataset of shape ``(steps, *shape)`` equal to the arrays the writer wrote, and
the ``step`` coordinate ``0 .. steps-1``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["SUFFIX", "problems", "partials"]

#: The file name suffix of each format.
SUFFIX = {"hdf5": "h5", "netcdf": "nc", "zarr": "zarr"}


def _arrays(path: Path, fmt: str, wanted: dict[tuple[str, str], np.ndarray]) -> dict[tuple[str, str], Any]:
    """``(group, name) -> (values, step coordinate)`` as the format's library reads them."""
    out: dict[tuple[str, str], Any] = {}
    if fmt == "hdf5":
        import h5py

        with h5py.File(path, "r") as f:
            for g, name in wanted:
                out[(g, name)] = (f[g][name][...], f[g]["step"][...])
    elif fmt == "netcdf":
        import netCDF4

        with netCDF4.Dataset(path, "r") as f:
            f.set_auto_mask(False)
            for g, name in wanted:
                grp = f.groups[g]
                out[(g, name)] = (grp.variables[name][...], grp.variables["step"][...])
    elif fmt == "zarr":
        import zarr

        root: Any = zarr.open_group(str(path), mode="r")
        for g, name in wanted:
            out[(g, name)] = (root[g][name][...], root[g]["step"][...])
    else:
        raise ValueError(f"unknown export format {fmt!r}")
    return out


def problems(path: Path, fmt: str, wanted: dict[tuple[str, str], np.ndarray]) -> list[str]:
    """What is wrong with the export at *path* (empty: every array equals *wanted*, ``(group, name) ->
    (steps, *shape)`` array, and every step coordinate is ``0 .. steps-1``)."""
    if not path.exists():
        return [f"{path.name} does not exist"]
    try:
        got = _arrays(path, fmt, wanted)
    except Exception as exc:  # noqa: BLE001 - an unreadable export is the finding
        return [f"{path.name} cannot be read: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}"]
    out = []
    for key, want in wanted.items():
        values, steps = got[key]
        if values.shape != want.shape or values.dtype != want.dtype:
            out.append(f"{key[0]}/{key[1]}: {values.dtype}{values.shape}, expected {want.dtype}{want.shape}")
        elif not np.array_equal(values, want):
            out.append(f"{key[0]}/{key[1]}: values differ in {int((values != want).sum())} elements")
        if not np.array_equal(np.asarray(steps), np.arange(want.shape[0])):
            out.append(f"{key[0]}: step coordinate is not 0..{want.shape[0] - 1}")
    return out


def partials(out: Path) -> list[str]:
    """Temporary exports left beside *out* (``.NAME.partial-PID``)."""
    return sorted(p.name for p in out.parent.glob(f".{out.name}.partial-*"))
