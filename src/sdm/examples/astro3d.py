"""ASTRO3D application template (No, Thakur, Choudhary: sections 3.1 and 4.1.2).

A three-dimensional astrophysics code keeps its arrays block-distributed in every
dimension over a 3-D process grid and dumps three data groups:

=============  =============================  ======  ==================
group          datasets                       dtype   dumped every
=============  =============================  ======  ==================
analysis       ``a0`` .. ``a5`` (6 arrays)    f4      6 time steps
restart        ``c0`` .. ``c5`` (6 arrays)    f4      6 time steps
visualization  ``b0`` .. ``b6`` (7 arrays)    u1      4 time steps
=============  =============================  ======  ==================

Time steps run ``1 .. steps`` and a group is dumped at the steps that are multiples
of its period (12 steps: analysis and restart at 6 and 12, visualization at 4, 8, 12).
Every value is a pure function of (dataset name, step, global index) -- see
:func:`pattern` -- so any rank of any decomposition can regenerate what it reads.

Run it under MPI::

    mpiexec -n 4 python -m sdm.examples.astro3d --n 64 --steps 12 --level 3 --verify

The shared driver lives in :mod:`sdm.examples._template`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Sequence

from mpi4py import MPI

from ._template import GroupSpec, add_common_arguments, finish, run_template

__all__ = ["ASTRO3D_GROUPS", "astro3d_groups", "run", "main"]


def astro3d_groups(n: int) -> tuple[GroupSpec, ...]:
    """The three ASTRO3D groups for an ``n**3`` grid."""
    shape = (n, n, n)
    return (
        GroupSpec("analysis", tuple(f"a{i}" for i in range(6)), "f4", shape, 6),
        GroupSpec("restart", tuple(f"c{i}" for i in range(6)), "f4", shape, 6),
        GroupSpec("visualization", tuple(f"b{i}" for i in range(7)), "u1", shape, 4),
    )


ASTRO3D_GROUPS = astro3d_groups(64)


def run(
    comm: MPI.Comm,
    n: int = 64,
    steps: int = 12,
    level: int = 3,
    root: str | Path | None = None,
    catalog: str | None = None,
    verify: bool = False,
    **kwargs: Any,
) -> dict[str, Any]:
    """Run the ASTRO3D template on an ``n**3`` grid (collective).

    Parameters
    ----------
    comm : MPI.Comm
    n : int
        Grid edge.
    steps : int
        Time steps; analysis and restart are dumped every 6, visualization every 4.
    level, root, catalog, verify, **kwargs
        As for :func:`run_template` (``method``, ``read``, ``read_view``, ``ghosts``,
        ``sync``, ``progress``).

    Returns
    -------
    dict
        See :func:`run_template`.
    """
    return run_template(comm, "ASTRO3D", astro3d_groups(n), steps, level, root, catalog, verify,
                        attributes={"n": n, "steps": steps, "level": level}, problem_size=[n, n, n], **kwargs)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point (run under mpiexec)."""
    p = argparse.ArgumentParser(prog="python -m sdm.examples.astro3d", description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=64, help="grid edge (n x n x n)")
    p.add_argument("--steps", type=int, default=12, help="time steps")
    add_common_arguments(p)
    a = p.parse_args(argv)
    comm = MPI.COMM_WORLD
    result = run(comm, a.n, a.steps, a.level, a.root, a.catalog, a.verify, method=a.method,
                 read=not a.no_read, read_view=a.read_view, ghosts=a.ghosts, progress=not a.quiet)
    return finish(comm, result)


if __name__ == "__main__":
    sys.exit(main())
