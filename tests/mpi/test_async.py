"""Nonblocking dumps (``write(..., wait=False)``, ``write_step(..., wait=False)``, ``sdm.open(asynchronous=True)``).

Every array written is built here with numpy from the step number alone; each rank's piece is cut from it by the
piece's global indices. The caller overwrites its own array right after each call: what is read back (in the same
session, which waits for the dumps first, and in a new one) must equal what was passed at call time.
"""

from __future__ import annotations

import sqlite3
import time

import numpy as np
import pytest
import sdm
from mpi4py import MPI
from sdm._validate import MAX_INT
from sdm.engine import background
from sdm.errors import DumpCancelledError, InvalidArgumentError, LocalArrayError, StepExistsError

SHAPE = (9, 5)  # uneven for 2..4 ranks
APP = "async"
RANK0 = " [rank 0]" if MPI.COMM_WORLD.Get_size() > 1 else ""
KINDS = [("raw", 1), ("raw", 2), ("raw", 3), ("compressed", 1), ("compressed", 2), ("compressed", 3),
         ("subfiled", 2), ("subfiled", 3)]


def _global(step: int, name: str = "T") -> np.ndarray:
    """The global array of *name* at *step*: every value differs between steps and datasets."""
    base = np.arange(np.prod(SHAPE), dtype="f8").reshape(SHAPE) * 0.25
    return base + 1000.0 * step + (0.5 if name == "U" else 0.0)


def _mine(g, name: str, step: int) -> np.ndarray:
    return _global(step, name)[np.ix_(*g.piece(name).indices)]


def _url(root) -> str:
    return f"sqlite:///{root}/cat.db"


def _open(root, **kw):
    return sdm.open(APP, root=root, catalog=_url(root), **kw)


def _group(s, kind: str, level: int, names=("T",)):
    extra = {"compression": "zstd"} if kind == "compressed" else {"subfiles": 2} if kind == "subfiled" else {}
    return s.make_group("g", list(names), dtype="f8", shape=SHAPE, level=level, **extra)


def _same_everywhere(comm, err: BaseException) -> str:
    seen = comm.allgather((type(err).__name__, str(err)))
    assert len(set(seen)) == 1, seen
    return str(err)


def _rows(comm, root) -> int:
    """Rows of the catalog's writes table (rank 0 reads the SQLite file itself; the count on every rank)."""
    count = None
    if comm.Get_rank() == 0:
        with sqlite3.connect(f"{root}/cat.db") as con:
            count = con.execute("SELECT count(*) FROM writes").fetchone()[0]
    return comm.bcast(count)


def _check_steps(root, run_id, steps, names=("T",)) -> None:
    """A new session reads every step back equal to numpy's array."""
    with sdm.open(APP, "r", root=root, catalog=_url(root), run=run_id) as r:
        g = r.group("g")
        for name in names:
            assert g.steps(name) == sorted(steps)
            for step in steps:
                np.testing.assert_array_equal(g.read(name, step, verify=True), _mine(g, name, step))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind,level", KINDS, ids=[f"{k}-level{lv}" for k, lv in KINDS])
