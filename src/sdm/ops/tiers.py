"""Migrate, stage and purge: a run's data files between the fast tier and the archive tier.

The paper's section 4.6 (SRB's migration, stage and purge of HPSS files) in the form of
today's storage tiering (iRODS): the fast tier is the file system under the run's root,
the archive tier an object store (:class:`sdm.storage.backends.objectstore.ObjectStore`,
the object of a file is named by its path relative to the root).  Every copy is recorded
in the catalog (:mod:`sdm.catalog.tiers`), so "where are the bytes" has one answer, and
every operation is logged there (who, when, what, bytes, seconds, outcome).

Rules that keep the data:

* **A copy counts only once verified.** :func:`migrate` records the archive copy as
  ``copying``, uploads, checks the fast copy's bytes against every row's checksum (a
  damaged file is never archived) and computes its digest beside the upload, then reads
  the object back and compares it byte for byte with the file; only then is the archive
  copy ``verified``, with the digest.  Files are pipelined (the next one uploads while the
  last is read back), each counted on its own.  :func:`stage` does the same the other
  way (download to a temporary name, check the digest and every row, rename).
* **Purge needs a verified copy elsewhere.** :func:`purge` of a tier is refused, for
  every file of the run and before anything is removed, unless each file has a verified
  copy on another tier.  The catalog forgets the copy before its bytes are removed, so
  a crash leaves at worst bytes nobody points to, never a row without bytes.
* **Confined.** Before anything is copied, uploaded or removed, every file of the run
  must lie inside its directory and every archive copy under its archive prefix
  (:mod:`sdm.storage.confine`); a catalog row naming anything else refuses the whole
  operation with :class:`~sdm.errors.IntegrityError`.
* **Idempotent.** A copy already verified is skipped; one left ``copying`` by a crash is
  made again; a purge interrupted between the catalog and the removal finishes the
  removal when run again.

After a successful :func:`stage`, and :func:`purge` of the archive, the run's subfile
cache of remote reads (``<run directory>/.sdm-cache``, :func:`sdm.io.remote.clear_cache`)
is removed: it mirrors archive copies for reads without a fast copy, so it is stale once
the fast copies are back or the archive copies gone.

All three hold the run's marker exclusively (:func:`sdm.storage.runs.exclusive`), so
they never run while a session writes the run.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from ..catalog import tiers as rows
from ..storage.naming import SUPERFILE_SUFFIX
from ..catalog.changes import CopyDropped, CopyPut
from ..catalog.recorder import Recorder
from ..errors import IntegrityError, InvalidArgumentError, RunStateError, StorageError
from ..storage import runs
from ..storage.confine import confine, escapes, location_escapes, location_refusal, refusal, row_record
from ..storage.digests import DIGEST, file_digest

if TYPE_CHECKING:
    from ..catalog import Catalog
    from ..storage.backends.base import Backend

__all__ = ["TierReport", "migrate", "stage", "purge", "pack", "select_runs", "archive_store", "run"]

#: ``progress(bytes done, bytes in all)``.
Progress = Callable[[int, int], None]

_CHUNK = 8 << 20  # bytes read at a time for a digest
_AHEAD = 3  # ranges of an object fetched ahead while one is hashed


@dataclass
class TierReport:
    """What one operation on one run did.

    Attributes
    ----------
    run_id : int
    operation : str
        ``migrate``, ``stage`` or ``purge``.
    files : int
        Files copied (migrate, stage) or removed (purge).
    nbytes : int
        Their bytes.
    skipped : int
        Files already done (a rerun).
    seconds : float
    """

    run_id: int
    operation: str
    files: int = 0
    nbytes: int = 0
    skipped: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _range(store: "Backend", key: str, offset: int, nbytes: int) -> bytes:
    """Bytes *offset* .. *offset* + *nbytes* of *key* (fewer at its end): one ranged read of the seam."""
    return store.read(key, [(offset, nbytes)])[0]


def _read_back(store: "Backend", key: str, size: int, each: Callable[[int, bytes], None]) -> None:
    """Read an object back in ranges, in order, the next ones fetched while *each(offset, bytes)* handles one."""

    starts = list(range(0, size, _CHUNK))
    with ThreadPoolExecutor(max_workers=_AHEAD, thread_name_prefix="sdm-readback") as pool:
        pending = [pool.submit(_range, store, key, o, min(_CHUNK, size - o)) for o in starts[:_AHEAD]]
        for i, start in enumerate(starts):
            data = pending[i].result()
            if i + _AHEAD < len(starts):
                o = starts[i + _AHEAD]
                pending.append(pool.submit(_range, store, key, o, min(_CHUNK, size - o)))
            each(start, data)


def _same_object(store: "Backend", key: str, local: Path, size: int) -> int | None:
    """Read object *key* back and compare it byte for byte with the file *local*: None if equal, else the
    offset of the first range that differs (or *size*, the object being longer)."""
    import mmap

    if size == 0:
        return None if store.size(key) == 0 else 0
    differs: list[int] = []
    with open(local, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        def compare(start: int, data: bytes) -> None:
            if not differs and data != mapped[start:start + _CHUNK]:
                differs.append(start)

        _read_back(store, key, size, compare)
        if not differs and store.size(key) != size:
            differs.append(size)
    return differs[0] if differs else None


Check = tuple[str, Any, str]  # a row's name, its WriteRecord, its dtype


def _row_checks(cat: "Catalog", run_id: int, path: str) -> list[Check]:
    """The committed rows of *path*, what :func:`_check_local` checks (read from the catalog here)."""
    rec = cat.run(run_id, steps=False)
    dtypes = {(g.name, d.name): d.dtype for g in rec.groups for d in g.datasets}
    out: list[Check] = []
    for gname, dname, w in cat.writes(run_id, paths=[path]):
        name = f"{gname}/{dname} step {w.step}"
        if not w.extents:
            out.append((name, w, dtypes[(gname, dname)]))
        out += [(f"{name} extent {k}", replace(w, path=e.path, offset=e.offset, nbytes=e.nbytes, checksum=e.checksum,
                                               checksum_algo=e.checksum_algo, extents=()), dtypes[(gname, dname)])
                for k, e in enumerate(w.extents) if e.path == path]
    return out


def _check_local(run_id: int, local: Path, checks: list[Check]) -> None:
    """Every row of *checks* whole in *local*; else an IntegrityError naming the rows (no catalog access)."""
    from ..maintenance import row_problem

    bad = []
    for name, w, dtype in checks:
        problem = row_problem(local, w, dtype)
        if problem is not None:
            bad.append(f"{name}: {problem}")
    if bad:
        raise IntegrityError(f"{local} does not hold what run {run_id}'s catalog says: {'; '.join(bad[:5])}"
                             + (f" (and {len(bad) - 5} more)" if len(bad) > 5 else ""))


def _check_rows(cat: "Catalog", run_id: int, path: str, local: Path) -> None:
    """Every committed row of *path* whole in *local*; else an IntegrityError naming the rows."""
    _check_local(run_id, local, _row_checks(cat, run_id, path))


def _run(cat: "Catalog", run_id: int) -> tuple[Path, str]:
    rec = cat.run(run_id, steps=False)
    return Path(rec.root), rec.dir or runs.legacy_run_dir(rec.application, rec.id)


def _refuse_outside(cat: "Catalog", run_id: int, operation: str, todo: dict[str, list[rows.Copy]],
                    archive: str | None) -> None:
    """Refuse *operation* before it changes anything when a file of the run lies outside its directory, or an
    archive copy outside its archive prefix (in the store *archive* when given; :mod:`sdm.storage.confine`).

    Raises
    ------
    IntegrityError
        Naming every such row (the first three; how many in all).
    """
    root, rel_dir = _run(cat, run_id)
    holders: dict[str, tuple[str, str, int, int | None]] = {}  # path -> a row holding bytes in it
    for gname, dname, w in cat.writes(run_id):
        holders.setdefault(w.path, (gname, dname, w.step, None))
        for k, e in enumerate(w.extents):
            holders.setdefault(e.path, (gname, dname, w.step, k))
    bad = []
    for path, found in todo.items():
        record = (row_record(run_id, *holders[path]) if path in holders
                  else f"run {run_id}'s catalog row of the file {path!r}")
        why = escapes(root, rel_dir, path)
        if why is not None:
            bad.append(refusal(record, path, why))
            continue
        for c in found:
            where = location_escapes(c.location, rel_dir, path, archive) if c.tier == rows.ARCHIVE else None
            if where is not None:
                bad.append(location_refusal(record, c.location, path, where))
    if bad:
        raise IntegrityError(f"{operation} of run {run_id} refused, nothing changed: {'; '.join(bad[:3])}"
                             + (f" (and {len(bad) - 3} more; `sdm verify {run_id}` lists them)" if len(bad) > 3 else ""))


def _logged(cat: "Catalog", run_id: int, operation: str, tier: str,
            work: Callable[[TierReport], None]) -> TierReport:
    """Run *work* holding the run exclusively, logged in the catalog as one operation."""
    root, rel_dir = _run(cat, run_id)
    report = TierReport(run_id, operation)
    with runs.exclusive(root, rel_dir, run_id, operation):
        op = rows.start_operation(cat, run_id, operation, tier)
        t0 = time.perf_counter()
        _JOURNALS[run_id] = _journal(root, rel_dir)
        try:
            work(report)
        except BaseException as exc:
            report.seconds = time.perf_counter() - t0
            rows.finish_operation(cat, op, files=report.files, nbytes=report.nbytes, seconds=report.seconds,
                                  outcome="failed", detail=f"{type(exc).__name__}: {exc}")
            raise
        finally:
            journal = _JOURNALS.pop(run_id, None)
            if journal is not None:
                journal.close()
        report.seconds = time.perf_counter() - t0
        rows.finish_operation(cat, op, files=report.files, nbytes=report.nbytes, seconds=report.seconds, outcome="ok",
                              detail="; ".join(report.notes) or None)
    return report


#: The meta-file of each run an operation is changing (opened by :func:`_logged`).
_JOURNALS: dict[int, Any] = {}


def _put(cat: "Catalog", run_id: int, path: str, tier: str, *, state: str = "copying", **values: Any) -> None:
    """Record a copy; a verified one is first appended to the run's meta-file (``copy``), so a rebuilt
    catalog knows where the bytes are."""
    Recorder(cat, _JOURNALS.get(run_id)).record(CopyPut(run_id, path, tier, state=state, **values))


def _drop(cat: "Catalog", run_id: int, path: str, tier: str) -> None:
    """Forget a copy; first appended to the run's meta-file (``uncopy``)."""
    Recorder(cat, _JOURNALS.get(run_id)).record(CopyDropped(run_id, path, tier))


