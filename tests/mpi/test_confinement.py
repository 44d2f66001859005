"""A forged catalog row is refused on every rank (rank 0 finds it, every rank raises the same error, none hangs).

Run A (the victim) and run B are written by every rank with a block distribution; rank 0
then points B's level-3 file row at A's data file in the database.  A read and a
truncation of B, collective calls whose plan rank 0 makes, must raise the same
``IntegrityError`` on every rank and leave A's file as it was (bytes, size, mtime, inode);
the session goes on working for the rows that are intact.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import sdm
import sqlalchemy as sa
from sdm.catalog import Catalog
from sdm.errors import IntegrityError

SHAPE = (12, 10)


def _global(step: int) -> np.ndarray:
    return np.arange(np.prod(SHAPE), dtype="<f8").reshape(SHAPE) * (1 + step) + 7


def _write(root, url, application: str) -> int:
    with sdm.open(application, root=str(root), catalog=url) as s:
        fields = s.make_group("fields", ["T"], dtype="<f8", shape=SHAPE, level=3)
        snap = s.make_group("snap", ["Q"], dtype="<f8", shape=SHAPE, level=1)
        for step in range(3):
            for g, name in ((fields, "T"), (snap, "Q")):
                g.write(name, step, np.ascontiguousarray(_global(step)[np.ix_(*g.piece(name).indices)]))
        return s.run_id


def _same_everywhere(comm, err: pytest.ExceptionInfo) -> str:
    messages = comm.allgather(f"{type(err.value).__name__}: {err.value}")
    assert len(set(messages)) == 1, messages
    return str(err.value)


@pytest.mark.timeout(120)
def test_a_forged_row_is_refused_on_every_rank(comm, mpi_tmp) -> None:
    root, url = mpi_tmp / "root", f"sqlite:///{mpi_tmp}/root/catalog.db"
    a, b = _write(root, url, "victim"), _write(root, url, "attacker")
    victim = kept = None
    if comm.rank == 0:
        cat = Catalog(url)
        try:
            (theirs,) = {w.path for g, _, w in cat.writes(a) if g == "fields"}
            (mine,) = {w.path for g, _, w in cat.writes(b) if g == "fields"}
        finally:
            cat.close()
        engine = sa.create_engine(url)
        with engine.begin() as con:
            con.execute(sa.text("UPDATE files SET path = :new WHERE run_id = :run AND path = :old"),
                        {"new": theirs, "old": mine, "run": b})
        engine.dispose()
        victim = root / theirs
        st = os.stat(victim)
        kept = (victim.read_bytes(), st.st_size, st.st_mtime_ns, st.st_ino)
    theirs = comm.bcast(theirs if comm.rank == 0 else None)
    with sdm.open("attacker", "a", root=str(root), catalog=url, run=b) as s:
        with pytest.raises(IntegrityError) as err:
            s.group("fields").read("T", 1)
        assert _same_everywhere(comm, err).startswith(
            f"run {b}'s catalog row of dataset fields/T step 1 names the path {theirs!r}, which resolves to ")
        with pytest.raises(IntegrityError) as err:
            s.truncate(1)
        assert _same_everywhere(comm, err).startswith(
            f"run {b}'s catalog row of dataset fields/T step 2 names the path {theirs!r}, which resolves to ")
        g = s.group("snap")  # the intact rows still read, on every rank
        np.testing.assert_array_equal(g.read("Q", 2, verify=True), _global(2)[np.ix_(*g.piece("Q").indices)])
    if comm.rank == 0:
        st = os.stat(victim)
        assert (victim.read_bytes(), st.st_size, st.st_mtime_ns, st.st_ino) == kept
