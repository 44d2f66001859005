"""Type conversion on write and read (numpy references, file bytes, exact errors).

Every numeric dtype pair numpy casts safely (both byte orders) is written from the
source dtype into a dataset of the other and read back; the file's bytes are compared
with numpy's own ``astype`` of the reference array, and reads with numpy's round trip.
Narrowing conversions whose values do not fit are refused with the same message on
every rank, leaving catalog and files as they were, unless ``casting=`` allows them.
"""

from __future__ import annotations

import hashlib
import warnings
from pathlib import Path

import numpy as np
import pytest
import sdm
from mpi4py import MPI

from _reference import block_indices, catalog_counts, committed_bytes, cyclic_indices

SHAPE = (9, 4)
NUMERIC = ["?", "i1", "u1", "<i2", ">i2", "<u2", "<i4", ">i4", "<u4", ">u4", "<i8", ">i8", "<u8", ">u8",
           "<f2", ">f2", "<f4", ">f4", "<f8", ">f8", "<c8", ">c8", "<c16", ">c16"]
SAFE = {dst: [src for src in NUMERIC if src != dst and np.can_cast(src, dst, "safe")] for dst in NUMERIC}
HINT = "pass casting='unsafe' to convert anyway (as numpy's astype does)"


def _name(dt: str) -> str:
    return dt.replace("<", "le").replace(">", "be").replace("?", "bool")


def _pair(src: str, dst: str) -> str:
    return f"{_name(src)}_to_{_name(dst)}"


def reference(dtype: str, shape=SHAPE, order="C") -> np.ndarray:
    """A global array of *dtype* whose values every dtype it casts to safely holds exactly (NaN, inf, -0 for floats)."""
    dt = np.dtype(dtype)
    k = np.arange(int(np.prod(shape)))
    if dt.kind == "b":
        values = (k % 3 == 1).astype(dt)
    elif dt.kind == "u":
        values = (k * 7 % 101).astype(dt)
    elif dt.kind == "i":
        values = (k * 7 % 101 - 50).astype(dt)
    else:
        values = ((k * 7 % 101 - 50) / 4).astype(dt)  # quarters: exact in float16
        values[:3] = [np.nan, -np.inf, -0.0]
        if dt.kind == "c":
            values += 1j * (k % 5).astype(dt)
    return values.reshape(shape, order=order)


def _view(name: str, size: int, rank: int):
    grid = tuple(MPI.Compute_dims(size, [0] * len(SHAPE)))
    if name == "block":
        return sdm.Block(ghosts=1), block_indices(SHAPE, grid, rank), 1
    if name == "cyclic":
        return sdm.BlockCyclic(blocks=2), cyclic_indices(SHAPE, grid, rank, 2), 0
    rows = np.arange(rank, SHAPE[0], size)[::-1].copy()
    return sdm.MapArray(rows), [rows, np.arange(SHAPE[1])], 0


def local(G: np.ndarray, view: str, idx, ghosts: int, order: str, ghost_value=None) -> np.ndarray:
    """This rank's local array of the global *G*: rows for maps, a box with ghost layers otherwise."""
    if view == "map":
        return np.ascontiguousarray(G[idx[0]])
    inner = G[np.ix_(*idx)]
    out = np.zeros(tuple(n + 2 * ghosts for n in inner.shape), dtype=G.dtype, order=order)  # type: ignore[call-overload]
    if ghost_value is not None:
        out[...] = ghost_value
    out[tuple(slice(ghosts, ghosts + n) for n in inner.shape)] = inner
    return out


def interior(arr: np.ndarray, ghosts: int) -> np.ndarray:
    return arr[tuple(slice(ghosts, n - ghosts) for n in arr.shape)]


def files_state(comm, root: Path) -> dict:
    """Rank 0: every file under *root* with its size and digest (the catalog included), shared."""
    state = None
    if comm.Get_rank() == 0:
        state = {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
                 for p in sorted(root.rglob("*")) if p.is_file()}
    return comm.bcast(state)


