"""Check every committed catalog row against the bytes on disk, without SDM's read path.

Used by ``benchmarks/crash.py`` and ``tests/integration/test_concurrency.py``.

The catalog is read with plain SQL: for SQLite, a *copy* of the database file (with its
``-journal``/``-wal`` file, so a transaction the kill interrupted is rolled back in the copy
exactly as SQLite would roll it back for the next writer; the original stays untouched for
the reopen that follows), for PostgreSQL through SQLAlchemy.  One row per ``writes`` row:
the run's data root (``runs.root``), the file (``files.path``), ``offset``, ``nbytes``,
``checksum`` and ``checksum_algo``, and the dataset (name, dtype, shape, order) and step.

A row is **bad** when any of these holds (first that applies is its reason):

``missing_file``      the file ``runs.root / files.path`` does not exist;
``short_file``        the file ends before ``offset + nbytes``;
``wrong_length``      ``nbytes`` is not the dataset's size (elements x itemsize);
``unintended``        nobody ever tried to write this (dataset, step);
``no_version``        the bytes equal none of the versions ever tried for (dataset, step)
                      (torn, zeroed, mixed or another row's bytes);
``checksum_mismatch`` the bytes are one of those versions, but the checksum recomputed from
                      them (current ``sdm.integrity``, algorithm ``writes.checksum_algo``)
                      differs from the row's: the row describes other bytes than the ones it
                      points at (an overwrite in place whose commit never came).

A **compressed** row (``writes.codec`` set: ``zstd:<level>:<shuffle>`` or ``lz4:<a>:<shuffle>``)
is stored as chunks, the ``extents`` rows of its write id in ``seq`` order (file, offset,
stored bytes, ``xxh3-64`` of the stored bytes, box ``[[starts], [counts]]`` in the global
array).  It is checked with numpy, sqlite3, numcodecs and xxhash alone, never with SDM's
code; the first reason that applies:

``unknown_codec``     a codec this checker does not decode;
``wrong_extents``     its chunks are not ``seq`` 0 .. ``writes.extents - 1``, or their stored
                      bytes do not add up to ``writes.stored_nbytes``;
``missing_file`` / ``short_file``  a chunk's file is missing or ends before the chunk;
``wrong_length``      ``nbytes`` is not the dataset's size;
``bad_boxes``         a box is malformed or outside the array, or the boxes do not cover every
                      element exactly once;
``unintended``        nobody ever tried to write this (dataset, step);
``undecodable``       a chunk's stored bytes are no stream of the codec, or decode to another
                      size than its box's (zeroed, torn or garbage chunks);
``no_version``        the decoded array equals none of the versions ever tried;
``checksum_mismatch`` a chunk's ``xxh3-64`` recomputed from its stored bytes differs from the
                      chunk's, or the row's ``xxh3-64-extents`` (XXH3 of the chunks' recomputed
                      digests as little-endian ``u8``) differs from the row's.

Also counted, apart from bad rows:

``lost``      a call the worker saw return (``done D S V``) has no row, or its row holds an
              older version than the newest that returned;
``overlap``   two rows of one file share bytes (``[offset, offset + nbytes)`` intersect; for a
              row stored as extents -- a compressed row's chunks -- each extent's span);
``unreferenced_bytes``  bytes of data files that no row covers (crash leftovers; information;
              a compressed row covers its chunks' spans, not ``offset + nbytes``).
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

__all__ = ["Row", "Chunk", "load_rows", "query", "Intents", "check", "recompute_checksum", "overlaps",
           "decode_chunk", "xxh3_hex", "xxh3_extents_hex"]

_COLUMNS = """w.id AS id, r.id AS run_id, r.root AS root, f.path AS path, w."offset" AS "offset",
       w.nbytes AS nbytes, w.checksum AS checksum, w.checksum_algo AS checksum_algo,
       w.step AS step, d.name AS dataset, d.dtype AS dtype, d.shape AS shape,
       d.storage_order AS storage_order, g.name AS grp, g.level AS level"""
_FROM = """FROM writes w
JOIN files f ON f.id = w.file_id
JOIN runs r ON r.id = f.run_id
JOIN datasets d ON d.id = w.dataset_id
JOIN groups g ON g.id = d.group_id
ORDER BY w.id"""
QUERY = f"SELECT {_COLUMNS}\n{_FROM}\n"
#: The same with what a compressed (or subfiled) row adds: its codec, stored bytes and number of extents
QUERY_CODEC = f"""SELECT {_COLUMNS},
       w.extents AS n_extents, w.codec AS codec, w.stored_nbytes AS stored_nbytes
{_FROM}
"""
#: Every extent (a compressed row's chunk), its file's path and the run's root
EXTENTS = """
SELECT e.write_id AS write_id, e.seq AS seq, r.root AS root, f.path AS path, e."offset" AS "offset",
       e.nbytes AS nbytes, e.start AS start, e.checksum AS checksum, e.checksum_algo AS checksum_algo, e.box AS box
