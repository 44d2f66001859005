"""Agreeing on a data view across ranks before any collective call that depends on it.

A view's kind decides which collective calls follow (a tiling check for Subarray, an
ownership exchange for MapArray, none for Block), so ranks that set different kinds
would wait in different collectives for ever, and ranks that set the same kind with
different parameters (Block and Cyclic, two BlockCyclic block sizes) would silently
mix their data.  :func:`agree_view` makes one allgather of every rank's
:meth:`~sdm.layout.distribution.Distribution.agreement` first and raises
:class:`~sdm.errors.CollectiveMismatchError` with the same message on every rank when
they differ; only then do the kind-specific checks run.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from ..errors import CollectiveMismatchError
from .distribution import Distribution

__all__ = ["agree_view", "describe", "ranks_text", "by_value", "value_text", "differences"]


def describe(view: Any) -> str:
    """The canonical text of what must agree about *view* (never raises)."""
    if view is None:
        return "the default view (Block over all ranks)"
    if not isinstance(view, Distribution):
        return f"not a data view ({type(view).__name__})"
    try:
        agreed = view.agreement()
        args = ", ".join(f"{k}={json.dumps(v, sort_keys=True, default=repr)}" for k, v in sorted(agreed.items())
                         if k != "kind")
        return f"{agreed.get('kind', type(view).__name__)}({args})"
    except Exception as exc:  # noqa: BLE001 - a broken view still takes part in the allgather
        return f"{type(view).__name__} that cannot be described ({type(exc).__name__})"


def ranks_text(ranks: Sequence[int]) -> str:
    """``"rank 3"``, ``"ranks 0-2"``, ``"ranks 0, 2, 5-7"``."""
    ranks = sorted(ranks)
    parts, start = [], 0
    for i in range(1, len(ranks) + 1):
        if i == len(ranks) or ranks[i] != ranks[i - 1] + 1:
            a, b = ranks[start], ranks[i - 1]
            parts.append(str(a) if a == b else (f"{a}, {b}" if b == a + 1 else f"{a}-{b}"))
            start = i
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(parts)


def by_value(values: Sequence[Any]) -> str:
    """``"rank 0 X, ranks 1-3 Y"``: the distinct values and who gave them, in order of first rank."""
    groups: dict[str, list[int]] = {}
    for rank, value in enumerate(values):
        groups.setdefault(value if isinstance(value, str) else repr(value), []).append(rank)
    return "; ".join(f"{ranks_text(r)}: {v}" for v, r in groups.items())


def value_text(value: Any, limit: int = 60) -> str:
    """An argument's value as a message shows it: ``'T'``, ``6``, ``none``, a sequence as its items
    (``'a', 'b'``; nested ones in parentheses), anything else by its ``repr``; at most *limit* characters."""
    def text(v: Any, nested: bool) -> str:
        if v is None:
            return "none"
        if isinstance(v, (list, tuple)):
            inner = ", ".join(text(x, True) for x in v) or "none"
            return f"({inner})" if nested and len(v) != 1 else inner
        return repr(v)

    shown = text(value, False)
    return shown if len(shown) <= limit else shown[:limit - 3] + "..."


def differences(calls: Sequence[Sequence[tuple[str, Any]]]) -> str:
    """What differs between the ranks' calls, in words: ``"step (rank 0: 1; ranks 1-3: 2)"`` for each argument
    that differs, joined by ``and``; *calls* gives each rank's arguments as ``(name, value)`` pairs, in order.
    An argument a rank did not give shows as ``-``."""
    names: list[str] = []
    for call in calls:
        names += [n for n, _ in call if n not in names]
    parts = []
    for name in names:
        values = [next((value_text(v) for n, v in call if n == name), "-") for call in calls]
        if len(set(values)) > 1:
            parts.append(f"{name} ({by_value(values)})")
    return " and ".join(parts) or "their arguments (the same when shown)"


def agree_view(comm: Any, view: Any, what: str, context: Any = None) -> None:
    """Check collectively that every rank gives the same kind of view with the same parameters.

    One allgather of the view's description, *context* (what else must agree, e.g. the
    dataset names) and its collective state; call it before any other collective that
    depends on the view. Also decides, identically on every rank, whether rank-local
    caches of collective state (map-array checks and plans) may be kept.

    Parameters
    ----------
    comm : MPI.Comm
    view : object
        This rank's view (anything: a non-Distribution is described, not rejected, here).
    what : str
        The call, for the message (``"data_view of group 'g'"``).
    context : object, optional
        A picklable value that must also be equal on every rank (described in the message
        by its ``repr``).

    Raises
    ------
    CollectiveMismatchError
        On every rank, with the same message, naming the ranks and what they gave.
    """
    mine = (describe(view), repr(context), view.collective_state() if isinstance(view, Distribution) else None)
    everyone = comm.allgather(mine)
    descriptions = [d for d, _, _ in everyone]
    contexts = [c for _, c, _ in everyone]
    if len(set(contexts)) > 1:
        raise CollectiveMismatchError(
            f"ranks made different {what} calls ({by_value(contexts)}); every rank must set the view of the "
            "same datasets at the same time"
        )
    if len(set(descriptions)) > 1:
        raise CollectiveMismatchError(
            f"ranks gave different data views to {what} ({by_value(descriptions)}); every rank must give the same "
            "kind of view with the same grid, block sizes and options (only Subarray boxes, MapArray rows and "
            "ghost layers differ between ranks)"
        )
    states = [s for _, _, s in everyone]
    if isinstance(view, Distribution) and any(s is not None for s in states):
        signature = tuple(s[0] if s is not None else None for s in states)
        keep = all(s is not None and s[1] == signature for s in states)
        view.reset_collective_state(signature, keep)
