"""Writes, their extents, the data files and their space.

Space is reserved ahead of a write, atomically (:meth:`Writes.reserve`: a file's
high-water mark ``files.alloc_end`` raised in one transaction, so two writers never
receive the same bytes), given back when unused, and lowered by ``sdm gc``. A step's
writes are committed in one transaction with their datasets' step summaries
(:meth:`Writes.record_writes`); a truncation erases the steps after one
(:meth:`Writes.truncate`).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Callable, Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError as SAIntegrityError
from sqlalchemy.exc import SQLAlchemyError

from ..errors import CatalogError, InvalidArgumentError, RunNotFoundError, StepExistsError
from . import info_rows as IR
from . import loading as L
from . import reader as RD
from . import schema as S
from .bulk import insert_rows
from .connection import Database, Store, checked_id, inserted_id, short_error, utcnow
from .loading import utc as _utc
from .records import ExtentRecord, FileRecord, Truncation, WriteRecord

__all__ = ["Writes"]

# the statements of a read's lookups, as text for the lean read path (see sdm.catalog.reader)
_WRITES = ('SELECT ' + ", ".join(f'writes."{c.name}"' for c in S.writes.c) + ', files."path" FROM writes '
           'JOIN files ON files.id = writes.file_id WHERE writes.dataset_id = :d')
_LOOKUP_WRITE = _WRITES + ' AND writes."step" = :s'
_LOOKUP_WRITES = _WRITES.replace("writes.dataset_id = :d", "writes.dataset_id IN :ds") + ' AND writes."step" = :s'
_IDS_PER_QUERY = 500  # dataset ids in one IN (...) list
_RUN_WRITES_FROM = ('SELECT ' + ", ".join(f'writes."{c.name}"' for c in S.writes.c)
                    + ', files."path", datasets."name" AS dname, groups."name" AS gname FROM writes '
                    'JOIN files ON files.id = writes.file_id JOIN datasets ON datasets.id = writes.dataset_id '
                    'JOIN groups ON groups.id = datasets.group_id WHERE files.run_id = :r')
_RUN_ORDER = ' ORDER BY files."path", writes."offset"'
_RUN_WRITES = _RUN_WRITES_FROM + _RUN_ORDER
#: ... of the files *ps*, and the subfiled rows with an extent in them
_RUN_WRITES_IN = (_RUN_WRITES_FROM + ' AND (files."path" IN :ps OR writes.id IN (SELECT extents.write_id FROM extents '
                  'JOIN files AS ef ON ef.id = extents.file_id WHERE ef.run_id = :r AND ef."path" IN :ps))' + _RUN_ORDER)
_EXTENTS = ('SELECT ' + ", ".join(f'extents."{c.name}"' for c in S.extents.c) + ', files."path" FROM extents '
            'JOIN files ON files.id = extents.file_id WHERE extents.write_id IN :ids ORDER BY extents.write_id, extents.seq')


class Writes(Store):
    """The writes, extents and data files of a catalog's runs, and the files' space."""

    def __init__(self, db: Database) -> None:
        super().__init__(db)
        #: File ids by ``(run id, path)``, known from transactions that made or read them
        self._file_ids: dict[tuple[int, str], int] = {}
        db.rollback_hooks.append(self._file_ids.clear)  # ids of files a batch's rollback took back

    def lookup_write(self, dataset_id: int, step: int) -> WriteRecord | None:
        """Return where *step* of a dataset was written, or ``None``."""
        with self.db.read("look up a write") as con:
            rows = con.rows(_LOOKUP_WRITE, {"d": int(dataset_id), "s": int(step)})
            if not rows:
                return None
            return _write_record(rows[0], _read_extents(con, [rows[0]["id"]]) if rows[0]["extents"] else None)

    def lookup_writes(self, dataset_ids: Sequence[int], step: int) -> dict[int, WriteRecord]:
        """Where *step* of each of several datasets was written, in one query per 500 datasets:
        ``{dataset id: WriteRecord}`` (a dataset without that step is absent)."""
        ids = [int(d) for d in dict.fromkeys(dataset_ids)]
        out: dict[int, WriteRecord] = {}
        with self.db.read("look up writes") as con:
            for at in range(0, len(ids), _IDS_PER_QUERY):
                rows = con.rows(_LOOKUP_WRITES, {"ds": ids[at:at + _IDS_PER_QUERY], "s": int(step)})
                parts = _read_extents(con, [row["id"] for row in rows if row["extents"]])
                out.update((int(row["dataset_id"]), _write_record(row, parts)) for row in rows)
        return out

    def dataset_writes(self, dataset_id: int) -> dict[int, WriteRecord]:
        """Every step of a dataset with where it was written (one query): ``{step: WriteRecord}``."""
        with self.db.read("read a dataset's writes") as con:
            rows = con.rows(_WRITES, {"d": int(dataset_id)})
            parts = _read_extents(con, [row["id"] for row in rows if row["extents"]])
            return {int(row["step"]): _write_record(row, parts) for row in rows}

    def file_end(self, run_id: int, path: str) -> int:
        """First free byte of a data file: the end of its last recorded write."""
        sp, f = S.spans(), S.files
        with self.db.connect() as con:
            end = con.execute(
                sa.select(sa.func.max(sp.c.offset + sp.c.nbytes))
                .select_from(sp.join(f, f.c.id == sp.c.file_id))
                .where(f.c.run_id == run_id, f.c.path == path)
            ).scalar()
        return int(end or 0)

    def reserve(self, run_id: int, requests: Sequence[tuple]) -> list[int | None]:
        """Reserve fresh file space for writes, atomically (one transaction).

        Each request is ``(path, level, nbytes, whole_file)``, optionally with an alignment: the
        offset is then the first multiple of it at or past the high-water mark (subfile
        extents, :mod:`sdm.storage.subfiles`). A whole-file request (level 1:
        one file per dataset, step and version) creates the file's row and owns the whole
        file; it gets ``None`` when the path is already taken (by a version written
        before, or by another job), and the caller asks again with another path. Other
        requests get the offset where their ``nbytes`` start: the file's high-water mark
        is raised by ``nbytes`` in the same transaction, so two writers, in this job or in
        another, never receive the same bytes. Space reserved but never committed (a crash)
        stays unreferenced until ``sdm gc``.

        Returns
        -------
        list of int or None
            The offset of each request, or ``None`` for a whole-file path already taken.
        """
        f = S.files
        out: list[int | None] = [None] * len(requests)
        now = utcnow()
        shared: dict[int, list[tuple[int, int, int]]] = {}  # file id -> (request, nbytes, alignment), in order
        with self.db.tx() as con:
            for i, (path, level, nbytes, whole_file, *rest) in enumerate(requests):
                key = (int(run_id), path)
                file_id = self._file_ids.get(key)
                if file_id is None or whole_file:
                    row = {"run_id": run_id, "path": path, "level": int(level), "created_at": now,
                           "alloc_end": int(nbytes) if whole_file else 0}
                    made = con.execute(_insert_new(con, f, row).returning(f.c.id)).scalar()
                    if whole_file:  # the file is this write's alone, or taken
                        out[i] = None if made is None else 0
                        if made is not None:
                            self._file_ids[key] = int(made)
                        continue
                    file_id = made if made is not None else con.execute(_FILE_ID, {"run_id": run_id, "path": path}).scalar_one()
                    self._file_ids[key] = int(file_id)
                shared.setdefault(int(file_id), []).append((i, int(nbytes), int(rest[0]) if rest else 1))
            for file_id, wanted in shared.items():  # one statement per file (two with alignments)
                if all(align == 1 for _, _, align in wanted):
                    total = sum(n for _, n, _ in wanted)
                    at = int(con.execute(_GROW, {"fid": file_id, "grow": total}).scalar_one()) - total
                    for i, n, _ in wanted:
                        out[i], at = at, at + n
                    continue
                at = int(con.execute(_GROW, {"fid": file_id, "grow": 0}).scalar_one())  # the row locked
                for i, n, align in wanted:
                    start = (at + align - 1) // align * align
                    out[i], at = start, start + n
                con.execute(_SET_END, {"fid": file_id, "end": at})
        return out

    def give_back(self, run_id: int, unused: Sequence[tuple[str, int, int]]) -> int:
        """Give back space reserved ahead and not used: ``(path, start, end)`` lowers the file's mark from
        *end* to *start*, only where it is still *end* (nobody reserved after it); one transaction.

        Returns
        -------
        int
            The files whose mark was lowered.
        """
        f = S.files
        lowered = 0
        with self.db.tx() as con:
            for path, start, end in unused:
                lowered += con.execute(f.update().where(f.c.run_id == int(run_id), f.c.path == path,
                                                        f.c.alloc_end == int(end)).values(alloc_end=int(start))).rowcount
        return lowered

    def reserved_ends(self, run_id: int) -> dict[str, int]:
        """Each level-2/3 data file's high-water mark (``files.alloc_end``): where its reserved space ends."""
        f = S.files
        with self.db.engine.connect() as con:
            return {str(p): int(e) for p, e in con.execute(
                sa.select(f.c.path, f.c.alloc_end).where(f.c.run_id == run_id, f.c.level != 1))}

    def record_write(self, *, run_id: int, **write: Any) -> None:
        """Commit one write; see :meth:`record_writes` for the fields."""
        self.record_writes(run_id, [write])

    def record_writes(self, run_id: int, writes: Sequence[dict[str, Any]]) -> None:
        """Commit the writes of one step in one transaction: all of them or none.

        Each write is a dict with ``dataset_id, step, path, level, offset, nbytes,
        checksum, checksum_algo, method, seconds, nprocs, overwrite`` and optionally
        ``reason``, ``version`` and ``copy`` (a write to the archive tier: its verified
        copy, ``tier, location, size, checksum, verified_at``, recorded with it). The file's row is made by :meth:`reserve` (or here,
        for callers that place bytes themselves). A new step is inserted (a duplicate is
        caught by the unique constraint, not a query). An overwrite (``version`` > 1)
        switches the step's row to the new bytes only if the row is still the version
        it replaces (``version - 1``), so two jobs overwriting one step cannot both win.

        Raises
        ------
        StepExistsError
            A step exists and its write does not say overwrite (another writer got there
            first), or another job overwrote it meanwhile.
        """
        now = utcnow()
        new_ids: dict[tuple[int, str], int] = {}
        inserts: list[dict[str, Any]] = []
        summaries: dict[int, list[int]] = {}
        try:
            with self.db.tx() as con:
                for w in writes:
                    key = (int(run_id), w["path"])
                    file_id = self._file_ids.get(key) or new_ids.get(key)
                    if file_id is None:
                        file_id = con.execute(_FILE_ID, {"run_id": run_id, "path": w["path"]}).scalar()
                    if file_id is None:
                        file_id = inserted_id(con.execute(
                            S.files.insert(),
                            {"run_id": run_id, "path": w["path"], "level": int(w["level"]),
                             "created_at": w.get("written_at") or now,
                             "alloc_end": int(w["offset"]) + int(w["nbytes"])},
                        ))
                    new_ids[key] = file_id
                    version = int(w.get("version", 1))
                    params = dict(
                        dataset_id=w["dataset_id"],
                        step=int(w["step"]),
                        file_id=file_id,
                        offset=int(w["offset"]),
                        nbytes=int(w["nbytes"]),
                        checksum=w["checksum"],
                        checksum_algo=w["checksum_algo"],
                        method=w["method"],
                        reason=w.get("reason"),
                        seconds=float(w["seconds"]),
                        nprocs=int(w["nprocs"]),
                        written_at=w.get("written_at") or now,  # the meta-file's time, when it stamped one
                        version=version,
                        extents=len(w.get("extents") or ()),
                        codec=w.get("codec"),
                        stored_nbytes=None if w.get("stored_nbytes") is None else int(w["stored_nbytes"]),
                        max_error=None if w.get("max_error") is None else float(w["max_error"]),
                    )
                    if w["overwrite"] and w.get("replaces") is not None:
                        _flush(con, inserts, summaries)  # the row it replaces may be among them
                        where = {"w_dataset": w["dataset_id"], "w_step": int(w["step"]), "w_version": int(w["replaces"])}
                        if con.execute(_UPDATE_WRITE, {**params, **where}).rowcount != 1:
                            raise StepExistsError(
                                f"step {w['step']} of dataset id {w['dataset_id']} was overwritten or removed by "
                                "another job while this write ran; nothing was recorded (read it again and retry)"
                            )
                    else:  # new steps go in together (one executemany), before any row that reads them back
                        inserts.append(params)
                        _summarize(summaries, params)
                    if w.get("extents") or (w["overwrite"] and w.get("replaces") is not None):
                        _flush(con, inserts, summaries)
                        self._put_extents(con, run_id, w, now, new_ids)
                    if w.get("copy"):  # written to the archive tier: the object is the file's copy there
                        from .copies import upsert_copy

                        upsert_copy(con, file_id, **{**w["copy"], "state": "verified"})
                _flush(con, inserts, summaries)
        except SAIntegrityError as exc:
            text = str(exc.orig)
            if "uq_writes_dataset_step" in text or "writes.dataset_id, writes.step" in text:
                which = ", ".join(f"step {w['step']} of dataset id {w['dataset_id']}" for w in writes)
                raise StepExistsError(f"{which} is already recorded; pass overwrite=True to replace it") from None
            raise CatalogError(f"catalog {self.url!r} refused the write record: {short_error(exc)}") from None
        self._file_ids.update(new_ids)

    def _put_extents(self, con: Connection, run_id: int, w: dict[str, Any], now: datetime,
                     new_ids: dict[tuple[int, str], int]) -> None:
        """The extents of a recorded write (a subfiled step), replacing those of the version it overwrote.

        Each of ``w["extents"]`` is a dict with ``path, offset, nbytes, start, checksum,
        checksum_algo``; their files' rows were made by :meth:`reserve`.
        """
        e = S.extents
        wid = con.execute(sa.select(S.writes.c.id).where(S.writes.c.dataset_id == int(w["dataset_id"]),
                                                          S.writes.c.step == int(w["step"]))).scalar_one()
        con.execute(e.delete().where(e.c.write_id == wid))
        rows = []
        for seq, x in enumerate(w.get("extents") or ()):
            key = (int(run_id), x["path"])
            file_id = self._file_ids.get(key) or new_ids.get(key) or con.execute(
                _FILE_ID, {"run_id": run_id, "path": x["path"]}).scalar()
            if file_id is None:
                made = con.execute(S.files.insert(), {
                    "run_id": run_id, "path": x["path"], "level": int(w["level"]), "created_at": now,
                    "alloc_end": int(x["offset"]) + int(x["nbytes"])}).inserted_primary_key
                file_id = made[0] if made else None
            if file_id is None:
                raise CatalogError(f"catalog {self.url!r} did not record the subfile {x['path']}")
            new_ids[key] = int(file_id)
            rows.append(dict(write_id=wid, seq=seq, file_id=file_id, offset=int(x["offset"]), nbytes=int(x["nbytes"]),
                             start=int(x["start"]), checksum=x["checksum"], checksum_algo=x["checksum_algo"],
                             box=None if x.get("box") is None else json.dumps([list(x["box"][0]), list(x["box"][1])])))
        if rows:
            con.execute(e.insert(), rows)

    def extents(self, write_ids: Sequence[int]) -> dict[int, tuple[ExtentRecord, ...]]:
        """The extents of subfiled writes by write id (one query per thousand ids)."""
        with self.db.read("read extents") as con:
            return _read_extents(con, write_ids)

    def truncate(self, run_id: int, after_step: int, groups: Sequence[str] | None = None, *,
                 writers: int | None = 0, confine: Callable[[str, str], Any] | None = None) -> Truncation:
        """Erase every step after *after_step* of a run's groups (all, or those named), in one transaction.

        The rows, the datasets' step summaries, each group's truncation point (new steps
        must come after it) and the files' space (see :mod:`sdm.catalog.truncation`).
        The files themselves are the caller's to change, after this commit
        (:func:`sdm.segments.release_space`).

        Parameters
        ----------
        run_id : int
        after_step : int
            The last step kept (``>= 0``).
        groups : sequence of str, optional
            The groups to truncate (default: every group of the run).
        writers : int or None
            Writing sessions the caller holds on the run itself (``Session.truncate``: 1;
            None: no check, a rebuild replaying a truncation made when it was allowed).
        confine : callable, optional
            ``confine(path, record)``, called before the commit for every file given back;
            raising refuses the truncation, nothing changed (see
            :func:`sdm.catalog.truncation.truncate`).

        Returns
        -------
        Truncation
            What was erased.

        Raises
        ------
        InvalidArgumentError
            *after_step* is not an integer ``>= 0``, or *groups* not a list of names.
        RunNotFoundError, GroupNotFoundError
        RunStateError
            Another session is writing the run.
        IntegrityError
            From *confine*: a file given back lies outside the run's directory.
        """
        from .truncation import truncate

        try:
            step = checked_id(after_step)  # an int64 (numpy integers too)
        except InvalidArgumentError:
            step = None
        if step is None or step < 0:
            raise InvalidArgumentError(f"after_step must be an integer >= 0, got {after_step!r}")
        if groups is not None and (isinstance(groups, str) or not all(isinstance(n, str) for n in groups)):
            raise InvalidArgumentError(f"groups must be a list of group names, got {groups!r}")
        rid = checked_id(run_id)
        if rid is None:
            raise RunNotFoundError(f"no run {run_id} in catalog {self.url!r}")
        try:
            with self.db.tx() as con:
                done = truncate(con, rid, step, groups, writers, self.url, confine)
                IR.drop_steps_after(con, rid, step, groups)  # the infos of the erased steps go with them
        except SQLAlchemyError as exc:
            raise CatalogError(f"catalog {self.url!r} failed to truncate run {run_id}: {short_error(exc)}") from None
        for path in done.removed_files:
            self._file_ids.pop((rid, path), None)
        return done

    def drop_file(self, run_id: int, path: str) -> None:
        """Forget a data file that no committed write refers to (after ``sdm gc`` removed it)."""
        f, w, e = S.files, S.writes, S.extents
        with self.db.tx() as con:
            con.execute(f.delete().where(f.c.run_id == int(run_id), f.c.path == path,
                                         ~sa.exists().where(w.c.file_id == f.c.id),
                                         ~sa.exists().where(e.c.file_id == f.c.id)))
        self._file_ids.pop((int(run_id), path), None)

    def lower_alloc_end(self, run_id: int, path: str, end: int) -> None:
        """Lower a file's high-water mark to *end* (after ``sdm gc`` cut its unreferenced tail).

        Never below the end of a committed write of the file.
        """
        f, sp = S.files, S.spans()
        with self.db.tx() as con:
            used = con.execute(
                sa.select(sa.func.coalesce(sa.func.max(sp.c.offset + sp.c.nbytes), 0))
                .select_from(sp.join(f, f.c.id == sp.c.file_id)).where(f.c.run_id == int(run_id), f.c.path == path)
            ).scalar_one()
            con.execute(f.update().where(f.c.run_id == int(run_id), f.c.path == path)
                        .values(alloc_end=max(int(end), int(used))))

    def writes(self, run_id: int, paths: Sequence[str] | None = None) -> list[tuple[str, str, WriteRecord]]:
        """Every write of a run (or those with bytes in its files *paths*: a subfiled row's extents count) as
        ``(group, dataset, record)``, by file then offset (fixed SQL on the lean read path: a close's trailers
        read every row the session wrote)."""
        params: dict[str, Any] = {"r": int(run_id)}
        sql = _RUN_WRITES
        if paths is not None:
            params["ps"] = list(dict.fromkeys(str(p) for p in paths))
            if not params["ps"]:
                return []
            sql = _RUN_WRITES_IN
        with self.db.read("read a run's writes") as con:
            rows = con.rows(sql, params)
            parts = _read_extents(con, [row["id"] for row in rows if row["extents"]])
            return [(row["gname"], row["dname"], _write_record(row, parts)) for row in rows]

    def files(self, run_id: int) -> list[FileRecord]:
        """The data files of a run with their number of writes and bytes."""
        sp, f = S.spans(), S.files
        q = (
            sa.select(f.c.path, f.c.level, sa.func.count(sa.distinct(sp.c.write_id)), sa.func.coalesce(sa.func.sum(sp.c.nbytes), 0))
            .select_from(f.outerjoin(sp, sp.c.file_id == f.c.id))
            .where(f.c.run_id == run_id)
            .group_by(f.c.id, f.c.path, f.c.level)
            .order_by(f.c.path)
        )
        with self.db.connect() as con:
            return [FileRecord(p, lv, int(n), int(b)) for p, lv, n, b in con.execute(q)]


