"""The exports that copy nothing (``sdm export --format references | icechunk``): options, run, writer.

:func:`export_virtual` is :func:`sdm.exporting.export` for :data:`sdm.exporting.VIRTUAL_FORMATS`:
the run described by :func:`sdm.exporting.virtual.describe` (from the catalog), then written
by :mod:`sdm.exporting.references` or :mod:`sdm.exporting.icechunk` beside the output and
renamed to it at the end (``docs/references.md``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from importlib.util import find_spec

from ..errors import InvalidArgumentError
from .base import beside
from .references import PARQUET_SUFFIXES, ReferenceSink
from .virtual import Sink, describe, root_of

if TYPE_CHECKING:
    from ..catalog import GroupRecord, RunRecord
    from .reports import ExportReport

__all__ = ["check_options", "export_virtual"]


def check_options(fmt: str, compression: Any, root_url: str | None, out: Any) -> None:
    """Refuse what a references or Icechunk export cannot do, before anything is read.

    Raises
    ------
    InvalidArgumentError
        A *compression*, a bad *root_url*, or a package the format needs that is not installed.
    """
    if compression is not None:
        raise InvalidArgumentError(f"compression does not apply to {fmt}: its chunks are SDM's own, referenced as "
                                   "stored (a dataset copied with --materialize is compressed with zstd)")
    root_of(root_url, "/")
    needs = ["zarr"] + (["icechunk"] if fmt == "icechunk" else []) + (
        ["pandas", "fastparquet"] if fmt == "references" and Path(out).suffix.lower() in PARQUET_SUFFIXES else [])
    missing = [n for n in needs if find_spec(n) is None]
    if missing:
        raise InvalidArgumentError(f"--format {fmt} needs {', '.join(missing)}: pip install 'sdm[references]'")


def _sink(fmt: str, out: Any) -> Sink:
    """The writer of *fmt* (one of :data:`sdm.exporting.VIRTUAL_FORMATS`)."""
    if fmt == "icechunk":
        from .icechunk import IcechunkSink

        return IcechunkSink()
    return ReferenceSink(parquet=Path(out).suffix.lower() in PARQUET_SUFFIXES)


def export_virtual(fmt: str, rec: RunRecord, url: str, root: Any, target: Path,
                   plan: Sequence[tuple[GroupRecord, Sequence[Any], list[int]]], *, flat: bool, overwrite: bool,
                   verify: bool, root_url: str | None, materialize: bool,
                   progress: Callable[[int, int], None] | None) -> ExportReport:
    """:func:`sdm.exporting.export` to references or Icechunk: the run described (:func:`describe`), then written
    beside *target* and renamed to it (nothing is left after an error).

    A run being written is exported up to the steps committed now (a note says so), or refused by a format that
    pins its files as they are (Icechunk).

    Raises
    ------
    RunStateError
        Icechunk, and a run being written.
    InvalidArgumentError, IntegrityError, StorageError
        As :func:`describe`; and an existing *target* without *overwrite*.
    """
    import time

    from ..catalog import Catalog
    from ..maintenance import current_state
    from ..session import open as open_session
    from .reports import ExportReport

    sink = _sink(fmt, target)
    t0 = time.perf_counter()
    cat = Catalog(url, create=False)
    try:
        state = current_state(cat, rec)
    finally:
        cat.close()
    if state == "open":
        sink.refuse_open(rec.id)
    kwargs = {"root": root} if root is not None else {}
    with open_session(rec.application, "r", catalog=url, run=rec.id, **kwargs) as s:
        d = describe(s, rec, plan, flat=flat, materialize=materialize, verify=verify, progress=progress)
        if state == "open":
            last = max((max(i.steps) for _, items, _ in plan for i in items if i.steps), default=None)
            d.notes.append(f"run {rec.id} is being written: exported up to its last committed step ({last}); the "
                           "steps it commits later are not referenced")
        base = root_of(root_url, s.root)
        with beside(target, overwrite) as tmp:
            notes = sink.write(tmp, d, base, rec)
    arrays = sum(1 for a in d.arrays if not a.coordinate)
    return ExportReport(rec.id, fmt, str(target), [g.name for g, _, _ in plan], arrays, d.steps, d.nbytes,
                        time.perf_counter() - t0, [*d.notes, *notes])
