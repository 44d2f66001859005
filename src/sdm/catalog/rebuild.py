"""``sdm rebuild``: a catalog made again from the runs' meta-files (the data alone).

Every run directory keeps a meta-file (:mod:`sdm.catalog.metafile`) with every committed
change of its run.  :func:`rebuild` scans a data root (or takes one run directory),
replays each meta-file (its records read back into typed changes, :mod:`sdm.catalog.changes`,
applied as the session's recorder applied them, one transaction per run) and recreates
its runs in a catalog, SQLite or PostgreSQL, with
the same run ids, groups, datasets, attributes, infos, data views, writes (file, offset, bytes,
checksum, method, version, times), step summaries, files and imports.  A run already in
the catalog (same id, application and directory) is left as it is, so rebuilding twice,
or into a catalog that holds some of the runs, adds no duplicates; a run id that the
catalog gives to another run is an error that says so.

Meta-files travel with their data (copied trees, restored archives): they are input, not
trusted state.  Before the first run is inserted, every meta-file is read once to check
that its run record names the directory it lies in and that every path its records name
(data files, subfiles, copies) lies inside that directory, symbolic links resolved, and
every archive copy under the run's archive prefix (:mod:`sdm.storage.confine`).  One
record that does not refuses the whole rebuild with :class:`~sdm.errors.IntegrityError`
naming the meta-file and the line, and the catalog is left as it was.  The meta-files
read by this check are kept for the inserts up to :data:`KEEP_BYTES` (and the first run's
whatever its size: one run directory is read once); larger data roots have the rest read a
second time.  A symbolic link in a run directory that no record
names is not registered as a data file either.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Iterator

import sqlalchemy as sa

from ..errors import CatalogError, IntegrityError, SDMError, StorageError
from ..file_formats import Where, check_history
from ..storage import runs as run_dirs
from ..storage.confine import escapes, location_escapes, location_refusal, refusal, run_directory
from ..storage.naming import component
from . import schema as S
from .catalog import Catalog
from .changes import Change, GroupDefined, Names, RunCreated, WritesRecorded, change_of
from .metafile import META, MetaLog, read_description, read_meta

__all__ = ["RebuildReport", "rebuild", "find_run_dirs"]

#: ``progress(done, total)``: bytes of meta-files read so far, of all.
Progress = Callable[[int, int], None]

_LEVEL1 = re.compile(r"\.s\d{8}(\.v\d+)?\.sdm$")

#: Bytes of meta-files that the check before a rebuild keeps parsed for the inserts; beyond them a
#: meta-file is read a second time (parsed records take about ten times their file's size in memory).
KEEP_BYTES = 16 << 20


@dataclass
class RebuildReport:
    """What :func:`rebuild` did.

    Attributes
    ----------
    added : list of int
        Run ids recreated in the catalog.
    present : list of int
        Run ids the catalog already held (left as they are).
    writes : int
        Write rows recreated.
    histories : int
        Index histories registered again from their descriptions (a data root's
        ``<application>/histories/*.idx.json``; not for one run directory).
    notes : list of str
        Damage found and worked around (a meta-file replaced by its backup, a torn last
        record, a damaged history description left out).
    """

    added: list[int] = field(default_factory=list)
    present: list[int] = field(default_factory=list)
    writes: int = 0
    histories: int = 0
    notes: list[str] = field(default_factory=list)


def find_run_dirs(root: Path) -> list[Path]:
    """Run directories under *root* (``<application>/run-...``), or *root* itself if it is one.

    Raises
    ------
    StorageError
        *root* is not a directory.
    """
    root = Path(root)
    if not root.is_dir():
        raise StorageError(f"cannot rebuild from {root}: not a directory")
    if (root / run_dirs.MARKER).is_file():
        return [root]
    return sorted(p.parent for p in root.glob(f"*/*/{run_dirs.MARKER}"))


def rebuild(root: str | Path, catalog_url: str, *, progress: Progress | None = None) -> RebuildReport:
    """Recreate the runs under *root* (a data root or one run directory) in a catalog.

    Parameters
    ----------
    root : str or Path
        A data root (its ``<application>/run-*`` directories are scanned) or one run directory.
    catalog_url : str
        The catalog to fill (created if it is a new SQLite file; a PostgreSQL database
        must exist).
    progress : callable, optional
        Called with the bytes of meta-files read so far and their total.

    Returns
    -------
    RebuildReport

    Raises
    ------
    IntegrityError
        A meta-file and its backup are both damaged (the message names both files and
        what could still be recovered); or *root* is one run directory written with
        ``metafile=False`` (such runs under a data root are left out, with a note); or a
        record names a path outside its run's directory (the message names the
        meta-file and the line; nothing is added to the catalog).
    CatalogVersionError
        A meta-file holds records of a newer format or of an unknown required type.
    CatalogError
        A run id is taken in the catalog by another run.
    StorageError
        *root* is not a directory, or a meta-file cannot be read.
    """
    report = RebuildReport()
    dirs = []
    for d in find_run_dirs(Path(root)):
        if not run_dirs.keeps_metafile(d):
            why = f"run directory {d} was written with metafile=False: its run cannot be rebuilt from its data"
            if d == Path(root):
                raise IntegrityError(why)
            report.notes.append(why + "; left out")
        elif (d / META).exists() or (d / (META + ".bak")).exists():
            dirs.append(d)
    total = sum(_size(d) for d in dirs)
    kept: dict[Path, MetaLog] = {}  # meta-files read by the check, kept for the inserts up to a budget
    budget = KEEP_BYTES
    for d in reversed(dirs):  # every record confined to its run before the catalog is touched
        checked = read_meta(d)
        _check_paths(checked, d)
        if checked.nbytes <= budget:
            kept[d] = checked
            budget -= checked.nbytes
        elif d == dirs[0]:  # checked last and inserted first: in memory now and for its insert whatever its size
            kept[d] = checked
    cat = Catalog(catalog_url, create=True)
    try:
        held = _runs_held(cat)
        rebuilt: set[tuple[int, str]] = set()
        catalog_ids: set[str] = set()
        done = 0
        for d in dirs:
            log = kept.pop(d, None) or read_meta(d)
            report.notes.extend(log.notes)
            info = log.records[0]  # the run record (read_meta checked it)
            catalog_ids.add(str(info["catalog"]))
            rebuilt.add((int(info["run"]), str(info["dir"])))
            writes = _insert(cat, log, _data_root(d, info["dir"]))
            if writes is not None:
                report.added.append(int(info["run"]))
                report.writes += writes
            else:
                report.present.append(int(info["run"]))
            done += _size(d)
            if progress is not None:
                progress(done, total)
        if not (Path(root) / run_dirs.MARKER).is_file():  # a data root: its applications' index histories too
            report.histories = _rebuild_histories(cat, Path(root).resolve(), report.notes)
        with cat._tx() as con:
            if con.dialect.name == "postgresql":  # explicit ids leave the sequence behind
                con.execute(sa.text("SELECT setval(pg_get_serial_sequence('runs', 'id'), "
                                    "GREATEST((SELECT MAX(id) FROM runs), 1))"))
            if len(catalog_ids) == 1 and rebuilt and held <= rebuilt:
                # a catalog holding no run but these (a new one, or one an interrupted rebuild began) takes the
                # identity the run directories name, so they can be appended to
                con.execute(S.catalog_info.update().where(S.catalog_info.c.key == "uuid")
                            .values(value=catalog_ids.pop()))
    finally:
        cat.close()
    return report


def _check_paths(log: MetaLog, run_dir: Path) -> None:
    """Refuse a meta-file whose run record names another directory than *run_dir*, or whose records name a
    path outside it (or an archive copy outside the run's archive prefix).

    Raises
    ------
    IntegrityError
        Naming the meta-file, the line and the record.
    """
    records = log.records
    if not records or records[0].get("t") != "run":
        raise IntegrityError(f"{log.path} does not start with a run record; it is not an SDM meta-file")
    rel_dir = records[0].get("dir")
    here = f"{log.path} line 1 (the run record)"
    if not isinstance(rel_dir, str):
        raise IntegrityError(f"{here} names no run directory (dir {rel_dir!r}); it is not an SDM meta-file")
    root = _data_root(run_dir, rel_dir)
    try:
        named = run_directory(root, rel_dir)
    except IntegrityError as exc:
        raise IntegrityError(f"{here}: {exc}") from None
    if named != run_dir.resolve():
        raise IntegrityError(f"{here} names the run directory {rel_dir!r}, but the meta-file lies in {run_dir}; a "
                             "meta-file describes only the run directory it lies in, so the rebuild is refused")
    seen: set[tuple[Any, Any]] = set()  # (path, location) pairs found inside: most records name the same files
    for line, rec in enumerate(records[1:], start=2):
        for what, path, location in _named(rec):
            if (path, location) in seen:
                continue
            record = f"{log.path} line {line} ({what})"
            why = escapes(root, rel_dir, path)
            if why is not None:
                raise IntegrityError(refusal(record, path, why))
            where = None if location is None else location_escapes(location, rel_dir, path)
            if where is not None:
                raise IntegrityError(location_refusal(record, location, path, where))
            seen.add((path, location))


def _named(rec: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """``(what, path, archive location or None)`` of every file a meta-file record names."""
    kind = rec.get("t")
    if kind == "writes":
        out = []
        for w in rec.get("writes") or ():
            what = f"write of {w.get('group')}/{w.get('dataset')} step {w.get('step')}"
            copy = w.get("copy") or {}
            out.append((what, w.get("path"), copy.get("location") if copy.get("tier") == "archive" else None))
            out += [(f"{what}, extent {k}", x.get("path"), None) for k, x in enumerate(w.get("extents") or ())]
        return out
    if kind == "copy":
        archive = rec.get("tier") == "archive"
        return [(f"{rec.get('tier')} copy", rec.get("path"), rec.get("location") if archive else None)] + (
            [] if archive else [(f"{rec.get('tier')} copy", rec.get("location"), None)])
    return []


def _size(run_dir: Path) -> int:
    try:
        return (run_dir / META).stat().st_size
    except OSError:
        return 0


def _runs_held(cat: Catalog) -> set[tuple[int, str]]:
    """(id, directory) of every run the catalog holds."""
    with cat.engine.connect() as con:
        return {(int(i), str(d)) for i, d in con.execute(sa.select(S.runs.c.id, S.runs.c.dir))}


def _data_root(run_dir: Path, rel_dir: str) -> Path:
    """The data root a run directory lies under (its path minus the run's relative directory)."""
    path = run_dir.resolve()
    for _ in Path(rel_dir).parts:
        path = path.parent
    return path


def _insert(cat: Catalog, log: MetaLog, data_root: Path) -> int | None:
    """Replay one run's meta-file into the catalog, in one transaction; the rows of its writes, or None when the
    catalog already holds it.

    Every record the catalog did not refuse (no ``abort`` names it) is read back into its
    change (:mod:`sdm.catalog.changes`) and applied as the session applied it; consecutive
    ``writes`` records are applied together (one call, each row keeping its time). Then
    the run's data files get their high-water marks from the disk (bytes left by
    overwrites and crashes are never given out again) and the run its state.

    Raises
    ------
    CatalogError
        The run's id is taken by another run.
    IntegrityError
        A record the catalog refuses (naming the meta-file and the line).
    """
    records = log.records
    if not records or records[0].get("t") != "run":
        raise IntegrityError(f"{log.path} does not start with a run record; it is not an SDM meta-file")
    # the run lies under *data_root* now, wherever it was written (copied trees, restored archives)
    run = replace(RunCreated.from_record(records[0], Names(), 0), root=str(data_root))
    rid, r = run.run_id, S.runs
    with cat.batch() as con:
        row = con.execute(sa.select(r.c.dir, S.applications.c.name).select_from(
            r.join(S.applications, S.applications.c.id == r.c.application_id)).where(r.c.id == rid)).first()
        if row is not None:
            if (row[0], row[1]) == (run.directory, run.application):
                return None
            raise CatalogError(
                f"run id {rid} of {data_root / run.directory} is taken in catalog {cat.url!r} by another run "
                f"(application {row[1]!r}, directory {row[0]!r}); rebuild into another catalog")
        run.apply(cat)
        names = Names()
        pending: list[tuple[int, WritesRecorded]] = []
        for line, change in _changes(log, names, rid):
            if isinstance(change, WritesRecorded):
                pending.append((line, change))
                continue
            _apply_writes(cat, log, pending)
            _apply(log, f"line {line}", change, cat, names)
        _apply_writes(cat, log, pending)
        _settle_files(con, rid, run, data_root)
        cat.settle_run(rid, lambda: run_dirs.writer_alive(data_root, run.directory))
        d, g = S.datasets, S.groups
        return int(con.execute(sa.select(sa.func.count()).select_from(
            S.writes.join(d, d.c.id == S.writes.c.dataset_id).join(g, g.c.id == d.c.group_id))
            .where(g.c.run_id == rid)).scalar_one())


def _changes(log: MetaLog, names: Names, run_id: int) -> Iterator[tuple[int, Change[Any]]]:
    """``(line, change)`` of every record after the run's that the catalog did not refuse (no ``abort`` names it),
    its names turned into ids by *names* (which the caller teaches as it defines groups)."""
    records = log.records
    aborted = {rec.get("ref") for rec in records if rec.get("t") == "abort"}
    for line, rec in enumerate(records[1:], start=2):
        if rec.get("id") in aborted:
            continue
        try:
            change = change_of(rec, names, run_id)
        except KeyError as exc:  # a name no earlier record defines (the checks of read_meta let none through)
            raise IntegrityError(f"{log.path} line {line}: names {exc.args[0]!r}, which no earlier record defines; "
                                 "it is not an SDM meta-file") from None
        if change is not None:
            yield line, change


def _replay(log: MetaLog) -> list[Change[Any]]:
    """The changes a checked meta-file holds, read back without a catalog (ids made up): what a rebuild applies.

    Raises
    ------
    IntegrityError
        The meta-file does not start with a run record.
    """
    records = log.records
    if not records or records[0].get("t") != "run":
        raise IntegrityError(f"{log.path} does not start with a run record; it is not an SDM meta-file")
    run = RunCreated.from_record(records[0], Names(), 0)
    names = Names()
    out: list[Change[Any]] = [run]
    for _, change in _changes(log, names, run.run_id):
        if isinstance(change, GroupDefined) and change.name not in names.group_ids:
            first = len(names.datasets) + 1
            names.learn(SimpleNamespace(id=len(names.groups) + 1, name=change.name, datasets=[
                SimpleNamespace(id=first + i, name=s.name) for i, s in enumerate(change.specs)]))
        out.append(change)
    return out


def _apply(log: MetaLog, lines: str, change: Change[Any], cat: Catalog, names: Names) -> None:
    """Apply one change as the recorder does; a refusal of the catalog is the meta-file's fault: an IntegrityError
    naming its line(s)."""
    try:
        change.learn(change.apply(cat), names)
    except (CatalogError, StorageError):
        raise
    except SDMError as exc:
        raise IntegrityError(f"{log.path} {lines}: the catalog refuses this record ({exc}); a session never "
                             "journals what its catalog refused, so the meta-file was edited or not written by SDM: "
                             "restore the run directory from a copy") from None


def _apply_writes(cat: Catalog, log: MetaLog, pending: list[tuple[int, WritesRecorded]]) -> None:
    """Apply consecutive ``writes`` records in one call (their rows in order, each with its own time); empties
    *pending*."""
    if not pending:
        return
    first, last = pending[0][0], pending[-1][0]
    merged = WritesRecorded(pending[0][1].run_id, tuple(w for _, c in pending for w in c.rows), pending[0][1].written_at)
    pending.clear()
    _apply(log, f"line {first}" if first == last else f"lines {first}-{last}", merged, cat, Names())


def _settle_files(con: sa.Connection, rid: int, run: RunCreated, data_root: Path) -> None:
    """The run's data files: those its writes made, with high-water marks at least their size on disk and their
    last row's end, and the other data files of its directory (left by overwrites, crashes).

    So new space is never given out over bytes already there.
    """
    f, sp = S.files, S.spans()
    held = {str(p): (int(i), int(e)) for p, i, e in con.execute(
        sa.select(f.c.path, f.c.id, f.c.alloc_end).where(f.c.run_id == rid))}
    ends = {int(i): int(e) for i, e in con.execute(
        sa.select(sp.c.file_id, sa.func.max(sp.c.offset + sp.c.nbytes))
        .where(sp.c.file_id.in_([i for i, _ in held.values()] or [-1])).group_by(sp.c.file_id))}
    rel_dir = run.directory
    g, d = S.groups, S.datasets
    named: dict[str, int] = {}
    for gname, level, dname in con.execute(sa.select(g.c.name, g.c.level, d.c.name).select_from(
            g.join(d, d.c.group_id == g.c.id)).where(g.c.run_id == rid, g.c.level > 1)):
        named[f"{component(gname)}.sdm" if level == 3 else f"{component(gname)}.{component(dname)}.sdm"] = int(level)
    found: dict[str, int] = {}
    for p in sorted((data_root / rel_dir).glob("*.sdm")):
        level = 1 if _LEVEL1.search(p.name) else named.get(p.name)
        if level is not None and escapes(data_root, rel_dir, f"{rel_dir}/{p.name}") is None:  # never a link
            found[f"{rel_dir}/{p.name}"] = level
    for path in sorted(set(held) | set(found)):
        try:
            size = (data_root / path).stat().st_size
        except OSError:
            size = 0
        if path in held:
            fid, end = held[path]
            want = max(end, ends.get(fid, 0), size)
            if want != end:
                con.execute(f.update().where(f.c.id == fid).values(alloc_end=want))
        else:
            con.execute(f.insert().values(run_id=rid, path=path, level=found[path], created_at=run.created,
                                          alloc_end=size))


def _rebuild_histories(cat: Catalog, data_root: Path, notes: list[str]) -> int:
    """Register the index histories described under *data_root* that the catalog lacks; how many."""
    from . import irregular

    added = 0
    for side in sorted(data_root.glob("*/histories/*.idx.json")):
        try:
            rec = read_description(side)
        except (IntegrityError, StorageError) as exc:
            notes.append(f"{exc}: that index history is left out (a run recomputes its partition)")
            continue
        if not (data_root / rec["path"]).is_file():
            notes.append(f"{side}: its history file is missing: that index history is left out "
                         "(a run recomputes its partition)")
            continue
        try:
            check_history(rec, Where(str(side)), (data_root / rec["path"]).stat().st_size)
        except IntegrityError as exc:
            notes.append(f"{exc}: that index history is left out (a run recomputes its partition)")
            continue
        if irregular.find_history(cat, rec["application"], rec["problem"], rec["content_hash"], rec["nprocs"]):
            continue
        with cat.engine.connect() as con:
            run_id = rec["run_id"] if rec["run_id"] is not None and con.execute(
                sa.select(S.runs.c.id).where(S.runs.c.id == int(rec["run_id"]))).first() else None
        irregular.register_history(
            cat, application=rec["application"], problem=rec["problem"], content_hash=rec["content_hash"],
            nprocs=int(rec["nprocs"]), root=str(data_root), path=rec["path"], nbytes=int(rec["nbytes"]), run_id=run_id,
            parts=[irregular.HistoryPart(*p) for p in rec["parts"]], sources=rec["sources"],
            created_at=_time(rec["created"]))
        added += 1
    return added


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text)
