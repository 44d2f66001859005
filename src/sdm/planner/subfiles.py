"""How many subfiles a write of a subfiled group uses (:mod:`sdm.storage.subfiles`), and why.

A group made with ``subfiles=K`` uses K (at most one extent per row of the slowest
dimension). With ``subfiles="auto"`` the planner decides per write from what every rank
knows alike:

* one rank: one shared file (a single writer has nobody to contend with);
* fewer than ``sdm_subfile_min`` bytes per rank (default 1 MiB): one shared file, since
  each extent costs a file's metadata, a catalog row and a sync, which small pieces do not
  repay;
* otherwise one subfile per rank (``sdm_subfiles_per_node``: that many per node instead,
  e.g. 1 for one file per node or the number of aggregators on a cluster), so that each
  rank writes its own file: no two writers share a file's locks, as file-per-process
  output, and a block distribution along the slowest dimension moves no byte between
  ranks.

The reason, with the bytes per rank, the ranks per node and the file system, is what the
step's catalog row records.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..io._support import int_hint

__all__ = ["MIN_BYTES", "choose_subfiles"]

MIN_BYTES = 1 << 20  #: bytes per rank below which "auto" keeps one shared file (hint ``sdm_subfile_min``)


def _size(nbytes: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{int(nbytes)} B"


def choose_subfiles(requested: int, nbytes: int, nprocs: int, nodes: int, hints: Mapping[str, Any],
                    fs: str = "") -> tuple[int, str]:
    """``(K, reason)`` for one dataset step; K = 0 means one shared file.

    Parameters
    ----------
    requested : int
        The group's ``subfiles``: K, or 0 for ``"auto"``.
    nbytes : int
        The step's bytes.
    nprocs, nodes : int
        Ranks of the communicator and the nodes they run on.
    hints : mapping
        ``sdm_subfile_min``, ``sdm_subfiles_per_node``.
    fs : str
        The file system's type (for the reason only).

    Raises
    ------
    HintError
        A hint that is not a positive integer.
    """
    where = f" on {fs}" if fs else ""
    per_rank = nbytes / max(nprocs, 1)
    if requested > 0:
        return requested, f"subfiles={requested} (the group's){where}, {_size(per_rank)} per rank"
    minimum = int_hint(dict(hints), "sdm_subfile_min", MIN_BYTES)
    per_node = int_hint(dict(hints), "sdm_subfiles_per_node", 0, minimum=0)
    if nprocs == 1:
        return 0, f"auto: one shared file (one rank{where})"
    if per_rank < minimum:
        return 0, (f"auto: one shared file ({_size(per_rank)} per rank < sdm_subfile_min {_size(minimum)}: small "
                   f"pieces do not repay a file, a catalog row and a sync each{where})")
    if per_node:
        k = min(per_node * nodes, nprocs)
        return k, (f"auto: {k} subfiles (sdm_subfiles_per_node={per_node} on {nodes} node(s); {_size(per_rank)} per "
                   f"rank{where})")
    return nprocs, (f"auto: one subfile per rank ({nprocs} ranks on {nodes} node(s), {_size(per_rank)} per rank >= "
                    f"{_size(minimum)}{where}: no two writers share a file)")
