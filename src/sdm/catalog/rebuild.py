"""``sdm rebuild``: a catalog made again from the runs' meta-files (the data alone).

Every run directory keeps a meta-file (:mod:`sdm.catalog.metafile`) with every committed
change of its run.  :func:`rebuild` scans a data root (or takes one run directory),
replays each meta-file and recreates its runs in a catalog, SQLite or PostgreSQL, with
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
read by this check are kept for the inserts up to :data:`KEEP_BYTES`; larger data roots
have the rest read a second time.  A symbolic link in a run directory that no record
names is not registered as a data file either.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

import sqlalchemy as sa

from ..errors import CatalogError, IntegrityError, StorageError
from ..file_formats import Where, check_history
from ..storage import runs as run_dirs
from ..storage.confine import escapes, location_escapes, location_refusal, refusal, run_directory
from ..storage.naming import component
from . import schema as S
from .catalog import Catalog
from .metafile import META, MetaLog, read_description, read_meta
from .values import encode_all

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


@dataclass
class _Run:
    """One run as its meta-file describes it (the replay of its records)."""

    info: dict[str, Any]
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)
    attributes: dict[tuple[str | None, str | None], dict[str, Any]] = field(default_factory=dict)
    writes: dict[tuple[str, str, int], dict[str, Any]] = field(default_factory=dict)
    files: dict[str, int] = field(default_factory=dict)
    imports: list[dict[str, Any]] = field(default_factory=list)
    infos: dict[tuple[str | None, str | None, int | None, str], dict[str, Any]] = field(default_factory=dict)
    copies: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)  # (path, tier) -> verified copy
    writers: int = 1


def _replay(log: MetaLog) -> _Run:
    """The run a meta-file describes; records the catalog refused (``abort``) are left out."""
    records = log.records
    if not records or records[0].get("t") != "run":
        raise IntegrityError(f"{log.path} does not start with a run record; it is not an SDM meta-file")
    aborted = {r.get("ref") for r in records if r.get("t") == "abort"}
    run = _Run(records[0])
    run.attributes[(None, None)] = dict(records[0]["attributes"])
    for rec in records[1:]:
        kind = rec.get("t")
        if rec.get("id") in aborted or kind == "abort":
            continue
        if kind == "group":
            if rec["name"] not in run.groups:  # a group reopened later is defined identically
                run.groups[rec["name"]] = {"level": rec["level"], "kind": rec.get("kind", "state"),
                                           "steps_per_file": rec.get("steps_per_file"), "truncated_after": None,
                                           "archive": rec.get("archive"), "subfiles": rec.get("subfiles"),
                                           "datasets": {d["name"]: dict(d, distribution=None) for d in rec["datasets"]}}
        elif kind == "truncate":
            names = set(run.groups) if rec["groups"] is None else set(rec["groups"])
            after = int(rec["after"])
            run.writes = {key: w for key, w in run.writes.items() if key[0] not in names or key[2] <= after}
            for gname in names:
                run.groups[gname]["truncated_after"] = after
            run.infos = {key: i for key, i in run.infos.items()
                         if key[0] not in names or key[2] is None or key[2] <= after}
        elif kind == "distribution":
            for gname, dname in rec["datasets"]:
                run.groups[gname]["datasets"][dname]["distribution"] = rec["distribution"]
        elif kind == "attributes":
            group = rec["group"]
            owners = [(group, None)] if group is None or rec["on_group"] else []
            for owner in owners + [(group, d) for d in rec["datasets"]]:
                run.attributes.setdefault(owner, {}).update(rec["attributes"])
        elif kind == "info":  # setting an info again replaces it
            run.infos[(rec["group"], rec["dataset"], rec["step"], rec["name"])] = rec
        elif kind == "writes":
            for w in rec["writes"]:
                run.writes[(w["group"], w["dataset"], int(w["step"]))] = dict(w, written_at=rec["written_at"])
                run.files.setdefault(w["path"], int(w["level"]))
                for x in w.get("extents") or ():  # a subfiled step: every subfile holding one of its extents
                    run.files.setdefault(x["path"], int(w["level"]))
                if w.get("copy"):  # written to the archive tier: its object, verified at the write
                    run.copies[(w["path"], w["copy"]["tier"])] = dict(w["copy"], path=w["path"])
        elif kind == "import":
            run.imports.append(rec)
        elif kind == "copy":  # sdm migrate/stage: a verified copy of a file on a tier
            run.copies[(rec["path"], rec["tier"])] = rec
        elif kind == "uncopy":  # sdm purge
            run.copies.pop((rec["path"], rec["tier"]), None)
        elif kind in ("open", "close"):
            run.writers += 1 if kind == "open" else -1
    return run


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
    for d in dirs:  # every record confined to its run before the catalog is touched
        checked = read_meta(d)
        _check_paths(checked, d)
        if checked.nbytes <= budget:
            kept[d] = checked
            budget -= checked.nbytes
    cat = Catalog(catalog_url, create=True)
    try:
        held = _runs_held(cat)
        rebuilt: set[tuple[int, str]] = set()
        catalog_ids: set[str] = set()
        done = 0
        for d in dirs:
            log = kept.pop(d, None) or read_meta(d)
            report.notes.extend(log.notes)
            run = _replay(log)
            catalog_ids.add(str(run.info["catalog"]))
            rebuilt.add((int(run.info["run"]), str(run.info["dir"])))
            data_root = _data_root(d, run.info["dir"])
            if _insert(cat, run, data_root):
                report.added.append(int(run.info["run"]))
                report.writes += len(run.writes)
            else:
                report.present.append(int(run.info["run"]))
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


def _insert(cat: Catalog, run: _Run, data_root: Path) -> bool:
    """Insert one run in one transaction; False when the catalog already holds it."""
    info = run.info
    rid, app = int(info["run"]), str(info["application"])
    r = S.runs
    with cat._tx() as con:
        row = con.execute(sa.select(r.c.dir, S.applications.c.name).select_from(
            r.join(S.applications, S.applications.c.id == r.c.application_id)).where(r.c.id == rid)).first()
        if row is not None:
            if (row[0], row[1]) == (info["dir"], app):
                return False
            raise CatalogError(
                f"run id {rid} of {data_root / info['dir']} is taken in catalog {cat.url!r} by another run "
                f"(application {row[1]!r}, directory {row[0]!r}); rebuild into another catalog")
        writers = max(run.writers, 0)
        state = "closed" if writers == 0 else ("open" if run_dirs.writer_alive(data_root, info["dir"]) else "interrupted")
        con.execute(r.insert().values(
            id=rid, application_id=cat._app_id(con, app, create=True), created_at=_time(info["created"]),
            nprocs=int(info["nprocs"]),
            problem_size=None if info["problem_size"] is None else json.dumps(info["problem_size"]),
            root=str(data_root), dir=info["dir"], state=state, writers=writers if state == "open" else 0))
        group_ids, dataset_ids = _insert_groups(con, rid, run)
        attrs = []
        for (gname, dname), values in run.attributes.items():
            gid = None if gname is None else group_ids[gname]
            did = None if dname is None else dataset_ids[(str(gname), dname)]
            attrs += [dict(run_id=rid, group_id=gid, dataset_id=did, key=k, value_type=t, value_num=n, value_str=s)
                      for k, t, n, s in encode_all(values)]
        if attrs:
            con.execute(S.attributes.insert(), attrs)
        file_ids = _insert_files(con, rid, run, data_root)
        if run.copies:
            con.execute(S.copies.insert(), [dict(
                file_id=file_ids[path], tier=tier, location=c["location"], size=int(c["size"]), checksum=c["checksum"],
                state="verified", verified_at=None if c["verified_at"] is None else _time(c["verified_at"]),
                created_at=_time(c["verified_at"] or run.info["created"]))
                for (path, tier), c in run.copies.items() if path in file_ids])
        if run.writes:
            con.execute(S.writes.insert(), [dict(
                dataset_id=dataset_ids[(w["group"], w["dataset"])], step=int(w["step"]), file_id=file_ids[w["path"]],
                offset=int(w["offset"]), nbytes=int(w["nbytes"]), checksum=w["checksum"], checksum_algo=w["algo"],
                method=w["method"], reason=w["reason"], seconds=float(w["seconds"]), nprocs=int(w["nprocs"]),
                written_at=_time(w["written_at"]), version=int(w["version"]), extents=len(w.get("extents") or ()))
                for w in run.writes.values()])
            _insert_extents(con, run, dataset_ids, file_ids)
        if run.infos:
            con.execute(S.infos.insert(), [dict(
                run_id=rid, group_id=None if i["group"] is None else group_ids[i["group"]],
                dataset_id=None if i["dataset"] is None else dataset_ids[(i["group"], i["dataset"])], step=i["step"],
                name=i["name"], dtype=i["dtype"], shape=json.dumps(i["shape"]), data=base64.b64decode(i["data"]),
                checksum=i["checksum"], created_at=_time(i["created"])) for i in run.infos.values()])
        if run.imports:
            keep = [c.name for c in S.imports.columns if c.name not in ("id", "run_id", "shape", "imported_at")]
            con.execute(S.imports.insert(), [dict({k: i[k] for k in keep}, run_id=rid, shape=json.dumps(i["shape"]),
                                                  imported_at=_time(i["imported_at"])) for i in run.imports])
    return True


def _insert_groups(con: sa.Connection, rid: int, run: _Run
                   ) -> tuple[dict[str, int], dict[tuple[str, str], int]]:
    """Groups and datasets in their order, with each dataset's step summary; their new ids."""
    summary: dict[tuple[str, str], list[int]] = {}
    nbytes: dict[tuple[str, str], int] = {}
    for (gname, dname, step), w in run.writes.items():
        summary.setdefault((gname, dname), []).append(step)
        nbytes[(gname, dname)] = nbytes.get((gname, dname), 0) + int(w["nbytes"])
    group_ids: dict[str, int] = {}
    dataset_ids: dict[tuple[str, str], int] = {}
    for pos, (gname, g) in enumerate(run.groups.items()):
        gid = con.execute(S.groups.insert().values(
            run_id=rid, name=gname, level=int(g["level"]), position=pos, kind=g["kind"],
            steps_per_file=g["steps_per_file"], truncated_after=g["truncated_after"],
            archive=g["archive"], subfiles=g.get("subfiles")).returning(S.groups.c.id)).scalar_one()
        group_ids[gname] = int(gid)
        for i, (dname, d) in enumerate(g["datasets"].items()):
            steps = summary.get((gname, dname), [])
            did = con.execute(S.datasets.insert().values(
                group_id=gid, name=dname, position=i, dtype=d["dtype"], shape=json.dumps(list(d["shape"])),
                storage_order=d["order"], dims=None if d.get("dims") is None else json.dumps(list(d["dims"])),
                distribution=None if d["distribution"] is None else json.dumps(d["distribution"]),
                nsteps=len(steps), first_step=min(steps, default=None), last_step=max(steps, default=None),
                nbytes_written=nbytes.get((gname, dname), 0)).returning(S.datasets.c.id)).scalar_one()
            dataset_ids[(gname, dname)] = int(did)
    return group_ids, dataset_ids


