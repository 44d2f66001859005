"""The engine of one group: its state and the protocols of its writes, reads and data views, in one object.

:class:`sdm.Group` is the user's handle and holds one :class:`GroupEngine` (``group.engine``).
The protocol's steps live in the modules they belong to: :mod:`sdm.engine.state` (what every
access shares), :mod:`sdm.engine.placement` (where a dump's bytes go), :mod:`sdm.engine.write` (a dump), :mod:`sdm.engine.read` (a step of a
dataset), :mod:`sdm.engine.data_view` (a data view); the strategies of particular dataset
kinds in :mod:`sdm.engine.ranked` (ranked sections) and :mod:`sdm.engine.subfiled`
(subfiled groups).
"""

from __future__ import annotations

from .data_view import Viewing
from .read import Reading
from .write import Writing

__all__ = ["GroupEngine"]


class GroupEngine(Writing, Reading, Viewing):
    """One group's state with its write, read and data view protocols (every rank holds one per group it uses)."""
