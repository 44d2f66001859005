"""File organization levels 1-3 (No, Thakur, Choudhary, section 3.1.3).

==========  =================================================================  =====================
level       files                                                              name
==========  =================================================================  =====================
1           one file per dataset and time step                                 ``group.dataset.sSTEP``
2           one file per dataset; time steps appended                          ``group.dataset``
3           one file per group; every dataset and time step appended           ``group``
==========  =================================================================  =====================

At levels 2 and 3, space is reserved through the catalog by raising the file's high-water
mark in one transaction, so concurrent writers never share bytes; an overwrite writes
the new version to fresh space too, and the catalog switches to it at the commit. Space
left unreferenced (superseded versions, a crash before the commit) is found by
``sdm verify`` and reclaimed by ``sdm gc``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import InvalidArgumentError
from .naming import component

__all__ = ["LEVELS", "check_level", "relative_path", "appends"]

LEVELS = (1, 2, 3)


def check_level(level: object) -> int:
    """Return *level* as an int.

    Raises
    ------
    InvalidArgumentError
        The level is not 1, 2 or 3.
    """
    if isinstance(level, (bool, np.bool_)) or not isinstance(level, (int, np.integer)) or int(level) not in LEVELS:
        raise InvalidArgumentError(f"organization level must be 1, 2 or 3, got {level!r}")
    return int(level)


def relative_path(run_dir: str | Path, level: int, group: str, dataset: str, step: int, version: int = 1) -> Path:
    """Path (relative to the data root) of the file holding *dataset* at *step*.

    *run_dir* is the run's directory relative to the data root. At level 1 each version
    of a step has a file of its own (an overwrite never touches the bytes it replaces):
    ``group.dataset.sSTEP.sdm``, then ``group.dataset.sSTEP.vN.sdm``.
    """
    base = Path(run_dir)
    g = component(group)
    if level == 1:
        v = "" if version == 1 else f".v{version}"
        return base / f"{g}.{component(dataset)}.s{step:08d}{v}.sdm"
    if level == 2:
        return base / f"{g}.{component(dataset)}.sdm"
    return base / f"{g}.sdm"


def appends(level: int) -> bool:
    """Whether several writes share one file at this level."""
    return level != 1
