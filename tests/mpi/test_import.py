"""Import of raw files written by numpy (not SDM): contiguous and through map arrays."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import sdm
from sdm.catalog import irregular as records

from _reference import mix64
from test_maparray import _maps


def _external(mpi_tmp, comm, arrays, header=64):
    """A raw file: a header, then the arrays back to back (written by rank 0 with numpy)."""
    path = Path(mpi_tmp) / "external.bin"
    offsets, pos = [], header
    for a in arrays:
        offsets.append(pos)
        pos += a.nbytes
    if comm.Get_rank() == 0:
        with open(path, "wb") as f:
            f.write(b"H" * header)
            for a in arrays:
                f.write(a.tobytes())
    comm.Barrier()
    return path, offsets


def test_contiguous_import_any_byte_order(comm, mpi_tmp):
    rank, size = comm.Get_rank(), comm.Get_size()
    e1 = (np.arange(101) * 3).astype(">i4")  # big-endian bytes on disk
    x = (np.arange(101 * 4, dtype="<f8") / 7).reshape(101, 4)
    path, (o1, o2) = _external(mpi_tmp, comm, [e1, x])
    url = f"sqlite:///{mpi_tmp}/c.db"
    with sdm.open("imp", root=mpi_tmp, catalog=url) as s:
        a = s.import_array("edge1", path, dtype=">i4", count=101, offset=o1)
        b = s.import_array("x", path, dtype="<f8", shape=(101, 4), offset=o2)
        blocks = np.array_split(np.arange(101), size)[rank]
        assert a.dtype == np.dtype("=i4")
        np.testing.assert_array_equal(a, e1[blocks].astype("=i4"))
        np.testing.assert_array_equal(b, x[blocks])
        run_id = s.run_id
    if rank == 0:
        cat = sdm.Catalog(url)
        rec = {r.name: r for r in records.imports(cat, run_id=run_id)}
        assert (rec["edge1"].source, rec["edge1"].offset, rec["edge1"].dtype, rec["edge1"].count) == (str(path.resolve()), o1, ">i4", 101)
        assert rec["x"].shape == (101, 4) and rec["x"].mode == "contiguous" and rec["x"].nbytes == x.nbytes
        assert rec["x"].checksum == f"{mix64(x.tobytes(), 8):016x}"  # mix64-v2 of the bytes as read
        assert [r.name for r in records.imports(cat, source=str(path.resolve()))] == ["edge1", "x"]
        cat.close()


def test_import_through_map_fills_ghost_rows(comm, mpi_tmp):
    rank, size = comm.Get_rank(), comm.Get_size()
    y = (np.arange(37 * 2, dtype="<f4") * 0.5).reshape(37, 2)
    path, (off,) = _external(mpi_tmp, comm, [y], header=16)
    rows, mask = _maps(size, rank, ghost_fraction=0.35)
    with sdm.open("imp", root=mpi_tmp, catalog=f"sqlite:///{mpi_tmp}/c.db") as s:
        got = s.import_array("y", path, dtype="<f4", shape=(37, 2), offset=off, view=sdm.MapArray(rows, ghost=mask))
    np.testing.assert_array_equal(got, y[rows])  # owned and ghost rows alike, in map order


@pytest.mark.parametrize("case, exc, match", [
    ("short", sdm.StorageError, r"cannot import 'v': .*external\.bin holds 88 bytes but offset 8 \+ 11 x 8 bytes needs 96"),
    ("missing", sdm.StorageError, r"cannot import 'v': .*nothing\.bin cannot be read \(No such file or directory\)"),
    ("nosize", sdm.InvalidArgumentError, r"an import needs count= \(elements\) or shape= \(global shape\)"),
])
def test_bad_imports(comm, mpi_tmp, case, exc, match):
    path, _ = _external(mpi_tmp, comm, [np.zeros(10)], header=8)
    url = f"sqlite:///{mpi_tmp}/c.db"
    with sdm.open("imp", root=mpi_tmp, catalog=url) as s:
        kwargs = dict(dtype="<f8", count=11, offset=8)
        src = path
        if case == "missing":
            src, kwargs["count"] = Path(mpi_tmp) / "nothing.bin", 10
        if case == "nosize":
            kwargs.pop("count")
        with pytest.raises(exc, match=match) as info:
            s.import_array("v", src, **kwargs)
        seen = comm.allgather(str(info.value))
        assert len(set(seen)) == 1
        if comm.Get_rank() == 0:
            assert records.imports(s.catalog, run_id=s.run_id) == []  # nothing recorded
