"""A decomposition-independent checksum of a dataset's bytes: ``sum64``.

Each rank sums over its own elements and the partial sums add up (mod 2**64) to the
same number whatever the decomposition, so SDM computes it during a parallel write
with one reduction and anybody can recompute it from the file with numpy alone::

    w = np.frombuffer(raw_bytes, dtype="<u8").astype(np.uint64)   # 8-byte words
    pos = np.arange(w.size, dtype=np.uint64)
    checksum = int((w * (2 * pos + 1)).sum())   # numpy wraps modulo 2**64

The array's bytes are cut into little-endian unsigned words of the largest size in
(8, 4, 2, 1) bytes that divides the element size; ``pos`` is the word's index in the
dataset's canonical (storage-order) byte stream.  Every word is weighted by a distinct
odd number, so any single changed word, and any move of a value to another position,
changes the sum.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["ALGORITHM", "word_size", "partial_sum64", "sum64_of_bytes", "combine", "to_hex"]

ALGORITHM = "sum64-v1"
_MASK = (1 << 64) - 1


def word_size(itemsize: int) -> int:
    """Size in bytes of the checksum words for elements of *itemsize* bytes."""
    for w in (8, 4, 2, 1):
        if itemsize % w == 0:
            return w
    return 1


def _words(values: np.ndarray) -> tuple[np.ndarray, int]:
    """View *values* as unsigned little-endian words, with a trailing axis of k words."""
    item = values.dtype.itemsize
    w = word_size(item)
    k = item // w
    raw = np.ascontiguousarray(values).view(np.dtype(f"<u{w}"))
    return raw.reshape(values.shape + (k,)), k


def partial_sum64(values: np.ndarray, indices: Sequence[np.ndarray], shape: Sequence[int], order: str) -> int:
    """This rank's share of the checksum of a separable piece.

    Parameters
    ----------
    values : numpy.ndarray
        The rank's interior elements, shape ``len(i) for i in indices``.
    indices : sequence of numpy.ndarray
        Global index of each local position, per dimension.
    shape : sequence of int
        Global shape.
    order : {"C", "F"}
        Storage order of the dataset.

    Returns
    -------
    int
        Partial sum in ``[0, 2**64)``; add the partials of all ranks modulo ``2**64``.

    Notes
    -----
    ``sum w * (2*pos + 1) = 2 * sum(w * pos) + sum(w)`` with ``pos = k * elem + j`` and
    ``elem = sum_d g_d * stride_d``, so only the marginal sums of the words along each
    dimension are needed: two passes over the data (summing into uint64 without a
    converted copy), the rest on the much smaller marginals.
    """
    if values.size == 0:
        return 0
    words, k = _words(values)
    ndim = len(shape)
    gstrides = [1] * ndim
    dims = range(ndim - 2, -1, -1) if order == "C" else range(1, ndim)
    for d in dims:
        nb = d + 1 if order == "C" else d - 1
        gstrides[d] = gstrides[nb] * int(shape[nb])
    u64 = np.uint64
    # pass 1: collapse the word axis and the last array axis -> marginal base
    if ndim:
        base = words.sum(axis=(-2, -1), dtype=u64)  # shape counts[:-1]
        last = words.sum(axis=tuple(range(ndim - 1)) + (ndim,), dtype=u64)  # pass 2
    else:
        base, last = words.sum(axis=-1, dtype=u64), None
    marginals = [base.sum(axis=tuple(a for a in range(ndim - 1) if a != d), dtype=u64) for d in range(ndim - 1)]
    if ndim:
        marginals.append(last)
    total = 0
    for d in range(ndim):
        weights = indices[d].astype(u64) * u64(gstrides[d] * k)
        total += int(np.dot(marginals[d], weights))
    if k > 1:
        per_word = words.reshape(-1, k).sum(axis=0, dtype=u64)
        total += int(np.dot(per_word, np.arange(k, dtype=u64)))
    wsum = int(base.sum(dtype=u64)) if ndim else int(base)
    return (2 * total + wsum) & _MASK


def sum64_of_bytes(raw: bytes | np.ndarray, itemsize: int) -> int:
    """Checksum of a whole dataset from its canonical bytes (what a verifier does)."""
    w = word_size(itemsize)
    words = np.frombuffer(raw, dtype=np.dtype(f"<u{w}")).astype(np.uint64)
    pos = np.arange(words.size, dtype=np.uint64)
    return int((words * (np.uint64(2) * pos + np.uint64(1))).sum(dtype=np.uint64))


def combine(partials: Sequence[int]) -> int:
    """Add partial sums modulo ``2**64``."""
    return sum(partials) & _MASK


def to_hex(value: int) -> str:
    """16-digit hex form stored in the catalog."""
    return f"{value & _MASK:016x}"


def checksum_of_bytes(raw: bytes | np.ndarray, dtype: object, algorithm: str) -> str:
    """The checksum of a whole dataset from its canonical bytes, as stored (16 hex digits).

    Raises
    ------
    InvalidArgumentError
        For an algorithm this SDM does not know.
    """
    from .errors import InvalidArgumentError

    if algorithm in (ALGORITHM, "sum64"):
        return to_hex(sum64_of_bytes(np.frombuffer(raw, dtype=np.uint8), np.dtype(dtype).itemsize))
    raise InvalidArgumentError(f"unknown checksum algorithm {algorithm!r}; this SDM knows {ALGORITHM!r}")
