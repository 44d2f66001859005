"""``sdm verify``, ``sdm gc`` and ``sdm rebuild``: check a catalog and its runs' bytes, reclaim
unreferenced space, make a catalog again from the runs' meta-files."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer

from .main import CatalogOpt, JsonOpt, _console, _emit_json, _handles_errors, _open, _row, _size, _table, steps_text

__all__ = ["register"]

RunsArg = Annotated[list[int] | None, typer.Argument(metavar="[RUN]...", help="Run ids (see `sdm ls APP`).")]


class _Bar:
    """A progress bar on stderr for one command, shown from its start (a no-op off a terminal).

    Only stderr is drawn on, so ``--json`` output on stdout stays clean; the bar is
    removed when the command ends.
    """

    def __init__(self) -> None:
        self._bar: Any = None
        self._task: Any = None

    def start(self, what: str) -> None:
        """Draw the bar (an indeterminate one until the amount of work is known)."""
        if not sys.stderr.isatty():
            return
        from rich.console import Console
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn

        self._bar = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TimeElapsedColumn(),
                             transient=True, console=Console(file=sys.stderr))
        self._bar.start()
        self._task = self._bar.add_task(what, total=None)

    def stage(self, what: str) -> None:
        """A new step of the command: its description, the bar back to indeterminate."""
        if self._bar is not None:
            self._bar.reset(self._task, description=what, total=None)

    def update(self, done: int, total: int) -> None:
        """*done* bytes of *total* (the ``progress`` callback of :mod:`sdm.maintenance`)."""
        if self._bar is not None:
            self._bar.update(self._task, completed=done, total=total)

    @property
    def callback(self) -> Callable[[int, int], None] | None:
        """:meth:`update` when a bar is drawn, else None (the work then skips reporting)."""
        return self.update if self._bar is not None else None

    def stop(self) -> None:
        """Remove the bar."""
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


@contextmanager
def _progress(what: str) -> Iterator[_Bar]:
    """A :class:`_Bar` started now (before the catalog opens) and removed at the end."""
    bar = _Bar()
    bar.start(what)
    try:
        yield bar
    finally:
        bar.stop()


def _verify(
    runs: RunsArg = None,
    catalog: CatalogOpt = None,
    no_checksums: Annotated[bool, typer.Option("--no-checksums", help="Check files and lengths only.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Check runs (every row: file, length, checksum; unreferenced bytes) or, without RUN, the catalog.

    Without RUN, runs the database engine's integrity check on the catalog (SQLite's
    integrity and foreign-key checks; the foreign keys on PostgreSQL) and its schema
    revision. Exit status 1 when a row or the catalog is damaged.
    """
    from .. import maintenance

    out: dict[str, Any] = {}
    reports = []
    problems: list[str] | None = None
    with _progress("open the catalog") as bar, _open(catalog) as cat:  # printing waits for the bar to go
        if not runs:
            bar.stage("integrity check of the catalog")
            problems = cat.integrity_check()
            out = {"catalog": cat.url, "problems": problems}
        for run in runs or []:
            bar.stage(f"verify run {run}")
            reports.append(maintenance.verify_run(cat, run, checksums=not no_checksums, progress=bar.callback))
    bad = bool(problems) or any(not r.ok for r in reports)
    if problems is not None and not as_json:
        for p in problems:
            _console().print(f"catalog damaged: {p}")
        if not problems:
            _console().print("catalog ok: integrity check passed, schema revision current")
    if as_json:
        if reports:
            out["runs"] = [{
                "run": r.run_id, "state": r.state, "rows": r.rows, "checksums_checked": r.checksums_checked,
                "bytes_checked": r.bytes_checked, "ok": r.ok,
                "problems": [vars(p) for p in r.problems],
                "unreferenced": [vars(u) for u in r.unreferenced], "unreferenced_bytes": r.unreferenced_bytes,
                "archived_rows": r.archived_rows, "foreign": r.foreign,
                "reserved": [vars(u) for u in r.reserved], "reserved_bytes": r.reserved_bytes,
            } for r in reports]
        _emit_json(out)
    else:
        for r in reports:
            verdict = "ok" if r.ok else f"{len(r.problems)} damaged rows" + (
                f" ({len(r.outside)} naming files outside the run)" if r.outside else "") + (
                f", {len(r.foreign)} foreign entries" if r.foreign else "")
            _console().print(
                f"run {r.run_id} ({r.state}): {r.rows} rows, {r.checksums_checked} checksums over "
                f"{_size(r.bytes_checked)}: {verdict}; {_size(r.unreferenced_bytes)} unreferenced in "
                f"{len(r.unreferenced)} places" + (f" (`sdm gc {r.run_id}` reclaims them)" if r.unreferenced else "")
                + (f"; {r.archived_rows} rows on the archive tier only (`sdm stage {r.run_id}` brings them back)"
                   if r.archived_rows else "")
                + (f"; {_size(r.reserved_bytes)} reserved past the ends of {len(r.reserved)} files and never written "
                   f"(`sdm gc {r.run_id}` gives it back)" if r.reserved else "")
            )
            if r.problems:
                table = _table("damaged rows", "group", "dataset", "step", "file", "problem")
                for row in r.problems:
                    _row(table, row.group, row.dataset, row.step, row.path, row.problem)
                _console().print(table)
            for entry in r.foreign:
                _console().print(f"  foreign: {entry}")
    if bad:
        raise typer.Exit(1)


