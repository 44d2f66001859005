"""The sum64 checksum: decomposition independent, equal to the whole-file formula."""

from __future__ import annotations

import numpy as np
import pytest
import sdm
from sdm import integrity


def _reference(G, order):
    """The documented formula, written out with numpy on the canonical bytes."""
    raw = np.asarray(G).tobytes(order=order)
    w = integrity.word_size(G.dtype.itemsize)
    words = np.frombuffer(raw, dtype=f"<u{w}").astype(np.uint64)
    pos = np.arange(words.size, dtype=np.uint64)
    return int((words * (2 * pos + 1)).sum(dtype=np.uint64))


@pytest.mark.parametrize("dtype", ["f8", "f4", "u1", "i2", "c16", ">f8"])
@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("dist, nprocs", [(sdm.Block(), 3), (sdm.Cyclic(), 4), (sdm.BlockCyclic(blocks=2), 2)])
def test_partials_add_up_to_whole(dtype, order, dist, nprocs):
    shape = (5, 4, 3)
    G = (np.arange(60) * 7 + 3).astype(dtype).reshape(shape)
    parts = []
    for rank in range(nprocs):
        p = dist.piece(shape, nprocs, rank)
        parts.append(integrity.partial_sum64(G[np.ix_(*p.indices)], p.indices, shape, order))
    whole = integrity.combine(parts)
    assert whole == _reference(G, order)
    assert whole == integrity.sum64_of_bytes(G.tobytes(order=order), G.dtype.itemsize)


def test_any_changed_or_moved_value_changes_the_sum():
    G = np.arange(24, dtype="f8").reshape(4, 6)
    base = _reference(G, "C")
    H = G.copy()
    H[1, 2] += 1e-9
    assert _reference(H, "C") != base
    S = G.copy()
    S[0, 0], S[3, 5] = S[3, 5], S[0, 0]
    assert _reference(S, "C") != base


def test_hex_form():
    assert integrity.to_hex(255) == "00000000000000ff"
    assert integrity.to_hex(-1) == "ffffffffffffffff"
