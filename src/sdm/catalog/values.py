"""Typed attribute values and the conditions used to find data by them."""

from __future__ import annotations

import math
import operator
import re
from typing import Any, Callable

import numpy as np

from ..errors import InvalidNameError

__all__ = ["encode", "decode", "Condition", "parse_condition"]

_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "=": operator.eq,
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


def encode(key: str, value: Any) -> tuple[str, float | None, str]:
    """Return ``(value_type, value_num, value_str)`` for storing an attribute.

    Raises
    ------
    InvalidNameError
        The key is empty or the value is not a bool, int, float or str.
    """
    if not isinstance(key, str) or not key.strip():
        raise InvalidNameError(f"attribute key must be a non-empty string, got {key!r}")
    if isinstance(value, np.generic):  # numpy scalars (np.float64 is also a float)
        value = value.item()
    if isinstance(value, bool):
        return "bool", float(value), "true" if value else "false"
    if isinstance(value, int):
        return "int", float(value), str(value)
    if isinstance(value, float):
        if math.isnan(value):
            raise InvalidNameError(f"attribute {key!r}: NaN cannot be stored or searched")
        return "float", value, repr(value)
    if isinstance(value, str):
        return "str", None, value
    raise InvalidNameError(
        f"attribute {key!r}: value {value!r} of type {type(value).__name__} is not "
        "supported; use bool, int, float or str"
    )


def decode(value_type: str, value_num: float | None, value_str: str) -> Any:
    """Inverse of :func:`encode`."""
    if value_type == "bool":
        return value_str == "true"
    if value_type == "int":
        return int(value_str)
    if value_type == "float":
        return float(value_str)
    return value_str


def _coerce(text: str) -> Any:
    """Interpret command-line text as int, float, bool or str (in that order)."""
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    if text.lower() in {"true", "false"}:
        return text.lower() == "true"
    return text


class Condition:
    """``key <op> value``; numbers compare as numbers, everything else as text."""

    __slots__ = ("key", "op", "value")

    def __init__(self, key: str, op: str, value: Any) -> None:
        if op not in _OPS:
            raise InvalidNameError(f"unknown comparison {op!r}; use one of {sorted(_OPS)}")
        encode(key, value)  # validates
        self.key, self.op, self.value = key, op, value

    def matches(self, stored: Any) -> bool:
        """Whether a stored (decoded) value satisfies the condition."""
        numeric = (int, float)
        if isinstance(self.value, numeric) and not isinstance(self.value, bool):
            if not isinstance(stored, numeric) or isinstance(stored, bool):
                return False
        elif type(stored) is not type(self.value):
            return False
        try:
            return bool(_OPS[self.op](stored, self.value))
        except TypeError:
            return False

    def __repr__(self) -> str:
        return f"{self.key}{self.op}{self.value!r}"


_COND = re.compile(r"^\s*([^=!<>\s]+)\s*(==|!=|<=|>=|=|<|>)\s*(.*?)\s*$")


def parse_condition(text: str) -> Condition:
    """Parse ``key=value``, ``key>=3`` ... as typed on the command line.

    Raises
    ------
    InvalidNameError
        The text is not of the form ``key<op>value``.
    """
    m = _COND.match(text)
    if not m:
        raise InvalidNameError(
            f"cannot read condition {text!r}; write key=value (or key>=value, key<value, ...)"
        )
    key, op, raw = m.groups()
    return Condition(key, op, _coerce(raw))


def conditions_from(attrs: dict[str, Any] | None) -> list[Condition]:
    """Turn ``{key: value}`` or ``{key: (op, value)}`` into conditions."""
    out = []
    for key, val in (attrs or {}).items():
        if isinstance(val, tuple) and len(val) == 2 and val[0] in _OPS:
            out.append(Condition(key, val[0], val[1]))
        else:
            out.append(Condition(key, "=", val))
    return out
