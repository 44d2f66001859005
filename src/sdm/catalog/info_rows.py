"""The rows of the catalog's table ``infos`` (see :mod:`sdm.catalog.infos`): store, read, erase.

The functions work in a caller's transaction; :class:`Infos` is the catalog's store of
infos, one transaction (or read) per call.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from sqlalchemy.exc import SQLAlchemyError

from ..errors import (CatalogError, DatasetNotFoundError, GroupNotFoundError, IntegrityError, InvalidArgumentError,
                      NotFoundError, RunNotFoundError)
from . import schema as S
from .connection import Store, checked_id, short_error, utcnow
from .infos import InfoRecord, InfoValue, Place, crc_text, info_value, place_text
from .loading import utc

__all__ = ["Infos", "put", "load", "find", "drop_steps_after"]


def _owner(t: sa.Table, run_id: int, group_id: int | None, dataset_id: int | None, step: int | None) -> list[Any]:
    """Conditions selecting one place of a run (``NULL`` compared as ``IS NULL``)."""
    return [t.c.run_id == run_id,
            t.c.group_id.is_(None) if group_id is None else t.c.group_id == group_id,
            t.c.dataset_id.is_(None) if dataset_id is None else t.c.dataset_id == dataset_id,
            t.c.step.is_(None) if step is None else t.c.step == step]


def put(con: Connection, run_id: int, name: str, value: InfoValue, *, group_id: int | None, dataset_id: int | None,
        step: int | None, created_at: datetime, url: str) -> None:
    """Store an info in the transaction *con*, replacing one of the same place and name.

    Raises
    ------
    RunNotFoundError, GroupNotFoundError, DatasetNotFoundError
        The run, or the group or dataset ids of the run, do not exist.
    InvalidArgumentError
        A dataset without its group, or a step without its dataset.
    """
    if con.execute(sa.select(S.runs.c.id).where(S.runs.c.id == run_id)).first() is None:
        raise RunNotFoundError(f"no run {run_id} in catalog {url!r}")
    if (dataset_id is not None and group_id is None) or (step is not None and dataset_id is None):
        raise InvalidArgumentError(f"info {name!r}: a step belongs to a dataset and a dataset to a group")
    if group_id is not None and con.execute(sa.select(S.groups.c.id).where(
            S.groups.c.id == group_id, S.groups.c.run_id == run_id)).first() is None:
        raise GroupNotFoundError(f"no group id {group_id} in run {run_id} of catalog {url!r}")
    if dataset_id is not None and con.execute(sa.select(S.datasets.c.id).where(
            S.datasets.c.id == dataset_id, S.datasets.c.group_id == group_id)).first() is None:
        raise DatasetNotFoundError(f"no dataset id {dataset_id} in group id {group_id} of catalog {url!r}")
    t = S.infos
    con.execute(t.delete().where(*_owner(t, run_id, group_id, dataset_id, step), t.c.name == name))
    con.execute(t.insert().values(run_id=run_id, group_id=group_id, dataset_id=dataset_id, step=step, name=name,
                                  dtype=value.dtype, shape=json.dumps(list(value.shape)), data=value.data,
                                  checksum=value.checksum, created_at=created_at))


def load(con: Connection, run_id: int, *, place: Place | None = None, name: str | None = None,
         data: bool = True) -> list[InfoRecord]:
    """The infos of a run (all of them, or those of one *place*, or one *name* there), in order.

    Order: the run's first, then by group and dataset position, step and name. With
    ``data=False`` the records carry no bytes (``data`` is ``b""``), for listings.

    Raises
    ------
    IntegrityError
        An info's bytes do not match their CRC-32 (a damaged catalog).
    """
    t, g, d = S.infos, S.groups, S.datasets
    cols = [t.c.id, t.c.step, t.c.name, t.c.dtype, t.c.shape, t.c.checksum, t.c.created_at,
            g.c.name.label("gname"), g.c.position.label("gpos"), d.c.name.label("dname"), d.c.position.label("dpos")]
    if data:
        cols.append(t.c.data)
    q = (sa.select(*cols).select_from(t.outerjoin(g, g.c.id == t.c.group_id).outerjoin(d, d.c.id == t.c.dataset_id))
         .where(t.c.run_id == run_id))
    if place is not None:
        group, dataset, step = place
        q = q.where(t.c.group_id.is_(None) if group is None else g.c.name == group,
                    t.c.dataset_id.is_(None) if dataset is None else d.c.name == dataset,
                    t.c.step.is_(None) if step is None else t.c.step == step)
    if name is not None:
        q = q.where(t.c.name == name)
    newest: dict[tuple[Any, ...], Any] = {}
    for row in sorted(con.execute(q).mappings().all(), key=lambda r: r["id"]):  # a place's newest row wins
        newest[(row["gname"], row["dname"], row["step"], row["name"])] = row
    rows = sorted(newest.values(), key=lambda r: (-1 if r["gpos"] is None else r["gpos"], -1 if r["dpos"] is None
                                                  else r["dpos"], -1 if r["step"] is None else r["step"], r["name"]))
    out = []
    for row in rows:
        raw = bytes(row["data"]) if data else b""
        rec = InfoRecord(dtype=row["dtype"], shape=tuple(json.loads(row["shape"])), data=raw, checksum=row["checksum"],
                         run_id=run_id, name=row["name"], group=row["gname"], dataset=row["dname"],
                         step=None if row["step"] is None else int(row["step"]), created_at=utc(row["created_at"]))
        if data and crc_text(raw) != rec.checksum:
            raise IntegrityError(f"info {rec.name!r} on {_where(rec.place, run_id)} is damaged in the catalog: "
                                 f"its bytes have CRC-32 {crc_text(raw)}, its row says {rec.checksum}")
        out.append(rec)
    return out


def find(con: Connection, run_id: int, name: str, place: Place, url: str) -> InfoRecord:
    """One info with its bytes.

    Raises
    ------
    NotFoundError
        No info of that name at that place.
    """
    got = load(con, run_id, place=place, name=name)
    if not got:
        raise NotFoundError(f"no info {name!r} on {_where(place_text(*place), run_id)} in catalog {url!r}")
    return got[0]


def _where(place: str, run_id: int) -> str:
    """``run 3``, or ``group 'g' of run 3`` and so on."""
    return f"run {run_id}" if place == "run" else f"{place} of run {run_id}"


def drop_steps_after(con: Connection, run_id: int, after_step: int, groups: Sequence[str] | None) -> int:
    """Erase the infos of the steps after *after_step* of a run's groups (a truncation); how many."""
    g, t = S.groups, S.infos
    gq = sa.select(g.c.id).where(g.c.run_id == run_id)
    if groups is not None:
        gq = gq.where(g.c.name.in_(list(groups)))
    done = con.execute(t.delete().where(t.c.run_id == run_id, t.c.step > after_step, t.c.group_id.in_(gq)))
    return int(done.rowcount or 0)


