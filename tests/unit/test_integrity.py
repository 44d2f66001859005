"""SDM's checksums against independent numpy implementations written here.

``mix64-v2``: shares of any decomposition (Block, Cyclic, BlockCyclic, Subarray, MapArray;
C and Fortran order; every dtype SDM stores) add up to the checksum of the whole file
bytes; the damage that the linear ``sum64-v1`` missed is detected; the formula in the
module docstring runs as printed.  ``sum64-v1`` is still computed for old rows.
"""

from __future__ import annotations

import textwrap
import zlib

import numpy as np
import pytest
import sdm
from sdm import integrity
from sdm.errors import InvalidArgumentError

MASK = (1 << 64) - 1


# ----------------------------------------------------------------------------- references


def _word_bytes(itemsize):
    return 8 if itemsize % 8 == 0 else 4 if itemsize % 4 == 0 else 2 if itemsize % 2 == 0 else 1


def mix64_reference(raw, itemsize):
    """mix64-v2 from first principles: Python integers for the constants, numpy for the words."""
    size = _word_bytes(itemsize)
    words = np.frombuffer(bytes(raw), dtype=np.dtype(f"<u{size}")).astype(np.uint64)
    pos = np.arange(words.size, dtype=np.uint64)
    key = pos * np.uint64(0x9E3779B97F4A7C15) + np.uint64(0x243F6A8885A308D3)  # wraps mod 2**64
    z = words ^ key
    for mult in (0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53):  # MurmurHash3 fmix64
        z = (z ^ (z >> np.uint64(33))) * np.uint64(mult)
    z = z ^ (z >> np.uint64(33))
    return sum(int(v) for v in z) & MASK  # exact Python sum, then mod 2**64


def sum64_reference(raw, itemsize):
    size = _word_bytes(itemsize)
    words = np.frombuffer(bytes(raw), dtype=np.dtype(f"<u{size}"))
    return sum(int(w) * (2 * p + 1) for p, w in enumerate(words.tolist())) & MASK


DTYPES = [
    "f8", "f4", ">f8", ">f4", "f2", "u1", "i2", ">i8", "<u4", "c16", ">c8", "?", "S3", "U2", ">U1",
    [("a", "<i4"), ("b", ">f8")],   # 12 bytes -> 4-byte words
    [("x", "u1"), ("y", "<f2")],    # 3 bytes -> 1-byte words
    [("p", "f8"), ("q", "(2,)i4")],  # 16 bytes -> 8-byte words
]


def _random_global(shape, dtype, rng):
    """A global array of random bytes (bool kept to 0/1, as numpy stores it)."""
    dt = np.dtype(dtype)
    n = int(np.prod(shape))
    raw = rng.integers(0, 256, size=n * dt.itemsize, dtype=np.uint8)
    if dt == np.dtype("?"):
        raw &= 1
    return np.frombuffer(raw.tobytes(), dtype=dt).reshape(shape)


def _local(G, piece, order, rng):
    """The local array a rank would hold: owned values in place, garbage in ghosts."""
    local = _random_global(piece.memory_shape, G.dtype, rng).copy(order=order)
    if piece.kind == "map":
        local[piece.memory_rows] = G[piece.indices[0]]
    else:
        local[piece.interior] = G[np.ix_(*piece.indices)]
    return local