def _gc(runs: Annotated[list[int], typer.Argument(metavar="RUN...", help="Run ids.")],
        catalog: CatalogOpt = None, as_json: JsonOpt = False) -> None:
    """Reclaim bytes no committed row refers to (superseded versions, crash leftovers).

    Refuses a run that a live session is writing.
    """
    from .. import maintenance

    reports = []
    with _progress("open the catalog") as bar, _open(catalog) as cat:
        for run in runs:
            bar.stage(f"gc run {run}")
            reports.append(maintenance.gc_run(cat, run, progress=bar.callback))
    if as_json:
        _emit_json({"runs": [vars(r) for r in reports]})
        return
    for r in reports:
        _console().print(
            f"run {r.run_id}: reclaimed {_size(r.bytes_reclaimed)} ({r.files_removed} files removed, "
            f"{r.ranges_punched} ranges freed, {r.tails_cut} tails cut)"
            + (f"; gave back {_size(r.reserved_given_back)} reserved and never written" if r.reserved_given_back else "")
        )
        for line in r.not_reclaimed:
            _console().print(f"  not reclaimed: {line}")


def _rebuild(root: Annotated[str, typer.Argument(metavar="ROOT", help="A data root, or one run directory.")],
             catalog: CatalogOpt = None, as_json: JsonOpt = False) -> None:
    """Rebuild a catalog from the runs' meta-files (the data alone), adding the runs it lacks.

    The catalog (default: ``$SDM_CATALOG`` or ROOT's ``catalog.db``) is created if it is
    a new SQLite file; runs it already holds are left as they are.
    """
    from pathlib import Path

    from .. import config
    from ..catalog.rebuild import rebuild
    from ..storage.runs import MARKER

    base = Path(root).resolve()
    if (base / MARKER).is_file():  # one run directory: <data root>/<application>/<run>
        base = base.parents[1]
    url = catalog or config.default_catalog_url(base)
    with _progress("rebuild") as bar:
        report = rebuild(root, url, progress=bar.callback)
    if as_json:
        _emit_json(vars(report))
        return
    _console().print(f"{len(report.added)} runs rebuilt ({report.writes} writes), "
                     f"{len(report.present)} already in the catalog")
    for note in report.notes:
        _console().print(f"  note: {note}")


