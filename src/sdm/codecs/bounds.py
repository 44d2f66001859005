"""How far decoded values are from the originals, and whether a spec's bound holds (numpy only).

* :func:`max_abs_error`: ``max |decoded - original|``, exact for integers (computed in
  64-bit unsigned arithmetic), in float64 (complex128 for complex values) otherwise.
  Non-finite values: a NaN against a NaN, or an infinity against the same infinity, is
  no error; a NaN or an infinity against anything else is an infinite error.
* :func:`value_range`: ``max - min`` of the originals, in float64.
* :func:`check_bound`: the error a spec's bound is about, raising
  :class:`~sdm.errors.CompressionBoundError` when it is broken:

  ========== ==================================================================
  lossless   bit identity (the bytes of every element); the error returned is 0.0
  absolute   ``max_abs_error <= bound``
  relative   ``max_abs_error / value_range <= bound``; for a constant chunk
             (range 0) the error is 0.0 when the values are identical, else inf
  rate       nothing bounds the error: ``max_abs_error`` is returned, never raised
  precision  likewise
  ========== ==================================================================
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import CompressionBoundError, InvalidArgumentError
from .spec import CompressionSpec, format_number

__all__ = ["max_abs_error", "value_range", "measured_error", "check_bound"]


def _arrays(original: np.ndarray, decoded: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    o, d = np.asarray(original), np.asarray(decoded)
    if o.shape != d.shape:
        raise InvalidArgumentError(f"original and decoded values differ in shape: {o.shape} and {d.shape}")
    for a in (o, d):
        if a.dtype.kind not in "biufc":
            raise InvalidArgumentError(f"an error is measured between numbers; got dtype {a.dtype}")
    return o, d


def _integer_error(o: np.ndarray, d: np.ndarray) -> float:
    big = np.uint64 if o.dtype.kind in "bu" and d.dtype.kind in "bu" else np.int64
    a, b = o.astype(big), d.astype(big)
    # |a - b| < 2**64 always fits uint64: take it modulo 2**64 from the larger side
    ua, ub = a.astype(np.uint64), b.astype(np.uint64)
    diff = np.where(a >= b, ua - ub, ub - ua)
    return float(int(diff.max()))


def _bytes_of(a: np.ndarray) -> np.ndarray:
    """The bytes of *a*'s elements, in C order."""
    return np.ascontiguousarray(a).reshape(-1).view(np.uint8)


def max_abs_error(original: np.ndarray, decoded: np.ndarray) -> float:
    """``max |decoded - original|`` over all elements (0.0 for empty arrays).

    Parameters
    ----------
    original, decoded : numpy.ndarray
        Numeric (bool, integer, floating or complex) arrays of one shape, any byte order
        or memory order.

    Returns
    -------
    float
        The largest absolute difference; ``inf`` where a NaN or an infinity meets anything
        but itself.

    Raises
    ------
    InvalidArgumentError
        For arrays of different shapes or non-numeric dtypes.
    """
    o, d = _arrays(original, decoded)
    if o.size == 0:
        return 0.0
    mixed_unsigned = np.dtype(np.uint64) in (o.dtype.newbyteorder("="), d.dtype.newbyteorder("="))
    if o.dtype.kind in "biu" and d.dtype.kind in "biu" and not (mixed_unsigned and "i" in (o.dtype.kind, d.dtype.kind)):
        return _integer_error(o, d)
    wide = np.complex128 if "c" in (o.dtype.kind, d.dtype.kind) else np.float64
    a, b = np.atleast_1d(o.astype(wide)), np.atleast_1d(d.astype(wide))
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(b - a)
    same = (a == b) | (np.isnan(a) & np.isnan(b))
    diff[same] = 0.0
    diff[np.isnan(diff)] = np.inf
    return float(diff.max())


def value_range(values: np.ndarray) -> float:
    """``max - min`` of *values* in float64 (0.0 for an empty array; NaN when a NaN is among them)."""
    v = np.asarray(values)
    if v.size == 0:
        return 0.0
    with np.errstate(invalid="ignore", over="ignore"):
        return float(v.max()) - float(v.min())


def measured_error(spec: CompressionSpec, original: np.ndarray, decoded: np.ndarray) -> float:
    """The error :func:`check_bound` compares with *spec*'s bound (the table of :mod:`sdm.codecs.bounds`), unchecked."""
    if not spec.lossy:
        o, d = np.asarray(original), np.asarray(decoded)
        if o.shape != d.shape or o.dtype != d.dtype:
            return math.inf
        same = _bytes_of(o) == _bytes_of(d)
        return 0.0 if bool(same.all()) else math.inf
    error = max_abs_error(original, decoded)
    if spec.bound_kind != "relative":
        return error
    span = value_range(original)
    if error == 0.0:
        return 0.0
    if span == 0.0 or not math.isfinite(span):
        return math.inf
    return error / span


def check_bound(spec: CompressionSpec, original: np.ndarray, decoded: np.ndarray) -> float:
    """The error measured between *original* and *decoded*, refused when it breaks *spec*'s bound.

    Parameters
    ----------
    spec : CompressionSpec
        The spec the values were compressed with.
    original, decoded : numpy.ndarray
        The chunk before and after a round trip (one shape; one dtype for lossless specs).

    Returns
    -------
    float
        The measured error: 0.0 for a lossless spec (bits identical), the maximum absolute
        error (``absolute``, ``rate``, ``precision``) or the maximum absolute error over
        the value range (``relative``).

    Raises
    ------
    CompressionBoundError
        Naming the spec, the bound asked for and the error measured, when the bound is
        broken (a lossless spec whose decoded bits differ, too).
    """
    error = measured_error(spec, original, decoded)
    bound = spec.bound_value
    if not spec.lossy:
        if error != 0.0:
            raise CompressionBoundError(f"compression {spec.text!r} is lossless, but the decoded chunk differs from "
                                        "the original (dtype, shape or bits)")
    elif bound is not None and spec.bound_kind in ("absolute", "relative") and not error <= bound:
        raise CompressionBoundError(f"compression {spec.text!r} broke its bound: {spec.bound_kind} error "
                                    f"{format_number(error) if math.isfinite(error) else error} measured, at most "
                                    f"{format_number(bound)} asked")
    return error
