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

Every dataset is a density field of its own (:func:`density`): a smooth random
background of plane waves carried by a bulk flow, and a few clumps that drift and
collapse (their peaks grow, their mean mass too), so a slice shows structure, a point
changes as the waves pass and the mean and maximum grow with time. It is a pure
function of (dataset name, step, global index) -- its parameters come from a generator
seeded by the name alone -- so any rank of any decomposition regenerates what it reads,
and ``--verify`` compares every value read with it.

Run it under MPI::

    mpiexec -n 4 python -m sdm.examples.astro3d --n 64 --steps 12 --level 3 --verify

The shared driver lives in :mod:`sdm.examples._template`.
"""

from __future__ import annotations

import argparse
import cmath
import math
import sys
import zlib
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from mpi4py import MPI

from ._template import GroupSpec, add_common_arguments, finish, run_template

__all__ = ["ASTRO3D_GROUPS", "astro3d_groups", "density", "field_parameters", "WAVES", "CLUMPS", "FLOW",
           "BACKGROUND", "GROWTH", "BYTE_SCALE", "run", "main"]

#: Plane waves of each dataset's background, and clumps on it
WAVES, CLUMPS = 10, 6
#: The bulk flow that carries the background, in boxes per step, per dimension
FLOW = (0.011, 0.007, -0.013)
#: The background's amplitude around the mean density 1
BACKGROUND = 0.45
#: Steps over which a clump's collapse factor ``g = 1 + step / GROWTH`` grows by one
GROWTH = 12.0
#: Integer datasets hold ``floor(BYTE_SCALE * density)``, at most 255
BYTE_SCALE = 50.0


def field_parameters(name: str) -> dict[str, np.ndarray]:
    """The waves and clumps of dataset *name*, drawn from ``numpy.random.default_rng(crc32(name))``.

    In this order: ``u = rng.random((WAVES, 4))`` gives each wave its wave vector
    ``k = floor(7 u[:, :3]) - 3`` (each component -3..3; ``(1, 0, 0)`` for the zero
    vector), its phase ``2 pi u[:, 3]`` and its amplitude ``|k|**-1.5``, scaled so that the
    amplitudes add up to 1; then ``c = rng.random((CLUMPS, 6))`` gives each clump its
    centre at step 0 ``c[:, :3]``, its own drift ``0.04 (c[:, 3:] - 0.5)`` boxes per step,
    and ``d = rng.random((CLUMPS, 2))`` its width ``0.06 + 0.05 d[:, 0]`` (boxes) and peak
    ``0.3 + 0.5 d[:, 1]`` at step 0.
    """
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    u = rng.random((WAVES, 4))
    k = np.floor(7 * u[:, :3]) - 3
    k[~k.any(axis=1)] = (1, 0, 0)
    amplitude = np.sqrt((k ** 2).sum(axis=1)) ** -1.5
    c = rng.random((CLUMPS, 6))
    d = rng.random((CLUMPS, 2))
    return {"k": k, "phase": 2 * np.pi * u[:, 3], "amplitude": amplitude / amplitude.sum(), "centre": c[:, :3],
            "drift": 0.04 * (c[:, 3:] - 0.5), "width": 0.06 + 0.05 * d[:, 0], "peak": 0.3 + 0.5 * d[:, 1]}


def density(name: str, step: int, indices: Sequence[np.ndarray], shape: Sequence[int], dtype: Any) -> np.ndarray:
    """The density of dataset *name* at *step* on the box ``indices`` of a 3-D array of *shape*.

    At the point ``x = index / shape`` (boxes, periodic) and step ``t``::

        1 + BACKGROUND * sum_w a_w cos(2 pi k_w . (x - FLOW t) + phase_w)
          + sum_c peak_c g**2 exp(-|x - centre_c - (FLOW + drift_c) t|**2 g / (2 width_c**2))

    with ``g = 1 + t / GROWTH`` (distances to the nearest periodic image; see
    :func:`field_parameters`); integers hold ``floor(BYTE_SCALE * density)``, at most 255.

    Every value depends on its own global index alone: each wave and clump is a product
    of one factor per dimension, evaluated in float64 (with :mod:`math`, once per index of
    the whole axis), and the products and sums are made in float32, element by element
    in one order, so any decomposition computes the very same numbers (within a few
    float32 roundings of the formula).
    """
    p = field_parameters(name)
    t = float(step)
    g = 1.0 + t / GROWTH
    counts = tuple(len(i) for i in indices)
    out = np.ones(counts, dtype=np.float32)
    axes = [[i / float(n) for i in range(int(n))] for n in shape]

    def picked(values: list[complex] | list[float], d: int) -> np.ndarray:
        kind = np.complex64 if isinstance(values[0], complex) else np.float32
        return np.asarray(values, dtype=kind)[np.asarray(indices[d], dtype=np.int64)]

    for w in range(WAVES):
        k = p["k"][w]
        lead = BACKGROUND * p["amplitude"][w] * cmath.exp(1j * (p["phase"][w] - 2 * math.pi * t * float(k @ FLOW)))
        x, y, z = (picked([cmath.exp(2j * math.pi * float(k[d]) * v) * (lead if d == 0 else 1) for v in axes[d]], d)
                   for d in range(3))
        plane = x[:, None] * y[None, :]
        out += plane.real[:, :, None] * z.real[None, None, :] - plane.imag[:, :, None] * z.imag[None, None, :]
    for c in range(CLUMPS):
        sigma2 = 2 * float(p["width"][c]) ** 2 / g
        centre = [(float(p["centre"][c][d]) + (FLOW[d] + float(p["drift"][c][d])) * t) % 1.0 for d in range(3)]
        x, y, z = (picked([math.exp(-(((v - centre[d] + 0.5) % 1.0) - 0.5) ** 2 / sigma2) for v in axes[d]], d)
                   for d in range(3))
        out += (np.float32(p["peak"][c] * g * g) * x)[:, None, None] * y[None, :, None] * z[None, None, :]
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return out.astype(dt)
    return np.minimum(np.floor(np.float32(BYTE_SCALE) * out), 255).astype(dt)


def astro3d_groups(n: int) -> tuple[GroupSpec, ...]:
    """The three ASTRO3D groups for an ``n**3`` grid (values: :func:`density`)."""
    shape = (n, n, n)
    return (
        GroupSpec("analysis", tuple(f"a{i}" for i in range(6)), "f4", shape, 6, values=density),
        GroupSpec("restart", tuple(f"c{i}" for i in range(6)), "f4", shape, 6, values=density),
        GroupSpec("visualization", tuple(f"b{i}" for i in range(7)), "u1", shape, 4, values=density),
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
