"""The shares of several arrays of one piece computed in one pass (``integrity.piece_shares``).

They must be the numbers ``piece_share`` gives for each array (every distribution, dtype,
byte order and storage order), and, for a piece that is the whole dataset, the checksum of
the dataset's canonical bytes computed from the definition with numpy alone.
"""

from __future__ import annotations

import numpy as np
import pytest

from sdm import integrity
from sdm.errors import InvalidArgumentError
from sdm.layout import Block, BlockCyclic, Cyclic, MapArray

DISTS = [(Block, {}, (7, 5, 3)), (Cyclic, {}, (7, 5, 3)), (BlockCyclic, {"blocks": 2}, (9, 4)),
         (Block, {"ghosts": 1}, (6, 5)), (Block, {}, (512,))]


def mix64(raw: bytes, itemsize: int) -> int:
    """mix64-v2 from its definition (the module docstring of sdm.integrity)."""
    size = next(s for s in (8, 4, 2, 1) if itemsize % s == 0)
    w = np.frombuffer(raw, dtype=f"<u{size}").astype(np.uint64)
    x = w ^ (np.arange(w.size, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(0x243F6A8885A308D3))
    for m in (0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53):
        x = (x ^ (x >> np.uint64(33))) * np.uint64(m)
    return int((x ^ (x >> np.uint64(33))).sum(dtype=np.uint64))


@pytest.mark.parametrize("dist,kw,shape", DISTS)
@pytest.mark.parametrize("dtype", ["<f8", ">i4", "u1", "<c16", ">f4"])
@pytest.mark.parametrize("order", ["C", "F"])
def test_one_pass_equals_each_share(dist, kw, shape, dtype, order):
    if order == "F" and len(shape) < 2:
        pytest.skip("one dimension: the same as C")
    rng = np.random.default_rng(7)
    for size in (1, 2, 3, 4):
        for rank in range(size):
            piece = dist(**kw).piece(shape, size, rank)
            arrays = [rng.integers(0, 250, size=piece.memory_shape).astype(dtype) for _ in range(3)]
            if order == "F":
                arrays = [np.asfortranarray(a) for a in arrays]
            assert integrity.piece_shares(piece, arrays, order) == [integrity.piece_share(piece, a, order)
                                                                     for a in arrays]


@pytest.mark.parametrize("dtype", ["<f8", ">i4", "u1"])
def test_whole_dataset_share_is_the_checksum_of_its_bytes(dtype):
    shape = (6, 4, 3)
    piece = Block().piece(shape, 1, 0)
    arrays = [np.arange(72).reshape(shape).astype(dtype) * (k + 1) for k in range(4)]
    assert integrity.piece_shares(piece, arrays, "C") == [mix64(a.tobytes(), a.dtype.itemsize) for a in arrays]
    assert integrity.piece_shares(piece, [np.asfortranarray(a) for a in arrays], "F") == [
        mix64(a.tobytes(order="F"), a.dtype.itemsize) for a in arrays]


def test_map_rows_in_any_order_and_empty_and_refusals():
    rng = np.random.default_rng(3)
    piece = MapArray(np.array([9, 2, 5])).piece((11, 3), 1, 0)
    arrays = [rng.random((3, 3)).astype("<f4") for _ in range(4)]
    assert integrity.piece_shares(piece, arrays, "C") == [integrity.piece_share(piece, a, "C") for a in arrays]
    empty = Block().piece((1,), 4, 3)  # rank 3 of 4 owns nothing of one element
    assert integrity.piece_shares(empty, [np.zeros(0), np.zeros(0)], "C") == [0, 0]
    assert integrity.piece_shares(empty, [], "C") == []
    with pytest.raises(InvalidArgumentError, match="one dtype"):
        integrity.piece_shares(piece, [arrays[0], arrays[1].astype("<f8")], "C")
    with pytest.raises(InvalidArgumentError, match="storage order must be 'C' or 'F', got 'X'"):
        integrity.piece_shares(piece, arrays, "X")