def numpy_cast(G: np.ndarray, dtype) -> np.ndarray:
    """numpy's own unsafe astype, its warnings silenced."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return G.astype(dtype)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("view, method, order", [("block", "collective", "C"), ("cyclic", "posix", "F"),
                                                  ("map", "exchange", "C")])
def test_every_safe_pair_round_trips(comm, mpi_tmp, view, method, order):
    """Each dtype a group; each dtype casting safely to it a dataset written from that dtype in one dump."""
    rank, size = comm.Get_rank(), comm.Get_size()
    if size > 4 and view != "block":  # every view at 1-4 ranks; at 8, the block view (the suite's time budget)
        pytest.skip("the cyclic and map views run at 1-4 ranks")
    dist, idx, ghosts = _view(view, size, rank)
    url = f"sqlite:///{mpi_tmp}/cat.db"
    G = {dt: reference(dt, order=order) for dt in NUMERIC}
    pairs = 0
    with sdm.open("convert", root=mpi_tmp, catalog=url, sync=False) as s:
        for dst, sources in SAFE.items():
            if not sources:
                continue
            g = s.make_group(_name(dst), [_pair(src, dst) for src in sources], dtype=dst, shape=SHAPE, order=order,
                             level=3, view=dist)
            g.write_step(0, {_pair(src, dst): local(G[src], view, idx, ghosts, order) for src in sources}, method=method)
            for src in sources:
                stored = g.read(_pair(src, dst), 0, method=method, verify=True)  # the stored dtype
                assert stored.dtype == np.dtype(dst)
                want = local(G[src].astype(dst), view, idx, ghosts, order)
                assert interior(stored, ghosts).tobytes() == interior(want, ghosts).tobytes(), (src, dst)
                back = g.read(_pair(src, dst), 0, dtype=src, verify=True)  # narrowing back: the values fit
                assert back.dtype == np.dtype(src)
                want = local(numpy_cast(G[src].astype(dst), src), view, idx, ghosts, order)
                assert back.tobytes() == want.tobytes(), (src, dst)
                pairs += 1
        run_id = s.run_id
    assert pairs == sum(len(v) for v in SAFE.values()) > 150
    files = committed_bytes(comm, url, run_id, mpi_tmp)
    for dst, sources in SAFE.items():
        for src in sources:
            assert files[(_pair(src, dst), 0)] == G[src].astype(dst).tobytes(order=order), (src, dst)


# (stored dtype, source dtype, a value that does not fit, the message's tail)
NARROWING = [
    ("<f4", "<f8", 1e300, "the value 1e+300 overflows float32 (it would become infinite)"),
    ("<f2", ">i4", 70000, "the value 70000 overflows float16 (it would become infinite)"),
    ("<i4", "<i8", 2 ** 40, "the value 1099511627776 is outside the range of int32 [-2147483648, 2147483647]"),
    ("<u2", "<i4", -1, "the value -1 is outside the range of uint16 [0, 65535]"),
    ("<i8", "<u8", 2 ** 63, "the value 9223372036854775808 is outside the range of int64 "
                            "[-9223372036854775808, 9223372036854775807]"),
    ("<i4", "<f8", np.nan, "the value nan is not finite, which int32 cannot hold"),
    ("<i2", "<f4", -np.inf, "the value -inf is not finite, which int16 cannot hold"),
    ("<i4", "<f8", 2.5, "the value 2.5 has a fractional part, which int32 cannot hold"),
    ("<u1", "<f8", 256.0, "the value 256.0 is outside the range of uint8 [0, 255]"),
    ("<f8", "<c16", 1 + 2j, "the value (1+2j) has a non-zero imaginary part, which float64 cannot hold"),
    ("?", "<i4", 2, "the value 2 is neither 0 nor 1, which bool cannot hold without losing it"),
]


def _describe(dt) -> str:
    dt = np.dtype(dt)
    return f"{dt.name} ({dt.str})"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("stored, source, bad, tail", NARROWING)
def test_narrowing_write_checks_values(comm, mpi_tmp, stored, source, bad, tail):
    """One value that does not fit, on the last rank: the same error everywhere, nothing written; casting allows it."""
    rank, size = comm.Get_rank(), comm.Get_size()
    last = size - 1
    dist, idx, ghosts = _view("block", size, rank)
    url = f"sqlite:///{mpi_tmp}/cat.db"
    G = reference("u1" if np.dtype(stored).kind != "b" else "?").astype(source)  # values every dtype here holds
    with sdm.open("narrow", root=mpi_tmp, catalog=url, sync=False) as s:
        g = s.make_group("g", ["x"], dtype=stored, shape=SHAPE, level=2, view=dist)
        # ghosts hold what does not fit either: never written, never checked
        good = local(G, "block", idx, ghosts, "C", ghost_value=bad)
        g.write("x", 0, good)
        assert g.read("x", 0, dtype=source).tobytes() == local(numpy_cast(numpy_cast(G, stored), source), "block", idx,
                                                               ghosts, "C").tobytes()
        arr = good.copy()
        if rank == last:
            arr[(ghosts,) * 2] = bad  # the first interior element
        Gbad = G.copy()
        Gbad[tuple(int(i[0]) for i in block_indices(SHAPE, tuple(MPI.Compute_dims(size, [0, 0])), last))] = bad
        before, files = catalog_counts(comm, url), files_state(comm, Path(mpi_tmp))
        message = (f"dataset 'x' stores {_describe(stored)} but the local array on rank {last} is "
                   f"{_describe(source)}: {tail}; {HINT}" + (f" [rank {last}]" if size > 1 else ""))
        with pytest.raises(sdm.ConversionError) as info:
            g.write("x", 1, arr)
        assert str(info.value) == message
        assert isinstance(info.value, ValueError) and isinstance(info.value, sdm.LocalArrayError)
        assert len(set(comm.allgather(str(info.value)))) == 1
        with pytest.raises(sdm.ConversionError) as info:  # the same in a dump of several datasets: none written
            g.write_step(1, {"x": arr})
        assert str(info.value) == message
        assert catalog_counts(comm, url) == before and files_state(comm, Path(mpi_tmp)) == files
        assert g.steps("x") == [0]
        g.write("x", 1, arr, casting="unsafe")  # allowed: numpy's astype
        got = g.read("x", 1, verify=True)
        assert interior(got, ghosts).tobytes() == local(numpy_cast(Gbad, stored), "block", idx, 0, "C").tobytes()
        run_id = s.run_id
    files_after = committed_bytes(comm, url, run_id, mpi_tmp)
    assert files_after[("x", 1)] == numpy_cast(Gbad, stored).tobytes()
    assert files_after[("x", 0)] == numpy_cast(G, stored).tobytes()


def test_casting_names(comm, mpi_tmp):
    """numpy's casting names: allowed exactly when numpy.can_cast, unchecked; others refused before any I/O."""
    rank, size = comm.Get_rank(), comm.Get_size()
    url = f"sqlite:///{mpi_tmp}/cat.db"
    G = reference("<f8")
    G[0, 3] = 1e300
    dist, idx, ghosts = _view("block", size, rank)
    with sdm.open("casting", root=mpi_tmp, catalog=url, sync=False) as s:
        g = s.make_group("g", ["x", "i"], dtype="<f4", shape=SHAPE, level=3, view=dist)
        arr = local(G, "block", idx, ghosts, "C")
        before = catalog_counts(comm, url)
        with pytest.raises(sdm.ConversionError) as info:
            g.write("x", 0, arr, casting="safe")
        assert str(info.value) == (f"dataset 'x' stores float32 (<f4) but the local array on rank 0 is float64 (<f8), "
                                   "which casting='safe' does not allow; pass casting=None to convert with the values "
                                   "checked, or casting='unsafe'" + (" [rank 0]" if size > 1 else ""))
        with pytest.raises(sdm.InvalidArgumentError) as info:
            g.write("x", 0, arr, casting="yes")
        assert str(info.value) == ("casting must be None (check the values) or one of ['no', 'equiv', 'safe', "
                                   "'same_kind', 'unsafe'], got 'yes'" + (" [rank 0]" if size > 1 else ""))
        assert catalog_counts(comm, url) == before and g.steps("x") == []
        g.write("x", 0, arr, casting="same_kind")  # numpy's same_kind: 1e300 becomes inf, as astype makes it
        assert g.read("x", 0, dtype="<f8", casting="safe").tobytes() == \
            local(numpy_cast(numpy_cast(G, "<f4"), "<f8"), "block", idx, ghosts, "C").tobytes()
        g.write("i", 0, local(numpy_cast(G, "<f4"), "block", idx, ghosts, "C"))
        with pytest.raises(sdm.ConversionError, match=r"read as int64 \(<i8\), which casting='same_kind' does not"):
            g.read("i", 0, dtype="<i8", casting="same_kind")
        run_id = s.run_id
    files = committed_bytes(comm, url, run_id, mpi_tmp)
    assert files[("x", 0)] == numpy_cast(G, "<f4").tobytes()