def _insert_files(con: sa.Connection, rid: int, run: _Run, data_root: Path) -> dict[str, int]:
    """The run's data files: those its writes name and the others in its directory (left by overwrites, crashes).

    A file's high-water mark is the larger of its last write's end and its size on disk,
    so new space is never given out over bytes already there.
    """
    ends: dict[str, int] = {}
    for w in run.writes.values():
        for x in w.get("extents") or [w]:
            ends[x["path"]] = max(ends.get(x["path"], 0), int(x["offset"]) + int(x["nbytes"]))
    files = dict(run.files)
    rel_dir = str(run.info["dir"])
    named = {f"{component(g)}.sdm": 3 for g, grp in run.groups.items() if grp["level"] == 3}
    named.update({f"{component(g)}.{component(d)}.sdm": 2
                  for g, grp in run.groups.items() if grp["level"] == 2 for d in grp["datasets"]})
    for p in sorted((data_root / rel_dir).glob("*.sdm")):
        level = 1 if _LEVEL1.search(p.name) else named.get(p.name)
        if level is not None and escapes(data_root, rel_dir, f"{rel_dir}/{p.name}") is None:  # never a link
            files.setdefault(f"{rel_dir}/{p.name}", level)
    rows = []
    for path, level in files.items():
        try:
            size = (data_root / path).stat().st_size
        except OSError:
            size = 0
        rows.append(dict(run_id=rid, path=path, level=level, created_at=_time(run.info["created"]),
                         alloc_end=max(ends.get(path, 0), size)))
    if rows:
        con.execute(S.files.insert(), rows)
    got = con.execute(sa.select(S.files.c.path, S.files.c.id).where(S.files.c.run_id == rid))
    return {str(p): int(i) for p, i in got}


def _insert_extents(con: sa.Connection, run: _Run, dataset_ids: dict[tuple[str, str], int],
                    file_ids: dict[str, int]) -> None:
    """The extents of the run's subfiled steps (their writes rows just inserted)."""
    subfiled = [w for w in run.writes.values() if w.get("extents")]
    if not subfiled:
        return
    w = S.writes
    ids = {(int(d), int(st)): int(i) for i, d, st in con.execute(
        sa.select(w.c.id, w.c.dataset_id, w.c.step).where(w.c.extents > 0,
                                                        w.c.dataset_id.in_(sorted(set(dataset_ids.values())))))}
    con.execute(S.extents.insert(), [dict(
        write_id=ids[(dataset_ids[(x["group"], x["dataset"])], int(x["step"]))], seq=k, file_id=file_ids[e["path"]],
        offset=int(e["offset"]), nbytes=int(e["nbytes"]), start=int(e["start"]), checksum=e["checksum"],
        checksum_algo=e["checksum_algo"]) for x in subfiled for k, e in enumerate(x["extents"])])


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
