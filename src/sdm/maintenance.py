"""Checking and cleaning a run's storage: ``sdm verify`` and ``sdm gc`` (no MPI needed).

:func:`verify_run` checks every committed row of a run against the bytes on disk (the
file exists, is long enough, and the bytes match the checksum recorded at write time,
recomputed with :mod:`sdm.integrity`) and lists the bytes no committed row refers to:
whole files (a level-1 file of a superseded version, a file reserved by a write that
never committed) and ranges inside appended files (superseded versions at levels 2
and 3, space reserved by a crashed write). Unreferenced bytes are expected after
overwrites and crashes; they are never read, and :func:`gc_run` reclaims them.

:func:`gc_run` runs only while no session writes the run (it holds the run's lock
exclusively, so a session that starts meanwhile is refused with ``RunStateError``
instead of writing into what gc changes): it deletes unreferenced
files, punches holes in unreferenced ranges inside files (``fallocate`` with
``FALLOC_FL_PUNCH_HOLE``: the file keeps its size and offsets, the blocks are freed),
and cuts unreferenced tails, lowering the file's high-water mark to match.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

from .catalog.metafile import BACKUP, META
from .errors import IntegrityError, SDMError, StorageError
from .storage import runs
from .storage.confine import confine, escapes, location_escapes, location_refusal, refusal, row_record
from .storage.trailer import trailer_span

if TYPE_CHECKING:  # numpy and the checksums load when bytes are checked (`sdm ls` needs neither)
    import numpy as np

    from .catalog import Catalog, RunRecord, WriteRecord
    from .storage.backends.posix import PosixFiles

__all__ = ["RowProblem", "Unreferenced", "VerifyReport", "GcReport", "current_state", "row_problem", "verify_run",
           "gc_run"]

Progress = Callable[[int, int], None]  # (bytes done, bytes in all)
_CACHE = ".sdm-cache"  # sdm.io.remote.CACHE_DIR: archived bytes staged for remote reads (delete it at will)


@dataclass(frozen=True)
class RowProblem:
    """A committed row whose bytes are missing or do not match its checksum."""

    group: str
    dataset: str
    step: int
    path: str
    problem: str


@dataclass(frozen=True)
class Unreferenced:
    """Bytes of a run's directory that no committed row refers to (``nbytes`` of a range or a whole file)."""

    path: str
    offset: int
    nbytes: int
    whole_file: bool


@dataclass
class VerifyReport:
    """What :func:`verify_run` found."""

    run_id: int
    state: str
    rows: int = 0
    bytes_checked: int = 0
    checksums_checked: int = 0
    problems: list[RowProblem] = field(default_factory=list)
    unreferenced: list[Unreferenced] = field(default_factory=list)
    archived_rows: int = 0  #: rows whose file is on the archive tier only (checked when it was migrated)
    #: The rows of :attr:`problems` that name a path outside the run's directory, or an archive copy
    #: outside its archive prefix (:mod:`sdm.storage.confine`): never read; ``sdm gc`` refuses the run.
    outside: list[RowProblem] = field(default_factory=list)
    #: Entries of the run's directory SDM never makes (symbolic links): never read, changed or reclaimed.
    foreign: list[str] = field(default_factory=list)
    #: Space reserved past a file's end and never written (:mod:`sdm.engine.space`: reserved ahead by a
    #: session that crashed, or not given back): no bytes on disk, only the file's high-water mark.
    reserved: list[Unreferenced] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every committed row is whole and the run's directory holds nothing foreign
        (unreferenced bytes are not a problem)."""
        return not self.problems and not self.foreign

    @property
    def unreferenced_bytes(self) -> int:
        """Bytes of the run that no committed row refers to."""
        return sum(u.nbytes for u in self.unreferenced)

    @property
    def reserved_bytes(self) -> int:
        """Bytes reserved past the files' ends and never written."""
        return sum(u.nbytes for u in self.reserved)


@dataclass
class GcReport:
    """What :func:`gc_run` reclaimed."""

    run_id: int
    files_removed: int = 0
    ranges_punched: int = 0
    tails_cut: int = 0
    bytes_reclaimed: int = 0
    not_reclaimed: list[str] = field(default_factory=list)
    reserved_given_back: int = 0  #: bytes reserved past the files' ends given back (their marks lowered)


def current_state(catalog: Catalog, rec: RunRecord) -> str:
    """The run's state, recording ``interrupted`` for an ``open`` run that no live session holds.

    A catalog this process may not write still gets the right answer; only the record waits.
    """
    if rec.state == "open" and not runs.writer_alive(Path(rec.root), _rel_dir(rec)):
        try:
            catalog.mark_interrupted(rec.id)
        except SDMError:
            pass
        return "interrupted"
    return rec.state