@pytest.mark.timeout(300)
def test_narrowing_read(comm, mpi_tmp):
    """A read into a narrower dtype checks the values read: the same error everywhere, out untouched."""
    rank, size = comm.Get_rank(), comm.Get_size()
    last = size - 1
    dist, idx, ghosts = _view("block", size, rank)
    url = f"sqlite:///{mpi_tmp}/cat.db"
    G = reference("<f8")
    hit = tuple(int(i[0]) for i in block_indices(SHAPE, tuple(MPI.Compute_dims(size, [0, 0])), last))
    G[hit] = 1e300
    with sdm.open("readnarrow", root=mpi_tmp, catalog=url, sync=False) as s:
        g = s.make_group("g", ["x"], dtype=">f8", shape=SHAPE, level=1, view=dist)
        g.write("x", 0, local(G, "block", idx, ghosts, "C"))
        out = np.full(g.local_shape("x"), 7, dtype="<f4")
        message = (f"dataset 'x' stores float64 (>f8) but out on rank {last} is float32 (<f4): the value 1e+300 "
                   f"overflows float32 (it would become infinite); {HINT}" + (f" [rank {last}]" if size > 1 else ""))
        with pytest.raises(sdm.ConversionError) as info:
            g.read("x", 0, out, verify=True)
        assert str(info.value) == message
        assert (out == 7).all()  # nothing set on any rank
        with pytest.raises(sdm.ConversionError, match=r"stores float64 \(>f8\), read as float32 \(<f4\): the value "
                                                      r"1e\+300 overflows"):
            g.read("x", 0, dtype="<f4")
        got = g.read("x", 0, out, casting="unsafe", verify=True)
        assert got is out
        assert interior(out, ghosts).tobytes() == numpy_cast(local(G, "block", idx, 0, "C"), "<f4").tobytes()
        assert (out[0] == 7).all() and (out[:, -1] == 7).all()  # ghosts untouched
        with pytest.raises(sdm.InvalidArgumentError, match=r"dtype int32 \(<i4\) differs from out's float32"):
            g.read("x", 0, out, dtype="<i4")
        if size > 1:  # every rank must read into the same dtype
            with pytest.raises(sdm.CollectiveMismatchError, match="different read calls"):
                g.read("x", 0, dtype="<f4" if rank == last else None, casting="unsafe")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("view, method", [("block", "sieving"), ("map", "exchange"), ("cyclic", "servers")])
