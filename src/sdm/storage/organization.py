"""File organization levels 1-3 (No, Thakur, Choudhary, section 3.1.3).

==========  =================================================================  =====================
level       files                                                              name
==========  =================================================================  =====================
1           one file per dataset and time step                                 ``group.dataset.sSTEP``
2           one file per dataset; time steps appended                          ``group.dataset``
3           one file per group; every dataset and time step appended           ``group``
==========  =================================================================  =====================

Appended data goes to the first free byte after the last *recorded* write of the
file, so bytes left by a crash before the catalog commit are simply overwritten.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import InvalidArgumentError
from .naming import component, run_dir

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


def relative_path(application: str, run_id: int, level: int, group: str, dataset: str, step: int) -> Path:
    """Path (relative to the data root) of the file holding *dataset* at *step*."""
    base = run_dir(application, run_id)
    g = component(group)
    if level == 1:
        return base / f"{g}.{component(dataset)}.s{step:08d}.sdm"
    if level == 2:
        return base / f"{g}.{component(dataset)}.sdm"
    return base / f"{g}.sdm"


def appends(level: int) -> bool:
    """Whether several writes share one file at this level."""
    return level != 1
