"""The planner: decides the I/O method for an access.

Today it knows one rule: two-phase collective I/O is the right default for the
regular distributions of the core (many noncontiguous pieces per rank that together
form large contiguous file regions).  ``method="auto"`` asks it; any registered method
name can be forced per session or per call, and the choice and its reason are recorded
with every write in the catalog.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..io import IOMethod, get_method

__all__ = ["Decision", "choose_method"]


@dataclass(frozen=True)
class Decision:
    """The method chosen for an access and why."""

    method: IOMethod
    reason: str


def choose_method(requested: str) -> Decision:
    """Resolve a requested method name (or ``"auto"``) to a method.

    Raises
    ------
    InvalidNameError
        The name is neither ``"auto"`` nor a registered method.
    """
    if requested == "auto":
        return Decision(get_method("collective"), "auto: two-phase collective I/O for regular views")
    return Decision(get_method(requested), f"requested: {requested}")
