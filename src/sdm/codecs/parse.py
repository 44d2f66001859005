"""From what a user writes (``"zstd:3"``, ``{"codec": "zfp", "tolerance": 1e-3}``) to a :class:`CompressionSpec`.

Every refusal is a :class:`~sdm.errors.CompressionSpecError` whose message says what
was expected.  Defaults of the short forms: ``zstd`` is ``zstd:3:noshuffle``, ``lz4`` is
``lz4:1:noshuffle``, ``blosc2`` is ``blosc2:zstd:5:shuffle``; lossy codecs have no
default bound.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

import numpy as np

from ..errors import CompressionSpecError
from .libraries import require_installed
from .spec import (BLOSC2_INNER, KNOWN_CODECS, LOSSLESS_CODECS, LOSSY_MODES, SHUFFLES, TEXT_MAX, CompressionSpec,
                   Lossless, Lossy)

__all__ = ["parse_compression", "parse_text", "parse_dict", "DEFAULT_LEVELS"]

#: Level (lz4: acceleration) of a lossless spec that names none.
DEFAULT_LEVELS = {"zstd": 3, "lz4": 1, "blosc2": 5}
_DEFAULT_SHUFFLE = {"zstd": "noshuffle", "lz4": "noshuffle", "blosc2": "shuffle"}
_SHUFFLE_ALIASES = {"none": "noshuffle", "byte": "shuffle", "bit": "bitshuffle"}
_LEVEL_KEY = {"zstd": "level", "lz4": "acceleration", "blosc2": "level"}
_LEVEL_RANGE = {"zstd": "1 to 22 (or a fast level -1 to -131072)", "lz4": "1 to 65537", "blosc2": "0 to 9"}
_FORMS = {"zstd": "zstd[:<level>[:<shuffle>]]", "lz4": "lz4[:<acceleration>[:<shuffle>]]",
          "blosc2": "blosc2[:<inner>[:<level>[:<shuffle>]]]", "zfp": "zfp:<tolerance|rate|precision>=<number>",
          "sz3": "sz3:<absolute|relative>=<number>"}
_LABELS = {"tolerance": "tolerance", "absolute": "absolute bound", "relative": "relative bound", "rate": "rate",
           "precision": "precision"}
_CHARS = re.compile(r"[A-Za-z0-9:=.+-]+")
_INT = re.compile(r"[-+]?[0-9]+")
_FLOAT = re.compile(r"[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")
_NONFINITE = ("nan", "inf", "infinity")


def parse_compression(value: object) -> CompressionSpec | None:
    """The compression spec a user asked for, checked and with its codec installed.

    Parameters
    ----------
    value : None, str, dict or CompressionSpec
        ``None`` (uncompressed, the default); a text such as ``"zstd"``, ``"zstd:3:shuffle"``,
        ``"lz4:1"``, ``"blosc2:zstd:5:bitshuffle"``, ``"zfp:tolerance=1e-3"``,
        ``"sz3:relative=1e-4"``; a dict such as ``{"codec": "zstd", "level": 3, "shuffle":
        "byte"}`` or ``{"codec": "zfp", "rate": 8}``; or a spec (given back as is).

    Returns
    -------
    CompressionSpec or None
        The spec (``parse_compression(spec.text) == spec``), or ``None``.

    Raises
    ------
    CompressionSpecError
        For an unknown codec (the message lists the known ones), a malformed text, an
        unknown dict key, a value of the wrong type or out of range, or a codec whose
        package is not installed (the message says which to install).
    """
    if value is None:
        return None
    if isinstance(value, CompressionSpec):
        spec = value
    elif isinstance(value, str):
        spec = parse_text(value)
    elif isinstance(value, Mapping):
        spec = parse_dict(value)
    else:
        raise CompressionSpecError(f"compression is None, a str such as 'zstd:3' or a dict such as {{'codec': 'zfp', "
                                   f"'tolerance': 0.001}}; got {type(value).__name__}")
    require_installed(spec)
    return spec


def parse_text(text: str) -> CompressionSpec:
    """The spec a text names (the grammar of :mod:`sdm.codecs.spec`), installed or not.

    Raises
    ------
    CompressionSpecError
        For a text that is empty, too long, holds other characters or is not of the grammar.
    """
    if not text:
        raise CompressionSpecError(f"compression text is empty; known codecs: {_known()}")
    if len(text) > TEXT_MAX:
        raise CompressionSpecError(f"compression text is at most {TEXT_MAX} characters; got {len(text)}")
    if not _CHARS.fullmatch(text):
        raise CompressionSpecError(f"compression text {text!r} holds characters other than letters, digits and "
                                   "':', '=', '.', '+', '-'")
    name, _, rest = text.partition(":")
    _known_name(name)
    fields = rest.split(":") if rest else []
    if "" in fields or text.endswith(":"):
        raise CompressionSpecError(f"compression text {text!r} has an empty field; write {_FORMS[name]!r}")
    if name in LOSSLESS_CODECS:
        inner = None
        if name == "blosc2":
            inner, fields = (fields[0] if fields else "zstd"), fields[1:]
        if len(fields) > 2:
            raise CompressionSpecError(f"compression {name!r} is written {_FORMS[name]!r}; got {text!r}")
        level = _int_text(fields[0], name, _LEVEL_KEY[name]) if fields else DEFAULT_LEVELS[name]
        return lossless(name, level, fields[1] if len(fields) > 1 else _DEFAULT_SHUFFLE[name], inner)
    if not fields:
        raise CompressionSpecError(_needs_bound(name))
    if len(fields) > 1:
        raise CompressionSpecError(f"compression {name!r} is written {_FORMS[name]!r} (one bound); got {text!r}")
    mode, eq, number = fields[0].partition("=")
    if not eq:
        raise CompressionSpecError(f"compression {name!r} is written {_FORMS[name]!r}; got {text!r}")
    _known_mode(name, mode)
    if mode == "precision":
        return lossy(name, mode, _int_text(number, name, mode))
    return lossy(name, mode, _float_text(number, name, mode))


def parse_dict(value: Mapping[object, object]) -> CompressionSpec:
    """The spec a dict names: ``"codec"`` and the codec's own keys, installed or not.

    Keys: ``zstd``: ``level``, ``shuffle``; ``lz4``: ``acceleration``, ``shuffle``;
    ``blosc2``: ``inner``, ``level``, ``shuffle``; ``zfp``: one of ``tolerance``,
    ``rate``, ``precision``; ``sz3``: one of ``absolute``, ``relative``.

    Raises
    ------
    CompressionSpecError
        For a missing or unknown codec, an unknown key, a value of the wrong type or out of range.
    """
    for key in value:
        if not isinstance(key, str):
            raise CompressionSpecError(f"the keys of a compression dict are str; got {key!r}")
    if "codec" not in value:
        raise CompressionSpecError(f"a compression dict needs 'codec' (one of {_known()}); got keys {_keys(value)}")
    name = value["codec"]
    if not isinstance(name, str):
        raise CompressionSpecError(f"the 'codec' of a compression dict is a str (one of {_known()}); got "
                                   f"{type(name).__name__}")
    _known_name(name)
    allowed: tuple[str, ...]
    if name in LOSSLESS_CODECS:
        allowed = ("codec", "inner", "level", "shuffle") if name == "blosc2" else ("codec", _LEVEL_KEY[name], "shuffle")
    else:
        allowed = ("codec", *LOSSY_MODES[name])
    extra = sorted(k for k in value if k not in allowed)  # type: ignore[type-var]  # keys were checked to be str
    if extra:
        raise CompressionSpecError(f"compression {name!r} takes the keys {', '.join(map(repr, allowed))}; got "
                                   f"{', '.join(map(repr, extra))}")
    if name in LOSSLESS_CODECS:
        level_key = _LEVEL_KEY[name]
        level = _int_value(value[level_key], name, level_key) if level_key in value else DEFAULT_LEVELS[name]
        shuffle = _str_value(value.get("shuffle", _DEFAULT_SHUFFLE[name]), name, "shuffle")
        inner = _str_value(value.get("inner", "zstd"), name, "inner") if name == "blosc2" else None
        return lossless(name, level, shuffle, inner)
    modes = [m for m in LOSSY_MODES[name] if m in value]
    if not modes:
        raise CompressionSpecError(_needs_bound(name))
    if len(modes) > 1:
        raise CompressionSpecError(f"compression {name!r} takes one bound; got {' and '.join(map(repr, modes))}")
    mode = modes[0]
    if mode == "precision":
        return lossy(name, mode, _int_value(value[mode], name, mode))
    return lossy(name, mode, _real_value(value[mode], name, mode))


def lossless(name: str, level: int, shuffle: str, inner: str | None) -> Lossless:
    """A checked :class:`Lossless` (*shuffle* may be an alias: ``none``, ``byte``, ``bit``)."""
    shuffle = _SHUFFLE_ALIASES.get(shuffle, shuffle)
    if shuffle not in SHUFFLES:
        raise CompressionSpecError(f"the shuffle of {name!r} is 'noshuffle', 'shuffle' or 'bitshuffle' ('none', "
                                   f"'byte', 'bit' also do); got {shuffle!r}")
    if name == "blosc2":
        if inner not in BLOSC2_INNER:
            raise CompressionSpecError(f"the inner codec of 'blosc2' is one of {', '.join(map(repr, BLOSC2_INNER))}; "
                                       f"got {inner!r}")
        ok = 0 <= level <= 9
    else:
        if shuffle == "bitshuffle":
            raise CompressionSpecError(f"bitshuffle with {name!r} needs blosc2: write "
                                       f"'blosc2:{name}:<level 0-9>:bitshuffle'")
        ok = (1 <= level <= 22 or -131072 <= level <= -1) if name == "zstd" else 1 <= level <= 65537
    if not ok:
        raise CompressionSpecError(f"the {_LEVEL_KEY[name]} of {name!r} is {_LEVEL_RANGE[name]}; got {level}")
    return Lossless(name, int(level), shuffle, inner)


def lossy(name: str, mode: str, value: float) -> Lossy:
    """A checked :class:`Lossy` (the bound finite, positive and in its mode's range)."""
    label = _LABELS[mode]
    if mode == "precision":
        if not 1 <= value <= 64:
            raise CompressionSpecError(f"the precision of {name!r} is a number of bit planes from 1 to 64; got {value}")
    elif not math.isfinite(value) or value <= 0:
        raise CompressionSpecError(f"the {label} of {name!r} is a positive finite number; got {value!r}")
    elif mode == "relative" and value >= 1:
        raise CompressionSpecError(f"the relative bound of {name!r} is a fraction of the value range, below 1; "
                                   f"got {value!r}")
    elif mode == "rate" and value > 64:
        raise CompressionSpecError(f"the rate of {name!r} is a number of bits per value, at most 64; got {value!r}")
    return Lossy(name, mode, float(value))


def _known() -> str:
    return ", ".join(map(repr, KNOWN_CODECS))


def _keys(value: Mapping[object, object]) -> str:
    return ", ".join(map(repr, value)) or "none"


def _known_name(name: str) -> None:
    if name not in KNOWN_CODECS:
        raise CompressionSpecError(f"unknown compression {name!r}; known: {_known()}")


def _known_mode(name: str, mode: str) -> None:
    if mode not in LOSSY_MODES[name]:
        raise CompressionSpecError(f"compression {name!r} takes one of {', '.join(map(repr, LOSSY_MODES[name]))}; "
                                   f"got {mode!r}")


def _needs_bound(name: str) -> str:
    forms = [f"'{name}:{mode}=<number>'" for mode in LOSSY_MODES[name]]
    return f"compression {name!r} needs a bound: {', '.join(forms[:-1])} or {forms[-1]}"


def _int_text(field: str, name: str, what: str) -> int:
    if not _INT.fullmatch(field):
        raise CompressionSpecError(f"the {_LABELS.get(what, what)} of {name!r} is an integer; got {field!r}")
    return int(field)


def _float_text(field: str, name: str, what: str) -> float:
    if not (_FLOAT.fullmatch(field) or field.lower().lstrip("+-") in _NONFINITE):
        raise CompressionSpecError(f"the {_LABELS[what]} of {name!r} is a number; got {field!r}")
    return float(field)


def _int_value(value: object, name: str, what: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise CompressionSpecError(f"the {_LABELS.get(what, what)} of {name!r} is an int; got "
                                   f"{type(value).__name__}")
    return int(value)


def _real_value(value: object, name: str, what: str) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise CompressionSpecError(f"the {_LABELS[what]} of {name!r} is a number; got {type(value).__name__}")
    try:
        return float(value)
    except OverflowError:  # an int beyond any float: out of every range
        return math.inf


def _str_value(value: object, name: str, what: str) -> str:
    if not isinstance(value, str):
        raise CompressionSpecError(f"the {what} of {name!r} is a str; got {type(value).__name__}")
    return value
