"""Run records read from the catalog: what a listing or a search returns.

Everything here reads the runs it is given, never the catalog around them, so its cost
follows the size of the answer, not the number of writes in the catalog. Ids travel in
``IN`` lists of at most :data:`CHUNK` entries, so no statement's parameter count grows
with the answer either.

Steps come two ways. The summary (count, first and last step and bytes of each dataset)
is kept on the dataset's row by the commit of each new step, so it costs nothing to
read; the full list is read only when a caller asks for it (``steps=True``), since a
long run holds one row per dataset and step.
"""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import datetime, timezone
from typing import Any, Iterator, Mapping, Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from . import schema as S
from .reader import Reader
from .records import DatasetRecord, GroupRecord, RunRecord
from .values import decode

__all__ = ["CHUNK", "chunks", "load_runs", "run_totals"]

#: Ids per ``IN (...)`` list.
CHUNK = 500


def chunks(ids: Sequence[int]) -> Iterator[list[int]]:
    """*ids* in lists of at most :data:`CHUNK`."""
    for start in range(0, len(ids), CHUNK):
        yield [int(i) for i in ids[start:start + CHUNK]]


def utc(value: datetime) -> datetime:
    """SQLite hands back naive datetimes; SDM stores UTC everywhere."""
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)


def _select_in(table: sa.Table, key: str, *, joined: str = "", where: str = "", order: str = "",
               columns: Sequence[Any] | None = None) -> str:
    """``SELECT`` *columns* (default: every column of *table*) ``WHERE table.key IN :ids`` as SQL text
    for a :class:`~sdm.catalog.reader.Reader`.

    Written out here rather than built as a ``Select``: a process's first read of a
    catalog (a one-process reader: open a run, read a box) would compile every statement
    it runs once. The identifiers are the schema's (quoted, so ``key`` and ``offset``
    stay names on every engine); values are bound parameters.
    """
    cols = list(table.c) if columns is None else list(columns)
    names = ", ".join(_column_sql(c) for c in cols)
    return (f'SELECT {names} FROM {table.name}{joined} WHERE {table.name}."{key}" IN :ids'
            f"{' AND ' + where if where else ''}{' ORDER BY ' + order if order else ''}")


def _column_sql(c: Any) -> str:
    """A column of the schema (or a label of one) as SQL text."""
    column = getattr(c, "element", c)  # a Label: the column it names
    text = f'{column.table.name}."{column.name}"'
    return text if column is c else f'{text} AS "{c.name}"'


_RUNS = _select_in(S.runs, "id", joined=" JOIN applications ON applications.id = runs.application_id",
                   columns=[*S.runs.c, S.applications.c.name.label("app")])
_ATTRIBUTES = _select_in(S.attributes, "run_id")
_GROUPS = _select_in(S.groups, "run_id")
_GROUP_NAMED = _select_in(S.groups, "run_id", where='groups."name" = :name')
_DATASETS = _select_in(S.datasets, "group_id")
_STEPS = _select_in(S.writes, "dataset_id", order='writes."dataset_id", writes."step"',
                    columns=[S.writes.c.dataset_id, S.writes.c.step])


def _rows(con: Reader, query: str, ids: Sequence[int], **params: Any) -> list[dict[str, Any]]:
    """Rows of *query* (bound ``ids``), chunk by chunk."""
    out: list[dict[str, Any]] = []
    for part in chunks(ids):
        out.extend(con.rows(query, {"ids": part, **params}))
    return out


def _attributes(con: Reader, run_ids: Sequence[int]) -> dict[tuple[str, int], dict[str, Any]]:
    """Attributes of the runs, keyed by owner (``("r", run)``, ``("g", group)``, ``("d", dataset)``)."""
    out: dict[tuple[str, int], dict[str, Any]] = defaultdict(dict)
    rows = _rows(con, _ATTRIBUTES, run_ids)
    for row in sorted(rows, key=lambda r: r["id"]):  # the newest row of an owner and key wins
        if row["dataset_id"] is not None:
            owner = ("d", row["dataset_id"])
        elif row["group_id"] is not None:
            owner = ("g", row["group_id"])
        else:
            owner = ("r", row["run_id"])
        out[owner][row["key"]] = decode(row["value_type"], row["value_num"], row["value_str"])
    return out


def _steps(con: Reader, dataset_ids: Sequence[int]) -> dict[int, tuple[int, ...]]:
    """Every committed step of each dataset, ascending."""
    lists: dict[int, list[int]] = defaultdict(list)
    for row in _rows(con, _STEPS, dataset_ids):
        lists[int(row["dataset_id"])].append(int(row["step"]))
    return {did: tuple(steps) for did, steps in lists.items()}


