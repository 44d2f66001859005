"""Typed attribute values and the conditions used to find data by them.

What an attribute may be
------------------------
The same limits hold on SQLite and PostgreSQL, and everything outside them is refused
with :class:`~sdm.errors.InvalidArgumentError` *before* anything is written or queried:

* **key**: a non-empty ``str`` of at most :data:`MAX_KEY_LENGTH` (255) characters, no NUL
  character, encodable as UTF-8 (no lone surrogates).
* **value**: one scalar, ``bool``, ``int``, ``float`` or ``str``; numpy scalars
  (``np.int64``, ``np.float32``, ``np.bool_``, ``np.str_`` ...) are taken as the Python
  value they hold, so storing or searching ``np.int64(64)`` is the same as ``64``.

  - ``int`` within the signed 64-bit range ``[-2**63, 2**63 - 1]`` (what numpy and SQL
    ``BIGINT`` hold; equality stays exact because the decimal text is what is compared);
  - ``float`` of double precision; ``inf`` and ``-inf`` are allowed, **NaN is refused**
    (it equals nothing, so it could be stored but never found again);
  - ``str`` without NUL characters, encodable as UTF-8, at most
    :data:`MAX_VALUE_BYTES` (1024) bytes in UTF-8 (the catalog indexes ``(key, value)``
    and PostgreSQL refuses index entries above about 2.7 kB).

  Lists, tuples, arrays (0-d included), ``None``, bytes, complex numbers, dates and
  other objects are refused: store them as a string if they must be searchable.
"""

from __future__ import annotations

import math
import operator
import sys
from collections.abc import Mapping
from typing import Any, Callable

from .errors import InvalidArgumentError, QuerySyntaxError


def loaded_numpy() -> Any:
    """numpy when it is loaded, else None (nothing is a numpy scalar before numpy is imported).

    Lets the catalog accept numpy scalars without importing numpy itself (``sdm ls``). While another
    thread is still importing numpy, ``sys.modules`` already holds the half-initialized module; the
    import statement then waits for that thread to finish, so callers never see a numpy without
    ``bool_``.
    """
    if "numpy" not in sys.modules:
        return None
    import numpy  # returns at once when loaded; waits while another thread is importing it

    return numpy

__all__ = [
    "conditions_of",
    "encode",
    "encode_all",
    "merge_attributes",
    "decode",
    "normalize",
    "check_key",
    "Condition",
    "parse_condition",
    "conditions_from",
    "MAX_KEY_LENGTH",
    "MAX_VALUE_BYTES",
    "INT_MIN",
    "INT_MAX",
]

MAX_KEY_LENGTH = 255
MAX_VALUE_BYTES = 1024
INT_MIN, INT_MAX = -(2**63), 2**63 - 1

_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "=": operator.eq,
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}

_SUPPORTED = "use bool, int, float or str"


def _short_repr(value: Any, limit: int = 60) -> str:
    """``repr`` cut to *limit* characters, so a huge bad value does not flood the message."""
    try:
        text = repr(value)
    except Exception:  # a broken __repr__ must not hide the real error
        text = f"<{type(value).__name__} object>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _utf8_error(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def check_key(key: Any) -> str:
    """Return *key* as a plain ``str`` if it can name an attribute.

    Raises
    ------
    InvalidArgumentError
        Not a string, empty, longer than 255 characters, holds a NUL character or
        cannot be encoded as UTF-8.
    """
    if not isinstance(key, str) or not key.strip():
        raise InvalidArgumentError(f"attribute key must be a non-empty string, got {_short_repr(key)}")
    key = str(key)  # np.str_ and other str subclasses become plain str
    if len(key) > MAX_KEY_LENGTH:
        raise InvalidArgumentError(
            f"attribute key {_short_repr(key)} has {len(key)} characters; "
            f"keys have at most {MAX_KEY_LENGTH}"
        )
    if "\x00" in key:
        raise InvalidArgumentError(f"attribute key {key!r} holds a NUL character; keys are text without NUL")
    if _utf8_error(key):
        raise InvalidArgumentError(
            f"attribute key {key!r} cannot be encoded as UTF-8 (lone surrogate); keys are valid Unicode text"
        )
    return key