def _describe(file: Annotated[str, typer.Argument(metavar="FILE", help="A level-2 or level-3 data file.")],
              verify: Annotated[bool, typer.Option("--verify", help="Check every step's bytes against its checksum.")]
              = False, as_json: JsonOpt = False) -> None:
    """Describe a data file from its own trailer (no catalog needed): its datasets and steps."""
    from ..dtypes import from_text
    from ..storage.trailer import read_step, read_trailer

    index = read_trailer(file)
    if index.get("superfile"):
        _describe_superfile(file, index, verify, as_json)
        return
    if verify:
        for w in index["writes"]:
            read_step(file, index, w, verify=True)
    if as_json:
        _emit_json(index)
        return
    out = _console()
    out.print(f"{file}: application {index['application']!r}, run {index['run']}, group {index['group']!r} "
              f"(level {index['level']}, {index['kind']}), closed {index['closed_at']}, {len(index['writes'])} writes"
              + (", every checksum verified" if verify else ""))
    table = _table(None, "dataset", "dtype", "shape", "order", "steps")
    for name, d in index["datasets"].items():
        steps = [w["step"] for w in index["writes"] if w["dataset"] == name]
        _row(table, name, d["dtype"], "x".join(map(str, d["shape"])) or "scalar", d["order"], steps_text(sorted(steps)))
    out.print(table)
    raw = [w for w in index["writes"] if "codec" not in w]  # a compressed step's chunks need its codec
    if len(raw) < len(index["writes"]):
        out.print(f"{len(index['writes']) - len(raw)} steps are compressed: `--json` lists each one's codec and "
                  "chunks (offset, stored bytes, checksum, box); sdm.storage.trailer.read_array decodes them")
    if raw:
        w = raw[0]
        d = index["datasets"][w["dataset"]]
        count = w["nbytes"] // from_text(d["dtype"]).itemsize
        out.print(f"without SDM: numpy.fromfile({file!r}, dtype={d['dtype']!r}, count={count}, offset={w['offset']})"
                  f".reshape({tuple(d['shape'])}, order={d['order']!r}) is step {w['step']} of {w['dataset']!r}; "
                  "`--json` lists every offset")


def _describe_superfile(file: str, index: dict[str, Any], verify: bool, as_json: bool) -> None:
    """``sdm describe`` of a superfile (``sdm migrate --pack-below``): its members, with ``--verify`` their digests."""
    import hashlib

    from ..errors import IntegrityError, StorageError

    if verify:
        for m in index["members"]:
            h = hashlib.sha256()
            try:
                with open(file, "rb") as f:
                    f.seek(m["offset"])
                    for done in range(0, m["size"], 8 << 20):  # the trailer's checks keep the range in the file
                        h.update(f.read(min(8 << 20, m["size"] - done)))
            except OSError as exc:
                raise StorageError(f"cannot read {file}: {exc.strerror}", exc.errno) from None
            if f"sha256:{h.hexdigest()}" != m["checksum"]:
                raise IntegrityError(f"member {m['path']} of superfile {file} (bytes {m['offset']}.."
                                     f"{m['offset'] + m['size']}) does not match its digest {m['checksum']}")
    if as_json:
        _emit_json(index)
        return
    out = _console()
    out.print(f"{file}: superfile of run {index['run']}, {len(index['members'])} files packed"
              + (", every digest verified" if verify else ""))
    table = _table(None, "file", "offset", "size")
    for m in index["members"]:
        _row(table, m["path"], str(m["offset"]), _size(m["size"]))
    out.print(table)


def register(app: typer.Typer) -> None:
    """Add ``verify``, ``gc`` and ``rebuild`` to the ``sdm`` command."""
    app.command("verify")(_handles_errors(_verify))
    app.command("gc")(_handles_errors(_gc))
    app.command("rebuild")(_handles_errors(_rebuild))
    app.command("describe")(_handles_errors(_describe))
