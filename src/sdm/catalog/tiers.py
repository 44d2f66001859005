"""Where the bytes are: every copy of a run's files per storage tier, and the log of tier operations.

The catalog's tables ``copies`` and ``tier_operations`` (schema revision 0008).  A file
of a run has at most one copy per tier (``fast``: the file system under the run's root,
at the file's path; ``archive``: an object store, ``s3://bucket/key``).  A file without
any ``copies`` row lives on the fast tier only, at its path: that is every file a run
wrote before it was first migrated, so the write path never touches this table.

A copy is ``copying`` while it is being made (a crash leaves it so, and a rerun makes
it again) and ``verified`` once its bytes were checked against the catalog's checksums;
only a verified copy lets another one be purged.
"""

from __future__ import annotations

import getpass
import socket
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from ..errors import InvalidArgumentError, NotFoundError
from . import schema as S
from .copies import upsert_copy
from .loading import utc
from ..storage.naming import MEMBER, member, member_location  # noqa: F401 (the catalog's names for them)

if TYPE_CHECKING:
    from .catalog import Catalog

__all__ = ["Copy", "Operation", "member", "member_location", "copies", "put_copy", "drop_copy", "start_operation", "finish_operation",
           "operations", "FAST", "ARCHIVE"]

FAST, ARCHIVE = S.TIERS


@dataclass(frozen=True)
class Copy:
    """One copy of one data file.

    Attributes
    ----------
    path : str
        The file (``files.path``, relative to the run's root).
    tier : str
        ``"fast"`` or ``"archive"``.
    location : str
        Where the copy is: the path under the run's root (fast), ``s3://bucket/key`` (archive).
    size : int
    checksum : str or None
        Of the whole copy, ``"<algorithm>:<hex>"``.
    state : str
        ``"copying"`` or ``"verified"``.
    verified_at : datetime or None
    implicit : bool
        A fast copy no row records (the file was never migrated).
    """

    path: str
    tier: str
    location: str
    size: int
    checksum: str | None
    state: str
    verified_at: datetime | None
    implicit: bool = False

    @property
    def verified(self) -> bool:
        """Whether the copy is whole and was checked against the catalog."""
        return self.state == "verified"


@dataclass(frozen=True)
class Operation:
    """One migrate, stage or purge of a run, as the catalog logged it."""

    id: int
    run_id: int | None
    operation: str
    tier: str
    who: str
    started_at: datetime
    finished_at: datetime | None
    files: int
    nbytes: int
    seconds: float | None
    outcome: str | None
    detail: str | None




def _now() -> datetime:
    return datetime.now(timezone.utc)


def _when(value: datetime | None) -> datetime | None:
    return None if value is None else utc(value)


def _check_tier(tier: str) -> str:
    if tier not in S.TIERS:
        raise InvalidArgumentError(f"storage tier must be one of {', '.join(S.TIERS)}, got {tier!r}")
    return tier


_COPIES = (sa.select(S.files.c.path, S.files.c.alloc_end, S.copies.c.tier, S.copies.c.location, S.copies.c.size,
                     S.copies.c.checksum, S.copies.c.state, S.copies.c.verified_at)
           .select_from(S.files.outerjoin(S.copies, S.copies.c.file_id == S.files.c.id))
           .where(S.files.c.run_id == sa.bindparam("r")).order_by(S.files.c.path, S.copies.c.tier))
_COPIES_OF = _COPIES.where(S.files.c.path.in_(sa.bindparam("p", expanding=True)))  # built once: every archived read


def copies(cat: "Catalog", run_id: int, paths: Any = None) -> dict[str, list[Copy]]:
    """Every copy of every file of a run (or of its files *paths*), by file path (files without a row: their
    implicit fast copy)."""
    q, params = (_COPIES, {"r": int(run_id)}) if paths is None else (_COPIES_OF, {"r": int(run_id), "p": list(paths)})
    out: dict[str, list[Copy]] = {}
    with cat._connect() as con:
        for path, end, tier, location, size, checksum, state, verified_at in con.execute(q, params):
            found = out.setdefault(path, [])
            if tier is None:
                found.append(Copy(path, FAST, path, int(end), None, "verified", None, implicit=True))
            else:
                found.append(Copy(path, tier, location, int(size), checksum, state, _when(verified_at)))
    return out


