"""Partitioning and index histories, against a brute-force numpy reference."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import sdm
from mpi4py import MPI
from sdm import irregular
from sdm.catalog import irregular as records
from sdm.catalog.metafile import parse_line
from sdm.catalog.rebuild import rebuild
from sdm.irregular import partitioning as partition_module


def _mesh(nx=9, ny=7):
    """A triangulated grid: right, down and diagonal edges (shuffled edge order)."""
    ids = np.arange(nx * ny).reshape(ny, nx)
    e = [np.stack([ids[:, :-1].ravel(), ids[:, 1:].ravel()]), np.stack([ids[:-1].ravel(), ids[1:].ravel()]),
         np.stack([ids[:-1, :-1].ravel(), ids[1:, 1:].ravel()])]
    edges = np.concatenate(e, axis=1).T
    perm = np.random.default_rng(3).permutation(len(edges))
    return edges[perm], nx * ny


def _partvec(n_nodes, nparts, seed=0):
    return np.random.default_rng(seed).integers(0, nparts, n_nodes)


def _blocks(comm, edges, n_nodes):
    mine = np.array_split(np.arange(len(edges)), comm.Get_size())[comm.Get_rank()]
    return irregular.EdgeBlocks(edges[mine, 0], edges[mine, 1], n_nodes, len(edges), comm)


def _reference(edges, part, r):
    owned = np.flatnonzero(part == r)
    touch = (part[edges[:, 0]] == r) | (part[edges[:, 1]] == r)
    ids = np.flatnonzero(touch)
    own_e = ids[part[edges[ids, 0]] == r]
    ghost_e = ids[part[edges[ids, 0]] != r]
    ends = np.unique(edges[ids])
    return owned, ends[part[ends] != r], own_e, ghost_e


def _check(p, edges, part, r):
    owned, ghosts, own_e, ghost_e = _reference(edges, part, r)
    np.testing.assert_array_equal(p.nodes, np.concatenate([owned, ghosts]))
    assert p.n_owned_nodes == owned.size and p.n_owned_edges == own_e.size
    np.testing.assert_array_equal(p.edges, np.concatenate([own_e, ghost_e]))
    np.testing.assert_array_equal(p.global_edges(), edges[p.edges])


@pytest.mark.parametrize("method", ["alltoall", "ring"])
def test_partition_matches_reference(comm, method):
    edges, n = _mesh()
    part = _partvec(n, comm.Get_size())
    (p,) = irregular.compute_partition(comm, part, _blocks(comm, edges, n), method=method)
    _check(p, edges, part, comm.Get_rank())


def test_partition_for_more_parts_than_ranks(comm):
    """Parts v are computed by rank v % size: histories for other rank counts."""
    edges, n = _mesh()
    nparts = comm.Get_size() + 2
    part = _partvec(n, nparts, seed=1)
    parts = irregular.compute_partition(comm, part, _blocks(comm, edges, n), nparts=nparts)
    assert [p.rank for p in parts] == list(range(comm.Get_rank(), nparts, comm.Get_size()))
    for p in parts:
        _check(p, edges, part, p.rank)


def _session(mpi_tmp, comm=None, **kw):
    return sdm.open("fun3d", root=mpi_tmp, catalog=f"sqlite:///{mpi_tmp}/c.db", comm=comm, **kw)


def _histories(comm, s):
    out = records.histories(s.catalog, "fun3d") if comm.Get_rank() == 0 else None
    return comm.bcast(out)


def test_history_reused_on_same_rank_count(comm, mpi_tmp, monkeypatch):
    edges, n = _mesh()
    part = _partvec(n, comm.Get_size())
    with _session(mpi_tmp) as s:
        first = irregular.partition(s, "grid", part, _blocks(comm, edges, n))
        assert first.source == "computed" and first.note.startswith("no index history of 'grid' for")
        assert first.stats["exchanged_edges"] > 0 or comm.Get_size() == 1 or len(edges) == 0
        (h,) = _histories(comm, s)
        assert h.nprocs == comm.Get_size() and h.problem == "grid"

    def no_exchange(*a, **k):
        raise AssertionError("edges were redistributed although a history exists")

    monkeypatch.setattr(partition_module, "_alltoall", no_exchange)
    monkeypatch.setattr(partition_module, "_ring", no_exchange)
    with _session(mpi_tmp) as s:
        again = irregular.partition(s, "grid", part, _blocks(comm, edges, n))
        assert again.source == "history" and again.stats["exchanged_edges"] == 0
        assert again.note.startswith(f"loaded from index history {h.id}")
        for name in ("nodes", "edges", "local_edges"):
            np.testing.assert_array_equal(getattr(again, name), getattr(first, name))
        assert (again.n_owned_nodes, again.n_owned_edges) == (first.n_owned_nodes, first.n_owned_edges)
        uses = comm.bcast(records.history_uses(s.catalog, h.id) if comm.Get_rank() == 0 else None)
        assert [u["run_id"] for u in uses] == [s.run_id]


def test_history_survives_a_lost_catalog(comm, mpi_tmp, monkeypatch):
    """The history's description beside its file lets ``sdm rebuild`` register it again, reusable as before."""
    edges, n = _mesh()
    part = _partvec(n, comm.Get_size())
    with _session(mpi_tmp) as s:
        first = irregular.partition(s, "grid", part, _blocks(comm, edges, n))
        (h,) = _histories(comm, s)
        run_id = s.run_id
    report = None
    if comm.Get_rank() == 0:
        side = Path(mpi_tmp) / (h.path + ".json")
        record = parse_line(side.read_text().rstrip("\n"))
        assert (record["t"], record["problem"], record["content_hash"], record["nprocs"], record["path"]) == \
            ("history", "grid", h.content_hash, comm.Get_size(), h.path)
        assert sorted(tuple(p) for p in record["parts"]) == sorted((p.name, p.rank, p.offset, p.count, p.dtype)
                                                                   for p in h.parts)
        Path(mpi_tmp, "c.db").unlink()
        report = rebuild(mpi_tmp, f"sqlite:///{mpi_tmp}/c.db")
    report = comm.bcast(report)
    assert (report.added, report.histories, report.notes) == ([run_id], 1, [])
    monkeypatch.setattr(partition_module, "_alltoall", _no_exchange)
    monkeypatch.setattr(partition_module, "_ring", _no_exchange)
    with _session(mpi_tmp) as s:
        (again_h,) = _histories(comm, s)
        assert (again_h.path, again_h.run_id, again_h.sources) == (h.path, run_id, h.sources)
        assert set(again_h.parts) == set(h.parts) and len(again_h.parts) == len(h.parts)
        again = irregular.partition(s, "grid", part, _blocks(comm, edges, n))
        assert again.source == "history"
        for name in ("nodes", "edges", "local_edges"):
            np.testing.assert_array_equal(getattr(again, name), getattr(first, name))
    if comm.Get_rank() == 0:  # rebuilding again adds nothing
        assert rebuild(mpi_tmp, f"sqlite:///{mpi_tmp}/c.db").histories == 0
    comm.Barrier()


