"""The Python contenders of ``benchmarks/compression.py``: SDM and parallel HDF5 (h5py), compressed or not.

One job per measurement, under mpiexec::

    mpiexec -n 4 python -m mpi4py compress_python.py contender=sdm op=write dir=D input=PREFIX n=192 \
        steps=2 dtype=f4 codec=zstd:1:shuffle

``contender`` is ``sdm`` or ``hdf5``; ``op`` is ``write``, ``read`` (every rank its block, then
checked against the input) or ``box`` (one process reads ``lo=z,y,x hi=z,y,x`` of the last step,
then checked). ``codec`` is a key of :data:`CODECS` (SDM's spec texts; ``deflate:1:shuffle`` is
HDF5's only). The values are those of ``PREFIX.s<step>.raw`` (the global array in C order,
written by the driver), read before the clock. Timed between barriers as in ``peer_python.py``:
open, define, every step, close and (write) an ``fsync`` of every file of the output by rank 0.
Rank 0 prints one JSON line: ``seconds``, ``bytes`` and, by op, ``stored`` (bytes the library
reports storing), ``max_error`` and ``mismatches`` (values that differ from the input),
``bound`` (the absolute error allowed, lossy codecs with a bound). Exit code 3: the contender
cannot store this codec (e.g. an HDF5 filter that does not load).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
from mpi4py import MPI

COMM = MPI.COMM_WORLD
RANK, SIZE = COMM.Get_rank(), COMM.Get_size()
NOT_AVAILABLE = 3

#: codec key -> what each contender is given (None: the contender has no such codec)
CODECS: dict[str, dict[str, Any]] = {
    "none": {"sdm": None, "hdf5": ()},
    "zstd:1:shuffle": {"sdm": "zstd:1:shuffle", "hdf5": ("shuffle", "zstd")},
    "deflate:1:shuffle": {"hdf5": ("shuffle", "deflate")},
    "blosc2:zstd:1:bitshuffle": {"sdm": "blosc2:zstd:1:bitshuffle", "hdf5": ("blosc2",)},
    "zfp:tolerance=0.001": {"sdm": {"codec": "zfp", "tolerance": 1e-3}, "hdf5": ("zfp-accuracy",)},
    "zfp:rate=8": {"sdm": {"codec": "zfp", "rate": 8}, "hdf5": ("zfp-rate",)},
    "sz3:relative=0.0001": {"sdm": {"codec": "sz3", "relative": 1e-4}, "hdf5": ("sz3-relative",)},
}


class NotAvailable(Exception):
    """The contender cannot do this codec (exit code 3)."""


def parse(argv: list[str]) -> dict[str, str]:
    return dict(a.partition("=")[::2] for a in argv)


def grid() -> tuple[int, int, int]:
    return tuple(MPI.Compute_dims(SIZE, [0] * 3))  # type: ignore[return-value]


def bounds(n: int, parts: int, coord: int) -> tuple[int, int]:
    """As ``sdm.Block`` splits an axis (the first ``n % parts`` blocks one longer)."""
    base, extra = divmod(n, parts)
    lo = coord * base + min(coord, extra)
    return lo, lo + base + (1 if coord < extra else 0)


def block(n: int) -> tuple[slice, ...]:
    g = grid()
    return tuple(slice(*bounds(n, p, int(c))) for p, c in zip(g, np.unravel_index(RANK, g)))


def inputs(prefix: str, n: int, steps: int, dtype: str, sl: tuple[slice, ...]) -> list[np.ndarray]:
    """The input values of *sl* at every step."""
    return [np.array(np.memmap(f"{prefix}.s{s}.raw", dtype=dtype, mode="r", shape=(n, n, n))[sl])
            for s in range(steps)]


def sync_tree(path: Path) -> int:
    """``fsync`` every file under *path*; their bytes."""
    total = 0
    for base, _, names in os.walk(path):
        for name in names:
            fd = os.open(os.path.join(base, name), os.O_RDONLY)
            try:
                os.fsync(fd)
                total += os.fstat(fd).st_size
            finally:
                os.close(fd)
    return total


def timed(body: Callable[[], Any], out: Path | None) -> tuple[float, Any]:
    COMM.Barrier()
    t0 = time.perf_counter()
    result = body()
    if out is not None and RANK == 0:
        sync_tree(out)
    COMM.Barrier()
    return time.perf_counter() - t0, result


def bound_of(codec: str, values: list[np.ndarray]) -> float | None:
    """The absolute error allowed of every value (None: lossless or no bound); a relative bound against the
    whole array's range (each chunk's range, which the codecs apply, is at most that)."""
    if codec.startswith("zfp:tolerance="):
        return float(codec.split("=")[1])
    if codec.startswith("sz3:relative="):
        lo = min(float(v.min()) for v in values)
        hi = max(float(v.max()) for v in values)
        return float(codec.split("=")[1]) * (hi - lo)
    return None


def compare(want: list[np.ndarray], got: list[np.ndarray]) -> tuple[float, int]:
    """Largest absolute error and the count of values that differ (numpy, float64; every value)."""
    err, bad = 0.0, 0
    for w, g in zip(want, got):
        if w.size:
            d = np.abs(g.astype(np.float64) - w.astype(np.float64))
            err = max(err, float(d.max()) if not np.isnan(d).any() else float("inf"))
            bad += int(np.count_nonzero(g != w))
    return err, bad


CHUNK = 0  #: the chunk edge of compressed datasets (``chunk=``; 0: one rank's block)


class SDM:
    def __init__(self, where: Path, codec: str, dtype: str, n: int, steps: int) -> None:
        self.dir, self.codec, self.dtype, self.n, self.steps = where, codec, dtype, n, steps
        self.url = f"sqlite:///{where / 'catalog.db'}"
        if "sdm" not in CODECS[codec]:
            raise NotAvailable(f"SDM has no codec {codec}")

    def prepare(self) -> None:
        import importlib
        import pkgutil

        import sdm
        import sdm.codecs as codecs

        # every module a session may use is imported before the clock, as h5py's are (peer_python.py does the same)
        skip = ("sdm._cli", "sdm.xarray", "sdm.exporting", "sdm.plot", "sdm.fem", "sdm.bench", "sdm.examples",
                "sdm.__main__", "sdm.catalog.migrations")
        for mod in pkgutil.walk_packages(sdm.__path__, "sdm."):
            if not mod.name.startswith(skip):
                importlib.import_module(mod.name)
        spec = CODECS[self.codec]["sdm"]
        if spec is not None:  # the codec's package and pipeline before the clock, as h5py's filters load
            codecs.pipeline_for(codecs.parse_compression(spec))
        if RANK == 0 and not (self.dir / "catalog.db").exists():
            sdm.Catalog(self.url).close()
        COMM.Barrier()

    def write(self, arrays: list[np.ndarray]) -> None:
        import sdm

        with sdm.open("compress", "w", comm=COMM, root=str(self.dir), catalog=self.url) as s:
            spec = CODECS[self.codec]["sdm"]
            g = s.make_group("f", ["u"], dtype=self.dtype, shape=(self.n,) * 3, level=3,
                             view=sdm.Block(grid=grid()), compression=spec,
                             chunks=(CHUNK,) * 3 if CHUNK and spec is not None else None)
            for step, a in enumerate(arrays):
                g.write_step(step, {"u": a})

    def stored(self) -> tuple[int, float | None]:
        """Stored bytes of every step (the catalog's) and the largest error it recorded."""
        import sdm

        cat = sdm.Catalog(self.url)
        try:  # a fresh catalog per write: its one run
            rows = [w for _, _, w in cat.writes(cat.latest_run("compress").id)]
        finally:
            cat.close()
        stored = sum(w.stored_nbytes if w.stored_nbytes is not None else w.nbytes for w in rows)
        errors = [w.max_error for w in rows if w.max_error is not None]
        return stored, (max(errors) if errors else None)

    def read(self, out: list[np.ndarray]) -> None:
        import sdm

        with sdm.open("compress", "r", comm=COMM, catalog=self.url, run="latest") as s:
            g = s.group("f")
            g.data_view(sdm.Block(grid=grid()))
            for step, buf in enumerate(out):
                g.read("u", step, out=buf)

    def box(self, lo: tuple[int, ...], hi: tuple[int, ...]) -> np.ndarray:
        import sdm

        with sdm.open("compress", "r", comm=COMM, catalog=self.url, run="latest") as s:
            return s.group("f")["u"][(self.steps - 1, *(slice(a, b) for a, b in zip(lo, hi)))]


class HDF5:
    """h5py, ``driver="mpio"``, one dataset (steps, n, n, n), chunks of one rank's block, collective transfers."""

    def __init__(self, where: Path, codec: str, dtype: str, n: int, steps: int) -> None:
        self.path, self.codec, self.dtype, self.n, self.steps = where / "out.h5", codec, dtype, n, steps
        if "hdf5" not in CODECS[codec]:
            raise NotAvailable(f"no HDF5 filter for {codec} here")

    def filters(self) -> dict[str, Any]:
        """create_dataset's keywords: HDF5's own shuffle and deflate, the others through HDF5_PLUGIN_PATH."""
        import h5py

        out: dict[str, Any] = {}
        # cd_values as hdf5plugin builds them; the plugins themselves are loaded by HDF5 from HDF5_PLUGIN_PATH
        ids = {"zstd": 32015, "blosc2": 32026, "zfp-accuracy": 32013, "zfp-rate": 32013, "sz3-relative": 32024}
        for f in CODECS[self.codec]["hdf5"]:
            if f == "shuffle":
                out["shuffle"] = True
            elif f == "deflate":
                out["compression"], out["compression_opts"] = "gzip", 1
            else:
                if not h5py.h5z.filter_avail(ids[f]):
                    raise NotAvailable(f"HDF5 cannot load filter {ids[f]} ({f}) from HDF5_PLUGIN_PATH="
                                       f"{os.environ.get('HDF5_PLUGIN_PATH', '')}")
                import hdf5plugin

                plugin = {"zstd": lambda: hdf5plugin.Zstd(clevel=1),
                          "blosc2": lambda: hdf5plugin.Blosc2(cname="zstd", clevel=1,
                                                              filters=hdf5plugin.Blosc2.BITSHUFFLE),
                          "zfp-accuracy": lambda: hdf5plugin.Zfp(accuracy=1e-3),
                          "zfp-rate": lambda: hdf5plugin.Zfp(rate=8),
                          "sz3-relative": lambda: hdf5plugin.SZ3(relative=1e-4)}[f]()
                out["compression"], out["compression_opts"] = plugin.filter_id, plugin.filter_options
        return out

    def try_filters(self) -> None:
        """A filter HDF5 loads may still refuse this HDF5 (its set_local callback fails): try it on a tiny
        in-memory file, before the clock."""
        import h5py

        kw = self.filters()
        if not kw:
            return
        try:
            with h5py.File(f"probe-{RANK}", "w", driver="core", backing_store=False) as f:
                f.create_dataset("u", data=np.ones((4, 4, 4), self.dtype), chunks=(2, 2, 2), **kw)
        except ValueError as e:
            raise NotAvailable(f"HDF5 {h5py.version.hdf5_version} loads the filter of {self.codec} but refuses "
                               f"to apply it: {e}") from None

    def prepare(self) -> None:
        self.try_filters()

    def write(self, arrays: list[np.ndarray]) -> None:
        import h5py

        sl = block(self.n)
        chunk = (1, *((CHUNK,) * 3 if CHUNK else (bounds(self.n, p, 0)[1] for p in grid())))  # or the largest block
        with h5py.File(self.path, "w", driver="mpio", comm=COMM) as f:
            kw = self.filters()
            d = f.create_dataset("u", (self.steps, *(self.n,) * 3), dtype=self.dtype,
                                 chunks=chunk if kw else None, **kw)
            with d.collective:
                for step, a in enumerate(arrays):
                    d[(step, *sl)] = a

    def stored(self) -> tuple[int, float | None]:
        import h5py

        with h5py.File(self.path, "r") as f:
            return int(f["u"].id.get_storage_size()), None

    def read(self, out: list[np.ndarray]) -> None:
        import h5py

        sl = block(self.n)
        with h5py.File(self.path, "r", driver="mpio", comm=COMM) as f:
            d = f["u"]
            with d.collective:
                for step, buf in enumerate(out):
                    buf[...] = d[(step, *sl)]

    def box(self, lo: tuple[int, ...], hi: tuple[int, ...]) -> np.ndarray:
        import h5py

        with h5py.File(self.path, "r") as f:
            return f["u"][(self.steps - 1, *(slice(a, b) for a, b in zip(lo, hi)))]


def run(args: dict[str, str]) -> dict[str, Any]:
    global CHUNK
    CHUNK = int(args.get("chunk", 0))  # chunk edge (0: one rank's block)
    cls = {"sdm": SDM, "hdf5": HDF5}[args["contender"]]
    op, where, codec = args["op"], Path(args["dir"]), args.get("codec", "none")
    n, steps, dtype = int(args["n"]), int(args.get("steps", "1")), args.get("dtype", "<f4")
    c = cls(where, codec, dtype, n, steps)
    c.prepare()
    if op == "box":
        lo = tuple(int(x) for x in args["lo"].split(","))
        hi = tuple(int(x) for x in args["hi"].split(","))
        seconds, got = timed(lambda: c.box(lo, hi), None)
        sl = tuple(slice(a, b) for a, b in zip(lo, hi))
        want = inputs(args["input"], n, steps, dtype, sl)[-1:]
        err, bad = compare(want, [got])
        whole = inputs(args["input"], n, steps, dtype, (slice(None),) * 3)  # a relative bound: the array's range
        return {"seconds": seconds, "bytes": got.nbytes, "max_error": err, "mismatches": bad,
                "bound": bound_of(codec, whole)}
    sl = block(n)
    arrays = inputs(args["input"], n, steps, dtype, sl)
    nbytes = int(COMM.allreduce(sum(a.nbytes for a in arrays)))
    if op == "write":
        seconds, _ = timed(lambda: c.write(arrays), where)
        stored, recorded = c.stored() if RANK == 0 else (0, None)
        return {"seconds": seconds, "bytes": nbytes, "stored": stored, "recorded_error": recorded}
    out = [np.zeros_like(a) for a in arrays]
    seconds, _ = timed(lambda: c.read(out), None)
    err, bad = compare(arrays, out)
    # the bound of a relative codec: against the whole array's range (every rank's)
    lo = COMM.allreduce(min(float(a.min()) for a in arrays), op=MPI.MIN)
    hi = COMM.allreduce(max(float(a.max()) for a in arrays), op=MPI.MAX)
    bound = bound_of(codec, [np.array([lo, hi])])
    return {"seconds": seconds, "bytes": nbytes, "max_error": COMM.allreduce(err, op=MPI.MAX),
            "mismatches": COMM.allreduce(bad), "bound": bound}


def main(argv: list[str]) -> int:
    try:
        report = run(parse(argv))
    except NotAvailable as e:
        if RANK == 0:
            print(f"compress_python: {e}", file=sys.stderr)
        return NOT_AVAILABLE
    if RANK == 0:
        print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
