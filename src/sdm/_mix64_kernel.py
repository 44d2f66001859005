"""The ``mix64-v2`` share computed by a compiled loop (numba), bit for bit what numpy computes.

Imported only by :mod:`sdm.integrity`, and only once a process has data enough to pay
for it (importing numba and loading the cached machine code costs about half a second
of CPU): see :func:`sdm.integrity.partial_mix64`.  Importing this module raises
:class:`ImportError` where numba is absent or where it can keep no compiled code
(``cache=True`` finds no writable directory: neither beside this file, nor
``$NUMBA_CACHE_DIR``, nor the user's cache directory), so that every process does not
compile the loop again; :mod:`sdm.integrity` then computes the share with numpy.

The owned elements are walked straight in the caller's memory (no gather, no copy):
the dimensions are split into one *inner* axis, the regular axis with the smallest
memory stride, visited by the compiled loop, and the *rows*, every combination of the
other indices, whose memory offsets and position terms numpy lays out in blocks of at
most :data:`ROWS_PER_CALL`.  The word at ``flat[off[r] + c * step + j]`` (row ``r``,
inner index ``c``, word ``j`` of the element) gets the term
``row_term[r] + col(c) + word_term[j]`` where ``col(c)`` is ``c * col_inc`` when the
inner axis's global indices step evenly (Block, Cyclic, a contiguous stream) and
``col_term[c]`` otherwise: the position term ``p * K + S`` of the module docstring of
:mod:`sdm.integrity`, split by axis (all arithmetic on ``uint64`` wraps modulo ``2**64``).
"""

from __future__ import annotations

import math
from typing import Any, Iterator, NamedTuple, Sequence

import numpy as np

try:
    import numba
except Exception as exc:  # noqa: BLE001 - numba absent or broken: numpy computes the share
    raise ImportError(f"numba is not usable: {exc}") from exc

__all__ = ["ROWS_PER_CALL", "mix64_share"]

ROWS_PER_CALL = 1 << 14  #: rows (runs of the inner axis) per call of the compiled loop: bounds numpy's arrays
from ._mix64 import _C1, _C2, _K, _MASK, _R, _SEED, _U64  # the algorithm's constants, defined once


def _mix_runs_py(flat: Any, row_off: Any, row_term: Any, n: int, step: int, col_term: Any, col_inc: Any,
                 word_term: Any) -> Any:  # pragma: no cover - compiled by numba below
    """Sum of ``fmix64(word XOR term)`` over ``rows x n x len(word_term)`` words of *flat*."""
    k = word_term.size
    ramp = col_term.size == 0
    total = np.uint64(0)
    for r in range(row_off.size):
        o = row_off[r]
        t = row_term[r]
        if k == 1 and step == 1 and ramp:  # a contiguous run stepping evenly: the bulk case
            run = flat[o:o + n]  # a slice: indices known in bounds, the loop vectorises
            for c in range(n):
                x = np.uint64(run[c]) ^ t
                t += col_inc
                x ^= x >> _R
                x *= _C1
                x ^= x >> _R
                x *= _C2
                x ^= x >> _R
                total += x
        elif k == 1 and step == 1:
            run = flat[o:o + n]
            for c in range(n):
                x = np.uint64(run[c]) ^ (t + col_term[c])
                x ^= x >> _R
                x *= _C1
                x ^= x >> _R
                x *= _C2
                x ^= x >> _R
                total += x
        else:
            for c in range(n):
                if ramp:
                    tc = t + col_inc * np.uint64(c)
                else:
                    tc = t + col_term[c]
                b = o + c * step
                for j in range(k):
                    x = np.uint64(flat[b + j]) ^ (tc + word_term[j])
                    x ^= x >> _R
                    x *= _C1
                    x ^= x >> _R
                    x *= _C2
                    x ^= x >> _R
                    total += x
    return total


