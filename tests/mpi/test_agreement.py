"""Views and session arguments are agreed across ranks: a difference raises, never hangs or mixes data.

Each case gives one rank (or all but one) a different view, mode or argument and expects
the same ``CollectiveMismatchError`` with the same message on every rank, and nothing
recorded in the catalog or written to the data files.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
import sdm

from _reference import catalog_counts

SHAPE = (12, 4)


def _raises_everywhere(comm, exc, match, fn):
    with pytest.raises(exc, match=match) as info:
        fn()
    assert type(info.value) is exc
    seen = comm.allgather((type(info.value).__name__, str(info.value)))
    assert len(set(seen)) == 1, seen
    return info.value


def _files_digest(comm, root):
    """Rank 0's digest of every data file under *root* (names and bytes), shared with all ranks."""
    digest = None
    if comm.Get_rank() == 0:
        h = hashlib.sha256()
        for p in sorted(Path(root).rglob("*")):
            if p.is_file() and not p.name.startswith("cat"):
                h.update(str(p).encode())
                h.update(p.read_bytes())
        digest = h.hexdigest()
    return comm.bcast(digest)


def _distributions(comm, url, run_id):
    out = None
    if comm.Get_rank() == 0:
        cat = sdm.Catalog(url)
        out = {d.name: d.distribution for g in cat.run(run_id).groups for d in g.datasets}
        cat.close()
    return comm.bcast(out)


@pytest.fixture
def setup(comm, mpi_tmp):
    if comm.Get_size() == 1:
        pytest.skip("needs two ranks to disagree")
    url = f"sqlite:///{mpi_tmp}/cat.db"
    s = sdm.open("agree", root=mpi_tmp, catalog=url)
    g = s.make_group("g", ["a"], dtype="f8", shape=SHAPE, level=3)
    local = np.full(g.local_shape("a"), 1.0 + comm.Get_rank())
    g.write("a", 0, local)
    yield s, g, local, url, mpi_tmp
    s.close()


def _row_box(comm):
    n, size, rank = SHAPE[0], comm.Get_size(), comm.Get_rank()
    lo, hi = n * rank // size, n * (rank + 1) // size
    return (lo, 0), (hi - lo, SHAPE[1])


def _views(comm, case):
    """(view on rank 0, view on the other ranks) for each case of the issue."""
    rank = comm.Get_rank()
    rows = np.arange(rank, SHAPE[0], comm.Get_size())
    return {
        "block-cyclic": (sdm.Block(), sdm.Cyclic()),
        "blockcyclic-blocks": (sdm.BlockCyclic(blocks=2), sdm.BlockCyclic(blocks=3)),
        "block-subarray": (sdm.Block(), sdm.Subarray(*_row_box(comm))),
        "subarray-block": (sdm.Subarray(*_row_box(comm)), sdm.Block()),
        "maparray-block": (sdm.MapArray(rows), sdm.Block()),
        "block-maparray": (sdm.Block(), sdm.MapArray(rows)),
        "maparray-coverage": (sdm.MapArray(rows), sdm.MapArray(rows, coverage=False)),
        "grid": (sdm.Block(grid=(comm.Get_size(), 1)), sdm.Block(grid=(1, comm.Get_size()))),
    }[case]


