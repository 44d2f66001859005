"""The LBMPI template: four interleaved fields with ghosts, one file or four, every method.

The expected files are built here from the templates' documented value formula (the
same formula tests/mpi/test_templates.py checks), not from SDM: field ``k`` is the
3-D array of ``f<k>`` values in Fortran order; the one-file dataset interleaves the
four fields (field index fastest).
"""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np
import pytest
import sdm
from sdm.examples import lbmpi
from sdm.io import method_names

GRID = (9, 7, 5)  # uneven over 2x2 and 3x1 process grids
STEPS = [1, 2]


def expected_field(k: int, step: int, shape=GRID) -> np.ndarray:
    flat = np.arange(int(np.prod(shape)), dtype=np.uint64).reshape(shape)  # C-order index of (x, y, z)
    salt = np.uint64(zlib.crc32(f"f{k}".encode()) + 40503 * step)
    h = (flat * np.uint64(2654435761) + salt) % np.uint64(1 << 24)
    return h.astype(np.float64) / 16


def _files(comm, result, root: Path):
    """Rank 0: {dataset: [(step, path, offset)]} from the catalog."""
    if comm.Get_rank() != 0:
        return {}
    cat = sdm.Catalog(result["catalog"], create=False)
    try:
        out = {}
        for _, name, w in cat.writes(result["run_id"]):
            out.setdefault(name, []).append((w.step, root / w.path, w.offset, w.method))
        return out
    finally:
        cat.close()


def test_local_array_is_interleaved_fortran_with_ghosts(comm):
    grid = lbmpi.Grid.of(GRID, comm.Get_size())
    f = lbmpi.local_array(grid, comm.Get_size(), comm.Get_rank(), step=1)
    p = grid.piece(comm.Get_size(), comm.Get_rank())
    assert f.flags.f_contiguous and f.shape == (4, *(c + 2 for c in p.counts))
    assert f.strides[0] == 8  # the field index is fastest in memory
    for k in range(4):
        np.testing.assert_array_equal(f[(k, *p.interior)], expected_field(k, 1)[np.ix_(*p.indices)])
    assert (f[:, 0] == -1).all() and (f[:, -1] == -1).all()


@pytest.mark.parametrize("method", ["collective", "datatype", "posix", "list", "sieving", "servers", "auto"])
@pytest.mark.parametrize("variant", ["one-file", "four-files"])
def test_sdm_variants_write_the_fields_byte_for_byte(comm, mpi_tmp, variant, method):
    grid = lbmpi.Grid.of(GRID, comm.Get_size())
    res = lbmpi.run(comm, grid, variant, STEPS, root=mpi_tmp, method=method, sync=False)
    assert res["seconds"] > 0 and res["bytes"] == 4 * grid.field_bytes * len(STEPS)
    files = _files(comm, res, Path(mpi_tmp))
    if comm.Get_rank() != 0:
        return
    assert set(files) == ({"f"} if variant == "one-file" else {f"f{k}" for k in range(4)})
    paths = {p for writes in files.values() for _, p, _, _ in writes}
    assert len(paths) == (1 if variant == "one-file" else 4)
    for name, writes in files.items():
        for step, path, offset, used in writes:
            assert used == method or (method == "auto" and used in method_names())
            if name == "f":
                got = np.memmap(path, dtype="f8", mode="r", offset=offset, shape=(4, *GRID), order="F")
                for k in range(4):
                    np.testing.assert_array_equal(got[k], expected_field(k, step))
            else:
                got = np.memmap(path, dtype="f8", mode="r", offset=offset, shape=GRID, order="F")
                np.testing.assert_array_equal(got, expected_field(int(name[1:]), step))


def test_original_writes_element_by_element_into_four_files(comm, mpi_tmp):
    grid = lbmpi.Grid.of(GRID, comm.Get_size())
    seconds = lbmpi.original(comm, grid, Path(mpi_tmp), STEPS, sync=False)
    assert seconds > 0
    if comm.Get_rank() == 0:
        for k, path in enumerate(lbmpi.original_paths(Path(mpi_tmp))):
            raw = np.fromfile(path, dtype="f8")
            assert raw.size == len(STEPS) * int(np.prod(GRID))
            for i, step in enumerate(STEPS):
                got = raw[i * raw.size // len(STEPS):(i + 1) * raw.size // len(STEPS)].reshape(GRID, order="F")
                np.testing.assert_array_equal(got, expected_field(k, step))