def _random_views(shape, rng):
    """(distribution per rank) for a few random decompositions of *shape*."""
    ndim = len(shape)
    nprocs = int(rng.integers(1, 6))
    grid = tuple(int(g) for g in _random_grid(nprocs, ndim, rng))
    views = [
        [sdm.Block(grid=grid, ghosts=int(rng.integers(0, 3)))] * nprocs,
        [sdm.Cyclic(grid=grid)] * nprocs,
        [sdm.BlockCyclic(grid=grid, blocks=[int(b) for b in rng.integers(1, 4, size=ndim)])] * nprocs,
    ]
    # Subarray: random cuts of every dimension, one box per rank of the cut grid
    cuts = [np.unique(np.concatenate([[0, n], rng.integers(0, n + 1, size=int(rng.integers(0, 3)))])) for n in shape]
    boxes = [[]]
    for c in cuts:
        boxes = [b + [(int(lo), int(hi - lo))] for b in boxes for lo, hi in zip(c[:-1], c[1:])]
    views.append([sdm.Subarray([s for s, _ in b], [n for _, n in b], ghosts=int(rng.integers(0, 2))) for b in boxes])
    # MapArray: a random permutation of the rows dealt to ranks, some ranks empty, ghost copies added
    perm = rng.permutation(shape[0])
    owners = rng.integers(0, nprocs, size=shape[0])
    maps = []
    for r in range(nprocs):
        mine = perm[owners[perm] == r]
        ghosts = rng.choice(shape[0], size=int(rng.integers(0, 3)))
        rows = np.concatenate([mine, ghosts])
        mask = np.concatenate([np.zeros(mine.size, bool), np.ones(ghosts.size, bool)])
        order = rng.permutation(rows.size)
        maps.append(sdm.MapArray(rows[order], mask[order]))
    views.append(maps)
    return views


def _random_grid(nprocs, ndim, rng):
    grid = [1] * ndim
    n = nprocs
    for p in (2, 3, 5):
        while n % p == 0:
            grid[int(rng.integers(0, ndim))] *= p
            n //= p
    return grid


def _shares(G, views, order, rng, algorithm=integrity.ALGORITHM):
    shares = []
    for rank, dist in enumerate(views):
        piece = dist.piece(G.shape, len(views), rank)
        shares.append(integrity.piece_share(piece, _local(G, piece, order, rng), order, algorithm))
    return integrity.combine(shares)


# ----------------------------------------------------------------------------- decomposition independence


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("order", ["C", "F"])
def test_shares_of_random_decompositions_add_up_to_the_file_checksum(dtype, order):
    rng = np.random.default_rng(zlib.crc32(f"{dtype}{order}".encode()))
    for shape in [(13,), (9, 7), (5, 4, 6)]:
        G = _random_global(shape, dtype, rng)
        raw = G.tobytes(order=order)
        want = mix64_reference(raw, G.dtype.itemsize)
        assert integrity.checksum_of_bytes(raw, G.dtype) == f"{want:016x}"
        for views in _random_views(shape, rng):
            assert _shares(G, views, order, rng) == want, (shape, views[0])


@pytest.mark.parametrize("chunk", [1, 5, 64, 1000])
@pytest.mark.parametrize("order", ["C", "F"])
def test_chunking_does_not_change_the_sum(monkeypatch, chunk, order):
    """Small chunks force every split axis, partial rows and the row gather of map pieces."""
    monkeypatch.setattr(integrity, "CHUNK_WORDS", chunk)
    rng = np.random.default_rng(chunk)
    for shape, dtype in [((6, 5, 7), "f4"), ((3, 70), "c16"), ((2, 3, 40), [("a", "<i4"), ("b", ">f8")]), ((4, 2), "S21")]:
        G = _random_global(shape, dtype, rng)
        want = mix64_reference(G.tobytes(order=order), G.dtype.itemsize)
        for views in _random_views(shape, rng):
            assert _shares(G, views, order, rng) == want


def test_scalar_and_empty_datasets():
    x = np.array(2.5)
    assert integrity.partial_mix64(x, (), (), "C") == mix64_reference(x.tobytes(), 8)
    assert integrity.partial_mix64(np.zeros((0, 3)), (np.arange(0), np.arange(3)), (0, 3), "C") == 0
    assert integrity.checksum_of_bytes(b"", "f8") == "0000000000000000"


