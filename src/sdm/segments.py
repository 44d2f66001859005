"""Segments (PDS): group kinds, truncation of a run's steps and the file space it gives back.

A group is of kind ``"state"`` (written every step: fields, diagnostics; the default) or
``"topology"`` (written once or rarely: a mesh, its connectivity); PDS keeps both kinds
of segments in one time index. :meth:`Group.step_at` finds the topology in effect at a
state step (the last one written at or before it).

Order of steps: SDM refuses a second write of a step unless ``overwrite=True`` (which
replaces it, in fresh space), and after ``Session.truncate(after_step=k)`` a new step
of a truncated group must be greater than ``k``: the run continues from ``k``, as PDS's
"segments are written in increasing time order" and "modified only by erasing all
segments following a selected one". Otherwise new steps may come in any order (a
post-processing pass may fill in steps later), for state and topology groups alike.

Truncation (:meth:`sdm.Session.truncate`, ``sdm truncate``) is decided by one catalog
transaction (:meth:`sdm.catalog.Catalog.truncate`); only after its commit are files
deleted or their tails cut (:func:`release_space`), so a crash leaves either the old
state or the new one plus unreferenced bytes, which ``sdm verify`` lists and ``sdm gc``
reclaims. Every file given back must lie inside the run's own directory
(:mod:`sdm.storage.confine`), checked in the transaction (a path elsewhere refuses the
whole truncation) and again before a file is changed. No MPI here: the ``sdm`` command
uses it too.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from .catalog.records import Truncation
from .errors import InvalidArgumentError
from .storage.confine import confine

__all__ = ["KINDS", "check_kind", "release_space"]

#: Group kinds (``groups.kind``).
KINDS = ("state", "topology")


def check_kind(kind: object) -> str:
    """Return *kind* if it is a group kind.

    Raises
    ------
    InvalidArgumentError
        Not ``"state"`` or ``"topology"``.
    """
    if not isinstance(kind, str) or kind not in KINDS:
        raise InvalidArgumentError(f"group kind must be 'state' or 'topology', got {kind!r}")
    return kind


def release_space(root: Path, done: Truncation, rel_dir: str) -> Truncation:
    """Delete the files a committed truncation emptied and cut the tails it freed.

    Called after the catalog commit (never before: a crash in between must leave rows
    over whole bytes). A file that cannot be changed is left as it is and named in
    the result's ``left`` (its bytes are unreferenced: ``sdm gc`` reclaims them).
    Every path is confined to the run's directory *rel_dir* first
    (:func:`sdm.storage.confine.confine`; the catalog transaction checked them
    already, this sees a link put in place since).

    Returns
    -------
    Truncation
        *done* with ``left`` filled in.

    Raises
    ------
    IntegrityError
        A path lies outside the run's directory (nothing is deleted or cut).
    """
    record = f"run {done.run_id}'s truncation after step {done.after_step}"
    removed = [confine(root, rel_dir, rel, record) for rel in done.removed_files]
    cut = [(rel, confine(root, rel_dir, rel, record), end) for rel, end in done.cut_files]
    left = []
    for rel, path in zip(done.removed_files, removed):
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            left.append(f"{rel}: not deleted ({exc.strerror})")
    for rel, path, end in cut:
        try:
            if path.exists() and path.stat().st_size > end:
                os.truncate(path, end)
        except OSError as exc:
            left.append(f"{rel} bytes from {end}: not cut ({exc.strerror})")
    return replace(done, left=tuple(left))
