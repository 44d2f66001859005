"""Decomposition-independent checksums of a dataset's bytes: ``mix64-v2`` (and ``sum64-v1``).

Every row of the catalog's ``writes`` table carries a checksum of the dataset's bytes
as they lie in the file (``checksum``, 16 hex digits) and the name of its algorithm
(``checksum_algo``).  Each rank computes a *share* over the elements it owns; the shares
of all ranks add up modulo ``2**64`` to the same number whatever the decomposition
(Block, Cyclic, BlockCyclic, Subarray, MapArray; C or Fortran order), so a parallel
write needs one exchange of integers, and anybody can recompute the checksum from the
file with numpy alone.

``mix64-v2`` (what SDM writes: :data:`ALGORITHM`)
    The dataset's canonical bytes (the ``nbytes`` bytes at the row's ``offset``: global
    C order, or Fortran order when the dataset says so) are cut into little-endian
    unsigned words of the largest size in (8, 4, 2, 1) bytes that divides the element
    size (``f8``, ``c16``, ``U2`` -> 8 bytes, ``f4`` -> 4, ``S3`` -> 1, whatever the byte
    order of the dtype).  Word ``w`` at word position ``p`` (its index in that stream,
    counted from 0) contributes ``fmix64(w XOR (p * K + S))`` and the checksum is the sum
    of the contributions modulo ``2**64``, with ``K = 0x9E3779B97F4A7C15`` (odd: the
    golden ratio), ``S = 0x243F6A8885A308D3`` (digits of pi) and ``fmix64`` MurmurHash3's
    64-bit finalizer.  In numpy (array arithmetic on ``uint64`` wraps modulo ``2**64``)::

        import numpy as np

        def mix64_v2(raw: bytes, itemsize: int) -> int:
            size = next(s for s in (8, 4, 2, 1) if itemsize % s == 0)
            w = np.frombuffer(raw, dtype=f"<u{size}").astype(np.uint64)  # the words
            p = np.arange(w.size, dtype=np.uint64)  # their positions
            x = w ^ (p * np.uint64(0x9E3779B97F4A7C15) + np.uint64(0x243F6A8885A308D3))
            x ^= x >> np.uint64(33)
            x *= np.uint64(0xFF51AFD7ED558CCD)
            x ^= x >> np.uint64(33)
            x *= np.uint64(0xC4CEB9FE1A85EC53)
            x ^= x >> np.uint64(33)
            return int(x.sum(dtype=np.uint64))

        # f"{mix64_v2(raw, itemsize):016x}" is what the catalog stores

    ``fmix64`` and the XOR with a position-dependent word are bijections of 64-bit
    words, so any change of a single word (one flipped bit, one changed value) always
    changes the checksum; every element is mixed non-linearly with its position, so
    constant fields (all 0.0, 1.0, 2.0, 0.5, -7.0 ...), a zeroed region, a field scaled
    by 2, flipped signs and swapped or shifted values change it too (except with
    probability about ``2**-64``).

``sum64-v1`` (written before; still verified)
    The same words, ``sum(w * (2*p + 1)) mod 2**64``.  It is linear in the data: the
    constant fields above, a field scaled by 2, sign flips and some swaps can sum to the
    same value, which is why it was replaced.  :func:`checksum_of_bytes` and
    :func:`piece_share` compute both.

``xxh3-64`` and ``xxh3-64-extents`` (subfiled datasets, :mod:`sdm.storage.subfiles`)
    A subfiled step is stored as extents, each a contiguous run of the canonical bytes
    held whole by one rank (its owner) before it is written, so each extent's checksum
    is xxHash's ``XXH3_64bits`` of its bytes (seed 0; the ``xxhash`` library, at memory
    speed), recorded with the extent as ``xxh3-64``.  The step's row carries
    ``xxh3-64-extents``: ``XXH3_64bits`` of the extents' checksums in order, each as 8
    little-endian bytes.  With the ``xxhash`` package and numpy::

        import numpy as np, xxhash

        def xxh3_extents(raw: bytes, cuts: list[int]) -> str:  # cuts: each extent's first byte
            ends = cuts[1:] + [len(raw)]
            digests = [xxhash.xxh3_64_intdigest(raw[a:b]) for a, b in zip(cuts, ends)]
            return f"{xxhash.xxh3_64_intdigest(np.array(digests, '<u8').tobytes()):016x}"

    It is not decomposition-independent: a reader checks it extent by extent (each
    extent read whole by one rank), which is how subfiled steps are read.

Cost: no pass over the data exists to piggy-back on (MPI-IO packs the bytes through
derived datatypes inside the library, and a contiguous piece is handed to it as is), so
the share is a separate pass over each rank's elements, in place (no gather, no copy).
It is computed by a compiled loop (:mod:`sdm._mix64_kernel`, numba, its machine code
cached on disk and run without the GIL), bit for bit the numpy code of
:func:`partial_mix64`: about 5.5 GB/s of f8 (4.5 of f4) per core of CPU time on a shared
2-core Xeon (AVX-512), 3-5x numpy's 1-2 GB/s and about what a copy moves there (5-6
GB/s).  Loading it costs a process about 0.45 s of CPU (importing numba, reading the
cached code), the time numpy takes for about 0.7 GB, so by default (``$SDM_CHECKSUM_KERNEL`` unset or ``auto``) a
process hashes its first :data:`COMPILED_AFTER` bytes (512 MiB) with numpy and loads the
compiled loop then: a short run pays at most about twice the cheaper of the two.
``SDM_CHECKSUM_KERNEL=numba`` loads it at the first share, ``numpy`` never; without
numba, or where numba can keep no compiled code (a read-only install and no writable
cache directory), numpy computes every share.  A write computes the share of a large
piece in a worker thread while MPI-IO moves the bytes and the file is synced, where the
node has a core to spare: on a disk the share hides behind the device; on a memory file
system with 4 ranks on 2 cores (and a load of 7-8 from other work), 4 f8 fields of
192^3 at 2 steps, the compiled share took 15 % (12-20 %) of the write's time and the
write 1.16x (0.68-1.22x) the time without checksum, against 36 % and 1.48x with numpy
(``benchmarks/checksum.py``, ``benchmarks/results/checksum.md``).
"""

