"""The ``sdm`` command: browse and search a catalog without MPI.

``sdm ls [APP]``, ``sdm show RUN`` and ``sdm find key=value ...`` read the catalog named
by ``--catalog`` (default ``$SDM_CATALOG`` or the SQLite catalog in ``$SDM_ROOT``);
``--json`` prints machine-readable JSON instead of tables.  An error prints one line
``error: <message>`` on stderr, never a traceback, and exits with status 1; a usage
error (unknown command or option, a value of the wrong form) exits with status 2, and so
does a condition that does not read (``sdm find 'nx>>32'``), shown with a caret under
the character where reading stopped.

Start-up stays short: rich (the tables) loads when a command prints one, the catalog
(SQLAlchemy) when a command opens it (``sdm ls`` of an SQLite catalog reads it with
:mod:`sqlite3` alone, see :mod:`sdm.catalog.listing`), never for ``--help``, and no
catalog command imports mpi4py or initializes MPI.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, time, timezone
from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from .. import config
from ..urls import mask_urls
from ..errors import ApplicationNotFoundError, CatalogUnavailableError, QuerySyntaxError, SDMError
from ..suggest import closest

if TYPE_CHECKING:  # the catalog (SQLAlchemy) loads when a command opens it, rich when one prints: never for --help
    from rich.console import Console
    from rich.table import Table

    from ..catalog import Catalog, RunRecord

__all__ = ["app", "main", "steps_text", "steps_summary"]

app = typer.Typer(
    name="sdm",
    help="Browse and search the SDM catalog: runs, groups, datasets, files and writes.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help and usage errors: no rich to import, texts as written
)

F = TypeVar("F", bound=Callable[..., Any])

CatalogOpt = Annotated[
    str | None,
    typer.Option(
        "--catalog",
        "-c",
        metavar="URL",
        help="Catalog URL, or the path of an SQLite catalog file (default: $SDM_CATALOG, "
             "else sqlite:///$SDM_ROOT/catalog.db).",
        show_default=False,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]


# ---------------------------------------------------------------------- helpers
def _console(width: int | None = None) -> Console:
    """A console on the current stdout, *width* columns; by default the terminal's, or wide when stdout is not
    a terminal (pipes, files)."""
    from rich.console import Console

    if width is None and not (sys.stdout.isatty() or os.environ.get("COLUMNS")):
        width = 200
    return Console(file=sys.stdout, width=width, highlight=False)


def _error_line(message: str) -> None:
    """``error: <message>`` on stderr, on one line."""
    from rich.console import Console
    from rich.text import Text

    text = " ".join(mask_urls(str(message)).split()) or "unknown error"
    err = Console(file=sys.stderr, highlight=False, soft_wrap=True)
    err.print(Text("error: ", style="bold red") + Text(text, style="red"))


def caret_lines(text: str, position: int, width: int = 76) -> list[str]:
    """*text* and a caret under its character *position* (``len(text)``: just past its end), indented by two
    spaces: a window of about *width* characters around the position when the text is longer; characters
    that print as nothing or as more than one column are shown as ``?``, so the caret stays under its place."""
    shown = "".join(c if c.isprintable() and ord(c) < 0x1100 else "?" for c in text)
    start = max(0, min(position - width // 2, len(shown) - width))
    window = shown[start:start + width]
    lead = "..." if start > 0 else ""
    tail = "..." if start + width < len(shown) else ""
    return [f"  {lead}{window}{tail}", "  " + " " * (len(lead) + position - start) + "^"]


def _syntax_error(exc: QuerySyntaxError) -> None:
    """A condition that does not read: the one-line error, then the condition with a caret under the place."""
    _error_line(str(exc))
    sys.stderr.write("\n".join(caret_lines(exc.text, exc.position)) + "\n")


def _handles_errors(fn: F) -> F:
    """Turn any error into one line ``error: <message>`` on stderr and exit status 1.

    Usage errors and explicit exits pass through; an exception that is not an
    :class:`SDMError` is a bug and says so, still on one line and without a traceback.
    URL passwords are masked in either message.
    """
    if getattr(fn, "_sdm_handles_errors", False):
        return fn

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (typer.Exit, typer.Abort, typer.TyperException):  # exits and usage errors (status 2)
            raise
        except QuerySyntaxError as exc:  # a usage error too, pointed at
            _syntax_error(exc)
            raise typer.Exit(2) from None
        except SDMError as exc:
            _error_line(str(exc))
            raise typer.Exit(1) from None
        except Exception as exc:  # noqa: BLE001 - never a traceback
            _error_line(f"internal error ({type(exc).__name__}: {exc}); this is a bug, please report it")
            raise typer.Exit(1) from None

    wrapper._sdm_handles_errors = True  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]


RUN_ID_MAX = 2**63 - 1  # run ids are signed 64-bit catalog keys


def _catalog_url(url: str | None) -> str:
    """The URL of the catalog to read: *url*, else the default; a missing SQLite file is refused (never made)."""
    url = config.catalog_url(url) if url else config.default_catalog_url()
    if url.startswith("sqlite:///"):
        path = url[len("sqlite:///"):]
        if path and path != ":memory:" and not Path(path).is_file():
            raise CatalogUnavailableError(
                f"no catalog at {path}; pass --catalog URL or set SDM_CATALOG (or SDM_ROOT) "
                "to where SDM wrote its data"
            )
    return url


@contextmanager
def _open(url: str | None) -> Iterator[Catalog]:
    """Open the catalog read-only (never creates one), closing it afterwards."""
    from ..catalog import Catalog

    cat = Catalog(_catalog_url(url), create=False)
    try:
        yield cat
    finally:
        cat.close()


@contextmanager
def _listing(url: str | None) -> Iterator[Any]:
    """What ``sdm ls`` reads: an SQLite catalog at the current revision through sqlite3 alone (no SQLAlchemy to
    import: :class:`sdm.catalog.listing.Listing`), any other catalog opened in full."""
    from ..catalog.listing import Listing

    url = _catalog_url(url)
    lean = Listing.open(url)
    if lean is None:
        with _open(url) as cat:
            yield cat
        return
    try:
        yield lean
    finally:
        lean.close()


def steps_text(steps: Sequence[int]) -> str:
    """Compact form of sorted time steps: ``0-48/6``, ``0-3``, ``0-4/2,7,9``, ``-`` if none.

    Runs of three or more equally spaced steps become ``first-last/stride`` (``/1``
    omitted); other steps are listed one by one.
    """
    s = sorted(set(int(x) for x in steps))
    parts: list[str] = []
    i = 0
    while i < len(s):
        j = i
        if i + 1 < len(s):
            stride = s[i + 1] - s[i]
            while j + 1 < len(s) and s[j + 1] - s[j] == stride:
                j += 1
        if j - i >= 2:
            parts.append(f"{s[i]}-{s[j]}" + ("" if stride == 1 else f"/{stride}"))
            i = j + 1
        else:
            parts.append(str(s[i]))
            i += 1
    return ",".join(parts) or "-"


def _size(nbytes: int) -> str:
    """Human-readable byte count (binary units)."""
    value = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{nbytes} B"  # pragma: no cover


def _date(value: datetime | None) -> str:
    return "-" if value is None else value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _attrs(attrs: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in attrs.items()) or "-"


def _shape(shape: Sequence[int]) -> str:
    return "x".join(str(n) for n in shape) or "scalar"


def _dist(dist: dict[str, Any] | None) -> str:
    """``block grid=2x2 ghosts=1`` from a stored distribution (``-`` when none)."""
    if not dist:
        return "-"
    words = [str(dist.get("kind", "?"))]
    for key, val in dist.items():
        if key == "kind" or val in (None, 0, []) or isinstance(val, list) and not any(val):
            continue  # nothing said: no ghosts, no offsets
        if isinstance(val, list) and all(isinstance(v, int) for v in val):
            val = "x".join(str(v) for v in val)
        words.append(f"{key}={val}")
    return " ".join(words)


def _table(title: str | None, *columns: str) -> Table:
    from rich.table import Table

    table = Table(title=title, title_justify="left", title_style="bold")
    for col in columns:
        right = col in {"id", "run", "runs", "ranks", "level", "datasets", "writes", "size", "bytes",
                        "step", "offset", "seconds"}
        table.add_column(col, justify="right" if right else "left", overflow="fold")
    return table


def _row(table: Table, *cells: Any) -> None:
    from rich.text import Text

    table.add_row(*(Text(str(c)) for c in cells))  # Text: user strings are never markup


def _dim(text: str, style: str = "dim") -> Any:
    """A line of text in *style*, never read as markup."""
    from rich.text import Text

    return Text(text, style=style)


def _emit_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(timezone.utc).isoformat()


def _run_json(rec: RunRecord) -> dict[str, Any]:
    return {
        "id": rec.id,
        "application": rec.application,
        "created_at": _iso(rec.created_at),
        "nprocs": rec.nprocs,
        "problem_size": rec.problem_size,
        "attributes": rec.attributes,
        "root": rec.root,
        "dir": rec.dir,
        "state": rec.state,
    }


def _with_current_state(cat: Catalog, rec: RunRecord) -> RunRecord:
    """*rec* with its state as it is now (an ``open`` run nobody holds is ``interrupted``)."""
    if rec.state != "open":
        return rec  # only an open run may have lost its writer
    from dataclasses import replace

    from ..maintenance import current_state

    state = current_state(cat, rec)
    return rec if state == rec.state else replace(rec, state=state)


def _dataset_json(group: str, d: Any) -> dict[str, Any]:
    out = {
        "group": group,
        "name": d.name,
        "dtype": d.dtype,
        "shape": list(d.shape),
        "order": d.order,
        "distribution": d.distribution,
        "attributes": d.attributes,
        "nsteps": d.nsteps,
        "first_step": d.first_step,
        "last_step": d.last_step,
        "compression": d.compression,
    }
    if d.steps is not None:  # read (sdm show, sdm find --steps)
        out.update(steps=list(d.steps), steps_range=steps_text(d.steps))
    return out


def steps_summary(d: Any) -> str:
    """A dataset's steps for a table: compact when they were read, else ``first-last (n steps)``."""
    if d.steps is not None:
        return steps_text(d.steps)
    if not d.nsteps:
        return "-"
    if d.nsteps == 1:
        return str(d.first_step)
    if d.nsteps == d.last_step - d.first_step + 1:
        return f"{d.first_step}-{d.last_step}"
    return f"{d.first_step}..{d.last_step} ({d.nsteps} steps)"