def test_one_large_field_through_the_fast_path():
    """A 3-D block with ghosts (the bulk-write case) over more than one chunk per plane."""
    rng = np.random.default_rng(7)
    G = rng.random((20, 30, 1500)).astype("f4")
    want = mix64_reference(G.tobytes(), 4)
    views = [sdm.Block(grid=(2, 2, 1), ghosts=1)] * 4
    assert _shares(G, views, "C", rng) == want


# ----------------------------------------------------------------------------- what it detects


def _mix(a):
    return mix64_reference(np.ascontiguousarray(a).tobytes(), a.dtype.itemsize)


def test_constant_fields_and_zero_holes_all_differ():
    n = 1 << 16
    fields = {c: np.full(n, c, dtype="f8") for c in (0.0, 1.0, 2.0, 0.5, -7.0)}
    ours = {c: integrity.checksum_of_bytes(f.tobytes(), "f8") for c, f in fields.items()}
    assert len(set(ours.values())) == len(ours)
    assert {c: f"{_mix(f):016x}" for c, f in fields.items()} == ours
    # what sum64-v1 saw: every one of them sums to the value of a zero hole
    assert {integrity.checksum_of_bytes(f.tobytes(), "f8", "sum64-v1") for f in fields.values()} == {"0" * 16}
    f4 = {c: integrity.checksum_of_bytes(np.full(n, c, dtype="f4").tobytes(), "f4") for c in (0.0, 1.0, 2.0, 0.5, -7.0)}
    assert len(set(f4.values())) == len(f4)


@pytest.mark.parametrize("dtype", ["f8", "f4", "i4", "c16"])
def test_scaled_sign_flipped_swapped_and_zeroed_fields(dtype):
    rng = np.random.default_rng(3)
    G = (rng.standard_normal(1 << 14) * 100).astype(dtype)
    base = integrity.checksum_of_bytes(G.tobytes(), G.dtype)
    assert base == f"{_mix(G):016x}"
    swapped = G.copy()
    swapped[[100, 100 + 2048]] = swapped[[100 + 2048, 100]]
    one_sign = G.copy()
    one_sign[5000] = -one_sign[5000]
    damaged = {
        "scaled by 2": G * 2,
        "sign flipped": -G,
        "one sign flipped": one_sign,
        "swap 2048 apart": swapped,
        "zeroed": np.zeros_like(G),
        "rolled by one": np.roll(G, 1),
    }
    for what, H in damaged.items():
        assert integrity.checksum_of_bytes(H.astype(dtype).tobytes(), G.dtype) != base, what
        assert _mix(H.astype(dtype)) != _mix(G), what


