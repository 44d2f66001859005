"""``Group.read_step``: several datasets of one step read as one access.

The dump mixes dtypes, byte orders, storage orders, data views (Block, Cyclic,
BlockCyclic with ghosts, a MapArray in a rank's own order, a one-element dataset whose
pieces are empty on every rank but one); each rank's result is compared with its part
of global arrays built with numpy.  The access is one opening exchange whatever the
number of datasets, the datasets of one file are read through one combined view, and
every bad call is refused with the same error on every rank, leaving *out* untouched.
"""

from __future__ import annotations

import numpy as np
import pytest
import sdm

from _reference import global_array
from test_combined_dump import _globals, _local, _specs


def _inner(arr, ghosts):
    return arr[tuple(slice(ghosts, n - ghosts) for n in arr.shape)]


def _mixed(comm, root, url, *, level=3, method="auto", steps=(0, 1)):
    """A run of the mixed dump of test_combined_dump, *steps* written; (session, group, specs)."""
    specs = _specs(comm.Get_size(), comm.Get_rank())
    s = sdm.open("readstep", root=root, catalog=url, method=method)
    g = s.make_group("mix", [ds for ds, _, _, _ in specs], level=level, view=sdm.Block())
    for ds, view, _, _ in specs:
        g.data_view(view, datasets=[ds.name])
    for step in steps:
        G = _globals(specs, step)
        g.write_step(step, {ds.name: _local(G[ds.name], idx, gh, ds.order or "C", view)
                            for ds, view, idx, gh in specs})
    return s, g, specs


@pytest.mark.parametrize("level", [1, 3])
@pytest.mark.parametrize("method", ["auto", "collective", "datatype", "posix"])
def test_mixed_read_step_matches_numpy(comm, mpi_tmp, level, method):
    s, g, specs = _mixed(comm, mpi_tmp, f"sqlite:///{mpi_tmp}/cat.db", level=level)
    with s:
        for step in (1, 0):
            got = g.read_step(step, method=method if method != "auto" else None)
            assert list(got) == [ds.name for ds, _, _, _ in specs]  # all of the group's, in order
            G = _globals(specs, step)
            for ds, view, idx, gh in specs:
                want = _local(G[ds.name], idx, gh, ds.order or "C", view)
                assert got[ds.name].dtype == np.dtype(ds.dtype) and got[ds.name].shape == want.shape
                np.testing.assert_array_equal(_inner(got[ds.name], gh), _inner(want, gh))


def test_one_opening_exchange_and_one_view_per_file(comm, mpi_tmp):
    """64 datasets of one file: one opening exchange (as one read of one dataset), one combined file view."""
    names = [f"v{i}" for i in range(64)]
    size, rank = comm.Get_size(), comm.Get_rank()
    G = {n: global_array((40,), "<f8", seed=i) for i, n in enumerate(names)}
    cuts = np.array_split(np.arange(40), size)[rank]  # each rank's block, cut independently of SDM
    with sdm.open("readstep", root=mpi_tmp, catalog=f"sqlite:///{mpi_tmp}/cat.db") as s:
        g = s.make_group("many", names, dtype="<f8", shape=(40,), level=3, view=sdm.Block(grid=(size,)))
        g.write_step(0, {n: np.ascontiguousarray(G[n][cuts]) for n in names})
        path = comm.bcast(next(w.path for _, _, w in s.catalog.writes(s.run_id)) if rank == 0 else None)
        before = s._ops.seq
        got = g.read_step(0)
        assert s._ops.seq == before + 1
        kept = s.files.views(mpi_tmp / path)["view"][0][0]  # the view the file is left with: (key, extent, hints)
        assert kept[0] == "combined" and len(kept[1]) == 64  # one view of all 64 datasets
        g.read("v0", 0)
        assert s._ops.seq == before + 2  # one read of one dataset: one opening exchange too
    for n in names:
        np.testing.assert_array_equal(got[n], G[n][cuts])
    whole = comm.gather(got["v63"], root=0)
    if rank == 0:
        np.testing.assert_array_equal(np.concatenate(whole), G["v63"])


def test_read_step_into_out_and_a_subset(comm, mpi_tmp):
    s, g, specs = _mixed(comm, mpi_tmp, f"sqlite:///{mpi_tmp}/cat.db")
    with s:
        a = np.full(g.local_shape("a"), -1.0)
        got = g.read_step(1, ["c", "a"], out={"a": a})
        assert list(got) == ["c", "a"] and got["a"] is a
        G = _globals(specs, 1)
        for name in ("a", "c"):
            ds, view, idx, gh = next(sp for sp in specs if sp[0].name == name)
            want = _local(G[name], idx, gh, ds.order or "C", view)
            np.testing.assert_array_equal(_inner(got[name], gh), _inner(want, gh))