_FILE_ID = sa.select(S.files.c.id).where(
    S.files.c.run_id == sa.bindparam("run_id"), S.files.c.path == sa.bindparam("path")
)
#: Raise a file's high-water mark by ``grow`` bytes, returning the new mark (locks the row).
_GROW = S.files.update().where(S.files.c.id == sa.bindparam("fid")).values(
    alloc_end=S.files.c.alloc_end + sa.bindparam("grow", type_=sa.BigInteger)).returning(S.files.c.alloc_end)
_SET_END = S.files.update().where(S.files.c.id == sa.bindparam("fid")).values(
    alloc_end=sa.bindparam("end", type_=sa.BigInteger))
_FIRST = sa.bindparam("s_first", type_=sa.BigInteger)
_LAST = sa.bindparam("s_last", type_=sa.BigInteger)
#: New steps in the dataset's summary, all those of one call together: ``s_count`` steps from ``s_first`` to
#: ``s_last``, ``s_nbytes`` bytes (an overwrite leaves it: a step of a dataset always has its size).
_NEW_STEPS = S.datasets.update().where(S.datasets.c.id == sa.bindparam("s_dataset")).values(
    nsteps=S.datasets.c.nsteps + sa.bindparam("s_count", type_=sa.BigInteger),
    first_step=sa.case((sa.or_(S.datasets.c.first_step.is_(None), S.datasets.c.first_step > _FIRST), _FIRST),
                       else_=S.datasets.c.first_step),
    last_step=sa.case((sa.or_(S.datasets.c.last_step.is_(None), S.datasets.c.last_step < _LAST), _LAST),
                      else_=S.datasets.c.last_step),
    nbytes_written=S.datasets.c.nbytes_written + sa.bindparam("s_nbytes", type_=sa.BigInteger),
)
_UPDATE_WRITE = S.writes.update().where(
    S.writes.c.dataset_id == sa.bindparam("w_dataset"),
    S.writes.c.step == sa.bindparam("w_step"),
    S.writes.c.version == sa.bindparam("w_version"),
)