def _journal(root: Path, rel_dir: str) -> Any:
    """The run's meta-file to append to, or None (a run written with ``metafile=False``, or before meta-files)."""
    from ..catalog.metafile import META, MetaFile

    run_dir = root / rel_dir
    if not (run_dir / META).exists() or not runs.keeps_metafile(run_dir):
        return None
    return MetaFile(run_dir, sync=True)


def _ends(cat: "Catalog", run_id: int) -> dict[str, int]:
    """The end of the last committed row of each file of a run (what a copy must hold to be whole)."""
    ends: dict[str, int] = {}
    for _, _, w in cat.writes(run_id):
        for path, offset, nbytes in w.spans():
            ends[path] = max(ends.get(path, 0), offset + nbytes)
    return ends


def _whole(copy: rows.Copy | None, end: int) -> bool:
    """Whether *copy* is verified and holds every committed row of its file (a file appended to after
    its migration has rows its archive copy lacks)."""
    return copy is not None and copy.verified and copy.size >= end


def _find(copies: list[rows.Copy], tier: str) -> rows.Copy | None:
    return next((c for c in copies if c.tier == tier), None)


#: How :func:`migrate` verifies an archive copy before it counts.
VERIFY = ("read-back", "upload")


def migrate(cat: "Catalog", run_id: int, store: Any, *, pack_below: int = 0, verify: str = "read-back",
            progress: Progress | None = None) -> TierReport:
    """Copy every data file of a run to the archive tier and verify each copy.

    Parameters
    ----------
    cat : Catalog
    run_id : int
    store : ObjectStore
        The archive.
    pack_below : int
        Files of at most this many bytes (two or more of them) are packed into superfiles
        (:func:`pack`) instead of one object each; 0 (default): never.
    verify : {"read-back", "upload"}
        In both, the file's bytes are checked against every row's checksum and its SHA-256
        computed while it uploads. ``"read-back"`` (default): the object is then read back
        and must equal the file byte for byte (so its SHA-256 is the file's; comparing
        costs a fifth of hashing). ``"upload"``: the object store's own check
        is trusted instead: every upload request is signed with the SHA-256 of its body
        (AWS SigV4 signed payloads, the client's default), and the server refuses a body
        that does not match (``XAmzContentSHA256Mismatch``; the test server does), so the
        object holds the bytes the client read; faster (no second transfer), but it does
        not see a change of the object after the server accepted it.
    progress : callable, optional

    Raises
    ------
    RunStateError
        A live session writes the run, or a file has no fast copy to migrate from.
    IntegrityError
        A fast copy does not match the catalog's checksums, or an object differs from its
        file after the upload (the archive copy then stays unverified; a rerun retries it).
    StorageError
        The object store failed (after its retries).
    """
    if verify not in VERIFY:
        raise InvalidArgumentError(f"migrate verify must be one of {', '.join(VERIFY)}, got {verify!r}")
    root, rel_dir = _run(cat, run_id)

    def work(report: TierReport) -> None:
        todo = rows.copies(cat, run_id)
        _refuse_outside(cat, run_id, "migrate", todo, None)
        ends = _ends(cat, run_id)
        total = sum(c[0].size for c in todo.values())
        done = 0
        waiting: list[tuple[str, Path, int]] = []  # small files, packed at the end
        flying: deque[_Transfer] = deque()  # files uploading, oldest first

        def land() -> None:
            nonlocal done
            transfer = flying.popleft()
            _finish_copy(cat, run_id, transfer, store, verify)
            report.files += 1
            report.nbytes += transfer.size
            done += transfer.size
            if progress is not None:
                progress(done, total)

        with ThreadPoolExecutor(max_workers=2 * IN_FLIGHT, thread_name_prefix="sdm-migrate") as pool:
            try:
                for path, found in todo.items():
                    archive, fast = _find(found, rows.ARCHIVE), _find(found, rows.FAST)
                    if _whole(archive, ends.get(path, 0)):
                        report.skipped += 1
                        done += (fast or found[0]).size
                        if progress is not None:
                            progress(done, total)
                        continue
                    if fast is None or not fast.verified:
                        raise RunStateError(f"{path} of run {run_id} has no verified copy on the fast tier to "
                                            f"migrate from; `sdm stage {run_id}` first")
                    local = confine(root, rel_dir, path, f"run {run_id}'s catalog row of the file {path!r}")
                    size = local.stat().st_size
                    if size <= pack_below:
                        _check_rows(cat, run_id, path, local)
                        waiting.append((path, local, size))
                        continue
                    flying.append(_start_copy(cat, run_id, path, local, size, store, pool))
                    if len(flying) >= IN_FLIGHT:
                        land()
                while flying:
                    land()
            except BaseException:
                for transfer in flying:  # not started: never; running: left to end, their copies stay copying
                    transfer.uploaded.cancel()
                    transfer.checked.cancel()
                raise
        for group in _packs(waiting):
            pack(cat, run_id, store, group, todo)
            report.files += len(group)
            report.nbytes += sum(size for _, _, size in group)
            done += sum(size for _, _, size in group)
            if progress is not None:
                progress(done, total)

    return _logged(cat, run_id, "migrate", rows.ARCHIVE, work)