def _no_exchange(*a, **k):
    raise AssertionError("edges were redistributed although a history exists")


def test_changed_mesh_invalidates_history(comm, mpi_tmp):
    edges, n = _mesh()
    part = _partvec(n, comm.Get_size())
    with _session(mpi_tmp) as s:
        irregular.partition(s, "grid", part, _blocks(comm, edges, n))
    changed = edges.copy()
    changed[0] = [changed[0, 1], changed[0, 0]]  # same size, other content
    with _session(mpi_tmp) as s:
        p = irregular.partition(s, "grid", part, _blocks(comm, changed, n))
        assert p.source == "computed"
        assert "was made for other inputs" in p.note and "recomputed" in p.note
        _check(p, changed, part, comm.Get_rank())
        assert len(_histories(comm, s)) == 2


def test_other_rank_count_recomputes_and_prepared_history_is_used(comm, mpi_tmp):
    rank, size = comm.Get_rank(), comm.Get_size()
    edges, n = _mesh()
    part_all = _partvec(n, size, seed=5)
    # a history prepared ahead of time for `size` ranks by rank 0 alone
    solo = comm.Split(0 if rank == 0 else MPI.UNDEFINED, rank)
    if rank == 0:
        with _session(mpi_tmp, comm=solo) as s:
            blocks = irregular.EdgeBlocks(edges[:, 0], edges[:, 1], n, len(edges), s.comm)
            irregular.prepare_history(s, "grid", part_all, blocks, size)
            if size > 1:  # a 1-rank run of a problem that only has a history for `size` ranks
                p1 = irregular.partition(s, "grid", np.zeros(n, int), blocks)
                assert p1.source == "computed"
                assert p1.note == f"no index history of 'grid' for 1 ranks (histories exist for [{size}] ranks); computing the partition"
        solo.Free()
    comm.Barrier()
    with _session(mpi_tmp) as s:
        p = irregular.partition(s, "grid", part_all, _blocks(comm, edges, n))
        assert p.source == "history"
        _check(p, edges, part_all, rank)