def test_many_outstanding_dumps(comm, mpi_tmp, kind, level):
    if comm.Get_size() > 4 and level != 3:  # every kind and level at 1-4 ranks; at 8, level 3 of each kind
        pytest.skip("levels 1 and 2 of every kind run at 1-4 ranks")
    with _open(mpi_tmp) as s:
        g = _group(s, kind, level, ("T", "U"))
        t = np.empty(g.local_shape("T"))
        u = np.empty(g.local_shape("U"))
        handles = []
        for step in range(20):
            t[...] = _mine(g, "T", step)
            if step % 2:
                u[...] = _mine(g, "U", step)
                handles.append(g.write_step(step, {"T": t, "U": u}, wait=False))
                u[...] = -1.0  # the caller reuses its arrays at once
            else:
                handles.append(g.write("T", step, t, wait=False))
            t[...] = -1.0
        assert all(isinstance(h, background.DumpHandle) for h in handles)
        assert [h.number for h in handles] == list(range(1, 21))
        got = g.read("T", 19)  # a collective call: every dump issued before it is done first
        np.testing.assert_array_equal(got, _mine(g, "T", 19))
        assert all(h.done() and h.state == "done" and h.error is None for h in handles)
        assert all(h.seconds > 0 and h.blocked >= 0 and h.waited >= 0 for h in handles)
        assert handles[0].nbytes == t.nbytes and handles[1].nbytes == t.nbytes + u.nbytes
        for step in range(20):
            np.testing.assert_array_equal(g.read("T", step, verify=True), _mine(g, "T", step))
        run_id = s.run_id
    _check_steps(mpi_tmp, run_id, range(20), ("T",))
    with sdm.open(APP, "r", root=mpi_tmp, catalog=_url(mpi_tmp), run=run_id) as r:
        g = r.group("g")
        assert g.steps("U") == list(range(1, 20, 2))
        for step in range(1, 20, 2):
            np.testing.assert_array_equal(g.read("U", step, verify=True), _mine(g, "U", step))


@pytest.mark.timeout(60)
def test_handles_wait_done_and_close(comm, mpi_tmp):
    s = _open(mpi_tmp)
    g = _group(s, "raw", 3)
    a = np.empty(g.local_shape("T"))
    a[...] = _mine(g, "T", 0)
    h0 = g.write("T", 0, a, wait=False)
    a[...] = _mine(g, "T", 1)
    h1 = g.write("T", 1, a, wait=False)
    h0.wait()
    assert h0.done() and h0.state == "done" and h0.seconds > 0
    h0.wait()  # again: nothing more to wait for
    s.wait()
    assert h1.done() and h1.state == "done"
    assert g.steps("T") == [0, 1]
    outstanding = []
    for step in range(2, 6):
        a[...] = _mine(g, "T", step)
        outstanding.append(g.write("T", step, a, wait=False))
    s.close()  # waits for them
    assert all(h.state == "done" for h in outstanding)
    s.wait()  # a closed session has nothing outstanding
    _check_steps(mpi_tmp, s.run_id, range(6))


@pytest.mark.timeout(60)
def test_read_of_a_step_in_flight_and_mixed_calls(comm, mpi_tmp):
    with _open(mpi_tmp) as s:
        g = _group(s, "raw", 2, ("T", "U"))
        a = _mine(g, "T", 0).copy()
        h = g.write("T", 0, a, wait=False)
        a[...] = 7.0
        np.testing.assert_array_equal(g.read("T", 0), _mine(g, "T", 0))  # its bytes, not the caller's new values
        assert h.done()
        assert g.write("T", 1, _mine(g, "T", 1)) is None  # blocking
        g.write("U", 1, _mine(g, "U", 1).copy(), wait=False)
        g.write("T", 2, _mine(g, "T", 2), wait=True)
        both = g.read_step(1)
        np.testing.assert_array_equal(both["T"], _mine(g, "T", 1))
        np.testing.assert_array_equal(both["U"], _mine(g, "U", 1))
        g.write_step(3, {"T": _mine(g, "T", 3).copy(), "U": _mine(g, "U", 3).copy()}, wait=False)
        s.set_attributes(case="mixed")  # another collective operation: waits too
        g.write("T", 4, _mine(g, "T", 4).copy(), wait=False)
        assert g.steps("T") == [0, 1, 2, 3, 4]  # local: after the dumps issued before
        g.write("T", 5, _mine(g, "T", 5).copy(), wait=False)
        np.testing.assert_array_equal(g["T"][5], _global(5))  # a lazy read: every rank gets the whole box
        run_id = s.run_id
    _check_steps(mpi_tmp, run_id, range(6), ("T",))


