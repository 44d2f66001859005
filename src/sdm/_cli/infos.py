"""How ``sdm show`` prints a run's infos (named arrays kept as metadata, :mod:`sdm.infos`)."""

from __future__ import annotations

import math
from typing import Any, Sequence

from rich.table import Table
from rich.text import Text

__all__ = ["PREVIEW", "infos_json", "infos_table"]

#: Infos of at most this many values are shown whole (``preview``); larger ones by their shape alone.
PREVIEW = 16


def _plain(value: Any) -> Any:
    """A value of ``ndarray.tolist()`` as strict JSON: bytes as text, complex as ``[re, im]``, nan/inf as strings."""
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, bytes):
        return value.decode("latin-1")
    if isinstance(value, complex):
        return [_plain(value.real), _plain(value.imag)]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def infos_json(records: Sequence[Any]) -> list[dict[str, Any]]:
    """``sdm show --json``'s ``infos``: place, name, dtype, shape, bytes, CRC-32 and, for small ones, the values."""
    return [{"group": r.group, "dataset": r.dataset, "step": r.step, "name": r.name, "dtype": r.dtype,
             "shape": list(r.shape), "nbytes": r.nbytes, "checksum": r.checksum,
             "preview": _plain(r.array().tolist()) if math.prod(r.shape) <= PREVIEW else None}
            for r in records]


def _values(record: Any) -> str:
    import numpy as np

    arr = record.array()
    if arr.size > PREVIEW:
        return f"({arr.size} values)"
    return " ".join(np.array2string(arr, separator=" ", max_line_width=10**6).split())


def infos_table(records: Sequence[Any], table: Table) -> Table:
    """The rows of ``sdm show``'s ``infos`` table (columns: attached to, name, dtype, shape, values)."""
    from .main import _shape

    for r in records:
        table.add_row(*(Text(c) for c in (r.place, r.name, r.dtype, _shape(r.shape), _values(r))))
    return table