from __future__ import annotations

import math
import os
import threading
from itertools import product
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from .errors import InvalidArgumentError

if TYPE_CHECKING:
    from .layout.distribution import Piece

__all__ = [
    "ALGORITHM",
    "MIX64",
    "LEGACY_ALGORITHM",
    "ALGORITHMS",
    "XXH3",
    "EXTENTS",
    "CHUNK_WORDS",
    "KERNEL_ENV",
    "COMPILED_AFTER",
    "kernel_for",
    "xxh3",
    "extents_checksum",
    "canonical",
    "word_size",
    "piece_share",
    "partial",
    "partial_mix64",
    "partial_sum64",
    "checksum_of_bytes",
    "sum64_of_bytes",
    "combine",
    "to_hex",
]

MIX64 = "mix64-v2"
LEGACY_ALGORITHM = "sum64-v1"
XXH3 = "xxh3-64"  #: an extent's checksum (subfiles)
EXTENTS = "xxh3-64-extents"  #: a subfiled step's checksum: XXH3 of its extents' XXH3 digests
ALGORITHMS = (MIX64, LEGACY_ALGORITHM)  # decomposition-independent: computed from any rank's piece
ALGORITHM = MIX64  # what SDM writes (a benchmark may set it to LEGACY_ALGORITHM to compare)
_ALIASES = {"sum64": LEGACY_ALGORITHM}  # an early spelling of sum64-v1
CHUNK_WORDS = 32768  # words per chunk: a few 256 KiB buffers stay in the L2 cache

KERNEL_ENV = "SDM_CHECKSUM_KERNEL"  #: numba, numpy or auto (the default): see kernel_for
COMPILED_AFTER = 1 << 29  #: bytes a process hashes with numpy before it loads the compiled loop (auto)
_hashed_with_numpy = 0
_compiled_kernel: list[Any] | None = []  # [] not tried yet, [module] loaded, None not loadable here
_kernel_lock = threading.Lock()