@pytest.mark.timeout(60)
def test_a_failed_dump_cancels_later_ones(comm, mpi_tmp):
    with _open(mpi_tmp) as s:
        g = _group(s, "raw", 3)
        g.write("T", 0, _mine(g, "T", 0))
        before = _rows(comm, mpi_tmp)
        ok = g.write("T", 1, _mine(g, "T", 1), wait=False)
        bad = g.write("T", 0, _mine(g, "T", 9), wait=False)  # written before, no overwrite
        later = [g.write("T", step, _mine(g, "T", step), wait=False) for step in (2, 3)]
        with pytest.raises(StepExistsError) as info:
            s.set_attributes(x=1)  # the next call raises it, on every rank
        text = _same_everywhere(comm, info.value)
        assert text == (f"nonblocking dump #2 Group.write('T', 0) of group 'g' failed: step 0 of dataset 'T' "
                        f"(group 'g', run {s.run_id}) was already written; pass overwrite=True to replace it{RANK0}")
        assert ok.state == "done" and bad.state == "failed" and [h.state for h in later] == ["cancelled"] * 2
        with pytest.raises(StepExistsError):
            bad.wait()  # its handle raises it as well
        for h in later:
            with pytest.raises(DumpCancelledError) as cancelled:
                h.wait()
            assert str(cancelled.value) == (
                f"nonblocking dump #{h.number} {h.call} was cancelled (nothing of it written): the earlier dump #2 "
                f"Group.write('T', 0) of group 'g' failed with StepExistsError: step 0 of dataset 'T' (group 'g', "
                f"run {s.run_id}) was already written; pass overwrite=True to replace it{RANK0}")
            _same_everywhere(comm, cancelled.value)
        assert _rows(comm, mpi_tmp) == before + 1  # step 1 only: the failed and the cancelled dumps left no row
        s.wait()  # reported once: nothing more to raise
        # the session goes on
        h = g.write("T", 2, _mine(g, "T", 2), wait=False)
        np.testing.assert_array_equal(g.read("T", 2), _mine(g, "T", 2))
        assert h.state == "done"
        run_id = s.run_id
    _check_steps(mpi_tmp, run_id, [0, 1, 2])


@pytest.mark.timeout(60)
def test_an_unwritable_subfile_path_fails_the_dump_on_every_rank(comm, mpi_tmp):
    """A subfile that cannot be created (a directory in its place, which even root cannot open for writing):
    the background failure is raised on every rank at the next call, naming the dump, with no row for it."""
    from pathlib import Path

    with _open(mpi_tmp) as s:
        g = _group(s, "subfiled", 2, ("T", "U"))
        g.write("T", 0, _mine(g, "T", 0))
        blocked = Path(mpi_tmp) / s.run_dir / "g.U.sub00001.sdm"  # level 2: a file per dataset, U's second subfile
        if comm.Get_rank() == 0:
            blocked.mkdir()
        comm.Barrier()
        before = _rows(comm, mpi_tmp)
        ok = g.write("T", 1, _mine(g, "T", 1), wait=False)
        bad = g.write("U", 0, _mine(g, "U", 0), wait=False)
        later = g.write("T", 2, _mine(g, "T", 2), wait=False)
        with pytest.raises(sdm.StorageError) as info:
            s.set_attributes(x=1)  # the next collective call raises it, on every rank
        text = _same_everywhere(comm, info.value)
        assert text.startswith("nonblocking dump #2 Group.write('U', 0) of group 'g' failed: "), text
        assert str(blocked) in text and "directory" in text.lower(), text
        assert (ok.state, bad.state, later.state) == ("done", "failed", "cancelled")
        assert _rows(comm, mpi_tmp) == before + 1  # T step 1 only
        assert g.steps("T") == [0, 1] and g.steps("U") == []
        run_id = s.run_id
    _check_steps(mpi_tmp, run_id, [0, 1])


