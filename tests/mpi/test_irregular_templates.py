"""The irregular application templates (FUN3D, Rayleigh-Taylor, CE-QUAL-ICM) on 1..N ranks.

Tiny meshes; every file SDM wrote is read with numpy.memmap at the offsets the catalog
records and compared with global arrays built here from the raw inputs and the
templates' documented formulas (no SDM code, no template code in the reference).
"""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np
import pytest
import sdm
from sdm.catalog import irregular as records
from sdm.examples import cequal, fun3d, rt
from sdm.examples._irregular import Phases
from sdm.storage.trailer import read_trailer

EDGES = 700  # target edge count of the FUN3D mesh (a 5 x 5 x 5 node grid)


def field(name, ids, step=0):
    """The documented input/output values: multiples of 1/16 in [-32, 32)."""
    i = np.asarray(ids, dtype=np.uint64)
    h = (i * np.uint64(2654435761) + np.uint64((zlib.crc32(name.encode()) + 7919 * step) % 2**32)) & np.uint64(1023)
    return (h.astype(np.float64) - 512) / 16


def _writes(comm, url, run_id):
    rows = None
    if comm.Get_rank() == 0:
        cat = sdm.Catalog(url, create=False)
        rows = [(g, d, w) for g, d, w in cat.writes(run_id)]
        cat.close()
    return comm.bcast(rows)


def _on_disk(root, w, dtype, count):
    return np.memmap(Path(root) / w.path, dtype=dtype, mode="r", offset=w.offset, shape=(count,))


# ------------------------------------------------------------------------------ FUN3D


def _fun3d_reference(mesh_file, n_nodes, n_edges, step):
    """Global results of a step, straight from the raw input bytes (loops over edges with numpy)."""
    raw = Path(mesh_file).read_bytes()
    e = np.frombuffer(raw, "<i4", 2 * n_edges).reshape(2, n_edges).astype(np.int64)
    vals = np.frombuffer(raw, "<f8", offset=8 * n_edges)
    x = vals[: 4 * n_edges].reshape(4, n_edges)
    y = vals[4 * n_edges:].reshape(4, n_nodes)
    a, b = e
    q = x[0] * (y[0, a] - y[0, b]) + x[1] * (y[1, a] - y[1, b]) + step * x[2] + x[3]
    p = y.copy()
    for k in range(4):
        np.add.at(p[k], a, q * x[k])
        np.subtract.at(p[k], b, q * x[k])
    return p, q, e, x, y


@pytest.mark.parametrize("level, files", [(1, 10), (2, 5), (3, 2)])
def test_fun3d_files_equal_numpy_and_second_run_uses_history(comm, mpi_tmp, level, files):
    url = f"sqlite:///{mpi_tmp}/c.db"
    first = fun3d.run(comm, EDGES, 2, level, mpi_tmp, url, read_view="block", original=True, shuffle=7)
    assert first["partition"]["source"] == "computed" and first["mismatches"] == 0
    assert first["original"]["same"]  # rank 0 read + broadcast gives every rank the same local mesh
    assert first["files"] == files
    mesh_file = Path(mpi_tmp) / "inputs" / f"tet-{EDGES}-s7" / "mesh.bin"
    N, E = first["n_nodes"], first["n_edges"]
    assert mesh_file.stat().st_size == E * (8 + 32) + N * 32
    ref = {step: _fun3d_reference(mesh_file, N, E, step) for step in (1, 2)}
    writes = _writes(comm, url, first["run_id"])
    assert sorted((d, w.step) for _, d, w in writes) == sorted((d, s) for d in ("p0", "p1", "p2", "p3", "q") for s in (1, 2))
    for _, d, w in writes:
        p, q, *_ = ref[w.step]
        want = q if d == "q" else p[int(d[1])]
        np.testing.assert_array_equal(_on_disk(mpi_tmp, w, "<f8", want.size), want)

    second = fun3d.run(comm, EDGES, 1, level, mpi_tmp, url, read=False, shuffle=7)
    part = second["partition"]
    assert part["source"] == "history" and part["exchanged_edges"] == 0
    assert part["history_id"] == first["partition"]["history_id"]
    if comm.Get_rank() == 0:
        cat = sdm.Catalog(url, create=False)
        uses = records.history_uses(cat, part["history_id"])
        cat.close()
        assert [u["run_id"] for u in uses] == [second["run_id"]]


