"""Which numpy dtypes SDM stores, and how a dtype is written in the catalog.

Stored exactly (the file holds the array's bytes, ``numpy.ndarray.tobytes`` of the global
array in the dataset's order):

* ``bool``, every integer, unsigned integer, floating and complex type (``float16`` to
  ``float64``/``complex128``, and ``longdouble`` where it has no padding bytes, e.g. IEEE
  quad precision), in either byte order;
* ``datetime64`` and ``timedelta64`` of any unit (8-byte integers; ``NaT`` included);
* fixed-width byte strings ``S<n>`` and unicode strings ``U<n>`` (either byte order),
  ``n >= 1``;
* packed structured dtypes whose fields are any of these, nested structured dtypes or
  sub-arrays of them, fields listed in the order of their offsets.

Refused by :func:`check_dtype` (so at ``make_group`` and ``import_array``) with
:class:`~sdm.errors.UnsupportedDtypeError`: Python objects (``O``, or fields holding
them), zero-size dtypes (``V0``, ``S0``, ``U0``, empty structures), unstructured void
``V<n>`` (bytes without a meaning: use ``S<n>`` or a trailing ``uint8`` dimension),
sub-array dtypes at the top level (``(3,)f8``: put the 3 in the dataset's shape), numpy's
variable-width ``StringDType``, any other kind, x87 ``longdouble``/``clongdouble`` (80 bits
in 12 or 16 bytes: padding again), and structured dtypes with padding bytes
(``align=True``, gaps between offsets), overlapping fields or fields listed out of offset
order: numpy does not keep padding
bytes when it copies an array, so neither a copy nor a checksum of them would be exact
(``numpy.lib.recfunctions.repack_fields`` gives the packed dtype).

The catalog keeps a dtype as :func:`dtype_text`: ``dtype.str`` for plain dtypes
(``'<f8'``, ``'>U2'``, ``'<M8[s]'``) and, for structured dtypes, the ``descr`` that
numpy's ``.npy`` header uses, which
``numpy.lib.format.descr_to_dtype(ast.literal_eval(text))`` turns back into the same
dtype.  MPI moves the elements of every dtype but the plain numeric ones as ``itemsize``
bytes (``MPI.BYTE``), so nothing is converted on the way.
"""

from __future__ import annotations

import ast
from functools import lru_cache
from typing import Any

import numpy as np
from numpy.lib.format import descr_to_dtype, dtype_to_descr

from .errors import UnsupportedDtypeError

__all__ = ["check_dtype", "dtype_text", "from_text", "TEXT_MAX", "PLAIN_KINDS"]

#: Kinds stored as plain elements (structured dtypes are made of these).
PLAIN_KINDS = "biufcmMSU"
#: Longest catalog text of a dtype (the catalog column's width).
TEXT_MAX = 1024