def test_big_endian_stored_native_read(comm, mpi_tmp, view, method):
    """Stored big-endian, written from and read into native arrays (and a caller's buffer); file bytes big-endian."""
    rank, size = comm.Get_rank(), comm.Get_size()
    dist, idx, ghosts = _view(view, size, rank)
    url = f"sqlite:///{mpi_tmp}/cat.db"
    G = reference("=f8")
    Gi = reference("=i4") * 100
    with sdm.open("endian", root=mpi_tmp, catalog=url, sync=False) as s:
        g = s.make_group("g", [sdm.Dataset("f", dtype=">f8"), sdm.Dataset("i", dtype=">i4")], shape=SHAPE,
                         level=3, view=dist)
        g.write_step(0, {"f": local(G, view, idx, ghosts, "C"), "i": local(Gi, view, idx, ghosts, "C")},
                     method=method)
        native = g.read("f", 0, dtype="=f8", verify=True, method=method)
        assert native.dtype.isnative and native.tobytes() == local(G, view, idx, ghosts, "C").tobytes()
        stored = g.read("f", 0)
        assert stored.dtype == np.dtype(">f8")
        layout = "C" if view == "map" else "F"
        out = np.full(g.local_shape("i"), -9, dtype="=i2", order=layout)  # type: ignore[call-overload]
        g.read("i", 0, out, verify=True)  # int32 to int16, checked: the values fit
        want = local(Gi.astype("=i2"), view, idx, ghosts, layout, ghost_value=-9)
        assert out.tobytes(order="A") == want.tobytes(order="A")
        run_id = s.run_id
    files = committed_bytes(comm, url, run_id, mpi_tmp)
    assert files[("f", 0)] == G.astype(">f8").tobytes()
    assert files[("i", 0)] == Gi.astype(">i4").tobytes()
    # a plain reader on one rank: native from big-endian, whole
    with sdm.open("endian", "r", comm=MPI.COMM_SELF, catalog=url, run=run_id) as r:
        whole = r.group("g").read("f", 0, dtype="<f8", verify=True)
        assert whole.tobytes() == G.astype("<f8").tobytes()