@pytest.mark.parametrize("case, match", [
    ("length", r"the partitioning vector has 62 entries; the mesh has 63 nodes"),
    ("value", r"the partitioning vector names ranks 0\.\.\d+; a partition for \d+ ranks needs values in 0\.\.\d+"),
    ("edge", r"edge1\[\d+\] = 63 is not a node of a mesh with 63 nodes"),
])
def test_bad_partition_inputs(comm, mpi_tmp, case, match):
    edges, n = _mesh()
    part = _partvec(n, comm.Get_size())
    if case == "length":
        part = part[:-1]
    if case == "value":
        part = part.copy()
        part[4] = comm.Get_size()
    if case == "edge":
        edges = edges.copy()
        edges[len(edges) - 1, 0] = n
    with _session(mpi_tmp) as s:
        with pytest.raises(sdm.DistributionError, match=match) as info:
            irregular.partition(s, "grid", part, _blocks(comm, edges, n))
        assert len(set(comm.allgather(str(info.value)))) == 1
        assert _histories(comm, s) == []


def _edge_file(comm, mpi_tmp, edges, name="mesh.bin"):
    path = f"{mpi_tmp}/{name}"
    if comm.Get_rank() == 0:
        with open(path, "wb") as f:
            f.write(edges[:, 0].astype("<i4").tobytes() + edges[:, 1].astype("<i4").tobytes())
    comm.Barrier()
    return path


def test_unchanged_edge_file_is_not_read_again(comm, mpi_tmp):
    import os

    edges, n = _mesh()
    part = _partvec(n, comm.Get_size())
    path = _edge_file(comm, mpi_tmp, edges)
    mesh = irregular.EdgeFile(path, n_edges=len(edges), n_nodes=n)
    with _session(mpi_tmp) as s:
        first = irregular.partition(s, "grid", part, mesh)
        assert first.source == "computed"
    with _session(mpi_tmp) as s:
        p = irregular.partition(s, "grid", part, mesh)
        assert p.source == "history" and p.note.endswith("edges not read")
        assert comm.bcast(records.imports(s.catalog, run_id=s.run_id) if comm.Get_rank() == 0 else None) == []
        _check(p, edges, part, comm.Get_rank())
    if comm.Get_rank() == 0:  # same bytes rewritten: new identity, same content hash
        os.utime(path, ns=(1, 1))
    comm.Barrier()
    with _session(mpi_tmp) as s:
        p = irregular.partition(s, "grid", part, mesh)
        assert p.source == "history" and not p.note.endswith("edges not read")  # checked by content hash
        assert len(comm.bcast(records.imports(s.catalog, run_id=s.run_id) if comm.Get_rank() == 0 else None)) == 2
    changed = edges.copy()
    changed[[0, 1]] = changed[[1, 0]]  # same size, same mtime, other content
    if comm.Get_rank() == 0:
        st = os.stat(path)
        _edge_file(comm.Split(0, 0), mpi_tmp, changed)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # even with the old mtime restored
    else:
        comm.Split(MPI.UNDEFINED, 0)
    comm.Barrier()
    with _session(mpi_tmp) as s:
        p = irregular.partition(s, "grid", part, mesh)
        assert p.source == "computed" and "was made for other inputs" in p.note
        _check(p, changed, part, comm.Get_rank())
