"""The ASTRO3D and Euler templates of the paper (sections 3.1 and 4.1) on 1..N ranks.

File counts per organization level come from the paper (Euler: 60 / 6 / 2 files;
ASTRO3D: one file per group at level 3).  Every write is checked by reading the file
with numpy.memmap at the offset the catalog records and comparing it with the global
array rebuilt here from the templates' documented value formula (no SDM code; ASTRO3D's
density evaluated in 3-D in float64, within float32's roundings of it); the read-back
is checked on a distribution other than the writer's, with indices computed
independently in ``_reference``.
"""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np
import pytest
import sdm
from mpi4py import MPI
from sdm.examples import _template, astro3d, euler

from _reference import block_indices, cyclic_indices

EULER_MESH = (20, 8, 8)
ASTRO_N = 10  # uneven over 3 ranks; small enough for a fast test


def expected_global(name: str, step: int, shape, dtype) -> np.ndarray:
    """The templates' documented values (Euler's), built here for the whole global array."""
    flat = np.arange(int(np.prod(shape)), dtype=np.uint64).reshape(shape)
    salt = np.uint64(zlib.crc32(name.encode()) + 40503 * step)
    h = (flat * np.uint64(2654435761) + salt) % np.uint64(1 << 24)
    dt = np.dtype(dtype)
    return (h.astype(np.float64) / 16).astype(dt) if dt.kind == "f" else (h % 256).astype(dt)


def astro_density(name: str, step: int, shape, dtype) -> np.ndarray:
    """ASTRO3D's documented density (sdm.examples.astro3d.density), built here in float64 over the whole grid
    from its formula: every wave's cosine and every clump's Gaussian evaluated in 3-D, not as products."""
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    u = rng.random((astro3d.WAVES, 4))
    k = np.floor(7 * u[:, :3]) - 3
    k[~k.any(axis=1)] = (1, 0, 0)
    a = np.sqrt((k ** 2).sum(axis=1)) ** -1.5
    a /= a.sum()
    c = rng.random((astro3d.CLUMPS, 6))
    d = rng.random((astro3d.CLUMPS, 2))
    t, flow = float(step), np.array(astro3d.FLOW)
    g = 1 + t / astro3d.GROWTH
    x = np.stack(np.meshgrid(*(np.arange(n) / n for n in shape), indexing="ij"), axis=-1)  # (n, n, n, 3) boxes
    rho = 1 + astro3d.BACKGROUND * sum(a[w] * np.cos(2 * np.pi * ((x - flow * t) @ k[w]) + 2 * np.pi * u[w, 3])
                                      for w in range(astro3d.WAVES))
    for b in range(astro3d.CLUMPS):
        centre = c[b, :3] + (flow + 0.04 * (c[b, 3:] - 0.5)) * t
        gap = (x - centre + 0.5) % 1.0 - 0.5  # to the nearest periodic image
        width = 0.06 + 0.05 * d[b, 0]
        rho = rho + (0.3 + 0.5 * d[b, 1]) * g * g * np.exp(-(gap ** 2).sum(axis=-1) * g / (2 * width ** 2))
    dt = np.dtype(dtype)
    return rho if dt.kind == "f" else np.minimum(np.floor(astro3d.BYTE_SCALE * rho), 255)


