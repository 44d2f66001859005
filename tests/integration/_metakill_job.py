"""The MPI job of test_metafile_kill.py (started by ``benchmarks/_mpijob.Job`` with a JSON of ``root`` and
``url``): writes steps of one field until it is killed.

Step ``k`` of ``T`` (8 x 5, float64, level 3) is :func:`reference` ``(k)``; the test kills the
job and checks every row against that formula with numpy.
"""

from __future__ import annotations

import json
import sys

import numpy as np

import sdm

SHAPE = (8, 5)
MAX_STEPS = 100_000


def reference(step: int) -> np.ndarray:
    return np.arange(np.prod(SHAPE), dtype="<f8").reshape(SHAPE) + 1000.0 * step


def write(root: str, url: str) -> None:
    with sdm.open("metakill", root=root, catalog=url, sync=True) as s:
        g = s.make_group("fields", ["T"], dtype="<f8", shape=SHAPE, level=3)
        p = g.piece("T")
        for step in range(MAX_STEPS):
            g.write("T", step, np.ascontiguousarray(reference(step)[np.ix_(*p.indices)]))


if __name__ == "__main__":
    cfg = json.loads(sys.argv[1])
    write(cfg["root"], cfg["url"])