try:  # compiled on first use for each word type, then kept on disk for the next processes
    _mix_runs = numba.njit(nogil=True, cache=True)(_mix_runs_py)
except RuntimeError as exc:  # "cannot cache function ...: no locator available": read-only install, no cache dir
    raise ImportError(f"numba can keep no compiled code here: {exc}") from exc


class _Span:
    """An ``__array_interface__`` over raw memory, kept alive with the array it lies in."""

    def __init__(self, owner: np.ndarray, address: int, words: int, dtype: np.dtype) -> None:
        self.base = owner
        self.__array_interface__ = {"data": (address, True), "shape": (words,), "typestr": dtype.str,
                                    "version": 3}


def _ramp_step(idx: Any, increasing: bool | None) -> int | None:
    """``d`` when ``idx[c] == idx[0] + c * d`` for every ``c`` (an array or a range), else None."""
    n = len(idx)
    if n < 2:
        return 0
    if isinstance(idx, range):
        return idx.step
    first, last = int(idx[0]), int(idx[-1])
    if increasing and last - first == n - 1:  # strictly increasing with these ends: a contiguous run
        return 1
    d = int(idx[1]) - first
    if last - first != d * (n - 1):
        return None
    diffs = np.diff(np.asarray(idx, dtype=np.int64))
    return d if bool(np.all(diffs == d)) else None