@pytest.mark.timeout(60)
def test_copies_are_kept_for_the_next_dumps_within_the_bound(comm, mpi_tmp):
    """The copies of ended dumps hold the next dumps' copies (no fresh buffer per dump), within max_in_flight."""
    with _open(mpi_tmp) as probe:
        one = comm.allreduce(_mine(_group(probe, "raw", 3), "T", 0).nbytes, op=MPI.MAX)
    limit = 3 * one
    with sdm.open(APP, "a", root=mpi_tmp, catalog=_url(mpi_tmp), run=1, max_in_flight=limit) as s:
        g = s.group("g")
        a = np.empty(g.local_shape("T"))
        for step in range(12):
            a[...] = _mine(g, "T", step)
            g.write("T", step, a, wait=False)
            a[...] = -1.0
            if step == 5:
                s.wait()
                spares = s._ops.background.spares
                kept = spares.nbytes
                assert kept <= limit
                assert (kept > 0) == (a.nbytes > 0)  # an empty piece has nothing to keep
        s.wait()
        bg = s._ops.background
        assert bg.peak <= limit and bg.spares.nbytes <= limit
        if a.nbytes:
            assert bg.spares.nbytes >= a.nbytes and list(bg.spares._free) == [(a.shape, "<f8", "C")]
        for step in range(12):
            np.testing.assert_array_equal(g.read("T", step, verify=True), _mine(g, "T", step))
        bg_after = s._ops.background
    assert bg_after.spares.nbytes == 0  # close frees them
    _check_steps(mpi_tmp, 1, range(12))


@pytest.mark.timeout(60)
def test_no_reference_to_the_callers_arrays_is_kept(comm, mpi_tmp):
    """After a blocking write (and a nonblocking one's submission) SDM holds none of the caller's arrays."""
    import gc
    import weakref

    with _open(mpi_tmp) as s:
        g = _group(s, "raw", 3)
        a, b = _mine(g, "T", 0), _mine(g, "T", 1)
        ra, rb = weakref.ref(a), weakref.ref(b)
        g.write("T", 0, a)
        h = g.write("T", 1, b, wait=False)
        del a, b
        gc.collect()
        assert ra() is None and rb() is None
        h.wait()
    _check_steps(mpi_tmp, 1, [0, 1])


@pytest.mark.timeout(60)
def test_a_bad_shape_on_one_rank(comm, mpi_tmp):
    rank, size = comm.Get_rank(), comm.Get_size()
    with _open(mpi_tmp) as s:
        g = _group(s, "compressed", 3)
        a = _mine(g, "T", 0)
        if rank == size - 1:
            a = np.zeros((a.shape[0] + 1,) + a.shape[1:])
        h = g.write("T", 0, a, wait=False)
        after = g.write("T", 1, _mine(g, "T", 1), wait=False)
        with pytest.raises(LocalArrayError) as info:
            h.wait()  # the handle's wait reports it (once: the next call does not raise it again)
        text = _same_everywhere(comm, info.value)
        assert text.startswith("nonblocking dump #1 Group.write('T', 0) of group 'g' failed: ")
        with pytest.raises(DumpCancelledError):
            after.wait()
        assert _rows(comm, mpi_tmp) == 0
        g.write("T", 0, _mine(g, "T", 0), wait=False)
        assert g.read("T", 0).tobytes() == _mine(g, "T", 0).tobytes()
        run_id = s.run_id
    _check_steps(mpi_tmp, run_id, [0])


@pytest.mark.timeout(60)
def test_a_failure_is_raised_at_close(comm, mpi_tmp):
    s = _open(mpi_tmp)
    g = _group(s, "raw", 1)
    g.write("T", 0, _mine(g, "T", 0))
    g.write("T", 0, _mine(g, "T", 0), wait=False)
    with pytest.raises(StepExistsError, match="nonblocking dump #1 Group.write"):
        s.close()
    assert s._closed  # closed all the same
    _check_steps(mpi_tmp, s.run_id, [0])