def normalize(key: str, value: Any) -> bool | int | float | str:
    """Return *value* as the plain Python scalar SDM stores for attribute *key*.

    numpy scalars become the Python value they hold; subclasses of ``bool``, ``int``,
    ``float`` and ``str`` become those types.

    Raises
    ------
    InvalidArgumentError
        The value is not a scalar of a supported type or is outside the limits in the
        module docstring (int64 range, NaN, NUL, 1024 UTF-8 bytes).
    """
    original = value
    np = loaded_numpy()
    if np is not None and isinstance(value, np.generic):
        if isinstance(value, np.floating) and value.dtype.itemsize > 8:
            as_float = float(value)  # long double: keep it only if float64 holds it
            if math.isinf(as_float) and not np.isinf(value):
                raise InvalidArgumentError(
                    f"attribute {key!r}: value {_short_repr(value)} is outside the float64 range; "
                    "floats are stored in double precision"
                )
            value = as_float
        else:
            value = value.item()  # np.int64 -> int, np.float32 -> float, np.bool_ -> bool, np.str_ -> str
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        value = int(value)
        if not INT_MIN <= value <= INT_MAX:
            raise InvalidArgumentError(
                f"attribute {key!r}: integer {_short_repr(value)} is outside the signed 64-bit range "
                f"[{INT_MIN}, {INT_MAX}]; store it as a string (or a float) instead"
            )
        return value
    if isinstance(value, float):
        value = float(value)
        if math.isnan(value):
            raise InvalidArgumentError(
                f"attribute {key!r}: NaN cannot be stored or searched (it equals nothing); "
                "use a finite number, inf, or a string such as 'nan'"
            )
        return value
    if isinstance(value, str):
        value = str(value)
        if "\x00" in value:
            raise InvalidArgumentError(
                f"attribute {key!r}: string value holds a NUL character; strings are text without NUL"
            )
        if _utf8_error(value):
            raise InvalidArgumentError(
                f"attribute {key!r}: string value cannot be encoded as UTF-8 (lone surrogate); "
                "strings are valid Unicode text"
            )
        nbytes = len(value.encode("utf-8"))
        if nbytes > MAX_VALUE_BYTES:
            raise InvalidArgumentError(
                f"attribute {key!r}: string value has {nbytes} bytes in UTF-8; "
                f"string values have at most {MAX_VALUE_BYTES}"
            )
        return value
    raise InvalidArgumentError(
        f"attribute {key!r}: value {_short_repr(original)} of type {type(original).__name__} "
        f"is not supported; {_SUPPORTED}"
    )


def encode(key: str, value: Any) -> tuple[str, float | None, str]:
    """Return ``(value_type, value_num, value_str)`` for storing an attribute.

    Raises
    ------
    InvalidArgumentError
        The key or the value is outside the limits in the module docstring.
    """
    key = check_key(key)
    value = normalize(key, value)
    if isinstance(value, bool):
        return "bool", float(value), "true" if value else "false"
    if isinstance(value, int):
        return "int", float(value), str(value)
    if isinstance(value, float):
        return "float", value, repr(value)
    return "str", None, value


def encode_all(attributes: Any) -> list[tuple[str, str, float | None, str]]:
    """Validate and encode a whole ``{key: value}`` mapping: ``[(key, type, num, str), ...]``.

    Everything is checked before anything is returned, so a caller that stores the result
    stores all of it or (on error) none of it.

    Raises
    ------
    InvalidArgumentError
        *attributes* is not a mapping, or a key or value is refused (see :func:`encode`).
    """
    if attributes is None:
        return []
    if not isinstance(attributes, Mapping):
        raise InvalidArgumentError(
            f"attributes must be a dict of {{key: value}}, got {type(attributes).__name__}"
        )
    return [(check_key(k), *encode(k, v)) for k, v in attributes.items()]


def merge_attributes(attributes: Any, extra: Mapping[str, Any]) -> dict[str, Any]:
    """``{**attributes, **extra}`` for ``set_attributes(attributes, **extra)``.

    Raises
    ------
    InvalidArgumentError
        *attributes* is neither ``None`` nor a mapping.
    """
    if attributes is not None and not isinstance(attributes, Mapping):
        raise InvalidArgumentError(
            f"attributes must be a dict of {{key: value}}, got {type(attributes).__name__}"
        )
    return {**(attributes or {}), **extra}


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
    """Interpret command-line text as int, float, bool or str (in that order).

    ``nan`` stays text (a NaN could never match); an integer outside int64 is refused
    later with the limits' message, like any other value.
    """
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        pass
    else:
        if not math.isnan(value):
            return value
    if text.lower() in {"true", "false"}:
        return text.lower() == "true"
    return text