from ._mix64 import _C1, _C2, _K, _MASK, _R, _SEED, _U64


def kernel_for(nbytes: int, kernel: str | None = None) -> Any:
    """The compiled ``mix64-v2`` loop (module :mod:`sdm._mix64_kernel`) to hash *nbytes* with, or None for numpy.

    *kernel* (default ``$SDM_CHECKSUM_KERNEL``, else ``auto``): ``numpy`` never loads
    the compiled loop; ``numba`` loads it now; ``auto`` (or any other value) loads it
    once this process has hashed :data:`COMPILED_AFTER` bytes with numpy, counting
    *nbytes*: loading costs about what numpy takes for that many bytes, so a short run
    never pays more than twice the cheaper of the two.  None where numba is absent or
    can keep no compiled code (see :mod:`sdm._mix64_kernel`).

    Raises
    ------
    InvalidArgumentError
        For a *kernel* argument other than ``"numba"``, ``"numpy"`` and None.
    """
    global _hashed_with_numpy
    if kernel not in (None, "numba", "numpy"):
        raise InvalidArgumentError(f"checksum kernel must be 'numba' or 'numpy', got {kernel!r}")
    choice = kernel or os.environ.get(KERNEL_ENV, "auto").strip().lower()
    if choice == "numpy" or _compiled_kernel is None:
        return None
    if _compiled_kernel:
        return _compiled_kernel[0]
    with _kernel_lock:
        if choice != "numba" and _hashed_with_numpy + nbytes < COMPILED_AFTER:
            _hashed_with_numpy += nbytes
            return None
        return _load_kernel()


def _load_kernel() -> Any:
    """Import :mod:`sdm._mix64_kernel` once (None, and never again, where it cannot be)."""
    global _compiled_kernel
    if _compiled_kernel == []:
        try:
            from . import _mix64_kernel
        except ImportError:
            _compiled_kernel = None
            return None
        _compiled_kernel = [_mix64_kernel]
    return _compiled_kernel[0] if _compiled_kernel else None


def word_size(itemsize: int) -> int:
    """Size in bytes of the checksum words for elements of *itemsize* bytes."""
    for w in (8, 4, 2, 1):
        if itemsize % w == 0:
            return w
    return 1


def canonical(algorithm: str) -> str:
    """The algorithm a row's ``checksum_algo`` names (``"sum64"`` is ``sum64-v1``).

    Raises
    ------
    InvalidArgumentError
        For an algorithm this SDM does not compute.
    """
    name = _ALIASES.get(algorithm, algorithm) if isinstance(algorithm, str) else algorithm
    if name not in ALGORITHMS:
        raise InvalidArgumentError(
            f"unknown checksum algorithm {algorithm!r}; this SDM computes {', '.join(map(repr, ALGORITHMS))}"
        )
    return name


# ----------------------------------------------------------------------------- shares


def piece_share(piece: "Piece", array: np.ndarray, order: str, algorithm: str = MIX64) -> int:
    """This rank's share of the checksum of the elements its *piece* owns in *array*.

    Parameters
    ----------
    piece : sdm.layout.Piece
        The rank's piece of the dataset.
    array : numpy.ndarray
        The local array (ghost layers or ghost rows included).
    order : {"C", "F"}
        Storage order of the dataset.
    algorithm : str
        One of :data:`ALGORITHMS`.

    Returns
    -------
    int
        The share in ``[0, 2**64)``; :func:`combine` the shares of all ranks.

    Raises
    ------
    InvalidArgumentError
        For an unknown *algorithm*.
    """
    algorithm = canonical(algorithm)
    if algorithm == MIX64 and piece.kind == "map" and order == "C" and piece.memory_rows is not None:
        # gather the owned rows chunk by chunk instead of copying them all first
        return partial_mix64(array, piece.indices, piece.shape, order, rows=piece.memory_rows, increasing=True)
    if algorithm == MIX64:  # a piece's indices increase (sdm.layout)
        return partial_mix64(piece.owned_values(array), piece.indices, piece.shape, order, increasing=True)
    return partial_sum64(piece.owned_values(array), piece.indices, piece.shape, order)