@pytest.mark.timeout(120)
def test_back_pressure_bounds_the_copies(comm, mpi_tmp):
    """At most max_in_flight bytes of copies per rank (two steps' pieces here, the same option on every rank)."""
    with _open(mpi_tmp) as probe:
        one = comm.allreduce(_mine(_group(probe, "raw", 3), "T", 0).nbytes, op=MPI.MAX)
    limit = 2 * one
    with sdm.open(APP, "a", root=mpi_tmp, catalog=_url(mpi_tmp), run=1, max_in_flight=limit) as s:
        g = s.group("g")
        assert s.max_in_flight == limit
        a = np.empty(g.local_shape("T"))
        handles = []
        for step in range(20):
            a[...] = _mine(g, "T", step)
            handles.append(g.write("T", step, a, wait=False))
            a[...] = -1.0
        s.wait()
        bg = s._ops.background
        assert bg.limit == limit and 0 < bg.peak <= limit
        assert all(h.state == "done" and h.waited >= 0 for h in handles)
        for step in range(20):
            np.testing.assert_array_equal(g.read("T", step), _mine(g, "T", step))
    _check_steps(mpi_tmp, 1, range(20))


@pytest.mark.timeout(60)
def test_a_submission_past_the_bound_waits(comm, mpi_tmp, monkeypatch):
    """With room for one dump only (the largest piece), a submission returns only after the dump before it ended."""
    with _open(mpi_tmp) as probe:
        bound = comm.allreduce(_mine(_group(probe, "raw", 3), "T", 0).nbytes, op=MPI.MAX)
    with sdm.open(APP, "a", root=mpi_tmp, catalog=_url(mpi_tmp), run=1, max_in_flight=bound) as s:
        g = s.group("g")
        now = g._write_now
        ended: list[float] = []

        def slow(*args, **kwargs):
            time.sleep(0.05)
            out = now(*args, **kwargs)
            ended.append(time.perf_counter())
            return out

        monkeypatch.setattr(g, "_write_now", slow)
        handles, returned = [], []
        for step in range(5):
            handles.append(g.write("T", step, _mine(g, "T", step), wait=False))
            returned.append(time.perf_counter())
        s.wait()
        mine = _mine(g, "T", 0).nbytes
        if 2 * mine > bound:  # two of this rank's copies do not fit: each submission waited for the dump before
            assert all(returned[k + 1] >= ended[k] for k in range(4)), (returned, ended)
        assert all(h.seconds >= 0.05 and h.waited >= 0 for h in handles)
        assert s._ops.background.peak <= bound
        assert [h.state for h in handles] == ["done"] * 5
    _check_steps(mpi_tmp, 1, range(5))


def test_the_default_bound():
    assert background.default_limit() >= 16 << 20


@pytest.mark.timeout(60)
def test_asynchronous_session_default(comm, mpi_tmp):
    with _open(mpi_tmp, asynchronous=True) as s:
        assert s.asynchronous is True and s.max_in_flight is None
        g = _group(s, "subfiled", 2)
        h = g.write("T", 0, _mine(g, "T", 0))
        assert isinstance(h, background.DumpHandle)
        assert g.write("T", 1, _mine(g, "T", 1), wait=True) is None  # forced blocking
        assert h.done()
        h2 = g.write_step(2, {"T": _mine(g, "T", 2)})
        assert isinstance(h2, background.DumpHandle)
        run_id = s.run_id
    assert h2.state == "done"
    _check_steps(mpi_tmp, run_id, [0, 1, 2])


@pytest.mark.timeout(60)
def test_ranked_dumps(comm, mpi_tmp):
    rank, size = comm.Get_rank(), comm.Get_size()
    counts = [r + 1 for r in range(size)]
    with _open(mpi_tmp) as s:
        g = s.make_group("p", ["x"], dtype="f8", shape=(2,), view=sdm.Ranked())
        rows = np.empty((counts[rank], 2))
        for step in range(4):
            rows[...] = 100.0 * step + rank + np.arange(rows.size).reshape(rows.shape)
            g.write("x", step, rows, wait=False)
            rows[...] = -1.0
        for step in range(4):
            expect = 100.0 * step + rank + np.arange(rows.size).reshape(rows.shape)
            np.testing.assert_array_equal(g.read("x", step), expect)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("option,value,message", [
    ("asynchronous", "yes", "asynchronous must be True or False, got str 'yes'"),
    ("max_in_flight", 0, f"max_in_flight (bytes of copies per rank) must be an integer >= 1 and <= {MAX_INT}, got 0"),
    ("max_in_flight", 1.5, "max_in_flight (bytes of copies per rank) must be an integer, got float 1.5"),
])
def test_bad_session_options(comm, mpi_tmp, option, value, message):
    with pytest.raises(InvalidArgumentError) as info:
        _open(mpi_tmp, **{option: value})
    assert _same_everywhere(comm, info.value) == message + RANK0


