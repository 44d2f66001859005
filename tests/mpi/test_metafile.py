"""The run's meta-file as sessions write it: order of records, refused changes, what rebuild makes of it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import sdm
from sdm.catalog.metafile import META, read_meta

pytestmark = pytest.mark.timeout(120)


def test_records_follow_the_catalog_and_refusals_are_aborted(comm, mpi_tmp):
    url = f"sqlite:///{mpi_tmp}/catalog.db"
    with sdm.open("meta", root=mpi_tmp, catalog=url, attributes={"n": 4}) as s:
        g = s.make_group("g", ["a"], dtype="<f8", shape=(comm.size * 3,), level=2)
        with pytest.raises(sdm.GroupExistsError):  # recorded first, then refused: an abort record follows
            s.make_group("g", ["a", "b"], dtype="<f8", shape=(comm.size * 3,), level=2)
        for step in (0, 1):
            g.write("a", step, np.full(3, step + 0.5 * comm.rank))
        run_dir = Path(s.root) / s.run_dir
        rid = s.run_id
    with sdm.open("meta", "a", root=mpi_tmp, catalog=url, run=rid) as s:
        s.group("g").write("a", 2, np.full(3, 2.0))
    failed = None
    if comm.rank == 0:
        try:
            check(run_dir, url, rid, mpi_tmp)
        except BaseException as exc:  # every rank fails, none waits
            failed = repr(exc)
    assert comm.bcast(failed) is None
    # the rebuilt catalog took the run directories' catalog id: the run can be continued from it
    url2 = f"sqlite:///{mpi_tmp}/rebuilt.db"
    with sdm.open("meta", "a", root=mpi_tmp, catalog=url2, run=rid) as s:
        g = s.group("g")
        g.write("a", 3, np.full(3, 3.0))
        assert g.steps("a") == [0, 1, 2, 3]
        np.testing.assert_array_equal(g.read("a", 1, verify=True), np.full(3, 1 + 0.5 * comm.rank))
    if comm.rank == 0:
        assert [r["t"] for r in read_meta(run_dir).records][-3:] == ["open", "writes", "close"]


def check(run_dir: Path, url: str, rid: int, mpi_tmp: Path) -> None:
    """Rank 0: the records against the catalog, and the catalog rebuild makes of them."""
    log = read_meta(run_dir)
    kinds = [r["t"] for r in log.records]
    assert kinds == ["run", "group", "group", "abort", "writes", "writes", "close", "open", "writes", "close"]
    assert log.records[3]["ref"] == log.records[2]["id"]
    assert [r["v"] for r in log.records] == [1] * len(kinds)
    assert (run_dir / META).read_bytes() == (run_dir / (META + ".bak")).read_bytes()
    cat = sdm.catalog.Catalog(url)
    rows = {w.step: w for _, _, w in cat.writes(rid)}
    from sdm import maintenance

    assert maintenance.verify_run(cat, rid).ok  # the meta-files are not unreferenced data
    maintenance.gc_run(cat, rid)
    assert read_meta(run_dir).records == log.records  # and gc leaves them
    cat.close()
    recorded = [w for r in log.records if r["t"] == "writes" for w in r["writes"]]
    assert [(w["step"], w["offset"], w["checksum"]) for w in recorded] == \
        [(k, rows[k].offset, rows[k].checksum) for k in (0, 1, 2)]
    assert [r["written_at"] for r in log.records if r["t"] == "writes"] == \
        [rows[k].written_at.isoformat() for k in (0, 1, 2)]
    from sdm.catalog.rebuild import rebuild

    url2 = f"sqlite:///{mpi_tmp}/rebuilt.db"
    assert rebuild(mpi_tmp, url2).added == [rid]
    cat = sdm.catalog.Catalog(url2)
    again = cat.run(rid)
    cat.close()
    assert [(g.name, [d.name for d in g.datasets]) for g in again.groups] == [("g", ["a"])]
    assert list(again.groups[0].datasets[0].steps or ()) == [0, 1, 2] and again.state == "closed"
    assert json.loads(json.dumps(again.attributes)) == {"n": 4}


def test_group_kinds_and_truncations_are_rebuilt(comm, mpi_tmp):
    """A truncation is a record; rebuild erases the same steps and keeps kinds, steps per file and the truncation point."""
    url = f"sqlite:///{mpi_tmp}/catalog.db"
    with sdm.open("meta", root=mpi_tmp, catalog=url) as s:
        mesh = s.make_group("mesh", ["xy"], dtype="<f8", shape=(comm.size * 2,), level=3, kind="topology")
        fields = s.make_group("fields", ["u", "v"], dtype="<f4", shape=(comm.size * 2,), level=3, steps_per_file=2)
        mesh.write("xy", 0, np.full(2, 0.5 + comm.rank))
        for step in range(6):
            fields.write_step(step, {"u": np.full(2, step + comm.rank, "<f4"), "v": np.full(2, -step, "<f4")})
        s.truncate(after_step=3, groups=["fields"])
        fields.write("u", 4, np.full(2, 40.0 + comm.rank, "<f4"))  # the restart's step 4
        run_dir, rid = Path(s.root) / s.run_dir, s.run_id
    failed = None
    if comm.rank == 0:
        try:
            log = read_meta(run_dir)
            assert [r for r in log.records if r["t"] == "truncate"][0] | {"id": None, "crc": None} == \
                {"v": 1, "t": "truncate", "after": 3, "groups": ["fields"], "id": None, "crc": None}
            from sdm.catalog.rebuild import rebuild

            url2 = f"sqlite:///{mpi_tmp}/rebuilt.db"
            rebuild(mpi_tmp, url2)
            shape = []
            for u in (url, url2):
                cat = sdm.catalog.Catalog(u)
                rec = cat.run(rid)
                shape.append([(g.name, g.kind, g.steps_per_file, g.truncated_after,
                               [(d.name, d.steps, d.nsteps, d.first_step, d.last_step) for d in g.datasets])
                              for g in rec.groups])
                shape.append(sorted((gn, dn, w.step, w.path, w.offset, w.checksum) for gn, dn, w in cat.writes(rid)))
                cat.close()
            assert shape[0] == shape[2] and shape[1] == shape[3]
            assert shape[0] == [("mesh", "topology", None, None, [("xy", (0,), 1, 0, 0)]),
                                ("fields", "state", 2, 3, [("u", (0, 1, 2, 3, 4), 5, 0, 4), ("v", (0, 1, 2, 3), 4, 0, 3)])]
        except BaseException as exc:  # every rank fails, none waits
            failed = repr(exc)
    assert comm.bcast(failed) is None
    with sdm.open("meta", "r", root=mpi_tmp, catalog=f"sqlite:///{mpi_tmp}/rebuilt.db", run=rid) as s:
        np.testing.assert_array_equal(s.group("fields").read("u", 4, verify=True), np.full(2, 40.0 + comm.rank, "<f4"))
        np.testing.assert_array_equal(s.group("fields").read("v", 3, verify=True), np.full(2, -3.0, "<f4"))


def test_a_run_without_a_meta_file(comm, mpi_tmp):
    """``metafile=False``: no meta-file, the marker says so, rebuild refuses the run, appending follows its choice."""
    url = f"sqlite:///{mpi_tmp}/catalog.db"
    local = np.arange(4, dtype="<i4") + 10 * comm.rank
    with sdm.open("nometa", root=mpi_tmp, catalog=url, metafile=False) as s:
        s.make_group("g", ["a"], dtype="<i4", shape=(comm.size * 4,), level=3).write("a", 0, local)
        run_dir, rid = Path(s.root) / s.run_dir, s.run_id
    with sdm.open("nometa", "a", root=mpi_tmp, catalog=url, run=rid) as s:  # metafile=True: the run's choice holds
        s.group("g").write("a", 1, local + 1)
    with pytest.raises(sdm.InvalidArgumentError, match="^metafile must be True or False"):
        sdm.open("nometa", root=mpi_tmp, catalog=url, metafile="no")
    with sdm.open("nometa", "r", root=mpi_tmp, catalog=url, run=rid) as s:
        g = s.group("g")
        assert g.steps("a") == [0, 1]
        for step in (0, 1):
            np.testing.assert_array_equal(g.read("a", step, verify=True), local + step)
    failed = None
    if comm.rank == 0:
        try:
            assert sorted(p.name for p in run_dir.iterdir() if p.name.startswith(".")) == [".sdm-run"]
            assert json.loads((run_dir / ".sdm-run").read_text())["metafile"] is False
            from sdm.catalog.rebuild import rebuild

            url2 = f"sqlite:///{mpi_tmp}/rebuilt.db"
            why = f"run directory {run_dir} was written with metafile=False: its run cannot be rebuilt from its data"
            with pytest.raises(sdm.IntegrityError) as err:
                rebuild(run_dir, url2)
            assert str(err.value) == why
            report = rebuild(mpi_tmp, url2)  # under a data root: left out, with a note
            assert (report.added, report.notes) == ([], [why + "; left out"])
            import sqlite3

            con = sqlite3.connect(f"{mpi_tmp}/rebuilt.db")
            assert con.execute("SELECT count(*) FROM runs").fetchone() == (0,)
            con.close()
        except BaseException as exc:  # every rank fails, none waits
            failed = repr(exc)
    assert comm.bcast(failed) is None


def test_appending_without_the_meta_file_of_a_run_that_keeps_one_is_refused(comm, mpi_tmp):
    url = f"sqlite:///{mpi_tmp}/catalog.db"
    with sdm.open("meta", root=mpi_tmp, catalog=url) as s:
        s.make_group("g", ["a"], dtype="<f8", shape=(comm.size,), level=2).write("a", 0, np.ones(1))
        run_dir, rid = Path(s.root) / s.run_dir, s.run_id
    before = (run_dir / META).read_bytes() if comm.rank == 0 else b""
    with pytest.raises(sdm.InvalidArgumentError) as err:
        sdm.open("meta", "a", root=mpi_tmp, catalog=url, run=rid, metafile=False)
    assert str(err.value) == (f"run {rid} keeps a meta-file: appending with metafile=False would leave these writes "
                              "out of it (a rebuild would lose them); open it with metafile=True")
    with sdm.open("meta", "r", root=mpi_tmp, catalog=url, run=rid) as s:  # nothing changed: still closed, one step
        assert s.previous_state == "closed" and s.group("g").steps("a") == [0]
    if comm.rank == 0:
        assert (run_dir / META).read_bytes() == before
