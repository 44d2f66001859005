"""Type conversion between a dataset's stored dtype and the arrays it is written from and read into.

A dataset keeps one dtype on disk (its catalog dtype, byte order included). A write may
hand SDM a local array of another dtype, and a read may ask for another dtype (or fill an
``out`` array of another dtype): SDM converts, like PDS's put/get types and MPI's
``external32``.  The rules:

* **Which pairs.** Any numeric dtype (``bool``, signed and unsigned integers, floating,
  complex; either byte order) converts to any other numeric dtype.  Every other dtype
  (strings, ``datetime64``/``timedelta64``, structured dtypes) converts only to itself up
  to byte order (``'>U4'`` and ``'<U4'``); a structured dtype only to an identical
  structure (same field names, dtypes, offsets and size).  Other pairs are refused with
  :class:`~sdm.errors.ConversionError` before anything moves.
* **Checked values (the default, ``casting=None``).** A conversion numpy calls safe
  (``numpy.can_cast(src, dst, "safe")``: widening, a change of byte order, an integer to
  a wide enough float, ...) is never checked.  Any other conversion checks the elements
  that are moved (ghost layers and ghost rows are not written, so not checked) and
  refuses the whole access when one does not fit:

  - to an integer type: NaN or infinity, a fractional part, or a value outside the
    type's range;
  - to ``bool``: a value other than 0 and 1;
  - to a floating or complex type: a finite value that becomes infinite (overflow);
    rounding to the nearest representable value is not an error (``0.1`` stored as
    ``float32`` is the nearest ``float32``), nor is underflow to zero;
  - from complex to a real type: a non-zero imaginary part.

* **numpy's casting names** (``casting="no" | "equiv" | "safe" | "same_kind" |
  "unsafe"``) turn the value checks off: the conversion is allowed exactly when
  ``numpy.can_cast(src, dst, casting)`` and then done as ``numpy.ndarray.astype`` does it
  (``"unsafe"``: overflow wraps or becomes infinity, fractions are truncated, NaN to an
  integer is undefined), otherwise refused.

A write converts inside the copy it makes of the local array anyway when the dtypes
differ (one pass: the source is read once, the stored dtype written once; a non-contiguous
source is made contiguous in the same pass); the I/O methods move that buffer, and the
checksum is computed on it, i.e. on the stored bytes, so ``verify`` and ``sdm verify``
see what the file holds.  A read moves the stored bytes into a buffer of the stored
dtype, verifies them there, then converts into the caller's dtype.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from .errors import ConversionError, InvalidArgumentError
from .layout.distribution import Piece

__all__ = ["CASTINGS", "Conversion", "check_casting", "conversion", "describe", "pack", "place", "unpack", "NUMERIC_KINDS"]

#: numpy's casting names accepted by ``casting=`` (``None``: checked values, the default).
CASTINGS = ("no", "equiv", "safe", "same_kind", "unsafe")
#: dtype kinds converted to one another.
NUMERIC_KINDS = "biufc"
_HINT = "pass casting='unsafe' to convert anyway (as numpy's astype does)"


def check_casting(casting: object) -> str | None:
    """The ``casting`` argument, checked.

    Raises
    ------
    InvalidArgumentError
        Neither None nor one of :data:`CASTINGS`.
    """
    if casting is None or (isinstance(casting, str) and casting in CASTINGS):
        return casting
    raise InvalidArgumentError(f"casting must be None (check the values) or one of {list(CASTINGS)}, got {casting!r}")


def describe(dt: np.dtype) -> str:
    """A dtype as messages name it: ``float32 (>f4)``, ``|S8 (|S8)``, a structure as numpy prints it."""
    if dt.fields is not None:
        return str(dt)
    return f"{dt.name if dt.kind in NUMERIC_KINDS else dt} ({dt.str})"


@dataclass(frozen=True)
class Conversion:
    """One conversion ``src -> dst``, allowed by dtype; :meth:`check` checks the values.

    Attributes
    ----------
    src, dst : numpy.dtype
        The dtype converted from and to.
    checked : bool
        Whether the values must be checked (a conversion numpy does not call safe, with
        ``casting=None``).
    what : str
        Names the two sides in messages (``"dataset 'x' stores float32 (<f4) but the
        local array on rank 1 is float64 (<f8)"``).
    """

    src: np.dtype
    dst: np.dtype
    checked: bool
    what: str

    def check(self, values: np.ndarray) -> None:
        """Raise :class:`ConversionError` when an element of *values* (of ``src``) does not fit ``dst``.

        Only the checks that can be made on the source are made here (integer and
        boolean targets, imaginary parts); overflow to infinity is found on the
        converted values by :meth:`check_converted`.
        """
        if not self.checked or values.size == 0:
            return
        src, dst = self.src, self.dst
        if src.kind == "c" and dst.kind != "c":
            if np.any(values.imag):
                bad = values.ravel(order="K")[np.flatnonzero(values.imag)[0]]
                raise ConversionError(f"{self.what}: the value {bad!s} has a non-zero imaginary part, which "
                                      f"{dst} cannot hold; {_HINT}")
            values = values.real
        if dst.kind not in "biu" or values.dtype.kind in "biu" and np.can_cast(values.dtype, dst, "safe"):
            return
        if values.dtype.kind == "f":
            finite = np.isfinite(values)
            if not finite.all():
                bad = values.ravel(order="K")[np.flatnonzero(~finite.ravel(order="K"))[0]]
                raise ConversionError(f"{self.what}: the value {bad!s} is not finite, which {dst} cannot hold; {_HINT}")
            if dst.kind != "b":
                fractional = np.trunc(values) != values
                if fractional.any():
                    bad = values.ravel(order="K")[np.flatnonzero(fractional.ravel(order="K"))[0]]
                    raise ConversionError(f"{self.what}: the value {bad!s} has a fractional part, which {dst} cannot "
                                          f"hold; {_HINT}")
        if dst.kind == "b":
            outside = (values != 0) & (values != 1)
            if outside.any():
                bad = values.ravel(order="K")[np.flatnonzero(outside.ravel(order="K"))[0]]
                raise ConversionError(f"{self.what}: the value {bad!s} is neither 0 nor 1, which bool cannot hold "
                                      "without losing it; " + _HINT)
            return
        info = np.iinfo(dst)
        lo, hi = values.min(), values.max()
        # Python compares ints and floats exactly (no rounding of the bounds to the source's type)
        for v in (lo, hi):
            if not int(info.min) <= v.item() <= int(info.max):
                raise ConversionError(f"{self.what}: the value {v!s} is outside the range of {dst} "
                                      f"[{info.min}, {info.max}]; {_HINT}")

    def check_converted(self, values: np.ndarray, converted: np.ndarray) -> None:
        """Raise :class:`ConversionError` when a finite value of *values* became infinite in *converted*."""
        if not self.checked or converted.size == 0 or self.dst.kind not in "fc":
            return
        if np.isfinite(converted).all():  # the usual case: one pass, nothing overflowed
            return
        grew = np.isinf(converted) & np.isfinite(values) if self.src.kind in "fc" else np.isinf(converted)
        if grew.any():
            bad = values.ravel(order="K")[np.flatnonzero(grew.ravel(order="K"))[0]]
            raise ConversionError(f"{self.what}: the value {bad!s} overflows {self.dst} (it would become "
                                  f"infinite); {_HINT}")

    def convert(self, source: np.ndarray, target: np.ndarray) -> None:
        """Copy *source* into *target* (same shape), converted, numpy's warnings silenced.

        The values were checked before (:meth:`check`), or the caller allowed any result.
        """
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", np.exceptions.ComplexWarning)
            np.copyto(target, source, casting="unsafe")


def conversion(src: np.dtype, dst: np.dtype, casting: str | None, what: str) -> Conversion | None:
    """The conversion from *src* to *dst* under *casting*, or None when the dtypes are equal.

    Parameters
    ----------
    src, dst : numpy.dtype
    casting : str or None
        None (check the values) or one of :data:`CASTINGS` (see the module documentation).
    what : str
        Names the two sides in messages.

    Raises
    ------
    ConversionError
        The pair is refused (see the module documentation).
    """
    if src == dst:  # numpy's equality of structured dtypes includes the field names
        return None
    numeric = src.kind in NUMERIC_KINDS and dst.kind in NUMERIC_KINDS
    if not numeric and (src.fields is not None or dst.fields is not None or not np.can_cast(src, dst, "equiv")):
        raise ConversionError(f"{what}, which SDM does not convert: numeric dtypes (bool, int, uint, float, "
                              "complex) convert to one another, every other dtype only to itself (byte order "
                              "aside); structured dtypes need identical fields")
    if casting is None:
        return Conversion(src, dst, not np.can_cast(src, dst, "safe"), what)
    if not np.can_cast(src, dst, casting):  # type: ignore[arg-type]
        raise ConversionError(f"{what}, which casting={casting!r} does not allow; pass casting=None to convert with "
                              "the values checked, or casting='unsafe'")
    return Conversion(src, dst, False, what)


def _owned(piece: Piece, array: np.ndarray) -> np.ndarray:
    """The elements of *array* a write moves (any order): the whole array when nothing is a ghost."""
    return array if not piece.has_ghosts else piece.owned_values(array)


def pack(conv: Conversion, array: np.ndarray, piece: Piece, order: str) -> np.ndarray:
    """A write's local *array* converted to the stored dtype, in one pass, values checked.

    Parameters
    ----------
    conv : Conversion
        From the array's dtype to the stored one.
    array : numpy.ndarray
        The local array, ghosts included (any layout).
    piece : sdm.layout.Piece
        The rank's piece: only its owned elements are checked.
    order : {"C", "F"}
        Layout of the result when *array* is neither C- nor Fortran-contiguous (map
        pieces always get C).

    Returns
    -------
    numpy.ndarray
        A new C- or Fortran-contiguous array of ``conv.dst`` (the layout of *array* when
        it has one), of the same shape.

    Raises
    ------
    ConversionError
        An owned value does not fit the stored dtype (checked conversions only).
    """
    owned = _owned(piece, array) if conv.checked else array
    conv.check(owned)
    if piece.kind == "map" or array.flags.c_contiguous:
        layout = "C"
    else:
        layout = "F" if array.flags.f_contiguous else order
    packed = np.empty(array.shape, dtype=conv.dst, order=layout)  # type: ignore[call-overload]
    conv.convert(array, packed)
    if conv.checked:
        conv.check_converted(owned, _owned(piece, packed))
    return packed


def unpack(conv: Conversion, stored: np.ndarray, piece: Piece, owned_only: bool) -> np.ndarray:
    """A read's local array of the stored dtype converted to the caller's, values checked.

    Parameters
    ----------
    conv : Conversion
        From the stored dtype to the caller's.
    stored : numpy.ndarray
        What was read (zero ghosts), of ``conv.src``.
    piece : sdm.layout.Piece
    owned_only : bool
        Convert only the owned elements (for a caller's ``out``, set by :func:`place`
        once every rank converted), else the whole array.

    Returns
    -------
    numpy.ndarray
        The new local array (the layout of *stored*, zero ghosts), or the owned values
        (:meth:`~sdm.layout.Piece.owned_values` order).

    Raises
    ------
    ConversionError
        A value read does not fit the caller's dtype (checked conversions only).
    """
    source = piece.owned_values(stored) if owned_only else stored
    owned = _owned(piece, source) if conv.checked and not owned_only else source
    conv.check(owned)
    result = np.empty_like(source, dtype=conv.dst)
    conv.convert(source, result)
    if conv.checked:
        conv.check_converted(owned, _owned(piece, result) if not owned_only else result)
    return result


def place(values: np.ndarray, piece: Piece, out: np.ndarray) -> np.ndarray:
    """Set the owned elements of *out* to *values* (from :func:`unpack`); ghosts untouched. Returns *out*."""
    if piece.kind == "map":
        out[piece.memory_rows] = values
    else:
        out[piece.interior] = values
    return out
