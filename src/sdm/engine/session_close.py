"""Closing a session: collectively, within a deadline after an exception, or locally when it is broken.

A collective close (:func:`close`) first waits for the session's nonblocking dumps
(:mod:`sdm.engine.background`; a failure of one is raised once the session is closed),
then enters the ``close`` operation on every rank, frees
the groups' resources and closes the data files; rank 0 of a writing session then
waits for the last background commit, gives back the file space reserved ahead and not
used, stores what the planner's trials settled, writes a trailer at the end of every
level-2/3 file the session wrote and records the run closed (or leaves it
``interrupted``). A session whose ranks are no longer in step closes locally
(:func:`close_locally`): rank 0 leaves the run ``interrupted``, every committed step
readable. :func:`close_after` is what leaving a ``with`` block by an exception does.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from .._collective import capture, root_call
from ..catalog.changes import RunClosed, SpaceReserved
from ..errors import CatalogError, CollectiveMismatchError, SDMError
from ..storage import trailer
from ..storage.confine import confine, row_record
from .operations import Late, close_wait
from .session_open import release_run

if TYPE_CHECKING:
    from .session_state import SessionState

__all__ = ["close", "close_after", "close_locally"]


def close_after(s: SessionState, exc: BaseException | None) -> None:
    """Close *s* as its ``with`` block ends: as :func:`close` without an exception; after *exc*, collectively
    when every rank joins within ``$SDM_CLOSE_WAIT`` seconds, else the job is ended (:mod:`sdm.engine.operations`)."""
    if exc is None:
        close(s)
        return
    if s._closed:
        return
    interrupted = isinstance(exc, KeyboardInterrupt)
    if s._ops.torn is not None or s._ops.broken is not None or s.size == 1:
        close(s, interrupted=interrupted)  # ends the job (torn), or closes locally
        return
    wait = close_wait()
    try:
        close(s, deadline=time.monotonic() + wait, interrupted=interrupted, after=type(exc).__name__)
    except Late:
        s._ops.abort(exc, f"the application's code of this rank, and the other ranks did not close the "
                          f"session within {wait:g} s ($SDM_CLOSE_WAIT)")
    except CollectiveMismatchError:
        s._ops.abort(exc, "the application's code of this rank while the other ranks made another SDM call")


def close(s: SessionState, *, deadline: float | None = None, interrupted: bool = False, after: str = "") -> None:
    """Close collectively (within *deadline*, else :class:`~sdm.engine.operations.Late`), or locally when broken.

    Raises
    ------
    SDMError
        A background commit or a trailer failed (the session is closed all the same).
    CollectiveMismatchError
        The other ranks made another call (the session is closed locally).
    """
    if s._closed:
        return
    ops = s._ops
    if ops.torn is not None and s.size > 1:
        ops.abort(ops.torn, "an SDM call (the ranks are no longer in step)")
    if ops.broken is not None or ops.torn is not None:
        close_locally(s)
        return
    failed = _settle_dumps(s, deadline)  # every nonblocking dump ended; a failure not yet reported: raised last
    if ops.torn is not None and s.size > 1:  # a bug in the worker's dump
        ops.abort(ops.torn, "a nonblocking dump in the background (the ranks are no longer in step)")
    if ops.broken is not None or ops.torn is not None:  # e.g. a dump met another operation on another rank
        close_locally(s)
        if failed is not None and failed.error is not None:
            raise failed.error
        return
    ops.current = (f"Session.close() after {after}" if after else "Session.close", (), {})
    ops.depth = 1
    try:
        ops.enter("close", deadline=deadline)
    except CollectiveMismatchError:
        close_locally(s)
        raise
    finally:
        ops.depth = 0
    s._closed = ops.closed = True
    try:
        for g in s._groups.values():
            g.engine._free()
        s.files.close_all()
        s.sources.close_all()
        if s.mode != "r":
            root_call(s.comm, _close_run, s, interrupted)
    except SDMError as exc:
        if failed is not None and failed.error is not None:
            raise failed.error from exc  # the dump's failure first: it came before
        raise
    except BaseException as exc:  # e.g. KeyboardInterrupt in a collective of the close
        ops.torn = exc
        if s.size > 1:
            ops.abort(exc, "Session.close (the ranks are no longer in step)")
        raise
    finally:
        s._commits.stop()
        s._commits.close()
        s.comm.Free()
    if failed is not None and failed.error is not None:
        raise failed.error


def _settle_dumps(s: SessionState, deadline: float | None) -> Any:
    """Wait for the session's nonblocking dumps (:class:`Late` past *deadline*) and end the worker; the failed
    dump not yet reported (:class:`~sdm.engine.background.DumpHandle`), or None."""
    background = s._ops.background
    if background is None:
        return None
    failed = background.take(deadline)
    background.stop()
    s._ops.background = None
    return failed


def close_locally(s: SessionState) -> None:
    """Release what this rank holds without a collective call; rank 0 leaves the run ``interrupted``.

    For a session whose ranks are no longer in step: its files stay open until the
    process ends (closing an MPI file is collective).
    """
    s._closed = s._ops.closed = True
    if s._ops.background is not None:  # a dump may wait in a collective the others never join: not joined
        s._ops.background.stop(join=False)
        s._ops.background = None
    for g in s._groups.values():
        g.engine._free()
    s._commits.stop()
    release_run(s)
    if s.catalog is not None and s.mode != "r":
        capture(s.catalog.mark_interrupted, s.run_id)  # best effort: readers find it interrupted anyway
    s._commits.close()


def _close_run(s: SessionState, interrupted: bool = False) -> None:
    """Rank 0 of a writing session's close: the run's last records, then its hold released."""
    failure = s._commits.settle()  # the last dump's commit first: its error is reported after the close
    trailers = None
    try:
        if s.catalog is not None:
            _give_back_space(s)  # before the trailers, which go at the files' ends
            _store_learned(s)
            _, trailers = capture(_write_trailers, s, rank=0)
            if interrupted:  # no close record: the run stays interrupted, also for a rebuild
                release_run(s)
                s.catalog.mark_interrupted(s.run_id)
            else:
                s._commits.record_now(RunClosed(s.run_id))
    finally:
        release_run(s)
    if failure is not None:
        raise failure.exception(1)
    if trailers is not None:
        raise trailers.exception(1)


def _store_learned(s: SessionState) -> None:
    """Rank 0 at close: what this session's trials settled, for later runs on this target (a cache: a
    catalog that refuses it, e.g. on a full disk, only makes the next run try again)."""
    assert s.catalog is not None
    if s.planner.measured:
        try:
            s.catalog.store_planner_choices(str(s.root), [v.as_row(k) for k, v in s.planner.measured.items()])
        except CatalogError:
            pass


def _give_back_space(s: SessionState) -> None:
    """Rank 0 at close: the file space its groups reserved ahead and did not use, given back to the files
    whose high-water mark is still where this session left it (otherwise ``sdm gc`` does it)."""
    assert s.catalog is not None
    unused = [u for g in s._groups.values() for u in g.engine._pool.unused()]
    if unused:
        try:
            s.catalog.give_back(s.run_id, unused)
        except CatalogError:  # e.g. a full disk: the space stays reserved, as after a crash (`sdm gc` gives it back)
            pass


def _write_trailers(s: SessionState) -> None:
    """Rank 0 at close: a trailer at the end of every level-2/3 file this session wrote (committed rows only)."""
    catalog = s.catalog
    assert catalog is not None
    if not s.described:
        return
    rec = catalog.run(s.run_id, steps=False)  # the groups as committed (a dataset's view is set by its first write)
    run = {"application": rec.application, "run": rec.id, "catalog": catalog.id, "dir": rec.dir}
    groups = {g.name: g for g in rec.groups}
    rows: dict[str, list[tuple[str, Any]]] = {}
    owner: dict[str, str] = {}
    for group, dataset, w in catalog.writes(s.run_id, paths=sorted(s.described)):
        if w.extents and w.codec is None:  # a subfiled step: described by the meta-file and the catalog, not a trailer
            continue
        rows.setdefault(w.path, []).append((dataset, w))
        owner[w.path] = group
    closed_at = datetime.now(timezone.utc).isoformat()
    for path in sorted(rows):  # a file left without rows (truncated away) has nothing to describe
        g = groups[owner[path]]
        index = trailer.body_of(trailer.index_of(run, g, path, rows[path], closed_at))
        size = len(index) + trailer.FOOTER.size
        offset = s._commits.record(SpaceReserved(s.run_id, ((path, g.level, size, False),)))[0]
        assert offset is not None  # appended space (not a whole file) always has its offset
        trailer.write(confine(s.root, s.run_dir, path, row_record(s.run_id, g.name)), int(offset), index,
                      sync=s.sync)
