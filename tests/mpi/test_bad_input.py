"""Every bad input raises the exact error on every rank and leaves the catalog unchanged."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import sdm

from _reference import catalog_counts

SHAPE = (6, 4)




@pytest.fixture
def setup(comm, mpi_tmp):
    url = f"sqlite:///{mpi_tmp}/cat.db"
    s = sdm.open("bad", root=mpi_tmp, catalog=url)
    g = s.make_group("g", ["a"], dtype="f8", shape=SHAPE, level=3)
    local = np.ones(g.local_shape("a"))
    g.write("a", 0, local)
    yield s, g, local, url
    s.close()


def _raises_everywhere(comm, exc, match, fn):
    with pytest.raises(exc, match=match) as info:
        fn()
    # the same class and message on every rank
    seen = comm.allgather((type(info.value).__name__, str(info.value)))
    assert len(set(seen)) == 1, seen
    return info.value


def test_wrong_shape_on_one_rank(comm, setup):
    s, g, local, url = setup
    before = catalog_counts(comm, url)
    bad_rank = comm.Get_size() - 1
    arr = np.ones(local.shape[:-1] + (local.shape[-1] + 1,)) if comm.Get_rank() == bad_rank else local
    err = _raises_everywhere(comm, sdm.LocalArrayError, r"expects a local array of shape", lambda: g.write("a", 1, arr))
    assert isinstance(err, ValueError)
    assert f"on rank {bad_rank}" in str(err)
    assert catalog_counts(comm, url) == before
    assert g.steps("a") == [0]


def test_wrong_dtype(comm, setup):
    s, g, local, url = setup
    before = catalog_counts(comm, url)
    _raises_everywhere(
        comm, sdm.LocalArrayError, r"stores float64 \(<f8\) but the local array on rank \d+ is \|S8 \(\|S8\), "
        r"which SDM does not convert",
        lambda: g.write("a", 1, local.astype("S8")),
    )
    assert catalog_counts(comm, url) == before


def test_unknown_dataset_and_group(comm, setup):
    s, g, local, url = setup
    before = catalog_counts(comm, url)
    err = _raises_everywhere(comm, sdm.DatasetNotFoundError, r"group 'g' has no dataset 'zz'; its datasets are \['a'\]",
                             lambda: g.write("zz", 1, local))
    assert isinstance(err, KeyError)
    _raises_everywhere(comm, sdm.GroupNotFoundError, r"run \d+ has no group 'nope'; its groups are \['g'\]",
                       lambda: s.group("nope"))
    assert catalog_counts(comm, url) == before


def test_read_step_never_written(comm, setup):
    s, g, local, url = setup
    _raises_everywhere(comm, sdm.StepNotFoundError, r"was never written at step 7; written steps: \[0\]",
                       lambda: g.read("a", 7))


def test_write_step_twice(comm, setup):
    s, g, local, url = setup
    before = catalog_counts(comm, url)
    _raises_everywhere(comm, sdm.StepExistsError, r"step 0 of dataset 'a' .* was already written; pass overwrite=True",
                       lambda: g.write("a", 0, local * 5))
    assert catalog_counts(comm, url) == before
    np.testing.assert_array_equal(g.read("a", 0), local)  # nothing lost
    g.write("a", 0, local * 5, overwrite=True)
    np.testing.assert_array_equal(g.read("a", 0), local * 5)


@pytest.mark.parametrize("app, group, dataset", [("../evil", "g", "a"), ("ok", "../../g", "a"), ("ok", "g", "x/../../y"), ("ok", "..", "a")])
def test_name_escaping_root(comm, mpi_tmp, app, group, dataset):
    url = f"sqlite:///{mpi_tmp}/esc.db"
    if app != "ok":
        _raises_everywhere(comm, sdm.InvalidNameError, r"application name '\.\./evil' would leave the data root",
                           lambda: sdm.open(app, root=mpi_tmp, catalog=url))
        assert not Path(mpi_tmp, "esc.db").exists() or catalog_counts(comm, url)["runs"] == 0
        return
    with sdm.open(app, root=mpi_tmp, catalog=url) as s:
        before = catalog_counts(comm, url)
        what = "group" if group != "g" else "dataset"
        _raises_everywhere(comm, sdm.InvalidNameError, rf"{what} name .* would leave the data root",
                           lambda: s.make_group(group, [dataset], dtype="f8", shape=SHAPE))
        assert catalog_counts(comm, url) == before
    assert not list(Path(mpi_tmp).rglob("*.sdm"))  # no data file anywhere


def test_unsafe_characters_are_sanitized(comm, mpi_tmp):
    url = f"sqlite:///{mpi_tmp}/c.db"
    with sdm.open("my app", root=mpi_tmp, catalog=url) as s:
        g = s.make_group("dens ity*", ["a b"], dtype="f8", shape=SHAPE, level=2)
        g.write("a b", 0, np.zeros(g.local_shape("a b")))
        run_id = s.run_id
    if comm.Get_rank() == 0:
        cat = sdm.Catalog(url)
        (f,) = cat.files(run_id)
        assert " " not in f.path and "*" not in f.path
        assert (Path(mpi_tmp) / f.path).resolve().is_relative_to(Path(mpi_tmp).resolve())
        cat.close()


@pytest.mark.parametrize("url, match", [
    ("postgresql://nobody@127.0.0.1:1/nothing", r"cannot open catalog 'postgresql://nobody@127\.0\.0\.1:1/nothing'"),
    ("mysql://x/y", r"catalog URL scheme 'mysql' is not supported"),
    ("sqlite:/not/a/url", r"catalog URL 'sqlite:/not/a/url' is not a URL"),
])
def test_unreachable_catalog(comm, mpi_tmp, url, match):
    err = _raises_everywhere(comm, sdm.CatalogUnavailableError, match, lambda: sdm.open("x", root=mpi_tmp, catalog=url))
    assert isinstance(err, ConnectionError)


def test_reader_on_missing_catalog(comm, mpi_tmp):
    url = f"sqlite:///{mpi_tmp}/nowhere/cat.db"
    _raises_everywhere(comm, sdm.CatalogUnavailableError, r"directory .*nowhere does not exist",
                       lambda: sdm.open("x", "r", catalog=url))


def _row_boxes(size, rank, shape, mode):
    n = shape[0]
    starts = [min(n, (n * r) // size) for r in range(size + 1)]
    start, count = starts[rank], starts[rank + 1] - starts[rank]
    if mode == "overlap" and rank == size - 1:
        start, count = max(0, start - 1), count + (1 if start > 0 else 0)
        if size == 1:
            count = n + 1  # leaves the array instead
    if mode == "gap" and rank == size - 1:
        count = max(0, count - 1)
    return (start, 0), (count, shape[1])


@pytest.mark.parametrize("mode, match", [
    ("overlap", r"the pieces of ranks \d+ and \d+ overlap|leaves the global shape"),
    ("gap", r"cover \d+ of the 24 elements of shape \(6, 4\); \d+ elements have no owner"),
])
def test_distribution_gap_or_overlap(comm, setup, mode, match):
    s, g, local, url = setup
    before = catalog_counts(comm, url)
    start, count = _row_boxes(comm.Get_size(), comm.Get_rank(), SHAPE, mode)
    _raises_everywhere(comm, sdm.DistributionError, match, lambda: g.data_view(sdm.Subarray(start, count)))
    assert catalog_counts(comm, url) == before
    np.testing.assert_array_equal(g.read("a", 0), local)  # the old view still works


def test_grid_does_not_match_ranks(comm, setup):
    s, g, local, url = setup
    size = comm.Get_size()
    _raises_everywhere(comm, sdm.DistributionError,
                       rf"process grid \({size + 1}, 1\) has {size + 1} cells but the communicator has {size} ranks",
                       lambda: g.data_view(sdm.Block(grid=(size + 1, 1))))


def test_readonly_session(comm, setup, mpi_tmp):
    s, g, local, url = setup
    run_id = s.run_id
    before = catalog_counts(comm, url)
    with sdm.open("bad", "r", catalog=url, run=run_id) as r:
        rg = r.group("g")
        _raises_everywhere(comm, sdm.ReadOnlyError, r"opened with mode='r'", lambda: rg.write("a", 9, local))
        _raises_everywhere(comm, sdm.ReadOnlyError, r"opened with mode='r'",
                           lambda: r.make_group("h", ["b"], dtype="f8", shape=SHAPE))
    assert catalog_counts(comm, url) == before


def test_ranks_disagree_on_step(comm, setup):
    s, g, local, url = setup
    if comm.Get_size() == 1:
        pytest.skip("needs two ranks to disagree")
    before = catalog_counts(comm, url)
    err = _raises_everywhere(comm, sdm.CollectiveMismatchError, r"ranks made different write calls",
                             lambda: g.write("a", 1 + comm.Get_rank(), local))
    steps = "; ".join(f"rank {r}: {1 + r}" for r in range(comm.Get_size()))
    assert str(err) == (f"ranks made different write calls: step ({steps}); every rank must call with the same "
                        "datasets, step and options")  # in words: no tuple of the call's internals
    assert catalog_counts(comm, url) == before


def test_unknown_run_and_attributes(comm, setup):
    s, g, local, url = setup
    _raises_everywhere(comm, sdm.RunNotFoundError, r"no run 999 of application 'bad'",
                       lambda: sdm.open("bad", "r", catalog=url, run=999))
    _raises_everywhere(comm, sdm.RunNotFoundError, r"no run of 'bad' has attributes \{'x': 1\}",
                       lambda: sdm.open("bad", "r", catalog=url, attributes={"x": 1}))
    _raises_everywhere(comm, sdm.ApplicationNotFoundError, r"no application 'other'",
                       lambda: sdm.open("other", "r", catalog=url))


def test_damaged_file_detected_on_verified_read(comm, setup, mpi_tmp):
    s, g, local, url = setup
    rank = comm.Get_rank()
    if rank == 0:
        cat = sdm.Catalog(url)
        (_, _, w), = cat.writes(s.run_id)
        with open(Path(mpi_tmp) / w.path, "r+b") as f:
            f.seek(w.offset + 8)
            f.write(b"\x00\x01\x02\x03")
        cat.close()
    comm.Barrier()
    _raises_everywhere(comm, sdm.IntegrityError, r"does not match its write-time checksum",
                       lambda: g.read("a", 0, verify=True))


def test_bad_step_on_one_rank_only(comm, setup):
    """A step that is not an integer on one rank raises everywhere instead of hanging."""
    s, g, local, url = setup
    before = catalog_counts(comm, url)
    step = "seven" if comm.Get_rank() == comm.Get_size() - 1 else 7
    _raises_everywhere(comm, sdm.InvalidArgumentError, r"time step must be an integer, got str 'seven'",
                       lambda: g.write("a", step, local))
    assert catalog_counts(comm, url) == before