def _rel_dir(rec: RunRecord) -> str:
    return rec.dir or runs.legacy_run_dir(rec.application, rec.id)


def _read(files: "PosixFiles", path: Path, offset: int, nbytes: int) -> np.ndarray:
    """Bytes of *path* as a read-only view of the file's memory map (kept by *files* for the next rows)."""
    import numpy as np

    if nbytes == 0:
        return np.empty(0, dtype=np.uint8)
    return files.mapped(path, offset + nbytes)[offset:offset + nbytes]


def row_problem(path: Path, w: "WriteRecord", dtype: str, *, checksums: bool = True,
                files: "PosixFiles | None" = None) -> str | None:
    """What is wrong with one committed row's bytes in *path* (None: nothing): missing, short, or changed.

    With *checksums*, the bytes' checksum is recomputed (:mod:`sdm.integrity`) and compared
    with the row's. The bytes are read through *files* (the fast tier's backend; by
    default one of this process, for this call).
    """
    if files is None:
        with _fast_tier() as own:
            return row_problem(path, w, dtype, checksums=checksums, files=own)
    from . import integrity

    if w.extents:  # subfiled: each extent in its subfile (next to *path*), then their combined checksum
        return _extents_problem(files, path.parent, w, checksums=checksums)
    short = _missing_or_short(path, w.offset, w.nbytes, "file", "the row")
    if short is not None:
        return short
    if checksums and w.checksum and w.checksum_algo != "none":
        actual = integrity.checksum_of_bytes(_read(files, path, w.offset, w.nbytes), dtype, w.checksum_algo)
        if actual != w.checksum:
            return f"checksum {actual} ({w.checksum_algo}) does not match the recorded {w.checksum}"
    return None


def _missing_or_short(path: Path, offset: int, nbytes: int, name: str, needer: str) -> str | None:
    """Why *path* cannot hold *nbytes* at *offset* (missing, or shorter), or None."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        return f"{name} missing ({exc.strerror})"
    if size < offset + nbytes:
        return f"{name} holds {size} bytes, {needer} needs bytes {offset}..{offset + nbytes}"
    return None


def _extents_problem(files: "PosixFiles", folder: Path, w: "WriteRecord", *, checksums: bool) -> str | None:
    """:func:`row_problem` of a subfiled row, whose extents are in the subfiles of *folder*."""
    from . import integrity

    digests = []
    for k, e in enumerate(w.extents):
        sub = folder / Path(e.path).name
        short = _missing_or_short(sub, e.offset, e.nbytes, f"extent {k}: subfile {sub.name}", "the extent")
        if short is not None:
            return short
        if checksums and e.checksum and e.checksum_algo != "none":
            digest = integrity.xxh3(_read(files, sub, e.offset, e.nbytes))
            if integrity.to_hex(digest) != e.checksum:
                return (f"extent {k} (subfile {sub.name}, bytes {e.offset}..{e.offset + e.nbytes}): checksum "
                        f"{integrity.to_hex(digest)} ({e.checksum_algo}) does not match the recorded {e.checksum}")
            digests.append(digest)
    if checksums and w.checksum and w.checksum_algo != "none" and integrity.extents_checksum(digests) != w.checksum:
        return (f"the extents' checksums combine to {integrity.extents_checksum(digests)} ({w.checksum_algo}), not the "
                f"recorded {w.checksum}: the catalog's extents were changed")
    return None


def verify_run(catalog: Catalog, run_id: int, *, checksums: bool = True, progress: Progress | None = None) -> VerifyReport:
    """Check every committed row of a run and list unreferenced bytes.

    Parameters
    ----------
    catalog : Catalog
    run_id : int
    checksums : bool
        Recompute each row's checksum from the file (reads every byte); otherwise only
        existence and lengths are checked.
    progress : callable, optional
        Called with (bytes checked, bytes to check) as the check proceeds.

    Returns
    -------
    VerifyReport

    Raises
    ------
    RunNotFoundError
    """
    with _fast_tier() as files:
        return _verify_run(files, catalog, run_id, checksums=checksums, progress=progress)


@contextmanager
def _fast_tier() -> Iterator["PosixFiles"]:
    """The fast tier's files for this process alone (no MPI), closed afterwards (kept descriptors and maps)."""
    from .storage.backends.posix import PosixFiles

    files = PosixFiles()
    try:
        yield files
    finally:
        files.close_all()