def load_runs(
    con: Reader,
    run_ids: Sequence[int],
    *,
    only: Mapping[int, set[int]] | None = None,
    steps: bool = False,
    group: str | None = None,
) -> list[RunRecord]:
    """Records of the runs *run_ids* (oldest first), with groups, datasets and attributes.

    Parameters
    ----------
    only : mapping, optional
        ``{run id: dataset ids}``: keep only these datasets (and the groups holding them);
        runs absent from the mapping keep no group. ``None`` keeps everything.
    steps : bool
        Read every dataset's list of steps (``DatasetRecord.steps``); otherwise only the
        summary (``nsteps``, ``first_step``, ``last_step``) and ``steps`` is ``None``.
    group : str, optional
        Read only the group of this name.
    """
    rows = _rows(con, _RUNS, run_ids)
    if not rows:
        return []
    ids = [row["id"] for row in rows]
    attrs = _attributes(con, ids)
    grows = _rows(con, _GROUPS, ids) if group is None else _rows(con, _GROUP_NAMED, ids, name=group)
    drows = _rows(con, _DATASETS, [row["id"] for row in grows]) if grows else []
    if only is not None:
        keep = set().union(*only.values()) if only else set()
        drows = [row for row in drows if row["id"] in keep]
        holding = {row["group_id"] for row in drows}
        grows = [row for row in grows if row["id"] in holding]
    lists = _steps(con, [row["id"] for row in drows]) if steps else {}
    dsets: dict[int, list[DatasetRecord]] = defaultdict(list)
    for drow in sorted(drows, key=lambda x: (x["position"], x["id"])):
        dsets[drow["group_id"]].append(DatasetRecord(
            id=drow["id"], name=drow["name"], position=drow["position"], dtype=drow["dtype"],
            shape=tuple(json.loads(drow["shape"])), order=drow["storage_order"],
            dims=None if drow["dims"] is None else tuple(json.loads(drow["dims"])),
            distribution=json.loads(drow["distribution"]) if drow["distribution"] else None,
            attributes=attrs.get(("d", drow["id"]), {}), steps=lists.get(drow["id"], ()) if steps else None,
            nsteps=int(drow["nsteps"]), first_step=drow["first_step"], last_step=drow["last_step"],
            compression=drow.get("compression"),
            chunks=tuple(json.loads(drow["chunks"])) if drow.get("chunks") else None,
        ))
    groups: dict[int, list[GroupRecord]] = defaultdict(list)
    for grow in sorted(grows, key=lambda x: (x["position"], x["id"])):
        groups[grow["run_id"]].append(GroupRecord(
            id=grow["id"], run_id=grow["run_id"], name=grow["name"], level=grow["level"],
            datasets=tuple(dsets.get(grow["id"], ())), attributes=attrs.get(("g", grow["id"]), {}),
            kind=grow["kind"], steps_per_file=grow["steps_per_file"], truncated_after=grow["truncated_after"],
            archive=grow["archive"], subfiles=grow["subfiles"],
        ))
    runs = [
        RunRecord(
            id=row["id"], application=row["app"], created_at=utc(row["created_at"]), nprocs=row["nprocs"],
            problem_size=json.loads(row["problem_size"]) if row["problem_size"] else None, root=row["root"],
            dir=row["dir"], state=row["state"], attributes=attrs.get(("r", row["id"]), {}),
            groups=tuple(groups.get(row["id"], ())),
        )
        for row in rows
    ]
    return sorted(runs, key=lambda rec: (rec.created_at, rec.id))


def run_totals(con: Connection, run_ids: Sequence[int]) -> dict[int, dict[str, int]]:
    """Per run: ``datasets``, ``writes`` and committed ``bytes``, from the datasets' step summaries."""
    g, d = S.groups, S.datasets
    q = (sa.select(g.c.run_id, sa.func.count(d.c.id), sa.func.coalesce(sa.func.sum(d.c.nsteps), 0),
                   sa.func.coalesce(sa.func.sum(d.c.nbytes_written), 0))
         .select_from(g.join(d, d.c.group_id == g.c.id)).group_by(g.c.run_id))
    out = {int(i): {"datasets": 0, "writes": 0, "bytes": 0} for i in run_ids}
    for part in chunks(run_ids):
        for rid, nd, nw, nb in con.execute(q.where(g.c.run_id.in_(part))):
            out[int(rid)] = {"datasets": int(nd), "writes": int(nw), "bytes": int(nb)}
    return out