#: Bytes of a piece up to which :func:`piece_shares` computes the shares of several arrays in one pass
BATCHED_BYTES = 1 << 20


def piece_shares(piece: "Piece", arrays: Sequence[np.ndarray], order: str) -> list[int]:
    """The ``mix64-v2`` shares of several local arrays of one *piece* (same dtype and storage order), in one pass.

    A dump of many small datasets of one shape and view pays the fixed cost of a share
    (index arithmetic, a dozen numpy calls) once instead of once per dataset: the owned
    elements of the arrays are stacked, the position terms ``p * K + S`` of the piece's
    words computed once and applied to every row of the stack.  The same numbers as
    :func:`piece_share` of each array (the tests compare them).

    Raises
    ------
    InvalidArgumentError
        Arrays of different dtypes, or an *order* other than ``"C"`` and ``"F"``.
    """
    if not arrays:
        return []
    if order not in ("C", "F"):
        raise InvalidArgumentError(f"storage order must be 'C' or 'F', got {order!r}")
    dtype = arrays[0].dtype
    if any(a.dtype != dtype for a in arrays):
        raise InvalidArgumentError("piece_shares needs arrays of one dtype")
    if not piece.shape:  # a scalar dataset: one element each (numpy hands it over as a native scalar)
        return [piece_share(piece, a, order) for a in arrays]
    shape = tuple(int(n) for n in piece.shape)
    indices = [np.asarray(i, dtype=np.int64) for i in piece.indices]
    counts = [len(i) for i in indices]
    if 0 in counts or dtype.itemsize == 0:
        return [0] * len(arrays)
    owned = np.empty((len(arrays), *counts), dtype=dtype)  # (arrays, *counts), the stored byte order kept
    for row, a in zip(owned, arrays):
        row[...] = np.reshape(piece.owned_values(a), counts)
    if order == "F":  # the canonical order's fastest axis last
        owned = owned.transpose(0, *range(len(counts), 0, -1))
        indices, shape = indices[::-1], shape[::-1]
    item = dtype.itemsize
    wsize = word_size(item)
    k = item // wsize
    gstrides = _global_strides(shape)
    position = np.zeros(counts[::-1] if order == "F" else counts, dtype=_U64)  # each owned element's position
    for d, idx in enumerate(indices):
        at = [1] * len(indices)
        at[d] = len(idx)
        position += (idx.astype(_U64) * _U64(gstrides[d])).reshape(at)
    terms = ((position.reshape(-1, 1) * _U64(k) + np.arange(k, dtype=_U64)) * _U64(_K) + _U64(_SEED)).reshape(-1)
    words = np.ascontiguousarray(owned).reshape(len(arrays), -1).view(f"<u{wsize}").astype(_U64)
    np.bitwise_xor(words, terms[None, :], out=words)
    _mix_inplace(words, np.empty_like(words))
    return [int(x) for x in words.sum(axis=1, dtype=_U64)]


def partial(
    values: np.ndarray, indices: Sequence[np.ndarray], shape: Sequence[int], order: str, algorithm: str = MIX64
) -> int:
    """This rank's share of the checksum of a separable piece (see :func:`partial_mix64`)."""
    algorithm = canonical(algorithm)
    if algorithm == MIX64:
        return partial_mix64(values, indices, shape, order)
    return partial_sum64(values, indices, shape, order)


def _global_strides(shape: Sequence[int]) -> list[int]:
    """C-order element strides of *shape*."""
    strides = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        strides[d] = strides[d + 1] * int(shape[d + 1])
    return strides


def _mix_inplace(x: np.ndarray, t: np.ndarray) -> None:
    """``x = fmix64(x)`` in place; *t* is scratch of the same shape."""
    np.right_shift(x, _R, out=t)
    np.bitwise_xor(x, t, out=x)
    np.multiply(x, _C1, out=x)
    np.right_shift(x, _R, out=t)
    np.bitwise_xor(x, t, out=x)
    np.multiply(x, _C2, out=x)
    np.right_shift(x, _R, out=t)
    np.bitwise_xor(x, t, out=x)


