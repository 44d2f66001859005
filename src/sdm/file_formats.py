"""The files SDM reads back, parsed by one checked reader.

Data-file trailers (:mod:`sdm.storage.trailer`, superfile indexes included), meta-file
records (:mod:`sdm.catalog.metafile`) and index-history descriptions (same line format),
run markers ``.sdm-run`` (:mod:`sdm.storage.runs`) and the indexes of the remote subfile
cache (:mod:`sdm.io.remote`) travel with the data: copied trees, restored archives,
files mailed alone.  They are input, never trusted state, so every one of them is read
here, in three stages:

1. **bytes to JSON** (:func:`load_json`): strict UTF-8; the nesting depth is measured by
   a linear scan of the text (strings skipped) and refused above :data:`MAX_DEPTH`
   *before* the parser sees it, so no recursion grows with the input;
2. **schema** (:class:`Record`, :class:`Seq`, :class:`Int`, ...): declarative
   descriptions of every member (type, range, length, allowed values; dtypes only those
   SDM stores, never Python objects), checked in one pass that returns the value;
3. **bounds**: every offset and length is checked against the real size of the file it
   points into, and every shape's bytes against that size (or against
   :data:`sdm._validate.MAX_BYTES` where the bytes lie in other files), before anything
   is read or allocated.

Every failure is an :class:`~sdm.errors.IntegrityError` whose message names the file
(and the line, for a meta-file), the field (``writes[3].nbytes``), what was expected and
what was found, and says what to do.  Memory stays linear in the size of the file read.

Nothing here imports numpy or SQLAlchemy at module load: a run marker is read by
commands that need neither.
"""

from __future__ import annotations

import base64
import binascii
import errno
import json
import math
import os
import re
import stat
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, Iterable, Mapping

from .errors import IntegrityError, SDMError

__all__ = [
    "MAX_DEPTH",
    "Where",
    "load_json",
    "load_object",
    "open_regular",
    "read_regular",
    "Schema",
    "Int",
    "Num",
    "Bool",
    "Text",
    "Name",
    "Time",
    "Hex",
    "Base64",
    "DType",
    "Shape",
    "JSON",
    "Maybe",
    "Seq",
    "Tuple",
    "Table",
    "Record",
    "array_bytes",
    "check_trailer",
    "TRAILER",
    "SUPERFILE",
    "META_RECORDS",
    "check_meta_record",
    "check_meta_log",
    "HISTORY",
    "check_history",
    "MARKER",
    "CACHE_INDEX",
    "check_cache_index",
]

#: Deepest JSON nesting accepted (SDM writes at most 5 levels: a distribution inside a writes record).
MAX_DEPTH = 32
#: Largest integer in a file (a signed 64-bit catalog column).
INT_MAX = 2**63 - 1
#: Largest array, offset or length in bytes (as :data:`sdm._validate.MAX_BYTES`: byte offsets stay exact).
MAX_BYTES = 2**53
#: Most dimensions of a shape (numpy's own limit is 64).
MAX_NDIM = 32
#: Longest free text (a planner's reason, a path) in characters.
TEXT_MAX = 65536