def test_fun3d_imports_through_maps_fill_ghosts(comm, mpi_tmp):
    """Imported edge and node arrays equal the raw file's values at every local id, ghosts included."""
    problem = fun3d.prepare(comm, Path(mpi_tmp) / "inputs", EDGES)
    with sdm.open("FUN3D", root=mpi_tmp, catalog=f"sqlite:///{mpi_tmp}/c.db") as s:
        p, local = fun3d.import_with_sdm(s, problem, Phases(comm), history=False, method="ring")
    _, _, e, x, y = _fun3d_reference(problem.inputs.path, problem.inputs.n_nodes, problem.inputs.n_edges, 0)
    np.testing.assert_array_equal(local.x, x[:, local.edges])
    np.testing.assert_array_equal(local.y, y[:, local.nodes])
    np.testing.assert_array_equal(local.nodes[local.local_edges], e[:, local.edges].T)
    owned = np.zeros(problem.inputs.n_nodes, bool)
    owned[local.nodes[: local.n_owned_nodes]] = True
    touching = owned[e[0]] | owned[e[1]]
    assert set(local.edges.tolist()) == set(np.flatnonzero(touching).tolist())  # every edge of an owned node
    assert local.n_owned_edges == np.count_nonzero(owned[e[0]])


def test_fun3d_idle_rank(comm, mpi_tmp):
    """The last rank owns no node and no edge: it still takes part in every collective call."""
    res = fun3d.run(comm, EDGES, 1, 3, mpi_tmp, f"sqlite:///{mpi_tmp}/c.db", verify=True, read_view="map",
                    idle_last=True)
    assert res["mismatches"] == 0 and res["bad_files"] == []
    assert res["partition"]["source"] == "computed"


# ------------------------------------------------------------------------ CE-QUAL-ICM


@pytest.mark.parametrize("level, shuffle, idle", [(3, None, False), (3, 5, True), (2, None, False)])
def test_cequal_sdm_output_is_byte_identical_to_post_processed_original(comm, mpi_tmp, level, shuffle, idle):
    size = comm.Get_size()
    cells, months = 24, 3
    url = f"sqlite:///{mpi_tmp}/c.db"
    res = cequal.run(comm, cells, months, level, mpi_tmp, url, original=True, shuffle=shuffle, idle_last=idle)
    n = cells * cells
    if size - int(idle and size > 1) > 1:
        assert 0.20 <= res["ghost_fraction"] <= 0.35
    merged = np.fromfile(res["merged"], dtype="<f4")
    ids = np.arange(n)
    want = np.concatenate([field(a, ids, m).astype("<f4") for m in range(1, months + 1) for a in cequal.ARRAYS])
    np.testing.assert_array_equal(merged, want)  # the original's result is right
    writes = _writes(comm, url, res["run_id"])
    assert len(writes) == months * len(cequal.ARRAYS)
    for _, d, w in writes:
        k = cequal.ARRAYS.index(d)
        at = ((w.step - 1) * len(cequal.ARRAYS) + k) * n
        np.testing.assert_array_equal(_on_disk(mpi_tmp, w, "<f4", n), merged[at:at + n])
    if level == 3:
        (path,) = {w.path for _, _, w in writes}
        raw = (Path(mpi_tmp) / path).read_bytes()
        described = read_trailer(Path(mpi_tmp) / path)["described_bytes"]  # the data, then the file's trailer
        assert raw[:described] == Path(res["merged"]).read_bytes()


