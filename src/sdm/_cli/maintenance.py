"""``sdm verify`` and ``sdm gc``: check a catalog and its runs' bytes, reclaim unreferenced space."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

from .. import maintenance
from .main import CatalogOpt, JsonOpt, _console, _emit_json, _handles_errors, _open, _size, _table, _row

__all__ = ["register"]

RunsArg = Annotated[list[int] | None, typer.Argument(metavar="[RUN]...", help="Run ids (see `sdm ls APP`).")]


@contextmanager
def _progress(what: str, quiet: bool) -> Iterator[Callable[[int, int], None] | None]:
    """A progress bar on stderr (bytes done of all), from the first second of long work."""
    if quiet or not sys.stderr.isatty():
        yield None
        return
    with Progress(TextColumn(what), BarColumn(), DownloadColumn(), TimeRemainingColumn(),
                  transient=True, console=None) as bar:
        task = bar.add_task(what, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


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
    out: dict[str, Any] = {}
    bad = False
    with _open(catalog) as cat:
        if not runs:
            problems = cat.integrity_check()
            bad = bool(problems)
            out = {"catalog": cat.url, "problems": problems}
            if not as_json:
                if problems:
                    for p in problems:
                        _console().print(f"catalog damaged: {p}")
                else:
                    _console().print("catalog ok: integrity check passed, schema revision current")
        reports = []
        for run in runs or []:
            with _progress(f"verify run {run}", as_json) as progress:
                reports.append(maintenance.verify_run(cat, run, checksums=not no_checksums, progress=progress))
    for r in reports:
        bad = bad or not r.ok
    if as_json:
        if reports:
            out["runs"] = [{
                "run": r.run_id, "state": r.state, "rows": r.rows, "checksums_checked": r.checksums_checked,
                "bytes_checked": r.bytes_checked, "ok": r.ok,
                "problems": [vars(p) for p in r.problems],
                "unreferenced": [vars(u) for u in r.unreferenced], "unreferenced_bytes": r.unreferenced_bytes,
            } for r in reports]
        _emit_json(out)
    else:
        for r in reports:
            verdict = "ok" if r.ok else f"{len(r.problems)} damaged rows"
            _console().print(
                f"run {r.run_id} ({r.state}): {r.rows} rows, {r.checksums_checked} checksums over "
                f"{_size(r.bytes_checked)}: {verdict}; {_size(r.unreferenced_bytes)} unreferenced in "
                f"{len(r.unreferenced)} places" + (f" (`sdm gc {r.run_id}` reclaims them)" if r.unreferenced else "")
            )
            if r.problems:
                table = _table("damaged rows", "group", "dataset", "step", "file", "problem")
                for p in r.problems:
                    _row(table, p.group, p.dataset, p.step, p.path, p.problem)
                _console().print(table)
    if bad:
        raise typer.Exit(1)


def _gc(runs: Annotated[list[int], typer.Argument(metavar="RUN...", help="Run ids.")],
        catalog: CatalogOpt = None, as_json: JsonOpt = False) -> None:
    """Reclaim bytes no committed row refers to (superseded versions, crash leftovers).

    Refuses a run that a live session is writing.
    """
    reports = []
    with _open(catalog) as cat:
        for run in runs:
            with _progress(f"gc run {run}", as_json) as progress:
                reports.append(maintenance.gc_run(cat, run, progress=progress))
    if as_json:
        _emit_json({"runs": [vars(r) for r in reports]})
        return
    for r in reports:
        _console().print(
            f"run {r.run_id}: reclaimed {_size(r.bytes_reclaimed)} ({r.files_removed} files removed, "
            f"{r.ranges_punched} ranges freed, {r.tails_cut} tails cut)"
        )
        for line in r.not_reclaimed:
            _console().print(f"  not reclaimed: {line}")


def register(app: typer.Typer) -> None:
    """Add ``verify`` and ``gc`` to the ``sdm`` command."""
    app.command("verify")(_handles_errors(_verify))
    app.command("gc")(_handles_errors(_gc))
