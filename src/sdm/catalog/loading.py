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


# The statements, written out as SQL text rather than built as a ``Select``: a process's first read of a
# catalog (a one-process reader: open a run, read a box) would compile every statement it runs once, and this
# module imports no SQLAlchemy at all (``sdm ls`` reads with sqlite3 alone). A table's every column is
# ``table.*`` (the lean path reads catalogs at the current revision only); identifiers are quoted where they are
# words of SQL (``key``, ``offset``); values are bound parameters (``IN :ids``: a list, see sdm.catalog.reader).
_RUNS = ('SELECT runs.*, applications."name" AS "app" FROM runs JOIN applications ON applications.id = '
         'runs.application_id WHERE runs."id" IN :ids')
_ATTRIBUTES = 'SELECT attributes.* FROM attributes WHERE attributes."run_id" IN :ids'
_GROUPS = 'SELECT groups.* FROM groups WHERE groups."run_id" IN :ids'
_GROUP_NAMED = 'SELECT groups.* FROM groups WHERE groups."run_id" IN :ids AND groups."name" = :name'
_DATASETS = 'SELECT datasets.* FROM datasets WHERE datasets."group_id" IN :ids'
_STEPS = ('SELECT writes."dataset_id", writes."step" FROM writes WHERE writes."dataset_id" IN :ids '
          'ORDER BY writes."dataset_id", writes."step"')
_TOTALS = ('SELECT groups."run_id" AS "run_id", count(datasets.id) AS "datasets", '
           'coalesce(sum(datasets."nsteps"), 0) AS "writes", coalesce(sum(datasets."nbytes_written"), 0) AS "bytes" '
           'FROM groups JOIN datasets ON datasets."group_id" = groups.id WHERE groups."run_id" IN :ids '
           'GROUP BY groups."run_id"')


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


def run_totals(con: Reader, run_ids: Sequence[int]) -> dict[int, dict[str, int]]:
    """Per run: ``datasets``, ``writes`` and committed ``bytes``, from the datasets' step summaries."""
    out = {int(i): {"datasets": 0, "writes": 0, "bytes": 0} for i in run_ids}
    for row in _rows(con, _TOTALS, run_ids):
        out[int(row["run_id"])] = {k: int(row[k]) for k in ("datasets", "writes", "bytes")}
    return out