FROM extents e
JOIN files f ON f.id = e.file_id
JOIN runs r ON r.id = f.run_id
ORDER BY e.write_id, e.seq
"""


@dataclass(frozen=True)
class Chunk:
    """One ``extents`` row: a chunk of a compressed row (its stored bytes in a file, and its box)."""

    seq: int
    root: str
    path: str
    offset: int
    nbytes: int
    start: int
    checksum: str
    checksum_algo: str
    box: Any  # the JSON of ``[[starts...], [counts...]]`` as stored (None when absent), parsed

    @property
    def file(self) -> Path:
        return Path(self.root) / self.path


@dataclass(frozen=True)
class Row:
    """One ``writes`` row with what is needed to find and judge its bytes."""

    id: int
    run_id: int
    root: str
    path: str
    offset: int
    nbytes: int
    checksum: str
    checksum_algo: str
    step: int
    dataset: str
    dtype: str
    shape: tuple[int, ...]
    order: str
    group: str
    level: int
    #: ``writes.codec``: the codec text of a compressed row (None: raw bytes at ``offset``)
    codec: str | None = None
    #: ``writes.stored_nbytes``: the bytes a compressed row's chunks take (``nbytes`` is the array's size)
    stored_nbytes: int | None = None
    #: ``writes.extents``: how many extents the catalog says the row has (0: one run of bytes)
    n_extents: int = 0
    #: its extents (a compressed row's chunks), in ``seq`` order
    chunks: tuple[Chunk, ...] = ()

    @property
    def file(self) -> Path:
        return Path(self.root) / self.path

    @property
    def spans(self) -> list[tuple[Path, int, int]]:
        """``(file, offset, nbytes)`` of every run of bytes the row occupies: its extents, or its one run."""
        if self.chunks:
            return [(c.file, c.offset, c.nbytes) for c in self.chunks]
        return [(self.file, self.offset, self.nbytes)]


def _box(text: Any) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return text  # judged malformed by the checker


def _chunk(m: dict[str, Any]) -> Chunk:
    return Chunk(int(m["seq"]), str(m["root"]), str(m["path"]), int(m["offset"]), int(m["nbytes"]),
                 int(m["start"]), str(m["checksum"] or ""), str(m["checksum_algo"] or ""), _box(m["box"]))


def _row(m: dict[str, Any], chunks: tuple[Chunk, ...] = ()) -> Row:
    stored = m.get("stored_nbytes")
    return Row(int(m["id"]), int(m["run_id"]), str(m["root"]), str(m["path"]), int(m["offset"]), int(m["nbytes"]),
               str(m["checksum"] or ""), str(m["checksum_algo"] or ""), int(m["step"]), str(m["dataset"]),
               str(m["dtype"]), tuple(int(x) for x in json.loads(m["shape"])), str(m["storage_order"]),
               str(m["grp"]), int(m["level"]), m.get("codec") or None, None if stored is None else int(stored),
               int(m.get("n_extents") or 0), chunks)


def load_rows(url: str) -> list[Row]:
    """Every ``writes`` row of the catalog at *url* (``sqlite:///path`` or ``postgresql://...``), with its extents
    (a compressed row's chunks), both read from one copy (SQLite) or one snapshot (PostgreSQL).

    A catalog older than compressed rows (no ``writes.codec``) gives plain rows.
    """
    try:
        found, extents = queries(url, [(QUERY_CODEC, "writes"), (EXTENTS, "extents")])
    except Exception as exc:  # noqa: BLE001 - a catalog from before revision 0013: no codec columns
        if "codec" not in str(exc) and "extents" not in str(exc) and "stored_nbytes" not in str(exc):
            raise
        return [_row(m) for m in query(url, QUERY, table="writes")]
    by_write: dict[int, list[Chunk]] = defaultdict(list)
    for m in extents:
        by_write[int(m["write_id"])].append(_chunk(m))
    return [_row(m, tuple(by_write.get(int(m["id"]), ()))) for m in found]


def query(url: str, sql: str, *, table: str) -> list[dict[str, Any]]:
    """The rows of *sql* on the catalog at *url*; none when the catalog or its table *table* does not exist.

    SQLite: on a copy of the database file and its ``-journal``/``-wal`` (an interrupted
    transaction is rolled back in the copy, the original is left as it is).
    """
    return queries(url, [(sql, table)])[0]


def queries(url: str, items: list[tuple[str, str]]) -> list[list[dict[str, Any]]]:
    """:func:`query` of each ``(sql, table)`` of *items*, all on one copy of a SQLite catalog (one
    repeatable-read transaction of a PostgreSQL one), so that they see the same state."""
    if url.startswith("sqlite:///"):
        src = Path(url[len("sqlite:///"):])
        if not src.exists():
            return [[] for _ in items]
        with tempfile.TemporaryDirectory(prefix="sdm-crash-cat-") as tmp:
            copy = Path(tmp) / src.name
            for suffix in ("", "-journal", "-wal"):
                part = src.with_name(src.name + suffix)
                if part.exists():
                    shutil.copyfile(part, copy.with_name(copy.name + suffix))
            con = sqlite3.connect(copy)
            try:
                con.row_factory = sqlite3.Row
                out = []
                for sql, _table in items:
                    try:
                        out.append([dict(r) for r in con.execute(sql)])
                    except sqlite3.OperationalError as exc:
                        if "no such table" not in str(exc):
                            raise
                        out.append([])
                return out
            finally:
                con.close()
    import sqlalchemy as sa

    for scheme in ("postgresql://", "postgres://"):
        if url.startswith(scheme):  # the psycopg (3) driver, as SDM's catalog uses
            url = "postgresql+psycopg://" + url[len(scheme):]
    engine = sa.create_engine(url)
    try:
        with engine.connect().execution_options(isolation_level="REPEATABLE READ") as con:
            have = set(sa.inspect(con).get_table_names())
            return [[dict(m) for m in con.execute(sa.text(sql)).mappings()] if table in have else []
                    for sql, table in items]
    finally:
        engine.dispose()


def recompute_checksum(raw: bytes, dtype: str, algorithm: str) -> str | None:
    """The checksum of *raw* under *algorithm*, by the current ``sdm.integrity``, as 16 hex digits.

    ``sdm.integrity.checksum_of_bytes(raw, dtype, algorithm)`` when the library has it, else
    ``sum64_of_bytes`` for the ``sum64`` algorithms; None when neither can compute it.
    """
    from sdm import integrity

    def hexed(value: Any) -> str:
        return f"{int(value) & ((1 << 64) - 1):016x}" if isinstance(value, (int, np.integer)) else str(value).lower()

    fn = getattr(integrity, "checksum_of_bytes", None)
    if fn is not None:
        try:
            return hexed(fn(raw, np.dtype(dtype), algorithm))
        except Exception:  # noqa: BLE001 - an algorithm it does not know: try the old one below
            pass
    if algorithm.startswith("sum64") and hasattr(integrity, "sum64_of_bytes"):
        return hexed(integrity.sum64_of_bytes(raw, np.dtype(dtype).itemsize))
    return None


# ----------------------------------------------------------------------------- compressed rows
_MASK = (1 << 64) - 1


def xxh3_hex(data: bytes) -> str:
    """``XXH3_64bits`` (seed 0) of *data* as 16 hex digits, as an ``xxh3-64`` extent's checksum is stored."""
    import xxhash

    return f"{xxhash.xxh3_64_intdigest(data) & _MASK:016x}"


def xxh3_extents_hex(digests: Iterable[str]) -> str:
    """A row's ``xxh3-64-extents``: ``XXH3_64bits`` of its extents' digests (hex) in order, each 8 little-endian
    bytes, as 16 hex digits."""
    import xxhash

    words = np.array([int(d, 16) for d in digests], dtype="<u8")
    return f"{xxhash.xxh3_64_intdigest(words.tobytes()) & _MASK:016x}"


def _codec_parts(codec: str) -> tuple[str, int, bool] | None:
    """``(name, level, shuffled)`` of a ``zstd:<level>:<shuffle>`` or ``lz4:<acceleration>:<shuffle>`` text."""
    parts = codec.split(":")
    if len(parts) != 3 or parts[0] not in ("zstd", "lz4") or parts[2] not in ("shuffle", "noshuffle"):
        return None
    try:
        return parts[0], int(parts[1]), parts[2] == "shuffle"
    except ValueError:
        return None


def decode_chunk(stored: bytes, codec: str, counts: tuple[int, ...], dtype: np.dtype, order: str) -> np.ndarray:
    """The values of a chunk of box counts *counts* from its stored bytes (numcodecs and numpy alone).

    The stream decodes to the chunk's elements as bytes in the dataset's *order* (byte-shuffled
    first when the codec says ``shuffle``: byte 0 of every element, then byte 1, ...).

    Raises
    ------
    ValueError
        The bytes are no stream of *codec*, or decode to another size than the box's.
    """
    parts = _codec_parts(codec)
    if parts is None:
        raise ValueError(f"codec {codec!r} is not one this checker decodes")
    name, level, shuffled = parts
    import numcodecs

    compressor = numcodecs.Zstd(level=level) if name == "zstd" else numcodecs.LZ4(acceleration=level)
    n = int(np.prod(counts, dtype=np.int64)) * dtype.itemsize
    try:
        raw = np.frombuffer(bytes(compressor.decode(stored)), dtype=np.uint8)
    except Exception as exc:  # noqa: BLE001 - numcodecs raises RuntimeError (zstd) or ValueError
        raise ValueError(f"{name} cannot decode it: {type(exc).__name__}: {exc}") from None
    if raw.size != n:
        raise ValueError(f"decodes to {raw.size} bytes, its box holds {n}")
    if shuffled and dtype.itemsize > 1:
        raw = np.ascontiguousarray(raw.reshape(dtype.itemsize, -1).T).reshape(-1)
    return np.frombuffer(raw.tobytes(), dtype=dtype).reshape(counts, order="F" if order == "F" else "C")


def _valid_box(box: Any, shape: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """``(starts, counts)`` of a chunk's box when it is well formed and inside *shape*, else None."""
    try:
        starts, counts = (tuple(int(x) for x in part) for part in box)
    except (TypeError, ValueError):
        return None
    if len(starts) != len(shape) or len(counts) != len(shape):
        return None
    if any(c <= 0 or a < 0 or a + c > n for a, c, n in zip(starts, counts, shape)):
        return None
    return starts, counts


def check_compressed(r: Row, versions: Iterable[int] | None,
                     expected: Callable[[str, int, int], np.ndarray]) -> tuple[str | None, str, int | None, int, int]:
    """Judge a compressed row (the module docstring's rules): ``(reason, detail, version, checked, unchecked)``,
    *reason* None for a good row, *version* the one its chunks decode to (None when none or not decoded),
    *checked*/*unchecked* how many checksums (chunks' and the row's) were or could not be recomputed.

    *versions*: the versions tried for the row's (dataset, step) (None: nobody tried to write it).
    """
    dtype = np.dtype(r.dtype)
    size = int(np.prod(r.shape, dtype=np.int64)) * dtype.itemsize
    chunks = r.chunks
    if _codec_parts(str(r.codec)) is None:
        return "unknown_codec", f"codec {r.codec!r}", None, 0, 0
    if [c.seq for c in chunks] != list(range(r.n_extents)) or not chunks:
        return ("wrong_extents", f"writes.extents is {r.n_extents}, its chunks have seq {[c.seq for c in chunks]}",
                None, 0, 0)
    stored = sum(c.nbytes for c in chunks)
    if r.stored_nbytes != stored:
        return "wrong_extents", f"stored_nbytes is {r.stored_nbytes}, its chunks hold {stored}", None, 0, 0
    for c in chunks:
        if not c.file.exists():
            return "missing_file", f"chunk {c.seq}: {c.path}", None, 0, 0
        have = c.file.stat().st_size
        if have < c.offset + c.nbytes:
            return "short_file", f"chunk {c.seq} ends at {c.offset + c.nbytes}, file has {have} bytes", None, 0, 0
    if r.nbytes != size:
        return "wrong_length", f"dataset size is {size}", None, 0, 0
    boxes = [_valid_box(c.box, r.shape) for c in chunks]
    if any(b is None for b in boxes):
        k = next(i for i, b in enumerate(boxes) if b is None)
        return "bad_boxes", f"chunk {chunks[k].seq}: box {chunks[k].box!r} is malformed or outside {r.shape}", None, 0, 0
    cover = np.zeros(r.shape, dtype=np.int64)
    for starts, counts in boxes:  # type: ignore[misc]
        cover[tuple(slice(a, a + n) for a, n in zip(starts, counts))] += 1
    if not (cover == 1).all():
        return ("bad_boxes", f"{int((cover == 0).sum())} elements in no box, {int((cover > 1).sum())} in more than one",
                None, 0, 0)
    if versions is None:
        return "unintended", "", None, 0, 0
    # the stored bytes, their checksums recomputed, and the chunks decoded
    blobs, digests = [], []
    for c in chunks:
        with open(c.file, "rb") as fh:
            fh.seek(c.offset)
            blobs.append(fh.read(c.nbytes))
        digests.append(xxh3_hex(blobs[-1]))
    checked = unchecked = 0
    sums: list[str] = []
    for c, digest in zip(chunks, digests):
        if c.checksum_algo == "xxh3-64":
            checked += 1
            if digest != c.checksum.lower():
                sums.append(f"chunk {c.seq} at {c.offset}: xxh3-64 of its {c.nbytes} stored bytes is {digest}, "
                            f"the catalog says {c.checksum}")
        else:
            unchecked += 1
    if r.checksum_algo == "xxh3-64-extents":
        checked += 1
        mine = xxh3_extents_hex(digests)
        if mine != r.checksum.lower():
            sums.append(f"row: xxh3-64-extents of the chunks' stored bytes is {mine}, the row says {r.checksum}")
    else:
        unchecked += 1
    got = np.zeros(r.shape, dtype=dtype)
    for c, blob, (starts, counts) in zip(chunks, blobs, boxes):  # type: ignore[misc]
        try:
            values = decode_chunk(blob, str(r.codec), counts, dtype, r.order)
        except ValueError as exc:
            return ("undecodable", f"chunk {c.seq} (box {c.box}, {c.nbytes} bytes at {c.offset}): {exc}"
                    + (f"; {sums[0]}" if sums else ""), None, checked, unchecked)
        got[tuple(slice(a, a + n) for a, n in zip(starts, counts))] = values
    version = next((v for v in sorted(versions)
                    if np.array_equal(np.asarray(expected(r.dataset, r.step, v), dtype=dtype), got)), None)
    if version is None:
        return ("no_version", f"tried versions {sorted(versions)}; {int((got == 0).sum())} of {got.size} elements zero"
                + (f"; {sums[0]}" if sums else ""), None, checked, unchecked)
    if sums:
        more = f"; and {len(sums) - 3} more" if len(sums) > 3 else ""
        return ("checksum_mismatch", f"chunks decode to version {version}; " + "; ".join(sums[:3]) + more, version,
                checked, unchecked)
    return None, "", version, checked, unchecked


@dataclass
class Intents:
    """What the workers said they tried (``intent``) and saw return (``done``), per (dataset, step)."""

    tried: dict[tuple[str, int], set[int]] = field(default_factory=lambda: defaultdict(set))
    done: dict[tuple[str, int], int] = field(default_factory=dict)

    def read(self, lines: Iterable[str], names: Callable[[int], str]) -> "Intents":
        """Add the ``intent``/``done`` lines of a progress file (dataset given by index)."""
        for line in lines:
            words = line.split()
            if len(words) >= 4 and words[0] in ("intent", "done"):
                key = (names(int(words[1])), int(words[2]))
                version = int(words[3])
                self.tried[key].add(version)
                if words[0] == "done":
                    self.done[key] = max(version, self.done.get(key, -1))
        return self


def overlaps(rows: Iterable[Row]) -> set[int]:
    """Ids of rows sharing bytes of a file with another row."""
    by_file: dict[Path, list[tuple[int, int, int]]] = defaultdict(list)  # (offset, nbytes, row id) per span
    for r in rows:
        for path, offset, nbytes in r.spans:
            by_file[path].append((offset, nbytes, r.id))
    bad: set[int] = set()
    for spans in by_file.values():
        spans.sort()
        reach, owner = -1, None  # furthest end so far and the row that reaches it
        for offset, nbytes, rid in spans:
            if nbytes > 0 and offset < reach:
                bad.update((rid, owner))  # two chunks of one row sharing bytes count too
            if offset + nbytes > reach:
                reach, owner = offset + nbytes, rid
    return bad


def unreferenced_bytes(rows: Iterable[Row], files: Iterable[Path]) -> int:
    """Bytes of *files* that no row covers."""
    cover: dict[Path, list[tuple[int, int]]] = defaultdict(list)
    for r in rows:
        for path, offset, nbytes in r.spans:
            cover[path.resolve()].append((offset, offset + nbytes))
    total = 0
    for f in files:
        size = f.stat().st_size
        covered, end = 0, 0
        for a, b in sorted(cover.get(f.resolve(), [])):
            a, b = max(a, end), min(b, size)
            if b > a:
                covered += b - a
                end = b
        total += size - covered
    return total


def check(rows: list[Row], intents: Intents, expected: Callable[[str, int, int], np.ndarray]) -> dict[str, Any]:
    """Judge every row; see the module docstring for the rules.

    Parameters
    ----------
    rows : list of Row
    intents : Intents
        Versions tried and returned per (dataset name, step).
    expected : callable
        ``expected(dataset, step, version)`` -> the global numpy array of that version.

    Returns
    -------
    dict
        ``rows`` (count), ``compressed_rows`` (count), ``bad`` (list of {id, dataset, step, path,
        offset, nbytes, codec, reason, detail}), ``lost`` (list), ``overlap`` (row ids),
        ``checksums_checked`` and ``checksums_unchecked`` (a compressed row's chunks' and its own),
        ``versions`` (how many rows hold a version other than the first).
    """
    bad: list[dict[str, Any]] = []
    matched: dict[tuple[str, int], int] = {}
    checked = unchecked = 0
    compressed = 0
    for r in rows:
        reason, detail = None, ""
        key = (r.dataset, r.step)
        dtype = np.dtype(r.dtype)
        size = int(np.prod(r.shape, dtype=np.int64)) * dtype.itemsize
        raw = b""
        if r.codec is not None:
            compressed += 1
            reason, detail, version, n_checked, n_unchecked = check_compressed(
                r, intents.tried[key] if key in intents.tried else None, expected)
            checked, unchecked = checked + n_checked, unchecked + n_unchecked
            if version is not None:
                matched[key] = version
        elif not r.file.exists():
            reason = "missing_file"
        elif r.file.stat().st_size < r.offset + r.nbytes:
            reason, detail = "short_file", f"file has {r.file.stat().st_size} bytes"
        elif r.nbytes != size:
            reason, detail = "wrong_length", f"dataset size is {size}"
        elif key not in intents.tried:
            reason = "unintended"
        else:
            with open(r.file, "rb") as fh:
                fh.seek(r.offset)
                raw = fh.read(r.nbytes)
            version = None
            for v in sorted(intents.tried[key]):
                want = np.asarray(expected(r.dataset, r.step, v), dtype=dtype)
                if want.tobytes(order="F" if r.order == "F" else "C") == raw:
                    version = v
                    break
            if version is None:
                reason = "no_version"
                got = np.frombuffer(raw, dtype=dtype)
                detail = f"tried versions {sorted(intents.tried[key])}; {int((got == 0).sum())} of {got.size} elements zero"
            else:
                matched[key] = version
                if r.checksum_algo and r.checksum_algo != "none":
                    mine = recompute_checksum(raw, r.dtype, r.checksum_algo)
                    if mine is None:
                        unchecked += 1
                    else:
                        checked += 1
                        if mine != r.checksum.lower():
                            reason = "checksum_mismatch"
                            detail = f"bytes are version {version}; recomputed {mine}, row says {r.checksum}"
                else:
                    unchecked += 1
        if reason is not None:
            bad.append(dict(id=r.id, run=r.run_id, level=r.level, dataset=r.dataset, step=r.step, path=r.path,
                            offset=r.offset, nbytes=r.nbytes, codec=r.codec, reason=reason, detail=detail))
    present = {(r.dataset, r.step) for r in rows}
    lost = []
    for key, v in sorted(intents.done.items()):
        if key not in present:
            lost.append(dict(dataset=key[0], step=key[1], version=v, reason="no row"))
        elif key in matched and matched[key] < v:
            lost.append(dict(dataset=key[0], step=key[1], version=v, reason=f"row holds older version {matched[key]}"))
    return dict(rows=len(rows), compressed_rows=compressed, bad=bad, lost=lost, overlap=sorted(overlaps(rows)),
                checksums_checked=checked, checksums_unchecked=unchecked,
                versions=sum(1 for v in matched.values() if v))


def flat_table(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Trial records as one table (``columns``, ``rows``): nested dicts flattened to ``a.b`` columns.

    A result file of 200 trials stores each key once instead of 200 times; :func:`records_of`
    gives the records back (a member a record lacked comes back absent).
    """
    def flat(record: dict[str, Any], prefix: str = "") -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in record.items():
            if isinstance(value, dict) and value:
                out.update(flat(value, f"{prefix}{key}."))
            else:
                out[f"{prefix}{key}"] = value
        return out

    flats = [flat(r) for r in records]
    columns = list(dict.fromkeys(k for f in flats for k in f))
    return dict(columns=columns, rows=[[f.get(c, _ABSENT) for c in columns] for f in flats], absent=_ABSENT)


_ABSENT = "-absent-"  # a member a record does not have (None is a value)


def records_of(table: dict[str, Any]) -> list[dict[str, Any]]:
    """The records of a :func:`flat_table`, nested again."""
    out = []
    for row in table["rows"]:
        record: dict[str, Any] = {}
        for column, value in zip(table["columns"], row):
            if value == table["absent"]:
                continue
            *parents, last = column.split(".")
            where = record
            for p in parents:
                where = where.setdefault(p, {})
            where[last] = value
        out.append(record)
    return out
