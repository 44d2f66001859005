"""What a dataset's compression is: :class:`Lossless` and :class:`Lossy` specs, their canonical text.

A spec says *what* is done to each chunk; :mod:`sdm.codecs.pipeline` does it.  The
grammar of the text (what :func:`~sdm.codecs.parse.parse_compression` reads and what
:attr:`CompressionSpec.text` writes, ``docs/compression.md`` in full)::

    zstd:<level>:<shuffle>              level 1..22, or a fast level -1..-131072
    lz4:<acceleration>:<shuffle>        acceleration 1..65537 (higher: faster, larger)
    blosc2:<inner>:<level>:<shuffle>    inner blosclz|lz4|lz4hc|zlib|zstd, level 0..9
    zfp:tolerance=<t> | zfp:rate=<bits> | zfp:precision=<bits>
    sz3:absolute=<t> | sz3:relative=<r>

with ``<shuffle>`` one of ``noshuffle``, ``shuffle`` (bytes of each element grouped by
their place in it) and ``bitshuffle`` (the same, bit by bit; blosc2 only).  The canonical
text spells every field out, so it does not depend on the defaults; it is what the
catalog and the meta-file store, at most :data:`TEXT_MAX` characters, and
:meth:`CompressionSpec.from_record` refuses any other text.  Short forms take defaults:
``zstd`` is ``zstd:3:noshuffle``, ``lz4`` is ``lz4:1:noshuffle``, ``blosc2`` is
``blosc2:zstd:5:shuffle``, and ``byte``, ``bit``, ``none`` stand for ``shuffle``,
``bitshuffle``, ``noshuffle``; lossy codecs have no default bound.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Literal

import numpy as np

from ..errors import CompressionSpecError

__all__ = [
    "CompressionSpec", "Lossless", "Lossy", "BoundKind", "TEXT_MAX", "LOSSLESS_CODECS", "LOSSY_CODECS",
    "KNOWN_CODECS", "SHUFFLES", "BLOSC2_INNER", "LOSSY_MODES", "PACKAGES", "MAX_CHUNK_BYTES", "MAX_LOSSY_NDIM",
    "DEFAULT_LEVELS", "DEFAULT_SHUFFLE", "LEVEL_KEY", "LABELS", "format_number", "parse_text", "make_lossless",
    "make_lossy", "known_codecs", "known_name", "needs_bound",
]

#: Longest canonical text of a spec (the catalog column's width).
TEXT_MAX = 64
#: Codecs that give back every bit, and those that keep an error bound instead.
LOSSLESS_CODECS = ("zstd", "lz4", "blosc2")
LOSSY_CODECS = ("zfp", "sz3")
KNOWN_CODECS = tuple(sorted(LOSSLESS_CODECS + LOSSY_CODECS))
#: Shuffle filters, in canonical spelling.
SHUFFLES = ("noshuffle", "shuffle", "bitshuffle")
#: The compressors blosc2 runs inside.
BLOSC2_INNER = ("blosclz", "lz4", "lz4hc", "zlib", "zstd")
BoundKind = Literal["absolute", "relative", "rate", "precision"]
#: The modes of each lossy codec (the key of its text and dict) and the kind of bound each is.
LOSSY_MODES: dict[str, dict[str, BoundKind]] = {
    "zfp": {"tolerance": "absolute", "rate": "rate", "precision": "precision"},
    "sz3": {"absolute": "absolute", "relative": "relative"},
}
#: The package each codec needs, as ``pip install`` names it.
PACKAGES = {"zstd": "numcodecs", "lz4": "numcodecs", "blosc2": "blosc2", "zfp": "zfpy", "sz3": "pysz"}
#: The largest chunk (bytes) each compressor takes in one call.
MAX_CHUNK_BYTES = {"lz4": 0x7E000000, "blosc2": 2**31 - 33}
#: The most dimensions a chunk of a lossy codec may have.
MAX_LOSSY_NDIM = 4

_FLOATS = ("float32", "float64")
_INTS_ZFP = ("int32", "int64")


def format_number(value: float) -> str:
    """The canonical text of a bound: an integer without a point, else Python's shortest ``repr``.

    ``float(format_number(x)) == x`` for every finite *x*.
    """
    if value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(value)


def _native_name(dt: np.dtype) -> str:
    """``float64`` for ``<f8`` and ``>f8`` alike (the byte order does not change what a codec can do)."""
    return dt.newbyteorder("=").name if dt.kind in "biufc" else str(dt)


class CompressionSpec:
    """A validated compression spec (immutable, hashable, comparable; its constructor refuses invalid fields).

    Built by :func:`~sdm.codecs.parse.parse_compression` (from what a user gives) or
    :meth:`from_record` (from what the catalog or a meta-file holds); the two subclasses
    are :class:`Lossless` and :class:`Lossy`.
    """

    __slots__ = ()

    @property
    def codec(self) -> str:
        """The codec's name (``"zstd"``, ``"lz4"``, ``"blosc2"``, ``"zfp"``, ``"sz3"``)."""
        raise NotImplementedError

    @property
    def text(self) -> str:
        """The canonical text: :func:`~sdm.codecs.parse.parse_compression` gives back an equal spec."""
        raise NotImplementedError

    @property
    def lossy(self) -> bool:
        """True when decoded values may differ from the originals."""
        raise NotImplementedError

    @property
    def bound_kind(self) -> BoundKind | None:
        """What :attr:`bound_value` bounds: ``"absolute"`` (max abs error), ``"relative"`` (max abs error /
        the chunk's value range), ``"rate"`` (bits per value), ``"precision"`` (bit planes kept), or
        ``None`` for lossless codecs."""
        raise NotImplementedError

    @property
    def bound_value(self) -> float | None:
        """The number asked for with :attr:`bound_kind` (``None`` for lossless codecs)."""
        raise NotImplementedError

    @property
    def package(self) -> str:
        """The package the codec needs (``pip install`` name)."""
        return PACKAGES[self.codec]

    def check_dtype(self, dtype: np.dtype | type | str) -> np.dtype:
        """Refuse a stored dtype the codec cannot compress as asked.

        Parameters
        ----------
        dtype : numpy dtype-like
            The dataset's stored dtype (either byte order).

        Returns
        -------
        numpy.dtype
            ``numpy.dtype(dtype)``.

        Raises
        ------
        CompressionSpecError
            With a message naming the dtype and what to use instead.
        """
        raise NotImplementedError

    def check_array(self, dtype: np.dtype | type | str, chunk_shape: tuple[int, ...]) -> np.dtype:
        """:meth:`check_dtype`, and refuse a chunk shape the codec cannot take.

        Lossy codecs take chunks of at most :data:`MAX_LOSSY_NDIM` dimensions; ``lz4`` and
        ``blosc2`` at most :data:`MAX_CHUNK_BYTES` bytes per chunk.

        Parameters
        ----------
        dtype : numpy dtype-like
            The dataset's stored dtype.
        chunk_shape : tuple of int
            The shape of the largest chunk (each extent ``>= 0``).

        Returns
        -------
        numpy.dtype
            ``numpy.dtype(dtype)``.

        Raises
        ------
        CompressionSpecError
            For an unsuitable dtype, too many dimensions or too many bytes.
        """
        dt = self.check_dtype(dtype)
        shape = tuple(chunk_shape)
        if not all(isinstance(n, (int, np.integer)) and not isinstance(n, (bool, np.bool_)) and n >= 0 for n in shape):
            raise CompressionSpecError(f"a chunk shape is a tuple of integers >= 0; got {chunk_shape!r}")
        if self.lossy and len(shape) > MAX_LOSSY_NDIM:
            raise CompressionSpecError(
                f"{self.codec} compresses chunks of 1 to {MAX_LOSSY_NDIM} dimensions; a chunk of {len(shape)} needs "
                f"fewer (merge axes of the chunk shape) or a lossless codec such as 'zstd'")
        limit = MAX_CHUNK_BYTES.get(self.codec)
        nbytes = math.prod(int(n) for n in shape) * dt.itemsize
        if limit is not None and nbytes > limit:
            raise CompressionSpecError(f"{self.codec} compresses at most {limit} bytes per chunk; a chunk of shape "
                                       f"{shape} holds {nbytes}: make the chunks smaller or use 'zstd'")
        return dt

    @classmethod
    def from_record(cls, text: object) -> CompressionSpec:
        """The spec a catalog row or a meta-file record holds.

        Parameters
        ----------
        text : str
            A canonical text (:attr:`text`), at most :data:`TEXT_MAX` ASCII characters.

        Returns
        -------
        CompressionSpec
            The spec; whether its codec is installed is not checked here (reading a catalog
            needs none), :func:`~sdm.codecs.pipeline.pipeline_for` checks it.

        Raises
        ------
        CompressionSpecError
            For anything but a canonical text: another type, too long, not ASCII, an
            abbreviated or otherwise non-canonical form, or an invalid spec.
        """
        if not isinstance(text, str):
            raise CompressionSpecError(f"a compression record is a str; got {type(text).__name__}")
        if len(text) > TEXT_MAX or not text.isascii() or not text.isprintable():
            raise CompressionSpecError(f"a compression record is at most {TEXT_MAX} printable ASCII characters; got "
                                       f"{text[:TEXT_MAX]!r}{'...' if len(text) > TEXT_MAX else ''}")
        spec = parse_text(text)
        if spec.text != text:
            raise CompressionSpecError(f"compression record {text!r} is not canonical (SDM writes {spec.text!r})")
        return spec


