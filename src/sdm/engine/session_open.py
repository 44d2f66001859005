"""Opening a session: the arguments checked and agreed on every rank, then the run set up on rank 0.

:func:`agree_options` checks :func:`sdm.open`'s arguments on every rank, enters the
``open`` operation (:mod:`sdm.engine.operations`) and compares what each argument means
on each rank in one allgather, so a bad or differing argument raises the same error on
every rank before the catalog is touched. :func:`open_run` then makes rank 0 open the
catalog and create (``"w"``), hold (``"a"``) or look at (``"r"``) the run, while the
other ranks wait resting; the run's record, its root and what the planner learned
before come back to every rank.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mpi4py import MPI

from .. import _validate as check
from .. import config
from .._collective import Failure, agree, capture, root_call_resting
from ..catalog import RunRecord, redact_url
from ..catalog.changes import RunOpened
from ..catalog.metafile import MetaFile
from ..catalog.selection import run_choice
from ..errors import CatalogError, CollectiveMismatchError, InvalidArgumentError, RunStateError
from ..layout.agreement import by_value
from ..planner import choose_method
from ..planner.learned import MOST_ROWS
from ..storage import FileCache, check_name, durability, runs
from ..storage.backends.mpiio import MPIIOBackend

from .background import refuse_without_threads
from .hints import planner_hints as planner_hints_checked, session_hints
if TYPE_CHECKING:
    from ..catalog.catalog import Catalog
    from .session_state import SessionState
    from .operations import Operations

__all__ = ["MODES", "agree_options", "open_run", "open_files_of", "release_run", "mpi_info"]

MODES = ("w", "r", "a")  #: a session's modes: write a new run, read one, add to one
_SECRET = ("catalog",)  # compared, never shown (a URL may hold a password)


def agree_options(ops: Operations, comm: MPI.Comm, rank: int, application: str, mode: Any,
                  options: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """Check :func:`sdm.open`'s *options* on every rank, enter ``open`` and agree on them (collective).

    Returns the options as this rank resolved them (``hints`` and ``planner_hints``
    checked, ``run`` an id, ``"latest"`` or None, ``sync`` and ``checksum`` with their
    defaults from the environment) and the number of data files the session keeps open.
    On failure the session's communicator is freed.

    Raises
    ------
    InvalidArgumentError, HintError, CollectiveMismatchError
    """
    o = options
    args, failure = capture(_check_open, mode, o["catalog"], o["root"], o["run"], o["attributes"], o["problem_size"],
                            o["method"], o["hints"], o["sync"], o["verify"], o["checksum"], o["planner_hints"],
                            rank=rank)
    for flag in ("async_commit", "metafile", "asynchronous"):
        if failure is None:
            _, failure = capture(check.flag, o[flag], flag, rank=rank)
    if failure is None:
        _, failure = capture(_check_background, o["asynchronous"], o["max_in_flight"], rank=rank)
    agreeing: dict[str, Any] | None = None
    if failure is None:
        assert args is not None
        agreeing = dict(
            application=application, mode=mode, run=run_choice(o["run"]), root=o["root"], catalog=o["catalog"],
            attributes=o["attributes"], problem_size=o["problem_size"], method=o["method"], hints=args["hints"],
            sync=config.sync_enabled() if o["sync"] is None else bool(o["sync"]), verify=bool(o["verify"]),
            checksum=config.checksum_enabled() if o["checksum"] is None else bool(o["checksum"]),
            planner_hints=args["planner_hints"], async_commit=bool(o["async_commit"]), metafile=bool(o["metafile"]),
            asynchronous=bool(o["asynchronous"]),
            max_in_flight=None if o["max_in_flight"] is None else int(o["max_in_flight"]))
    try:
        ops.enter("open")
        # one allgather: a bad argument on any rank raises the same error on all, then the comparison
        open_files = _agree_arguments(comm, failure, agreeing)
    except BaseException:
        comm.Free()
        raise
    assert agreeing is not None  # no rank failed
    return agreeing, open_files


def open_run(session: SessionState, options: dict[str, Any]) -> tuple[str, str, RunRecord, Any, str]:
    """Rank 0 opens the catalog and the run while the others wait resting (collective).

    Returns, on every rank, the catalog's URL for showing (password masked), the data
    root, the run's record, ``(calibration, learned choices)`` for the planner and the
    run's state before the session (``"new"`` in mode ``"w"``). On failure the session's
    communicator is freed.

    Raises
    ------
    SDMError
        Rank 0's failure (no such run, several runs match, a run held by writers, ...).
    """
    try:
        return root_call_resting(session.comm, lambda: _setup(session, **options))
    except BaseException:
        session.comm.Free()
        raise


def _setup(s: SessionState, *, root: Any, catalog: Any, run: Any, attributes: Any, problem_size: Any,
           **_: Any) -> tuple[str, str, RunRecord, Any, str]:
    """Rank 0 of :func:`open_run`."""
    check_name(s.application, "application")
    choose_method(s.method)  # validates the name
    data_root = Path(root).resolve() if root is not None else config.default_root()
    url = catalog or config.default_catalog_url(data_root)
    from ..catalog.catalog import Catalog  # rank 0 only: the other ranks never import SQLAlchemy

    commits = s._commits
    cat = commits.catalog = Catalog(url, create=(s.mode == "w"))
    try:
        if s.mode == "w":
            cat_id, created = cat.id, datetime.now(timezone.utc)
            rec = cat.new_run(
                s.application, nprocs=s.size, root=str(data_root), problem_size=problem_size, attributes=attributes,
                make_dir=lambda rid: _make_run_dir(s, data_root, rid, cat_id, created, problem_size, attributes),
                created_at=created)
            s._lock = runs.RunLock(Path(rec.root), rec.dir or "")
            previous = "new"
        else:  # run=ID, run="latest", or the one run that matches (several: an error listing them)
            rec = cat.select_run(s.application, attributes, run)
            previous = _hold_run(s, rec) if s.mode == "a" else _look_at_run(cat, rec)
    except Exception:
        release_run(s)
        commits.close()
        raise
    if s.mode != "w" and root is None:
        data_root = Path(rec.root)
    # a catalog made just now holds no calibration and no learned choices
    calibration = None if cat.created else cat.latest_calibration(str(data_root))
    # (learned from the trials of writes: a read-only session makes none and needs none)
    learned = [] if cat.created or s.mode == "r" else cat.planner_choices(str(data_root), MOST_ROWS)
    return redact_url(url), str(data_root), rec, (calibration, learned), previous  # the password stays on rank 0


def _make_run_dir(s: SessionState, data_root: Path, run_id: int, catalog_id: str, created: datetime, problem_size: Any,
                  attributes: dict[str, Any] | None) -> str:
    """Rank 0 of a new run, in the catalog's transaction: its directory, and the meta-file's first record."""
    rel = runs.make_run_dir(data_root, s.application, run_id, catalog_id, metafile=s.metafile)
    if not s.metafile:
        return rel
    meta = s._commits.meta = MetaFile(data_root / rel, sync=s.sync)
    meta.run(application=s.application, run_id=run_id, catalog_id=catalog_id, nprocs=s.size,
             problem_size=problem_size, attributes=attributes, created=created, root=str(data_root), directory=rel)
    return rel


def _hold_run(s: SessionState, rec: RunRecord) -> str:
    """Rank 0 of an appending session: check the run's directory, take a hold on it."""
    cat = s._commits.catalog
    assert cat is not None
    rel = rec.dir or runs.legacy_run_dir(rec.application, rec.id)
    legacy = rel == runs.legacy_run_dir(rec.application, rec.id)
    runs.check_run_dir(Path(rec.root), rel, cat.id, rec.id, legacy=legacy)
    _check_on_fast_tier(cat, rec.id)
    if not legacy and runs.keeps_metafile(Path(rec.root) / rel):  # else: the run has none to continue
        if not s.metafile:
            raise InvalidArgumentError(
                f"run {rec.id} keeps a meta-file: appending with metafile=False would leave these writes out "
                "of it (a rebuild would lose them); open it with metafile=True")
        s._commits.meta = MetaFile(Path(rec.root) / rel, sync=s.sync)

    def claim() -> bool:
        live = runs.writer_alive(Path(rec.root), rel)
        s._lock = runs.RunLock(Path(rec.root), rel)
        return live

    return s._commits.record_now(RunOpened(rec.id, claim))


