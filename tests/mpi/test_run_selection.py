"""Which run ``sdm.open(app, "r" | "a", ...)`` opens: explicit when several match, the same on every rank.

Two runs of one application with the same attributes (and a third that differs): opening
by those attributes raises :class:`sdm.AmbiguousRunError` on every rank with the same
message, listing both runs newest first (ids, creation times, attributes) and saying how
to choose; nothing changes in the catalog (no run is marked open or interrupted, no
row added). ``run="latest"`` reads the newest, ``run=ID`` the older one, a selection that
matches one run opens it; each read is compared with the array the writer built with numpy.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import sdm

from _reference import catalog_counts

SHAPE = (6, 4)

pytestmark = pytest.mark.timeout(120)


def _values(run_index: int) -> np.ndarray:
    """The global array run *run_index* writes (built with numpy alone)."""
    return np.arange(np.prod(SHAPE), dtype="f8").reshape(SHAPE) + 1000.0 * run_index


@pytest.fixture
def three_runs(comm, mpi_tmp):
    """Runs 1 and 2 with case=demo, run 3 with case=other; each wrote its own values at step 0."""
    url = f"sqlite:///{mpi_tmp}/cat.db"
    ids = []
    for index, case in enumerate(("demo", "demo", "other")):
        with sdm.open("heat", "w", root=mpi_tmp, catalog=url, attributes={"case": case, "nx": 6}) as s:
            g = s.make_group("fields", ["T"], dtype="f8", shape=SHAPE, level=3, view=sdm.Block(grid=(s.size, 1)))
            g.write("T", 0, _values(index)[g.piece("T").indices[0]])
            ids.append(s.run_id)
    return url, ids


def _raises_everywhere(comm, fn):
    with pytest.raises(sdm.AmbiguousRunError) as info:
        fn()
    seen = comm.allgather((type(info.value).__name__, str(info.value)))
    assert len(set(seen)) == 1, seen  # the same class and message on every rank
    return info.value


def _state(comm, url):
    """Every run's state and writer count (rank 0 reads, all get it)."""
    rows = None
    if comm.Get_rank() == 0:
        cat = sdm.Catalog(url, create=False)
        try:
            rows = [(r.id, r.state) for r in cat.find(application="heat")]
        finally:
            cat.close()
    return comm.bcast(rows)


@pytest.mark.parametrize("mode", ["r", "a"])
def test_several_matching_runs_are_listed_not_guessed(comm, three_runs, mode):
    url, (r1, r2, r3) = three_runs
    before, states = catalog_counts(comm, url), _state(comm, url)
    err = _raises_everywhere(comm, lambda: sdm.open("heat", mode, catalog=url, attributes={"case": "demo"}))
    assert isinstance(err, ValueError) and isinstance(err, LookupError) and isinstance(err, sdm.InvalidArgumentError)
    text = str(err)
    assert text.startswith("2 runs of 'heat' match attributes {'case': 'demo'}, newest first: ")
    listed = [int(m) for m in re.findall(r"run (\d+) \(created \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC, case='demo', nx=6\)",
                                          text)]
    assert listed == [r2, r1]  # newest first; run 3 does not match
    assert text.endswith("; pass run=ID to choose one, or run='latest' for the newest")
    assert catalog_counts(comm, url) == before and _state(comm, url) == states  # nothing changed

    # no attributes at all: the application's three runs are just as ambiguous
    err = _raises_everywhere(comm, lambda: sdm.open("heat", mode, catalog=url))
    assert str(err).startswith("3 runs of 'heat', newest first: run %d " % r3)
    assert catalog_counts(comm, url) == before and _state(comm, url) == states


@pytest.mark.parametrize("mode", ["r", "a"])
def test_the_caller_says_which(comm, three_runs, mode):
    url, (r1, r2, r3) = three_runs
    for kwargs, want, index in (({"run": "latest"}, r2, 1), ({"run": r1}, r1, 0),
                                ({"run": np.int64(r1)}, r1, 0), ({}, r3, 2)):
        attrs = {"case": "other"} if not kwargs else {"case": "demo"}
        with sdm.open("heat", mode, catalog=url, attributes=attrs, **kwargs) as s:
            assert s.run_id == want
            g = s.group("fields")
            g.data_view(sdm.Cyclic(grid=(s.size, 1)))  # another distribution than the writer's
            got = g.read("T", 0, verify=True)
            rows = np.arange(s.rank, SHAPE[0], s.size)
            np.testing.assert_array_equal(got, _values(index)[rows])
    assert {state for _, state in _state(comm, url)} == {"closed"}


def test_a_bad_run_is_refused_on_every_rank(comm, three_runs):
    url, _ = three_runs
    before = catalog_counts(comm, url)
    for bad, shown in (("newest", "'newest'"), (True, "True"), (0, "0"), (1.0, "float 1.0")):
        with pytest.raises(sdm.InvalidArgumentError) as info:
            sdm.open("heat", "r", catalog=url, run=bad)
        suffix = "" if comm.Get_size() == 1 else " [rank 0]"  # every rank checked it: the lowest rank's error
        assert str(info.value) == f"run must be a run id (an integer >= 1) or 'latest', got {shown}{suffix}"
        assert not isinstance(info.value, sdm.AmbiguousRunError)
        assert len(set(comm.allgather(str(info.value)))) == 1
    assert catalog_counts(comm, url) == before