@pytest.mark.parametrize("dtype", ["f8", "f4", "S3", [("a", "<i4"), ("b", ">f8")]], ids=str)
def test_every_single_bit_flip_is_detected(dtype):
    G = _random_global((40,), dtype, np.random.default_rng(11))
    raw = bytearray(G.tobytes())
    base = integrity.checksum_of_bytes(bytes(raw), G.dtype)
    seen = set()
    for bit in range(len(raw) * 8):
        raw[bit // 8] ^= 1 << (bit % 8)
        seen.add(integrity.checksum_of_bytes(bytes(raw), G.dtype))
        raw[bit // 8] ^= 1 << (bit % 8)
    assert base not in seen and len(seen) == len(raw) * 8


# ----------------------------------------------------------------------------- the documented formula


def test_the_docstring_formula_runs_as_printed():
    doc = integrity.__doc__
    head = "In numpy (array arithmetic on ``uint64`` wraps modulo ``2**64``)::\n"
    lines = []
    for line in doc.split(head, 1)[1].splitlines()[1:]:
        if line.strip() and not line.startswith("        "):
            break
        lines.append(line)
    ns: dict = {}
    exec(textwrap.dedent("\n".join(lines)), ns)
    rng = np.random.default_rng(5)
    for dtype in ["f8", "f4", ">c8", "S3", "?", [("a", "<i4"), ("b", ">f8")]]:
        G = _random_global((33, 5), dtype, rng)
        raw = G.tobytes()
        assert ns["mix64_v2"](raw, G.dtype.itemsize) == mix64_reference(raw, G.dtype.itemsize)
        assert f"{ns['mix64_v2'](raw, G.dtype.itemsize):016x}" == integrity.checksum_of_bytes(raw, G.dtype)


# ----------------------------------------------------------------------------- sum64-v1 and the API


@pytest.mark.parametrize("dtype", ["f8", "f4", "u1", "i2", "c16", ">f8", "S3"])
@pytest.mark.parametrize("order", ["C", "F"])
def test_sum64_v1_still_computed(dtype, order):
    rng = np.random.default_rng(2)
    G = _random_global((5, 4, 3), dtype, rng)
    raw = G.tobytes(order=order)
    want = sum64_reference(raw, G.dtype.itemsize)
    assert integrity.checksum_of_bytes(raw, G.dtype, "sum64-v1") == f"{want:016x}"
    assert integrity.sum64_of_bytes(raw, G.dtype.itemsize) == want
    for views in _random_views(G.shape, rng)[:3]:  # Block, Cyclic, BlockCyclic
        assert _shares(G, views, order, rng, "sum64-v1") == want


def test_unknown_algorithm_and_bad_input_are_refused():
    with pytest.raises(InvalidArgumentError, match=r"unknown checksum algorithm 'crc32'"):
        integrity.checksum_of_bytes(b"\0" * 8, "f8", "crc32")
    with pytest.raises(InvalidArgumentError, match="unknown checksum algorithm"):
        integrity.partial(np.zeros(2), [np.arange(2)], (2,), "C", "sum64-v3")
    with pytest.raises(InvalidArgumentError, match="not a whole number of float64 elements"):
        integrity.checksum_of_bytes(b"\0" * 12, "f8")
    with pytest.raises(InvalidArgumentError, match="not a numpy dtype"):
        integrity.checksum_of_bytes(b"", "nonsense")
    assert integrity.ALGORITHM == "mix64-v2" and integrity.ALGORITHMS == ("mix64-v2", "sum64-v1")


def test_a_memory_map_is_read_in_place(tmp_path):
    G = np.random.default_rng(1).random(100_000)
    path = tmp_path / "f.bin"
    path.write_bytes(b"x" * 24 + G.tobytes())
    mm = np.memmap(path, dtype=np.uint8, mode="r", offset=24, shape=(G.nbytes,))
    assert integrity.checksum_of_bytes(mm, "f8") == f"{mix64_reference(G.tobytes(), 8):016x}"


def test_hex_form():
    assert integrity.to_hex(255) == "00000000000000ff"
    assert integrity.to_hex(-1) == "ffffffffffffffff"


def test_indices_in_any_order(monkeypatch):
    """The share of a piece given with permuted indices (values permuted alike) is the same."""
    monkeypatch.setattr(integrity, "CHUNK_WORDS", 27)  # chunks of 3 rows: the first is 0, 5, 2
    rng = np.random.default_rng(9)
    G = rng.random((6, 9))
    p0, p1 = np.array([0, 5, 2, 1, 3, 4]), rng.permutation(9)  # 0..2 spans 3 positions but is no run
    want = mix64_reference(G.tobytes(), 8)
    assert integrity.partial_mix64(G[np.ix_(p0, p1)], (p0, p1), G.shape, "C") == want
    assert integrity.partial_mix64(G[np.ix_(p0, p1)], (p0, p1), G.shape, "F") == mix64_reference(G.tobytes(order="F"), 8)


def test_early_sum64_spelling_is_sum64_v1():
    raw = np.arange(10, dtype="f8").tobytes()
    assert integrity.canonical("sum64") == "sum64-v1"
    assert integrity.checksum_of_bytes(raw, "f8", "sum64") == integrity.checksum_of_bytes(raw, "f8", "sum64-v1")
