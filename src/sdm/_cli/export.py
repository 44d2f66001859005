"""``sdm export`` (a run to HDF5, NetCDF-4, Zarr v3 or Exodus II) and ``sdm import`` (such a file into a new run).

The formats are named once, in :data:`FORMATS` (a test keeps it equal to
:data:`sdm.exporting.FORMATS`): the option's metavar, the help texts and the messages
are made from it.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from .main import (ChooseAppOpt, CatalogOpt, JsonOpt, RunArg, _console, _emit_json, _handles_errors, _open, _size,
                   choose_run, run_words)
from .maintenance import _progress

__all__ = ["register", "FORMATS", "formats_text"]

#: Every format of ``sdm export`` and ``sdm import``, by name (as ``--format`` takes it) and as people call it
FORMATS = {"hdf5": "HDF5", "netcdf": "NetCDF-4", "zarr": "Zarr v3", "exodus": "Exodus II (a finite element model)"}
_METAVAR = "|".join(FORMATS)


def formats_text() -> str:
    """``HDF5, NetCDF-4, Zarr v3 or Exodus II (...)``: every format, in words."""
    names = list(FORMATS.values())
    return ", ".join(names[:-1]) + " or " + names[-1]


FormatOpt = Annotated[str, typer.Option("--format", "-f", metavar=_METAVAR,
                                        help=f"The file format: {', '.join(FORMATS)}.")]
RootOpt = Annotated[str | None, typer.Option("--root", metavar="DIR", help="Data root (default $SDM_ROOT).")]


def _export(
    which: RunArg = None,
    application: ChooseAppOpt = None,
    fmt: FormatOpt = "",
    out: Annotated[str, typer.Option("--out", "-o", metavar="PATH", help="The file (a directory for zarr).")] = "",
    group: Annotated[str | None, typer.Option("--group", metavar="G", help="Only this group, flat at the root.")] = None,
    steps: Annotated[str | None, typer.Option("--steps", metavar="START:STOP[:STRIDE]",
                                              help="Only these steps (STOP excluded), or one step K.")] = None,
    compression: Annotated[str | None, typer.Option(
        "--compression", metavar="SPEC",
        help="Compress every dataset with SPEC (SDM's grammar: zstd:5, blosc2:lz4:5:shuffle, zfp:rate=8, ...); "
             "'none': nothing compressed; 'default': raw datasets with gzip (hdf5), zlib (netcdf), zstd (zarr). "
             "Default: each dataset as the run stores it, with the format's nearest codec.")] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an existing PATH.")] = False,
    root: RootOpt = None,
    catalog: CatalogOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """``sdm export``: a run to a file of one of :data:`FORMATS` (its help text, naming them: :func:`register`)."""
    from ..errors import InvalidArgumentError
    from ..exporting import export

    if not fmt or not out:
        raise InvalidArgumentError(f"sdm export needs --format {_METAVAR} and --out PATH")
    words = run_words(which, application)
    with _open(catalog) as cat:  # the rule of sdm.open: several matching runs are listed, not guessed
        run = choose_run(cat, words, application)
    with _progress(f"export run {run}") as bar:
        report = export(run, format=fmt, out=out, catalog=catalog, root=root, group=group, steps=steps,
                        compression=compression, overwrite=overwrite, progress=bar.callback)
    _say(report, f"run {report.run} -> {report.out} ({report.format}): {report.arrays} arrays, {report.steps} steps, "
                 f"{_size(report.nbytes)} in {report.seconds:.2f} s", as_json)


def _import(
    file: Annotated[str, typer.Argument(metavar="FILE", help="An HDF5 or NetCDF-4 file, or a Zarr v3 store.")],
    fmt: FormatOpt = "",
    application: Annotated[str, typer.Option("--application", "--app", metavar="APP",
                                             help="The application of the new run.")] = "",
    root: RootOpt = None,
    catalog: CatalogOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """``sdm import``: a file of one of :data:`FORMATS` into a new run (its help text: :func:`register`)."""
    from ..errors import InvalidArgumentError
    from ..exporting import import_file

    if not fmt or not application:
        raise InvalidArgumentError(f"sdm import needs --format {_METAVAR} and --application APP")
    with _progress(f"import {file}") as bar:
        report = import_file(file, format=fmt, application=application, catalog=catalog, root=root,
                             progress=bar.callback)
    _say(report, f"{report.source} ({report.format}) -> run {report.run} of {report.application}: "
                 f"{report.datasets} datasets in {len(report.groups)} groups, {report.steps} steps, "
                 f"{_size(report.nbytes)} in {report.seconds:.2f} s", as_json)


def _say(report: Any, line: str, as_json: bool) -> None:
    if as_json:
        _emit_json(vars(report))
        return
    con = _console()
    con.print(line)
    for note in report.notes:
        con.print(f"  note: {note}")


def register(app: typer.Typer) -> None:
    """Add ``export`` and ``import`` to the ``sdm`` command."""
    app.command("export", help=f"Export a run to {formats_text()}, step by step (the file appears only when "
                "complete).")(_handles_errors(_export))
    app.command("import", help=f"Import a file of {formats_text()} into a new run (arrays with a leading `step` "
                "dimension step by step).")(_handles_errors(_import))