def test_non_numeric_dtypes_convert_only_to_themselves(comm, mpi_tmp):
    """Strings change byte order only; structured dtypes need identical fields; numeric to string is refused."""
    rank, size = comm.Get_rank(), comm.Get_size()
    url = f"sqlite:///{mpi_tmp}/cat.db"
    n = 4 * size
    struct = np.dtype([("a", "<i4"), ("b", ">f8")])
    renamed = np.dtype([("a", "<i4"), ("c", ">f8")])
    with sdm.open("strings", root=mpi_tmp, catalog=url, sync=False) as s:
        g = s.make_group("g", [sdm.Dataset("u", dtype=">U2"), sdm.Dataset("r", dtype=struct),
                               sdm.Dataset("f", dtype="<f8")], shape=(n,), level=3)
        U = np.array([f"{k % 100:02d}" for k in range(n)], dtype="<U2")
        mine = slice(4 * rank, 4 * rank + 4)
        g.write("u", 0, U[mine])
        assert g.read("u", 0, dtype="<U2").tobytes() == U[mine].tobytes()
        before = catalog_counts(comm, url)
        R = np.zeros(4, dtype=renamed)
        with pytest.raises(sdm.ConversionError) as info:
            g.write("r", 0, R)
        assert str(info.value).startswith(f"dataset 'r' stores {struct} but the local array on rank 0 is {renamed}, "
                                          "which SDM does not convert: numeric dtypes")
        with pytest.raises(sdm.ConversionError, match=r"stores >U2 \(>U2\), read as float64 \(<f8\), which SDM does "
                                                      r"not convert"):
            g.read("u", 0, dtype="<f8")
        with pytest.raises(sdm.ConversionError, match=r"stores float64 \(<f8\) but the local array on rank 0 is <U2"):
            g.write("f", 0, U[mine])
        assert catalog_counts(comm, url) == before
        g.write("r", 0, np.zeros(4, dtype=struct))  # the identical structure