def _file_id(con: sa.Connection, run_id: int, path: str) -> int:
    fid = con.execute(sa.select(S.files.c.id).where(S.files.c.run_id == int(run_id), S.files.c.path == path)).scalar()
    if fid is None:
        raise NotFoundError(f"run {run_id} has no data file {path!r}")
    return int(fid)


def put_copy(cat: "Catalog", run_id: int, path: str, tier: str, *, location: str, size: int,
             checksum: str | None = None, state: str = "copying", verified_at: datetime | None = None,
             created_at: datetime | None = None) -> None:
    """Record (or replace) the copy of a file on *tier*, in one transaction (*created_at*: of a new row, default now).

    Raises
    ------
    InvalidArgumentError
        An unknown tier or state.
    NotFoundError
        The run has no such file.
    """
    _check_tier(tier)
    if state not in S.COPY_STATES:
        raise InvalidArgumentError(f"copy state must be one of {', '.join(S.COPY_STATES)}, got {state!r}")
    with cat._tx() as con:
        upsert_copy(con, _file_id(con, run_id, path), tier=tier, location=location, size=size, checksum=checksum,
                    state=state, verified_at=verified_at, created_at=created_at)


def drop_copy(cat: "Catalog", run_id: int, path: str, tier: str) -> None:
    """Forget the copy of a file on *tier* (after its bytes were removed, or before they are)."""
    _check_tier(tier)
    c = S.copies
    with cat._tx() as con:
        fid = _file_id(con, run_id, path)
        con.execute(c.delete().where(c.c.file_id == fid, c.c.tier == tier))


def start_operation(cat: "Catalog", run_id: int | None, operation: str, tier: str) -> int:
    """Log the start of a migrate, stage or purge; returns its id (see :func:`finish_operation`)."""
    if operation not in ("migrate", "stage", "purge"):
        raise InvalidArgumentError(f"tier operation must be migrate, stage or purge, got {operation!r}")
    _check_tier(tier)
    who = f"{getpass.getuser()}@{socket.gethostname()}"
    with cat._tx() as con:
        got = con.execute(S.tier_operations.insert().values(
            run_id=run_id, operation=operation, tier=tier, who=who, started_at=_now()).returning(S.tier_operations.c.id))
        return int(got.scalar_one())


def finish_operation(cat: "Catalog", op_id: int, *, files: int, nbytes: int, seconds: float, outcome: str,
                     detail: str | None = None) -> None:
    """Log the end of an operation: what it moved, how long it took, ``ok`` or ``failed`` (and why)."""
    t = S.tier_operations
    with cat._tx() as con:
        con.execute(t.update().where(t.c.id == int(op_id)).values(
            finished_at=_now(), files=int(files), nbytes=int(nbytes), seconds=float(seconds), outcome=outcome,
            detail=detail))


def operations(cat: "Catalog", run_id: int | None = None) -> list[Operation]:
    """The logged tier operations (of one run, or all), oldest first; an unfinished one was interrupted or runs."""
    t = S.tier_operations
    q = sa.select(t).order_by(t.c.started_at, t.c.id)
    if run_id is not None:
        q = q.where(t.c.run_id == int(run_id))
    with cat._connect() as con:
        rows: list[Any] = list(con.execute(q).mappings())
    return [Operation(int(r["id"]), r["run_id"], r["operation"], r["tier"], r["who"], utc(r["started_at"]),
                      _when(r["finished_at"]), int(r["files"]), int(r["nbytes"]), r["seconds"], r["outcome"], r["detail"])
            for r in rows]