def mix64_share(values: np.ndarray, indices: Sequence[Any], shape: Sequence[int], order: str,
                rows: np.ndarray | None, increasing: bool | None) -> int | None:
    """The ``mix64-v2`` share of a separable piece (the arguments of :func:`sdm.integrity.partial_mix64`).

    Returns None where the compiled loop cannot walk the memory (a stride that is not a
    whole number of words: an element of a packed record array): numpy does it then.
    *values* has at least one dimension and no empty one; *order* is ``"C"`` or ``"F"``.
    """
    item = values.dtype.itemsize
    wsize = next(s for s in (8, 4, 2, 1) if item % s == 0)
    strides = list(values.strides)
    if any(s % wsize for s in strides):
        return None
    ndim = len(shape)
    counts = [len(i) for i in indices]
    # memory positions along each axis: 0..count-1, or the local rows of a map piece's owned rows
    gathered = rows is not None
    mem: list[Any] = [range(c) for c in counts]  # materialised for the outer axes only
    if rows is not None:
        mem[0] = np.asarray(rows, dtype=np.int64)
    gstrides = [1] * ndim
    for d in range(ndim - 2, -1, -1) if order == "C" else range(1, ndim):
        nb = d + 1 if order == "C" else d - 1
        gstrides[d] = gstrides[nb] * int(shape[nb])
    k = item // wsize
    weight = [(g * k * _K) & _MASK for g in gstrides]  # p * K per unit of the global index
    # the inner axis: a regular one (not gathered rows) with the smallest stride and more than one index
    regular = [d for d in range(ndim) if not (gathered and d == 0) and counts[d] > 1]
    inner = min(regular, key=lambda d: abs(strides[d])) if regular else None
    outer = sorted((d for d in range(ndim) if d != inner), key=lambda d: -abs(strides[d]))
    # byte offsets from the lowest owned address, so that every offset is >= 0
    ends = [(int(m.min()) * s, int(m.max()) * s) if gathered and d == 0 else (0, (len(m) - 1) * s)
            for d, (m, s) in enumerate(zip(mem, strides))]
    low = sum(min(e) for e in ends)
    high = sum(max(e) for e in ends) + item
    address = int(values.__array_interface__["data"][0]) + low
    flat = np.asarray(_Span(values, address, (high - low) // wsize, np.dtype(f"<u{wsize}")))
    flat.flags.writeable = False  # one compiled variant per word type, whatever the caller's flags
    if inner is None:  # every axis is a row axis: runs of one element
        run = _Run(1, 0, np.zeros(0, _U64), 0, np.arange(k, dtype=_U64) * _U64(_K), 0)
    else:
        run = _inner_run(indices[inner], increasing, weight[inner], strides[inner], item, k)
    total = 0
    for row_off, row_term in _row_blocks([np.asarray(mem[d], dtype=np.int64) * strides[d] for d in outer],
                                         [np.asarray(indices[d], dtype=np.int64).astype(_U64) * _U64(weight[d])
                                          for d in outer],
                                         -low, (_SEED + run.base) & _MASK):
        total += int(_mix_runs(flat, row_off // wsize, row_term, run.n, run.step // wsize, run.col_term,
                               _U64(run.col_inc), run.word_term))
    return total & _MASK


class _Run(NamedTuple):
    """How the compiled loop walks one row: *n* steps of *step* bytes, each *k* words (``word_term``)."""

    n: int
    step: int  # bytes
    col_term: np.ndarray  # the term of each step, or empty: step c adds c * col_inc
    col_inc: int
    word_term: np.ndarray  # the term of each word of a step
    base: int  # the term of step 0, added to every row's


def _inner_run(idx: Any, increasing: bool | None, weight: int, stride: int, item: int, k: int) -> _Run:
    """The walk along the inner axis (global indices *idx*, *stride* bytes apart in memory)."""
    n = len(idx)
    g0 = int(idx[0])
    d = _ramp_step(idx, increasing)
    word_term = np.arange(k, dtype=_U64) * _U64(_K)
    if d is not None:
        col_term, col_inc = np.zeros(0, _U64), (d * weight) & _MASK
    else:
        col_term, col_inc = (np.asarray(idx, dtype=np.int64) - g0).astype(_U64) * _U64(weight), 0
    if k > 1 and stride == item:  # elements side by side: one run of n * k words
        if d is not None and col_inc == (k * _K) & _MASK:
            col_term, col_inc = np.zeros(0, _U64), _K  # consecutive positions: each word steps by K
        else:
            steps = col_term if d is None else np.arange(n, dtype=_U64) * _U64(col_inc)
            col_term, col_inc = (steps[:, None] + word_term[None, :]).reshape(-1), 0
        n, stride, word_term = n * k, item // k, np.zeros(1, _U64)
    return _Run(n, stride, col_term, col_inc, word_term, (g0 * weight) & _MASK)


def _row_blocks(offs: list[np.ndarray], terms: list[np.ndarray], shift: int,
                base: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Byte offsets and terms of every row (each combination of the outer axes' *offs* and
    *terms*, plus *shift* and *base*), in blocks of at most about :data:`ROWS_PER_CALL`."""
    if not offs:
        yield np.array([shift], np.int64), np.array([base], _U64)
        return
    sizes = [len(o) for o in offs]
    # the first outer axes are walked here, one by one; the rest are laid out at once
    a = next(i for i in range(len(sizes)) if math.prod(sizes[i + 1:]) <= ROWS_PER_CALL)
    rest_off, rest_term = np.zeros(1, np.int64), np.zeros(1, _U64)
    for o, t in zip(offs[a + 1:], terms[a + 1:]):
        rest_off = (rest_off[:, None] + o[None, :]).reshape(-1)
        rest_term = (rest_term[:, None] + t[None, :]).reshape(-1)
    block = max(1, ROWS_PER_CALL // rest_off.size)
    for lead in np.ndindex(*sizes[:a]):
        lead_off = shift + sum(int(offs[i][j]) for i, j in enumerate(lead))
        lead_term = _U64((base + sum(int(terms[i][j]) for i, j in enumerate(lead))) & _MASK)
        for r0 in range(0, sizes[a], block):
            a_off = offs[a][r0:r0 + block] + lead_off
            a_term = terms[a][r0:r0 + block] + lead_term
            yield (a_off[:, None] + rest_off[None, :]).reshape(-1), (a_term[:, None] + rest_term[None, :]).reshape(-1)
