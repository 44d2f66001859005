"""Compressed datasets: chunks encoded by their writers, read back by any view, any rank count, any box.

Every array is built with numpy independently of SDM (``_reference``); a lossless step
read back must equal it bit for bit, a lossy one must be within its bound at every value
(checked here with numpy), and the largest error the catalog records must be the one
numpy measures.  The bytes on disk of a plain ``zstd`` step are decoded with numcodecs
alone, chunk by chunk, from the offsets and boxes the catalog records.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import sdm
from mpi4py import MPI
from sdm.codecs import parse_compression
from sdm.errors import CompressionBoundError, CompressionSpecError, IntegrityError, InvalidArgumentError

from _reference import block_indices, catalog_counts, cyclic_indices, global_array, local_from_global

SHAPE = (13, 6, 5)
LOSSLESS = ["zstd", "zstd:1:shuffle", "lz4", "blosc2:zstd:5:bitshuffle", "blosc2:lz4:1:shuffle"]
LOSSY = [({"codec": "zfp", "tolerance": 1e-3}, "absolute", 1e-3),
         ({"codec": "sz3", "absolute": 1e-3}, "absolute", 1e-3),
         ({"codec": "sz3", "relative": 1e-4}, "relative", 1e-4)]


def _grid(size, ndim):
    return tuple(MPI.Compute_dims(size, [0] * ndim))


def _smooth(shape, step, dtype="<f8", order="C"):
    """A smooth field (what lossy codecs are for), different at every step."""
    axes = np.meshgrid(*[np.linspace(0, 1, n) for n in shape], indexing="ij")
    value = np.sin(2 * np.pi * axes[0] + step) * np.cos(np.pi * axes[1]) * (1 + axes[-1])
    return np.asarray(value, dtype=dtype, order=order)


def _write(comm, url, root, group, specs, steps, level=3, view=None, ghosts=0, **kw):
    """Write *steps* of each ``(Dataset, global array of step)`` under a Block view (with *ghosts*)."""
    rank, size = comm.Get_rank(), comm.Get_size()
    view = view or sdm.Block(ghosts=ghosts)
    with sdm.open("packed", root=root, catalog=url) as s:
        g = s.make_group(group, [ds for ds, _ in specs], level=level, view=view, **kw)
        for step in steps:
            local = {}
            for ds, make in specs:
                G = make(step)
                idx = block_indices(G.shape, _grid(size, G.ndim), rank)
                local[ds.name] = local_from_global(G, idx, ghosts, ds.order or "C")[0]
            g.write_step(step, local)
        return s.run_id


def _read_all(comm, url, group, names, steps, view=None):
    """Every step of *names* read back with *view* on this rank: ``{(name, step): array}``."""
    out = {}
    with sdm.open("packed", "r", comm=comm, catalog=url, run="latest") as s:
        g = s.group(group)
        if view is not None:
            g.data_view(view)
        for name in names:
            for step in steps:
                out[name, step] = g.read(name, step)
    return out


@pytest.mark.parametrize("codec,level", [(c, 3) for c in LOSSLESS] + [("zstd", 1), ("zstd:1:shuffle", 2)])
def test_lossless_round_trip_is_exact(comm, mpi_tmp, codec, level):
    rank, size = comm.Get_rank(), comm.Get_size()
    if size > 4 and codec not in ("zstd", "lz4"):  # every codec at 1-4 ranks; at 8, the layout with two of them
        pytest.skip("every codec runs at 1-4 ranks")
    url = f"sqlite:///{mpi_tmp}/c.db"
    specs = [
        (sdm.Dataset("a", shape=SHAPE, dtype="<f8"), lambda st: global_array(SHAPE, "<f8", seed=st)),
        (sdm.Dataset("b", shape=SHAPE, dtype=">f4", order="F"), lambda st: global_array(SHAPE, ">f4", "F", seed=st)),
        (sdm.Dataset("c", shape=(7, 3), dtype="<i2"), lambda st: global_array((7, 3), "<i2", seed=st) - 3),
        (sdm.Dataset("d", shape=(1,), dtype="<c16"), lambda st: global_array((1,), "<c16", seed=st)),  # pieces empty
    ]
    nan = global_array(SHAPE, "<f8", seed=9)
    nan[1, 2, 3], nan[0, 0, 0] = np.nan, -0.0
    specs.append((sdm.Dataset("e", shape=SHAPE, dtype="<f8"), lambda st: nan))
    _write(comm, url, mpi_tmp, "g", specs, range(2), level=level, compression=codec)
    got = _read_all(comm, url, "g", [ds.name for ds, _ in specs], range(2))
    for ds, make in specs:
        for step in range(2):
            G = make(step)
            idx = block_indices(G.shape, _grid(size, G.ndim), rank)
            want = G[np.ix_(*idx)]
            out = got[ds.name, step]
            assert out.dtype == np.dtype(ds.dtype) and out.shape == want.shape
            assert out.tobytes(order="A") == np.asarray(want, order="F" if ds.order == "F" else "C").tobytes(order="A")


@pytest.mark.parametrize("spec,kind,bound", LOSSY, ids=["zfp-tolerance", "sz3-absolute", "sz3-relative"])
def test_lossy_values_within_the_bound_and_the_recorded_error_is_numpys(comm, mpi_tmp, spec, kind, bound):
    rank, size = comm.Get_rank(), comm.Get_size()
    url = f"sqlite:///{mpi_tmp}/c.db"
    shape = (24, 16, 12)
    specs = [(sdm.Dataset("T", shape=shape, dtype="<f4"), lambda st: _smooth(shape, st, "<f4")),
             (sdm.Dataset("U", shape=shape, dtype=">f8", order="F"), lambda st: _smooth(shape, st + 5, ">f8", "F"))]
    run = _write(comm, url, mpi_tmp, "g", specs, range(2), compression=spec, ghosts=1)
    # every rank's values, and the largest error over all ranks as numpy measures it
    with sdm.open("packed", "r", comm=comm, catalog=url, run="latest") as s:
        g = s.group("g")
        errors = {}
        for ds, make in specs:
            for step in range(2):
                G = make(step).astype("<f8")
                idx = block_indices(shape, _grid(size, 3), rank)
                out = g.read(ds.name, step).astype("<f8")
                want = G[np.ix_(*idx)]
                err = float(np.abs(out - want).max()) if want.size else 0.0
                if kind == "absolute":
                    assert err <= bound
                else:  # relative to the range of the chunk the value is in: at most the whole array's range
                    span = float(want.max() - want.min()) if want.size else 0.0
                    assert err <= bound * span + 1e-300
                errors[ds.name, step] = comm.allreduce(err, op=MPI.MAX)
    rows = None
    if rank == 0:
        cat = sdm.Catalog(url)
        rows = {(d, w.step): w for _, d, w in cat.writes(run)}
        cat.close()
    rows = comm.bcast(rows)
    for (name, step), w in rows.items():
        assert w.codec == parse_compression(spec).text and w.max_error is not None
        assert w.stored_nbytes < w.nbytes and w.ratio > 1
        if kind == "absolute":
            assert w.max_error == pytest.approx(errors[name, step], rel=1e-6, abs=1e-12)
        else:
            assert 0 <= w.max_error <= bound


def test_zstd_chunks_on_disk_decode_with_numcodecs_alone(comm, mpi_tmp):
    """The format: each chunk, at its recorded offset, is the codec's stream of the box's elements in the
    dataset's order (here plain zstd, no shuffle), and the chunks of a step cover the array once."""
    from numcodecs import Zstd

    rank = comm.Get_rank()
    url = f"sqlite:///{mpi_tmp}/c.db"
    specs = [(sdm.Dataset("a", shape=SHAPE, dtype="<f8"), lambda st: global_array(SHAPE, "<f8", seed=st)),
             (sdm.Dataset("f", shape=SHAPE, dtype=">i4", order="F"), lambda st: global_array(SHAPE, ">i4", "F", st))]
    run = _write(comm, url, mpi_tmp, "g", specs, range(3), compression="zstd:3:noshuffle")
    bad = 0
    if rank == 0:
        cat = sdm.Catalog(url)
        root = Path(cat.run(run).root)
        for _, name, w in cat.writes(run):
            ds, make = next(x for x in specs if x[0].name == name)
            G = make(w.step)
            seen = np.zeros(G.shape, bool)
            assert sum(e.nbytes for e in w.extents) == w.stored_nbytes
            for e in w.extents:
                with open(root / e.path, "rb") as f:
                    f.seek(e.offset)
                    blob = f.read(e.nbytes)
                starts, counts = e.box
                box = tuple(slice(a, a + c) for a, c in zip(starts, counts))
                raw = np.frombuffer(Zstd().decode(blob), dtype=ds.dtype)
                values = raw.reshape(counts, order=ds.order or "C")
                bad += int(not np.array_equal(values, G[box]))
                assert not seen[box].any()
                seen[box] = True
            assert seen.all()
        cat.close()
    assert comm.bcast(bad) == 0


