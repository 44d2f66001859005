"""``sdm plot``: a PNG of a 2-D slice of one step, or a time series of a point or a reduction."""

from __future__ import annotations

from typing import Annotated

import typer

from .main import CatalogOpt, ChooseAppOpt, JsonOpt, _console, _emit_json, _handles_errors, _open, choose_run, run_words

__all__ = ["register"]


def _plot(
    run: Annotated[str, typer.Argument(metavar="RUN|latest", help="Run id (see `sdm ls APP`), or `latest`: the "
                                       "newest run (of --app APP).", show_default=False)],
    dataset: Annotated[str, typer.Argument(metavar="DATASET", help="Dataset name, or GROUP/NAME.")],
    step: Annotated[int | None, typer.Option("--step", "-s", metavar="K", min=0,
                                             help="Plot a 2-D slice of step K.")] = None,
    group: Annotated[str | None, typer.Option("--group", "-g", metavar="G",
                                              help="The dataset's group (when several groups have the name).")] = None,
    slice_: Annotated[str | None, typer.Option(
        "--slice", metavar="SPEC",
        help="Which part: ':,5,:' or 'z=10' (a dimension's name, or dim_0, dim_1, ...); default the middle of "
             "the leading dimensions. With --reduce: the part reduced.")] = None,
    point: Annotated[str | None, typer.Option("--point", metavar="I,J,...",
                                              help="Time series of this point over every step.")] = None,
    reduce: Annotated[str | None, typer.Option("--reduce", metavar="mean|min|max",
                                               help="Time series of this reduction of each step.")] = None,
    out: Annotated[str | None, typer.Option(
        "--out", "-o", metavar="FILE.png",
        help="The PNG to write (default: named after what it shows, e.g. run1-analysis-a0-step12-dim_0=32.png, "
             "run1-analysis-a0-point3,4,5.png, run1-analysis-a0-mean.png).")] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace the PNG if it exists (else refused).")] = False,
    application: ChooseAppOpt = None,
    catalog: CatalogOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Write a PNG: a 2-D slice of one step (--step), or a point or reduction over every step (--point, --reduce)."""
    from .. import plot as P

    if step is not None and (point is not None or reduce is not None):
        raise typer.BadParameter("--step draws a slice of one step; --point and --reduce draw every step: "
                                 "give one of them")
    if step is None and point is None and reduce is None:
        raise typer.BadParameter("give --step K (a 2-D slice), --point I,J,... or --reduce mean|min|max "
                                 "(a time series)")
    words = run_words([run], application)
    if isinstance(words[0], int) and application is None:
        run_id = words[0]
    else:
        with _open(catalog) as cat:
            run_id = choose_run(cat, words, application)
    if step is not None:
        result = P.plot_slice(run_id, dataset, step, group=group, select=slice_, out=out, catalog=catalog,
                              overwrite=overwrite)
    else:
        result = P.plot_series(run_id, dataset, point=point, reduce=reduce, group=group, select=slice_, out=out,
                               catalog=catalog, overwrite=overwrite)
    if as_json:
        _emit_json({"path": str(result.path.resolve()), "steps": list(result.steps), "shape": list(result.data.shape),
                    "title": result.title, "labels": list(result.labels),
                    "values": result.data.tolist() if step is None else None})
        return
    what = f"{result.data.shape[0]}x{result.data.shape[1]} slice" if step is not None else \
        f"{len(result.steps)} steps"
    _console().print(f"wrote {result.path} ({what})", markup=False)


def register(app: typer.Typer) -> None:
    """Add ``plot`` to the ``sdm`` command."""
    app.command("plot")(_handles_errors(_plot))