EXPECTED = {
    "block-cyclic": r"rank 0: block\(grid=null\); ranks? 1.*: cyclic\(grid=null\)",
    "blockcyclic-blocks": r"rank 0: block_cyclic\(blocks=2, grid=null\); ranks? 1.*: block_cyclic\(blocks=3, grid=null\)",
    "block-subarray": r"rank 0: block\(grid=null\); ranks? 1.*: subarray\(\)",
    "subarray-block": r"rank 0: subarray\(\); ranks? 1.*: block\(grid=null\)",
    "maparray-block": r"rank 0: map\(coverage=true, reading=false\); ranks? 1.*: block\(grid=null\)",
    "block-maparray": r"rank 0: block\(grid=null\); ranks? 1.*: map\(coverage=true, reading=false\)",
    "maparray-coverage": r"rank 0: map\(coverage=true, reading=false\); ranks? 1.*: map\(coverage=false, reading=false\)",
    "grid": r"rank 0: block\(grid=\[\d, \d\]\); ranks? 1.*: block\(grid=\[\d, \d\]\)",
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", list(EXPECTED))
def test_data_view_differs_between_ranks(comm, setup, case):
    s, g, local, url, root = setup
    before, files = catalog_counts(comm, url), _files_digest(comm, root)
    mine = _views(comm, case)[0 if comm.Get_rank() == 0 else 1]
    err = _raises_everywhere(comm, sdm.CollectiveMismatchError,
                             r"^ranks gave different data views to data_view of group 'g' \(" + EXPECTED[case],
                             lambda: g.data_view(mine))
    assert "every rank must give the same kind of view" in str(err)
    assert catalog_counts(comm, url) == before
    assert _distributions(comm, url, s.run_id) == {"a": None}  # no access pattern recorded
    # the group still works with its old view, and nothing was written
    np.testing.assert_array_equal(g.read("a", 0), local)
    assert _files_digest(comm, root) == files


@pytest.mark.timeout(60)
def test_data_view_of_different_datasets(comm, mpi_tmp):
    if comm.Get_size() == 1:
        pytest.skip("needs two ranks to disagree")
    url = f"sqlite:///{mpi_tmp}/cat.db"
    with sdm.open("agree", root=mpi_tmp, catalog=url) as s:
        g = s.make_group("g", ["a", "b"], dtype="f8", shape=SHAPE)
        before = catalog_counts(comm, url)
        names = ["a"] if comm.Get_rank() == 0 else ["b"]
        _raises_everywhere(comm, sdm.CollectiveMismatchError,
                           r"^ranks made different data_view of group 'g' calls \(rank 0: \['a'\]; ranks? 1.*: \['b'\]\)",
                           lambda: g.data_view(sdm.Cyclic(), names))
        assert catalog_counts(comm, url) == before


@pytest.mark.timeout(60)
def test_make_group_with_a_view_on_some_ranks_only(comm, mpi_tmp):
    if comm.Get_size() == 1:
        pytest.skip("needs two ranks to disagree")
    url = f"sqlite:///{mpi_tmp}/cat.db"
    with sdm.open("agree", root=mpi_tmp, catalog=url) as s:
        before = catalog_counts(comm, url)
        view = sdm.Cyclic() if comm.Get_rank() == 0 else None
        _raises_everywhere(comm, sdm.CollectiveMismatchError,
                           r"^ranks gave different data views to make_group 'g' \(rank 0: cyclic\(grid=null\); "
                           r"ranks? 1.*: the default view \(Block over all ranks\)\)",
                           lambda: s.make_group("g", ["a"], dtype="f8", shape=SHAPE, view=view))
        assert catalog_counts(comm, url) == before  # no group defined
        assert s.groups == []


@pytest.mark.timeout(60)
def test_the_same_view_on_every_rank_still_works(comm, mpi_tmp):
    """Views that agree (ghosts may differ per rank) are accepted and the data land where numpy says."""
    url = f"sqlite:///{mpi_tmp}/cat.db"
    rank, size = comm.Get_rank(), comm.Get_size()
    G = np.arange(np.prod(SHAPE), dtype="f8").reshape(SHAPE)
    with sdm.open("agree", root=mpi_tmp, catalog=url) as s:
        g = s.make_group("g", ["a"], dtype="f8", shape=SHAPE, view=sdm.Block(grid=(size, 1), ghosts=rank % 2))
        p = g.piece("a")
        local = np.zeros(g.local_shape("a"))
        local[p.interior] = G[np.ix_(*p.indices)]
        g.write("a", 0, local)
        g.data_view(sdm.BlockCyclic(blocks=2))
        p = g.piece("a")
        np.testing.assert_array_equal(g.read("a", 0), G[np.ix_(*p.indices)])


# --------------------------------------------------------------------------- sdm.open


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode0, others", [("w", "r"), ("r", "w"), ("a", "r")])
def test_open_with_different_modes(comm, mpi_tmp, mode0, others):
    if comm.Get_size() == 1:
        pytest.skip("needs two ranks to disagree")
    url = f"sqlite:///{mpi_tmp}/cat.db"
    with sdm.open("agree", root=mpi_tmp, catalog=url) as s:
        g = s.make_group("g", ["a"], dtype="f8", shape=SHAPE)
        g.write("a", 0, np.ones(g.local_shape("a")))
    before, files = catalog_counts(comm, url), _files_digest(comm, mpi_tmp)
    mode = mode0 if comm.Get_rank() == 0 else others
    _raises_everywhere(
        comm, sdm.CollectiveMismatchError,
        rf"^ranks opened the session with different arguments: mode \(rank 0: \"{mode0}\"; ranks? 1.*: \"{others}\"\); "
        "every rank must call sdm.open with the same application, mode, run, root, catalog and options$",
        lambda: sdm.open("agree", mode, root=mpi_tmp, catalog=url))
    assert catalog_counts(comm, url) == before  # no run registered
    assert _files_digest(comm, mpi_tmp) == files


@pytest.mark.timeout(60)
def test_open_with_different_catalogs_never_shows_the_urls(comm, mpi_tmp):
    if comm.Get_size() == 1:
        pytest.skip("needs two ranks to disagree")
    url = f"sqlite:///{mpi_tmp}/cat{min(comm.Get_rank(), 1)}.db"
    err = _raises_everywhere(
        comm, sdm.CollectiveMismatchError,
        r"^ranks opened the session with different arguments: catalog \(rank 0: URL 1; ranks? 1.*: URL 2; URLs not shown\)",
        lambda: sdm.open("agree", root=mpi_tmp, catalog=url))
    assert "cat0" not in str(err) and "cat1" not in str(err)
    assert not list(Path(mpi_tmp).glob("*.db"))  # no catalog created


@pytest.mark.timeout(60)
def test_open_with_different_application_run_and_options(comm, mpi_tmp):
    if comm.Get_size() == 1:
        pytest.skip("needs two ranks to disagree")
    url = f"sqlite:///{mpi_tmp}/cat.db"
    first = comm.Get_rank() == 0
    _raises_everywhere(
        comm, sdm.CollectiveMismatchError,
        r"^ranks opened the session with different arguments: application \(rank 0: \"x\"; ranks? 1.*: \"y\"\), "
        r"method \(rank 0: \"auto\"; ranks? 1.*: \"posix\"\), verify \(rank 0: false; ranks? 1.*: true\);",
        lambda: sdm.open("x" if first else "y", root=mpi_tmp, catalog=url, method="auto" if first else "posix",
                         verify=not first))
    _raises_everywhere(
        comm, sdm.CollectiveMismatchError,
        r"^ranks opened the session with different arguments: run \(rank 0: 1; ranks? 1.*: 2\);",
        lambda: sdm.open("x", "r", root=mpi_tmp, catalog=url, run=1 if first else 2))
    assert not list(Path(mpi_tmp).glob("*.db"))
