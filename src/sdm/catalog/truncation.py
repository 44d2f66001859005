"""Truncation of a run's steps in the catalog (PDS: "modified only by erasing all segments following a
selected segment").

:func:`truncate` erases, in the caller's one transaction, every ``writes`` row of a step
after *k* in the groups named, sets those datasets' step summaries (revision 0005) to
the aggregates of the rows that remain, records *k* as each group's ``truncated_after``
(new steps must come after it) and gives back the file space: a file left without
any row loses its ``files`` row (the caller deletes it after the commit), a file whose
remaining rows end before its high-water mark gets ``alloc_end`` lowered to their end
(the caller cuts its tail after the commit). A crash before the commit leaves the old
state whole; after it, only unreferenced bytes (``sdm verify`` lists them, ``sdm gc``
reclaims them).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..errors import GroupNotFoundError, RunNotFoundError, RunStateError
from ..suggest import closest
from . import schema as S
from .loading import chunks
from .records import Truncation

__all__ = ["truncate"]


def truncate(con: Connection, run_id: int, after_step: int, groups: Sequence[str] | None, writers: int | None,
             shown_url: str, confine: Callable[[str, str], Any] | None = None) -> Truncation:
    """Erase every step after *after_step* of the groups named (every group: None) of a run.

    Parameters
    ----------
    con : Connection
        Inside a write transaction (the caller commits).
    writers : int
        Writing sessions the caller itself holds on the run (a session: 1); more refuse
        the truncation, since another job could be writing into the space given back
        (None: no check, a rebuild replaying a truncation made when it was allowed).
    confine : callable, optional
        ``confine(path, record)`` is called, before the caller commits, for every file the
        truncation gives back (to be deleted or cut); it raises to refuse the whole
        truncation (:func:`sdm.storage.confine.confine`: a path outside the run's directory).

    Raises
    ------
    RunNotFoundError, GroupNotFoundError
    RunStateError
        Another session is writing the run.
    IntegrityError
        From *confine*: a file given back lies outside the run's directory.
    """
    r, g, d, w = S.runs, S.groups, S.datasets, S.writes
    run = con.execute(sa.select(r.c.state, r.c.writers).where(r.c.id == run_id).with_for_update()).first()
    if run is None:
        raise RunNotFoundError(f"no run {run_id} in catalog {shown_url!r}")
    if writers is not None and run.state == "open" and int(run.writers) > writers:
        raise RunStateError(
            f"run {run_id} is being written by {int(run.writers) - writers} other session(s); truncate it when it "
            "has no other writer"
        )
    all_groups = {name: gid for gid, name in con.execute(sa.select(g.c.id, g.c.name).where(g.c.run_id == run_id)
                                                          .order_by(g.c.position))}
    names = list(all_groups) if groups is None else list(dict.fromkeys(groups))
    unknown = [n for n in names if n not in all_groups]
    if unknown:
        raise GroupNotFoundError(f"run {run_id} has no group {unknown[0]!r}; its groups are {list(all_groups)}"
                                 f"{closest(unknown[0], all_groups)}")
    gids = [all_groups[n] for n in names]
    dnames = {int(i): (gname, dname) for i, gname, dname in con.execute(
        sa.select(d.c.id, g.c.name, d.c.name).select_from(d.join(g, g.c.id == d.c.group_id)).where(g.c.id.in_(gids))
    )} if gids else {}
    dids = sorted(dnames)
    erased: list[Any] = []
    held: dict[int, tuple[int, int, int | None]] = {}  # every file the erased rows hold bytes in: a row holding it
    for part in chunks(dids):
        erased += con.execute(sa.select(w.c.dataset_id, w.c.step, w.c.file_id, w.c.nbytes)
                              .where(w.c.dataset_id.in_(part), w.c.step > after_step)).all()
        for fid, did, step, seq in con.execute(  # a subfiled row's extents too
                sa.select(S.extents.c.file_id, w.c.dataset_id, w.c.step, S.extents.c.seq)
                .select_from(S.extents.join(w, w.c.id == S.extents.c.write_id))
                .where(w.c.dataset_id.in_(part), w.c.step > after_step)):
            held.setdefault(int(fid), (int(did), int(step), int(seq)))
    for row in erased:
        held.setdefault(int(row.file_id), (int(row.dataset_id), int(row.step), None))
    for part in chunks(dids):
        con.execute(w.delete().where(w.c.dataset_id.in_(part), w.c.step > after_step))
    touched = sorted({int(row.dataset_id) for row in erased})
    for part in chunks(touched):
        con.execute(d.update().where(d.c.id.in_(part)).values(_SUMMARY))
    for part in chunks(gids):
        con.execute(g.update().where(g.c.id.in_(part)).values(truncated_after=after_step))
    removed, cut = _release(con, sorted(held))
    if confine is not None:
        from ..storage.confine import row_record

        for fid, path in removed + [(fid, path) for fid, path, _ in cut]:
            did, step, extent = held[fid]
            confine(path, row_record(run_id, *dnames[did], step, extent))
    return Truncation(
        run_id=run_id, after_step=after_step, groups=tuple(names),
        writes=tuple(sorted((*dnames[int(row.dataset_id)], int(row.step)) for row in erased)),
        nbytes=sum(int(row.nbytes) for row in erased), removed_files=tuple(path for _, path in removed),
        cut_files=tuple((path, end) for _, path, end in cut),
    )


def _release(con: Connection, file_ids: list[int]) -> tuple[list[tuple[int, str]], list[tuple[int, str, int]]]:
    """Files whose rows were erased: rows of files left empty deleted, high-water marks lowered
    (``(id, path)`` of each file deleted, ``(id, path, new end)`` of each file cut)."""
    sp, f = S.spans(), S.files
    removed: list[tuple[int, str]] = []
    cut: list[tuple[int, str, int]] = []
    for part in chunks(file_ids):
        used = (sa.select(sa.func.max(sp.c.offset + sp.c.nbytes)).where(sp.c.file_id == f.c.id)
                .correlate(f).scalar_subquery())
        for fid, path, alloc_end, end in con.execute(sa.select(f.c.id, f.c.path, f.c.alloc_end, used.label("used"))
                                                     .where(f.c.id.in_(part)).order_by(f.c.path)).all():
            if end is None:
                con.execute(f.delete().where(f.c.id == fid))
                removed.append((int(fid), path))
            elif int(end) < int(alloc_end):
                con.execute(f.update().where(f.c.id == fid).values(alloc_end=int(end)))
                cut.append((int(fid), path, int(end)))
    return removed, cut


def _aggregate(fn: sa.sql.functions.Function) -> sa.ScalarSelect:
    return sa.select(fn).where(S.writes.c.dataset_id == S.datasets.c.id).scalar_subquery()


#: A dataset's step summary recomputed from its remaining rows.
_SUMMARY = {
    "nsteps": _aggregate(sa.func.count()),
    "first_step": _aggregate(sa.func.min(S.writes.c.step)),
    "last_step": _aggregate(sa.func.max(S.writes.c.step)),
    "nbytes_written": _aggregate(sa.func.coalesce(sa.func.sum(S.writes.c.nbytes), 0)),
}
