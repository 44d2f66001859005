"""Ranks that enter different SDM operations fail together, at once, instead of hanging.

Every collective operation begins with the same fixed-size exchange naming the operation
and the session's call number (:mod:`sdm.engine.operations`). Each case here makes one
rank call one operation while the others call another (``if rank == 0: g.write(...)``
and the like) and expects, on every rank, the same ``CollectiveMismatchError`` naming what
each rank called; then the session refuses further calls, closes without waiting for
anybody, leaves its run ``interrupted`` and every step committed before reads back equal
to the array numpy built.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np
import pytest
import sdm
from sdm.layout.agreement import ranks_text

SHAPE = (8, 6)
APP = "misuse"


def _expected(step: int) -> np.ndarray:
    return np.arange(np.prod(SHAPE), dtype="f8").reshape(SHAPE) + 1000 * step


def _open(comm, root) -> tuple[Any, Any]:
    s = sdm.open(APP, root=root, catalog=f"sqlite:///{root}/cat.db")
    g = s.make_group("g", ["T"], dtype="f8", shape=SHAPE, level=3)
    g2 = s.make_group("h", ["U"], dtype="f8", shape=SHAPE, level=3)
    g.write("T", 0, _mine(g, "T", 0))
    return s, g, g2


def _mine(g, name: str, step: int) -> np.ndarray:
    """This rank's piece of the step's global array, cut from numpy's array by the piece's global indices."""
    return _expected(step)[np.ix_(*g.piece(name).indices)]


# what one side calls, and a text the mismatch's message must show for it
OPS: dict[str, tuple[Callable[[Any, Any, Any], Any], str]] = {
    "write": (lambda s, g, g2: g.write("T", 7, _mine(g, "T", 7)), "Group.write('T', 7"),
    "read": (lambda s, g, g2: g.read("T", 0), "Group.read('T', 0)"),
    "close": (lambda s, g, g2: s.close(), "Session.close()"),
    "make_group": (lambda s, g, g2: s.make_group("k", ["x"], dtype="f4", shape=(4,)), "Session.make_group('k'"),
    "set_attributes": (lambda s, g, g2: s.set_attributes(case="x"), "Session.set_attributes(case='x')"),
    "group_attributes": (lambda s, g, g2: g.set_attributes(b=2), "Group.set_attributes(b=2)"),
    "truncate": (lambda s, g, g2: s.truncate(0), "Session.truncate(0)"),
    "data_view": (lambda s, g, g2: g.data_view(sdm.Cyclic()), "Group.data_view("),
    "set_info": (lambda s, g, g2: s.set_info("i", np.arange(3)), "Session.set_info('i'"),
    "find": (lambda s, g, g2: s.find(), "Session.find()"),
}
PAIRS = [(a, b) for a in OPS for b in OPS if a != b]
# every pair runs at 2 and 4 ranks; at 3 ranks the pairs with a write, a read or a close on one side, and
# at more ranks (oversubscribed in CI) the classic mistakes only: the suite stays within its time
COMMON = {(a, b) for a, b in PAIRS if a in ("write", "close", "read") or b in ("write", "close")}
CLASSIC = {("write", "close"), ("close", "write"), ("write", "read"), ("read", "write"), ("set_attributes", "close")}


def _same_everywhere(comm, err: BaseException) -> str:
    seen = comm.allgather((type(err).__name__, str(err)))
    assert len(set(seen)) == 1, seen
    return str(err)


def _check_kept(comm, root) -> None:
    """The run is interrupted and step 0 reads back equal to numpy's array (a new session, all ranks)."""
    with sdm.open(APP, "r", root=root, catalog=f"sqlite:///{root}/cat.db", run=1) as r:
        assert r.previous_state == "interrupted"
        g = r.group("g")
        got = g.read("T", 0, verify=True)
        np.testing.assert_array_equal(got, _mine(g, "T", 0))
        assert g.steps("T") == [0]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("first,others", PAIRS, ids=[f"{a}-vs-{b}" for a, b in PAIRS])