def _verify_run(files: "PosixFiles", catalog: Catalog, run_id: int, *, checksums: bool,
                progress: Progress | None) -> VerifyReport:
    """:func:`verify_run`, the bytes read through *files*."""
    rec = catalog.run(run_id)
    rel_dir = _rel_dir(rec)
    report = VerifyReport(run_id=rec.id, state=current_state(catalog, rec))
    root = Path(rec.root)
    dtypes = {(g.name, d.name): d.dtype for g in rec.groups for d in g.datasets}
    rows = catalog.writes(rec.id)
    total = sum(w.nbytes for _, _, w in rows)
    done = 0
    referenced: dict[str, list[tuple[int, int]]] = {}
    archived, misplaced = _archived_only(catalog, rec.id, rel_dir)
    for gname, dname, w in rows:
        report.rows += 1
        outside = _outside(root, rel_dir, rec.id, gname, dname, w, misplaced)
        if outside is not None:  # never read: listed, and `sdm gc` refuses the run
            report.outside.append(outside)
            report.problems.append(outside)
            done += w.nbytes
            continue
        if any(path in archived for path, _, _ in w.spans()):  # on the archive tier only: verified when copied there
            report.archived_rows += 1
            continue
        for path, offset, nbytes in w.spans():
            referenced.setdefault(path, []).append((offset, offset + nbytes))
        checked = checksums and bool(w.checksum) and w.checksum_algo != "none"
        problem = row_problem(root / w.path, w, dtypes[(gname, dname)], checksums=checked, files=files)
        if checked and (problem is None or "checksum" in problem):  # the bytes were read and summed
            report.checksums_checked += 1
            report.bytes_checked += w.nbytes
        if problem is not None:
            report.problems.append(RowProblem(gname, dname, w.step, w.path, problem))
        done += w.nbytes
        if progress is not None:
            progress(done, total)
    report.unreferenced = _unreferenced(files, root, rel_dir, referenced, [f.path for f in catalog.files(rec.id)],
                                        report.foreign)
    report.reserved = _reserved(root, rel_dir, referenced, catalog.reserved_ends(rec.id))
    return report


def _reserved(root: Path, rel_dir: str, referenced: dict[str, list[tuple[int, int]]],
              marks: dict[str, int]) -> list[Unreferenced]:
    """Space reserved past the end of each level-2/3 file and past its last committed byte (*marks*: the
    files' high-water marks)."""
    out = []
    for rel, mark in sorted(marks.items()):
        try:
            size = (root / rel).stat().st_size if escapes(root, rel_dir, rel) is None else 0
        except OSError:
            size = 0
        end = max([size] + [b for _, b in referenced.get(rel, [])])
        if mark > end:
            out.append(Unreferenced(rel, end, mark - end, False))
    return out


def _outside(root: Path, rel_dir: str, run_id: int, group: str, dataset: str, w: "WriteRecord",
             misplaced: dict[str, tuple[str, str]]) -> RowProblem | None:
    """The problem of a row naming a file outside the run's directory (its extents' subfiles included), or
    a file whose archive copy lies outside the run's archive prefix (*misplaced*: location and why, by path);
    else None."""
    for k, (path, _, _) in enumerate([(w.path, 0, 0)] + (w.spans() if w.extents else [])):
        record = row_record(run_id, group, dataset, w.step, k - 1 if k else None)
        why = escapes(root, rel_dir, path)
        if why is not None:
            return RowProblem(group, dataset, w.step, path, refusal(record, path, why))
        if path in misplaced:
            location, why = misplaced[path]
            return RowProblem(group, dataset, w.step, path, location_refusal(record, location, path, why))
    return None


def _archived_only(catalog: Catalog, run_id: int, rel_dir: str) -> tuple[set[str], dict[str, tuple[str, str]]]:
    """Files of a run with a verified archive copy and none on the fast tier (purged: ``sdm stage`` brings them
    back); and the files whose archive copy lies outside the run's archive prefix: its location and why."""
    from .catalog import tiers

    found_copies = tiers.copies(catalog, run_id)
    misplaced = {}
    for path, found in found_copies.items():
        for c in found:
            why = location_escapes(c.location, rel_dir, path) if c.tier == tiers.ARCHIVE else None
            if why is not None:
                misplaced[path] = (c.location, why)
    return ({path for path, found in found_copies.items()
             if not any(c.tier == tiers.FAST for c in found) and any(c.verified for c in found)}, misplaced)