class Infos(Store):
    """The infos of a catalog's runs (named arrays, see :mod:`sdm.catalog.infos`)."""

    def set_info(self, run_id: int, name: str, array: Any, *, group_id: int | None = None,
                 dataset_id: int | None = None, step: int | None = None, created_at: datetime | None = None) -> None:
        """Store an info (a named array) on a run, a group, a dataset or one step of a dataset.

        An info of the same name at the same place is replaced. See :mod:`sdm.catalog.infos`.

        Parameters
        ----------
        run_id : int
        name : str
        array : array_like or InfoValue
            Checked by :func:`sdm.catalog.infos.info_value`.
        group_id, dataset_id : int, optional
            The group (and its dataset) the info belongs to; neither: the run.
        step : int, optional
            With ``dataset_id``: the step of the dataset the info belongs to.
        created_at : datetime, optional
            The time to record (the meta-file's); default now.

        Raises
        ------
        InvalidNameError, UnsupportedDtypeError, InvalidArgumentError
            A bad name, dtype, size, or place (nothing is stored).
        RunNotFoundError, GroupNotFoundError, DatasetNotFoundError
        CatalogError
        """
        value = info_value(name, array)
        rid = checked_id(run_id)
        if rid is None:
            raise RunNotFoundError(f"no run {run_id} in catalog {self.url!r}")
        try:
            with self.db.tx() as con:
                put(con, rid, name, value, group_id=group_id, dataset_id=dataset_id, step=step,
                    created_at=created_at or utcnow(), url=self.url)
        except SQLAlchemyError as exc:
            raise CatalogError(f"catalog {self.url!r} refused info {name!r} of run {run_id}: {short_error(exc)}") from None

    def info(self, run_id: int, name: str, *, group: str | None = None, dataset: str | None = None,
             step: int | None = None) -> InfoRecord:
        """The info *name* of a run, or of its group, dataset or step (names), as an ``InfoRecord``.

        ``record.array()`` is the numpy array; ``record.data`` its bytes.

        Raises
        ------
        NotFoundError
            No such info (a ``KeyError``).
        IntegrityError
            Its bytes do not match their CRC-32.
        """
        rid = checked_id(run_id)
        with self.db.reading(f"read info {name!r}"), self.db.connect() as con:
            return find(con, -1 if rid is None else rid, name, (group, dataset, step), self.url)

    def infos(self, run_id: int, *, group: str | None = None, dataset: str | None = None, step: int | None = None,
              everywhere: bool = False, data: bool = True) -> list[InfoRecord]:
        """The infos (``InfoRecord``) of a run's place (default: the run itself), or with *everywhere* all of them.

        Ordered: the run's, then by group and dataset position, step and name. With
        ``data=False`` the records carry no bytes.

        Raises
        ------
        RunNotFoundError
            No such run.
        IntegrityError
            An info's bytes do not match their CRC-32.
        """
        rid = checked_id(run_id)
        with self.db.reading("read infos"), self.db.connect() as con:
            if rid is None or con.execute(sa.select(S.runs.c.id).where(S.runs.c.id == rid)).first() is None:
                raise RunNotFoundError(f"no run {run_id} in catalog {self.url!r}")
            return load(con, rid, place=None if everywhere else (group, dataset, step), data=data)
