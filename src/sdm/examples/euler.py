"""Euler solver template (No, Thakur, Choudhary: section 4.1.3).

A 3-D Euler solver for transonic flow about an M6 wing on a ``194 x 34 x 34`` mesh runs
50 iterations and writes at every 5th (10 dumps) two data groups:

========  ===================================  ==========================  ======
group     datasets                             shape                       dtype
========  ===================================  ==========================  ======
grid      ``x``, ``y``, ``z``, ``pressure``    ``(nx, ny, nz)``            f8
solution  ``q``, ``residual``                  ``(nx, ny, nz, 5)``         f8
========  ===================================  ==========================  ======

``q`` and ``residual`` hold five components per mesh node (density, energy, three
momenta).  The mesh is block-distributed over a 3-D process grid (like a PETSc DMDA);
the component axis is never split.  Six datasets x ten dumps give 60 files at level 1,
6 at level 2 and 2 at level 3.

Run it under MPI::

    mpiexec -n 4 python -m sdm.examples.euler --level 1 --verify
    mpiexec -n 4 python -m sdm.examples.euler --shape 20 8 8 --level 3
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Sequence

from mpi4py import MPI

from ._template import GroupSpec, add_common_arguments, finish, run_template

__all__ = ["SHAPE", "COMPONENTS", "euler_groups", "run", "main"]

SHAPE = (194, 34, 34)
COMPONENTS = 5


def euler_groups(shape: Sequence[int] = SHAPE, every: int = 5) -> tuple[GroupSpec, ...]:
    """The paper's two Euler groups for a mesh of *shape*, dumped every *every* iterations."""
    mesh = tuple(int(s) for s in shape)
    return (
        GroupSpec("grid", ("x", "y", "z", "pressure"), "f8", mesh, every, split=3),
        GroupSpec("solution", ("q", "residual"), "f8", (*mesh, COMPONENTS), every, split=3),
    )


def run(
    comm: MPI.Comm,
    shape: Sequence[int] = SHAPE,
    iterations: int = 50,
    level: int = 3,
    root: str | Path | None = None,
    catalog: str | None = None,
    verify: bool = False,
    *,
    every: int = 5,
    **kwargs: Any,
) -> dict[str, Any]:
    """Run the Euler template (collective).

    Parameters
    ----------
    comm : MPI.Comm
    shape : sequence of int
        Mesh size (default the paper's ``194 x 34 x 34``).
    iterations : int
        Solver iterations ``1 .. iterations``.
    level, root, catalog, verify
        As for :func:`sdm.examples.astro3d.run_template`.
    every : int
        Dump period (iterations).
    **kwargs
        ``method``, ``read``, ``read_view``, ``ghosts``, ``sync``, ``progress``.

    Returns
    -------
    dict
        See :func:`sdm.examples.astro3d.run_template`.
    """
    mesh = [int(s) for s in shape]
    return run_template(comm, "Euler", euler_groups(mesh, every), iterations, level, root, catalog, verify,
                        attributes={"mesh": "x".join(map(str, mesh)), "iterations": iterations, "level": level},
                        problem_size=mesh, **kwargs)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point (run under mpiexec)."""
    p = argparse.ArgumentParser(prog="python -m sdm.examples.euler", description=__doc__.splitlines()[0])
    p.add_argument("--shape", type=int, nargs=3, default=list(SHAPE), metavar=("NX", "NY", "NZ"),
                   help="mesh size (default 194 34 34)")
    p.add_argument("--iterations", type=int, default=50, help="solver iterations")
    p.add_argument("--every", type=int, default=5, help="dump period in iterations")
    add_common_arguments(p)
    a = p.parse_args(argv)
    comm = MPI.COMM_WORLD
    result = run(comm, a.shape, a.iterations, a.level, a.root, a.catalog, a.verify, every=a.every,
                 method=a.method, read=not a.no_read, read_view=a.read_view, ghosts=a.ghosts,
                 progress=not a.quiet)
    return finish(comm, result)


if __name__ == "__main__":
    sys.exit(main())