def test_different_operations_fail_together(comm, mpi_tmp, first, others):
    if comm.Get_size() == 1:
        pytest.skip("needs two ranks to disagree")
    if comm.Get_size() == 3 and (first, others) not in COMMON:
        pytest.skip("every pair runs at 2 and 4 ranks")
    if comm.Get_size() > 4 and (first, others) not in CLASSIC:
        pytest.skip("every pair runs at 2 and 4 ranks")
    s, g, g2 = _open(comm, mpi_tmp)
    mine = first if comm.Get_rank() == 0 else others
    t0 = time.monotonic()
    with pytest.raises(sdm.CollectiveMismatchError) as info:
        OPS[mine][0](s, g, g2)
    seconds = time.monotonic() - t0
    text = _same_everywhere(comm, info.value)
    assert "ranks entered different SDM operations" in text
    assert f"rank 0: {OPS[first][1]}" in text
    rest = ranks_text(list(range(1, comm.Get_size())))  # "rank 1", "ranks 1, 2", "ranks 1-3"
    assert f"{rest}: {OPS[others][1]}" in text
    assert seconds < 30, seconds  # found by the opening exchange, not by a timeout
    # the session is broken on every rank alike: a later call is refused at once, close is local
    with pytest.raises(sdm.CollectiveMismatchError, match="can no longer make collective calls"):
        g.read("T", 0)
    s.close()
    with pytest.raises(sdm.CollectiveMismatchError, match="can no longer make collective calls"):
        g.read("T", 0)
    _check_kept(comm, mpi_tmp)


@pytest.mark.timeout(60)
def test_a_closed_session_refuses_calls(comm, mpi_tmp):
    s, g, g2 = _open(comm, mpi_tmp)
    s.close()
    with pytest.raises(sdm.errors.RunStateError, match="this SDM session is closed"):
        g.read("T", 0)
    with pytest.raises(sdm.errors.RunStateError, match="this SDM session is closed"):
        s.set_attributes(a=1)
    s.close()  # closing twice is harmless


@pytest.mark.timeout(60)
def test_the_last_rank_alone_writes(comm, mpi_tmp):
    if comm.Get_size() == 1:
        pytest.skip("needs two ranks to disagree")
    s, g, g2 = _open(comm, mpi_tmp)
    last = comm.Get_size() - 1
    with pytest.raises(sdm.CollectiveMismatchError) as info:
        with s:
            if comm.Get_rank() == last:
                OPS["write"][0](s, g, g2)
    text = _same_everywhere(comm, info.value)
    assert f"rank {last}: Group.write('T', 7" in text and "Session.close()" in text
    _check_kept(comm, mpi_tmp)


@pytest.mark.timeout(60)
def test_different_groups_fail_together(comm, mpi_tmp):
    if comm.Get_size() == 1:
        pytest.skip("needs two ranks to disagree")
    s, g, g2 = _open(comm, mpi_tmp)
    target, name = (g, "T") if comm.Get_rank() == 0 else (g2, "U")
    with pytest.raises(sdm.CollectiveMismatchError, match="ranks made different write calls") as info:
        target.write(name, 3, _mine(target, name, 3))
    _same_everywhere(comm, info.value)
    # the same operation with other arguments: refused, and the session stays usable
    g.write("T", 3, _mine(g, "T", 3))
    s.close()
    with sdm.open(APP, "r", root=mpi_tmp, catalog=f"sqlite:///{mpi_tmp}/cat.db", run=1) as r:
        assert r.previous_state == "closed"
        assert r.group("g").steps("T") == [0, 3] and r.group("h").steps("U") == []
        np.testing.assert_array_equal(r.group("g").read("T", 3, verify=True), _mine(r.group("g"), "T", 3))


@pytest.mark.timeout(60)
def test_an_error_on_every_rank_closes_the_session(comm, mpi_tmp):
    s, g, g2 = _open(comm, mpi_tmp)
    with pytest.raises(ValueError, match="the application's own"):
        with s:
            raise ValueError("the application's own error")
    with sdm.open(APP, "r", root=mpi_tmp, catalog=f"sqlite:///{mpi_tmp}/cat.db", run=1) as r:
        assert r.previous_state == "closed"


@pytest.mark.timeout(60)
def test_an_interrupt_on_every_rank_leaves_the_run_interrupted(comm, mpi_tmp):
    s, g, g2 = _open(comm, mpi_tmp)
    with pytest.raises(KeyboardInterrupt):
        with s:
            raise KeyboardInterrupt
    _check_kept(comm, mpi_tmp)