def _summarize(summaries: dict[int, list[int]], row: dict[str, Any]) -> None:
    """Add a new step's row to its dataset's pending summary ``[count, first, last, nbytes]``."""
    step, nbytes = row["step"], row["nbytes"]
    s = summaries.get(row["dataset_id"])
    if s is None:
        summaries[row["dataset_id"]] = [1, step, step, nbytes]
    else:
        s[0] += 1
        s[1] = min(s[1], step)
        s[2] = max(s[2], step)
        s[3] += nbytes


def _flush(con: Connection, inserts: list[dict[str, Any]], summaries: dict[int, list[int]]) -> None:
    """Insert the new steps gathered (one executemany) and add them to their datasets' summaries (one update per
    dataset, whatever its number of new steps); empties both."""
    if inserts:
        insert_rows(con, S.writes, inserts)
        con.execute(_NEW_STEPS, [{"s_dataset": d, "s_count": n, "s_first": first, "s_last": last, "s_nbytes": b}
                                 for d, (n, first, last, b) in summaries.items()])
        inserts.clear()
        summaries.clear()


def _insert_new(con: Connection, table: sa.Table, row: dict[str, Any]) -> sa.Insert:
    """``INSERT`` that does nothing when the row's unique key exists (another job made it)."""
    if con.dialect.name == "postgresql":
        from sqlalchemy.dialects import postgresql

        return postgresql.insert(table).values(**row).on_conflict_do_nothing()
    from sqlalchemy.dialects import sqlite

    return sqlite.insert(table).values(**row).on_conflict_do_nothing()