def test_cequal_maps_mix_ghosts_and_reorder(comm, mpi_tmp):
    """The mapping files hold each process's cells in memory order with ghosts in between."""
    maps, _ = cequal.prepare(comm, Path(mpi_tmp), 24, 24, comm.Get_size(), 0.3, "rcb", None)
    parts = cequal.read_maps(maps)
    owned = np.concatenate([d.cells[d.resident] for d in parts])
    assert np.array_equal(np.sort(owned), np.arange(24 * 24))  # every cell resident exactly once
    for d in parts:
        assert np.unique(d.cells).size == d.cells.size
        if comm.Get_size() > 1:
            res = d.cells[d.resident]
            assert not np.all(np.diff(res) > 0)  # memory order is not the file order
            assert abs(d.ghost_fraction - 0.3) < 0.01
            first_ghost = np.argmax(~d.resident)
            assert d.resident[first_ghost:].any()  # ghosts are not all at the end


# --------------------------------------------------------------------- Rayleigh-Taylor


def _rt_reference(nx, partvec, step):
    ids = np.arange(nx * nx).reshape(nx, nx)
    a, b, c, d = ids[:-1, :-1].ravel(), ids[1:, :-1].ravel(), ids[:-1, 1:].ravel(), ids[1:, 1:].ravel()
    tris = np.empty((2 * a.size, 3), dtype=np.int64)
    tris[0::2] = np.stack([a, b, d], 1)
    tris[1::2] = np.stack([a, d, c], 1)
    tris = tris[np.argsort(partvec[tris[:, 0]], kind="stable")]  # triangles numbered rank by rank
    density = field("density", np.arange(nx * nx), step)
    return density, density[tris].sum(axis=1) + step


@pytest.mark.parametrize("idle", [False, True])
def test_rt_round_trip_and_files_equal_numpy(comm, mpi_tmp, idle):
    nx, steps = 13, 3
    url = f"sqlite:///{mpi_tmp}/c.db"
    res = rt.run(comm, nx, steps, 3, mpi_tmp, url, original=True, idle_last=idle)
    parts = comm.Get_size() - int(idle and comm.Get_size() > 1)
    (pfile,) = (Path(mpi_tmp) / "inputs" / f"rt-{nx}x{nx}").glob(f"part.{parts}.*.i4")
    partvec = np.fromfile(pfile, "<i4").astype(np.int64)
    ref = {s: _rt_reference(nx, partvec, s) for s in range(1, steps + 1)}
    writes = _writes(comm, url, res["run_id"])
    assert len(writes) == 2 * steps and res["files"] == 2
    for _, d, w in writes:
        want = ref[w.step][0 if d == "density" else 1]
        np.testing.assert_array_equal(_on_disk(mpi_tmp, w, "<f8", want.size), want)
    for k, name in enumerate(("density", "interface")):  # the original sequential writer
        got = np.fromfile(Path(res["original"]) / f"{name}.dat", "<f8")
        np.testing.assert_array_equal(got, np.concatenate([ref[s][k] for s in range(1, steps + 1)]))
    # read back on the writers' views: owned nodes and the triangle block
    m = rt.decompose(comm, nx, nx, partvec, "")
    with sdm.open("RT", "r", catalog=url, run=res["run_id"]) as s:
        gn, gt = s.group("nodes"), s.group("triangles")
        gn.data_view(m.node_map)
        gt.data_view(m.triangle_view)
        for step in range(1, steps + 1):
            dens = np.full(m.nodes.size, -1.0)
            gn.read("density", step, out=dens)
            np.testing.assert_array_equal(dens[: m.n_owned], ref[step][0][m.nodes[: m.n_owned]])
            assert (dens[m.n_owned:] == -1.0).all()  # ghost nodes left alone
            tri = gt.read("interface", step)
            np.testing.assert_array_equal(tri, ref[step][1][m.start:m.start + tri.size])
    if idle and comm.Get_size() > 1 and comm.Get_rank() == comm.Get_size() - 1:
        assert m.nodes.size == 0 and len(m.triangles) == 0
