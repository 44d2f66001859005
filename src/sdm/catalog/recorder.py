"""The one way the catalog changes: journal the change in the run's meta-file, then apply it.

:meth:`Recorder.record` takes a typed change (:mod:`sdm.catalog.changes`), appends its
record to the run's meta-file and syncs it (when there is one), then applies it to the
catalog; if the catalog refuses it, an ``abort`` record naming it follows, so a rebuild
skips it. That is the order of durability: a change's bytes are synced before it is
recorded, its record is synced before the catalog commits it, so after any crash the
meta-file knows at least what the catalog knows. ``sdm rebuild`` replays the records
through the same :meth:`~sdm.catalog.changes.Change.apply`.

Reads of the catalog are plain typed :class:`~sdm.catalog.Catalog` calls, not changes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

from .changes import Change, Names

if TYPE_CHECKING:
    from .catalog import Catalog
    from .metafile import MetaFile

__all__ = ["Recorder"]

T = TypeVar("T")


class Recorder:
    """Rank 0's recorder of one run's changes.

    Parameters
    ----------
    catalog : Catalog
    journal : MetaFile, optional
        The run's meta-file (None: a session with ``metafile=False``, or a run without one).
    """

    __slots__ = ("catalog", "journal")

    def __init__(self, catalog: "Catalog", journal: "MetaFile | None" = None) -> None:
        self.catalog = catalog
        self.journal = journal

    @property
    def names(self) -> Names:
        """The names of the run's groups and datasets by id, as the journal learned them."""
        return self.journal.names if self.journal is not None else Names()

    def record(self, change: Change[T]) -> T:
        """Journal *change* (appended and synced), then apply it to the catalog; the catalog's answer.

        Raises
        ------
        StorageError
            The meta-file cannot be written or synced: the catalog is not changed.
        SDMError
            The catalog refused the change (an ``abort`` record follows its record).
        """
        journal = self.journal
        record = None if journal is None else change.to_record(journal.names)
        rid = journal.append(record) if journal is not None and record is not None else None
        try:
            result = change.apply(self.catalog)
        except BaseException:
            if rid is not None:
                assert journal is not None
                journal.append({"t": "abort", "ref": rid})
            raise
        if journal is not None:
            change.learn(result, journal.names)
        return result

    def journal_only(self, change: Change[Any]) -> None:
        """Journal a change the catalog makes by itself (the run created, inside its own transaction)."""
        if self.journal is not None:
            record = change.to_record(self.journal.names)
            if record is not None:
                self.journal.append(record)