def _parse_date(text: str | None, *, end: bool) -> datetime | None:
    """ISO date or date-time; a bare date as ``--until`` means the end of that day."""
    if text is None:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise typer.BadParameter(
            f"{text!r} is not an ISO date; write 2024-05-31 or 2024-05-31T14:00:00"
        ) from None
    if end and len(text) == 10:
        value = datetime.combine(value.date(), time.max)
    return value


def _version(value: bool) -> None:
    if value:
        from .. import __version__

        typer.echo(f"sdm {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    """Browse and search the SDM catalog: runs, groups, datasets, files and writes."""


# --------------------------------------------------------------------- commands
@app.command("ls")
@_handles_errors
def ls(
    application: Annotated[str | None, typer.Argument(metavar="[APP]", help="List the runs of this application.")] = None,
    limit: Annotated[int, typer.Option("--limit", "-n", metavar="N", min=1,
                                       help="Runs per page (newest first).")] = 20,
    offset: Annotated[int, typer.Option("--offset", metavar="K", min=0, help="Skip the K newest runs.")] = 0,
    catalog: CatalogOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List applications (run counts, last run), or the runs of APP a page at a time, newest first."""
    with _listing(catalog) as cat:
        if application is None:
            apps = cat.applications()
            if as_json:
                _emit_json({"applications": [{**a, "last_run": _iso(a["last_run"])} for a in apps]})
                return
            table = _table(None, "application", "runs", "last run")
            for a in apps:
                _row(table, a["name"], a["runs"], _date(a["last_run"]))
            _console().print(table)
            return
        try:
            runs, totals, total = cat.list_runs(application, limit=limit, offset=offset)
        except ApplicationNotFoundError:
            known = [a["name"] for a in cat.applications()]
            raise ApplicationNotFoundError(
                f"no application {application!r} in catalog {cat.url!r}; `sdm ls` lists the applications"
                f"{closest(application, known)}"
            ) from None
    if any(r.state == "open" for r in runs):  # its writer may be gone: recorded through the full catalog
        with _open(catalog) as full:
            runs = [_with_current_state(full, r) for r in runs]
    more = max(total - offset - len(runs), 0)
    if as_json:
        _emit_json({
            "application": application, "total": total, "offset": offset, "limit": limit, "more": more,
            "runs": [{**_run_json(r), **totals[r.id]} for r in runs],
        })
        return
    table = _table(f"runs of {application}", "id", "date", "state", "ranks", "problem size", "attributes", "datasets",
                   "writes", "bytes")
    for rec in runs:
        size = "-" if rec.problem_size is None else json.dumps(rec.problem_size)
        t = totals[rec.id]
        _row(table, rec.id, _date(rec.created_at), rec.state, rec.nprocs, size, _attrs(rec.attributes), t["datasets"],
             t["writes"], _size(t["bytes"]))
    con = _console()
    con.print(table)
    shown = f"runs {offset + 1}-{offset + len(runs)} of {total}" if runs else f"no runs past {offset} of {total}"
    hint = f"; {more} more: sdm ls {application} --offset {offset + len(runs)}" if more else ""
    con.print(_dim(shown + hint))


RunArg = Annotated[list[str] | None, typer.Argument(
    metavar="RUN|latest|KEY=VALUE...",
    help="A run id (see `sdm ls APP`); or attribute conditions (= != < <= > >=) that exactly one run of --app "
         "must match, with `latest` for the newest of those that do.", show_default=False)]
ChooseAppOpt = Annotated[str | None, typer.Option("--app", metavar="APP", help="Choose the run among APP's.")]
#: What to do when several runs match, said on the command line
CLI_ADVICE = "name one by its id, or add `latest` for the newest"


def run_words(items: Sequence[str] | None, application: str | None) -> tuple[int | str | None, list[Any]]:
    """RUN|latest|KEY=VALUE... as ``(run, conditions)`` for :func:`choose_run` (checked before the catalog opens).

    Raises
    ------
    typer.BadParameter
        Words that are neither a run id, ``latest`` nor conditions, an id with conditions, or nothing to go by.
    InvalidArgumentError
        A condition that does not read.
    """
    from ..catalog import parse_condition

    items = list(items or ())
    ids = [w for w in items if w.isdigit()]
    latest = [w for w in items if w == "latest"]
    words = [w for w in items if w not in ids and w not in latest]
    for w in words:
        if not any(op in w for op in "=<>"):
            raise typer.BadParameter(f"{w!r} is neither a run id, `latest` nor a KEY=VALUE condition",
                                     param_hint="RUN")
    if len(ids) > 1 or ids and (latest or words) or len(latest) > 1:
        raise typer.BadParameter("give one run id, or conditions (with `latest` for the newest), not both",
                                 param_hint="RUN")
    if not items and application is None:
        raise typer.BadParameter("give a run id, or --app APP and/or KEY=VALUE conditions", param_hint="RUN")
    run: int | str | None = None
    if ids:
        run = int(ids[0])
        if not 1 <= run <= RUN_ID_MAX:
            raise typer.BadParameter(f"a run id is 1 to {RUN_ID_MAX}, got {ids[0]}", param_hint="RUN")
    elif latest:
        run = "latest"
    return run, [parse_condition(w) for w in words]


def choose_run(cat: Catalog, words: tuple[int | str | None, list[Any]], application: str | None) -> int:
    """The id of the one run that :func:`run_words` and --app name: the rule of ``sdm.open``
    (:meth:`~sdm.catalog.Catalog.select_run`; several matches raise :class:`~sdm.errors.AmbiguousRunError`)."""
    run, conds = words
    return cat.select_run(application, run=run, conditions=conds, advice=CLI_ADVICE).id


@app.command("show")
@_handles_errors
def show(
    which: RunArg = None,
    application: ChooseAppOpt = None,
    writes: Annotated[bool, typer.Option("--writes", help="Also list every write, one line each (at most 100 "
                                         "columns: the reason cut short; --wide or --json for everything).")] = False,
    wide: Annotated[bool, typer.Option("--wide", help="Every column in full, nothing cut (with --writes: paths, "
                                       "offsets, checksums, whole reasons and each step's extents).")] = False,
    catalog: CatalogOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show a run: its groups, datasets, infos, files (and writes). RUN is an id, or conditions one run must match."""
    from ..catalog import irregular as irregular_records
    from .infos import infos_json

    words = run_words(which, application)
    with _open(catalog) as cat:
        run = choose_run(cat, words, application)
        rec = _with_current_state(cat, cat.run(run))
        infos = cat.infos(run, everywhere=True)
        files = cat.files(run)
        packed = any(d.compression for g in rec.groups for d in g.datasets)
        wrows = cat.writes(run) if writes or packed else []
        imported = irregular_records.imports(cat, run_id=run)
    if as_json:
        out: dict[str, Any] = {
            "run": _run_json(rec),
            "groups": [
                {
                    "name": g.name,
                    "level": g.level,
                    "kind": g.kind,
                    "steps_per_file": g.steps_per_file,
                    "truncated_after": g.truncated_after,
                    "archive": g.archive,
                    "subfiles": "auto" if g.subfiles == 0 else g.subfiles,
                    "attributes": g.attributes,
                    "datasets": [_dataset_json(g.name, d) for d in g.datasets],
                }
                for g in rec.groups
            ],
            "infos": infos_json(infos),
            "files": [{"path": f.path, "level": f.level, "writes": f.nwrites, "bytes": f.nbytes} for f in files],
            "imports": [_import_json(i) for i in imported],
        }
        if packed:
            out["compression"] = compression_rows(wrows)
        if writes:
            out["writes"] = [
                {
                    "group": g,
                    "dataset": d,
                    "step": w.step,
                    "path": w.path,
                    "offset": w.offset,
                    "nbytes": w.nbytes,
                    "checksum": w.checksum,
                    "checksum_algo": w.checksum_algo,
                    "method": w.method,
                    "reason": w.reason,
                    "seconds": w.seconds,
                    "nprocs": w.nprocs,
                    "written_at": _iso(w.written_at),
                    **({"extents": [{"path": e.path, "offset": e.offset, "nbytes": e.nbytes, "start": e.start,
                                     "checksum": e.checksum, "checksum_algo": e.checksum_algo,
                                     **({"box": [list(e.box[0]), list(e.box[1])]} if e.box is not None else {})}
                                    for e in w.extents]}
                       if w.extents else {}),
                    **({"codec": w.codec, "stored_nbytes": w.stored_nbytes, "ratio": w.ratio,
                        "max_error": w.max_error} if w.codec is not None else {}),
                }
                for g, d, w in wrows
            ]
        _emit_json(out)
        return
    from .show import print_run

    print_run(rec, files=files, infos=infos, imported=imported, wrows=wrows if writes else None,
              compressed=compression_rows(wrows) if packed else None, wide=wide)


def compression_rows(wrows: Sequence[tuple[str, str, Any]]) -> list[dict[str, Any]]:
    """What compression achieved per compressed dataset of a run's writes: steps, array and stored bytes, their
    ratio and the largest error a lossy codec measured at write time."""
    acc: dict[tuple[str, str], dict[str, Any]] = {}
    for gname, dname, w in wrows:
        if w.codec is None:
            continue
        c = acc.setdefault((gname, dname), {"dataset": f"{gname}/{dname}", "codec": w.codec, "steps": 0,
                                            "nbytes": 0, "stored_nbytes": 0, "max_error": None})
        c["steps"] += 1
        c["nbytes"] += int(w.nbytes)
        c["stored_nbytes"] += int(w.stored_nbytes or 0)
        if w.max_error is not None:
            c["max_error"] = max(c["max_error"] or 0.0, float(w.max_error))
    for c in acc.values():
        c["ratio"] = c["nbytes"] / c["stored_nbytes"] if c["stored_nbytes"] else None
    return list(acc.values())


def _import_json(i: Any) -> dict[str, Any]:
    return {
        "name": i.name, "source": i.source, "offset": i.offset, "dtype": i.dtype, "count": i.count,
        "shape": list(i.shape), "mode": i.mode, "nbytes": i.nbytes, "checksum": i.checksum,
        "seconds": i.seconds, "nprocs": i.nprocs, "imported_at": _iso(i.imported_at),
    }


@app.command("histories")
@_handles_errors
def histories(
    application: Annotated[str, typer.Argument(metavar="APP", help="Application name.")],
    problem: Annotated[str | None, typer.Option("--problem", help="Only this problem.")] = None,
    catalog: CatalogOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List the index histories of an application (partitions kept for reuse) and their uses."""
    from ..catalog import irregular as irregular_records

    with _open(catalog) as cat:
        found = irregular_records.histories(cat, application, problem)
        uses = {h.id: irregular_records.history_uses(cat, h.id) for h in found}
    if as_json:
        _emit_json([
            {"id": h.id, "problem": h.problem, "content_hash": h.content_hash, "nprocs": h.nprocs,
             "path": h.path, "root": h.root, "nbytes": h.nbytes, "created_at": _iso(h.created_at),
             "run": h.run_id, "uses": [{"run": u["run_id"], "used_at": _iso(u["used_at"]), "seconds": u["seconds"]}
                                      for u in uses[h.id]]}
            for h in found
        ])
        return
    table = _table(f"index histories of {application}", "id", "problem", "ranks", "inputs hash", "created",
                   "by run", "file", "size", "reused by runs")
    for h in found:
        _row(table, h.id, h.problem, h.nprocs, h.content_hash[:12], _date(h.created_at), h.run_id or "-",
             h.path, _size(h.nbytes), ", ".join(str(u["run_id"]) for u in uses[h.id]) or "-")
    _console().print(table)


@app.command("find")
@_handles_errors
def find(
    conditions: Annotated[
        list[str] | None,
        typer.Argument(metavar="[CONDITION]...", help="Attribute conditions, as many as needed, all of which must "
                       "hold: KEY=VALUE, KEY!=VALUE, KEY<VALUE, KEY<=VALUE, KEY>VALUE, KEY>=VALUE (quote each in the "
                       "shell: 'nx>=32').", show_default=False),
    ] = None,
    application: Annotated[str | None, typer.Option("--app", metavar="APP", help="Only this application.")] = None,
    since: Annotated[str | None, typer.Option("--since", metavar="DATE", help="Runs from this ISO date/time (UTC).")] = None,
    until: Annotated[str | None, typer.Option("--until", metavar="DATE", help="Runs up to this ISO date/time (UTC).")] = None,
    run: Annotated[int | None, typer.Option("--run", metavar="ID", help="Only this run.", min=1, max=RUN_ID_MAX)] = None,
    steps: Annotated[bool, typer.Option("--steps", help="Read every step of the datasets found (else count, "
                                        "first and last).")] = False,
    compression: Annotated[list[str] | None, typer.Option(
        "--compression", metavar="COND", help="Compressed datasets only, by what compression achieved over their "
        "steps: ratio, max_error, stored, nbytes, codec ('ratio>4'; repeat for more).")] = None,
    catalog: CatalogOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Find runs and datasets by attributes, application and date (runs newest first, as `sdm ls`).

    A run matches when every CONDITION holds (give as many as you need, each quoted: a bare > is the shell's
    redirection). For example:

    \b
      sdm find 'nx>=32' 'case=demo'
      sdm find --app ASTRO3D 'level=3' 'steps>6' --since 2024-05-01
    """
    from ..catalog import parse_condition

    conds = [parse_condition(c) for c in conditions or ()]
    packed = [parse_condition(c) for c in compression or ()]
    start, end = _parse_date(since, end=False), _parse_date(until, end=True)
    with _open(catalog) as cat:
        runs = cat.find(application=application, run=run, since=start, until=end, conditions=conds, steps=steps,
                        compression=packed)
    if as_json:
        _emit_json(
            {
                "conditions": [repr(c) for c in conds],
                "runs": [
                    {**_run_json(r), "datasets": [_dataset_json(g.name, d) for g in r.groups for d in g.datasets]}
                    for r in runs
                ],
            }
        )
        return
    con = _console()
    if not runs:
        con.print(_dim("no matching runs", "yellow"))
        return
    table = _table(None, "run", "application", "date", "ranks", "attributes", "dataset", "dtype", "shape", "steps")
    for r in runs:
        head = (r.id, r.application, _date(r.created_at), r.nprocs, _attrs(r.attributes))
        items = [(g, d) for g in r.groups for d in g.datasets]
        if not items:
            _row(table, *head, "-", "", "", "")
        for i, (g, d) in enumerate(items):
            cells = head if i == 0 else ("",) * len(head)
            _row(table, *cells, f"{g.name}/{d.name}", d.dtype, _shape(d.shape), steps_summary(d))
        table.add_section()
    con.print(table)


from .bench import register as _register_planner_commands  # noqa: E402 - bench, calibrate, predict

_register_planner_commands(app)

from .maintenance import register as _register_maintenance_commands  # noqa: E402 - verify, gc

_register_maintenance_commands(app)

from .tiers import register as _register_tier_commands  # noqa: E402 - migrate, stage, purge

_register_tier_commands(app)

from .export import register as _register_export_commands  # noqa: E402 - export, import

_register_export_commands(app)

from .plot import register as _register_plot_command  # noqa: E402 - plot

_register_plot_command(app)


#: The one line each command has in the listing of ``sdm --help`` (its own help says more)
SUMMARIES = {
    "ls": "List applications, or the runs of APP (newest first).",
    "show": "Show a run: groups, datasets, infos, files, writes.",
    "histories": "List an application's index histories and their uses.",
    "find": "Find runs and datasets by attributes, application, date.",
    "calibrate": "Measure the cost-model constants of DIR and store them.",
    "predict": "Predict a run's I/O time per method and level.",
    "verify": "Check runs' files against the catalog, or the catalog.",
    "gc": "Reclaim bytes no committed row refers to.",
    "rebuild": "Rebuild a catalog from the runs' meta-files.",
    "describe": "Describe a data file from its own trailer.",
    "migrate": "Copy runs to the archive tier, each copy verified.",
    "stage": "Bring runs back from the archive tier, verified.",
    "purge": "Remove runs' copies from a tier (kept on the other).",
    "import": "Import a file (--format) into a new run.",
    "plot": "Write a PNG: a slice of a step, or a point over steps.",
}


def _summarize(typer_app: typer.Typer) -> None:
    """Give every command its line of :data:`SUMMARIES` (``export``'s names every format)."""
    from .export import formats_text

    lines = {**SUMMARIES, "export": f"Export a run to {formats_text().split(' (')[0]}."}
    for info in typer_app.registered_commands:
        if info.name in lines and info.short_help is None:
            info.short_help = lines[info.name]


_summarize(app)


def _guard(typer_app: typer.Typer) -> None:
    """Every command, also those registered elsewhere, prints one-line errors and no traceback."""
    for info in typer_app.registered_commands:
        if info.callback is not None:
            info.callback = _handles_errors(info.callback)
    for group in typer_app.registered_groups:
        if group.typer_instance is not None:
            _guard(group.typer_instance)


_guard(app)


def main() -> None:
    """Entry point for ``python -m sdm`` and ``python -m sdm._cli.main``."""
    app(prog_name="sdm")


if __name__ == "__main__":
    main()