def _read_extents(con: RD.Reader, write_ids: Sequence[int]) -> dict[int, tuple[ExtentRecord, ...]]:
    """The extents of the writes *write_ids*, in order (one query per :data:`~sdm.catalog.loading.CHUNK` ids)."""
    found: dict[int, list[ExtentRecord]] = {}
    for part in L.chunks(sorted({int(i) for i in write_ids})):
        for row in con.rows(_EXTENTS, {"ids": part}):
            found.setdefault(int(row["write_id"]), []).append(ExtentRecord(
                path=row["path"], offset=int(row["offset"]), nbytes=int(row["nbytes"]), start=int(row["start"]),
                checksum=row["checksum"], checksum_algo=row["checksum_algo"], box=_chunk_box(row.get("box"))))
    return {k: tuple(v) for k, v in found.items()}


def _chunk_box(text: str | None) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """A chunk's box from its JSON (None: an extent of a subfiled step)."""
    if text is None:
        return None
    starts, counts = json.loads(text)
    return tuple(int(v) for v in starts), tuple(int(v) for v in counts)


def _write_record(row, extents: dict[int, tuple[ExtentRecord, ...]] | None = None) -> WriteRecord:
    return WriteRecord(
        dataset_id=row["dataset_id"],
        step=int(row["step"]),
        path=row["path"],
        offset=int(row["offset"]),
        nbytes=int(row["nbytes"]),
        checksum=row["checksum"],
        checksum_algo=row["checksum_algo"],
        method=row["method"],
        seconds=float(row["seconds"]),
        nprocs=int(row["nprocs"]),
        written_at=_utc(row["written_at"]),
        reason=row["reason"],
        version=int(row["version"]),
        extents=(extents or {}).get(int(row["id"]), ()) if row["extents"] else (),
        codec=row.get("codec"),
        stored_nbytes=None if row.get("stored_nbytes") is None else int(row["stored_nbytes"]),
        max_error=None if row.get("max_error") is None else float(row["max_error"]),
    )