def test_other_views_rank_counts_and_boxes_read_the_chunks(comm, mpi_tmp):
    rank, size = comm.Get_rank(), comm.Get_size()
    url = f"sqlite:///{mpi_tmp}/c.db"
    G = global_array((17, 9), "<f8", seed=3)
    specs = [(sdm.Dataset("a", shape=(17, 9), dtype="<f8"), lambda st: G + st)]
    _write(comm, url, mpi_tmp, "g", specs, range(2), compression="zstd:1:shuffle")
    # a Cyclic view on every rank: each rank's values come from several writers' chunks
    got = _read_all(comm, url, "g", ["a"], [1], view=sdm.Cyclic())
    idx = cyclic_indices((17, 9), _grid(size, 2), rank)
    np.testing.assert_array_equal(got["a", 1], (G + 1)[np.ix_(*idx)])
    # a box across chunk boundaries, and one process alone
    with sdm.open("packed", "r", comm=comm, catalog=url, run="latest") as s:
        box = s.group("g")["a"][1, 2:15:3, 4:]
    np.testing.assert_array_equal(box, (G + 1)[2:15:3, 4:])
    if rank == 0:
        with sdm.open("packed", "r", comm=MPI.COMM_SELF, catalog=url, run="latest") as s:
            g = s.group("g")
            np.testing.assert_array_equal(g.read("a", 0), G)
            np.testing.assert_array_equal(g["a"][0, -1], G[-1])
    comm.Barrier()