def _look_at_run(cat: Catalog, rec: RunRecord) -> str:
    """Rank 0 of a reading session: a run left ``open`` by dead writers is marked interrupted."""
    if rec.state == "open" and not runs.writer_alive(Path(rec.root), rec.dir):
        try:
            cat.mark_interrupted(rec.id)
            return "interrupted"
        except CatalogError:  # a catalog the reader may not write: reading still works
            pass
    return rec.state


def _check_on_fast_tier(catalog: Catalog, run_id: int) -> None:
    """Refuse to append to a run whose level-2/3 files are not all on the fast tier (purged, or being staged).

    New steps of a level-2/3 file are written into the file on the fast tier: a file
    purged from it would be made again around a hole where its archived steps were.
    Level-1 files (archive-tier groups' objects among them) are never written again:
    new steps go to new files.

    Raises
    ------
    RunStateError
    """
    from ..catalog.tiers import FAST, copies

    appended = {f.path for f in catalog.files(run_id) if f.level > 1}
    away = sorted(path for path, found in copies(catalog, run_id).items()
                  if path in appended and not any(c.tier == FAST and c.verified for c in found))
    if away:
        raise RunStateError(
            f"run {run_id} cannot be appended to: {len(away)} of its files are not on the fast tier "
            f"({', '.join(away[:3])}{', ...' if len(away) > 3 else ''}); `sdm stage {run_id}` first")