def partial_mix64(
    values: np.ndarray,
    indices: Sequence[np.ndarray],
    shape: Sequence[int],
    order: str,
    *,
    rows: np.ndarray | None = None,
    increasing: bool | None = None,
    kernel: str | None = None,
) -> int:
    """This rank's share of the ``mix64-v2`` checksum of a separable piece.

    Parameters
    ----------
    values : numpy.ndarray
        The rank's owned elements, shape ``len(i) for i in indices`` (any strides), or,
        with *rows*, a local array whose row ``rows[i]`` holds global row ``indices[0][i]``.
    indices : sequence of numpy.ndarray
        Global index of each local position, per dimension (any order; SDM's pieces
        have them increasing, which takes the fast path).
    shape : sequence of int
        Global shape.
    order : {"C", "F"}
        Storage order of the dataset.
    rows : numpy.ndarray, optional
        Local rows of the owned elements (map pieces, C order only).
    increasing : bool, optional
        Whether every ``indices[d]`` is strictly increasing (as in SDM's pieces); checked
        when not given.
    kernel : {"numba", "numpy"}, optional
        Who computes the share (the same number): by default the compiled loop of
        :mod:`sdm._mix64_kernel` where it is loaded, else numpy (see :func:`kernel_for`).

    Returns
    -------
    int
        The share in ``[0, 2**64)``.

    Raises
    ------
    InvalidArgumentError
        For an *order* other than ``"C"`` and ``"F"``, or an unknown *kernel*.
    """
    ndim = len(shape)
    if ndim == 0:  # a scalar dataset: one element at position 0
        values, indices, shape, ndim = np.reshape(values, (1,)), (range(1),), (1,), 1  # type: ignore[assignment]
    if order not in ("C", "F"):
        raise InvalidArgumentError(f"storage order must be 'C' or 'F', got {order!r}")
    counts = [len(i) for i in indices]
    if 0 in counts or values.dtype.itemsize == 0:
        return 0
    compiled = kernel_for(math.prod(counts) * values.dtype.itemsize, kernel)
    if compiled is not None:
        share = compiled.mix64_share(values, indices, shape, order, rows, increasing)
        if share is not None:
            return int(share)
    return _partial_mix64_numpy(values, indices, shape, order, rows=rows, increasing=increasing)