@pytest.mark.timeout(60)
def test_bad_wait_values(comm, mpi_tmp):
    with _open(mpi_tmp) as s:
        g = _group(s, "raw", 3)
        for call in (lambda: g.write("T", 0, _mine(g, "T", 0), wait="no"),
                     lambda: g.write_step(0, {"T": _mine(g, "T", 0)}, wait=1)):
            with pytest.raises(InvalidArgumentError) as info:
                call()
            text = _same_everywhere(comm, info.value)
            assert text in ("wait must be True or False, got str 'no'" + RANK0,
                            "wait must be True or False, got int 1" + RANK0)
        assert g.steps("T") == []
        g.write("T", 0, _mine(g, "T", 0), wait=False)
        if comm.Get_size() > 1:  # rank 0's bad value: refused there, and in the others' nonblocking dump alike
            err = None
            try:
                g.write("T", 1, _mine(g, "T", 1), wait="x" if comm.Get_rank() == 0 else False)
                s.wait()
            except InvalidArgumentError as exc:
                err = exc
            assert err is not None
            base = "wait must be True or False, got str 'x' [rank 0]"
            expect = base if comm.Get_rank() == 0 else (
                f"nonblocking dump #2 Group.write('T', 1) of group 'g' failed: {base}")
            assert str(err) == expect
            assert g.steps("T") == [0]
        assert g.read("T", 0).tobytes() == _mine(g, "T", 0).tobytes()


@pytest.mark.timeout(60)
def test_no_thread_multiple_is_refused(comm, mpi_tmp, monkeypatch):
    monkeypatch.setattr(background, "thread_level", lambda: MPI.THREAD_SERIALIZED)
    expected = ("{} needs MPI initialized with MPI.THREAD_MULTIPLE, but the MPI library gave MPI.THREAD_SERIALIZED: "
                "nonblocking dumps run in a background thread. Write with wait=True, or initialize MPI with multiple "
                "threads (mpi4py.rc.thread_level = 'multiple' before importing MPI)" + RANK0)
    with pytest.raises(InvalidArgumentError) as info:
        _open(mpi_tmp, asynchronous=True)
    assert _same_everywhere(comm, info.value) == expected.format("asynchronous=True")
    with _open(mpi_tmp) as s:
        g = _group(s, "raw", 3)
        with pytest.raises(InvalidArgumentError) as info:
            g.write("T", 0, _mine(g, "T", 0), wait=False)
        assert _same_everywhere(comm, info.value) == expected.format("wait=False")
        g.write("T", 0, _mine(g, "T", 0))
        assert g.steps("T") == [0]


def test_the_rows_of_a_nonblocking_dump_say_so(comm, mpi_tmp):
    with _open(mpi_tmp) as s:
        g = _group(s, "raw", 3)
        g.write("T", 0, _mine(g, "T", 0))  # blocking
        h = g.write("T", 1, _mine(g, "T", 1), wait=False)
        h.wait()
        run = s.run_id
    reasons = None
    if comm.Get_rank() == 0:
        with sqlite3.connect(f"{mpi_tmp}/cat.db") as con:
            reasons = dict(con.execute("SELECT w.step, w.reason FROM writes w JOIN datasets d ON d.id = w.dataset_id "
                                       "JOIN groups g ON g.id = d.group_id WHERE g.run_id = ?", (run,)).fetchall())
    reasons = comm.bcast(reasons)
    assert "nonblocking" not in reasons[0]
    assert reasons[1].endswith(f"; nonblocking dump #{h.number}") or \
        f"; nonblocking dump #{h.number}, after its submission waited" in reasons[1]