def test_a_damaged_chunk_is_an_integrity_error_naming_it(comm, mpi_tmp):
    rank = comm.Get_rank()
    url = f"sqlite:///{mpi_tmp}/c.db"
    specs = [(sdm.Dataset("a", shape=(16, 8), dtype="<f8"), lambda st: global_array((16, 8), "<f8", seed=st))]
    run = _write(comm, url, mpi_tmp, "g", specs, range(1), compression="zstd")
    where = None
    if rank == 0:
        cat = sdm.Catalog(url)
        (_, _, w), = cat.writes(run)
        e = w.extents[-1]
        path = Path(cat.run(run).root) / e.path
        cat.close()
        with open(path, "r+b") as f:  # one byte in the middle of the last chunk
            f.seek(e.offset + e.nbytes // 2)
            byte = f.read(1)
            f.seek(e.offset + e.nbytes // 2)
            f.write(bytes([byte[0] ^ 0xFF]))
        where = (len(w.extents) - 1, list(e.box[0]), list(e.box[1]))
    k, starts, counts = comm.bcast(where)
    with sdm.open("packed", "r", comm=comm, catalog=url, run="latest") as s:
        with pytest.raises(IntegrityError, match=re.escape(f"chunk {k} (box starts {starts}, counts {counts}) of step "
                                                           "0 of dataset 'a': its stored bytes do not match")):
            s.group("g").read("a", 0, verify=True)
    if rank == 0:
        from sdm.maintenance import verify_run

        cat = sdm.Catalog(url)
        report = verify_run(cat, run)
        cat.close()
        assert not report.ok and f"extent {k}" in report.problems[0].problem
    comm.Barrier()


def test_a_broken_bound_fails_every_rank_and_records_nothing(comm, mpi_tmp):
    rank, size = comm.Get_rank(), comm.Get_size()
    url = f"sqlite:///{mpi_tmp}/c.db"
    shape = (8, 4)
    with sdm.open("packed", root=mpi_tmp, catalog=url) as s:
        g = s.make_group("g", ["T"], dtype="<f8", shape=shape, view=sdm.Block(),
                         compression={"codec": "zfp", "tolerance": 1e-3})
        idx = block_indices(shape, _grid(size, 2), rank)
        local = _smooth(shape, 0)[np.ix_(*idx)].copy()
        if rank == size - 1 and local.size:
            local.flat[0] = np.nan  # no error bound holds for NaN
        before = catalog_counts(comm, url)
        with pytest.raises(CompressionBoundError, match=re.escape("cannot bound the error of NaN or infinite values")):
            g.write_step(0, {"T": local})
        assert catalog_counts(comm, url) == before
        local = _smooth(shape, 0)[np.ix_(*idx)].copy()
        g.write_step(0, {"T": local})  # the session goes on
        np.testing.assert_allclose(g.read("T", 0), local, atol=1e-3, rtol=0)


def test_refused_uses_raise_on_every_rank_before_anything_is_recorded(comm, mpi_tmp):
    url = f"sqlite:///{mpi_tmp}/c.db"
    with sdm.open("packed", root=mpi_tmp, catalog=url) as s:
        before = catalog_counts(comm, url)
        with pytest.raises(CompressionSpecError, match=re.escape("dataset 'i': a tolerance needs a floating-point "
                                                                 "dtype; int32 is exact only with a lossless codec")):
            s.make_group("g", ["i"], dtype="<i4", shape=(8,), compression={"codec": "zfp", "tolerance": 1e-3})
        with pytest.raises(InvalidArgumentError, match=re.escape("group 'g' is compressed (zstd:3:noshuffle): "
                                                                 "subfiles= cut a step")):
            s.make_group("g", ["a"], dtype="<f8", shape=(8,), compression="zstd", subfiles=2)
        with pytest.raises(InvalidArgumentError, match="a ranked view's rows are written as they come"):
            s.make_group("g", ["a"], dtype="<f8", shape=(8,), compression="zstd", view=sdm.Ranked())
        assert catalog_counts(comm, url) == before
        g = s.make_group("g", ["a"], dtype="<f8", shape=(comm.Get_size() * 4,), compression="lz4")
        g.data_view(sdm.Cyclic())
        if comm.Get_size() > 1:  # one rank's Cyclic piece is the whole array: one box
            with pytest.raises(InvalidArgumentError, match=re.escape("dataset 'a' is compressed, and its view cuts "
                                                                     "this rank's piece into 4 boxes of 8 bytes")):
                g.write("a", 0, np.zeros(4))
        g.data_view(sdm.MapArray(np.arange(comm.Get_rank(), comm.Get_size() * 4, comm.Get_size())[:1], coverage=False))
        with pytest.raises(InvalidArgumentError, match=re.escape("dataset 'a' is compressed, and its map leaves rows "
                                                                 "unwritten (coverage=False)")):
            g.write("a", 0, np.zeros(1))
        assert catalog_counts(comm, url)["writes"] == 0
        g.data_view(sdm.Block())
        g.write("a", 0, np.full(4, 1.5))
        np.testing.assert_array_equal(g.read("a", 0), np.full(4, 1.5))


def test_rebuild_restores_codecs_chunks_and_errors(comm, mpi_tmp):
    rank = comm.Get_rank()
    url = f"sqlite:///{mpi_tmp}/c.db"
    shape = (20, 6)
    specs = [(sdm.Dataset("T", shape=shape, dtype="<f8"), lambda st: _smooth(shape, st)),
             (sdm.Dataset("n", shape=shape, dtype="<i8", compression="blosc2:zstd:1:shuffle"),
              lambda st: np.arange(120, dtype="<i8").reshape(shape) // 7 + st),
             (sdm.Dataset("r", shape=shape, dtype="<f8", compression="none"), lambda st: _smooth(shape, st + 1))]
    run = _write(comm, url, mpi_tmp, "g", specs, range(3), compression={"codec": "zfp", "tolerance": 1e-4})
    same = None
    if rank == 0:
        from sdm.catalog.rebuild import rebuild

        def rows(u):
            cat = sdm.Catalog(u)
            try:
                out = sorted((d, w.step, w.path, w.offset, w.nbytes, w.codec, w.stored_nbytes, w.max_error,
                              w.checksum, w.checksum_algo, w.extents) for _, d, w in cat.writes(run))
                specs_ = sorted((d.name, d.compression) for g in cat.run(run).groups for d in g.datasets)
                return out, specs_
            finally:
                cat.close()

        before = rows(url)
        url2 = f"sqlite:///{mpi_tmp}/rebuilt.db"
        assert rebuild(mpi_tmp, url2).added == [run]
        after = rows(url2)
        same = before == after and before[1] == [("T", "zfp:tolerance=0.0001"), ("n", "blosc2:zstd:1:shuffle"),
                                                 ("r", None)]
        assert any(r[5] is None for r in before[0]) and all(r[10] for r in before[0] if r[5])
    assert comm.bcast(same)


def test_chunks_cut_every_box_along_one_grid(comm, mpi_tmp):
    rank, size = comm.Get_rank(), comm.Get_size()
    url = f"sqlite:///{mpi_tmp}/c.db"
    G = global_array((13, 10), "<i4", seed=1)
    specs = [(sdm.Dataset("a", shape=(13, 10), dtype="<i4"), lambda st: G + st)]
    run = _write(comm, url, mpi_tmp, "g", specs, range(2), compression="zstd", chunks=(4, 3))
    with sdm.open("packed", "r", comm=comm, catalog=url, run="latest") as s:
        g = s.group("g")
        assert g.engine.dataset("a").chunks == (4, 3)
        idx = block_indices((13, 10), _grid(size, 2), rank)
        np.testing.assert_array_equal(g.read("a", 1), (G + 1)[np.ix_(*idx)])
        np.testing.assert_array_equal(g["a"][0, 3:9, 2:8], G[3:9, 2:8])
    boxes = None
    if rank == 0:
        cat = sdm.Catalog(url)
        boxes = [e.box for _, _, w in cat.writes(run) if w.step == 0 for e in w.extents]
        cat.close()
    boxes = comm.bcast(boxes)
    cover = np.zeros((13, 10), int)
    for starts, counts in boxes:  # no chunk crosses a multiple of the chunk shape; together they cover the array once
        for s0, c, k in zip(starts, counts, (4, 3)):
            assert s0 // k == (s0 + c - 1) // k and 1 <= c <= k
        cover[tuple(slice(a, a + c) for a, c in zip(starts, counts))] += 1
    assert (cover == 1).all()


def test_chunks_are_refused_for_raw_datasets_and_bad_shapes(comm, mpi_tmp):
    url = f"sqlite:///{mpi_tmp}/c.db"
    with sdm.open("packed", root=mpi_tmp, catalog=url) as s:
        with pytest.raises(InvalidArgumentError, match=re.escape("dataset 'a': chunks= applies to compressed datasets")):
            s.make_group("g", ["a"], dtype="<f8", shape=(8, 4), chunks=(2, 2))
        with pytest.raises(InvalidArgumentError, match=re.escape("dataset 'a': chunks must give one positive integer "
                                                                 "per dimension of shape (8, 4), got (2,)")):
            s.make_group("g", ["a"], dtype="<f8", shape=(8, 4), chunks=(2,), compression="zstd")
        with pytest.raises(InvalidArgumentError, match=re.escape("dataset 'a': chunks must be an integer >= 1 and <= 9223372036854775807, got 0")):
            s.make_group("g", ["a"], dtype="<f8", shape=(8, 4), chunks=(2, 0), compression="zstd")
        assert s.groups == []


def test_the_trailer_describes_compressed_steps(comm, mpi_tmp):
    """A level-3 file copied alone: its trailer lists every chunk, and the file alone gives back each step."""
    rank = comm.Get_rank()
    url = f"sqlite:///{mpi_tmp}/c.db"
    G = global_array((12, 7), "<i8", seed=4)
    specs = [(sdm.Dataset("a", shape=(12, 7), dtype="<i8"), lambda st: G * (st + 1)),
             (sdm.Dataset("r", shape=(12, 7), dtype="<f4", compression="none"), lambda st: G.astype("<f4") + st)]
    run = _write(comm, url, mpi_tmp, "g", specs, range(2), compression="lz4", chunks=(5, 7))
    ok = None
    if rank == 0:
        from sdm.storage.trailer import read_array, read_trailer

        cat = sdm.Catalog(url)
        rows = {(d, w.step): w for _, d, w in cat.writes(run)}
        path = Path(cat.run(run).root) / rows["a", 0].path
        cat.close()
        copy = Path(mpi_tmp) / "copied.sdm"
        copy.write_bytes(path.read_bytes())
        index = read_trailer(copy)
        listed = {(w["dataset"], w["step"]): w for w in index["writes"]}
        for step in range(2):
            w, row = listed["a", step], rows["a", step]
            assert w["codec"] == "lz4:1:noshuffle" and w["stored"] == row.stored_nbytes
            assert [(c["offset"], c["nbytes"], c["checksum"], tuple(c["starts"]), tuple(c["counts"]))
                    for c in w["chunks"]] == [(e.offset, e.nbytes, e.checksum, *e.box) for e in row.extents]
            np.testing.assert_array_equal(read_array(copy, "a", step), G * (step + 1))
            np.testing.assert_array_equal(read_array(copy, "r", step), G.astype("<f4") + step)
            assert "codec" not in listed["r", step]
        ok = True
    assert comm.bcast(ok)


@pytest.mark.parametrize("level", [1, 3])
def test_overwrite_and_append_keep_only_the_new_chunks(comm, mpi_tmp, level):
    rank, size = comm.Get_rank(), comm.Get_size()
    url = f"sqlite:///{mpi_tmp}/c.db"
    shape = (9, 4)
    idx = block_indices(shape, _grid(size, 2), rank)
    A, B = global_array(shape, "<f8", seed=1), global_array(shape, "<f8", seed=2) * -3
    with sdm.open("packed", root=mpi_tmp, catalog=url, async_commit=True) as s:
        g = s.make_group("g", ["a"], dtype="<f8", shape=shape, level=level, compression="blosc2:lz4:1:shuffle")
        g.write("a", 0, A[np.ix_(*idx)])
        g.write("a", 0, B[np.ix_(*idx)], overwrite=True)
        run = s.run_id
    with sdm.open("packed", "a", root=mpi_tmp, catalog=url, run=run) as s:
        g = s.group("g")
        g.write("a", 1, A[np.ix_(*idx)])
        np.testing.assert_array_equal(g.read("a", 0), B[np.ix_(*idx)])
        np.testing.assert_array_equal(g.read("a", 1), A[np.ix_(*idx)])
    facts = None
    if rank == 0:
        from sdm.maintenance import verify_run

        cat = sdm.Catalog(url)
        rows = {w.step: w for _, _, w in cat.writes(run)}
        report = verify_run(cat, run)
        import sqlalchemy as sa

        with cat.engine.connect() as con:  # the overwritten version's chunks are gone with it
            stored = con.execute(sa.text("SELECT COUNT(*) FROM extents")).scalar_one()
        facts = (rows[0].version, rows[1].version, report.ok, stored == sum(len(w.extents) for w in rows.values()),
                 all(w.extents for w in rows.values()))
        cat.close()
    assert comm.bcast(facts) == (2, 1, True, True, True)


def _views(size, rank):
    """(view, the rank's global indices built independently, ghosts) of views whose pieces are several boxes."""
    rows = np.arange(48)[rank::size][::-1].copy()  # this rank's map rows, in its own (descending) order
    return [
        ("blockcyclic", sdm.BlockCyclic(blocks=(8, 8), ghosts=1), cyclic_indices(SHAPE2, _grid(size, 2), rank, [8, 8]),
         1),
        ("cyclic-rows", sdm.Cyclic(grid=(size, 1)), cyclic_indices(SHAPE2, (size, 1), rank), 0),
        ("map", sdm.MapArray(rows), [np.sort(rows), np.arange(40)], 0),
    ]


SHAPE2 = (48, 40)  # rows of 320 bytes: a row is a box worth a chunk


@pytest.mark.parametrize("which", ["blockcyclic", "cyclic-rows", "map"])
@pytest.mark.parametrize("codec", ["zstd:1:shuffle", "zfp:tolerance=0.001"])
def test_views_of_several_boxes_write_one_chunk_per_box(comm, mpi_tmp, which, codec):
    rank, size = comm.Get_rank(), comm.Get_size()
    url = f"sqlite:///{mpi_tmp}/c.db"
    name, view, idx, ghosts = next(v for v in _views(size, rank) if v[0] == which)
    G = _smooth(SHAPE2, 1) * 100 if codec.startswith("zfp") else global_array(SHAPE2, "<f8", seed=2)
    with sdm.open("packed", root=mpi_tmp, catalog=url) as s:
        g = s.make_group("g", ["a"], dtype="<f8", shape=SHAPE2, compression=codec, view=view)
        if which == "map":  # the rows in the rank's own order
            local = np.ascontiguousarray(G[np.arange(48)[rank::size][::-1]])
        else:
            local = local_from_global(G, idx, ghosts)[0]
        g.write("a", 0, local)
        run = s.run_id
    with sdm.open("packed", "r", comm=comm, catalog=url, run="latest") as s:
        g = s.group("g")
        g.data_view(sdm.Block())
        out = g.read("a", 0)
        want = G[np.ix_(*block_indices(SHAPE2, _grid(size, 2), rank))]
        if codec.startswith("zfp"):
            assert np.abs(out - want).max(initial=0) <= 1e-3
        else:
            np.testing.assert_array_equal(out, want)
    boxes = None
    if rank == 0:
        cat = sdm.Catalog(url)
        (_, _, w), = cat.writes(run)
        boxes = [e.box for e in w.extents]
        cat.close()
    cover = np.zeros(SHAPE2, int)
    for starts, counts in comm.bcast(boxes):
        cover[tuple(slice(a, a + c) for a, c in zip(starts, counts))] += 1
    assert (cover == 1).all()


def test_read_step_reads_compressed_and_raw_datasets_together(comm, mpi_tmp):
    rank, size = comm.Get_rank(), comm.Get_size()
    url = f"sqlite:///{mpi_tmp}/c.db"
    shape = (10, 6)
    idx = block_indices(shape, _grid(size, 2), rank)
    G = {"a": global_array(shape, "<f8", seed=1), "b": global_array(shape, ">i4", seed=2),
         "r": global_array(shape, "<f4", seed=3)}
    with sdm.open("packed", root=mpi_tmp, catalog=url) as s:
        g = s.make_group("g", ["a", sdm.Dataset("b", dtype=">i4"), sdm.Dataset("r", dtype="<f4", compression="none")],
                         dtype="<f8", shape=shape, compression="zstd:2:shuffle")
        g.write_step(0, {n: np.ascontiguousarray(G[n][np.ix_(*idx)]) for n in G})
        got = g.read_step(0, verify=True)
    assert sorted(got) == ["a", "b", "r"]
    for n in G:
        np.testing.assert_array_equal(got[n], G[n][np.ix_(*idx)])
        assert got[n].dtype == G[n].dtype
