"""The ranked data view: every rank writes its own number of rows (the paper's ranked sections).

A dataset under :class:`Ranked` is not one global array cut into pieces: at each step
every rank gives a local array of ``(n_local, *row_shape)`` with any ``n_local >= 0``,
and the step stores the rows of all ranks one after the other, in rank order, after a
small header with every rank's row count (``docs/format.md``, "Ranked sections").  The
dataset's catalog shape is the shape of one row (``()``: rows of single values).  The
I/O is in :mod:`sdm.engine.ranked`.
"""

from __future__ import annotations

from typing import Any, Sequence

from ..errors import DistributionError
from .distribution import Distribution, Piece

__all__ = ["Ranked", "KIND", "is_ranked"]

KIND = "ranked"


class Ranked(Distribution):
    """Rows of a variable count per rank, stored rank-concatenated after a header of the counts.

    Set with ``group.data_view(sdm.Ranked(), [...])`` in a writing session; the view is
    recorded in the catalog, and a session that reads the dataset later picks it
    without a ``data_view`` call.  Reading (:meth:`sdm.Group.read`) under the writer's
    number of ranks gives each rank its own rows back, under another number a balanced
    share of the rows (in order), and with ``ranks=(a, b)`` the rows the writer's ranks
    ``a`` to ``b - 1`` wrote.

    Examples
    --------
    >>> g.data_view(sdm.Ranked(), ["particles"])              # doctest: +SKIP
    >>> g.write("particles", 0, np.zeros((n_local, 3)))       # doctest: +SKIP
    """

    kind = KIND

    def piece(self, shape: Sequence[int], nprocs: int, rank: int) -> Piece:
        """Not defined: a ranked dataset has no fixed piece per rank.

        Raises
        ------
        DistributionError
            Always.
        """
        raise DistributionError("a Ranked view has no fixed piece per rank: each rank gives its own number of rows")

    def to_json(self) -> dict[str, Any]:
        """``{"kind": "ranked"}`` (what the catalog stores)."""
        return {"kind": KIND}


def is_ranked(distribution: dict[str, Any] | None) -> bool:
    """Whether a stored distribution (catalog JSON) declares a ranked dataset."""
    return isinstance(distribution, dict) and distribution.get("kind") == KIND
