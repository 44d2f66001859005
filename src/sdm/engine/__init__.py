"""The engine: the protocol every collective operation of SDM follows.

Today it holds the first step of that protocol, :mod:`sdm.engine.operations`: the
opening exchange of every collective call (its name and a per-session sequence number,
so ranks that entered different operations fail together instead of hanging) and what
happens when a rank leaves a session by an exception the others do not share.
"""

from __future__ import annotations

from .operations import Operations, collective

__all__ = ["Operations", "collective"]
