"""Checks of the arguments users hand to SDM, each refusing a bad value with a clear error.

Every public entry point checks its arguments here before anything collective or
anything that touches the catalog or a file, so a bad input is an
:class:`~sdm.errors.InvalidArgumentError` (or :class:`~sdm.errors.HintError`, ...)
saying what was expected, never a ``TypeError`` from deep inside. numpy integer and
boolean scalars are accepted wherever Python ones are.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from os import PathLike
from typing import Any

import numpy as np

from .errors import HintError, InvalidArgumentError

__all__ = [
    "MAX_INT",
    "MAX_BYTES",
    "integer",
    "flag",
    "optional_flag",
    "shape",
    "names",
    "mapping",
    "text",
    "path",
    "hints",
    "int_list",
]

#: Largest integer SDM stores (a signed 64-bit catalog column).
MAX_INT = 2**63 - 1
#: Largest array (or local array) in bytes SDM accepts: 2**53 (8 PiB), so byte offsets stay exact.
MAX_BYTES = 2**53


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def integer(value: Any, what: str, *, minimum: int | None = 0, maximum: int = MAX_INT) -> int:
    """*value* as a Python int (ints and numpy integers; never bool, float or str).

    Raises
    ------
    InvalidArgumentError
        Not an integer, or outside ``minimum..maximum``.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise InvalidArgumentError(f"{what} must be an integer, got {type(value).__name__} {_show(value)}")
    out = int(value)
    if (minimum is not None and out < minimum) or out > maximum:
        low = "" if minimum is None else f" >= {minimum}"
        raise InvalidArgumentError(f"{what} must be an integer{low} and <= {maximum}, got {out}")
    return out


def flag(value: Any, what: str) -> bool:
    """*value* as a bool (``True``/``False`` or a numpy bool).

    Raises
    ------
    InvalidArgumentError
    """
    if not isinstance(value, (bool, np.bool_)):
        raise InvalidArgumentError(f"{what} must be True or False, got {type(value).__name__} {_show(value)}")
    return bool(value)


def optional_flag(value: Any, what: str) -> bool | None:
    """``None`` or a bool (see :func:`flag`)."""
    return None if value is None else flag(value, what)


def int_list(value: Any, what: str, *, minimum: int = 0, maximum: int = MAX_INT) -> tuple[int, ...]:
    """A sequence (list, tuple, 1-D integer array) of integers as a tuple.

    Raises
    ------
    InvalidArgumentError
        A string, a mapping, a scalar or an item that is not an integer in range.
    """
    if isinstance(value, np.ndarray):
        if value.ndim != 1 or not (value.size == 0 or np.issubdtype(value.dtype, np.integer)):
            raise InvalidArgumentError(f"{what} must be a sequence of integers, got an array of {value.dtype} "
                                       f"and shape {value.shape}")
        value = value.tolist()
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence):
        raise InvalidArgumentError(f"{what} must be a sequence of integers (a tuple or list), "
                                   f"got {type(value).__name__} {_show(value)}")
    return tuple(integer(v, f"{what}[{i}]", minimum=minimum, maximum=maximum) for i, v in enumerate(value))


def shape(value: Any, what: str = "shape") -> tuple[int, ...]:
    """A global shape: a sequence of integers >= 0 (an int alone means one dimension).

    Raises
    ------
    InvalidArgumentError
        A string (``"44"`` is not ``(4, 4)``), a negative extent, or more elements than
        SDM can address.
    """
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        value = (value,)
    out = int_list(value, what, minimum=0)
    if len(out) > 32:
        raise InvalidArgumentError(f"{what} {out} has {len(out)} dimensions; numpy and MPI allow at most 32")
    total = 1
    for n in out:
        total *= n
    if total > MAX_BYTES:
        raise InvalidArgumentError(f"{what} {out} has {total} elements; SDM arrays hold at most {MAX_BYTES}")
    return out


def names(value: Any, what: str) -> list[Any]:
    """A sequence of names (not a string: ``"abc"`` is one name, not three).

    The items are returned as they are; their own checks (strings, known datasets) follow.

    Raises
    ------
    InvalidArgumentError
    """
    if isinstance(value, (str, bytes)):
        raise InvalidArgumentError(f"{what} must be a list or tuple of names, got the string {_show(value)}; "
                                   f"write [{value!r}] for one name")
    if isinstance(value, (Mapping, set, frozenset)) or not isinstance(value, (Sequence, np.ndarray)):
        raise InvalidArgumentError(f"{what} must be a list or tuple of names, got {type(value).__name__} {_show(value)}")
    return list(value)


def mapping(value: Any, what: str, *, optional: bool = True) -> dict[Any, Any]:
    """A mapping (dict) or, when *optional*, ``None`` (an empty dict).

    Raises
    ------
    InvalidArgumentError
    """
    if value is None and optional:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidArgumentError(f"{what} must be a dict, got {type(value).__name__} {_show(value)}")
    return dict(value)


def text(value: Any, what: str, *, optional: bool = False, choices: Sequence[str] | None = None) -> str | None:
    """A string (or ``None`` when *optional*), one of *choices* when given.

    Raises
    ------
    InvalidArgumentError
    """
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{what} must be a string, got {type(value).__name__} {_show(value)}")
    if choices is not None and value not in choices:
        raise InvalidArgumentError(f"{what} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return value


def path(value: Any, what: str, *, optional: bool = False) -> str | None:
    """A file-system path (str or os.PathLike) as a string, or ``None`` when *optional*.

    Raises
    ------
    InvalidArgumentError
        Not a path, empty or holding a NUL character.
    """
    if value is None and optional:
        return None
    if not isinstance(value, (str, PathLike)):
        raise InvalidArgumentError(f"{what} must be a path (str or pathlib.Path), got {type(value).__name__} {_show(value)}")
    out = str(value.__fspath__() if isinstance(value, PathLike) else value)
    if not isinstance(out, str) or not out or "\0" in out:
        raise InvalidArgumentError(f"{what} must be a non-empty path without NUL characters, got {_show(value)}")
    return out


def hints(value: Any, what: str = "hints") -> dict[str, str]:
    """MPI-IO and SDM hints: a dict of str -> str (as ``MPI_Info`` holds them).

    Raises
    ------
    HintError
        Not a dict, a key that is not a non-empty string, or a value that is not a string
        or holds a NUL character.
    """
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise HintError(f"{what} must be a dict of str to str, got {type(value).__name__} {_show(value)}")
    out: dict[str, str] = {}
    for key, val in value.items():
        if not isinstance(key, str) or not key or "\0" in key or "=" in key or len(key) > 255:
            raise HintError(f"{what}: key {_show(key)} must be a non-empty string (at most 255 characters, no NUL or '=')")
        if not isinstance(val, str):
            raise HintError(f"{what}: the value of {key!r} must be a string (write {str(val)!r}), "
                            f"got {type(val).__name__} {_show(val)}")
        if "\0" in val or len(val) > 1024:
            raise HintError(f"{what}: the value of {key!r} must be a string of at most 1024 characters without NUL")
        out[key] = val
    return out
