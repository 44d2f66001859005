"""The compiled ``mix64-v2`` loop (``sdm._mix64_kernel``) against numpy, bit for bit.

Every share is computed twice, by the compiled loop and by the numpy code of
``sdm.integrity`` (``kernel=`` or ``$SDM_CHECKSUM_KERNEL``), and the shares of a
decomposition are also checked against ``mix64_reference`` of ``test_integrity.py``
(numpy from first principles on the file's bytes): every word size (1, 2, 4, 8 bytes,
and elements of several words), every distribution ``piece_share`` handles (Block with
ghosts, Cyclic, BlockCyclic, Subarray, MapArray), C and Fortran storage and local arrays
of either layout, empty pieces, strided, reversed, unaligned and read-only memory.
Then when the compiled loop is used (``auto``), and that SDM computes with numpy where
numba is absent or can keep no compiled code, and never imports numba with ``import sdm``.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import sdm
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sdm import integrity
from sdm.errors import InvalidArgumentError
from test_integrity import _local, _random_global, _random_views, mix64_reference

pytest.importorskip("numba")
from sdm import _mix64_kernel  # noqa: E402  (after the skip)

SRC = Path(integrity.__file__).resolve().parents[1]
# word sizes 1, 2, 4, 8 and elements of 2, 3 and 4 words, byte orders and records included
DTYPES = ["u1", "S3", "i2", ">f2", "f4", ">u4", "U3", "f8", ">i8", "c16", "S16",
          [("a", "<i4"), ("b", ">f8")], [("x", "u1"), ("y", "<f2")]]


@contextlib.contextmanager
def kernel(name):
    """``$SDM_CHECKSUM_KERNEL`` set to *name* inside the block."""
    old = os.environ.get(integrity.KERNEL_ENV)
    os.environ[integrity.KERNEL_ENV] = name
    try:
        yield
    finally:
        if old is None:
            del os.environ[integrity.KERNEL_ENV]
        else:
            os.environ[integrity.KERNEL_ENV] = old


def both(values, indices, shape, order, **kw):
    """The share by the compiled loop and by numpy; the compiled loop must have taken it."""
    assert _mix64_kernel.mix64_share(values, indices, shape, order, kw.get("rows"), kw.get("increasing")) is not None
    return (integrity.partial_mix64(values, indices, shape, order, kernel="numba", **kw),
            integrity.partial_mix64(values, indices, shape, order, kernel="numpy", **kw))


# ----------------------------------------------------------------------------- pieces of every distribution


@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(shape=st.lists(st.integers(2, 9), min_size=1, max_size=4).map(tuple), dtype=st.sampled_from(DTYPES),
       order=st.sampled_from("CF"), seed=st.integers(0, 2**32 - 1))
def test_every_distribution_and_word_size_equals_numpy_and_the_reference(shape, dtype, order, seed):
    rng = np.random.default_rng(seed)
    G = _random_global(shape, dtype, rng)
    want = mix64_reference(G.tobytes(order=order), G.dtype.itemsize)
    for views in _random_views(shape, rng):  # Block, Cyclic, BlockCyclic, Subarray, MapArray
        shares = {}
        for name in ("numba", "numpy"):
            with kernel(name):
                parts = []
                for rank, dist in enumerate(views):
                    piece = dist.piece(shape, len(views), rank)
                    local = _local(G, piece, order, np.random.default_rng(rank))
                    parts.append(integrity.piece_share(piece, local, order))
                shares[name] = parts
        assert shares["numba"] == shares["numpy"], (shape, dtype, order, views[0])
        assert integrity.combine(shares["numba"]) == want


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_whole_files_of_every_word_size(dtype):
    rng = np.random.default_rng(4)
    for n in (1, 2, 7, 1000, 4099):
        raw = _random_global((n,), dtype, rng).tobytes()
        with kernel("numba"):
            ours = integrity.checksum_of_bytes(raw, dtype)
        assert ours == f"{mix64_reference(raw, np.dtype(dtype).itemsize):016x}"


# ----------------------------------------------------------------------------- memory of any shape


def _views(A):
    """Non-contiguous views of *A*: strided, reversed, transposed, Fortran, a ghosted interior."""
    ghosted = np.zeros(tuple(s + 3 for s in A.shape), dtype=A.dtype)
    ghosted[tuple(slice(1, 1 + s) for s in A.shape)] = A
    wide = np.zeros(tuple(2 * s for s in A.shape), dtype=A.dtype)
    wide[tuple(slice(None, None, 2) for _ in A.shape)] = A
    return {
        "contiguous": A,
        "fortran": np.asfortranarray(A),
        "ghosted": ghosted[tuple(slice(1, 1 + s) for s in A.shape)],
        "every other": wide[tuple(slice(None, None, 2) for _ in A.shape)],
        "reversed": A[tuple(slice(None, None, -1) for _ in A.shape)].copy()[tuple(slice(None, None, -1) for _ in A.shape)],
        "reversed view": np.ascontiguousarray(A[::-1])[::-1],
    }


@pytest.mark.parametrize("dtype", ["u1", "i2", "f4", "f8", "c16", "S3"], ids=str)
@pytest.mark.parametrize("order", ["C", "F"])
def test_non_contiguous_memory_equals_numpy(dtype, order):
    rng = np.random.default_rng(8)
    A = _random_global((5, 6, 7), dtype, rng)
    shape = (9, 6, 12)
    idx = (np.arange(2, 7), np.arange(6), np.array([0, 2, 3, 5, 8, 9, 11]))
    for what, V in _views(A).items():
        assert np.array_equal(V, A)
        new, old = both(V, idx, shape, order, increasing=True)
        assert new == old, what
    # the reference: a dense dataset's share is the checksum of its bytes
    dense = (np.arange(5), np.arange(6), np.arange(7))
    for what, V in _views(A).items():
        assert both(V, dense, A.shape, order)[0] == mix64_reference(A.tobytes(order=order), A.dtype.itemsize), what


def test_unaligned_read_only_and_packed_records():
    rng = np.random.default_rng(12)
    G = rng.random(513)
    buf = np.zeros(G.nbytes + 1, np.uint8)
    buf[1:] = G.view(np.uint8)
    unaligned = buf[1:].view("f8")
    assert not unaligned.flags.aligned
    frozen = np.frombuffer(G.tobytes(), "f8")
    assert not frozen.flags.writeable
    want = mix64_reference(G.tobytes(), 8)
    for V in (unaligned, frozen):
        assert both(V, (range(V.size),), (V.size,), "C", increasing=True) == (want, want)
    # a field of a packed record: its stride (12 bytes) is no whole number of 8-byte words
    rec = np.zeros(40, dtype=[("a", "<i4"), ("b", "<f8")])
    rec["b"] = rng.random(40)
    field = rec["b"]
    assert _mix64_kernel.mix64_share(field, (np.arange(40),), (40,), "C", None, True) is None
    assert integrity.partial_mix64(field, (np.arange(40),), (40,), "C", kernel="numba") == mix64_reference(
        field.tobytes(), 8)


def test_empty_pieces_and_scalars():
    for kern in ("numba", "numpy"):
        assert integrity.partial_mix64(np.zeros((0, 3)), (np.arange(0), np.arange(3)), (4, 3), "C", kernel=kern) == 0
        assert integrity.partial_mix64(np.zeros((2, 0), "c16"), (np.arange(2), np.arange(0)), (2, 5), "F",
                                       kernel=kern) == 0
        x = np.array(-3.25)
        assert integrity.partial_mix64(x, (), (), "C", kernel=kern) == mix64_reference(x.tobytes(), 8)
    assert integrity.checksum_of_bytes(b"", "f4") == "0" * 16


@pytest.mark.parametrize("rows_per_call", [1, 5, 64])
def test_rows_in_blocks_indices_in_any_order_and_map_rows(monkeypatch, rows_per_call):
    """Small blocks of rows walk the outer axes one by one; permuted indices and gathered rows."""
    monkeypatch.setattr(_mix64_kernel, "ROWS_PER_CALL", rows_per_call)
    rng = np.random.default_rng(rows_per_call)
    G = _random_global((6, 5, 9), "f4", rng)
    for order in "CF":
        want = mix64_reference(G.tobytes(order=order), 4)
        dense = tuple(np.arange(s) for s in G.shape)
        assert both(G, dense, G.shape, order) == (want, want)
        perm = tuple(rng.permutation(s) for s in G.shape)  # no index steps evenly
        assert both(G[np.ix_(*perm)], perm, G.shape, order) == (want, want)
        # a map piece: the owned global rows 0..5 lie in local rows `rows` of a larger array, ghosts between
        rows = np.array([7, 0, 3, 5, 1, 2])
        local = _random_global((8, 5, 9), "f4", rng).copy()
        local[rows] = G
        assert both(local, dense, G.shape, order, rows=rows, increasing=True) == (want, want)


def test_a_large_block_with_ghosts():
    """The bulk case: a 3-D block with ghosts, larger than a block of rows."""
    rng = np.random.default_rng(21)
    G = rng.random((24, 40, 66))
    want = mix64_reference(G.tobytes(), 8)
    with kernel("numba"):
        shares = [integrity.piece_share(p, _local(G, p, "C", rng), "C")
                  for p in (sdm.Block(grid=(2, 2, 1), ghosts=2).piece(G.shape, 4, r) for r in range(4))]
    assert integrity.combine(shares) == want


# ----------------------------------------------------------------------------- when the compiled loop is used


def test_auto_loads_the_compiled_loop_after_enough_bytes(monkeypatch):
    monkeypatch.setattr(integrity, "_compiled_kernel", [])
    monkeypatch.setattr(integrity, "_hashed_with_numpy", 0)
    monkeypatch.setattr(integrity, "COMPILED_AFTER", 1000)
    monkeypatch.delenv(integrity.KERNEL_ENV, raising=False)
    assert integrity.kernel_for(600) is None
    assert integrity.kernel_for(300) is None  # 900 bytes so far
    assert integrity.kernel_for(100) is _mix64_kernel  # 1000: loaded
    assert integrity.kernel_for(1) is _mix64_kernel
    assert integrity.kernel_for(1, "numpy") is None
    monkeypatch.setenv(integrity.KERNEL_ENV, "numpy")
    assert integrity.kernel_for(1 << 40) is None
    monkeypatch.setattr(integrity, "_compiled_kernel", [])
    monkeypatch.setenv(integrity.KERNEL_ENV, "numba")
    assert integrity.kernel_for(1) is _mix64_kernel
    with pytest.raises(InvalidArgumentError, match=r"checksum kernel must be 'numba' or 'numpy', got 'c'"):
        integrity.partial_mix64(np.zeros(2), (np.arange(2),), (2,), "C", kernel="c")


def test_without_numba_numpy_computes_the_same(monkeypatch):
    monkeypatch.setattr(integrity, "_compiled_kernel", [])
    monkeypatch.setitem(sys.modules, "numba", None)  # import numba raises ImportError
    monkeypatch.delitem(sys.modules, "sdm._mix64_kernel")
    monkeypatch.delattr(sdm, "_mix64_kernel")
    G = np.random.default_rng(2).random((7, 9))
    assert integrity.kernel_for(1 << 40, "numba") is None
    assert integrity._compiled_kernel is None  # not tried again
    assert integrity.partial_mix64(G, (np.arange(7), np.arange(9)), G.shape, "C", kernel="numba") == \
        mix64_reference(G.tobytes(), 8)


def _python(code, env_extra, cwd):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NUMBA_", "SDM_"))}
    env.update(env_extra)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=120)


def test_no_writable_cache_directory_falls_back_to_numpy(tmp_path):
    """A read-only install with no writable cache directory: numba can keep no code, numpy computes."""
    pkg = tmp_path / "install"
    (pkg / "sdm").mkdir(parents=True)
    for f in ("__init__.py", "integrity.py", "errors.py", "_mix64.py", "_mix64_kernel.py"):
        (pkg / "sdm" / f).write_bytes((SRC / "sdm" / f).read_bytes())
    (pkg / "sdm" / "__init__.py").write_text("")  # the two modules alone, not the whole package
    (pkg / "sdm" / "__pycache__").write_text("a file: no cache directory can be made here")
    code = """
        import sys, numpy as np
        from sdm import integrity
        G = np.arange(1000, dtype="f8")
        print(integrity.kernel_for(1, "numba"), integrity.partial_mix64(G, (range(1000),), (1000,), "C", kernel="numba"))
        try:
            import sdm._mix64_kernel
        except ImportError as exc:
            print(str(exc).startswith("numba can keep no compiled code here: cannot cache function"))
    """
    res = _python(code, {"PYTHONPATH": str(pkg), "NUMBA_CACHE_DIR": "/dev/null/numba",
                         "XDG_CACHE_HOME": "/dev/null/cache", "HOME": "/dev/null", "PYTHONDONTWRITEBYTECODE": "1"},
                  tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["None", str(mix64_reference(np.arange(1000, dtype="f8").tobytes(), 8)), "True"]


def test_import_sdm_does_not_import_numba(tmp_path):
    res = _python("import sys, sdm; print('numba' in sys.modules, 'sdm._mix64_kernel' in sys.modules)",
                  {"PYTHONPATH": str(SRC)}, tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["False", "False"]