class Condition:
    """``key <op> value``; numbers compare as numbers, everything else as text.

    The value is normalized like a stored one (numpy scalars become Python values), so
    ``Condition("nx", "=", np.int64(64))`` matches a stored ``64``.

    Raises
    ------
    InvalidArgumentError
        Unknown operator, or a key or value outside the limits of :func:`encode`.
    """

    __slots__ = ("key", "op", "value")

    def __init__(self, key: str, op: str, value: Any) -> None:
        if not isinstance(op, str) or op not in _OPS:
            raise InvalidArgumentError(f"unknown comparison {_short_repr(op)}; use one of {sorted(_OPS)}")
        key = check_key(key)
        self.key, self.op, self.value = key, op, normalize(key, value)

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


#: The comparisons, longest first (``<=`` is read before ``<``)
_COMPARISONS = ("==", "!=", "<=", ">=", "=", "<", ">")
_OP_CHARS = "=!<>"
_HOW = "write key=value (or key>=value, key<value, ...)"


def parse_condition(text: str) -> Condition:
    """Parse ``key=value``, ``key>=3`` ... as typed on the command line.

    The key runs up to the comparison (no space, ``=``, ``!``, ``<`` or ``>`` in it); the
    value is the rest, without the spaces around it, and may not start with one of
    ``= ! < >`` (``nx>>32`` and ``nx=<3`` are typing errors, not values).

    Raises
    ------
    QuerySyntaxError
        The text is not of the form ``key<op>value``; its ``position`` is where reading
        stopped.
    InvalidArgumentError
        Not a string, or the key or value is refused (see :func:`encode`).
    """
    if not isinstance(text, str):
        raise InvalidArgumentError(f"cannot read condition {_short_repr(text)}; {_HOW}")

    def refuse(position: int, what: str) -> QuerySyntaxError:
        where = "at its end" if position >= len(text) else f"at character {position + 1}"
        return QuerySyntaxError(f"cannot read condition {_short_repr(text)} {where}: {what}; {_HOW}", text, position)

    def spaces(i: int) -> int:
        while i < len(text) and text[i].isspace():
            i += 1
        return i

    start = i = spaces(0)
    while i < len(text) and text[i] not in _OP_CHARS and not text[i].isspace():
        i += 1
    key = text[start:i]
    if not key:
        raise refuse(i, "no attribute name" if i >= len(text) else "no attribute name before the comparison")
    j = spaces(i)
    op = next((c for c in _COMPARISONS if text.startswith(c, j)), None)
    if op is None:
        if j >= len(text):
            raise refuse(j, f"no comparison after {key!r}")
        raise refuse(j, f"{text[j]!r} where a comparison (= == != < <= > >=) should be")
    k = spaces(j + len(op))
    if k < len(text) and text[k] in _OP_CHARS:
        raise refuse(k, f"a value cannot start with {text[k]!r} (after the comparison {op!r})")
    return Condition(key, op, _coerce(text[k:].strip()))


def conditions_from(attrs: Any) -> list[Condition]:
    """Turn ``{key: value}`` or ``{key: (op, value)}`` into conditions.

    Raises
    ------
    InvalidArgumentError
        *attrs* is not a mapping, or an entry is refused by :class:`Condition`.
    """
    if attrs is None:
        return []
    if not isinstance(attrs, Mapping):
        raise InvalidArgumentError(
            f"attributes must be a dict of {{key: value}} or {{key: (op, value)}}, got {type(attrs).__name__}"
        )
    out = []
    for key, val in attrs.items():
        if isinstance(val, tuple) and len(val) == 2 and isinstance(val[0], str) and val[0] in _OPS:
            out.append(Condition(key, val[0], val[1]))
        else:
            out.append(Condition(key, "=", val))
    return out


def conditions_of(where: Any) -> list[Condition]:
    """Conditions from what a caller wrote: None, ``"key=value"`` text (``"nx>=32"``), a
    sequence of such texts or :class:`Condition` objects, or a dict as :func:`conditions_from` takes.

    Raises
    ------
    InvalidArgumentError
        Anything else, or a condition that does not read.
    """
    if where is None:
        return []
    if isinstance(where, Mapping):
        return conditions_from(where)
    if isinstance(where, (str, Condition)):
        where = [where]
    try:
        items = list(where)
    except TypeError:
        raise InvalidArgumentError(f"conditions must be 'key=value' texts or a dict, got {_short_repr(where)}") from None
    return [w if isinstance(w, Condition) else parse_condition(w) for w in items]
