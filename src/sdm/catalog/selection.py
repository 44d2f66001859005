"""Which run a reader means: one rule for every way of choosing one run.

``sdm.open(app, "r" | "a", attributes=..., run=...)``, ``xarray.open_dataset(...,
engine="sdm")``, :func:`sdm.export` and the ``sdm show`` / ``sdm export`` commands pick a
run the same way (:meth:`sdm.catalog.Catalog.select_run`):

* ``run=ID`` is that run (it must belong to the application, when one is named);
* ``run="latest"`` is the newest run that matches the application and the attributes;
* no ``run``: the runs that match must be exactly one. None raises
  :class:`~sdm.errors.RunNotFoundError`; several raise
  :class:`~sdm.errors.AmbiguousRunError`, whose message lists them (id, creation time,
  attributes), newest first, and says how to choose. No attributes at all is no
  exception: an application with several runs is ambiguous too.

Runs are listed newest first everywhere (:func:`sdm.find`, ``sdm ls``, ``sdm find``, this
message): latest creation time first, runs created at the same instant by id, highest
first. This module holds no database code (every rank may check a ``run`` argument).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..errors import AmbiguousRunError, InvalidArgumentError

if TYPE_CHECKING:
    from .records import RunRecord

__all__ = ["LATEST", "SHOWN", "run_choice", "ambiguous", "PYTHON_ADVICE"]

#: The ``run`` that means the newest matching run
LATEST = "latest"
#: Runs named in the message of an ambiguous selection (the others are counted)
SHOWN = 10
#: What to do, said to Python callers
PYTHON_ADVICE = "pass run=ID to choose one, or run='latest' for the newest"
_RUN_ID_MAX = 2**63 - 1  # run ids are signed 64-bit catalog keys


def run_choice(run: Any) -> int | str | None:
    """Check a ``run`` argument: None, a run id (an int >= 1, numpy integers too) or ``"latest"``.

    Returns
    -------
    int, "latest" or None

    Raises
    ------
    InvalidArgumentError
        Anything else (a bool, a float, another string, an id below 1).
    """
    if run is None or (isinstance(run, str) and run == LATEST):
        return run
    if isinstance(run, (bool, str)):
        raise InvalidArgumentError(f"run must be a run id (an integer >= 1) or {LATEST!r}, got {run!r}")
    try:
        rid = operator.index(run)
    except TypeError:
        raise InvalidArgumentError(f"run must be a run id (an integer >= 1) or {LATEST!r}, got "
                                   f"{type(run).__name__} {_short(run)}") from None
    if not 1 <= rid <= _RUN_ID_MAX:
        raise InvalidArgumentError(f"run must be a run id (an integer >= 1) or {LATEST!r}, got {rid}")
    return rid


def _short(value: Any, limit: int = 60) -> str:
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a broken __repr__ must not hide the real error
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _attributes(attrs: dict[str, Any], limit: int = 120) -> str:
    text = ", ".join(f"{k}={v!r}" for k, v in sorted(attrs.items())) or "no attributes"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def ambiguous(application: str | None, selection: str, runs: Sequence[RunRecord], total: int,
              advice: str = PYTHON_ADVICE) -> AmbiguousRunError:
    """The error for *total* runs matching one selection (*runs*: the newest of them, newest first).

    Parameters
    ----------
    application : str or None
        The application searched (None: any).
    selection : str
        What was asked, as text (``"attributes {'case': 'demo'}"``, ``"case=demo"``), empty
        when nothing but the application was.
    runs : sequence of RunRecord
        The first :data:`SHOWN` matches, newest first.
    total : int
        How many runs match.
    advice : str
        What to do, in the caller's terms (``run=ID`` in Python, ``RUN`` on the command line).
    """
    of = f" of {application!r}" if application is not None else ""
    what = f" match {selection}" if selection else (" match" if application is None else "")
    listed = "; ".join(f"run {r.id} (created {r.created_at:%Y-%m-%d %H:%M:%S} UTC, {_attributes(r.attributes)})"
                       for r in runs)
    more = f"; and {total - len(runs)} more" if total > len(runs) else ""
    return AmbiguousRunError(f"{total} runs{of}{what}, newest first: {listed}{more}; {advice}")