def _refuse_unstorable(spec: CompressionSpec, dt: np.dtype) -> None:
    if dt.hasobject or dt.itemsize == 0 or dt.kind in "OT":
        raise CompressionSpecError(f"compression {spec.text!r} cannot store dtype {dt}: it compresses elements of a "
                                   "fixed size without Python objects")


@dataclass(frozen=True, slots=True)
class Lossless(CompressionSpec):
    """A lossless spec: the chunk's bytes (in the dataset's order), optionally shuffled, then compressed.

    Attributes
    ----------
    name : str
        ``"zstd"``, ``"lz4"`` or ``"blosc2"``.
    level : int
        zstd's level, lz4's acceleration or blosc2's level.
    shuffle : str
        ``"noshuffle"``, ``"shuffle"`` or (blosc2 only) ``"bitshuffle"``.
    inner : str or None
        blosc2's compressor (:data:`BLOSC2_INNER`); ``None`` for the others.
    """

    name: str
    level: int
    shuffle: str = "noshuffle"
    inner: str | None = None

    def __post_init__(self) -> None:
        _check_lossless(self)

    @property
    def codec(self) -> str:
        return self.name

    @property
    def text(self) -> str:
        if self.name == "blosc2":
            return f"blosc2:{self.inner}:{self.level}:{self.shuffle}"
        return f"{self.name}:{self.level}:{self.shuffle}"

    @property
    def lossy(self) -> bool:
        return False

    @property
    def bound_kind(self) -> BoundKind | None:
        return None

    @property
    def bound_value(self) -> float | None:
        return None

    def check_dtype(self, dtype: np.dtype | type | str) -> np.dtype:
        dt = np.dtype(dtype)
        _refuse_unstorable(self, dt)
        return dt


