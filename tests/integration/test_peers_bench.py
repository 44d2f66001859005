"""The contenders of ``benchmarks/peers.py`` on the project's own MPI (the peer stack itself is built by
``make peers``, outside the tests): SDM and raw MPI-IO write every pattern at 1-4 ranks, and the bytes on
disk equal arrays built independently with numpy; the one-process box reads and the attribute scan agree
with the geometry; bad command lines are refused with their exact message and write nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
STACK = REPO / "benchmarks" / "peer_stack"
sys.path.insert(0, str(STACK))
import geometry as geo  # noqa: E402

MPIEXEC = Path(sys.executable).parent / "mpiexec"
SIZES = {"a": {"n": 12, "vars": 2, "steps": 2}, "b": {"rows": 96, "cols": 2048, "br": 8, "bc": 256, "steps": 2},
         "c": {"rows": 700, "width": 3, "steps": 2}, "d": {"count": 5, "length": 37, "steps": 3}}


def worker(nprocs: int, **args: object) -> subprocess.CompletedProcess:
    """``mpiexec -n nprocs python -m mpi4py peer_python.py key=value...``."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    cmd = [str(MPIEXEC), "-n", str(nprocs), sys.executable, "-m", "mpi4py", str(STACK / "peer_python.py"),
           *(f"{k}={v}" for k, v in args.items())]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, stdin=subprocess.DEVNULL)


def report(done: subprocess.CompletedProcess) -> dict:
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def expected(pattern: str, p: dict[str, int]) -> dict[tuple[int, int], np.ndarray]:
    """Every (step, variable) of the pattern as the global array, from the value formula alone."""
    shape = {"a": (p.get("n", 0),) * 3, "b": (p.get("rows", 0), p.get("cols", 0)),
             "c": (p.get("rows", 0), p.get("width", 0)), "d": (p.get("length", 0),)}[pattern]
    nvars = {"a": p.get("vars", 1), "d": p.get("count", 1)}.get(pattern, 1)
    size = int(np.prod(shape))
    return {(s, v): (float((s * 1024 + v) << 32) + np.arange(size, dtype=np.float64)).reshape(shape)
            for s in range(p["steps"]) for v in range(nvars)}


def names(pattern: str, nvars: int) -> list[str]:
    return [f"a{v}" for v in range(nvars)] if pattern == "a" else \
        [f"d{v:03d}" for v in range(nvars)] if pattern == "d" else [pattern]


def raw_file_order(pattern: str, arrays: dict[tuple[int, int], np.ndarray]) -> np.ndarray:
    """The raw contender's file: step-major, variable-minor, each variable's global array in C order."""
    return np.concatenate([arrays[k].ravel() for k in sorted(arrays)])