def _check_open(mode: Any, catalog: Any, root: Any, run: Any, attributes: Any, problem_size: Any, method: Any,
                hints: Any, sync: Any, verify: Any, checksum: Any, planner_hints: Any) -> dict[str, Any]:
    """Check the arguments of :func:`sdm.open` (every rank; no catalog, no file touched).

    Raises
    ------
    InvalidArgumentError, HintError
    """
    check.text(mode, "mode", choices=MODES)
    check.text(catalog, "catalog URL", optional=True)
    check.path(root, "root", optional=True)
    run_choice(run)  # None, a run id or "latest"
    check.mapping(attributes, "attributes")
    if problem_size is not None:
        try:
            json.dumps(problem_size, default=_plain, allow_nan=False)
        except (TypeError, ValueError, RecursionError) as exc:
            raise InvalidArgumentError(f"problem_size must be JSON-like (numbers, strings, lists, dicts): {exc}") from None
    check.text(method, "method")
    choose_method(method)  # the name is known
    for value, what in ((sync, "sync"), (checksum, "checksum")):
        check.optional_flag(value, what)
    check.flag(verify, "verify")
    return {"hints": session_hints(hints), "planner_hints": planner_hints_checked(planner_hints)}


def _check_background(asynchronous: bool, max_in_flight: Any) -> None:
    """``asynchronous`` (needs MPI.THREAD_MULTIPLE) and ``max_in_flight`` (None or bytes >= 1) of :func:`sdm.open`."""
    if max_in_flight is not None:
        check.integer(max_in_flight, "max_in_flight (bytes of copies per rank)", minimum=1)
    if asynchronous:
        refuse_without_threads("asynchronous=True")


def _plain(obj: Any) -> Any:
    if hasattr(obj, "tolist") and not isinstance(obj, type):
        return obj.tolist()
    raise TypeError(f"{type(obj).__name__} is not JSON")


