"""``sdm migrate``, ``sdm stage`` and ``sdm purge``: a run's files between the fast tier and the archive."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from .main import CatalogOpt, JsonOpt, _console, _emit_json, _handles_errors, _size
from .maintenance import _progress

__all__ = ["register"]

RunsOpt = Annotated[list[str] | None, typer.Argument(
    metavar="[RUN|KEY=VALUE]...", help="Run ids, or attribute conditions (= != < <= > >=) selecting runs.",
    show_default=False)]
AppOpt = Annotated[str | None, typer.Option("--app", metavar="APP", help="Only runs of this application.")]
EndpointOpt = Annotated[str | None, typer.Option(
    "--endpoint", metavar="URL", help="The object store's server (default $SDM_S3_ENDPOINT or $AWS_ENDPOINT_URL).")]


def _split(items: list[str] | None) -> tuple[list[int], list[str]]:
    runs: list[int] = []
    where: list[str] = []
    for item in items or ():
        if item.isdigit():
            runs.append(int(item))
        else:
            where.append(item)
    return runs, where


def _do(operation: str, items: list[str] | None, application: str | None, catalog: str | None, as_json: bool,
        **options: Any) -> None:
    from ..ops import tiers

    runs, where = _split(items)
    with _progress(operation) as bar:
        def progress(done: int, total: int, what: str) -> None:
            bar.stage(what)
            bar.update(done, total)

        reports = tiers.run(operation, runs or None, where=where or None, application=application, catalog=catalog,
                            progress=progress if bar.callback else None, **options)
    if as_json:
        _emit_json({"runs": [vars(r) for r in reports]})
        return
    if not reports:
        _console().print("no matching runs")
    for r in reports:
        _console().print(f"run {r.run_id}: {r.operation} of {r.files} files ({_size(r.nbytes)}) in {r.seconds:.2f} s"
                         + (f", {r.skipped} already done" if r.skipped else ""))


def _migrate(items: RunsOpt = None,
             to: Annotated[str, typer.Option("--to", metavar="s3://BUCKET/PREFIX", help="The archive.")] = "",
             pack_below: Annotated[int, typer.Option(
                 "--pack-below", metavar="BYTES", min=0,
                 help="Pack files of at most BYTES into superfiles (one object, one GET for all; 0: never).")] = 0,
             verify: Annotated[str, typer.Option(
                 "--verify", metavar="read-back|upload",
                 help="read-back: read every object back and compare its SHA-256 (default); upload: trust the "
                      "server's check of each signed upload's SHA-256 (faster).")] = "read-back",
             application: AppOpt = None, endpoint: EndpointOpt = None, catalog: CatalogOpt = None,
             as_json: JsonOpt = False) -> None:
    """Copy runs to the archive tier and verify every copy against the catalog before it counts."""
    _do("migrate", items, application, catalog, as_json, to=to or None, endpoint=endpoint, pack_below=pack_below,
        verify=verify)


def _stage(items: RunsOpt = None, application: AppOpt = None, endpoint: EndpointOpt = None,
           catalog: CatalogOpt = None, as_json: JsonOpt = False) -> None:
    """Bring runs back from the archive to the fast tier, verified."""
    _do("stage", items, application, catalog, as_json, endpoint=endpoint)


def _purge(items: RunsOpt = None,
           tier: Annotated[str, typer.Option("--tier", help="The tier to remove copies from: fast or archive.")] = "fast",
           application: AppOpt = None, endpoint: EndpointOpt = None, catalog: CatalogOpt = None,
           as_json: JsonOpt = False) -> None:
    """Remove runs' copies from a tier; refused unless every file has a verified copy on the other."""
    _do("purge", items, application, catalog, as_json, tier=tier, endpoint=endpoint)


def register(app: typer.Typer) -> None:
    """Add ``migrate``, ``stage`` and ``purge`` to the ``sdm`` command."""
    app.command("migrate")(_handles_errors(_migrate))
    app.command("stage")(_handles_errors(_stage))
    app.command("purge")(_handles_errors(_purge))
