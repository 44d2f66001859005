"""File organization levels 1-3 (No, Thakur, Choudhary, section 3.1.3).

==========  =================================================================  =====================
level       files                                                              name
==========  =================================================================  =====================
1           one file per dataset and time step                                 ``group.dataset.sSTEP``
2           one file per dataset; time steps appended                          ``group.dataset``
3           one file per group; every dataset and time step appended           ``group``
==========  =================================================================  =====================

With ``steps_per_file=n`` (levels 2 and 3) a file holds the steps ``i*n .. i*n + n - 1``
and its name says which: ``group.dataset.sFIRST-LAST.sdm`` and ``group.sFIRST-LAST.sdm``
(steps written with 8 digits at least, like level 1's, so the names sort by step).

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

__all__ = ["LEVELS", "check_level", "check_steps_per_file", "relative_path", "appends"]

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


def check_steps_per_file(steps_per_file: object, level: int) -> int | None:
    """Return *steps_per_file* as an int (or None: one file for every step).

    Raises
    ------
    InvalidArgumentError
        Not a positive integer, or given at level 1 (a file per step already).
    """
    if steps_per_file is None:
        return None
    if (isinstance(steps_per_file, (bool, np.bool_)) or not isinstance(steps_per_file, (int, np.integer))
            or int(steps_per_file) < 1):
        raise InvalidArgumentError(f"steps_per_file must be a positive integer, got {steps_per_file!r}")
    if level == 1:
        raise InvalidArgumentError(
            "steps_per_file applies to levels 2 and 3 (steps appended to a file); level 1 writes a file per step already"
        )
    return int(steps_per_file)


def relative_path(run_dir: str | Path, level: int, group: str, dataset: str, step: int, version: int = 1,
                  steps_per_file: int | None = None) -> Path:
    """Path (relative to the data root) of the file holding *dataset* at *step*.

    *run_dir* is the run's directory relative to the data root. At level 1 each version
    of a step has a file of its own (an overwrite never touches the bytes it replaces):
    ``group.dataset.sSTEP.sdm``, then ``group.dataset.sSTEP.vN.sdm``. At levels 2 and 3
    with *steps_per_file* ``n``, the file of the steps ``i*n .. i*n + n - 1`` that holds
    *step*: ``group.dataset.sFIRST-LAST.sdm`` or ``group.sFIRST-LAST.sdm``.
    """
    base = Path(run_dir)
    g = component(group)
    if level == 1:
        v = "" if version == 1 else f".v{version}"
        return base / f"{g}.{component(dataset)}.s{step:08d}{v}.sdm"
    stem = f"{g}.{component(dataset)}" if level == 2 else g
    if steps_per_file:
        first = step // steps_per_file * steps_per_file
        stem += f".s{first:08d}-{first + steps_per_file - 1:08d}"
    return base / f"{stem}.sdm"


def appends(level: int) -> bool:
    """Whether several writes share one file at this level."""
    return level != 1
