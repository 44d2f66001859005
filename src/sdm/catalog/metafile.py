"""The run's meta-file: every committed change of a run, kept with its data.

Each run directory holds ``.sdm-meta.jsonl`` and its backup ``.sdm-meta.jsonl.bak`` (the
paper's meta-file "MF" and its copy "MFC"): JSON lines, one record per change of the
catalog (the run, a group defined, a data view, attributes, an info, the writes of one
dump, an import, a session opening or closing the run).  A record is appended to both files and
the meta-file synced *before* the catalog commits the change, so after any crash the
meta-file knows at least what the catalog knows, and ``sdm rebuild``
(:mod:`sdm.catalog.rebuild`) makes a catalog from it alone.  The backup guards against
damage of the meta-file, not against a crash (which can only tear the meta-file's last
line, and readers leave that out): it gets every record in the same ``write`` but is
synced lazily, at most :data:`BACKUP_SYNC_SECONDS` after a record and when the writer
closes.  The format is documented in ``docs/format.md``.

Every line is one JSON object whose last member is ``"crc"``: the CRC-32 (zlib) of the
line's text with that member removed, that is of ``line[:line.rindex(',"crc":')] + "}"``,
as 8 lowercase hex digits.  A line that is not JSON or whose CRC differs is damaged.

Only rank 0 of a writing session owns a :class:`MetaFile`; it never imports SQLAlchemy.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import time
import zlib
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Sequence

from ..errors import CatalogVersionError, IntegrityError, StorageError
from ..storage.failures import storage_error
from ..file_formats import HISTORY, META_RECORDS, Record, Where, check_meta_log, load_json, read_regular
from .changes import Names, RunCreated

__all__ = ["META", "BACKUP", "BACKUP_SYNC_SECONDS", "FORMAT", "MetaFile", "MetaLog", "read_meta", "line_of",
           "parse_line", "check_line", "read_description"]

#: The meta-file's name in a run directory, and its backup's.
META = ".sdm-meta.jsonl"
BACKUP = ".sdm-meta.jsonl.bak"

#: An append syncs the backup too when its last sync is at least this old (seconds); so
#: does :meth:`MetaFile.close`.  A machine crash can lose from the backup the records
#: appended since its last sync (the meta-file itself has them all).
BACKUP_SYNC_SECONDS = 1.0

#: The format version this SDM writes and reads (``"v"`` of every record).
FORMAT = 1

#: Record types of format 1 (``"t"``); a reader meeting another type refuses it unless it says ``"optional": true``.
#: Their members are checked against :data:`sdm.file_formats.META_RECORDS` when a meta-file is read.
TYPES = tuple(META_RECORDS)

_CRC_KEY = ',"crc":"'


def line_of(record: dict[str, Any]) -> bytes:
    """One record as its line (newline included), with its ``"crc"`` member last."""
    body = json.dumps(record, separators=(",", ":"), ensure_ascii=False, default=_plain)
    crc = zlib.crc32(body.encode()) & 0xFFFFFFFF
    return (body[:-1] + f'{_CRC_KEY}{crc:08x}"}}\n').encode()


def parse_line(text: str) -> dict[str, Any] | None:
    """A record from its line, or None when the line is damaged (see :func:`check_line`)."""
    try:
        return check_line(text, Where("a meta-file line"))
    except IntegrityError:
        return None


def check_line(text: str, where: Where) -> dict[str, Any]:
    """A record from its line (without its newline), its CRC checked and its JSON parsed with bounded nesting.

    Raises
    ------
    IntegrityError
        The line is damaged: no ``"crc"`` member last, a CRC that differs, not JSON (or
        nested deeper than :data:`sdm.file_formats.MAX_DEPTH`), or not a JSON object.
    """
    cut = text.rfind(_CRC_KEY)
    if cut < 0 or not text.endswith('"}'):
        raise where.error('the line does not end with its "crc" member')
    crc = text[cut + len(_CRC_KEY):-2]
    body = text[:cut] + "}"
    if not re.fullmatch(r"[0-9a-f]{8}", crc) or zlib.crc32(body.encode("utf-8", "surrogatepass")) & 0xFFFFFFFF \
            != int(crc, 16):
        raise where.error("the line's CRC-32 does not match its text")
    record = load_json(body, where, "the line")
    if not isinstance(record, dict):
        raise where.error(f"the line is a JSON {type(record).__name__}, not an object")
    return record


def _plain(obj: Any) -> Any:
    """numpy scalars and arrays (problem sizes) as plain JSON."""
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, datetime):
        return obj.isoformat()
    raise TypeError(f"{type(obj).__name__} is not JSON")


class MetaFile:
    """Rank 0's writer of a run's meta-file and its backup (append to both, sync the meta-file).

    Parameters
    ----------
    run_dir : Path
        The run's directory (absolute).
    sync : bool
        ``fsync`` the meta-file after each append, and the backup lazily (the session's ``sync``).
    backup_sync : float
        Seconds: an append syncs the backup as well when its last sync is at least this
        old (0: at every append, as the meta-file); :meth:`close` syncs it in any case.

    Besides appending, it keeps the names of the run's groups and datasets by their
    catalog ids (:attr:`names`, learned from the catalog's answers), since records name
    things, not ids. What it appends comes from :class:`~sdm.catalog.recorder.Recorder`.
    """

    def __init__(self, run_dir: Path, *, sync: bool = True, backup_sync: float = BACKUP_SYNC_SECONDS) -> None:
        self.paths = (Path(run_dir) / META, Path(run_dir) / BACKUP)
        self.sync = sync
        self.backup_sync = float(backup_sync)
        self._backup_synced = time.monotonic()  # nothing to sync yet
        self._backup_dirty = False
        self._session = secrets.token_hex(4)  # record ids: unique per session
        self._count = 0
        self._fds: list[int] = []
        self.names = Names()  # the run's groups and datasets by id, learned from the catalog's answers
        try:
            for p in self.paths:
                self._fds.append(os.open(p, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644))
        except OSError as exc:
            self.close()
            raise StorageError(f"cannot open the meta-file {exc.filename}: {exc.strerror}", exc.errno) from None

    def close(self) -> None:
        """Sync the backup (with ``sync``) and close both files.

        Raises
        ------
        StorageError
            The backup cannot be synced (both files are closed all the same).
        """
        try:
            if self._fds and self._backup_dirty:
                self._fsync(1)
        finally:
            for fd in self._fds:
                os.close(fd)
            self._fds = []

    def _cut(self, written: Sequence[int]) -> None:
        """Take back the bytes of a failed append (*written* to each file): never a record in one file only, nor a
        torn line that later appends would leave in the middle (where it reads as damage)."""
        for fd, n in zip(self._fds, written):
            if n:
                try:
                    os.ftruncate(fd, os.fstat(fd).st_size - n)
                except OSError:  # the file keeps a torn last line, read as an unfinished append
                    pass

    def _fsync(self, which: int) -> None:
        """Sync the meta-file (0) or the backup (1)."""
        try:
            os.fsync(self._fds[which])
        except OSError as exc:
            raise StorageError(f"cannot sync the meta-file {self.paths[which]}: {exc.strerror}", exc.errno) from None
        if which == 1:
            self._backup_synced, self._backup_dirty = time.monotonic(), False

    # ------------------------------------------------------------- appending
    def append(self, *records: dict[str, Any]) -> str:
        """Append records (one write per file, one sync of the meta-file); returns the id of the last one.

        With ``sync``, the meta-file is synced before this returns; the backup only when
        its last sync is ``backup_sync`` seconds old or more (else at a later append or
        at :meth:`close`).

        Raises
        ------
        StorageError
            A file cannot be written or synced (the catalog change must then not happen);
            a record that could not be written whole to both files (a full disk: ``ENOSPC``)
            is taken back from both.
        """
        data = []
        rid = ""
        for rec in records:
            self._count += 1
            rid = f"{self._session}.{self._count}"
            data.append(line_of({"v": FORMAT, "t": rec.pop("t"), "id": rid, **rec}))
        blob = b"".join(data)
        written = [0] * len(self._fds)
        for i, fd in enumerate(self._fds):
            try:
                while written[i] < len(blob):  # a full disk may take part of it before it refuses the rest
                    written[i] += os.write(fd, blob[written[i]:])
            except OSError as exc:
                self._cut(written)
                raise storage_error(exc, f"cannot append to the meta-file {self.paths[i]}", self.paths[i],
                                    needed=len(blob)) from None
        if self.sync:
            self._backup_dirty = True
            self._fsync(0)
            if time.monotonic() - self._backup_synced >= self.backup_sync:
                self._fsync(1)
        return rid

    def run(self, *, application: str, run_id: int, catalog_id: str, nprocs: int, problem_size: Any,
            attributes: dict[str, Any] | None, created: datetime, root: str, directory: str) -> None:
        """The run's first record (before the catalog commits the run; see :class:`~sdm.catalog.changes.RunCreated`)."""
        change = RunCreated(application=application, run_id=run_id, catalog_id=catalog_id, nprocs=nprocs,
                            problem_size=problem_size, attributes=dict(attributes or {}), created=created, root=root,
                            directory=directory)
        self.append(change.to_record(self.names))


# --------------------------------------------------------------------------- reading
@dataclass
class MetaLog:
    """The records of a run's meta-file as read (see :func:`read_meta`).

    Attributes
    ----------
    path : Path
        The file the records come from (the meta-file, or its backup when the main one is damaged).
    records : list of dict
        Every intact record in file order (a torn last line, an append cut by a crash, left out).
    notes : list of str
        What was found along the way (a damaged main file, a torn last line).
    """

    path: Path
    records: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)
    nbytes: int = 0


@dataclass
class _Scan:
    """One file as read: its intact records, the first damaged line (None: none) and why, a torn last line, its size."""

    records: list[dict[str, Any]]
    bad: int | None
    why: str
    torn: bool
    size: int


def _scan(path: Path) -> _Scan:
    """Read one file's lines up to the first damaged one."""
    try:
        data = read_regular(path, Where(str(path)))
    except FileNotFoundError:
        return _Scan([], 0, "", False, 0)
    except OSError as exc:
        raise StorageError(f"cannot read the meta-file {path}: {exc.strerror}", exc.errno) from None
    lines = data.split(b"\n")
    torn = lines[-1] != b""  # the last append did not finish (a crash): never committed
    records: list[dict[str, Any]] = []
    for number, raw in enumerate(lines[:-1], start=1):
        where = Where(f"{path} line {number}")
        try:
            text = raw.decode()
        except UnicodeDecodeError as exc:
            return _Scan(records, number, f"not UTF-8 text at byte {exc.start}", torn, len(data))
        try:
            records.append(check_line(text, where))
        except IntegrityError as exc:
            return _Scan(records, number, str(exc)[len(where.file) + 2:], torn, len(data))
    return _Scan(records, None, "", torn, len(data))


#: What a meta-file whose lines are intact but whose records are not SDM's asks for.
_ADVICE = ("its lines carry valid CRCs, so they were written this way, not damaged: the meta-file was edited or not "
           "written by SDM; restore the run directory from a copy")


def read_meta(run_dir: Path) -> MetaLog:
    """Read a run's meta-file, or its backup when the meta-file is damaged or missing.

    Every record is checked against the schema of its type and against the records
    before it (:func:`sdm.file_formats.check_meta_log`).

    Raises
    ------
    IntegrityError
        Both files are damaged (or missing): the message names both, the first damaged
        line of each, why, and how many records before it are intact (what could be
        recovered).  Or the file read holds a record that is not what SDM writes (a
        member missing, of the wrong type or out of range, a group or dataset no earlier
        record defines, bytes that do not match a shape): the message names the file,
        the line and the member.
    CatalogVersionError
        A record of a newer format version, or of a type this SDM does not know that is
        not marked optional.
    """
    main, backup = Path(run_dir) / META, Path(run_dir) / BACKUP
    got: dict[Path, _Scan] = {}
    for p in (main, backup):
        got[p] = scan = _scan(p)
        if scan.bad is None and scan.records:
            notes = [] if p == main else [f"{main} is {_what(main, got[main])}; its backup {backup} was used"]
            if scan.torn:
                notes.append(f"{p} ends with an unfinished record (an append cut by a crash), left out")
            _check_types(p, scan.records)
            check_meta_log(scan.records, lambda line: Where(f"{p} line {line}", _ADVICE))
            return MetaLog(p, scan.records, notes, scan.size)
    parts = [f"{p} is {_what(p, got[p])}" for p in (main, backup)]
    best = max((main, backup), key=lambda p: len(got[p].records))
    raise IntegrityError(
        f"the meta-file of run directory {run_dir} and its backup are both damaged: {'; '.join(parts)}; "
        f"what can still be recovered: the {len(got[best].records)} records before the first damaged line of {best}"
    )


def _what(path: Path, scan: _Scan) -> str:
    if not path.exists():
        return "missing"
    if scan.bad is None and not scan.records:
        return "empty" if scan.size == 0 else "without a complete record"
    return f"damaged at line {scan.bad} ({scan.why}; {len(scan.records)} intact records before it)"


def _check_types(path: Path, records: list[dict[str, Any]]) -> None:
    """Refuse records this SDM cannot read (newer format, unknown required type); a version that is not an
    integer or a type that is not text is no newer format but a bad record (the schema refuses it)."""
    written_by = next((r.get("sdm") for r in records if r.get("t") == "run"), "unknown")
    for number, rec in enumerate(records, start=1):
        version, kind = rec.get("v"), rec.get("t")
        if type(version) is int and version > FORMAT:
            raise CatalogVersionError(
                f"{path} line {number}: meta-file format version {version!r} is newer than this SDM reads "
                f"({FORMAT}); it was written by SDM {written_by}: rebuild with that version or newer")
        if type(kind) is str and kind not in TYPES and not rec.get("optional"):
            raise CatalogVersionError(
                f"{path} line {number}: record type {kind!r} is unknown to this SDM (format {FORMAT}); "
                f"it was written by SDM {written_by}: rebuild with that version or newer")


#: An index history's description is a few kilobytes (its parts: 5 per rank); larger files are refused unread.
DESCRIPTION_MAX = 64 << 20


def read_description(path: Path, schema: Record = HISTORY) -> dict[str, Any]:
    """A file of one line in the meta-file's format (an index history's description), checked against *schema*.

    Raises
    ------
    StorageError
        The file cannot be read.
    IntegrityError
        The line is damaged or its record does not fit *schema* (the message names the member).
    """
    where = Where(str(path))
    try:
        raw = read_regular(path, where, DESCRIPTION_MAX)
    except OSError as exc:
        raise StorageError(f"cannot read {path}: {exc.strerror}", exc.errno) from None
    try:
        text = raw.decode().rstrip("\n")
    except UnicodeDecodeError as exc:
        raise where.error(f"not UTF-8 text at byte {exc.start}") from None
    return dict(schema.validate(check_line(text, where), where))
