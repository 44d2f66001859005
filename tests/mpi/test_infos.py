"""Infos (named arrays kept as metadata) on a run, a group, a dataset and a step, at any rank count.

Every array read back is compared with a numpy reference built here (values, dtype with
its byte order, shape) on every rank; every refused input is checked for its exact
message on every rank and for leaving the catalog and the meta-file as they were.
"""

from __future__ import annotations

import base64
import json
import re

import numpy as np
import pytest
import sdm

from _reference import catalog_counts

# name -> (place, array): every dtype kind an info holds, in both byte orders, 0-d to 2-d
CASES = {
    "units": ((None, None), np.array(["K", "m/s", "Pa"], dtype="U3")),
    "flags": ((None, None), np.array([True, False, True])),
    "materials": (("g", None), np.arange(12, dtype=">i4").reshape(3, 4)),
    "labels": (("g", None), np.array([b"iron", b"water"], dtype="S5")),
    "scale": (("g", "a"), np.float32(2.5)),
    "coef": (("g", "a"), np.array([1 + 2j, -3j, 0.5], dtype=">c16")),
    "dt": (("g", "a", 3), np.array([0.125], dtype="<f8")),
    "limits": (("g", "b", 0), np.array([[0, 255], [1, 254]], dtype="u1")),
}


def _place(g, where):
    """set_info / info arguments for a place of CASES."""
    if where[0] is None:
        return {}
    return {"dataset": where[1], "step": where[2] if len(where) > 2 else None}


def _same_everywhere(comm, value):
    seen = comm.allgather(value)
    assert all(v == seen[0] for v in seen), seen


@pytest.fixture
def setup(comm, mpi_tmp):
    url = f"sqlite:///{mpi_tmp}/cat.db"
    s = sdm.open("infos", root=mpi_tmp, catalog=url)
    g = s.make_group("g", ["a", "b"], dtype="f8", shape=(4, 4), level=3)
    yield s, g, url
    s.close()


def _meta_lines(comm, s):
    """The run's meta-file lines (rank 0 reads, all get them)."""
    lines = None
    if comm.Get_rank() == 0:
        lines = s.meta.paths[0].read_text().splitlines()
    return comm.bcast(lines)


def _set_all(s, g):
    for name, (where, arr) in CASES.items():
        if where[0] is None:
            s.set_info(name, arr)
        else:
            g.set_info(name, arr, **_place(g, where))


def _check_all(s, g):
    for name, (where, ref) in CASES.items():
        got = s.info(name) if where[0] is None else g.info(name, **_place(g, where))
        assert isinstance(got, np.ndarray) and got.flags.writeable
        assert got.dtype == ref.dtype and got.shape == np.shape(ref), name
        np.testing.assert_array_equal(got, ref)


def test_every_place_and_kind_round_trips_on_every_rank(comm, setup, mpi_tmp):
    s, g, url = setup
    _set_all(s, g)
    _check_all(s, g)
    assert s.infos() == ["flags", "units"]
    assert g.infos() == ["labels", "materials"]
    assert g.infos("a") == ["coef", "scale"] and g.infos("a", 3) == ["dt"] and g.infos("b", 0) == ["limits"]
    assert g.infos("b") == [] and g.infos("a", 4) == []
    run = s.run_id
    s.close()
    with sdm.open("infos", "r", root=mpi_tmp, catalog=url, run=run) as r:  # another session reads them back
        _check_all(r, r.group("g"))


def test_the_meta_file_holds_each_info_as_base64(comm, setup):
    s, g, url = setup
    _set_all(s, g)
    records = [json.loads(line) for line in _meta_lines(comm, s)]
    infos = {r["name"]: r for r in records if r["t"] == "info"}
    assert set(infos) == set(CASES)
    for name, (where, ref) in CASES.items():
        rec = infos[name]
        assert (rec["group"], rec["dataset"], rec["step"]) == (tuple(where) + (None, None, None))[:3]
        assert rec["dtype"] == np.asarray(ref).dtype.str and rec["shape"] == list(np.shape(ref))
        assert base64.b64decode(rec["data"]) == np.ascontiguousarray(ref).tobytes()


def test_setting_again_replaces(comm, setup, mpi_tmp):
    s, g, url = setup
    s.set_info("units", np.array(["K"]))
    s.set_info("units", np.array([1.5, 2.5], dtype=">f4"))  # another dtype and shape: replaced whole
    got = s.info("units")
    assert got.dtype == np.dtype(">f4")
    np.testing.assert_array_equal(got, np.array([1.5, 2.5], dtype=">f4"))
    assert s.infos() == ["units"] and catalog_counts(comm, url)["infos"] == 1


def test_a_truncation_erases_the_infos_of_the_erased_steps(comm, setup):
    s, g, url = setup
    for step in range(4):
        g.write("a", step, np.zeros(g.local_shape("a")))
        g.set_info("dt", np.array([step / 8]), dataset="a", step=step)
    g.set_info("kept", np.arange(2), dataset="a")
    s.truncate(after_step=1)
    assert [g.infos("a", step) for step in range(4)] == [["dt"], ["dt"], [], []]
    assert g.infos("a") == ["kept"]
    np.testing.assert_array_equal(g.info("dt", "a", 1), np.array([1 / 8]))