def _check(dt: np.dtype, where: str) -> None:
    if dt.kind == "T":
        raise UnsupportedDtypeError(f"{where} is a variable-width string; use a fixed-width 'U<n>' or 'S<n>'")
    if dt.hasobject:
        raise UnsupportedDtypeError(f"{where} holds Python objects, which SDM cannot store; use a numeric, string "
                                    "or structured dtype")
    if dt.subdtype is not None:
        base, shape = dt.subdtype
        _check(base, where)
        return
    if dt.fields is not None:
        if dt.itemsize == 0 or not dt.names:
            raise UnsupportedDtypeError(f"{where} is an empty structure (no fields, or 0 bytes per element)")
        for name in dt.names:
            _check(dt.fields[name][0], f"field {name!r} of {where}")
        spans = [(dt.fields[n][1], dt.fields[n][1] + dt.fields[n][0].itemsize) for n in dt.names]
        if spans != sorted(spans):
            raise UnsupportedDtypeError(f"{where} lists its fields out of the order of their offsets, which numpy "
                                        "cannot describe in a .npy header (nor SDM in its catalog); list them in "
                                        "offset order")
        end = 0
        for lo, hi in spans:
            if lo != end:
                what = "overlapping fields" if lo < end else f"{lo - end} padding bytes at offset {end}"
                raise UnsupportedDtypeError(f"{where} has {what}; numpy does not keep padding bytes when it copies, "
                                            "so they cannot be stored exactly: use a packed dtype (align=False, "
                                            "numpy.lib.recfunctions.repack_fields)")
            end = hi
        if end != dt.itemsize:
            raise UnsupportedDtypeError(f"{where} has {dt.itemsize - end} padding bytes at the end; numpy does not keep "
                                        "padding bytes when it copies, so they cannot be stored exactly: use a packed "
                                        "dtype (align=False, numpy.lib.recfunctions.repack_fields)")
        return
    if dt.kind not in PLAIN_KINDS:
        what = {"V": "unstructured void (raw bytes without a meaning); use 'S<n>' or a trailing uint8 dimension"}.get(
            dt.kind, f"of kind {dt.kind!r}")
        raise UnsupportedDtypeError(f"{where} is {what}; SDM stores bool, integer, float, complex, datetime64, "
                                    "timedelta64, fixed-width S/U strings and structured dtypes of those")
    if dt.itemsize == 0:
        raise UnsupportedDtypeError(f"{where} has 0 bytes per element; give strings a width, e.g. 'S8' or 'U8'")
    if dt.type in (np.longdouble, np.clongdouble) and _padded_longdouble():
        raise UnsupportedDtypeError(f"{where} is this platform's long double: 80-bit x87 numbers in "
                                    f"{np.dtype(np.longdouble).itemsize} bytes, whose padding bytes numpy does not "
                                    "keep when it copies, so they cannot be stored exactly; use float64/complex128")


@lru_cache(maxsize=1)
def _padded_longdouble() -> bool:
    """Whether ``np.longdouble`` is x87 extended precision (64-bit mantissa) stored with padding bytes."""
    info = np.finfo(np.longdouble)
    return int(info.nmant) == 63 and np.dtype(np.longdouble).itemsize > 10


def check_dtype(dtype: Any, what: str = "dtype") -> np.dtype:
    """The numpy dtype for *dtype* if SDM stores it exactly.

    Parameters
    ----------
    dtype : numpy dtype-like
    what : str
        Names the dtype in messages (``"dataset 'rho'"``).

    Raises
    ------
    UnsupportedDtypeError
        For a dtype SDM cannot store exactly (see the module documentation), or one
        numpy does not know.
    """
    try:
        dt = np.dtype(dtype)
    except (TypeError, ValueError) as exc:
        raise UnsupportedDtypeError(f"{what}: {dtype!r} is not a numpy dtype ({exc})") from None
    top = f"the dtype {dt} of {what}"
    if dt.subdtype is not None:
        base, shape = dt.subdtype
        raise UnsupportedDtypeError(f"{top} is a sub-array dtype; use dtype {base.str!r} and add {shape} to the "
                                    "dataset's shape")
    _check(dt, top)
    text = dtype_text(dt)
    if len(text) > TEXT_MAX:
        raise UnsupportedDtypeError(f"{top} takes {len(text)} characters to describe; the catalog keeps at most "
                                    f"{TEXT_MAX} (use shorter field names or fewer fields)")
    return dt


def dtype_text(dt: np.dtype) -> str:
    """The catalog's text of a dtype (see the module documentation)."""
    dt = np.dtype(dt)
    if dt.fields is None:
        return dt.str
    return repr(dtype_to_descr(dt))


@lru_cache(maxsize=256)
def from_text(text: str) -> np.dtype:
    """The dtype of a catalog text written by :func:`dtype_text` (or any ``dtype.str``)."""
    if text.startswith("["):
        return descr_to_dtype(ast.literal_eval(text))
    return np.dtype(text)