def assert_astro(got: np.ndarray, name: str, step: int, shape, dtype, where=(), what: str = "") -> None:
    """*got* is ASTRO3D's density (under the index *where*): float32 roundings of the formula; bytes off by at
    most one at a floor's edge."""
    want = astro_density(name, step, shape, dtype)[where]
    if np.dtype(dtype).kind == "f":
        np.testing.assert_allclose(got, want, rtol=0, atol=2e-5, err_msg=what)
    else:
        assert np.abs(got.astype(np.int64) - want).max() <= 1, what
        assert np.count_nonzero(got != want) <= max(1, got.size // 500), what


def _check_files(comm, root: Path, result: dict, specs, dumps: dict[str, list[int]], nfiles: int) -> None:
    """On rank 0: file counts (catalog and disk), every write's bytes, the catalog rows."""
    if comm.Get_rank() != 0:
        return
    cat = sdm.Catalog(result["catalog"], create=False)
    try:
        files, writes = cat.files(result["run_id"]), cat.writes(result["run_id"])
        rec = cat.run(result["run_id"])
    finally:
        cat.close()
    run_dir = Path(result["root"]) / rec.dir
    assert run_dir.parent.name == result["application"] and run_dir.name.startswith(f"run-{result['run_id']:06d}-")
    on_disk = sorted(p for p in run_dir.iterdir() if p.is_file() and not p.name.startswith(".sdm-"))  # marker, meta-file
    assert len(files) == nfiles, [f.path for f in files]
    assert len(on_disk) == nfiles, on_disk
    assert sorted((run_dir.parent.parent / f.path).resolve() for f in files) == [p.resolve() for p in on_disk]
    assert result["files"] == nfiles

    by_name = {d: s for s in specs for d in s.datasets}
    expected_rows = {(s.name, d, step) for s in specs for d in s.datasets for step in dumps[s.name]}
    assert {(g, d, w.step) for g, d, w in writes} == expected_rows
    assert len(writes) == len(expected_rows) == result["writes"]
    assert result["bytes_written"] == sum(by_name[d].nbytes for _, d, _ in writes)
    extents: dict[str, list[tuple[int, int]]] = {}
    for g, d, w in writes:
        spec = by_name[d]
        assert w.nbytes == spec.nbytes and w.nprocs == comm.Get_size()
        raw = np.memmap(Path(result["root"]) / w.path, dtype=spec.dtype, mode="r", offset=w.offset, shape=spec.shape)
        if result["application"] == "ASTRO3D":
            assert_astro(np.asarray(raw), d, w.step, spec.shape, spec.dtype, what=f"{g}/{d}@{w.step}")
            np.testing.assert_array_equal(raw, spec.value(d, w.step, [np.arange(n) for n in spec.shape]))  # exactly
        else:
            np.testing.assert_array_equal(raw, expected_global(d, w.step, spec.shape, spec.dtype),
                                          err_msg=f"{g}/{d}@{w.step}")
        del raw
        extents.setdefault(w.path, []).append((w.offset, w.offset + w.nbytes))
    for path, ext in extents.items():  # appended writes never overlap
        ext.sort()
        assert all(a[1] <= b[0] for a, b in zip(ext, ext[1:])), (path, ext)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("level, nfiles", [(1, 60), (2, 6), (3, 2)])
def test_euler_file_counts_and_bytes(comm, mpi_tmp, level, nfiles):
    if comm.Get_size() > 4 and level != 3:  # every level at 1-4 ranks; at 8, level 3 (the suite's time budget)
        pytest.skip("levels 1 and 2 run at 1-4 ranks")
    result = euler.run(comm, EULER_MESH, 50, level, root=mpi_tmp, catalog=f"sqlite:///{mpi_tmp}/cat.db",
                       verify=True, read_view="cyclic")
    specs = euler.euler_groups(EULER_MESH)
    assert [s.shape for s in specs] == [EULER_MESH, (*EULER_MESH, 5)]
    assert result["writes"] == result["reads"] == 60
    assert result["mismatches"] == 0
    _check_files(comm, Path(mpi_tmp), result, specs, {"grid": list(range(5, 51, 5)), "solution": list(range(5, 51, 5))}, nfiles)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("level, nfiles, read_view, ghosts", [(3, 3, "slab", 0), (2, 19, "cyclic", 1), (1, 45, "same", 0)])
def test_astro3d_files_bytes_and_read_back(comm, mpi_tmp, level, nfiles, read_view, ghosts):
    if comm.Get_size() > 4 and level != 3:  # every level at 1-4 ranks; at 8, level 3 (the suite's time budget)
        pytest.skip("levels 1 and 2 run at 1-4 ranks")
    result = astro3d.run(comm, ASTRO_N, 12, level, root=mpi_tmp, catalog=f"sqlite:///{mpi_tmp}/cat.db",
                         verify=True, read_view=read_view, ghosts=ghosts)
    specs = astro3d.astro3d_groups(ASTRO_N)
    assert [(s.name, len(s.datasets), np.dtype(s.dtype).str) for s in specs] == [
        ("analysis", 6, "<f4"), ("restart", 6, "<f4"), ("visualization", 7, "|u1")]
    dumps = {"analysis": [6, 12], "restart": [6, 12], "visualization": [4, 8, 12]}
    assert result["mismatches"] == 0 and result["reads"] == result["writes"] == 45
    _check_files(comm, Path(mpi_tmp), result, specs, dumps, nfiles)
    if level == 3:
        assert sorted(g["group"] for g in result["groups"] if g["files"] == 1) == sorted(dumps)

    # Read back through SDM on a cyclic view; expected local pieces come from first principles.
    rank, size = comm.Get_rank(), comm.Get_size()
    shape = (ASTRO_N,) * 3
    grid = tuple(MPI.Compute_dims(size, [0] * 3))
    idx = cyclic_indices(shape, grid, rank)
    with sdm.open("ASTRO3D", "r", comm=comm, catalog=result["catalog"], run=result["run_id"]) as s:
        for spec in specs:
            g = s.group(spec.name)
            g.data_view(sdm.Cyclic(grid=grid))
            for d in spec.datasets:
                assert g.steps(d) == dumps[spec.name]
                for step in g.steps(d):
                    back = g.read(d, step, verify=True)
                    assert_astro(back, d, step, shape, spec.dtype, np.ix_(*idx), f"{d}@{step} rank {rank}")


def test_astro3d_writer_pieces_are_3d_blocks(comm, mpi_tmp):
    """The writers' view is a block distribution in every dimension of the balanced 3-D grid."""
    rank, size = comm.Get_rank(), comm.Get_size()
    spec = astro3d.astro3d_groups(ASTRO_N)[0]
    view = _template.make_view("block", spec, size)
    grid = tuple(MPI.Compute_dims(size, [0] * 3))
    assert view.to_json()["grid"] == list(grid)
    piece = view.piece(spec.shape, size, rank)
    for got, want in zip(piece.indices, block_indices(spec.shape, grid, rank)):
        np.testing.assert_array_equal(got, want)
