"""The cost of a read-only session, counted in SQL statements, and what its cached lookups show.

A reading session's catalog work is a budget (see DESIGN.md): opening a run by
attributes, looking up a group and indexing a box of one of its datasets makes a fixed,
small number of statements on rank 0 (none elsewhere), whatever the box. What a reading
session caches is documented in :meth:`sdm.Session.group`: a group is read from the
catalog at its first lookup and kept for the session, so its step lists (and the first
axis of its lazy arrays) stay what they were (a new session shows steps written since);
``group.read`` of one step looks that step up, and a group defined later is found when it
is looked up.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import numpy as np
import sqlalchemy as sa

import sdm
from sdm.catalog import reader

N = 24
#: Statements rank 0 makes to open a run read-only by attributes ("latest"), look up a group,
#: index a box of one dataset and close (BEGINs included); 23 before the read path was trimmed,
#: 20 before it ran as SQL text on the driver's connection (sdm.catalog.reader).
STATEMENT_BUDGET = 19


def _values(step: int, scale: float) -> np.ndarray:
    """The values of a dataset at *step*, built with numpy alone."""
    return (np.arange(N ** 3, dtype="<f8").reshape(N, N, N) + 1000.0 * step) * scale


@contextmanager
def _counted() -> Iterator[list[str]]:
    """Every SQL statement this process sends meanwhile: through any engine, and on the lean read path."""
    seen: list[str] = []

    def count(conn, cursor, statement, parameters, context, executemany):  # noqa: ANN001
        seen.append(statement)

    sa.event.listen(sa.engine.Engine, "before_cursor_execute", count)
    reader.TRACE.append(seen.append)
    try:
        yield seen
    finally:
        reader.TRACE.remove(seen.append)
        sa.event.remove(sa.engine.Engine, "before_cursor_execute", count)


def _block(comm) -> tuple[slice, ...]:
    """This rank's block of ``sdm.Block(grid=(size, 1, 1))`` (N is a multiple of 1 to 4 ranks)."""
    lo, hi = (N * comm.Get_rank()) // comm.Get_size(), (N * (comm.Get_rank() + 1)) // comm.Get_size()
    return (slice(lo, hi),)


def _view(comm) -> sdm.Block:
    return sdm.Block(grid=(comm.Get_size(), 1, 1))


def _write(comm, root, url, steps=(0, 1)) -> None:
    with sdm.open("serial", "w", comm=comm, root=str(root), catalog=url, attributes={"case": "box"}) as s:
        g = s.make_group("a", ["a0", "a1"], dtype="<f8", shape=(N, N, N), level=3, view=_view(comm))
        for step in steps:
            g.write_step(step, {"a0": _values(step, 1.0)[_block(comm)], "a1": _values(step, -2.0)[_block(comm)]})


def test_a_box_read_of_a_read_only_session_stays_in_its_statement_budget(comm, mpi_tmp):
    url = f"sqlite:///{mpi_tmp}/catalog.db"
    _write(comm, mpi_tmp, url)
    box = (1, slice(3, 17), slice(5, 20), slice(2, 23))
    for _ in range(2):  # the second time with the process's engine and statements made already
        with _counted() as seen:
            with sdm.open("serial", "r", comm=comm, catalog=url, attributes={"case": "box"}, run="latest") as s:
                got = s.group("a")["a0"][box]
        np.testing.assert_array_equal(got, _values(1, 1.0)[box[1:]])
        if comm.Get_rank() == 0:
            assert 0 < len(seen) <= STATEMENT_BUDGET, seen
        else:
            assert seen == []  # only rank 0 talks to the catalog


def test_a_second_box_of_the_same_dataset_array_in_one_process_makes_no_statement(comm, mpi_tmp):
    url = f"sqlite:///{mpi_tmp}/catalog.db"
    _write(comm, mpi_tmp, url)
    with sdm.open("serial", "r", comm=comm, catalog=url, run="latest") as s:
        a1 = s.group("a")["a1"]
        np.testing.assert_array_equal(a1[0, :4], _values(0, -2.0)[:4])
        with _counted() as seen:
            np.testing.assert_array_equal(a1[:, 7, 1:9, ::3], np.stack([_values(t, -2.0)[7, 1:9, ::3] for t in (0, 1)]))
            np.testing.assert_array_equal(s.group("a")["a0"].steps, [0, 1])  # the group is kept by the session
        if comm.Get_size() == 1:  # in one process the array's row lookup is kept (several ranks: a read per step)
            assert seen == []


def test_a_reading_session_keeps_what_it_looked_up_and_finds_groups_defined_later(comm, mpi_tmp):
    url = f"sqlite:///{mpi_tmp}/catalog.db"
    _write(comm, mpi_tmp, url)
    with sdm.open("serial", "r", comm=comm, catalog=url, run="latest") as reader:
        before = reader.group("a")
        assert before.steps("a0") == [0, 1]
        with sdm.open("serial", "a", comm=comm, catalog=url, run=reader.run_id) as writer:
            g = writer.group("a")
            g.data_view(_view(comm))
            g.write_step(2, {"a0": _values(2, 1.0)[_block(comm)], "a1": _values(2, -2.0)[_block(comm)]})
            b = writer.make_group("b", ["b0"], dtype="<i4", shape=(N,), level=1, view=sdm.Block(grid=(comm.Get_size(),)))
            b.write("b0", 0, (np.arange(N, dtype="<i4") * 7)[_block(comm)])
        # the group looked up before the writer's steps: the session's snapshot, unchanged
        assert reader.group("a") is before and before.steps("a0") == [0, 1]
        np.testing.assert_array_equal(reader.group("a")["a0"][-1], _values(1, 1.0))
        # an explicit read of a step looks up that step's row: what the writer committed is served
        before.data_view(_view(comm))
        np.testing.assert_array_equal(before.read("a0", 2), _values(2, 1.0)[_block(comm)])
        # a group defined after the session opened: looked up now, found with what it holds
        np.testing.assert_array_equal(reader.group("b")["b0"][0], np.arange(N, dtype="<i4") * 7)
    with sdm.open("serial", "r", comm=comm, catalog=url, run="latest") as fresh:  # a new session sees every step
        a0 = fresh.group("a")["a0"]
        np.testing.assert_array_equal(a0.steps, [0, 1, 2])
        np.testing.assert_array_equal(a0[2, 1:3], _values(2, 1.0)[1:3])
