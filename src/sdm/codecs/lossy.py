"""Array to bytes, lossy: ZFP (zfpy) and SZ3 (pysz).

Each codec takes a C-contiguous array of native byte order, 1 to 4 dimensions, finite
values (the pipeline sees to all four), and compresses it with the spec's bound, or
with its lossless mode when asked for an exact stream (ZFP's reversible mode, SZ3's
``LOSSLESS`` algorithm): the pipeline falls back to that when a chunk broke the bound.
Both streams describe themselves (ZFP's header holds the shape, the type and the mode;
SZ3's its configuration), so decoding needs only the expected shape and dtype, which it
checks.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

import numpy as np

from ..errors import IntegrityError
from .libraries import load
from .spec import Lossy

__all__ = ["ArrayCodec", "array_codec_for"]


class ArrayCodec(Protocol):
    """What a lossy pipeline needs of a codec."""

    def compress(self, values: np.ndarray, exact: bool) -> bytes:
        """Compress *values* within the spec's bound, or exactly when *exact* is true."""
        ...

    def decompress(self, data: bytes | memoryview, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """The C-contiguous array of *shape* and native *dtype* that *data* holds."""
        ...


def _failed(codec: str, exc: Exception) -> IntegrityError:
    return IntegrityError(f"compressed chunk cannot be decoded with {codec}: {type(exc).__name__}: {exc}")


def _expect(codec: str, got: np.ndarray, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    if got.shape != shape or got.dtype != dtype:
        raise IntegrityError(f"compressed chunk decodes with {codec} to shape {got.shape} and dtype {got.dtype}; "
                             f"the chunk is of shape {shape} and dtype {dtype}")
    return got


class _Zfp:
    def __init__(self, spec: Lossy) -> None:
        self._zfpy: Any = load("zfp", spec.package)
        value: float | int = int(spec.value) if spec.mode == "precision" else spec.value
        self._bound = {spec.mode: value}

    def compress(self, values: np.ndarray, exact: bool) -> bytes:
        # zfpy without a mode compresses in ZFP's reversible (lossless) mode
        return bytes(self._zfpy.compress_numpy(values) if exact else self._zfpy.compress_numpy(values, **self._bound))

    def decompress(self, data: bytes | memoryview, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        try:
            got = self._zfpy.decompress_numpy(bytes(data))
        except (ValueError, RuntimeError, TypeError) as exc:
            raise _failed("zfp", exc) from None
        return _expect("zfp", np.ascontiguousarray(got), shape, dtype)


class _Sz3:
    def __init__(self, spec: Lossy) -> None:
        self._pysz: Any = load("sz3", spec.package)
        self._mode, self._value = spec.mode, spec.value

    def compress(self, values: np.ndarray, exact: bool) -> bytes:
        pysz = self._pysz
        conf = pysz.szConfig()
        conf.errorBoundMode = pysz.szErrorBoundMode.ABS
        bound = self._value
        if self._mode == "relative":  # relative to this chunk's value range, computed in float64
            bound *= float(values.max()) - float(values.min())
            exact = exact or not 0.0 < bound < math.inf  # a constant chunk (nothing to lose), or a range beyond floats
        if exact:
            conf.cmprAlgo = pysz.szAlgorithm.LOSSLESS
        else:
            conf.absErrorBound = bound
        compressed, _ratio = pysz.sz.compress(values, conf)
        return bytes(compressed)

    def decompress(self, data: bytes | memoryview, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        try:
            got, _conf = self._pysz.sz.decompress(np.frombuffer(data, dtype=np.uint8), dtype, shape)
        except (ValueError, RuntimeError, TypeError) as exc:
            raise _failed("sz3", exc) from None
        return _expect("sz3", got, shape, dtype)


def array_codec_for(spec: Lossy) -> ArrayCodec:
    """The codec of *spec* (its package imported now).

    Raises
    ------
    CompressionSpecError
        When the package is not installed.
    """
    return _Zfp(spec) if spec.name == "zfp" else _Sz3(spec)