@dataclass(frozen=True, slots=True)
class Lossy(CompressionSpec):
    """A lossy spec: ZFP or SZ3 compressing the chunk's values, native byte order, in the dataset's order.

    Attributes
    ----------
    name : str
        ``"zfp"`` or ``"sz3"``.
    mode : str
        The key of the bound (:data:`LOSSY_MODES`): ``"tolerance"``, ``"rate"`` or
        ``"precision"`` for zfp, ``"absolute"`` or ``"relative"`` for sz3.
    value : float
        The bound (an integer value for ``"precision"``).
    """

    name: str
    mode: str
    value: float

    def __post_init__(self) -> None:
        _check_lossy(self)

    @property
    def codec(self) -> str:
        return self.name

    @property
    def text(self) -> str:
        return f"{self.name}:{self.mode}={format_number(self.value)}"

    @property
    def lossy(self) -> bool:
        return True

    @property
    def bound_kind(self) -> BoundKind | None:
        return LOSSY_MODES[self.name][self.mode]

    @property
    def bound_value(self) -> float | None:
        return self.value

    @property
    def error_bounded(self) -> bool:
        """True when the spec bounds the error (``absolute``, ``relative``), not the bits (``rate``, ``precision``)."""
        return self.bound_kind in ("absolute", "relative")

    def check_dtype(self, dtype: np.dtype | type | str) -> np.dtype:
        dt = np.dtype(dtype)
        _refuse_unstorable(self, dt)
        name = _native_name(dt)
        if name in _FLOATS:
            return dt
        exact = "is exact only with a lossless codec such as 'zstd'"
        if self.error_bounded and dt.kind in "biu":
            what = "a relative bound" if self.bound_kind == "relative" else "a tolerance"
            raise CompressionSpecError(f"{what} needs a floating-point dtype; {name} {exact}")
        if self.name == "zfp":
            if name in _INTS_ZFP:
                return dt  # rate and precision modes: tolerances were refused above
            raise CompressionSpecError(f"zfp compresses float32 and float64 (int32 and int64 in rate or precision "
                                       f"mode) only; {name} {exact}")
        raise CompressionSpecError(f"sz3 compresses float32 and float64 only; {name} {exact}")


