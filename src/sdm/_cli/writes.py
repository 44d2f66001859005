"""The writes of ``sdm show --writes``: one line per write that fits the terminal, or everything (``--wide``).

By default each write is one line of at most :data:`NARROW` columns (fewer on a narrower
terminal): its dataset, step, file (relative to the run's directory), size, time and
I/O method, and the planner's reason cut with an ellipsis to the room left. Columns
give way, least informative first (:data:`GIVES_WAY`), while the reason would have fewer
than :data:`REASON_MIN` columns. The offset, the checksum and a subfiled or compressed
step's extents are left to ``--wide`` (every column, nothing cut, each write still on one
line however long) and ``--json``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .main import _row, _size, _table

if TYPE_CHECKING:
    from rich.table import Table

__all__ = ["NARROW", "REASON_MIN", "GIVES_WAY", "compact_writes", "wide_writes", "relative_path"]

#: The most columns the default listing takes, whatever the terminal's width
NARROW = 100
#: The least room the reason keeps before other columns give way
REASON_MIN = 16
#: Columns dropped, in this order, when the reason would be narrower than REASON_MIN
GIVES_WAY = ("file", "ms", "method")
#: A column's text is cut (with an ellipsis) past this many characters in the default listing
CELL_MAX = 28
_GAP = 2  # columns between two cells: the padding (collapsed) and the separator of box SIMPLE_HEAD, no edges
_RIGHT = {"step", "size", "ms"}


def relative_path(path: str, run_dir: str | None) -> str:
    """*path* (relative to the data root) relative to the run's directory when it lies inside it."""
    prefix = (run_dir or "").rstrip("/") + "/"
    return path[len(prefix):] if run_dir and path.startswith(prefix) else path


def _cut(text: str, width: int, *, head: bool = False) -> str:
    """*text* in at most *width* characters: its end kept (*head*: its start cut, as for a path) or its start."""
    if len(text) <= width:
        return text
    if width <= 1:
        return "…"[:width]
    return "…" + text[len(text) - width + 1:] if head else text[:width - 1] + "…"


def compact_writes(wrows: Sequence[tuple[str, str, Any]], run_dir: str | None, width: int) -> Table:
    """The default listing of *wrows* (``(group, dataset, WriteRecord)``): one line each, at most *width* columns.

    Parameters
    ----------
    wrows : sequence of (str, str, WriteRecord)
    run_dir : str or None
        The run's directory (files are shown relative to it).
    width : int
        Columns available (the listing takes no more).
    """
    from rich import box

    cells: dict[str, list[str]] = {"dataset": [], "step": [], "file": [], "size": [], "ms": [], "method": [],
                                   "reason": []}
    for gname, dname, w in wrows:
        where = relative_path(w.path, run_dir)
        if w.extents:
            where += f" +{len(w.extents)} {'chunks' if w.extents[0].box is not None else 'extents'}"
        for key, text in (("dataset", f"{gname}/{dname}"), ("step", str(w.step)), ("file", where),
                          ("size", _size(w.nbytes)), ("ms", f"{1e3 * w.seconds:.2f}"), ("method", w.method),
                          ("reason", w.reason or "-")):
            cells[key].append(_cut(text, CELL_MAX, head=key == "file") if key != "reason" else text)
    shown = list(cells)

    def used(columns: Sequence[str]) -> int:
        """Columns taken by every column but the reason, with the gaps (the reason's included)."""
        fixed = [c for c in columns if c != "reason"]
        return sum(max([len(c)] + [len(t) for t in cells[c]]) for c in fixed) + _GAP * (len(columns) - 1)

    for dropped in GIVES_WAY:
        if width - used(shown) >= REASON_MIN:
            break
        shown.remove(dropped)
    room = max(width - used(shown), len("reason"))
    table = _table("writes", *shown)
    table.box, table.show_edge, table.pad_edge, table.collapse_padding = box.SIMPLE_HEAD, False, False, True
    for column in table.columns:
        column.no_wrap, column.overflow = True, "ellipsis"
        column.justify = "right" if column.header in _RIGHT else "left"
        if column.header == "reason":
            column.max_width = room
    for i in range(len(wrows)):
        _row(table, *(cells[c][i] if c != "reason" else _cut(cells[c][i], room) for c in shown))
    return table


def wide_writes(wrows: Sequence[tuple[str, str, Any]]) -> Table:
    """Every column of every write, nothing cut (``--wide``): path, offset, bytes, checksum, method, seconds,
    reason, then a subfiled or compressed step's extents, one line each."""
    table = _table("writes", "dataset", "step", "file", "offset", "bytes", "checksum", "method", "seconds", "reason")
    for column in table.columns:
        column.no_wrap = True
    for gname, dname, w in wrows:
        _row(table, f"{gname}/{dname}", w.step, w.path, w.offset, w.nbytes,
             f"{w.checksum_algo}:{w.checksum}", w.method, f"{w.seconds:.6f}", w.reason or "-")
        for k, e in enumerate(w.extents):  # a subfiled step: each extent in its subfile; a compressed one's chunks
            where = (f"box {list(e.box[0])}+{list(e.box[1])}" if e.box is not None
                     else f"bytes {e.start}..{e.start + e.nbytes}")
            _row(table, f"  {'chunk' if e.box is not None else 'extent'} {k}", where, e.path, e.offset, e.nbytes,
                 f"{e.checksum_algo}:{e.checksum}", "", "", "")
    return table
