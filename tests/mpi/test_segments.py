"""Segments: group kinds, ``Session.truncate`` then new steps, and ``steps_per_file``.

Every value read back, and the bytes at the catalog's offsets (``numpy.memmap``), are
compared with global arrays built here with numpy alone; after each truncation
``sdm verify`` finds every row whole and no unreferenced byte, and the datasets' step
summaries equal the aggregates of the rows that remain.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pytest
import sdm
from mpi4py import MPI
from sdm.catalog import Catalog
from sdm.catalog.metafile import BACKUP, META
from sdm.errors import GroupExistsError, GroupNotFoundError, InvalidArgumentError, ReadOnlyError, StepExistsError
from sdm.maintenance import verify_run

SHAPE = (12, 10)
#: What a run directory holds besides data files: its marker and its meta-file with the backup.
RUN_FILES = [".sdm-run", META, BACKUP]
#: What an error found by a local check carries when several ranks ran it (the lowest failing rank)
RANK0 = " [rank 0]" if MPI.COMM_WORLD.Get_size() > 1 else ""
MESH = (7, 3)


def _global(shape, step, seed=0):
    """The global array of one step (every element differs, every step differs)."""
    return (np.arange(np.prod(shape), dtype="f8").reshape(shape) * 1.5 + 1000.0 * step + seed)


def _local(g, name, G):
    """This rank's piece of global *G* under the group's (default block) view, from its global indices."""
    return np.ascontiguousarray(G[np.ix_(*g.piece(name).indices)])


def _write(g, name, step, seed=0, shape=SHAPE, **kw):
    g.write(name, step, _local(g, name, _global(shape, step, seed)), **kw)


def _check_reads(g, name, steps, seed=0, shape=SHAPE):
    for step in steps:
        got = g.read(name, step, verify=True)
        np.testing.assert_array_equal(got, _local(g, name, _global(shape, step, seed)))


def _check_run(comm, url, run_id, expected):
    """Rank 0: bytes at the catalog's offsets, summaries equal to the rows' aggregates, `sdm verify` clean.

    *expected* maps (group, dataset) to {step: seed}.
    """
    if comm.Get_rank() != 0:
        return
    cat = Catalog(url, create=False)
    try:
        rec = cat.run(run_id)
        rows = cat.writes(run_id)
        for grec in rec.groups:
            for d in grec.datasets:
                mine = sorted((w.step, w) for gname, dname, w in rows if (gname, dname) == (grec.name, d.name))
                want = expected[(grec.name, d.name)]
                assert [s for s, _ in mine] == sorted(want) == list(d.steps)
                assert d.nsteps == len(mine)
                assert (d.first_step, d.last_step) == ((mine[0][0], mine[-1][0]) if mine else (None, None))
                for step, w in mine:
                    on_disk = np.memmap(Path(rec.root) / w.path, dtype="f8", mode="r", offset=w.offset, shape=d.shape)
                    np.testing.assert_array_equal(on_disk, _global(d.shape, step, want[step]))
        with cat.engine.connect() as con:
            nbytes = dict(con.exec_driver_sql("SELECT id, nbytes_written FROM datasets").all())
        for grec in rec.groups:
            for d in grec.datasets:
                assert nbytes[d.id] == sum(w.nbytes for _, _, w in rows if w.dataset_id == d.id)
        report = verify_run(cat, run_id)
        assert report.ok, report.problems
        assert report.unreferenced == [], report.unreferenced
    finally:
        cat.close()


@pytest.mark.parametrize("level", [1, 2, 3])
def test_truncate_then_new_steps(comm, mpi_tmp, level):
    url = f"sqlite:///{mpi_tmp}/cat.db"
    with sdm.open("seg", root=mpi_tmp, catalog=url) as s:
        g = s.make_group("fields", ["T", "q"], dtype="f8", shape=SHAPE, level=level)
        mesh = s.make_group("mesh", ["xy"], dtype="f8", shape=MESH, level=level, kind="topology")
        assert (g.kind, mesh.kind) == ("state", "topology")
        _write(mesh, "xy", 0, seed=7, shape=MESH)
        _write(mesh, "xy", 20, seed=7, shape=MESH)
        for step in (0, 10, 20, 30, 40):
            _write(g, "T", step)
            _write(g, "q", step, seed=1)
        done = s.truncate(after_step=20)
        run_id = s.run_id
        assert done.groups == ("fields", "mesh") and done.after_step == 20
        assert done.writes == (("fields", "T", 30), ("fields", "T", 40), ("fields", "q", 30), ("fields", "q", 40))
        assert done.nbytes == 4 * 8 * int(np.prod(SHAPE)) and done.left == ()
        assert g.steps("T") == g.steps("q") == [0, 10, 20] and mesh.steps("xy") == [0, 20]
        # the restart: step 21 on, cleanly, with new values at the erased steps
        for step in (21, 30):
            _write(g, "T", step, seed=5)
            _write(g, "q", step, seed=6)
        with pytest.raises(InvalidArgumentError) as info:
            _write(g, "T", 15)
        assert str(info.value) == (f"step 15 of dataset 'T' (group 'fields', run {run_id}) comes before the group's "
                                   "truncation after step 20: new steps must be > 20" + RANK0)
        with pytest.raises(StepExistsError):
            _write(g, "T", 10)
        _write(g, "T", 10, seed=9, overwrite=True)  # an overwrite of a step kept is still allowed
        _check_reads(g, "T", [0, 20])
        _check_reads(g, "T", [10], seed=9)
        _check_reads(g, "T", [21, 30], seed=5)
        _check_reads(g, "q", [21, 30], seed=6)
        assert mesh.step_at("xy", 30) == 20 and mesh.step_at("xy", 19) == 0
    expected = {("fields", "T"): {0: 0, 10: 9, 20: 0, 21: 5, 30: 5}, ("fields", "q"): {0: 1, 10: 1, 20: 1, 21: 6, 30: 6},
                ("mesh", "xy"): {0: 7, 20: 7}}
    if level != 1:  # the overwrite of step 10 left its old bytes unreferenced: reclaimed first
        if comm.Get_rank() == 0:
            from sdm.maintenance import gc_run

            cat = Catalog(url, create=False)
            gc_run(cat, run_id)
            cat.close()
        comm.Barrier()
    else:
        if comm.Get_rank() == 0:  # the superseded version's file
            (Path(mpi_tmp) / _run_dir(url, run_id) / "fields.T.s00000010.sdm").unlink()
        comm.Barrier()
    _check_run(comm, url, run_id, expected)
    # a later session sees the kinds and the truncation point
    with sdm.open("seg", "a", root=mpi_tmp, catalog=url, run=run_id) as s:
        g, mesh = s.group("fields"), s.group("mesh")
        assert (g.kind, mesh.kind, g.record.truncated_after) == ("state", "topology", 20)
        with pytest.raises(InvalidArgumentError, match=re.escape("new steps must be > 20" + RANK0) + "$"):
            _write(g, "q", 12)
        _write(g, "q", 50, seed=3)
        _check_reads(g, "q", [50], seed=3)


def _run_dir(url, run_id):
    cat = Catalog(url, create=False)
    try:
        return cat.run(run_id).dir
    finally:
        cat.close()


def test_truncate_topology_group_only(comm, mpi_tmp):
    url = f"sqlite:///{mpi_tmp}/cat.db"
    with sdm.open("seg", root=mpi_tmp, catalog=url) as s:
        g = s.make_group("fields", ["T"], dtype="f8", shape=SHAPE, level=3)
        mesh = s.make_group("mesh", ["xy"], dtype="f8", shape=MESH, level=2, kind="topology")
        for step in (0, 5, 10):
            _write(mesh, "xy", step, seed=2, shape=MESH)
            _write(g, "T", step)
        done = s.truncate(after_step=0, groups=["mesh"])
        assert done.groups == ("mesh",) and done.writes == (("mesh", "xy", 5), ("mesh", "xy", 10))
        assert [p.rsplit("/", 1)[1] for p, _ in done.cut_files] == ["mesh.xy.sdm"] and done.removed_files == ()
        assert mesh.steps("xy") == [0] and g.steps("T") == [0, 5, 10]
        _write(g, "T", 3)  # the state group was not truncated: any new step
        _write(mesh, "xy", 7, seed=4, shape=MESH)
        _check_reads(mesh, "xy", [0], seed=2, shape=MESH)
        _check_reads(mesh, "xy", [7], seed=4, shape=MESH)
        _check_reads(g, "T", [0, 3, 5, 10])
        run_id = s.run_id
    _check_run(comm, url, run_id, {("fields", "T"): {0: 0, 3: 0, 5: 0, 10: 0}, ("mesh", "xy"): {0: 2, 7: 4}})


@pytest.mark.parametrize("level", [2, 3])
def test_steps_per_file(comm, mpi_tmp, level):
    url = f"sqlite:///{mpi_tmp}/cat.db"
    with sdm.open("spf", root=mpi_tmp, catalog=url) as s:
        g = s.make_group("fields", ["T", "q"], dtype="f8", shape=SHAPE, level=level, steps_per_file=3)
        assert g.steps_per_file == 3
        for step in range(8):
            _write(g, "T", step)
            _write(g, "q", step, seed=1)
        run_id, run_dir = s.run_id, s.run_dir
        stems = ["fields.T", "fields.q"] if level == 2 else ["fields"]
        ranges = ["s00000000-00000002", "s00000003-00000005", "s00000006-00000008"]
        names = sorted(f"{stem}.{r}.sdm" for stem in stems for r in ranges)
        assert sorted(os.listdir(Path(mpi_tmp) / run_dir)) == sorted(names + RUN_FILES)
        if s.rank == 0:
            for _, dname, w in s.catalog.writes(run_id):
                first = w.step // 3 * 3
                stem = "fields" if level == 3 else f"fields.{dname}"
                assert Path(w.path).name == f"{stem}.s{first:08d}-{first + 2:08d}.sdm"
        comm.Barrier()
        _check_run(comm, url, run_id, {("fields", "T"): dict.fromkeys(range(8), 0),
                                       ("fields", "q"): dict.fromkeys(range(8), 1)})
        done = s.truncate(after_step=4)
        assert sorted(Path(p).name for p in done.removed_files) == sorted(f"{stem}.{ranges[2]}.sdm" for stem in stems)
        assert sorted(Path(p).name for p, _ in done.cut_files) == sorted(f"{stem}.{ranges[1]}.sdm" for stem in stems)
        for step in (5, 6, 9):
            _write(g, "T", step, seed=3)
            _write(g, "q", step, seed=4)
        _check_reads(g, "T", range(5))
        _check_reads(g, "T", [5, 6, 9], seed=3)
        _check_reads(g, "q", [5, 6, 9], seed=4)
        assert sorted(os.listdir(Path(mpi_tmp) / run_dir)) == sorted(
            names + [f"{stem}.s00000009-00000011.sdm" for stem in stems] + RUN_FILES)
    expected_t = {**dict.fromkeys(range(5), 0), 5: 3, 6: 3, 9: 3}
    expected_q = {**dict.fromkeys(range(5), 1), 5: 4, 6: 4, 9: 4}
    _check_run(comm, url, run_id, {("fields", "T"): expected_t, ("fields", "q"): expected_q})


def _snapshot(comm, url, root):
    """Rank 0: every catalog row of the tables a truncation changes, and every file with its size (else None)."""
    if comm.Get_rank() != 0:
        return None
    cat = Catalog(url, create=False)
    try:
        with cat.engine.connect() as con:
            rows = {t: con.exec_driver_sql(f"SELECT * FROM {t} ORDER BY id").all()
                    for t in ("groups", "datasets", "writes", "files")}
    finally:
        cat.close()
    files = {str(p): p.stat().st_size for p in Path(root).rglob("*.sdm")}
    return rows, files


def test_bad_inputs_change_nothing(comm, mpi_tmp):
    url = f"sqlite:///{mpi_tmp}/cat.db"
    with sdm.open("bad", root=mpi_tmp, catalog=url) as s:
        g = s.make_group("fields", ["T"], dtype="f8", shape=SHAPE, level=3)
        for step in (0, 1, 2):
            _write(g, "T", step)
        before = _snapshot(comm, url, mpi_tmp)
        cases = [
            (lambda: s.make_group("a", ["x"], dtype="f8", shape=SHAPE, level=2, steps_per_file=0), InvalidArgumentError,
             "steps_per_file must be a positive integer, got 0" + RANK0),
            (lambda: s.make_group("a", ["x"], dtype="f8", shape=SHAPE, level=2, steps_per_file=2.0),
             InvalidArgumentError, "steps_per_file must be a positive integer, got 2.0" + RANK0),
            (lambda: s.make_group("a", ["x"], dtype="f8", shape=SHAPE, level=1, steps_per_file=10), InvalidArgumentError,
             "steps_per_file applies to levels 2 and 3 (steps appended to a file); level 1 writes a file per step "
             "already" + RANK0),
            (lambda: s.make_group("a", ["x"], dtype="f8", shape=SHAPE, kind="mesh"), InvalidArgumentError,
             "group kind must be 'state' or 'topology', got 'mesh'" + RANK0),
            (lambda: s.make_group("fields", ["T"], dtype="f8", shape=SHAPE, level=3, kind="topology"), GroupExistsError,
             f"group 'fields' already exists in run {s.run_id} with level 3, kind 'state', steps_per_file None, archive None and "
             "datasets [DatasetSpec('T', '<f8', (12, 10), 'C')]; reopen it with the same definition or use another name"),
            (lambda: s.truncate(after_step=-1), InvalidArgumentError,
             "after_step must be an integer >= 0 and <= 9223372036854775807, got -1" + RANK0),
            (lambda: s.truncate(after_step="1"), InvalidArgumentError, "after_step must be an integer, got str '1'" + RANK0),
            (lambda: s.truncate(after_step=0, groups=["fields", "nope"]), GroupNotFoundError,
             f"run {s.run_id} has no group 'nope'; its groups are ['fields']"),
        ]
        for call, cls, message in cases:
            with pytest.raises(cls) as info:
                call()
            assert str(info.value) == message
            assert _snapshot(comm, url, mpi_tmp) == before
        _check_reads(g, "T", [0, 1, 2])
        run_id = s.run_id
    closed = _snapshot(comm, url, mpi_tmp)  # the close appended the file's trailer (sdm.storage.trailer)
    with sdm.open("bad", "r", catalog=url, run=run_id) as s:
        with pytest.raises(ReadOnlyError, match=r"^cannot truncate: the session of run \d+ was opened with mode='r'"):
            s.truncate(after_step=0)
    assert _snapshot(comm, url, mpi_tmp) == closed