# ------------------------------------------------------------------------------ the text grammar

#: Level (lz4: acceleration) of a lossless spec that names none.
DEFAULT_LEVELS = {"zstd": 3, "lz4": 1, "blosc2": 5}
DEFAULT_SHUFFLE = {"zstd": "noshuffle", "lz4": "noshuffle", "blosc2": "shuffle"}
_SHUFFLE_ALIASES = {"none": "noshuffle", "byte": "shuffle", "bit": "bitshuffle"}
LEVEL_KEY = {"zstd": "level", "lz4": "acceleration", "blosc2": "level"}
_LEVEL_RANGE = {"zstd": "1 to 22 (or a fast level -1 to -131072)", "lz4": "1 to 65537", "blosc2": "0 to 9"}
_FORMS = {"zstd": "zstd[:<level>[:<shuffle>]]", "lz4": "lz4[:<acceleration>[:<shuffle>]]",
          "blosc2": "blosc2[:<inner>[:<level>[:<shuffle>]]]", "zfp": "zfp:<tolerance|rate|precision>=<number>",
          "sz3": "sz3:<absolute|relative>=<number>"}
LABELS = {"tolerance": "tolerance", "absolute": "absolute bound", "relative": "relative bound", "rate": "rate",
           "precision": "precision"}
_CHARS = re.compile(r"[A-Za-z0-9:=.+-]+")
_INT = re.compile(r"[-+]?[0-9]+")
_FLOAT = re.compile(r"[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")
_NONFINITE = ("nan", "inf", "infinity")


def parse_text(text: str) -> CompressionSpec:
    """The spec a text names (the grammar above; short forms take the defaults), installed or not.

    Raises
    ------
    CompressionSpecError
        For a text that is empty, too long, holds other characters or is not of the grammar.
    """
    if not text:
        raise CompressionSpecError(f"compression text is empty; known codecs: {known_codecs()}")
    if len(text) > TEXT_MAX:
        raise CompressionSpecError(f"compression text is at most {TEXT_MAX} characters; got {len(text)}")
    if not _CHARS.fullmatch(text):
        raise CompressionSpecError(f"compression text {text!r} holds characters other than letters, digits and "
                                   "':', '=', '.', '+', '-'")
    name, _, rest = text.partition(":")
    known_name(name)
    fields = rest.split(":") if rest else []
    if "" in fields or text.endswith(":"):
        raise CompressionSpecError(f"compression text {text!r} has an empty field; write {_FORMS[name]!r}")
    if name in LOSSLESS_CODECS:
        inner = None
        if name == "blosc2":
            inner, fields = (fields[0] if fields else "zstd"), fields[1:]
        if len(fields) > 2:
            raise CompressionSpecError(f"compression {name!r} is written {_FORMS[name]!r}; got {text!r}")
        level = _int_text(fields[0], name, LEVEL_KEY[name]) if fields else DEFAULT_LEVELS[name]
        return make_lossless(name, level, fields[1] if len(fields) > 1 else DEFAULT_SHUFFLE[name], inner)
    if not fields:
        raise CompressionSpecError(needs_bound(name))
    if len(fields) > 1:
        raise CompressionSpecError(f"compression {name!r} is written {_FORMS[name]!r} (one bound); got {text!r}")
    mode, eq, number = fields[0].partition("=")
    if not eq:
        raise CompressionSpecError(f"compression {name!r} is written {_FORMS[name]!r}; got {text!r}")
    _known_mode(name, mode)
    if mode == "precision":
        return make_lossy(name, mode, _int_text(number, name, mode))
    return make_lossy(name, mode, _float_text(number, name, mode))


def make_lossless(name: str, level: int, shuffle: str, inner: str | None) -> Lossless:
    """A :class:`Lossless` (*shuffle* may be an alias: ``none``, ``byte``, ``bit``), checked by its constructor."""
    return Lossless(name, level, _SHUFFLE_ALIASES.get(shuffle, shuffle), inner)


def make_lossy(name: str, mode: str, value: float) -> Lossy:
    """A :class:`Lossy` whose bound is *value* as a float, checked by its constructor."""
    return Lossy(name, mode, float(value))


