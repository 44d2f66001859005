""""Did you mean" suggestions for names that were not found.

Error messages about an unknown application, group or dataset end with the closest
known names (``difflib.get_close_matches``), compared case-insensitively so that ``t``
finds ``T``::

    >>> closest("tmep", ["temp", "pressure"])
    "; did you mean 'temp'?"
    >>> closest("xyz", ["temp"])
    ''
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["closest"]


def closest(name: object, names: Iterable[str], *, n: int = 3, cutoff: float = 0.6) -> str:
    """Return ``"; did you mean 'x'?"`` (or ``'x' or 'y'``) for the names nearest *name*, else ``""``.

    Parameters
    ----------
    name : object
        The name asked for (anything that is not a string gets no suggestion).
    names : iterable of str
        The names that exist.
    n : int
        At most this many suggestions.
    cutoff : float
        Similarity (0 to 1, ``difflib.SequenceMatcher.ratio``) below which a name is not suggested.

    Returns
    -------
    str
        A suffix for an error message: empty when nothing is close, or when *name* itself exists.
    """
    if not isinstance(name, str):
        return ""
    known = [x for x in dict.fromkeys(names) if isinstance(x, str)]
    if name in known:
        return ""
    by_fold: dict[str, str] = {}
    for x in known:
        by_fold.setdefault(x.casefold(), x)
    near = difflib.get_close_matches(name.casefold(), list(by_fold), n=n, cutoff=cutoff)
    if not near:
        return ""
    return "; did you mean " + " or ".join(repr(by_fold[x]) for x in near) + "?"
