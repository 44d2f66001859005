"""The planner: decides the I/O method for an access.

Every rank describes its part of an access (bytes, contiguous file regions); the
descriptions of all ranks travel in the allgather every write and read already makes,
and :meth:`Planner.choose` turns the same :class:`Access` into the same
:class:`Decision` on every rank, so the method is always chosen collectively.
The decision and its reason are recorded with every write in the catalog.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..io import IOMethod, get_method

__all__ = ["Access", "Decision", "Planner", "choose_method"]


@dataclass(frozen=True)
class Access:
    """One collective access as the planner sees it (identical on every rank).

    Attributes
    ----------
    writing : bool
    level : int
        File organization level of the group.
    itemsize : int
        Bytes per element.
    total_bytes : int
        Bytes of the whole dataset step.
    rank_bytes, rank_regions : tuple of int
        Per rank: bytes moved and contiguous file regions touched.
    hints : dict
        User hints (access pattern, expected frequency, read- or write-mostly, ...).
    """

    writing: bool
    level: int
    itemsize: int
    total_bytes: int
    rank_bytes: tuple[int, ...]
    rank_regions: tuple[int, ...]
    hints: dict[str, Any] = field(default_factory=dict)

    @property
    def nprocs(self) -> int:
        """Ranks taking part."""
        return len(self.rank_bytes)


@dataclass(frozen=True)
class Decision:
    """The method chosen for an access and why."""

    method: IOMethod
    reason: str


class Planner:
    """Chooses I/O methods; ``calibration`` holds measured cost-model constants, if any.

    Parameters
    ----------
    calibration : dict, optional
        Constants of the cost model for the session's storage target (from the
        catalog's ``io_calibrations``), identical on every rank.
    hints : dict, optional
        Session-wide user hints.
    """

    def __init__(self, calibration: dict[str, Any] | None = None, hints: dict[str, Any] | None = None) -> None:
        self.calibration = calibration
        self.hints = dict(hints or {})

    def choose(self, requested: str, access: Access | None = None) -> Decision:
        """Resolve a requested method name (or ``"auto"``) for *access*.

        Raises
        ------
        InvalidNameError
            The name is neither ``"auto"`` nor a registered method.
        """
        if requested != "auto":
            return Decision(get_method(requested), f"requested: {requested}")
        return Decision(get_method("collective"), "auto: two-phase collective I/O for regular views")


def choose_method(requested: str, access: Access | None = None) -> Decision:
    """Validate and resolve a method name without calibration (see :class:`Planner`)."""
    return Planner().choose(requested, access)
