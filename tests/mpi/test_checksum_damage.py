"""Files written by SDM, damaged on disk with numpy, are refused by ``read(verify=True)``.

Every level (1, 2, 3), several views and both storage orders: the stored checksum is
first recomputed from the file bytes with the independent numpy ``mix64`` of
``_reference.py``; then rank 0 damages one dataset in place through ``numpy.memmap`` at
the catalog's offset (zero a constant field, flip signs, scale by 2, swap two values
2048 positions apart, flip one bit anywhere) and every rank must raise
``sdm.IntegrityError`` naming the dataset and step.  Rows written with the old
``sum64-v1`` still verify, and the damage it was blind to is shown.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import sdm
from mpi4py import MPI
from sdm import integrity

from _reference import block_indices, cyclic_indices, local_from_global, mix64

SHAPE = (16, 16, 16)  # 4096 elements: sum64-v1 is blind to constant f8 fields of this size
CASES = {  # level -> (view, storage order)
    1: ("block-ghosts", "C"),
    2: ("cyclic", "F"),
    3: ("block-cyclic", "C"),
}
DAMAGES = ["zero-constant-field", "flip-signs", "scale-by-2", "swap-2048-apart", "flip-one-bit"]


def _view(name, comm):
    """(distribution, this rank's global indices computed independently, ghost width)."""
    size, rank = comm.Get_size(), comm.Get_rank()
    grid = tuple(MPI.Compute_dims(size, [0] * 3))
    if name == "block-ghosts":
        return sdm.Block(ghosts=1), block_indices(SHAPE, grid, rank), 1
    if name == "cyclic":
        return sdm.Cyclic(), cyclic_indices(SHAPE, grid, rank), 0
    return sdm.BlockCyclic(blocks=3), cyclic_indices(SHAPE, grid, rank, 3), 0


def _fields(dtype, order):
    """Global arrays: a varied field ``u`` and a constant field ``c`` (1.0 everywhere)."""
    n = int(np.prod(SHAPE))
    u = (np.sin(np.arange(n) * 0.37) * 50 + np.arange(n) % 7).astype(dtype).reshape(SHAPE, order=order)
    return {"u": u, "c": np.full(SHAPE, 1.0, dtype=dtype, order=order)}


def _write_run(comm, root, level, dtype="f8", steps=(0, 1, 2)):
    """Write u and c at *steps*; returns (session args, group name, run id, fields)."""
    view_name, order = CASES[level]
    view, idx, ghosts = _view(view_name, comm)
    G = _fields(dtype, order)
    url = f"sqlite:///{root}/cat.db"
    with sdm.open("dmg", root=root, catalog=url) as s:
        g = s.make_group("fields", ["u", "c"], dtype=dtype, shape=SHAPE, order=order, level=level, view=view)
        for step in steps:
            g.write_step(step, {d: local_from_global(G[d] + (step if d == "u" else 0), idx, ghosts, order)[0] for d in G})
        run_id = s.run_id
    return url, run_id, G


def _rows(comm, url, run_id):
    """Every write row of the run, read by rank 0 and shared: {(dataset, step): record}."""
    rows = None
    if comm.Get_rank() == 0:
        cat = sdm.Catalog(url)
        rows = {(d, w.step): w for _, d, w in cat.writes(run_id)}
        cat.close()
    return comm.bcast(rows)


def _memmap(root, w, dtype):
    return np.memmap(Path(root) / w.path, dtype=np.uint8, mode="r+", offset=w.offset, shape=(w.nbytes,))


def _damage(kind, raw, dtype, order, rng):
    """Damage the dataset bytes *raw* (a uint8 memmap) in place."""
    a = raw.view(dtype)  # file order: flat index = canonical position
    if kind == "zero-constant-field":
        a[:] = 0
    elif kind == "flip-signs":
        a[:] = -a
    elif kind == "scale-by-2":
        a[:] = a * 2
    elif kind == "swap-2048-apart":
        i = int(rng.integers(0, a.size - 2048))
        a[[i, i + 2048]] = a[[i + 2048, i]]
        assert a[i] != a[i + 2048]
    elif kind == "flip-one-bit":
        bit = int(rng.integers(0, raw.size * 8))
        raw[bit // 8] ^= np.uint8(1 << (bit % 8))
    raw.flush()


def _expect_integrity_error(comm, g, name, step):
    with pytest.raises(sdm.IntegrityError) as err:
        g.read(name, step, verify=True)
    assert type(err.value) is sdm.IntegrityError
    assert f"dataset {name!r} step {step}" in str(err.value)
    assert comm.allgather(str(err.value)) == [str(err.value)] * comm.Get_size()


@pytest.mark.parametrize("level", [1, 2, 3])
def test_stored_checksums_equal_an_independent_recomputation(comm, mpi_tmp, level):
    url, run_id, G = _write_run(comm, mpi_tmp, level)
    rows = _rows(comm, url, run_id)
    assert sorted(rows) == [(d, s) for d in ("c", "u") for s in (0, 1, 2)]
    order = CASES[level][1]
    if comm.Get_rank() == 0:
        for (d, step), w in rows.items():
            raw = np.fromfile(Path(mpi_tmp) / w.path, dtype=np.uint8, count=w.nbytes, offset=w.offset)
            expected = G[d] + (step if d == "u" else 0)
            assert raw.tobytes() == expected.tobytes(order=order)  # the bytes are right...
            assert (w.checksum_algo, w.checksum) == ("mix64-v2", f"{mix64(raw, 8):016x}")  # ...and so is the sum


@pytest.mark.parametrize("damage", DAMAGES)
@pytest.mark.parametrize("level", [1, 2, 3])
def test_damaged_file_raises_integrity_error_on_every_rank(comm, mpi_tmp, level, damage):
    dtype = "f4" if damage == "flip-one-bit" and level == 2 else "f8"
    url, run_id, _ = _write_run(comm, mpi_tmp, level, dtype)
    name = "c" if damage == "zero-constant-field" else "u"
    step = 1
    rows = _rows(comm, url, run_id)
    w = rows[(name, step)]
    rng = np.random.default_rng([level, DAMAGES.index(damage)])
    with sdm.open("dmg", "r", root=mpi_tmp, catalog=url, run=run_id) as s:
        g = s.group("fields")  # read with the default Block view: another decomposition than the write's
        g.read(name, step, verify=True)  # intact
        original = None
        if comm.Get_rank() == 0:
            raw = _memmap(mpi_tmp, w, dtype)
            original = raw.copy()
            _damage(damage, raw, np.dtype(dtype), CASES[level][1], rng)
            assert not np.array_equal(raw, original)
            # the independent recomputation sees the damage too
            assert f"{mix64(raw, np.dtype(dtype).itemsize):016x}" != w.checksum
            del raw
        comm.Barrier()
        _expect_integrity_error(comm, g, name, step)
        g.read(name, 0, verify=True)  # the other steps and datasets are untouched
        g.read("c" if name == "u" else "u", step, verify=True)
        comm.Barrier()
        if comm.Get_rank() == 0:
            raw = _memmap(mpi_tmp, w, dtype)
            raw[:] = original
            raw.flush()
            del raw
        comm.Barrier()
        g.read(name, step, verify=True)  # repaired


def test_sum64_v1_rows_still_verify(comm, mpi_tmp, monkeypatch):
    """Rows written by the old algorithm are verified with it; what it missed is shown."""
    monkeypatch.setattr(integrity, "ALGORITHM", "sum64-v1")
    url, run_id, G = _write_run(comm, mpi_tmp, 3, steps=(0,))
    monkeypatch.undo()
    rows = _rows(comm, url, run_id)
    assert {w.checksum_algo for w in rows.values()} == {"sum64-v1"}
    with sdm.open("dmg", "a", root=mpi_tmp, catalog=url, run=run_id) as s:
        g = s.group("fields")
        for d in ("u", "c"):
            g.read(d, 0, verify=True)
        view, idx, ghosts = _view(CASES[3][0], comm)
        g.data_view(view)
        g.write("u", 1, local_from_global(G["u"], idx, ghosts, "C")[0])  # new rows: the new algorithm
        comm.Barrier()
        rows = _rows(comm, url, run_id)
        assert rows[("u", 1)].checksum_algo == "mix64-v2" and rows[("u", 0)].checksum_algo == "sum64-v1"
        original = None
        if comm.Get_rank() == 0:
            raw = _memmap(mpi_tmp, rows[("c", 0)], "f8")
            original = raw.copy()
            raw.view("f8")[:] = 0.0  # sum64-v1 cannot see a constant 1.0 field zeroed ...
            raw.flush()
            del raw
        comm.Barrier()
        g.read("c", 0, verify=True)
        comm.Barrier()
        if comm.Get_rank() == 0:
            raw = _memmap(mpi_tmp, rows[("c", 0)], "f8")
            raw[:] = original
            raw.view("f8")[100] += 1.0  # ... but it still sees a changed value
            raw.flush()
            del raw
        comm.Barrier()
        _expect_integrity_error(comm, g, "c", 0)
        g.read("u", 1, verify=True)


def test_unknown_algorithm_is_refused_on_every_rank(comm, mpi_tmp):
    url, run_id, _ = _write_run(comm, mpi_tmp, 2, steps=(0,))
    if comm.Get_rank() == 0:
        import sqlalchemy as sa

        engine = sa.create_engine(url)
        with engine.begin() as con:
            con.execute(sa.text("UPDATE writes SET checksum_algo = 'crc99'"))
        engine.dispose()
    comm.Barrier()
    with sdm.open("dmg", "r", root=mpi_tmp, catalog=url, run=run_id) as s:
        g = s.group("fields")
        with pytest.raises(sdm.IntegrityError, match=r"dataset 'u' step 0 cannot be verified: its checksum algorithm 'crc99'"):
            g.read("u", 0, verify=True)
        g.read("u", 0, verify=False)