#: Files :func:`migrate` has in flight at once: the next one uploads while the last is read back.
IN_FLIGHT = 2


@dataclass
class _Transfer:
    """A file :func:`migrate` is copying: its upload and its check (rows, then the digest) under way."""

    path: str
    local: Path
    size: int
    uploaded: Future[Any]
    checked: Future[str]


def _start_copy(cat: "Catalog", run_id: int, path: str, local: Path, size: int, store: Any,
                pool: ThreadPoolExecutor) -> _Transfer:
    """Record a file's copies (its fast copy, its archive copy ``copying``), then start its upload and, beside
    it, the check of its rows and its digest (in *pool*; the catalog is read here, never by the pool)."""
    checks = _row_checks(cat, run_id, path)

    def check() -> str:
        _check_local(run_id, local, checks)
        return file_digest(local)

    # the fast copy first: once a file has copies rows, they are the whole truth about it
    _put(cat, run_id, path, rows.FAST, location=path, size=size, state="verified", verified_at=_now())
    _put(cat, run_id, path, rows.ARCHIVE, location=store.location(path), size=size)
    return _Transfer(path, local, size, pool.submit(_upload_mapped, store, path, local), pool.submit(check))


def _upload_mapped(store: "Backend", key: str, local: Path) -> None:
    """Upload a file from a memory map of it: the client sends (and signs) the mapped pages themselves, the
    ones the check hashes, where uploading by path reads the file once more (twice the client's CPU time)."""
    import mmap

    with open(local, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            store.write(key, b"")
            return
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped, memoryview(mapped) as view:
            store.write(key, view)


def _finish_copy(cat: "Catalog", run_id: int, transfer: _Transfer, store: Any, verify: str) -> None:
    """Wait for a file's upload and check, verify its archive copy (*verify*, see :func:`migrate`), record it.

    The archive copy stays ``copying`` until then: a file that fails its check is never
    counted, whatever was uploaded (its object and copy row go), nor one whose object
    differs from it (a rerun uploads it again).
    """
    path, local, size = transfer.path, transfer.local, transfer.size
    wait([transfer.uploaded, transfer.checked])
    try:
        digest = transfer.checked.result()
    except IntegrityError:  # a damaged file is never archived
        _drop(cat, run_id, path, rows.ARCHIVE)
        store.delete(path)
        raise
    transfer.uploaded.result()
    _put(cat, run_id, path, rows.FAST, location=path, size=size, checksum=digest, state="verified",
         verified_at=_now())
    if verify == "read-back":
        at = _same_object(store, path, local, size)
        if at is not None:
            raise IntegrityError(f"the archive copy {store.location(path)} of {path} differs from the file after its "
                                 f"upload (from byte {at} on); it stays unverified")
    _put(cat, run_id, path, rows.ARCHIVE, location=store.location(path), size=size, checksum=digest,
         state="verified", verified_at=_now())


def _fast_copy(cat: "Catalog", run_id: int, path: str, local: Path, size: int) -> str:
    """Record the fast copy of a file explicitly, with its digest (once a file has copies, the rows are the truth)."""
    digest = file_digest(local)
    _put(cat, run_id, path, rows.FAST, location=path, size=size, checksum=digest, state="verified",
                  verified_at=_now())
    return digest


# --------------------------------------------------------------------------- superfiles
#: The largest superfile migrate makes (bytes of its members).
SUPERFILE_LIMIT = 64 << 20


def _packs(files: list[tuple[str, Path, int]]) -> list[list[tuple[str, Path, int]]]:
    """Small files in groups of at most :data:`SUPERFILE_LIMIT` bytes; a file alone is packed too when it is
    one of several (a lone small file is a superfile of one, still one request)."""
    if len(files) < 2:
        return [files] if files else []
    groups: list[list[tuple[str, Path, int]]] = [[]]
    used = 0
    for item in files:
        if groups[-1] and used + item[2] > SUPERFILE_LIMIT:
            groups.append([])
            used = 0
        groups[-1].append(item)
        used += item[2]
    return groups


def pack(cat: "Catalog", run_id: int, store: Any, members: list[tuple[str, Path, int]],
         known: dict[str, list[rows.Copy]]) -> str:
    """Upload small files as one superfile object and record each member's archive copy in it.

    The paper's superfile (section 4.5): the members' bytes one after the other, then an
    index of their paths, offsets, sizes and digests in the data-file trailer format
    (:mod:`sdm.storage.trailer`: JSON and a 32-byte footer), so the object describes
    itself; the catalog records each member's copy as ``<object location>@<offset>``.
    The object is read back and every member's digest checked before any copy counts.
    Superfiles of earlier, interrupted migrations of these members are deleted once
    no verified copy refers to them.

    Returns
    -------
    str
        The superfile's key.
    """
    from ..storage import trailer

    rel_dir = str(Path(members[0][0]).parent)
    key = f"{rel_dir}/superfile-{os.urandom(6).hex()}{SUPERFILE_SUFFIX}"
    blob: list[bytes] = []
    index: list[dict[str, Any]] = []
    offset = 0
    for path, local, size in members:
        data = local.read_bytes()
        digest = _fast_copy(cat, run_id, path, local, size)
        index.append({"path": path, "offset": offset, "size": size, "checksum": digest})
        blob.append(data)
        offset += size
    stale = {rows.member(c.location)[0] for path, _, _ in members for c in known.get(path, [])
             if c.tier == rows.ARCHIVE and rows.member(c.location)[1] is not None}
    for item in index:
        _put(cat, run_id, item["path"], rows.ARCHIVE, size=item["size"],
                      location=rows.member_location(store.location(key), item["offset"]))
    body = b"".join(blob)
    store.write(key, body + trailer.encode({"format": 1, "superfile": True, "run": run_id, "members": index}, offset))
    back = _range(store, key, 0, offset)
    for item in index:
        got = f"{DIGEST}:{hashlib.sha256(back[item['offset']:item['offset'] + item['size']]).hexdigest()}"
        if got != item["checksum"]:
            raise IntegrityError(f"member {item['path']} of the superfile {store.location(key)} differs from its file "
                                 f"after the upload ({got} vs {item['checksum']}); it stays unverified")
    for item in index:
        _put(cat, run_id, item["path"], rows.ARCHIVE, size=item["size"], checksum=item["checksum"],
                      location=rows.member_location(store.location(key), item["offset"]), state="verified",
                      verified_at=_now())
    for old in stale - {store.location(key)}:  # a superfile of an interrupted migration: nobody's copy now
        if old.startswith(store.url + "/") and not _referenced(cat, run_id, old):
            store.delete(old[len(store.url) + 1:])
    return key


def _referenced(cat: "Catalog", run_id: int, location: str) -> bool:
    """Whether a copy of the run's files still lies in the superfile *location*."""
    return any(rows.member(c.location)[0] == location for found in rows.copies(cat, run_id).values() for c in found)


def stage(cat: "Catalog", run_id: int, store: Any, *, progress: Progress | None = None) -> TierReport:
    """Bring back to the fast tier every file of a run that only the archive holds, and verify it.

    Raises
    ------
    IntegrityError
        A downloaded file differs from its archive copy's digest or the catalog's checksums
        (it is not put in place).
    StorageError
        The object store or the file system failed.
    """
    root, rel_dir = _run(cat, run_id)

    def work(report: TierReport) -> None:
        todo = rows.copies(cat, run_id)
        _refuse_outside(cat, run_id, "stage", todo, None if store is None else store.url)
        total = sum(c[0].size for c in todo.values())
        done = 0
        for path, found in todo.items():
            archive, fast = _find(found, rows.ARCHIVE), _find(found, rows.FAST)
            size = (archive or found[0]).size
            if fast is not None and fast.verified:
                report.skipped += 1
            elif archive is None or not archive.verified:
                raise RunStateError(f"{path} of run {run_id} has no verified copy on any tier")
            else:
                if store is None:
                    raise StorageError(f"{path} of run {run_id}: no object store could be opened for its archive "
                                       f"copy {archive.location}")
                local = confine(root, rel_dir, path, f"run {run_id}'s catalog row of the file {path!r}")
                _put(cat, run_id, path, rows.FAST, location=path, size=size)
                part = local.with_name(local.name + ".staging")
                local.parent.mkdir(parents=True, exist_ok=True)
                obj, at = rows.member(archive.location)
                if at is None:
                    store.get_file(path, part)
                else:  # a member of a superfile: its bytes only
                    part.write_bytes(_range(store, obj[len(store.url) + 1:], at, archive.size))
                if file_digest(part, like=archive.checksum) != archive.checksum:
                    part.unlink()
                    raise IntegrityError(f"{archive.location} does not match its recorded digest {archive.checksum}; "
                                         "it was changed or damaged in the object store")
                _check_rows(cat, run_id, path, part)
                _sync(part)
                os.replace(part, local)
                _sync(local.parent)
                _put(cat, run_id, path, rows.FAST, location=path, size=size, checksum=archive.checksum,
                              state="verified", verified_at=_now())
                report.files += 1
                report.nbytes += size
            done += size
            if progress is not None:
                progress(done, total)
        _clear_remote_cache(root / rel_dir, report)

    return _logged(cat, run_id, "stage", rows.FAST, work)


def purge(cat: "Catalog", run_id: int, tier: str, store: Any = None, *,
          progress: Progress | None = None) -> TierReport:
    """Remove a run's copies from *tier*, refused unless every file has a verified copy on another tier.

    Raises
    ------
    RunStateError
        Some file has no verified copy elsewhere (nothing is removed), or a session writes the run.
    StorageError
        A copy cannot be removed (the catalog has forgotten it already: a rerun removes it).
    """
    root, rel_dir = _run(cat, run_id)
    other = rows.ARCHIVE if tier == rows.FAST else rows.FAST

    def work(report: TierReport) -> None:
        todo = rows.copies(cat, run_id)
        _refuse_outside(cat, run_id, "purge", todo, None if store is None else store.url)
        ends = _ends(cat, run_id)
        unsafe = [path for path, found in todo.items() if not _whole(_find(found, other), ends.get(path, 0))]
        if unsafe:
            raise RunStateError(
                f"purge of run {run_id} from the {tier} tier refused: {len(unsafe)} of its files have no verified copy "
                "of all their steps "
                f"on the {other} tier ({', '.join(unsafe[:3])}{', ...' if len(unsafe) > 3 else ''}); "
                f"`sdm {'migrate' if tier == rows.FAST else 'stage'} {run_id}` first")
        total = sum(c[0].size for c in todo.values())
        done = 0
        for path, found in todo.items():
            mine = _find(found, tier)
            size = (mine or found[0]).size
            if mine is not None:
                _drop(cat, run_id, path, tier)  # forgotten first: never a row without bytes
                report.files += 1
                report.nbytes += size
            if tier == rows.FAST:
                record = f"run {run_id}'s catalog row of the file {path!r}"
                confine(root, rel_dir, path, record).unlink(missing_ok=True)
                confine(root, rel_dir, path + ".staging", record).unlink(missing_ok=True)
            elif store is not None and mine is not None and rows.member(mine.location)[1] is not None:
                obj = rows.member(mine.location)[0]  # a superfile goes with the last copy in it
                if not _referenced(cat, run_id, obj):
                    store.delete(obj[len(store.url) + 1:])
            elif store is not None and (mine is not None or store.size(path) is not None):
                store.delete(path)
            if mine is None:
                report.skipped += 1
            done += size
            if progress is not None:
                progress(done, total)
        if tier == rows.ARCHIVE:
            _clear_remote_cache(root / rel_dir, report)

    return _logged(cat, run_id, "purge", tier, work)


def _clear_remote_cache(run_dir: Path, report: TierReport) -> None:
    """Remove the run's subfile cache of remote reads (:func:`sdm.io.remote.clear_cache`), stale once the fast
    copies are back (never read while they exist) or the archive copies it mirrors are gone; noted in *report*."""
    from ..io.remote import clear_cache

    held = clear_cache(run_dir)
    if held:
        report.notes.append(f"removed the remote reads' cache ({held} bytes)")


def _sync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    except OSError as exc:
        raise StorageError(f"cannot sync {path}: {exc.strerror}", exc.errno) from None
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- selection and the API

def select_runs(cat: "Catalog", runs: Any = None, *, application: str | None = None,
                where: Any = None) -> list[int]:
    """Run ids named (*runs*) or found by attribute conditions (``"key=value"``, ``"nx>=64"``) and application.

    Raises
    ------
    InvalidArgumentError
        Neither runs nor a selection, or both.
    """
    from ..catalog import parse_condition

    if runs and (where or application):
        raise InvalidArgumentError("name runs by id or select them with conditions, not both")
    if runs:
        return [int(r) for r in runs]
    if not where and application is None:
        raise InvalidArgumentError("name runs by id, or select them with KEY=VALUE conditions and/or an application")
    conds = [parse_condition(c) if isinstance(c, str) else c for c in where or ()]
    return [r.id for r in cat.find(application=application, conditions=conds, steps=False)]


def archive_store(cat: "Catalog", run_id: int, endpoint: str | None = None) -> Any:
    """The object store a run's archive copies are in (from their recorded location), or None if it has none."""
    from ..storage.backends.objectstore import ObjectStore

    for path, found in rows.copies(cat, run_id).items():
        archive = _find(found, rows.ARCHIVE)
        if archive is None:
            continue
        obj, at = rows.member(archive.location)
        key = path if at is None else f"{Path(path).parent}/{obj.rsplit('/', 1)[-1]}"
        if obj.endswith("/" + key):
            return ObjectStore(obj[: -len(key) - 1], endpoint=endpoint)
    return None


def run(operation: str, runs: Any = None, *, where: Any = None, application: str | None = None,
        to: str | None = None, tier: str = "fast", endpoint: str | None = None, catalog: str | None = None,
        pack_below: int = 0, verify: str = "read-back",
        progress: Callable[[int, int, str], None] | None = None) -> list[TierReport]:
    """``sdm migrate``, ``sdm stage`` and ``sdm purge`` of every selected run (see :func:`select_runs`).

    Parameters
    ----------
    operation : {"migrate", "stage", "purge"}
    runs, where, application
        The runs: ids, or conditions such as ``["case=c3", "nx>=64"]`` and an application.
    to : str
        ``migrate``: the archive, ``s3://BUCKET/PREFIX``.
    tier : {"fast", "archive"}
        ``purge``: the tier to remove copies from.
    pack_below, verify
        ``migrate``: files of at most *pack_below* bytes go into superfiles; how copies are
        verified (see :func:`migrate`).
    endpoint : str, optional
        The object store's server (default: ``$SDM_S3_ENDPOINT`` or ``$AWS_ENDPOINT_URL``).
    catalog : str, optional
        Catalog URL (default: ``$SDM_CATALOG`` or the SQLite catalog in ``$SDM_ROOT``).
    progress : callable, optional
        ``progress(bytes done, bytes in all, what)`` as the work proceeds.

    Returns
    -------
    list of TierReport
        One per run, in order; the first failure stops and is raised (earlier runs stay done).
    """
    from .. import config
    from ..catalog import Catalog
    from ..storage.backends.objectstore import ObjectStore

    if operation not in ("migrate", "stage", "purge"):
        raise InvalidArgumentError(f"tier operation must be migrate, stage or purge, got {operation!r}")
    if operation == "migrate" and not to:
        raise InvalidArgumentError("migrate needs the archive to copy to: to='s3://BUCKET/PREFIX'")
    target = ObjectStore(to, endpoint=endpoint) if operation == "migrate" and to else None
    if target is not None:
        target.ensure_bucket()
    cat = Catalog(catalog or config.default_catalog_url(), create=False)
    try:
        reports = []
        for run_id in select_runs(cat, runs, application=application, where=where):
            def report(done: int, total: int, _what: str = f"{operation} run {run_id}") -> None:
                if progress is not None:
                    progress(done, total, _what)

            if operation == "migrate":
                reports.append(migrate(cat, run_id, target, pack_below=pack_below, verify=verify, progress=report))
            elif operation == "stage":
                reports.append(stage(cat, run_id, archive_store(cat, run_id, endpoint), progress=report))
            else:
                store = archive_store(cat, run_id, endpoint) if tier == rows.ARCHIVE else None
                reports.append(purge(cat, run_id, tier, store, progress=report))
        return reports
    finally:
        cat.close()