def _raises_everywhere(comm, cls, message, fn):
    with pytest.raises(cls) as info:
        fn()
    assert type(info.value) is cls
    assert re.fullmatch(re.escape(message) + r"( \[rank \d+\])?", str(info.value)), str(info.value)
    _same_everywhere(comm, (type(info.value).__name__, str(info.value)))


KINDS = "infos hold bool, integer, float, complex or fixed-width string ('S<n>', 'U<n>') arrays"
BAD = {
    "object": (sdm.UnsupportedDtypeError, lambda s, g: s.set_info("x", np.array([1, "a", None], dtype=object)),
               f"info 'x': dtype object (Python objects) cannot be an info; {KINDS}"),
    "list-of-objects": (sdm.UnsupportedDtypeError, lambda s, g: g.set_info("x", [{"a": 1}]),
                        f"info 'x': dtype object (Python objects) cannot be an info; {KINDS}"),
    "structured": (sdm.UnsupportedDtypeError,
                   lambda s, g: g.set_info("x", np.zeros(2, dtype=[("a", "<f8"), ("b", "<i4")]), dataset="a"),
                   f"info 'x': dtype [('a', '<f8'), ('b', '<i4')] (structured) cannot be an info; {KINDS}"),
    "void": (sdm.UnsupportedDtypeError, lambda s, g: s.set_info("x", np.zeros(2, "V4")),
             f"info 'x': dtype |V4 (raw bytes (void)) cannot be an info; {KINDS}"),
    "datetime": (sdm.UnsupportedDtypeError, lambda s, g: s.set_info("x", np.array(["2024-01-01"], "M8[D]")),
                 f"info 'x': dtype datetime64[D] (datetime64) cannot be an info; {KINDS}"),
    "too-big": (sdm.InvalidArgumentError, lambda s, g: s.set_info("x", np.zeros(16 * 2**20 + 1, "u1")),
                "info 'x' holds 16777217 bytes; an info holds at most 16777216 bytes (16 MiB): "
                "store a larger array as a dataset"),
    "name": (sdm.InvalidNameError, lambda s, g: s.set_info("a/b", 1),
             "info name 'a/b' would leave the data root; use a name without '/', '\\\\' or '..'"),
    "empty-name": (sdm.InvalidNameError, lambda s, g: g.set_info("", 1), "info name must not be empty"),
    "step-without-dataset": (sdm.InvalidArgumentError, lambda s, g: g.set_info("x", 1, step=2),
                             "an info of step 2 belongs to a dataset: give dataset= with step="),
    "no-dataset": (sdm.DatasetNotFoundError, lambda s, g: g.set_info("x", 1, dataset="c"),
                   "group 'g' has no dataset 'c'; its datasets are ['a', 'b']"),
    "negative-step": (sdm.InvalidArgumentError, lambda s, g: g.set_info("x", 1, dataset="a", step=-1),
                      "time step must be an integer >= 0 and <= 9223372036854775807, got -1"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_refused_info_changes_nothing(comm, setup, case):
    s, g, url = setup
    s.set_info("units", np.array(["K"]))
    before, lines = catalog_counts(comm, url), _meta_lines(comm, s)
    cls, call, message = BAD[case]
    _raises_everywhere(comm, cls, message, lambda: call(s, g))
    assert catalog_counts(comm, url) == before and _meta_lines(comm, s) == lines
    np.testing.assert_array_equal(s.info("units"), np.array(["K"]))


def test_ranks_that_disagree_store_nothing(comm, setup):
    s, g, url = setup
    if comm.Get_size() == 1:
        pytest.skip("needs two ranks")  # the same decision on every rank
    before, lines = catalog_counts(comm, url), _meta_lines(comm, s)
    rank = comm.Get_rank()
    others = list(range(1, comm.Get_size()))
    message = (f"ranks passed different infos to set_info('x', ...): ranks {others} differ from rank 0 in the name, "
               "the place, the dtype, the shape or the values; every rank must pass the same array")
    for call in (lambda: g.set_info("x", np.arange(3) + rank),  # values
                 lambda: g.set_info("x", np.arange(3, dtype="i4" if rank else "i8")),  # dtype
                 lambda: g.set_info("x", np.arange(3), dataset="a" if rank else "b"),  # place
                 lambda: g.set_info("x", np.arange(3), dataset="a", step=rank)):  # step
        _raises_everywhere(comm, sdm.CollectiveMismatchError, message, call)
    assert catalog_counts(comm, url) == before and _meta_lines(comm, s) == lines
    assert g.infos() == [] and g.infos("a") == []


def test_missing_infos_and_read_only_sessions(comm, setup, mpi_tmp):
    s, g, url = setup
    s.set_info("units", np.array(["K"]))
    _raises_everywhere(comm, sdm.NotFoundError, f"no info 'nope' on run {s.run_id} in catalog {url!r}",
                       lambda: s.info("nope"))
    _raises_everywhere(comm, sdm.NotFoundError,
                       f"no info 'units' on step 4 of 'g/a' of run {s.run_id} in catalog {url!r}",
                       lambda: g.info("units", "a", 4))
    run = s.run_id
    s.close()
    with sdm.open("infos", "r", root=mpi_tmp, catalog=url, run=run) as r:
        _raises_everywhere(comm, sdm.ReadOnlyError,
                           f"cannot set info 'x': the session of run {run} was opened with mode='r'; "
                           "open with mode='a' to add data to an existing run",
                           lambda: r.set_info("x", 1))
        assert r.infos() == ["units"]