def test_subfiled_datasets_are_read_too(comm, mpi_tmp):
    size, rank = comm.Get_size(), comm.Get_rank()
    cuts = np.array_split(np.arange(24), size)[rank]
    G = {n: global_array((24,), "<i8", seed=7 * i) for i, n in enumerate(("p", "q"))}
    with sdm.open("readstep", root=mpi_tmp, catalog=f"sqlite:///{mpi_tmp}/cat.db") as s:
        g = s.make_group("sub", ["p", "q"], dtype="<i8", shape=(24,), level=3, subfiles=2,
                         view=sdm.Block(grid=(size,)))
        g.write_step(3, {n: np.ascontiguousarray(G[n][cuts]) for n in G})
        got = g.read_step(3, verify=True)
    for n in G:
        np.testing.assert_array_equal(got[n], G[n][cuts])


def _refused(comm, call, error, match):
    with pytest.raises(error, match=match) as info:
        call()
    messages = comm.allgather(str(info.value))
    assert all(m == messages[0] for m in messages), messages  # the same error on every rank


def test_bad_calls_are_refused_on_every_rank_and_leave_out_untouched(comm, mpi_tmp):
    s, g, specs = _mixed(comm, mpi_tmp, f"sqlite:///{mpi_tmp}/cat.db", steps=(0,))
    with s:
        a = np.full(g.local_shape("a"), -1.0)
        _refused(comm, lambda: g.read_step(1, ["a", "b"], out={"a": a}), sdm.StepNotFoundError,
                 "was never written at step 1")
        assert (a == -1.0).all()
        _refused(comm, lambda: g.read_step(0, ["a", "nope"], out={"a": a}), sdm.DatasetNotFoundError, "'nope'")
        _refused(comm, lambda: g.read_step(0, ["a", "a"]), sdm.InvalidNameError, "distinct dataset names")
        _refused(comm, lambda: g.read_step(0, []), sdm.InvalidNameError, "distinct dataset names")
        _refused(comm, lambda: g.read_step(0, ["a"], out={"b": a}), sdm.InvalidArgumentError,
                 r"out names datasets that are not read: \['b'\]")
        _refused(comm, lambda: g.read_step(0, ["a"], out={"a": a.astype("<f4")}), sdm.LocalArrayError,
                 "arrays of the stored dtype")
        _refused(comm, lambda: g.read_step(0, ["a"], out=[a]), sdm.InvalidArgumentError, "must be a dict")
        _refused(comm, lambda: g.read_step(0, ["a"], method="nosuch"), sdm.InvalidArgumentError, "nosuch")
        _refused(comm, lambda: g.read_step(-1, ["a"]), sdm.InvalidArgumentError, "time step")
        assert (a == -1.0).all()
        # ranks that ask for different datasets fail together
        names = ["a", "b"] if comm.Get_rank() == 0 else ["a", "c"]
        if comm.Get_size() > 1:
            _refused(comm, lambda: g.read_step(0, names), sdm.CollectiveMismatchError, "different")
        got = g.read_step(0, ["a"], out={"a": a})  # the session still works
        assert not (a == -1.0).all() and got["a"] is a


def test_ranked_datasets_are_refused(comm, mpi_tmp):
    with sdm.open("readstep", root=mpi_tmp, catalog=f"sqlite:///{mpi_tmp}/cat.db") as s:
        g = s.make_group("r", ["x", "y"], dtype="<f8", shape=(8,), level=3)
        g.data_view(sdm.Ranked(), datasets=["y"])
        g.write("x", 0, np.ones(g.local_shape("x")))
        g.write("y", 0, np.ones((2, 8)))
        _refused(comm, lambda: g.read_step(0), sdm.InvalidArgumentError, "read ranked dataset 'y' with read()")


def test_damaged_dataset_is_named(comm, mpi_tmp):
    """A byte changed in one dataset of a combined read: IntegrityError naming it, on every rank."""
    s, g, specs = _mixed(comm, mpi_tmp, f"sqlite:///{mpi_tmp}/cat.db", steps=(0,))
    with s:
        where = None
        if comm.Get_rank() == 0:
            row = next(w for _, d, w in s.catalog.writes(s.run_id) if d == "c")
            where = (str(mpi_tmp / row.path), row.offset)
        path, offset = comm.bcast(where)
        comm.Barrier()
        if comm.Get_rank() == 0:
            with open(path, "r+b") as f:
                f.seek(offset + 5)
                byte = f.read(1)
                f.seek(offset + 5)
                f.write(bytes([byte[0] ^ 0xFF]))
        comm.Barrier()
        _refused(comm, lambda: g.read_step(0, verify=True), sdm.IntegrityError, "dataset 'c' step 0")
        got = g.read_step(0, ["a", "b"], verify=True)  # the others still read and verify
        G = _globals(specs, 0)
        ds, view, idx, gh = specs[0]
        np.testing.assert_array_equal(_inner(got["a"], gh), _inner(_local(G["a"], idx, gh, "C", view), gh))