def _canonical(value: Any) -> str:
    """A text that is equal on two ranks when the argument is (never raises)."""
    try:
        return json.dumps(value, sort_keys=True, default=repr)
    except Exception:  # noqa: BLE001 - e.g. keys of mixed types
        try:
            return repr(value)
        except Exception:  # noqa: BLE001
            return f"<{type(value).__name__}>"


def _effective(args: dict[str, Any]) -> dict[str, str]:
    """What each argument means on this rank (defaults from the environment resolved), as text."""
    out = {k: _canonical(v) for k, v in args.items() if k not in ("root", "catalog")}
    root, catalog = args["root"], args["catalog"]
    try:
        data_root = Path(root).resolve() if root is not None else config.default_root()
        out["root"] = str(data_root) if root is not None or args["mode"] == "w" else "the run's root"
        url = catalog or config.default_catalog_url(data_root)
        out["catalog"] = hashlib.sha256(str(url).encode()).hexdigest()
    except Exception as exc:  # noqa: BLE001 - reported by setup() on rank 0; here it only has to compare
        out["root"] = out["catalog"] = f"<{type(exc).__name__}>"
    return out


def _agree_arguments(comm: MPI.Comm, failure: Failure | None, args: dict[str, Any] | None) -> int:
    """One allgather: the first rank's failure, else a CollectiveMismatchError if arguments differ, on every rank.

    Parameters
    ----------
    failure : Failure or None
        This rank's failed check of the arguments (then *args* is None).
    args : dict or None
        The arguments as this rank resolved them.

    Returns the number of data files the session keeps open: the least over the ranks
    (each rank's limit may differ; closing a cached file is collective, so all use one).

    Raises
    ------
    SDMError
        The failure of the lowest failing rank.
    CollectiveMismatchError
        Naming every argument that differs and which ranks gave what (catalog URLs are
        compared but never shown).
    """
    mine = None
    if failure is None and args is not None:
        mine = _effective(args)
        try:
            mine["open files"] = str(config.open_files())
        except ValueError:  # a bad $SDM_OPEN_FILES: the default
            mine["open files"] = "64"
    everyone: list[dict[str, str]] = agree(comm, failure, mine)
    differ = []
    for key in everyone[0]:
        if key == "open files":
            continue
        values = [e[key] for e in everyone]
        if len(set(values)) == 1:
            continue
        if key in _SECRET:
            labels: dict[str, str] = {}
            shown = [labels.setdefault(v, f"URL {len(labels) + 1}") for v in values]
            differ.append(f"{key} ({by_value(shown)}; URLs not shown)")
        else:
            differ.append(f"{key} ({by_value([v if len(v) <= 80 else v[:77] + '...' for v in values])})")
    if differ:
        raise CollectiveMismatchError(
            "ranks opened the session with different arguments: " + ", ".join(differ)
            + "; every rank must call sdm.open with the same application, mode, run, root, catalog and options"
        )
    return min(int(e["open files"]) for e in everyone)


def open_files_of(s: SessionState, capacity: int) -> tuple[MPIIOBackend, FileCache]:
    """The session's data files (*capacity* kept open) and the cache of files it imports from."""
    info = mpi_info(s.hints)
    files = MPIIOBackend(s.comm, writable=(s.mode != "r"), capacity=capacity, info=info,
                         sync_mode=durability.sync_mode(s.hints))
    return files, FileCache(s.comm, writable=False, capacity=8, info=info)


def release_run(s: SessionState) -> None:
    """Rank 0 of a writing session: let go of its hold on the run (if it has one)."""
    if s._lock is not None:
        s._lock.release()
        s._lock = None


def mpi_info(hints: dict[str, str] | None) -> MPI.Info:
    """The MPI-IO hints as an ``MPI.Info`` (``MPI.INFO_NULL`` when there are none)."""
    if not hints:
        return MPI.INFO_NULL
    info = MPI.Info.Create()
    for k, v in hints.items():
        info.Set(str(k), str(v))
    return info