def _unreferenced(files: "PosixFiles", root: Path, rel_dir: str, referenced: dict[str, list[tuple[int, int]]],
                  catalog_files: list[str], foreign: list[str]) -> list[Unreferenced]:
    """Whole files and ranges of the run's directory that no committed row refers to (symbolic links, which
    SDM never makes, go to *foreign* instead: never read or reclaimed)."""
    out: list[Unreferenced] = []
    run_path = root / rel_dir
    on_disk = {}
    if run_path.is_dir():
        for p in sorted(run_path.rglob("*")):
            rel = str(Path(rel_dir) / p.relative_to(run_path))
            if p.is_symlink():
                foreign.append(f"{rel}: a symbolic link (to {os.readlink(p)}); SDM makes none in a run's directory")
                continue
            sdms = p.name in (runs.MARKER, META, BACKUP) or p.relative_to(run_path).parts[0] == _CACHE
            if p.is_file() and not sdms:  # SDM's own files (and the remote reads' cache), never reclaimed here
                on_disk[rel] = p.stat().st_size
    for rel in sorted(set(on_disk) | set(catalog_files)):
        size = on_disk.get(rel)
        if size is None:
            continue  # a file row with no file: nothing to reclaim (a row needing it is a problem above)
        spans = sorted(referenced.get(rel, []))
        if spans:  # the file's last trailer is SDM's own (sdm.storage.trailer); earlier ones are reclaimable
            own = trailer_span(root / rel)
            spans = sorted(spans + [own]) if own is not None else spans
        if not spans:
            out.append(Unreferenced(rel, 0, size, True))
            continue
        pos = 0
        gaps = []
        for start, end in spans:
            if start > pos:
                gaps.append((pos, start))
            pos = max(pos, end)
        if size > pos:
            gaps.append((pos, size))
        full = root / rel
        out += [Unreferenced(rel, a, b - a, False) for a, b in gaps if not files.reclaimed(full, a, b)]
    return out


# ------------------------------------------------------------------------- gc
def gc_run(catalog: Catalog, run_id: int, *, progress: Progress | None = None) -> GcReport:
    """Reclaim a run's unreferenced bytes (see the module documentation).

    Raises
    ------
    RunStateError
        A live session is writing the run.
    StorageError
        A file cannot be changed.
    """
    rec = catalog.run(run_id)
    rel_dir = _rel_dir(rec)
    root = Path(rec.root)
    report = GcReport(run_id=rec.id)
    with runs.exclusive(root, rel_dir, rec.id, "gc"), _fast_tier() as files:
        if rec.state == "open":
            catalog.mark_interrupted(rec.id)  # open, yet nobody else holds it: its writers died
        checked = verify_run(catalog, rec.id, checksums=False)
        if checked.outside:  # the catalog was changed: what it calls unreferenced may be the run's own data
            raise IntegrityError(
                f"gc of run {rec.id} refused, nothing changed: {len(checked.outside)} of its catalog rows name files "
                f"outside its directory: {'; '.join(p.problem for p in checked.outside[:3])}"
                + (f" (and {len(checked.outside) - 3} more; `sdm verify {rec.id}` lists them)"
                   if len(checked.outside) > 3 else ""))
        found = checked.unreferenced
        for u in checked.reserved:  # no bytes on disk: the file's mark comes down to its last byte
            catalog.lower_alloc_end(rec.id, u.path, u.offset)
            report.reserved_given_back += u.nbytes
        report.not_reclaimed += [f"{entry}: left as it is" for entry in checked.foreign]
        total = sum(u.nbytes for u in found)
        done = 0
        for u in found:
            path = confine(root, rel_dir, u.path, f"run {rec.id}'s unreferenced file")
            try:
                if u.whole_file:
                    files.delete(path)
                    catalog.drop_file(rec.id, u.path)
                    report.files_removed += 1
                elif u.offset + u.nbytes >= (files.size(path) or 0):
                    files.truncate(path, u.offset)
                    catalog.lower_alloc_end(rec.id, u.path, u.offset)
                    report.tails_cut += 1
                else:
                    files.reclaim(path, u.offset, u.nbytes)
                    report.ranges_punched += 1
                report.bytes_reclaimed += u.nbytes
            except OSError as exc:  # the backend's StorageError, or the file system's error
                why = os.strerror(exc.errno) if exc.errno else str(exc)
                if exc.errno in (95, 38):  # EOPNOTSUPP, ENOSYS: the file system cannot punch holes
                    report.not_reclaimed.append(f"{u.path} bytes {u.offset}..{u.offset + u.nbytes}: {why}")
                else:
                    raise StorageError(f"gc of {path} failed: {why}", exc.errno) from None
            done += u.nbytes
            if progress is not None:
                progress(done, total)
    return report
