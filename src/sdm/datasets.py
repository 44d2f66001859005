"""A dataset in a group definition (:class:`Dataset`) and the checks of its properties."""

from __future__ import annotations

import math

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from . import _validate as check
from .catalog import DatasetSpec
from .dtypes import check_dtype, dtype_text
from .errors import (
    InvalidArgumentError,
)
from .storage import check_name




__all__ = ["Dataset", "check_dims"]


@dataclass(frozen=True)
class Dataset:
    """A dataset in a group definition; unset properties come from the group.

    Parameters
    ----------
    name : str
    shape : sequence of int, optional
    dtype : numpy dtype-like, optional
    order : {"C", "F"}, optional
    dims : sequence of str, optional
        A name per dimension (``("z", "y", "x")``): what xarray and the exports call them.
    compression : str, dict or None, optional
        This dataset's codec pipeline (:mod:`sdm.codecs`, e.g. ``"zstd:1:shuffle"`` or
        ``{"codec": "zfp", "tolerance": 1e-3}``), instead of the group's; ``"none"``: raw
        bytes in a compressed group. Unset: the group's.
    chunks : sequence of int, optional
        A compressed dataset's chunk shape, instead of the group's: each writer cuts the box
        it owns along the multiples of it (unset: each writer's box is one chunk).
    """

    name: str
    shape: Sequence[int] | None = None
    dtype: Any = None
    order: str | None = None
    dims: Sequence[str] | None = None
    compression: Any = None
    chunks: Sequence[int] | None = None

    @classmethod
    def of(cls, item: "str | Dataset") -> "Dataset":
        """Accept a plain name or a Dataset."""
        return item if isinstance(item, Dataset) else cls(item)

    def spec(self, *, dtype: Any, shape: Sequence[int] | None, order: str,
             dims: Sequence[str] | None = None, compression: Any = None,
             chunks: Sequence[int] | None = None) -> DatasetSpec:
        """Resolve against the group defaults and validate.

        Raises
        ------
        InvalidNameError
            Bad name, missing or invalid shape/dtype/order.
        """
        check_name(self.name, "dataset")
        shp = self.shape if self.shape is not None else shape
        dt = self.dtype if self.dtype is not None else dtype
        od = self.order if self.order is not None else order
        if shp is None or dt is None:
            raise InvalidArgumentError(f"dataset {self.name!r} needs a shape and a dtype (from the group or its own)")
        shp = check.shape(shp, f"dataset {self.name!r}: shape")
        np_dtype = check_dtype(dt, f"dataset {self.name!r}")
        if not isinstance(od, str) or od not in ("C", "F"):
            raise InvalidArgumentError(f"dataset {self.name!r}: order must be 'C' or 'F', got {od!r}")
        if math.prod(shp) * np_dtype.itemsize > check.MAX_BYTES:
            raise InvalidArgumentError(f"dataset {self.name!r}: shape {shp} of {np_dtype} is larger than SDM stores "
                                       f"({check.MAX_BYTES} bytes)")
        names = self.dims if self.dims is not None else dims
        if names is not None:
            names = check_dims(names, len(shp), f"dataset {self.name!r}")
        codec = _compression(self.compression if self.compression is not None else compression, np_dtype, self.name)
        if self.chunks is None and codec is None and compression is not None:
            chunks = None  # the group's chunks are for its compressed datasets; this one opted out
        return DatasetSpec(self.name, dtype_text(np_dtype), shp, od, names, codec,
                           _chunks(self.chunks if self.chunks is not None else chunks, shp, np_dtype, codec, self.name))


def _chunks(value: Any, shape: tuple[int, ...], dtype: np.dtype, codec: str | None,
            name: str) -> tuple[int, ...] | None:
    """A compressed dataset's chunk shape, checked (None: each writer's box is one chunk).

    Raises
    ------
    InvalidArgumentError
        Chunks for a dataset stored raw, or not one positive integer per dimension.
    """
    if value is None:
        return None
    if codec is None:
        raise InvalidArgumentError(f"dataset {name!r}: chunks= applies to compressed datasets (give compression=); "
                                   "raw datasets are stored whole")
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or len(value) != len(shape):
        raise InvalidArgumentError(f"dataset {name!r}: chunks must give one positive integer per dimension of "
                                   f"shape {shape}, got {value!r}")
    out = tuple(check.integer(c, f"dataset {name!r}: chunks", minimum=1) for c in value)
    from .codecs import CompressionSpec

    CompressionSpec.from_record(codec).check_array(dtype, tuple(min(c, n) for c, n in zip(out, shape)))
    return out


def _compression(value: Any, dtype: np.dtype, name: str) -> str | None:
    """A dataset's codec pipeline as the catalog keeps it (its canonical text), checked against its dtype
    (None: raw bytes).

    Raises
    ------
    CompressionSpecError
        An unknown spec, a codec not installed, or one unsuitable for the dtype.
    """
    if value is None or (isinstance(value, str) and value == "none"):
        return None
    from .codecs import parse_compression
    from .errors import CompressionSpecError

    spec = parse_compression(value)
    if spec is None:
        return None
    try:
        spec.check_dtype(dtype)
    except CompressionSpecError as exc:
        raise CompressionSpecError(f"dataset {name!r}: {exc}") from None
    return spec.text


def check_dims(dims: Any, ndim: int, what: str) -> tuple[str, ...]:
    """Dimension names: one distinct identifier-like string per dimension, none called ``step``.

    Raises
    ------
    InvalidArgumentError
    """
    if isinstance(dims, str) or not isinstance(dims, Sequence):
        raise InvalidArgumentError(f"{what}: dims must be a sequence of names, one per dimension, got {dims!r}")
    names = tuple(dims)
    if len(names) != ndim:
        raise InvalidArgumentError(f"{what}: dims {names} has {len(names)} names; the shape has {ndim} dimensions")
    for n in names:
        if not isinstance(n, str) or not n or not n.replace("_", "a").isalnum() or n[0].isdigit():
            raise InvalidArgumentError(f"{what}: dimension name {n!r} must be letters, digits and '_', not "
                                       "starting with a digit")
    if len(set(names)) != len(names) or "step" in names:
        raise InvalidArgumentError(f"{what}: dims {names} must be distinct and not 'step' (the steps' dimension)")
    return names
