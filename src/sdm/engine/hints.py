"""The hints of a session, checked before anything is opened: the values SDM reads and the planner's.

They name what the I/O methods, the storage and the planner accept, so they are checked
here, above those layers (:mod:`sdm._validate` checks plain arguments and imports none of them).
"""

from __future__ import annotations

from typing import Any

from .._validate import MAX_INT, hints
from ..errors import HintError

__all__ = ["session_hints", "planner_hints"]

_INT_HINTS = {  # key: smallest value (sizes take k, m, g suffixes)
    "sdm_sieve_buffer_size": 1, "sdm_sieve_gap": 0, "sdm_io_servers": 1, "sdm_buffer_size": 1,
    "cb_buffer_size": 1, "cb_nodes": 1, "ind_rd_buffer_size": 1, "ind_wr_buffer_size": 1,
}
_SWITCH_HINTS = ("romio_ds_read", "romio_ds_write", "romio_cb_read", "romio_cb_write")


def session_hints(value: Any) -> dict[str, str]:
    """The ``hints=`` of a session: str -> str, and the values of the hints SDM reads checked.

    Unknown keys pass (they may be hints of the MPI library).

    Raises
    ------
    HintError
    """
    from ..io._support import int_hint
    from ..io.servers import server_parameters
    from ..io.sieving import sieve_parameters
    from ..storage.durability import sync_mode

    out = hints(value)
    for key, minimum in _INT_HINTS.items():
        if int_hint(out, key, 1, minimum=minimum) > MAX_INT:
            raise HintError(f"hint {key}={out[key]!r} is too large")
    for key in _SWITCH_HINTS:
        if key in out and out[key].lower() not in ("enable", "disable", "automatic"):
            raise HintError(f"hint {key}={out[key]!r}: use 'enable', 'disable' or 'automatic'")
    sync_mode(out)
    sieve_parameters(out)
    server_parameters(out)
    return out


def planner_hints(value: Any) -> dict[str, Any]:
    """The ``planner_hints=`` of a session, parsed once to refuse bad ones up front.

    Raises
    ------
    HintError
    """
    from ..io import method_names
    from ..planner.model import METHODS
    from ..planner.hints import Hints

    if value is None:
        return {}
    parsed = Hints.parse(value)
    if parsed.methods is not None:
        allowed = [m for m in METHODS if m in method_names()]
        unknown = [m for m in parsed.methods if m not in allowed]
        if unknown:
            raise HintError(f"planner hint methods names unknown methods {unknown}; choose from {allowed}")
    return dict(value)
