"""Subfiled groups (``make_group(subfiles=K)``): every byte of every extent checked against numpy.

The references are built here: the global arrays with numpy, each rank's piece from first
principles (:mod:`_reference`), the extents by splitting the slowest dimension as numpy's
``array_split`` does, the checksums with the ``xxhash`` package. The subfiles are read with
``numpy.memmap`` at the places the catalog records, never through SDM.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
import sdm
import xxhash
from mpi4py import MPI
from sdm import maintenance

from _reference import block_indices, cyclic_indices, global_array, local_from_global

SHAPE = (7, 5, 3)  # uneven for every rank count 2..4
FEW = (2, 6)  # fewer rows than ranks at 3 and 4 ranks: empty ranks
DISTS = ["block", "block-row", "block-ghosts", "cyclic", "block-cyclic", "subarray-empty", "map-permuted"]
ALIGNED = "aligned: each rank wrote its own extent straight from its array"
GATHERED = "extents gathered by their owners (servers exchange) before the writes"
BAD_VALUE = "subfiles must be a positive integer, 'auto' or None, got {!r}"
LEVEL_1 = ("subfiles apply to levels 2 and 3 (extents appended to subfiles); level 1 writes a file per dataset and "
           "step")
ARCHIVE = ("subfiles apply to the fast tier; the archive tier writes one object per dataset and step (subfiled "
           "groups migrate to it as files)")


# ----------------------------------------------------------------------------- references


def _on_root(comm: MPI.Comm, fn: Callable[[], Any]) -> Any:
    """*fn()* on rank 0, its result (or its error, raised) on every rank."""
    out: Any = None
    if comm.Get_rank() == 0:
        try:
            out = ("ok", fn())
        except BaseException as exc:  # noqa: BLE001 - every rank must reach the bcast
            out = ("error", exc)
    kind, value = comm.bcast(out)
    if kind == "error":
        raise value
    return value


def _dist(name: str, size: int, rank: int, shape: tuple[int, ...]) -> tuple[sdm.Distribution, list[np.ndarray], int]:
    """(distribution, the global indices of the rank's local positions per dimension, ghost width)."""
    nd = len(shape)
    grid = tuple(MPI.Compute_dims(size, [0] * nd))
    row = (size,) + (1,) * (nd - 1)
    if name == "block":
        return sdm.Block(), block_indices(shape, grid, rank), 0
    if name == "block-row":
        return sdm.Block(grid=row), block_indices(shape, row, rank), 0
    if name == "block-ghosts":
        return sdm.Block(ghosts=1), block_indices(shape, grid, rank), 1
    if name == "cyclic":
        return sdm.Cyclic(), cyclic_indices(shape, grid, rank), 0
    if name == "block-cyclic":
        return sdm.BlockCyclic(blocks=2), cyclic_indices(shape, grid, rank, 2), 0
    if name == "subarray-empty":  # the first size - 1 ranks split the rows, the last owns nothing (from 2 ranks)
        writers = max(size - 1, 1)
        cuts = [0] + [int(p[-1]) + 1 if p.size else 0 for p in np.array_split(np.arange(shape[0]), writers)]
        cuts = list(np.maximum.accumulate(cuts)) + [shape[0]] * (size - writers)
        a, b = int(cuts[rank]), int(cuts[rank + 1])
        idx = [np.arange(a, b)] + [np.arange(n) for n in shape[1:]]
        return sdm.Subarray((a,) + (0,) * (nd - 1), (b - a,) + tuple(shape[1:])), idx, 0
    if name == "map-permuted":  # a shuffled round robin of the rows, each rank's rows in shuffled order
        perm = np.random.default_rng(5).permutation(shape[0])
        mine = perm[rank::size]
        return sdm.MapArray(mine), [mine] + [np.arange(n) for n in shape[1:]], 0
    raise AssertionError(name)


def _slow(shape: tuple[int, ...], order: str) -> int:
    return 0 if order == "C" else len(shape) - 1


def _expected_extents(shape: tuple[int, ...], itemsize: int, order: str, k: int) -> list[tuple[int, int, int, int]]:
    """``(first row, end row, start, nbytes)`` of each extent: the slowest dimension split by array_split."""
    rows = shape[_slow(shape, order)]
    per_row = int(np.prod(shape)) * itemsize // rows
    parts = np.array_split(np.arange(rows), min(k, rows))
    return [(int(p[0]), int(p[-1]) + 1, int(p[0]) * per_row, p.size * per_row) for p in parts]


def _expect_aligned(dist: str, size: int, shape: tuple[int, ...], order: str, k: int) -> bool | None:
    """Whether each rank's piece is exactly the extents it owns (extent j: rank j % size), so no byte moves
    between ranks (None: not asserted, for maps)."""
    if dist == "map-permuted":
        return None
    extents = _expected_extents(shape, 8, order, k)
    slow = _slow(shape, order)
    for r in range(size):
        _, idx, _ = _dist(dist, size, r, shape)
        rows = [np.arange(a, b) for j, (a, b, _, _) in enumerate(extents) if j % size == r]
        want = np.concatenate(rows) if rows else np.arange(0)
        if any(i.size == 0 for i in idx):
            if want.size:
                return False
            continue
        full = all(np.array_equal(np.sort(i), np.arange(n)) for d, (i, n) in enumerate(zip(idx, shape)) if d != slow)
        if not full or not np.array_equal(np.sort(idx[slow]), want):
            return False
    return True


def _check_row(root: Path, w: Any, G: np.ndarray, order: str, k: int, aligned: bool | None = None,
               reason: str | None = None, boundaries: bool = True) -> None:
    """Rank 0: a subfiled row against numpy: its extents tile the stream in order, hold its bytes, carry their xxh3."""
    stream = np.frombuffer(G.tobytes(order="F" if order == "F" else "C"), dtype=np.uint8)
    expect = _expected_extents(G.shape, G.itemsize, order, k)
    assert w.method == "subfiles"
    assert w.nbytes == G.nbytes
    assert [(e.start, e.nbytes) for e in w.extents] == [(s, n) for _, _, s, n in expect]
    assert w.extents[0].start == 0 and sum(e.nbytes for e in w.extents) == G.nbytes
    assert all(a.start + a.nbytes == b.start for a, b in zip(w.extents, w.extents[1:]))
    assert (w.path, w.offset) == (w.extents[0].path, w.extents[0].offset)
    digests = []
    for j, e in enumerate(w.extents):
        assert re.search(rf"\.sub{j:05d}\.sdm$", e.path), e.path
        assert e.offset % 4096 == 0 or not boundaries, e
        got = np.memmap(root / e.path, dtype=np.uint8, mode="r", offset=e.offset, shape=(e.nbytes,))
        np.testing.assert_array_equal(got, stream[e.start:e.start + e.nbytes])
        d = xxhash.xxh3_64_intdigest(got.tobytes())
        assert (e.checksum, e.checksum_algo) == (f"{d:016x}", "xxh3-64")
        digests.append(d)
    assert w.checksum_algo == "xxh3-64-extents"
    assert w.checksum == f"{xxhash.xxh3_64_intdigest(np.array(digests, '<u8').tobytes()):016x}"
    if reason is not None:
        assert w.reason.startswith(reason), w.reason
    if aligned is not None:
        assert w.reason.endswith(ALIGNED if aligned else GATHERED), w.reason
    else:
        assert w.reason.endswith((ALIGNED, GATHERED)), w.reason


def _rows(url: str, run_id: int) -> dict[tuple[str, str, int], Any]:
    cat = sdm.Catalog(url)
    try:
        return {(g, d, w.step): w for g, d, w in cat.writes(run_id)}
    finally:
        cat.close()


def _flip(root: Path, e: Any, at: int) -> None:
    """Change one bit of byte *at* of extent *e* in its subfile."""
    with open(root / e.path, "r+b") as f:
        f.seek(e.offset + at)
        byte = f.read(1)
        f.seek(e.offset + at)
        f.write(bytes([byte[0] ^ 0x10]))


def _small_run(mpi_tmp: Path, steps: range, then: Callable[[Any, Any], None] | None = None) -> int:
    """A run of group "g" (dataset "a" of SHAPE in 2 subfiles) with *steps* written, then *then(session, group)*."""
    with sdm.open("small", root=mpi_tmp, catalog=f"sqlite:///{mpi_tmp}/c.db") as s:
        g = s.make_group("g", ["a"], dtype="f8", shape=SHAPE, subfiles=2)
        for step in steps:
            g.write("a", step, np.full(g.local_shape("a"), float(step + 1)))
        if then is not None:
            then(s, g)
        return int(s.run_id)


def _ks(size: int) -> list[int]:
    return sorted({1, 2, size, size + 1, 9})


# ----------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("shape", [SHAPE, FEW], ids=["7x5x3", "2x6"])
@pytest.mark.parametrize("dist, order", [(d, o) for d in DISTS for o in "CF" if (d, o) != ("map-permuted", "F")])
def test_round_trip_bytes_in_the_subfiles(comm, mpi_tmp, dist, order, shape):
    """Every distribution (map arrays need C order), both orders, K from 1 to more than the rows."""
    rank, size = comm.Get_rank(), comm.Get_size()
    view, idx, ghosts = _dist(dist, size, rank, shape)
    url = f"sqlite:///{mpi_tmp}/c.db"
    ks = _ks(size)
    G = {k: global_array(shape, "f8", order, seed=10 * k) for k in ks}
    with sdm.open("sub", root=mpi_tmp, catalog=url) as s:
        groups = {k: s.make_group(f"k{k}", ["a"], dtype="f8", shape=shape, order=order, view=view, subfiles=k)
                  for k in ks}
        for k, g in groups.items():
            for step in (0, 2):
                local, _ = local_from_global(G[k] + step, idx, ghosts, order)
                assert g.local_shape("a") == local.shape
                g.write("a", step, local)
        for k, g in groups.items():
            for step in (0, 2):
                back = g.read("a", step, verify=True)
                expect, inner = local_from_global(G[k] + step, idx, ghosts, order)
                np.testing.assert_array_equal(back[inner], expect[inner])
        run_id = s.run_id

    def check() -> None:
        rows = _rows(url, run_id)
        assert len(rows) == 2 * len(ks)
        for k in ks:
            for step in (0, 2):
                w = rows[(f"k{k}", "a", step)]
                assert w.nprocs == size
                _check_row(Path(mpi_tmp), w, G[k] + step, order, k, _expect_aligned(dist, size, shape, order, k),
                           f"subfiles={k} (the group's) on ")
            # step 2's extents follow step 0's in the same subfiles, on aligned boundaries
            w0, w2 = rows[(f"k{k}", "a", 0)], rows[(f"k{k}", "a", 2)]
            assert [e.path for e in w0.extents] == [e.path for e in w2.extents]
            assert all(b.offset >= a.offset + a.nbytes for a, b in zip(w0.extents, w2.extents))
        # nothing else in the run: only the subfiles (no shared data file)
        files = sorted(p.name for p in Path(mpi_tmp).rglob("*.sdm"))
        assert files == sorted(f"k{k}.sub{j:05d}.sdm" for k in ks for j in range(min(k, shape[_slow(shape, order)])))
        cat = sdm.Catalog(url)
        report = maintenance.verify_run(cat, run_id)
        subfiles = {g.name: g.subfiles for g in cat.run(run_id).groups}
        cat.close()
        assert report.ok and report.checksums_checked == 2 * len(ks) and not report.unreferenced
        assert subfiles == {f"k{k}": k for k in ks}

    _on_root(comm, check)


def test_level_2_steps_per_file_alignment_hint_and_dtypes(comm, mpi_tmp):
    """Subfiles follow the data file's name (level 2: one per dataset; steps_per_file: one per window), extents
    start on multiples of ``sdm_subfile_align``, and the bytes are the dtype's as given (big-endian too)."""
    rank, size = comm.Get_rank(), comm.Get_size()
    url = f"sqlite:///{mpi_tmp}/c.db"
    G = {"i": global_array(SHAPE, "<i4", "C", seed=1), "f": global_array(SHAPE, ">f4", "C", seed=2)}
    view, idx, _ = _dist("block", size, rank, SHAPE)

    def at(d: str, step: int) -> np.ndarray:  # G + step keeps the dtype's byte order
        return (G[d] + step).astype(G[d].dtype)

    with sdm.open("names", root=mpi_tmp, catalog=url, hints={"sdm_subfile_align": "1k"}) as s:
        two = s.make_group("two", [sdm.Dataset("i", dtype="<i4"), sdm.Dataset("f", dtype=">f4")], shape=SHAPE,
                           level=2, view=view, subfiles=2)
        win = s.make_group("win", [sdm.Dataset("i", dtype="<i4")], shape=SHAPE, view=view, subfiles=2,
                           steps_per_file=2)
        for step in range(3):
            two.write_step(step, {d: local_from_global(at(d, step), idx)[0] for d in "if"})  # one dump
            win.write("i", step, local_from_global(at("i", step), idx)[0])
        for step in range(3):
            for d in "if":
                np.testing.assert_array_equal(two.read(d, step, verify=True), at(d, step)[np.ix_(*idx)])
        run_id = s.run_id

    def check() -> None:
        rows = _rows(url, run_id)
        for (group, d, step), w in rows.items():
            _check_row(Path(mpi_tmp), w, at(d, step), "C", 2, boundaries=False)
            stem = f"two.{d}" if group == "two" else f"win.s{step // 2 * 2:08d}-{step // 2 * 2 + 1:08d}"
            assert [Path(e.path).name for e in w.extents] == [f"{stem}.sub{j:05d}.sdm" for j in range(2)]
            first = min(v.step for (g2, d2, _), v in rows.items() if (g2, d2) == (group, d) and
                        v.extents[0].path == w.extents[0].path)
            for e, e0 in zip(w.extents, rows[(group, d, first)].extents):  # 1 KiB apart per step of its file
                assert e.offset % 1024 == 0
                assert e.offset == (step - first) * -(-e0.nbytes // 1024) * 1024

    _on_root(comm, check)


# ----------------------------------------------------------------------------- reads


@pytest.mark.parametrize("order", ["C", "F"])
def test_reads_in_other_distributions_boxes_and_rank_counts(comm, mpi_tmp, order):
    rank, size = comm.Get_rank(), comm.Get_size()
    url = f"sqlite:///{mpi_tmp}/c.db"
    G = global_array(SHAPE, "<i8", order, seed=3)
    k = 3  # extents of rows 0-2, 3-4, 5-6 in C order; of the last dimension's 3 rows in F order
    view, idx, ghosts = _dist("block", size, rank, SHAPE)
    with sdm.open("reads", root=mpi_tmp, catalog=url) as s:
        g = s.make_group("g", ["a"], dtype="<i8", shape=SHAPE, order=order, view=view, subfiles=k)
        for step in (1, 4):
            g.write("a", step, local_from_global(G + step, idx, ghosts, order)[0])
        for reader in [d for d in DISTS if order == "C" or not d.startswith("map")]:
            rview, ridx, rghosts = _dist(reader, size, rank, SHAPE)
            g.data_view(rview)
            back = g.read("a", 4, verify=True)
            expect, inner = local_from_global(G + 4, ridx, rghosts, order)
            np.testing.assert_array_equal(back[inner], expect[inner])
        # each rank its own box, across several subfiles; the last rank's empty (from 2 ranks)
        boxes = [(slice(rank % 2, 7 - rank % 3), slice(1, 4), slice(0, 3)),
                 (slice(0, 7, 2), rank % 5, slice(rank % 3, 3)),
                 (slice(3, 3) if rank == size - 1 and size > 1 else slice(2, 6), ..., 1)]
        for box in boxes:
            got = g.read("a", 1, box=box)
            keep = tuple(slice(b, b + 1) if isinstance(b, int) else b for b in box)
            np.testing.assert_array_equal(got, (G + 1)[keep])
        run_id = s.run_id

    def alone() -> None:  # one rank reads what `size` ranks wrote
        with sdm.open("reads", "r", catalog=url, run=run_id, comm=MPI.COMM_SELF) as s1:
            g1 = s1.group("g")
            for step in (1, 4):
                np.testing.assert_array_equal(g1.read("a", step, verify=True), G + step)
            box = g1.read("a", 4, box=(slice(1, 6), slice(0, 5, 2), 2))
            np.testing.assert_array_equal(box, (G + 4)[1:6, 0:5:2, 2:3])
            lazy = g1["a"]
            assert lazy.shape == (2, *SHAPE)
            np.testing.assert_array_equal(lazy[1, 2:5, ...], (G + 4)[2:5])
            np.testing.assert_array_equal(lazy[0, :, 3, 1:], (G + 1)[:, 3, 1:])
            np.testing.assert_array_equal(lazy[:, 6, 4, 2], np.array([(G + 1)[6, 4, 2], (G + 4)[6, 4, 2]]))
            np.testing.assert_array_equal(np.asarray(lazy), np.stack([G + 1, G + 4]))

    _on_root(comm, alone)


# ----------------------------------------------------------------------------- verification


@pytest.mark.parametrize("kind", ["aligned", "gathered"])
def test_a_flipped_byte_is_found_in_its_extent(comm, mpi_tmp, kind):
    rank, size = comm.Get_rank(), comm.Get_size()
    url = f"sqlite:///{mpi_tmp}/c.db"
    k = size if kind == "aligned" else size + 1
    G = global_array(SHAPE, "f8", "C", seed=1)
    view, idx, _ = _dist("block-row", size, rank, SHAPE)
    with sdm.open("flip", root=mpi_tmp, catalog=url) as s:
        g = s.make_group("g", ["a", "b"], dtype="f8", shape=SHAPE, view=view, subfiles=k)
        for step in (0, 1):
            for d in "ab":
                g.write(d, step, local_from_global(G + step + (d == "b"), idx)[0])
        run_id = s.run_id

        def flip() -> tuple[int, str]:
            w = _rows(url, run_id)[("g", "a", 1)]
            j = len(w.extents) - 1
            _flip(Path(mpi_tmp), w.extents[j], w.extents[j].nbytes // 2)
            return j, Path(w.extents[j].path).name

        comm.Barrier()
        j, name = _on_root(comm, flip)
        with pytest.raises(sdm.IntegrityError) as info:
            g.read("a", 1, verify=True)
        message = str(info.value)
        assert message.startswith(f"dataset 'a' step 1 extent {j} (")
        assert f" of {name}) does not match its write-time checksum xxh3-64:" in message
        for step in (0, 1):  # nothing else lost
            for d in "ab":
                if (d, step) != ("a", 1):
                    np.testing.assert_array_equal(g.read(d, step, verify=True), (G + step + (d == "b"))[np.ix_(*idx)])

    def check() -> None:
        cat = sdm.Catalog(url)
        report = maintenance.verify_run(cat, run_id)
        cat.close()
        assert report.rows == 4
        assert [(p.group, p.dataset, p.step) for p in report.problems] == [("g", "a", 1)]
        assert report.problems[0].problem.startswith(f"extent {j} (subfile {name}, bytes ")
        assert not report.unreferenced

    _on_root(comm, check)


# ----------------------------------------------------------------------------- overwrites


@pytest.mark.parametrize("k", [2, "size"])
def test_overwrite_writes_new_extents(comm, mpi_tmp, k):
    rank, size = comm.Get_rank(), comm.Get_size()
    k = size if k == "size" else k
    url = f"sqlite:///{mpi_tmp}/c.db"
    G = global_array(SHAPE, "f8", "C", seed=2)
    view, idx, _ = _dist("block-row", size, rank, SHAPE)
    with sdm.open("over", root=mpi_tmp, catalog=url) as s:
        g = s.make_group("g", ["a"], dtype="f8", shape=SHAPE, view=view, subfiles=k)
        g.write("a", 0, local_from_global(G, idx)[0])
        run_id = s.run_id
        old = _on_root(comm, lambda: _rows(url, run_id)[("g", "a", 0)])
        with pytest.raises(sdm.SDMError):
            g.write("a", 0, local_from_global(G, idx)[0])  # not without overwrite=True
        g.write("a", 0, local_from_global(G + 100, idx)[0], overwrite=True)
        np.testing.assert_array_equal(g.read("a", 0, verify=True), (G + 100)[np.ix_(*idx)])

    def check() -> None:
        new = _rows(url, run_id)[("g", "a", 0)]
        assert new.version == 2
        _check_row(Path(mpi_tmp), new, G + 100, "C", k)
        assert [e.path for e in new.extents] == [e.path for e in old.extents]
        assert all(n.offset >= o.offset + o.nbytes for o, n in zip(old.extents, new.extents))
        _check_row(Path(mpi_tmp), old, G, "C", k)  # the earlier bytes are still there, unreferenced
        cat = sdm.Catalog(url)
        report = maintenance.verify_run(cat, run_id)
        cat.close()
        assert report.ok
        free = {(u.path, u.offset, u.nbytes) for u in report.unreferenced}
        for e in old.extents:
            assert any(p == e.path and o <= e.offset and e.offset + e.nbytes <= o + n for p, o, n in free), (e, free)

    _on_root(comm, check)


def test_a_map_without_coverage_keeps_the_rows_it_does_not_write(comm, mpi_tmp):
    rank, size = comm.Get_rank(), comm.Get_size()
    url = f"sqlite:///{mpi_tmp}/c.db"
    G = global_array(SHAPE, "f8", "C", seed=4)
    k = size + 1
    with sdm.open("gappy", root=mpi_tmp, catalog=url) as s:
        g = s.make_group("g", ["a"], dtype="f8", shape=SHAPE, view=sdm.Block(grid=(size, 1, 1)), subfiles=k)
        _, idx, _ = _dist("block-row", size, rank, SHAPE)
        g.write("a", 0, local_from_global(G, idx)[0])
        even = np.arange(0, SHAPE[0], 2)[::-1]  # rows 6, 4, 2, 0 dealt out in reverse order
        mine = even[rank::size]
        g.data_view(sdm.MapArray(mine, coverage=False))
        g.write("a", 0, (G + 100)[mine], overwrite=True)
        g.data_view(sdm.Block(grid=(size, 1, 1)))
        expect = G.copy()
        expect[::2] += 100
        np.testing.assert_array_equal(g.read("a", 0, verify=True), expect[np.ix_(*idx)])
        run_id = s.run_id

    _on_root(comm, lambda: _check_row(Path(mpi_tmp), _rows(url, run_id)[("g", "a", 0)], expect, "C", k))


# ----------------------------------------------------------------------------- "auto"


def test_auto_keeps_small_pieces_in_one_file_and_a_hint_cuts_them(comm, mpi_tmp):
    rank, size = comm.Get_rank(), comm.Get_size()
    url = f"sqlite:///{mpi_tmp}/c.db"
    G = global_array(SHAPE, "f8", "C", seed=6)
    view, idx, _ = _dist("block", size, rank, SHAPE)
    runs = []
    for hints in ({}, {"sdm_subfile_min": "1"}):
        with sdm.open("auto", root=mpi_tmp, catalog=url, hints=hints) as s:
            g = s.make_group("g", ["a"], dtype="f8", shape=SHAPE, view=view, subfiles="auto")
            g.write("a", 0, local_from_global(G, idx)[0])
            np.testing.assert_array_equal(g.read("a", 0, verify=True), G[np.ix_(*idx)])
            runs.append(s.run_id)

    def check() -> None:
        small = _rows(url, runs[0])[("g", "a", 0)]
        assert small.extents == () and small.method != "subfiles"
        assert small.checksum_algo == "mix64-v2"
        np.testing.assert_array_equal(
            np.memmap(Path(mpi_tmp) / small.path, dtype="f8", mode="r", offset=small.offset, shape=SHAPE), G)
        cut = _rows(url, runs[1])[("g", "a", 0)]
        if size == 1:  # one rank: one shared file whatever the size
            assert cut.extents == () and cut.method != "subfiles"
        else:
            _check_row(Path(mpi_tmp), cut, G, "C", size, reason=f"auto: one subfile per rank ({size} ranks on ")
            assert f", {G.nbytes // size} B per rank >= 1 B" in cut.reason, cut.reason
        cat = sdm.Catalog(url)
        subfiles = [cat.run(r).groups[0].subfiles for r in runs]
        cat.close()
        assert subfiles == [0, 0]  # "auto" as the catalog stores it

    _on_root(comm, check)


def test_auto_records_why_it_kept_one_file(comm, mpi_tmp):
    size = comm.Get_size()
    url = f"sqlite:///{mpi_tmp}/c.db"
    with sdm.open("auto", root=mpi_tmp, catalog=url) as s:
        g = s.make_group("g", ["a"], dtype="f8", shape=SHAPE, subfiles="auto")
        g.write("a", 0, np.zeros(g.local_shape("a")))
        run_id = s.run_id
    why = "one rank" if size == 1 else "sdm_subfile_min"
    reason = _on_root(comm, lambda: _rows(url, run_id)[("g", "a", 0)].reason)
    assert "auto: one shared file" in reason and why in reason, reason


# ----------------------------------------------------------------------------- bad inputs


@pytest.mark.parametrize("kwargs, message", [
    (dict(subfiles=0), BAD_VALUE.format(0)),
    (dict(subfiles=-2), BAD_VALUE.format(-2)),
    (dict(subfiles="many"), BAD_VALUE.format("many")),
    (dict(subfiles=True), BAD_VALUE.format(True)),
    (dict(subfiles=2.0), BAD_VALUE.format(2.0)),
    (dict(subfiles=2, level=1), LEVEL_1),
    (dict(subfiles="auto", level=1), LEVEL_1),
    (dict(subfiles=2, level=3, tier="archive", archive="s3://nowhere/x"), ARCHIVE),
    (dict(subfiles=2, tier="archive", archive="s3://nowhere/x"), LEVEL_1),  # the archive tier's default level is 1
], ids=["zero", "negative", "text", "bool", "float", "level1", "auto-level1", "archive", "archive-default-level"])
def test_bad_subfiles_are_refused_on_every_rank(comm, mpi_tmp, kwargs, message):
    url = f"sqlite:///{mpi_tmp}/c.db"
    with sdm.open("bad", root=mpi_tmp, catalog=url) as s:
        with pytest.raises(sdm.InvalidArgumentError) as info:
            s.make_group("g", ["a"], dtype="f8", shape=SHAPE, **kwargs)
        assert str(info.value) == message + (" [rank 0]" if comm.Get_size() > 1 else "")  # the first rank that failed
        run_id = s.run_id

    def check() -> None:
        cat = sdm.Catalog(url)
        groups = cat.run(run_id).groups
        cat.close()
        assert groups == () or groups == []
        assert not list(Path(mpi_tmp).rglob("*.sdm"))

    _on_root(comm, check)


# ----------------------------------------------------------------------------- rebuild and truncation


def test_rebuild_restores_the_extents(comm, mpi_tmp):
    rank, size = comm.Get_rank(), comm.Get_size()
    url = f"sqlite:///{mpi_tmp}/c.db"
    G = global_array(SHAPE, "f8", "F", seed=7)
    view, idx, _ = _dist("cyclic", size, rank, SHAPE)
    with sdm.open("rb", root=mpi_tmp, catalog=url) as s:
        for name, sub in (("cut", 2), ("auto", "auto"), ("plain", None)):
            g = s.make_group(name, ["a"], dtype="f8", shape=SHAPE, order="F", view=view, subfiles=sub)
            for step in (0, 1):
                g.write("a", step, local_from_global(G + step, idx, 0, "F")[0])
        run_id = s.run_id

    def check() -> None:
        from sdm.catalog.rebuild import rebuild

        url2 = f"sqlite:///{mpi_tmp}/rebuilt.db"
        assert rebuild(mpi_tmp, url2).added == [run_id]
        before, after = _rows(url, run_id), _rows(url2, run_id)
        assert sorted(before) == sorted(after)
        for key, w in before.items():
            v = after[key]
            assert (v.path, v.offset, v.nbytes, v.checksum, v.checksum_algo, v.method, v.extents) == \
                (w.path, w.offset, w.nbytes, w.checksum, w.checksum_algo, w.method, w.extents)
        assert len(before[("cut", "a", 1)].extents) == 2
        _check_row(Path(mpi_tmp), after[("cut", "a", 1)], G + 1, "F", 2)
        cat = sdm.Catalog(url2)
        subfiles = {g.name: g.subfiles for g in cat.run(run_id).groups}
        report = maintenance.verify_run(cat, run_id)
        cat.close()
        assert subfiles == {"cut": 2, "auto": 0, "plain": None}
        assert report.ok and not report.unreferenced
        with sdm.open("rb", "r", catalog=url2, run=run_id, comm=MPI.COMM_SELF) as s1:
            for step in (0, 1):
                np.testing.assert_array_equal(s1.group("cut").read("a", step, verify=True), G + step)

    _on_root(comm, check)


def test_truncation_erases_extents_and_releases_their_space(comm, mpi_tmp):
    rank, size = comm.Get_rank(), comm.Get_size()
    url = f"sqlite:///{mpi_tmp}/c.db"
    G = global_array(SHAPE, "f8", "C", seed=8)
    k = 3
    view, idx, _ = _dist("block-row", size, rank, SHAPE)
    with sdm.open("trunc", root=mpi_tmp, catalog=url) as s:
        g = s.make_group("g", ["a"], dtype="f8", shape=SHAPE, view=view, subfiles=k)
        keep = s.make_group("keep", ["a"], dtype="f8", shape=SHAPE, view=view, subfiles=k)
        for step in range(4):
            g.write("a", step, local_from_global(G + step, idx)[0])
        keep.write("a", 0, local_from_global(G, idx)[0])
        run_id = s.run_id
        done = s.truncate(1, ["g"])
        assert done.writes == (("g", "a", 2), ("g", "a", 3))
        assert done.nbytes == 2 * G.nbytes and done.removed_files == () and done.left == ()

        def on_disk() -> None:
            rows = _rows(url, run_id)
            assert sorted(rows) == [("g", "a", 0), ("g", "a", 1), ("keep", "a", 0)]
            last = rows[("g", "a", 1)]
            assert sorted(done.cut_files) == sorted((e.path, e.offset + e.nbytes) for e in last.extents)
            for e in last.extents:  # each subfile cut right after the last extent kept
                assert (Path(mpi_tmp) / e.path).stat().st_size == e.offset + e.nbytes
            with sqlite3.connect(f"{mpi_tmp}/c.db") as con:
                (count,) = con.execute("select count(*) from extents").fetchone()
            con.close()
            assert count == 3 * k  # steps 0 and 1 of g, step 0 of keep

        _on_root(comm, on_disk)
        g.write("a", 2, local_from_global(G + 20, idx)[0])  # the simulation restarts from step 1
        np.testing.assert_array_equal(g.read("a", 2, verify=True), (G + 20)[np.ix_(*idx)])

    def check() -> None:
        rows = _rows(url, run_id)
        _check_row(Path(mpi_tmp), rows[("g", "a", 2)], G + 20, "C", k)
        _check_row(Path(mpi_tmp), rows[("g", "a", 1)], G + 1, "C", k)
        for e in rows[("g", "a", 2)].extents:  # no trailer in a subfile (the meta-file describes them), even when cut
            assert not (Path(mpi_tmp) / e.path).read_bytes()[-32:].startswith(b"SDMTRAIL"), e.path
        cat = sdm.Catalog(url)
        report = maintenance.verify_run(cat, run_id)
        cat.close()
        assert report.ok and not report.unreferenced, report

    _on_root(comm, check)


def test_extents_stay_aligned_after_a_truncation(comm, mpi_tmp):
    def truncated(s: Any, g: Any) -> None:
        s.truncate(0)
        g.write("a", 1, np.full(g.local_shape("a"), 9.0))

    run_id = _small_run(mpi_tmp, range(3), truncated)
    url = f"sqlite:///{mpi_tmp}/c.db"
    offsets = _on_root(comm, lambda: [e.offset for e in _rows(url, run_id)[("g", "a", 1)].extents])
    assert all(o % 4096 == 0 for o in offsets), offsets


def test_verify_counts_the_checksum_of_a_damaged_extent(comm, mpi_tmp):
    run_id = _small_run(mpi_tmp, range(1))
    url = f"sqlite:///{mpi_tmp}/c.db"

    def check() -> tuple[int, int, int]:
        _flip(Path(mpi_tmp), _rows(url, run_id)[("g", "a", 0)].extents[0], 0)
        cat = sdm.Catalog(url)
        report = maintenance.verify_run(cat, run_id)
        cat.close()
        return len(report.problems), report.checksums_checked, report.bytes_checked

    assert _on_root(comm, check) == (1, 1, SHAPE[0] * SHAPE[1] * SHAPE[2] * 8)


def test_a_scalar_dataset_in_a_subfiled_group(comm, mpi_tmp):
    url = f"sqlite:///{mpi_tmp}/c.db"

    def alone() -> float:  # one rank (a 0-d dataset has no block grid over several)
        with sdm.open("scalar", root=mpi_tmp, catalog=url, comm=MPI.COMM_SELF) as s:
            g = s.make_group("g", ["a"], dtype="f8", shape=(), subfiles=1)
            g.write("a", 0, np.array(3.5))
            return float(g.read("a", 0, verify=True))

    assert _on_root(comm, alone) == 3.5


@pytest.mark.parametrize("view", ["slabs", "cyclic"])
def test_a_subfile_that_cannot_be_written_fails_every_rank_and_records_nothing(comm, mpi_tmp, view):
    """The last extent's subfile cannot be opened (a directory stands at its path): the write raises the same
    StorageError on every rank (aligned: straight from the arrays; cyclic: through the servers exchange), no
    row is recorded, and once the path is free the same step is written and read back."""
    size = comm.Get_size()
    url = f"sqlite:///{mpi_tmp}/c.db"
    G = global_array(SHAPE)
    with sdm.open("broken", root=mpi_tmp, catalog=url) as s:
        dist = sdm.Block(grid=(size, 1, 1)) if view == "slabs" else sdm.Cyclic()
        g = s.make_group("g", ["a"], dtype="f8", shape=SHAPE, subfiles=size, view=dist)
        idx = [np.asarray(i) for i in g.piece("a").indices]
        local = local_from_global(G, idx)[0]
        last = min(size, SHAPE[0]) - 1  # the last extent (never more extents than rows), owned by rank `last`
        blocker = Path(mpi_tmp) / s.run_dir / f"g.sub{last:05d}.sdm"
        if comm.Get_rank() == 0:
            blocker.mkdir(parents=True)
        comm.Barrier()
        with pytest.raises(sdm.StorageError) as info:
            g.write("a", 0, local)
        assert f"cannot open subfile {blocker}" in str(info.value)
        assert str(info.value).endswith(f"[rank {last}]" if size > 1 else "")
        assert g.steps("a") == []
        assert _on_root(comm, lambda: [k for k in _rows(url, s.run_id)]) == []  # nothing recorded
        if comm.Get_rank() == 0:
            blocker.rmdir()
        comm.Barrier()
        g.write("a", 0, local)  # the same step, now that the path is free
        np.testing.assert_array_equal(g.read("a", 0, verify=True), G[np.ix_(*idx)])


def test_lazy_serial_reads_mix_plain_and_subfiled_steps(comm, mpi_tmp):
    """An "auto" group keeps a one-rank write in one file and cuts a write of every rank into extents; one process
    indexing both steps reads the plain step from its file and the subfiled one through its extents."""
    size = comm.Get_size()
    url = f"sqlite:///{mpi_tmp}/c.db"
    shape = (8, 6)
    G = [np.arange(48, dtype="f8").reshape(shape) + 100 * k for k in (0, 1)]
    hints = {"sdm_subfile_min": "1"}

    def first() -> int:
        with sdm.open("mixed", root=mpi_tmp, catalog=url, comm=MPI.COMM_SELF, hints=hints) as s:
            s.make_group("g", ["a"], dtype="f8", shape=shape, subfiles="auto").write("a", 0, G[0])
            return s.run_id

    run_id = _on_root(comm, first)
    with sdm.open("mixed", "a", root=mpi_tmp, catalog=url, run=run_id, hints=hints) as s:
        g = s.group("g")
        g.data_view(sdm.Block(grid=(size, 1)))
        g.write("a", 1, G[1][np.ix_(*[np.asarray(i) for i in g.piece("a").indices])])

    def lazy() -> tuple[list[int], np.ndarray]:
        with sdm.open("mixed", "r", root=mpi_tmp, catalog=url, run=run_id, comm=MPI.COMM_SELF) as s:
            got = s.group("g")["a"][:, 2:7, 1:4]
        rows = _rows(url, run_id)
        return [len(rows[("g", "a", k)].extents) for k in (0, 1)], got

    extents, got = _on_root(comm, lazy)
    assert extents == [0, size if size > 1 else 0]
    np.testing.assert_array_equal(got, np.stack(G)[:, 2:7, 1:4])