def _check_lossless(spec: Lossless) -> None:
    name, level, shuffle, inner = spec.name, spec.level, spec.shuffle, spec.inner
    if name not in LOSSLESS_CODECS:
        raise CompressionSpecError(f"a lossless compression is one of {', '.join(map(repr, LOSSLESS_CODECS))}; got "
                                   f"{name!r}")
    if isinstance(level, (bool, np.bool_)) or not isinstance(level, int):
        raise CompressionSpecError(f"the {LEVEL_KEY[name]} of {name!r} is an int; got {type(level).__name__}")
    if shuffle not in SHUFFLES:
        raise CompressionSpecError(f"the shuffle of {name!r} is 'noshuffle', 'shuffle' or 'bitshuffle' ('none', "
                                   f"'byte', 'bit' also do); got {shuffle!r}")
    if name == "blosc2":
        if inner not in BLOSC2_INNER:
            raise CompressionSpecError(f"the inner codec of 'blosc2' is one of {', '.join(map(repr, BLOSC2_INNER))}; "
                                       f"got {inner!r}")
        ok = 0 <= level <= 9
    else:
        if inner is not None:
            raise CompressionSpecError(f"only 'blosc2' has an inner codec; {name!r} got {inner!r}")
        if shuffle == "bitshuffle":
            raise CompressionSpecError(f"bitshuffle with {name!r} needs blosc2: write "
                                       f"'blosc2:{name}:<level 0-9>:bitshuffle'")
        ok = (1 <= level <= 22 or -131072 <= level <= -1) if name == "zstd" else 1 <= level <= 65537
    if not ok:
        raise CompressionSpecError(f"the {LEVEL_KEY[name]} of {name!r} is {_LEVEL_RANGE[name]}; got {level}")


def _check_lossy(spec: Lossy) -> None:
    name, mode, value = spec.name, spec.mode, spec.value
    if name not in LOSSY_CODECS:
        raise CompressionSpecError(f"a lossy compression is one of {', '.join(map(repr, LOSSY_CODECS))}; got {name!r}")
    _known_mode(name, mode)
    if not isinstance(value, float):
        raise CompressionSpecError(f"the {LABELS[mode]} of {name!r} is held as a float; got {type(value).__name__}")
    if mode == "precision":
        if not (value.is_integer() and 1 <= value <= 64):
            raise CompressionSpecError(f"the precision of {name!r} is a number of bit planes from 1 to 64; got "
                                       f"{format_number(value) if math.isfinite(value) else value}")
    elif not math.isfinite(value) or value <= 0:
        raise CompressionSpecError(f"the {LABELS[mode]} of {name!r} is a positive finite number; got {value!r}")
    elif mode == "relative" and value >= 1:
        raise CompressionSpecError(f"the relative bound of {name!r} is a fraction of the value range, below 1; "
                                   f"got {value!r}")
    elif mode == "rate" and value > 64:
        raise CompressionSpecError(f"the rate of {name!r} is a number of bits per value, at most 64; got {value!r}")


def known_codecs() -> str:
    """The known codecs' names, quoted, for messages."""
    return ", ".join(map(repr, KNOWN_CODECS))


def known_name(name: str) -> None:
    """Refuse a codec name that is not one of :data:`KNOWN_CODECS`."""
    if name not in KNOWN_CODECS:
        raise CompressionSpecError(f"unknown compression {name!r}; known: {known_codecs()}")


def _known_mode(name: str, mode: str) -> None:
    if mode not in LOSSY_MODES[name]:
        raise CompressionSpecError(f"compression {name!r} takes one of {', '.join(map(repr, LOSSY_MODES[name]))}; "
                                   f"got {mode!r}")


def needs_bound(name: str) -> str:
    """The message refusing a lossy codec given without a bound."""
    forms = [f"'{name}:{mode}=<number>'" for mode in LOSSY_MODES[name]]
    return f"compression {name!r} needs a bound: {', '.join(forms[:-1])} or {forms[-1]}"


def _int_text(field: str, name: str, what: str) -> int:
    if not _INT.fullmatch(field):
        raise CompressionSpecError(f"the {LABELS.get(what, what)} of {name!r} is an integer; got {field!r}")
    return int(field)


def _float_text(field: str, name: str, what: str) -> float:
    if not (_FLOAT.fullmatch(field) or field.lower().lstrip("+-") in _NONFINITE):
        raise CompressionSpecError(f"the {LABELS[what]} of {name!r} is a number; got {field!r}")
    return float(field)
