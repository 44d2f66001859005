"""The engine: the protocol every collective operation of SDM follows.

:mod:`sdm.engine.operations` is the first step of that protocol: the opening exchange of
every collective call (its name and a per-session sequence number, so ranks that entered
different operations fail together instead of hanging) and what happens when a rank
leaves a session by an exception the others do not share.  A session's life is
:mod:`~sdm.engine.session_open` and :mod:`~sdm.engine.session_close`; rank 0's catalog
changes and background commits are :mod:`~sdm.engine.commits`; defining groups,
truncating and finding runs are :mod:`~sdm.engine.groups`, :mod:`~sdm.engine.truncate`
and :mod:`~sdm.engine.find`.  The engine works on a session through the protocol of
:mod:`~sdm.engine.session_state`, never importing the user API.
"""

from __future__ import annotations

from .operations import Operations, collective

__all__ = ["Operations", "collective"]
