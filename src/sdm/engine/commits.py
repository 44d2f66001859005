"""Rank 0's side of a session's catalog: the recorder, the run's meta-file and the background commits.

Only rank 0 of a session opens the catalog; every change it makes goes through
:meth:`Commits.record`, which journals it in the run's meta-file (when the session keeps
one) before applying it (:class:`~sdm.catalog.recorder.Recorder`). With
``async_commit`` a dump's rows are committed by one background thread
(:meth:`Commits.commit_later`); the next use of the catalog waits for that commit and
raises its error first, so the catalog has one user at a time and a failed commit is
reported once, at the session's next collective call or at its close.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from .._collective import Failure, capture
from ..catalog import GroupRecord
from ..catalog.changes import Change, WritesRecorded
from ..catalog.recorder import Recorder

if TYPE_CHECKING:
    from ..catalog.catalog import Catalog
    from ..catalog.metafile import MetaFile

__all__ = ["Commits"]

T = TypeVar("T")


class Commits:
    """Rank 0's catalog of one session (other ranks keep one with no catalog, never used).

    Attributes
    ----------
    catalog : Catalog or None
        The open catalog (rank 0, while the session is open).
    meta : MetaFile or None
        The run's meta-file (rank 0 of a writing session that keeps one).
    run_id : int
        The session's run (set once the run is opened).
    """

    def __init__(self) -> None:
        self.catalog: Catalog | None = None
        self.meta: MetaFile | None = None
        self.run_id = 0
        self._pending: Future[Any] | None = None  # the dump being committed in the background
        self._committer: ThreadPoolExecutor | None = None  # the thread that commits

    def open_catalog(self) -> Catalog:
        """The catalog, once the background commit is done (its error, if any, raised first).

        Raises
        ------
        SDMError
            The background commit failed (reported once).
        """
        assert self.catalog is not None, "catalog used outside rank 0 or after close"
        self.raise_pending()  # one catalog user at a time; an earlier commit's error comes first
        return self.catalog

    def record(self, change: Change[T]) -> T:
        """Make *change*: journaled first in the meta-file when there is one, then applied; the catalog's answer."""
        self.open_catalog()
        return self.record_now(change)

    def record_now(self, change: Change[T]) -> T:
        """:meth:`record` without waiting for the background commit (that commit itself, open and close)."""
        assert self.catalog is not None, "catalog used outside rank 0 or after close"
        return Recorder(self.catalog, self.meta).record(change)

    def group_record(self, name: str) -> GroupRecord:
        """A group of the run as the catalog keeps it; the meta-file learns its ids (records name them)."""
        record = self.open_catalog().group(self.run_id, name)
        if self.meta is not None:
            self.meta.names.learn(record)
        return record

    def commit_later(self, rows: list[dict[str, Any]]) -> None:
        """Commit one dump's rows in the background (``async_commit``).

        Its bytes are synced already (every rank passed the write's last exchange), so
        the order of durability holds; the next catalog use waits for it (:meth:`settle`).
        """
        self.raise_pending()
        if self._committer is None:
            self._committer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sdm-commit")
        assert self.catalog is not None
        self._pending = self._committer.submit(self.record_now, WritesRecorded.of(self.run_id, rows))

    def raise_pending(self) -> None:
        """Wait for the background commit and raise its error, if any (once)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            exc = pending.exception()
            if exc is not None:
                raise exc

    def settle(self) -> Failure | None:
        """Wait for the background commit; its :class:`~sdm._collective.Failure` (reported once) or None."""
        return capture(self.raise_pending, rank=0)[1]

    def stop(self) -> None:
        """Wait for the background thread to finish and end it."""
        if self._committer is not None:
            self._committer.shutdown(wait=True)
            self._committer = None

    def close_meta(self) -> None:
        """Close the run's meta-file, if open."""
        if self.meta is not None:
            self.meta.close()
            self.meta = None

    def close(self) -> None:
        """Close the meta-file and the catalog (what is left of them)."""
        self.close_meta()
        if self.catalog is not None:
            self.catalog.close()
            self.catalog = None