def sdm_arrays(where: Path, pattern: str) -> dict[tuple[int, int], np.ndarray]:
    """What the SDM catalog says was written, read with numpy.memmap at the catalog's offsets."""
    from sdm.catalog import Catalog

    cat = Catalog(f"sqlite:///{where / 'catalog.db'}", create=False)
    try:
        out = {}
        for _, dname, w in cat.writes(1):
            v = 0 if dname in ("b", "c") else int(dname[1:])
            out[w.step, v] = np.array(np.memmap(where / w.path, dtype="<f8", mode="r", offset=w.offset,
                                                shape=(w.nbytes // 8,)))
        return out
    finally:
        cat.close()


def maps_for(tmp_path: Path, nprocs: int) -> str:
    for r, part in enumerate(geo.make_map(SIZES["c"]["rows"], nprocs)):
        part.astype("<i8").tofile(geo.map_path(tmp_path / "map", nprocs, r))
    return str(tmp_path / "map")


def test_map_deals_every_row_once_in_chunks_of_1_to_32() -> None:
    for nprocs in (1, 3, 4):
        parts = geo.make_map(10_000, nprocs)
        rows = np.concatenate(parts)
        assert np.array_equal(np.sort(rows), np.arange(10_000))
        for part in parts:
            if part.size:
                breaks = np.flatnonzero(np.diff(part) != 1)
                lengths = np.diff(np.concatenate([[0], breaks + 1, [part.size]]))
                assert lengths.max() <= 64  # two chunks may happen to be adjacent, never three of 32
    assert geo.scan_expected(1000) == sum(1 for i in range(0, 1000, 3) if 100 + i * 37 % 1000 > 800)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("nprocs", [1, 2, 3, 4])
def test_every_pattern_writes_the_numpy_bytes(tmp_path: Path, nprocs: int) -> None:
    for pattern, p in SIZES.items():
        args = dict(p, map=maps_for(tmp_path, nprocs)) if pattern == "c" else dict(p)
        want = expected(pattern, p)
        for contender in ("mpiio", "sdm"):
            where = tmp_path / f"{pattern}-{contender}-{nprocs}"
            where.mkdir()
            w = report(worker(nprocs, contender=contender, op="write", pattern=pattern, dir=where, **args))
            assert w["bytes"] == geo.PATTERNS[pattern].nbytes(p) and w["files"] >= 1
            assert report(worker(nprocs, contender=contender, op="check", pattern=pattern, dir=where,
                                 **args))["mismatches"] == 0
            if contender == "mpiio":
                got = np.fromfile(where / "out.raw", dtype="<f8")
                assert np.array_equal(got, raw_file_order(pattern, want)), (pattern, nprocs)
            else:
                got_sdm = sdm_arrays(where, pattern)
                assert sorted(got_sdm) == sorted(want)
                for k, a in want.items():
                    assert np.array_equal(got_sdm[k], a.ravel()), (pattern, nprocs, k)


@pytest.mark.timeout(600)
def test_one_process_box_and_attribute_scan(tmp_path: Path) -> None:
    p = SIZES["a"]
    for contender in ("mpiio", "sdm"):
        where = tmp_path / contender
        where.mkdir()
        report(worker(2, contender=contender, op="write", pattern="a", dir=where, **p))
        got = report(worker(1, contender=contender, op="box", pattern="a", dir=where, lo="1,2,3", hi="9,12,5", **p))
        assert got == {**got, "mismatches": 0, "bytes": 8 * 8 * 10 * 2}
    for contender in ("sdm", "hdf5"):  # h5py reads serially here: the scan needs no parallel HDF5
        where = tmp_path / f"f-{contender}"
        where.mkdir()
        report(worker(1, contender=contender, op="make", pattern="f", dir=where, count=40))
        assert report(worker(1, contender=contender, op="scan", pattern="f", dir=where, count=40))["matches"] == \
            geo.scan_expected(40) == sum(1 for i in range(0, 40, 3) if 100 + i * 37 % 1000 > 800)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("args, message", [
    ({"contender": "netcdf", "op": "write", "pattern": "a"}, "contender= one of ['hdf5', 'mpiio', 'sdm']"),
    ({"contender": "sdm", "op": "box", "pattern": "d"}, "op=box takes pattern= one of a, got 'd'"),
    ({"contender": "sdm", "op": "write", "pattern": "a", "n": "12", "vars": "2"}, "missing argument steps="),
    ({"contender": "sdm", "op": "write", "pattern": "a", "n": "x", "vars": "2", "steps": "1"},
     "not an integer: invalid literal for int() with base 10: 'x'"),
    ({"contender": "mpiio", "op": "box", "pattern": "a", "n": "12", "vars": "2", "steps": "2", "lo": "1,2"},
     "box needs lo=z,y,x hi=z,y,x"),
])
def test_bad_command_lines_are_refused_and_write_nothing(tmp_path: Path, args: dict, message: str) -> None:
    done = worker(2, dir=tmp_path, **args)
    assert done.returncode == 2 and f"peer_python: {message}" in done.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.timeout(300)
def test_a_block_cyclic_array_that_does_not_tile_is_refused(tmp_path: Path) -> None:
    done = worker(3, contender="mpiio", op="write", pattern="b", dir=tmp_path, **{**SIZES["b"], "rows": 100})
    assert done.returncode == 2 and "peer_python: 100 is not a multiple of block 8 x 3 processes" in done.stderr
    assert list(tmp_path.iterdir()) == []
