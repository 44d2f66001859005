"""What ``sdm show RUN`` prints as tables: the run, its groups, datasets, infos, compression, files, imports
and (``--writes``) its writes, fitted to the terminal, or every column in full (``--wide``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from .infos import infos_table
from .main import _attrs, _console, _date, _dist, _row, _shape, _size, _table, steps_summary
from .writes import NARROW, compact_writes, wide_writes

__all__ = ["print_run"]


def print_run(rec: Any, *, files: Sequence[Any], infos: Sequence[Any], imported: Sequence[Any],
              wrows: Sequence[tuple[str, str, Any]] | None, compressed: Sequence[dict[str, Any]] | None,
              wide: bool) -> None:
    """Print the tables of ``sdm show`` for the run record *rec* (with its current state).

    Parameters
    ----------
    rec : RunRecord
    files, infos, imported : sequence
        The run's files, infos and imported arrays, as the catalog lists them.
    wrows : sequence of (group, dataset, WriteRecord), optional
        The writes to list (``--writes``), else None.
    compressed : sequence of dict, optional
        What compression achieved per compressed dataset (:func:`sdm._cli.main.compression_rows`).
    wide : bool
        Every column in full, each row on one line however long (``--wide``).
    """
    from rich.table import Table
    from rich.text import Text

    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    for key, val in (
        ("run", rec.id),
        ("application", rec.application),
        ("date", _date(rec.created_at)),
        ("state", rec.state),
        ("directory", rec.dir or "-"),
        ("ranks", rec.nprocs),
        ("problem size", "-" if rec.problem_size is None else json.dumps(rec.problem_size)),
        ("attributes", _attrs(rec.attributes)),
        ("data root", rec.root),
    ):
        head.add_row(Text(key), Text(str(val)))
    tables: list[Any] = [head]
    groups = _table("groups", "name", "level", "kind", "steps/file", "subfiles", "truncated after", "writes to",
                    "attributes")
    datasets = _table("datasets", "group", "name", "dtype", "shape", "order", "distribution", "steps", "attributes")
    for g in rec.groups:
        _row(groups, g.name, g.level, g.kind, g.steps_per_file or "-",
             "-" if g.subfiles is None else "auto" if g.subfiles == 0 else g.subfiles,
             "-" if g.truncated_after is None else g.truncated_after, g.archive or "fast tier", _attrs(g.attributes))
        for d in g.datasets:
            own = {k: v for k, v in d.attributes.items() if g.attributes.get(k, object()) != v}
            _row(datasets, g.name, d.name, d.dtype, _shape(d.shape), d.order, _dist(d.distribution),
                 steps_summary(d), _attrs(own))
    tables += [groups, datasets]
    if infos:
        tables.append(infos_table(infos, _table("infos", "attached to", "name", "dtype", "shape", "values")))
    if compressed:
        ctable = _table("compression", "dataset", "codec", "steps", "array", "stored", "ratio", "max error")
        for c in compressed:
            _row(ctable, c["dataset"], c["codec"], c["steps"], _size(c["nbytes"]), _size(c["stored_nbytes"]),
                 "-" if c["ratio"] is None else f"{c['ratio']:.2f}",
                 "-" if c["max_error"] is None else f"{c['max_error']:.3g}")
        tables.append(ctable)
    ftable = _table("files", "path", "level", "writes", "size")
    for f in files:
        _row(ftable, f.path, f.level, f.nwrites, _size(f.nbytes))
    tables.append(ftable)
    if imported:
        itable = _table("imports", "name", "source", "offset", "dtype", "shape", "mode", "size", "seconds")
        for i in imported:
            _row(itable, i.name, i.source, i.offset, i.dtype, _shape(i.shape), i.mode, _size(i.nbytes),
                 f"{i.seconds:.4f}")
        tables.append(itable)
    con = _console()
    if wide:
        if wrows is not None:
            tables.append(wide_writes(wrows))
        roomy = con.options.update(max_width=1 << 20)  # the tables' own widths, not the terminal's
        con = _console(max([con.width] + [con.measure(t, options=roomy).maximum for t in tables]))
    elif wrows is not None:
        tables.append(compact_writes(wrows, rec.dir, min(con.width, NARROW)))
    for t in tables:
        con.print(t)
