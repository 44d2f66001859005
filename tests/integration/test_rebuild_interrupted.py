"""An interrupted ``sdm rebuild`` run again: the catalog it completes can append to its runs.

``sdm rebuild`` commits one run per transaction and gives the new catalog the identity its run
directories name (``catalog_info.uuid``, checked by every session that appends to a run) at the
end.  A rebuild interrupted in between (kill -9, Ctrl-C: ``benchmarks/crash.py --kinds
rebuild`` kills it at random) leaves some runs and the new catalog's own identity; the rerun
must still give the catalog the runs' identity, else appending to a run through it is refused.
Here the interruption is a ``KeyboardInterrupt`` (what Ctrl-C raises) from the progress callback,
which runs right after the first run's commit: the same state a kill there leaves.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

import sdm
from sdm.catalog.rebuild import find_run_dirs, rebuild

pytestmark = pytest.mark.timeout(300)

APP = "resumed"


def field(run: int, step: int) -> np.ndarray:
    return np.arange(12, dtype="<f8").reshape(3, 4) + 100.0 * run + step


def write_runs(root: Path, url: str, count: int) -> list[int]:
    ids = []
    for _ in range(count):
        with sdm.open(APP, "w", root=str(root), catalog=url) as s:
            g = s.make_group("g", ["a"], dtype="<f8", shape=(3, 4), level=3)
            for step in (0, 1):
                g.write("a", step, field(s.run_id, step))
            ids.append(s.run_id)
    return ids


def identity(path: Path) -> str:
    con = sqlite3.connect(path)
    try:
        return con.execute("SELECT value FROM catalog_info WHERE key = 'uuid'").fetchone()[0]
    finally:
        con.close()


def run_ids(path: Path) -> list[int]:
    con = sqlite3.connect(path)
    try:
        return [int(r[0]) for r in con.execute("SELECT id FROM runs ORDER BY id")]
    finally:
        con.close()


def test_a_rebuild_interrupted_after_its_first_run_completes_with_the_runs_identity(tmp_path: Path) -> None:
    root = tmp_path / "data"
    ids = write_runs(root, f"sqlite:///{tmp_path / 'lost.db'}", 3)
    new = tmp_path / "rebuilt.db"

    def interrupt(done: int, total: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        rebuild(root, f"sqlite:///{new}", progress=interrupt)
    assert run_ids(new) == ids[:1]  # one run committed, the identity not yet taken
    assert identity(new) != identity(tmp_path / "lost.db")

    report = rebuild(root, f"sqlite:///{new}")
    assert (report.added, report.present) == (ids[1:], ids[:1])
    assert identity(new) == identity(tmp_path / "lost.db")
    with sdm.open(APP, "a", root=str(root), catalog=f"sqlite:///{new}", run=ids[-1]) as s:  # refused before
        s.group("g").write("a", 2, field(ids[-1], 2))
    with sdm.open(APP, "r", catalog=f"sqlite:///{new}", run=ids[-1]) as s:
        for step in (0, 1, 2):
            np.testing.assert_array_equal(s.group("g").read("a", step, verify=True), field(ids[-1], step))


def test_a_catalog_holding_runs_of_its_own_keeps_its_identity(tmp_path: Path) -> None:
    """Rebuilding another catalog's run into a catalog that holds a run of its own adds the run and leaves the
    catalog's identity (its own run's directory names it)."""
    mine = tmp_path / "mine.db"
    (own,) = write_runs(tmp_path / "mine", f"sqlite:///{mine}", 1)
    other = write_runs(tmp_path / "other", f"sqlite:///{tmp_path / 'other.db'}", 2)
    before = identity(mine)
    second = [d for d in find_run_dirs(tmp_path / "other") if d.name.startswith(f"run-{other[1]:06d}-")]
    report = rebuild(second[0], f"sqlite:///{mine}")
    assert report.added == [other[1]]
    assert identity(mine) == before
    assert run_ids(mine) == [own, other[1]]
    with sdm.open(APP, "a", root=str(tmp_path / "mine"), catalog=f"sqlite:///{mine}", run=own) as s:
        s.group("g").write("a", 2, field(own, 2))
    with sdm.open(APP, "r", catalog=f"sqlite:///{mine}", run=other[1]) as s:
        np.testing.assert_array_equal(s.group("g").read("a", 1, verify=True), field(other[1], 1))