_ESCAPE = re.compile(r"\\.", re.DOTALL)
_STRING = re.compile(r'"[^"]*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def _show(value: Any) -> str:
    """A value as the message shows it: its JSON type and a short repr."""
    kind = {bool: "boolean", int: "integer", float: "number", str: "text", list: "list", dict: "object",
            type(None): "null"}.get(type(value), type(value).__name__)
    text = repr(value)
    return f"{kind} {text if len(text) <= 60 else text[:57] + '...'}"


@dataclass(frozen=True)
class Where:
    """Where a value comes from, for messages: the file (and line), and what to do about a bad one.

    Attributes
    ----------
    file : str
        The file, with ``line N`` for a meta-file record (``"/d/.sdm-meta.jsonl line 4"``).
    advice : str
        Appended to every message (what to do; may be empty).
    """

    file: str
    advice: str = ""

    def error(self, text: str) -> IntegrityError:
        """The error of *text* about this file."""
        return IntegrityError(f"{self.file}: {text}" + (f"; {self.advice}" if self.advice else ""))

    def fail(self, field: str, expected: str, value: Any) -> IntegrityError:
        """The error of member *field* holding *value* where *expected* was due."""
        return self.error(f"{field or 'the content'} must be {expected}, not {_show(value)}")


# ----------------------------------------------------------------------------- bytes to JSON
def _depth(text: str) -> int:
    """The deepest nesting of ``[``/``{`` in JSON *text*, strings skipped (linear time, no recursion).

    Unbalanced text is measured as far as it goes; the parser then refuses it.
    """
    if text.count("[") + text.count("{") <= MAX_DEPTH:  # cannot be deeper: no scan
        return 0
    bare = _NOT_BRACKET.sub("", _STRING.sub("", _ESCAPE.sub("", text)))
    depth = deepest = 0
    for ch in bare:
        if ch in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_DEPTH:
                    break
        else:
            depth -= 1
    return deepest


def load_json(data: bytes | str, where: Where, what: str = "the content") -> Any:
    """Parse JSON read from a file: UTF-8 only, nesting bounded before parsing.

    Parameters
    ----------
    data : bytes or str
        The JSON text (bytes are decoded as strict UTF-8).
    where : Where
        The file, for messages.
    what : str
        Names the text in messages (``"the trailer"``).

    Raises
    ------
    IntegrityError
        Not UTF-8, nested deeper than :data:`MAX_DEPTH`, or not JSON.
    """
    if isinstance(data, (bytes, bytearray, memoryview)):
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            bad = bytes(data)[exc.start:exc.start + 1]
            raise where.error(f"{what} is not UTF-8 text (byte {exc.start}: {bad!r})") from None
    else:
        text = data
    depth = _depth(text)
    if depth > MAX_DEPTH:
        raise where.error(f"{what} is nested deeper than {MAX_DEPTH} levels (SDM writes at most 5)")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, digits beyond int's conversion limit
        raise where.error(f"{what} is not JSON ({str(exc)[:120]})") from None


def load_object(data: bytes | str, where: Where, what: str) -> dict[str, Any]:
    """:func:`load_json` of text that must hold one JSON object (a trailer, a marker, an index).

    Raises
    ------
    IntegrityError
        As :func:`load_json`, or the value is not an object.
    """
    value = load_json(data, where, what)
    if type(value) is not dict:
        raise where.error(f"{what} is a JSON {_show(value).split(' ')[0]}, not an object")
    return value


def open_regular(path: str | os.PathLike[str], where: Where) -> int:
    """A read-only descriptor of *path*, refused unless it is a regular file (a FIFO would block, a device never
    ends, a symbolic link may lead anywhere).

    Raises
    ------
    OSError
        The file cannot be opened (the caller says so in its terms).
    IntegrityError
        *path* is not a regular file.
    """
    try:  # SDM never writes these files as links: one would lead the reader out of the run
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise where.error("it is a symbolic link; SDM writes it as a regular file and never follows a link "
                              "to read it") from None
        raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise where.error(f"it is not a regular file but a {_KINDS.get(stat.S_IFMT(mode), 'special file')}")
    return fd


def read_regular(path: str | os.PathLike[str], where: Where, limit: int | None = None) -> bytes:
    """The whole content of regular file *path*, refused above *limit* bytes before anything is read.

    Raises
    ------
    OSError
        The file cannot be read (the caller says so in its terms).
    IntegrityError
        Not a regular file, or larger than *limit*.
    """
    fd = open_regular(path, where)
    try:
        size = os.fstat(fd).st_size
        if limit is not None and size > limit:
            raise where.error(f"it holds {size} bytes; SDM writes such files of less than {limit}")
        chunks = []
        done = 0
        while done < size:  # never more than the size the file had when opened
            chunk = os.pread(fd, min(size - done, 64 << 20), done)
            if not chunk:
                break
            chunks.append(chunk)
            done += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


_KINDS = {stat.S_IFDIR: "directory", stat.S_IFIFO: "FIFO", stat.S_IFCHR: "character device",
          stat.S_IFBLK: "block device", stat.S_IFSOCK: "socket"}


# ----------------------------------------------------------------------------- schemas
class _Bad(Exception):
    """A member that fails its schema; containers add their keys on the way up (paths are built only on failure)."""

    def __init__(self, expected: str, value: Any, text: str | None = None, missing: bool = False) -> None:
        super().__init__(expected)
        self.expected, self.value, self.text, self.missing = expected, value, text, missing
        self.path: list[str | int] = []

    def field(self, base: str) -> str:
        out = base
        for key in reversed(self.path):
            out += f"[{key}]" if isinstance(key, int) else (f".{key}" if out else str(key))
        return out

    def error(self, where: Where, base: str) -> IntegrityError:
        field = self.field(base)
        if self.missing:
            return where.error(f"member {field} is missing ({self.expected} is required)")
        if self.text is not None:
            return where.error(f"{field} {self.text}")
        return where.fail(field, self.expected, self.value)


class Schema:
    """What one member must be.

    :meth:`validate` checks a whole value and raises :class:`~sdm.errors.IntegrityError`
    naming the member; :meth:`check` is its fast inner form (no path is built unless a
    member fails).
    """

    #: What the member must be, in words (``"an integer in 0..255"``).
    expected = "a value"

    def check(self, value: Any) -> Any:  # pragma: no cover - abstract
        """*value* if it fits (maybe completed with defaults), else raise ``_Bad``."""
        raise NotImplementedError

    def validate(self, value: Any, where: Where, field: str = "") -> Any:
        """*value* checked; an :class:`~sdm.errors.IntegrityError` names *field* and the failing member in it."""
        try:
            return self.check(value)
        except _Bad as bad:
            raise bad.error(where, field) from None

    def _bad(self, value: Any, expected: str | None = None) -> _Bad:
        return _Bad(expected or self.expected, value)


class JSON(Schema):
    """Any JSON value (its depth is bounded by :func:`load_json` already)."""

    expected = "any JSON value"

    def check(self, value: Any) -> Any:
        return value


class Int(Schema):
    """A JSON integer (never a boolean or a number with a fraction) in ``lo..hi``."""

    def __init__(self, lo: int = 0, hi: int = INT_MAX) -> None:
        self.lo, self.hi = lo, hi
        self.expected = f"an integer in {lo}..{hi}"

    def check(self, value: Any) -> int:
        if type(value) is not int or not self.lo <= value <= self.hi:
            raise self._bad(value)
        return value


class Num(Schema):
    """A finite JSON number (integer or not) of at least *lo*."""

    def __init__(self, lo: float = -math.inf) -> None:
        self.lo = lo
        self.expected = "a finite number" + (f" >= {lo:g}" if lo > -math.inf else "")

    def check(self, value: Any) -> float:
        if type(value) not in (int, float) or not math.isfinite(value) or value < self.lo:
            raise self._bad(value)
        return value


class Bool(Schema):
    """``true`` or ``false``."""

    expected = "true or false"

    def check(self, value: Any) -> bool:
        if type(value) is not bool:
            raise self._bad(value)
        return value


class Text(Schema):
    """Text of 0..*max_len* characters (no NUL, no lone surrogate), maybe one of *choices* or matching *pattern*."""

    def __init__(self, max_len: int = TEXT_MAX, *, choices: Iterable[str] | None = None, pattern: str | None = None,
                 expected: str | None = None) -> None:
        self.max_len = max_len
        self.choices = frozenset(choices) if choices is not None else None
        self.pattern = re.compile(pattern) if pattern is not None else None
        self.expected = expected or (f"one of {', '.join(map(repr, sorted(self.choices)))}"
                                     if self.choices is not None else f"text of at most {max_len} characters")

    def check(self, value: Any) -> str:
        if type(value) is not str or len(value) > self.max_len or "\x00" in value:
            raise self._bad(value)
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise self._bad(value, "text without lone surrogates") from None
        if self.choices is not None and value not in self.choices:
            raise self._bad(value)
        if self.pattern is not None and not self.pattern.fullmatch(value):
            raise self._bad(value)
        return value


class Name(Text):
    """A name SDM accepts for an application, group, dataset, info or import (:func:`sdm.names.check_name`)."""

    _accepted: set[str] = set()  # names seen good (a meta-file repeats a few names many times)

    def __init__(self) -> None:
        super().__init__(255, expected="a name SDM accepts (1-255 printable characters, no '/', '\\' or '..')")

    def check(self, value: Any) -> str:
        if type(value) is str and value in self._accepted:
            return value
        from .names import check_name

        try:
            check_name(value, "the")
        except SDMError:
            raise self._bad(value) from None
        if len(self._accepted) < 4096:
            self._accepted.add(value)
        return value


class Time(Text):
    """An ISO 8601 time (``datetime.fromisoformat``)."""

    def __init__(self) -> None:
        super().__init__(64, expected="an ISO 8601 time")

    def check(self, value: Any) -> str:
        super().check(value)
        try:
            datetime.fromisoformat(value)
        except ValueError:
            raise self._bad(value) from None
        return value


class Hex(Text):
    """*digits* lowercase hex digits (a checksum)."""

    def __init__(self, digits: int) -> None:
        super().__init__(digits, pattern=f"[0-9a-f]{{{digits}}}", expected=f"{digits} lowercase hex digits")


class Base64(Text):
    """Base64 text (standard alphabet, padded); :meth:`decode` gives its bytes."""

    def __init__(self) -> None:
        super().__init__(4 * MAX_BYTES, expected="base64 text")

    def check(self, value: Any) -> str:
        super().check(value)
        self.decode(value)
        return value

    def decode(self, value: str) -> bytes:
        """The bytes of base64 *value* (raises ``_Bad``)."""
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise self._bad(value) from None


class DType(Schema):
    """A dtype SDM stores exactly (:func:`sdm.dtypes.check_dtype`): never objects, void or zero-size."""

    expected = ("a numpy dtype SDM stores (numeric, bool, datetime, fixed-width string or a packed structure of "
                "those)")

    def __init__(self, max_len: int | None = None) -> None:
        self.max_len = max_len  # None: sdm.dtypes.TEXT_MAX (structured dtypes); 64 where the catalog keeps plain ones

    def check(self, value: Any) -> str:
        self.dtype(value)
        return value

    def dtype(self, value: Any) -> Any:
        """The numpy dtype of *value* (text as :func:`sdm.dtypes.dtype_text` writes it; raises ``_Bad``)."""
        from .dtypes import TEXT_MAX as DTYPE_TEXT
        from .dtypes import check_dtype, from_text

        if type(value) is not str or len(value) > (self.max_len or DTYPE_TEXT):
            raise self._bad(value)
        try:
            return check_dtype(from_text(value), "it")
        except Exception:  # noqa: BLE001 - numpy and ast refuse bad dtype text in many ways; all mean "not a dtype"
            raise self._bad(value) from None


class Shape(Schema):
    """A list of at most :data:`MAX_NDIM` integers >= 0 (its bytes are bounded by the caller, which knows the dtype)."""

    expected = f"a list of at most {MAX_NDIM} integers >= 0"
    _dim = Int(0, INT_MAX)

    def check(self, value: Any) -> list[int]:
        if type(value) is not list or len(value) > MAX_NDIM:
            raise self._bad(value)
        for i, n in enumerate(value):
            if type(n) is not int or n < 0 or n > INT_MAX:
                bad = self._dim._bad(n)
                bad.path.append(i)
                raise bad
        return value


class Maybe(Schema):
    """``null`` or *inner*."""

    def __init__(self, inner: Schema) -> None:
        self.inner = inner
        self.expected = f"null or {inner.expected}"

    def check(self, value: Any) -> Any:
        return None if value is None else self.inner.check(value)


class Seq(Schema):
    """A list of at most *max_len* items, each *item*."""

    def __init__(self, item: Schema, max_len: int = INT_MAX) -> None:
        self.item, self.max_len = item, max_len
        self.expected = "a list" + (f" of at most {max_len} items" if max_len < INT_MAX else "")

    def check(self, value: Any) -> list[Any]:
        if type(value) is not list or len(value) > self.max_len:
            raise self._bad(value)
        check = self.item.check
        for i, v in enumerate(value):
            try:
                check(v)
            except _Bad as bad:
                bad.path.append(i)
                raise
        return value


class Tuple(Schema):
    """A list of exactly ``len(items)`` values, each its own schema."""

    def __init__(self, *items: Schema) -> None:
        self.items = items
        self.expected = f"a list of {len(items)} values"

    def check(self, value: Any) -> list[Any]:
        if type(value) is not list or len(value) != len(self.items):
            raise self._bad(value)
        for i, (s, v) in enumerate(zip(self.items, value)):
            try:
                s.check(v)
            except _Bad as bad:
                bad.path.append(i)
                raise
        return value


class Table(Schema):
    """An object whose keys are *key* and values *value* (a mapping of names)."""

    def __init__(self, value: Schema, key: Schema | None = None) -> None:
        self.key, self.value = key or Text(255), value
        self.expected = "an object"

    def check(self, value: Any) -> dict[str, Any]:
        if type(value) is not dict:
            raise self._bad(value)
        for k, v in value.items():
            try:
                self.key.check(k)
                self.value.check(v)
            except _Bad as bad:
                bad.path.append(k)
                raise
        return value


_ABSENT = object()


class Record(Schema):
    """An object with *required* members and *optional* ones (absent or checked); other members are kept as they are.

    Parameters
    ----------
    required, optional : mapping of str to Schema
    defaults : mapping of str to value
        Values given to optional members that are absent (else they stay absent).
    """

    expected = "an object"

    def __init__(self, required: Mapping[str, Schema], optional: Mapping[str, Schema] | None = None,
                 defaults: Mapping[str, Any] | None = None) -> None:
        self.required, self.optional, self.defaults = dict(required), dict(optional or {}), dict(defaults or {})
        # integers are checked inline (a meta-file holds millions of them), the rest by their schema
        self._required = tuple((name, schema, (schema.lo, schema.hi) if type(schema) is Int else None)
                               for name, schema in self.required.items())
        self._optional = tuple(self.optional.items())

    def check(self, value: Any) -> dict[str, Any]:
        if type(value) is not dict:
            raise self._bad(value)
        name = ""
        try:
            for name, schema, bounds in self._required:
                try:
                    got = value[name]
                except KeyError:
                    raise _Bad(schema.expected, None, missing=True) from None
                if bounds is None:
                    schema.check(got)
                elif type(got) is not int or not bounds[0] <= got <= bounds[1]:
                    raise schema._bad(got)
            for name, schema in self._optional:
                got = value.get(name, _ABSENT)
                if got is not _ABSENT:
                    schema.check(got)
                elif name in self.defaults:
                    value[name] = self.defaults[name]
        except _Bad as bad:
            bad.path.append(name)
            raise
        return value


class Attributes(Table):
    """Attribute values as the catalog keeps them (:mod:`sdm.values`): scalar, finite or infinite, no NaN."""

    def __init__(self) -> None:
        super().__init__(JSON())
        self.expected = "an object of attribute values (integers, numbers, text, booleans)"

    def check(self, value: Any) -> dict[str, Any]:
        from .values import encode

        super().check(value)
        for k, v in value.items():
            try:
                encode(k, v)
            except SDMError as exc:
                bad = _Bad(self.expected, v, text=f"is not an attribute SDM stores ({exc})")
                bad.path.append(k)
                raise bad from None
        return value


def array_bytes(shape: Iterable[int], dtype: Any) -> int:
    """Bytes of an array of *shape* and *dtype* (exact: Python integers, no overflow)."""
    return math.prod(shape) * int(dtype.itemsize)


def _bounded(shape: list[int], dtype: Any, limit: int, where: Where, field: str, what: str) -> int:
    """Bytes of *shape* x *dtype*, refused above *limit* (*what* names the limit)."""
    n = array_bytes(shape, dtype)
    if n > limit:
        raise where.error(f"{field} {shape} of {dtype.str if dtype.fields is None else 'its dtype'} holds {n} bytes, "
                          f"more than {what} ({limit})")
    return n


def _dtype(text: str, where: Where, field: str) -> Any:
    """The numpy dtype of dtype text already checked by a schema."""
    try:
        return DType().dtype(text)
    except _Bad as bad:  # pragma: no cover - the schema refused it already
        raise bad.error(where, field) from None


# ----------------------------------------------------------------------------- data-file trailers
#: A step's checksum as the catalog keeps it: 16 hex digits (empty: none).
CHECKSUM = Text(16, pattern=r"([0-9a-f]{16})?", expected="16 lowercase hex digits (or none: empty)")

def _check_algorithm(value: str, where: Where, field: str) -> None:
    """A whole-step checksum algorithm this SDM computes (:func:`sdm.integrity.canonical`)."""
    from .integrity import ALGORITHMS, canonical

    try:
        canonical(value)
    except SDMError:
        raise where.fail(field, f"one of {', '.join(map(repr, ALGORITHMS))}", value) from None


#: The trailer of a level-2/3 data file (``docs/format.md``, "Data-file trailers").
TRAILER = Record(
    {"format": Int(1, 1), "application": Name(), "run": Int(1), "catalog": Text(255), "dir": Text(4096),
     "file": Text(4096), "group": Name(), "level": Int(2, 3),
     "datasets": Table(Record({"dtype": DType(), "shape": Shape(), "order": Text(choices=("C", "F"))},
                              {"distribution": Maybe(Record({"kind": Text(64)}))}, {"distribution": None}),
                       key=Name()),
     "writes": Seq(Record({"dataset": Name(), "step": Int(0), "offset": Int(0, MAX_BYTES), "nbytes": Int(0, MAX_BYTES),
                           "checksum": CHECKSUM, "algo": Text(32), "version": Int(1)},
                          # a compressed step: its codec, stored bytes and chunks (sdm.engine.compressed)
                          {"codec": Text(256), "stored": Int(0, MAX_BYTES),
                           "chunks": Seq(Record({"offset": Int(0, MAX_BYTES), "nbytes": Int(0, MAX_BYTES),
                                                 "checksum": CHECKSUM, "starts": Seq(Int(0, MAX_BYTES), MAX_NDIM),
                                                 "counts": Seq(Int(1, MAX_BYTES), MAX_NDIM)}))})),
     "closed_at": Time(), "sdm": Text(64)},
    {"kind": Text(choices=("state", "topology")), "steps_per_file": Maybe(Int(1))},
    {"kind": "state", "steps_per_file": None},
)

#: The index of a superfile (``sdm migrate --pack-below``): its members' bytes, one after the other.
SUPERFILE = Record(
    {"format": Int(1, 1), "superfile": Bool(), "run": Int(1),
     "members": Seq(Record({"path": Text(4096), "offset": Int(0, MAX_BYTES), "size": Int(0, MAX_BYTES),
                            "checksum": Text(71, pattern=r"sha256:[0-9a-f]{64}",
                                             expected="a digest 'sha256:<64 hex digits>'")}))},
)


def check_trailer(index: Any, where: Where, start: int) -> dict[str, Any]:
    """A trailer's JSON value checked: a data file's index or a superfile's, bounded by the *start* of the trailer.

    Every write (or member) must lie in the bytes before the trailer, name a dataset of
    the index, and (but for ranked datasets, whose steps start with a header) hold
    exactly the bytes of its dataset's shape and dtype; every dataset's bytes are
    bounded by the file's.

    Raises
    ------
    IntegrityError
    """
    if type(index) is dict and index.get("superfile") is True:
        out = SUPERFILE.validate(index, where)
        for i, m in enumerate(out["members"]):
            if m["offset"] + m["size"] > start:
                raise where.error(f"members[{i}] (bytes {m['offset']}..{m['offset'] + m['size']}) does not lie "
                                  f"before the trailer at byte {start}")
        return out
    out = TRAILER.validate(index, where)
    sizes: dict[str, int] = {}  # bytes of a step; for a ranked dataset minus its element size (no fixed size)
    packed = {w.get("dataset") for w in out["writes"] if "codec" in w or "chunks" in w}  # may hold more than the file
    for name, d in out["datasets"].items():
        dt = _dtype(d["dtype"], where, f"datasets.{name}.dtype")
        ranked = (d["distribution"] or {}).get("kind") == "ranked"
        limit, what = ((MAX_BYTES, "SDM stores in one row") if ranked or name in packed
                       else (start, "the bytes before the trailer"))
        n = _bounded(d["shape"], dt, limit, where, f"datasets.{name}.shape", what)
        sizes[name] = -dt.itemsize if ranked else n
    for i, w in enumerate(out["writes"]):
        field = f"writes[{i}]"
        if w["dataset"] not in sizes:
            raise where.error(f"{field}.dataset {w['dataset']!r} is none of the trailer's datasets "
                              f"({', '.join(map(repr, sizes))})")
        if "codec" in w or "chunks" in w:
            if w["algo"] not in ("xxh3-64-extents", "none"):  # its chunks' checksums, combined
                raise where.fail(f"{field}.algo", "'xxh3-64-extents' or 'none' (a compressed step)", w["algo"])
            _check_chunks(w, out["datasets"][w["dataset"]], sizes[w["dataset"]], start, where, field)
            continue
        _check_algorithm(w["algo"], where, f"{field}.algo")
        if w["offset"] + w["nbytes"] > start:
            raise where.error(f"{field} (bytes {w['offset']}..{w['offset'] + w['nbytes']}) does not lie before the "
                              f"trailer at byte {start}")
        want = sizes[w["dataset"]]
        if want >= 0 and w["nbytes"] != want:
            raise where.fail(f"{field}.nbytes", f"{want} (the bytes of dataset {w['dataset']!r})", w["nbytes"])
        if want < 0 and (w["nbytes"] < 48 or w["nbytes"] % -want):
            raise where.fail(f"{field}.nbytes", f"a multiple of {-want} of at least 48 (a ranked step: a header "
                                                f"and whole rows)", w["nbytes"])
    return out


def _check_chunks(w: dict[str, Any], d: dict[str, Any], nbytes: int, start: int, where: Where, field: str) -> None:
    """A compressed step's entry of a trailer: a codec SDM reads, chunks before the trailer and inside the
    array's shape, as many stored bytes as they hold, the array's bytes in all."""
    from .codecs import CompressionSpec
    from .errors import CompressionSpecError

    if "codec" not in w or "chunks" not in w or "stored" not in w:
        raise where.error(f"{field} is a compressed step without its codec, stored bytes and chunks")
    try:
        CompressionSpec.from_record(w["codec"])
    except CompressionSpecError as exc:
        raise where.error(f"{field}.codec: {exc}") from None
    if w["nbytes"] != nbytes:
        raise where.fail(f"{field}.nbytes", f"{nbytes} (the bytes of dataset {w['dataset']!r})", w["nbytes"])
    shape, total = d["shape"], 0
    for k, c in enumerate(w["chunks"]):
        if c["offset"] + c["nbytes"] > start:
            raise where.error(f"{field}.chunks[{k}] (bytes {c['offset']}..{c['offset'] + c['nbytes']}) does not lie "
                              f"before the trailer at byte {start}")
        if len(c["starts"]) != len(shape) or len(c["counts"]) != len(shape) or any(
                s + n > m for s, n, m in zip(c["starts"], c["counts"], shape)):
            raise where.error(f"{field}.chunks[{k}]: box starts {c['starts']}, counts {c['counts']} does not lie in "
                              f"the shape {shape}")
        total += c["nbytes"]
    if total != w["stored"]:
        raise where.fail(f"{field}.stored", f"{total} (the bytes of its chunks)", w["stored"])


# ----------------------------------------------------------------------------- meta-file records
_PATH = Text(4096)
_CODEC_TEXT = 256  #: the longest codec pipeline text (sdm.codecs) a meta-file may hold
_TIER = Text(choices=("fast", "archive"))
_WRITE = Record(
    {"group": Name(), "dataset": Name(), "step": Int(0), "path": _PATH, "level": Int(1, 3),
     "offset": Int(0, MAX_BYTES), "nbytes": Int(0, MAX_BYTES), "checksum": CHECKSUM, "algo": Text(32),
     "method": Text(32), "reason": Maybe(Text()), "seconds": Num(0), "nprocs": Int(1, 2**31 - 1), "version": Int(1)},
    {"replaces": Maybe(Int(1)), "overwrite": Bool(),
     "copy": Maybe(Record({"tier": _TIER, "location": _PATH, "size": Int(0, MAX_BYTES),
                           "checksum": Maybe(Text(80)), "verified_at": Maybe(Time())})),
     "extents": Maybe(Seq(Record({"path": _PATH, "offset": Int(0, MAX_BYTES), "nbytes": Int(0, MAX_BYTES),
                                  "start": Int(0, MAX_BYTES), "checksum": CHECKSUM, "checksum_algo": Text(32)},
                                 {"box": Tuple(Seq(Int(0, MAX_BYTES), MAX_NDIM), Seq(Int(0, MAX_BYTES), MAX_NDIM))}))),
     "codec": Text(_CODEC_TEXT), "stored": Int(0, MAX_BYTES), "max_error": Maybe(Num(0))},
)
_DATASET = Record({"name": Name(), "dtype": DType(), "shape": Shape(), "order": Text(choices=("C", "F"))},
                  {"dims": Maybe(Seq(Text(255), MAX_NDIM)), "compression": Maybe(Text(_CODEC_TEXT)),
                   "chunks": Maybe(Seq(Int(1, MAX_BYTES), MAX_NDIM))})

#: Every record type of the meta-file (format 1) and its members besides ``v``, ``t`` and ``id``
#: (``docs/format.md``, "Record types").
META_RECORDS: dict[str, Record] = {
    "run": Record({"application": Name(), "run": Int(1), "catalog": Text(255), "nprocs": Int(1, 2**31 - 1),
                   "problem_size": JSON(), "attributes": Attributes(), "created": Time(), "root": _PATH,
                   "dir": _PATH}, {"sdm": Text(64)}),
    "group": Record({"name": Name(), "level": Int(1, 3), "datasets": Seq(_DATASET, 100_000)},
                    {"kind": Text(choices=("state", "topology")), "steps_per_file": Maybe(Int(1)),
                     "archive": Maybe(Text(1024)), "subfiles": Maybe(Int(0, 2**31 - 1))}),
    "distribution": Record({"datasets": Seq(Tuple(Name(), Name())), "distribution": Maybe(Record({"kind": Text(64)}))}),
    "attributes": Record({"group": Maybe(Name()), "datasets": Seq(Name()), "on_group": Bool(),
                          "attributes": Attributes()}),
    "info": Record({"name": Name(), "group": Maybe(Name()), "dataset": Maybe(Name()), "step": Maybe(Int(0)),
                    "dtype": DType(64), "shape": Shape(), "checksum": Hex(8), "created": Time(), "data": Base64()}),
    "writes": Record({"written_at": Time(), "writes": Seq(_WRITE)}),
    "import": Record({"name": Name(), "source": _PATH, "offset": Int(0, MAX_BYTES), "dtype": DType(64),
                      "count": Int(0, MAX_BYTES), "shape": Shape(), "mode": Text(16), "nbytes": Int(0, MAX_BYTES),
                      "checksum": CHECKSUM, "checksum_algo": Text(32), "seconds": Num(0),
                      "nprocs": Int(1, 2**31 - 1), "imported_at": Time()}),
    "open": Record({}, {"at": Time()}),
    "close": Record({}, {"at": Time()}),
    "abort": Record({"ref": Text(64)}),
    "truncate": Record({"after": Int(-1), "groups": Maybe(Seq(Name()))}),
    "copy": Record({"path": _PATH, "tier": _TIER, "location": _PATH, "size": Int(0, MAX_BYTES),
                    "checksum": Maybe(Text(80)), "verified_at": Maybe(Time())}),
    "uncopy": Record({"path": _PATH, "tier": _TIER}),
}
_HEAD = Record({"v": Int(1), "t": Text(64), "id": Text(64)}, {"optional": Bool()})


def check_meta_record(record: Any, where: Where) -> dict[str, Any]:
    """One meta-file record checked against the schema of its type (an unknown type: its head only).

    The format version and unknown types are judged by the caller
    (:func:`sdm.catalog.metafile.read_meta` raises :class:`~sdm.errors.CatalogVersionError`).
    """
    head = _HEAD.validate(record, where)
    schema = META_RECORDS.get(head["t"])
    return head if schema is None else schema.validate(head, where)


@dataclass
class _Dataset:
    dtype: Any
    shape: list[int]
    ranked: bool = False
    nbytes: int = 0


def check_meta_log(records: list[dict[str, Any]], where: Callable[[int], Where]) -> None:
    """The records of one meta-file, in order, checked against their schemas and against each other.

    Parameters
    ----------
    records : list of dict
        Every record of the file (record *k* on line *k + 1*).
    where : callable
        ``where(line)``: the :class:`Where` of a line (1-based).

    The first record must be the run's; a record naming a group or dataset must come
    after the group record that defines it (records the catalog refused, named by an
    ``abort`` record, are left out of these checks as a rebuild leaves them out); an
    info's bytes and an import's count must match their shape and dtype; a write of a
    dataset that is never ranked must hold exactly its dataset's bytes.

    Raises
    ------
    IntegrityError
    """
    if not records:
        return
    if type(records[0]) is not dict or records[0].get("t") != "run":
        raise where(1).error("the first record is not the run's (type 'run'): this is not an SDM meta-file")
    checked = [check_meta_record(rec, where(line)) for line, rec in enumerate(records, start=1)]
    aborted = {r["ref"] for r in checked if r["t"] == "abort"}  # refused by the catalog: replayed by nobody
    ranked = {(g, d) for r in checked if r["t"] == "distribution" and (r["distribution"] or {}).get("kind") == "ranked"
              for g, d in r["datasets"]}
    groups: dict[str, dict[str, _Dataset]] = {}
    for line, rec in enumerate(checked, start=1):
        at, kind = where(line), rec["t"]
        if rec["id"] in aborted:
            continue
        if kind == "group":
            if rec["name"] not in groups:
                datasets = {}
                for i, d in enumerate(rec["datasets"]):
                    dt = _dtype(d["dtype"], at, f"datasets[{i}].dtype")
                    is_ranked = (rec["name"], d["name"]) in ranked
                    n = _bounded(d["shape"], dt, MAX_BYTES, at, f"datasets[{i}].shape", "SDM stores in one array")
                    datasets[d["name"]] = _Dataset(dt, d["shape"], is_ranked, n)
                groups[rec["name"]] = datasets
        elif kind == "writes":
            for i, w in enumerate(rec["writes"]):
                d = groups.get(w["group"], {}).get(w["dataset"]) or _known(groups, w["group"], w["dataset"], at,
                                                                           f"writes[{i}]")
                if not d.ranked and w["nbytes"] != d.nbytes:
                    raise at.fail(f"writes[{i}].nbytes", f"{d.nbytes} (the bytes of dataset {w['dataset']!r} of group "
                                                         f"{w['group']!r})", w["nbytes"])
        elif kind == "distribution":
            for i, (g, d) in enumerate(rec["datasets"]):
                _known(groups, g, d, at, f"datasets[{i}]")
        elif kind == "attributes":
            if rec["group"] is not None:
                for d in rec["datasets"] or [None]:
                    _known(groups, rec["group"], d, at, "datasets")
            elif rec["datasets"]:
                raise at.fail("datasets", "an empty list for the run's attributes (group null)", rec["datasets"])
        elif kind == "info":
            _info(rec, groups, at)
        elif kind == "truncate":
            for g in rec["groups"] or ():
                _known(groups, g, None, at, "groups")
        elif kind == "import":
            dt = _dtype(rec["dtype"], at, "dtype")
            if math.prod(rec["shape"]) != rec["count"]:
                raise at.fail("count", f"{math.prod(rec['shape'])} (the elements of shape {rec['shape']})",
                              rec["count"])
            if array_bytes(rec["shape"], dt) != rec["nbytes"]:
                raise at.fail("nbytes", f"{array_bytes(rec['shape'], dt)} (count x itemsize)", rec["nbytes"])


def _known(groups: dict[str, dict[str, _Dataset]], group: str | None, dataset: str | None, at: Where,
           field: str) -> _Dataset:
    """The dataset (or, with *dataset* None, only the group) a record names, defined by an earlier record."""
    if group is None or group not in groups:
        raise at.error(f"{field} names group {group!r}, which no earlier group record defines")
    if dataset is None:
        return _Dataset(None, [])
    found = groups[group].get(dataset)
    if found is None:
        raise at.error(f"{field} names dataset {dataset!r}, which group {group!r} does not define")
    return found


def _info(rec: dict[str, Any], groups: dict[str, dict[str, _Dataset]], at: Where) -> None:
    if rec["group"] is not None:
        _known(groups, rec["group"], rec["dataset"], at, "dataset")
    elif rec["dataset"] is not None or rec["step"] is not None:
        raise at.error("an info of the run (group null) names a dataset or a step")
    if rec["step"] is not None and rec["dataset"] is None:
        raise at.error("an info of a step (step given) names no dataset")
    dt = _dtype(rec["dtype"], at, "dtype")
    want = _bounded(rec["shape"], dt, MAX_BYTES, at, "shape", "SDM stores in one array")
    got = len(base64.b64decode(rec["data"]))  # checked by the schema
    if got != want:
        raise at.error(f"data holds {got} bytes but shape {rec['shape']} of {rec['dtype']} needs {want}")


#: An index history's description (``<history file>.json``: one line in the meta-file's format, type ``history``).
HISTORY = Record({"v": Int(1), "t": Text(choices=("history",)), "application": Name(), "problem": Text(255),
                  "content_hash": Text(64), "nprocs": Int(1, 2**31 - 1), "path": _PATH, "nbytes": Int(0, MAX_BYTES),
                  "run_id": Maybe(Int(1)),
                  "parts": Seq(Tuple(Text(64), Int(0, 2**31 - 1), Int(0, MAX_BYTES), Int(0, MAX_BYTES), DType(64))),
                  "sources": JSON(), "created": Time()})



def check_history(record: dict[str, Any], where: Where, size: int) -> None:
    """An index history's description (checked against :data:`HISTORY`) against its history file's real *size*.

    Every part must lie within ``nbytes``, itself within the file; every rank
    ``0..nprocs-1`` must have the same parts, by name, and no other rank any.

    Raises
    ------
    IntegrityError
    """
    if record["nbytes"] > size:
        raise where.error(f"nbytes {record['nbytes']} is more than its history file holds ({size})")
    names: dict[int, set[str]] = {}
    for i, (name, rank, offset, count, dtype) in enumerate(record["parts"]):
        end = offset + count * _dtype(dtype, where, f"parts[{i}][4]").itemsize
        if end > record["nbytes"]:
            raise where.error(f"parts[{i}] (bytes {offset}..{end}) does not lie within the history's "
                              f"{record['nbytes']} bytes")
        if rank >= record["nprocs"]:
            raise where.fail(f"parts[{i}][1]", f"a rank below nprocs {record['nprocs']}", rank)
        names.setdefault(rank, set()).add(name)
    first = names.get(0, set())
    if not first or any(names.get(r) != first for r in range(record["nprocs"])):
        raise where.error(f"parts do not give every rank 0..{record['nprocs'] - 1} the same sections "
                          f"(rank 0: {sorted(first)})")


# ----------------------------------------------------------------------------- run markers, cache indexes
#: A run directory's marker ``.sdm-run`` (:mod:`sdm.storage.runs`).
MARKER = Record({"catalog": Text(255), "run": Int(1)},
                {"application": Name(), "created": Text(64), "metafile": Bool()})

#: The index of one object's bytes in the remote subfile cache (:mod:`sdm.io.remote`).
CACHE_INDEX = Record({"location": Text(4096), "copy": Text(256),
                      "ranges": Seq(Tuple(Int(0, MAX_BYTES), Int(0, MAX_BYTES)), 1 << 20)})


def check_cache_index(value: Any, where: Where, size: int) -> list[tuple[int, int]]:
    """The byte ranges a cache index says its data file holds, each within the data file's real *size*.

    Raises
    ------
    IntegrityError
    """
    out = CACHE_INDEX.validate(value, where)
    ranges = []
    for i, (lo, hi) in enumerate(out["ranges"]):
        if not lo <= hi <= size:
            raise where.error(f"ranges[{i}] ({lo}..{hi}) is not a range within the cache's {size} bytes")
        ranges.append((lo, hi))
    return ranges
