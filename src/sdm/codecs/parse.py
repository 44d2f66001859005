"""From what a user writes (``"zstd:3"``, ``{"codec": "zfp", "tolerance": 1e-3}``) to a :class:`CompressionSpec`.

Every refusal is a :class:`~sdm.errors.CompressionSpecError` whose message says what
was expected.  Texts follow the grammar of :mod:`sdm.codecs.spec`; dicts name the same
fields by key (:func:`parse_dict`), with the same defaults.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from ..errors import CompressionSpecError
from .libraries import require_installed
from .spec import (DEFAULT_LEVELS, DEFAULT_SHUFFLE, LABELS, LEVEL_KEY, LOSSLESS_CODECS, LOSSY_MODES, CompressionSpec,
                   known_codecs, known_name, make_lossless, make_lossy, needs_bound, parse_text)

__all__ = ["parse_compression", "parse_dict"]


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
        raise CompressionSpecError(f"a compression dict needs 'codec' (one of {known_codecs()}); got keys "
                                   f"{_keys(value)}")
    name = value["codec"]
    if not isinstance(name, str):
        raise CompressionSpecError(f"the 'codec' of a compression dict is a str (one of {known_codecs()}); got "
                                   f"{type(name).__name__}")
    known_name(name)
    allowed: tuple[str, ...]
    if name in LOSSLESS_CODECS:
        allowed = ("codec", "inner", "level", "shuffle") if name == "blosc2" else ("codec", LEVEL_KEY[name], "shuffle")
    else:
        allowed = ("codec", *LOSSY_MODES[name])
    extra = sorted(k for k in value if k not in allowed)  # type: ignore[type-var]  # keys were checked to be str
    if extra:
        raise CompressionSpecError(f"compression {name!r} takes the keys {', '.join(map(repr, allowed))}; got "
                                   f"{', '.join(map(repr, extra))}")
    if name in LOSSLESS_CODECS:
        level_key = LEVEL_KEY[name]
        level = _int_value(value[level_key], name, level_key) if level_key in value else DEFAULT_LEVELS[name]
        shuffle = _str_value(value.get("shuffle", DEFAULT_SHUFFLE[name]), name, "shuffle")
        inner = _str_value(value.get("inner", "zstd"), name, "inner") if name == "blosc2" else None
        return make_lossless(name, level, shuffle, inner)
    modes = [m for m in LOSSY_MODES[name] if m in value]
    if not modes:
        raise CompressionSpecError(needs_bound(name))
    if len(modes) > 1:
        raise CompressionSpecError(f"compression {name!r} takes one bound; got {' and '.join(map(repr, modes))}")
    mode = modes[0]
    if mode == "precision":
        return make_lossy(name, mode, _int_value(value[mode], name, mode))
    return make_lossy(name, mode, _real_value(value[mode], name, mode))


def _keys(value: Mapping[object, object]) -> str:
    return ", ".join(map(repr, value)) or "none"


def _int_value(value: object, name: str, what: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise CompressionSpecError(f"the {LABELS.get(what, what)} of {name!r} is an int; got "
                                   f"{type(value).__name__}")
    return int(value)


def _real_value(value: object, name: str, what: str) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise CompressionSpecError(f"the {LABELS[what]} of {name!r} is a number; got {type(value).__name__}")
    try:
        return float(value)
    except OverflowError:  # an int beyond any float: out of every range
        return math.inf


def _str_value(value: object, name: str, what: str) -> str:
    if not isinstance(value, str):
        raise CompressionSpecError(f"the {what} of {name!r} is a str; got {type(value).__name__}")
    return value