def _partial_mix64_numpy(
    values: np.ndarray,
    indices: Sequence[np.ndarray],
    shape: Sequence[int],
    order: str,
    *,
    rows: np.ndarray | None = None,
    increasing: bool | None = None,
) -> int:
    """:func:`partial_mix64` in numpy (the reference the compiled loop is tested against).

    Notes
    -----
    The owned elements are visited in chunks of about :data:`CHUNK_WORDS` words along
    one split axis; the term ``p * K + S`` of each word is the sum of a per-chunk part
    (the split axis and the axes before it) and a part of the axes after it, computed
    once, so a chunk costs one broadcast addition, the XOR with the words, ``fmix64``
    (eight in-place operations) and a sum, all in cache.
    """
    ndim = len(shape)
    dtype = values.dtype
    counts = [len(i) for i in indices]
    if ndim == 0:  # a scalar dataset: one element at position 0
        values, indices, shape, counts = np.reshape(values, (1,)), (np.zeros(1, np.int64),), (1,), [1]
        ndim = 1
    if 0 in counts or dtype.itemsize == 0:
        return 0
    if order == "F":
        if rows is not None:
            values, rows = values[rows], None
        values = values.T
        indices, shape, counts = indices[::-1], tuple(shape)[::-1], counts[::-1]
    elif order != "C":
        raise InvalidArgumentError(f"storage order must be 'C' or 'F', got {order!r}")
    item = dtype.itemsize
    wsize = word_size(item)
    k = item // wsize
    wdtype = np.dtype(f"<u{wsize}")
    gstrides = _global_strides(shape)
    weight = [(gstrides[d] * k * _K) & _MASK for d in range(ndim)]  # (p*K) per unit of g_d

    # split axis: the first one whose trailing elements fit in a chunk
    a = next((d for d in range(ndim) if math.prod(counts[d + 1 :]) * k <= CHUNK_WORDS), ndim - 1)
    inner = math.prod(counts[a + 1 :]) * k  # words per index of the split axis
    tail = (np.arange(k, dtype=_U64) * _U64(_K)) + _U64(_SEED)  # word offset within an element + S
    for d in range(ndim - 1, a, -1):
        tail = (np.asarray(indices[d]).astype(_U64) * _U64(weight[d]))[:, None] + tail[None, :]
        tail = tail.reshape(-1)
    step = max(1, min(CHUNK_WORDS // inner, counts[a]))  # no larger than the split axis: small pieces stay cheap
    ramp = (np.arange(step, dtype=_U64) * _U64(weight[a]))[:, None] + tail[None, :]  # a contiguous run of axis a
    x = np.empty(step * inner, dtype=_U64)
    t = np.empty_like(x)
    buf = np.empty((step, *counts[a + 1 :]), dtype=dtype)
    ia = indices[a]
    if increasing is None:  # then equal ends mean a contiguous run
        increasing = isinstance(ia, range) or bool(np.all(np.diff(ia) > 0))
    total = 0
    for outer in product(*(range(c) for c in counts[:a])):
        base = sum(int(indices[d][o]) * weight[d] for d, o in enumerate(outer)) & _MASK
        if rows is not None and a > 0:
            lead: tuple[Any, ...] = (int(rows[outer[0]]), *outer[1:])
        else:
            lead = outer
        for r0 in range(0, counts[a], step):
            r1 = min(counts[a], r0 + step)
            m = r1 - r0
            if rows is not None and a == 0:
                sub = np.take(values, rows[r0:r1], axis=0, out=buf[:m])
            else:
                sub = values[lead + (slice(r0, r1),)]
            try:  # reinterpret in place where the strides allow it (any strides for one word per element)
                words = sub.view(wdtype)
            except ValueError:
                np.copyto(buf[:m], sub)
                words = buf[:m].view(wdtype)
            xv = x[: m * inner].reshape(m, inner)
            tv = t[: m * inner].reshape(m, inner)
            g0 = int(ia[r0])
            if increasing and int(ia[r1 - 1]) - g0 == m - 1:
                np.add(ramp[:m], _U64((base + g0 * weight[a]) & _MASK), out=xv)
            else:
                gb = np.asarray(ia[r0:r1]).astype(_U64) * _U64(weight[a])
                if base:
                    gb += _U64(base)
                np.add(gb[:, None], tail[None, :], out=xv)
            xw = xv.reshape(words.shape)
            if wsize < 8:  # widen first: a same-type XOR is cheaper than a mixed-type one
                tw = tv.reshape(words.shape)
                np.copyto(tw, words)
                np.bitwise_xor(xw, tw, out=xw)
            else:
                np.bitwise_xor(xw, words, out=xw)
            _mix_inplace(xv, tv)
            total += int(xv.sum(dtype=_U64))
    return total & _MASK


def _words(values: np.ndarray) -> tuple[np.ndarray, int]:
    """View *values* as unsigned little-endian words, with a trailing axis of k words."""
    item = values.dtype.itemsize
    w = word_size(item)
    k = item // w
    raw = np.ascontiguousarray(values).view(np.dtype(f"<u{w}"))
    return raw.reshape(values.shape + (k,)), k


def partial_sum64(values: np.ndarray, indices: Sequence[np.ndarray], shape: Sequence[int], order: str) -> int:
    """This rank's share of the legacy ``sum64-v1`` checksum of a separable piece.

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


# ----------------------------------------------------------------------------- whole datasets


def checksum_of_bytes(raw: Any, dtype: Any, algorithm: str = MIX64) -> str:
    """The checksum of a whole dataset from its canonical bytes, as the catalog stores it.

    What a verifier does with the ``nbytes`` bytes at a row's ``offset`` (``bytes``, a
    ``memoryview`` or a ``numpy.memmap`` of ``uint8``; read chunk by chunk, so a memory
    map of a large file is never copied whole).

    Parameters
    ----------
    raw : bytes-like or numpy.ndarray
        The dataset's bytes in storage order.
    dtype : numpy dtype or str
        The dataset's element type (only its size matters): a dtype, or the catalog's
        text of one (a structured dtype's is its field list, :func:`sdm.dtypes.dtype_text`).
    algorithm : str
        The row's ``checksum_algo``: one of :data:`ALGORITHMS`, or an extent's :data:`XXH3`.

    Returns
    -------
    str
        16 hex digits.

    Raises
    ------
    InvalidArgumentError
        Unknown algorithm, bad dtype, or a byte count that is not a whole number of elements.
    """
    if algorithm == XXH3:  # an extent's checksum (subfiles): its bytes as they are
        return to_hex(xxh3(np.frombuffer(raw, dtype=np.uint8) if not isinstance(raw, np.ndarray) else raw))
    algorithm = canonical(algorithm)
    from .dtypes import from_text

    try:
        dt = from_text(dtype) if isinstance(dtype, str) else np.dtype(dtype)
    except (TypeError, ValueError, SyntaxError) as exc:
        raise InvalidArgumentError(f"checksum dtype {dtype!r} is not a numpy dtype: {exc}") from None
    if dt.itemsize == 0:
        raise InvalidArgumentError(f"checksum dtype {dt} has no bytes")
    data = np.frombuffer(raw, dtype=np.uint8) if not isinstance(raw, np.ndarray) else raw.reshape(-1).view(np.uint8)
    if data.size % dt.itemsize:
        raise InvalidArgumentError(f"{data.size} bytes are not a whole number of {dt} elements ({dt.itemsize} bytes)")
    w = word_size(dt.itemsize)
    words = data.view(np.dtype(f"<u{w}"))
    if algorithm == LEGACY_ALGORITHM:
        return to_hex(_sum64_words(words))
    return to_hex(partial_mix64(words, (range(words.size),), (words.size,), "C"))  # type: ignore[arg-type]


def _sum64_words(words: np.ndarray) -> int:
    total = 0
    for s in range(0, words.size, CHUNK_WORDS):
        chunk = words[s : s + CHUNK_WORDS].astype(_U64)
        pos = np.arange(2 * s + 1, 2 * (s + chunk.size) + 1, 2, dtype=_U64)
        total += int(np.dot(chunk, pos))  # uint64 dot products wrap
    return total & _MASK


def sum64_of_bytes(raw: bytes | np.ndarray, itemsize: int) -> int:
    """The legacy ``sum64-v1`` checksum of a whole dataset from its canonical bytes."""
    w = word_size(itemsize)
    data = np.frombuffer(raw, dtype=np.uint8) if not isinstance(raw, np.ndarray) else raw.reshape(-1).view(np.uint8)
    return _sum64_words(data.view(np.dtype(f"<u{w}")))


def xxh3(data: Any) -> int:
    """``XXH3_64bits`` (seed 0) of a contiguous buffer (bytes-like or a C-contiguous numpy array), as an int.

    Raises
    ------
    InvalidArgumentError
        *data* is a numpy array that is not contiguous.
    """
    import xxhash

    if isinstance(data, np.ndarray):
        if not (data.flags.c_contiguous or data.flags.f_contiguous):
            raise InvalidArgumentError("an extent's checksum needs its bytes contiguous in memory")
        data = data.reshape(-1, order="A").view(np.uint8)
    return int(xxhash.xxh3_64_intdigest(memoryview(data).cast("B")))


def extents_checksum(digests: Sequence[int]) -> str:
    """A subfiled step's checksum (``xxh3-64-extents``) from its extents' digests, in order."""
    return to_hex(xxh3(np.asarray([int(d) & _MASK for d in digests], dtype="<u8").tobytes()))


def combine(partials: Sequence[int]) -> int:
    """Add partial sums modulo ``2**64``."""
    return sum(partials) & _MASK


def to_hex(value: int) -> str:
    """16-digit hex form stored in the catalog."""
    return f"{value & _MASK:016x}"

