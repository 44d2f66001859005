"""The catalog work of a step does not grow with the run: SQL statements per step, first steps against last.

A run writes many small steps (``write_step`` of two datasets, level 3). Rank 0's SQL
statements are counted step by step (an ``executemany`` once, BEGIN and COMMIT included);
the steps near the end of the run make no more statements than the first ones (the
space reserved ahead in chunks may put a reservation in any window, so the median and
the total of a window are compared, and the most any step makes). The other ranks make
none. Every step's bytes are then read back and compared with arrays built with numpy.
"""

from __future__ import annotations

import numpy as np
import pytest
import sqlalchemy as sa

import sdm

STEPS, WINDOW, LENGTH = 600, 100, 64


def _values(step: int, which: int) -> np.ndarray:
    """The whole dataset *which* at *step*, built with numpy alone."""
    return np.arange(LENGTH, dtype="<f8") * (which + 1) + 1000.0 * step


def test_statements_per_step_stay_flat_as_the_run_grows(comm, mpi_tmp):
    if comm.Get_size() > 4:  # rank 0's statements do not depend on the rank count (the suite's time budget)
        pytest.skip("runs at 1-4 ranks")
    url = f"sqlite:///{mpi_tmp}/catalog.db"
    per_step = np.zeros(STEPS, dtype=np.int64)
    seen = [0]

    def count(*args):  # noqa: ANN002
        seen[0] += 1

    sa.event.listen(sa.engine.Engine, "before_cursor_execute", count)
    try:
        with sdm.open("flat", "w", comm=comm, root=str(mpi_tmp), catalog=url) as s:
            g = s.make_group("g", ["a", "b"], dtype="<f8", shape=(LENGTH,), level=3)
            mine = np.array_split(np.arange(LENGTH), comm.size)[comm.rank]  # Block: the first ranks take the rest
            lo, hi = (int(mine[0]), int(mine[-1]) + 1) if mine.size else (0, 0)
            assert g.local_shape("a") == (hi - lo,)
            for step in range(STEPS):
                before = seen[0]
                g.write_step(step, {"a": _values(step, 0)[lo:hi], "b": _values(step, 1)[lo:hi]})
                per_step[step] = seen[0] - before
            run = s.run_id
    finally:
        sa.event.remove(sa.engine.Engine, "before_cursor_execute", count)
    if comm.rank == 0:
        first, last = per_step[1:WINDOW + 1], per_step[-WINDOW:]
        assert first.min() >= 1  # every step is committed by rank 0
        assert np.median(last) <= np.median(first), (first.tolist(), last.tolist())
        assert last.sum() <= first.sum(), (first.tolist(), last.tolist())
        assert last.max() <= first.max(), (first.tolist(), last.tolist())
    else:
        assert per_step.sum() == 0  # only rank 0 talks to the catalog
    with sdm.open("flat", "r", comm=comm, catalog=url, run=run) as s:
        g = s.group("g")
        assert list(g.steps("a")) == list(range(STEPS))
        for step in (0, 1, STEPS // 2, STEPS - 1):
            for which, name in enumerate("ab"):
                np.testing.assert_array_equal(g.read(name, step, verify=True), _values(step, which)[lo:hi])
