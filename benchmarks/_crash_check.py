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

Also counted, apart from bad rows:

``lost``      a call the worker saw return (``done D S V``) has no row, or its row holds an
              older version than the newest that returned;
``overlap``   two rows of one file share bytes (``[offset, offset + nbytes)`` intersect);
``unreferenced_bytes``  bytes of data files that no row covers (crash leftovers; information).
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

__all__ = ["Row", "load_rows", "query", "Intents", "check", "recompute_checksum", "overlaps"]

QUERY = """
SELECT w.id AS id, r.id AS run_id, r.root AS root, f.path AS path, w."offset" AS "offset",
       w.nbytes AS nbytes, w.checksum AS checksum, w.checksum_algo AS checksum_algo,
       w.step AS step, d.name AS dataset, d.dtype AS dtype, d.shape AS shape,
       d.storage_order AS storage_order, g.name AS grp, g.level AS level
FROM writes w
JOIN files f ON f.id = w.file_id
JOIN runs r ON r.id = f.run_id
JOIN datasets d ON d.id = w.dataset_id
JOIN groups g ON g.id = d.group_id
ORDER BY w.id
"""


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

    @property
    def file(self) -> Path:
        return Path(self.root) / self.path


def _row(m: dict[str, Any]) -> Row:
    return Row(int(m["id"]), int(m["run_id"]), str(m["root"]), str(m["path"]), int(m["offset"]), int(m["nbytes"]),
               str(m["checksum"] or ""), str(m["checksum_algo"] or ""), int(m["step"]), str(m["dataset"]),
               str(m["dtype"]), tuple(int(x) for x in json.loads(m["shape"])), str(m["storage_order"]),
               str(m["grp"]), int(m["level"]))


def load_rows(url: str) -> list[Row]:
    """Every ``writes`` row of the catalog at *url* (``sqlite:///path`` or ``postgresql://...``)."""
    return [_row(m) for m in query(url, QUERY, table="writes")]


def query(url: str, sql: str, *, table: str) -> list[dict[str, Any]]:
    """The rows of *sql* on the catalog at *url*; none when the catalog or its table *table* does not exist.

    SQLite: on a copy of the database file and its ``-journal``/``-wal`` (an interrupted
    transaction is rolled back in the copy, the original is left as it is).
    """
    if url.startswith("sqlite:///"):
        src = Path(url[len("sqlite:///"):])
        if not src.exists():
            return []
        with tempfile.TemporaryDirectory(prefix="sdm-crash-cat-") as tmp:
            copy = Path(tmp) / src.name
            for suffix in ("", "-journal", "-wal"):
                part = src.with_name(src.name + suffix)
                if part.exists():
                    shutil.copyfile(part, copy.with_name(copy.name + suffix))
            con = sqlite3.connect(copy)
            try:
                con.row_factory = sqlite3.Row
                try:
                    return [dict(r) for r in con.execute(sql)]
                except sqlite3.OperationalError as exc:
                    if "no such table" in str(exc):
                        return []
                    raise
            finally:
                con.close()
    import sqlalchemy as sa

    for scheme in ("postgresql://", "postgres://"):
        if url.startswith(scheme):  # the psycopg (3) driver, as SDM's catalog uses
            url = "postgresql+psycopg://" + url[len(scheme):]
    engine = sa.create_engine(url)
    try:
        with engine.connect() as con:
            if not sa.inspect(con).has_table(table):
                return []
            return [dict(m) for m in con.execute(sa.text(sql)).mappings()]
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
    by_file: dict[Path, list[Row]] = defaultdict(list)
    for r in rows:
        by_file[r.file].append(r)
    bad: set[int] = set()
    for rs in by_file.values():
        rs.sort(key=lambda r: (r.offset, r.id))
        reach, owner = -1, None  # furthest end so far and the row that reaches it
        for r in rs:
            if r.nbytes > 0 and r.offset < reach:
                bad.update((r.id, owner.id))  # type: ignore[union-attr]
            if r.offset + r.nbytes > reach:
                reach, owner = r.offset + r.nbytes, r
    return bad


def unreferenced_bytes(rows: Iterable[Row], files: Iterable[Path]) -> int:
    """Bytes of *files* that no row covers."""
    cover: dict[Path, list[tuple[int, int]]] = defaultdict(list)
    for r in rows:
        cover[r.file.resolve()].append((r.offset, r.offset + r.nbytes))
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
        ``rows`` (count), ``bad`` (list of {id, dataset, step, path, offset, nbytes, reason,
        detail}), ``lost`` (list), ``overlap`` (row ids), ``checksums_checked``,
        ``checksums_unchecked``, ``versions`` (how many rows hold a version other than the first).
    """
    bad: list[dict[str, Any]] = []
    matched: dict[tuple[str, int], int] = {}
    checked = unchecked = 0
    for r in rows:
        reason, detail = None, ""
        key = (r.dataset, r.step)
        dtype = np.dtype(r.dtype)
        size = int(np.prod(r.shape, dtype=np.int64)) * dtype.itemsize
        raw = b""
        if not r.file.exists():
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
                            offset=r.offset, nbytes=r.nbytes, reason=reason, detail=detail))
    present = {(r.dataset, r.step) for r in rows}
    lost = []
    for key, v in sorted(intents.done.items()):
        if key not in present:
            lost.append(dict(dataset=key[0], step=key[1], version=v, reason="no row"))
        elif key in matched and matched[key] < v:
            lost.append(dict(dataset=key[0], step=key[1], version=v, reason=f"row holds older version {matched[key]}"))
    return dict(rows=len(rows), bad=bad, lost=lost, overlap=sorted(overlaps(rows)), checksums_checked=checked,
                checksums_unchecked=unchecked, versions=sum(1 for v in matched.values() if v))


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
