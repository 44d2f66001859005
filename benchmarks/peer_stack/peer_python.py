"""The Python contenders of ``benchmarks/peers.py``: SDM, raw MPI-IO (mpi4py) and parallel HDF5 (h5py).

Run under mpiexec, one job per measurement, with the command-line contract of the C drivers
(``peers_common.h``)::

    mpiexec -n 4 python peer_python.py contender=sdm op=write pattern=a dir=D n=192 vars=4 steps=2

``contender`` is ``sdm``, ``mpiio`` or ``hdf5``; ``op`` is ``write``, ``read``, ``check``,
``box``, ``make`` or ``scan``; the pattern's sizes are the keys of
:data:`geometry.PATTERNS`. Rank 0 prints one JSON line: ``seconds``, ``bytes`` and, as the
op has them, ``mismatches``, ``matches``, ``files``.

What is timed is the same for every contender: data are generated before the clock
starts; between two barriers come the open (SDM: a new run in an existing catalog), the
definitions, every step, the close, and an ``fsync`` of every file of the output directory
by rank 0 (how durability is made equal for libraries that sync and libraries that do
not). Converting the application's own layout into what a library takes (sorting a map
array's rows for MPI-IO and HDF5, finding its runs) is timed too.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
import geometry as geo  # noqa: E402

COMM = MPI.COMM_WORLD
RANK, SIZE = COMM.Get_rank(), COMM.Get_size()
OPS = ("write", "read", "check", "box", "make", "scan")


class Usage(Exception):
    """A bad command line (exit code 2)."""


def parse(argv: list[str]) -> dict[str, str]:
    """``key=value`` arguments."""
    out = {}
    for arg in argv:
        key, sep, val = arg.partition("=")
        if not sep or not key:
            raise Usage(f"arguments are key=value, got {arg!r}")
        out[key] = val
    return out


def ints(args: dict[str, str], *keys: str) -> list[int]:
    """The integer arguments *keys*."""
    try:
        return [int(args[k]) for k in keys]
    except KeyError as e:
        raise Usage(f"missing argument {e.args[0]}=") from None
    except ValueError as e:
        raise Usage(f"not an integer: {e}") from None


def sync_tree(path: Path) -> int:
    """``fsync`` every regular file under *path*; the number of files."""
    files = 0
    for base, _, names in os.walk(path):
        for name in names:
            fd = os.open(os.path.join(base, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            files += 1
    return files


def timed(body: Callable[[], Any], out: Path | None, sync: bool) -> tuple[float, Any, int]:
    """Run *body* between barriers (then fsync *out* on rank 0 if *sync*): seconds, result, files."""
    COMM.Barrier()
    t0 = time.perf_counter()
    result = body()
    files = sync_tree(out) if sync and RANK == 0 and out is not None else 0
    COMM.Barrier()
    return time.perf_counter() - t0, result, files


# ----------------------------------------------------------------------------- geometry

def block_a(n: int) -> tuple[tuple[int, ...], tuple[slice, ...], np.ndarray]:
    """Pattern a on this rank: the grid, the global slices, the flat global index of each local element."""
    grid = geo.dims(SIZE, 3)
    coords = np.unravel_index(RANK, grid)
    sl = tuple(slice(*geo.block_bounds(n, p, int(c))) for p, c in zip(grid, coords))
    z, y, x = (np.arange(s.start, s.stop) for s in sl)
    flat = (z[:, None, None] * n + y[None, :, None]) * n + x[None, None, :]
    return grid, sl, flat


def blockcyclic_b(rows: int, cols: int, br: int, bc: int) -> tuple[tuple[int, int], np.ndarray, np.ndarray]:
    """Pattern b on this rank: the grid and its global rows and columns in local (ScaLAPACK) order."""
    grid = geo.dims(SIZE, 2)
    pr, pc = divmod(RANK, grid[1])
    return grid, geo.cyclic_rows(rows, br, grid[0], pr), geo.cyclic_rows(cols, bc, grid[1], pc)


def block_1d(length: int) -> tuple[int, int]:
    """``[lo, hi)`` of this rank's block of a 1-D array (pattern d)."""
    return geo.block_bounds(length, SIZE, RANK)


def local_map(prefix: str) -> np.ndarray:
    """This rank's map (pattern c)."""
    return np.fromfile(geo.map_path(prefix, SIZE, RANK), dtype="<i8")


def runs_of(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Starts and lengths of the runs of consecutive values in *rows* (sorted or not)."""
    if rows.size == 0:
        return rows, rows
    breaks = np.flatnonzero(np.diff(rows) != 1) + 1
    starts = np.concatenate([[0], breaks])
    lengths = np.diff(np.concatenate([starts, [rows.size]]))
    return rows[starts], lengths


def data(pattern: str, p: dict[str, int], args: dict[str, str]) -> dict[tuple[int, int], np.ndarray]:
    """The application's local arrays ``{(step, var): array}`` in its own layout."""
    out: dict[tuple[int, int], np.ndarray] = {}
    if pattern == "a":
        flat = block_a(p["n"])[2]
        for s in range(p["steps"]):
            for v in range(p["vars"]):
                out[s, v] = geo.values_at(s, v, flat)
    elif pattern == "b":
        _, r, c = blockcyclic_b(p["rows"], p["cols"], p["br"], p["bc"])
        flat = r[:, None] * p["cols"] + c[None, :]
        for s in range(p["steps"]):
            out[s, 0] = geo.values_at(s, 0, flat)
    elif pattern == "c":
        rows = local_map(args["map"])
        flat = rows[:, None] * p["width"] + np.arange(p["width"])[None, :]
        for s in range(p["steps"]):
            out[s, 0] = geo.values_at(s, 0, flat)
    elif pattern == "d":
        lo, hi = block_1d(p["length"])
        for s in range(p["steps"]):
            for v in range(p["count"]):
                out[s, v] = geo.values_at(s, v, np.arange(lo, hi))
    return out


def sizes(pattern: str, args: dict[str, str]) -> dict[str, int]:
    """The pattern's integer parameters from the command line."""
    keys = {"a": ("n", "vars", "steps"), "b": ("rows", "cols", "br", "bc", "steps"),
            "c": ("rows", "width", "steps"), "d": ("count", "length", "steps"), "f": ("count",)}[pattern]
    return dict(zip(keys, ints(args, *keys)))


def names(pattern: str, p: dict[str, int]) -> list[str]:
    """Variable names (as the C drivers name them)."""
    if pattern == "a":
        return [f"a{v}" for v in range(p["vars"])]
    if pattern == "d":
        return [f"d{v:03d}" for v in range(p["count"])]
    return [pattern]


def mismatches(expected: dict[tuple[int, int], np.ndarray], got: dict[tuple[int, int], np.ndarray]) -> int:
    """Elements that differ, summed over every rank."""
    local = sum(int(np.count_nonzero(expected[k] != got[k])) for k in expected)
    return int(COMM.allreduce(local))


def box_args(args: dict[str, str]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``lo=z,y,x hi=z,y,x``."""
    try:
        lo = tuple(int(x) for x in args["lo"].split(","))
        hi = tuple(int(x) for x in args["hi"].split(","))
    except (KeyError, ValueError):
        raise Usage("box needs lo=z,y,x hi=z,y,x") from None
    return lo, hi


def box_expected(n: int, step: int, lo: tuple[int, ...], hi: tuple[int, ...]) -> np.ndarray:
    """The values of ``a0`` at *step* in the box."""
    z, y, x = (np.arange(a, b) for a, b in zip(lo, hi))
    return geo.values_at(step, 0, (z[:, None, None] * n + y[None, :, None]) * n + x[None, None, :])


# ----------------------------------------------------------------------------- contenders

class Contender:
    """One library's way of doing each op; subclasses implement what their library can do."""

    name = ""

    def __init__(self, pattern: str, p: dict[str, int], args: dict[str, str], where: Path) -> None:
        self.pattern, self.p, self.args, self.dir = pattern, p, args, where

    def write(self, arrays: dict[tuple[int, int], np.ndarray]) -> None:
        raise NotImplementedError

    def read(self, into: dict[tuple[int, int], np.ndarray]) -> None:
        raise NotImplementedError

    def box(self, lo: tuple[int, ...], hi: tuple[int, ...]) -> np.ndarray:
        raise NotImplementedError

    def make(self, count: int) -> None:
        raise NotImplementedError

    def scan(self, count: int) -> int:
        raise NotImplementedError

    def prepare(self) -> None:
        """Work done before the clock starts (imports; SDM: the catalog exists, as it does for any run but the first)."""


class RawMPIIO(Contender):
    """Plain MPI-IO: one file, derived-datatype file views, collective reads and writes."""

    name = "mpiio"

    def _views(self) -> list[tuple[int, MPI.Datatype, Callable[[np.ndarray], np.ndarray]]]:
        """Per (step, var) in order: displacement, file type and the buffer conversion."""
        p, pat = self.p, self.pattern
        out = []
        if pat == "a":
            n = p["n"]
            _, sl, _ = block_a(n)
            ftype = MPI.DOUBLE.Create_subarray([n] * 3, [s.stop - s.start for s in sl], [s.start for s in sl]).Commit()
            for s in range(p["steps"]):
                for v in range(p["vars"]):
                    out.append(((s * p["vars"] + v) * n ** 3 * 8, ftype, lambda a: a))
        elif pat == "b":
            grid = geo.dims(SIZE, 2)
            ftype = MPI.DOUBLE.Create_darray(SIZE, RANK, [p["rows"], p["cols"]], [MPI.DISTRIBUTE_CYCLIC] * 2,
                                             [p["br"], p["bc"]], list(grid)).Commit()
            for s in range(p["steps"]):
                out.append((s * p["rows"] * p["cols"] * 8, ftype, lambda a: a))
        elif pat == "c":
            rows = local_map(self.args["map"])
            order = np.argsort(rows, kind="stable")
            starts, lengths = runs_of(rows[order])
            w = p["width"]
            ftype = MPI.DOUBLE.Create_indexed((lengths * w).tolist(), (starts * w).tolist()).Commit()
            for s in range(p["steps"]):
                out.append((s * p["rows"] * w * 8, ftype, lambda a, order=order: a[order]))
        elif pat == "d":
            lo, hi = block_1d(p["length"])
            ftype = MPI.DOUBLE.Create_vector(p["count"], hi - lo, p["length"]).Commit()
            for s in range(p["steps"]):
                out.append(((s * p["count"] * p["length"] + lo) * 8, ftype, lambda a: a))
        return out

    def _buffers(self, arrays: dict[tuple[int, int], np.ndarray]) -> list[np.ndarray]:
        if self.pattern == "d":  # one collective per step: the step's arrays side by side
            return [np.stack([arrays[s, v] for v in range(self.p["count"])]) for s in range(self.p["steps"])]
        return list(arrays.values())

    def _io(self, mode: int, bufs: list[np.ndarray], write: bool) -> list[np.ndarray]:
        fh = MPI.File.Open(COMM, str(self.dir / "out.raw"), mode)
        try:
            done = []
            for (disp, ftype, convert), buf in zip(self._views(), bufs):
                fh.Set_view(disp, MPI.DOUBLE, ftype)
                if write:
                    fh.Write_all(np.ascontiguousarray(convert(buf)))
                else:
                    out = np.empty_like(buf)
                    fh.Read_all(out)
                    done.append(out)
            return done
        finally:
            fh.Close()

    def write(self, arrays):
        self._io(MPI.MODE_CREATE | MPI.MODE_WRONLY, self._buffers(arrays), True)

    def read(self, into):
        got = self._io(MPI.MODE_RDONLY, self._buffers(into), False)
        if self.pattern == "d":
            for s, block in enumerate(got):
                for v in range(self.p["count"]):
                    into[s, v] = block[v]
        elif self.pattern == "c":  # the file order back to the local order
            order = np.argsort(local_map(self.args["map"]), kind="stable")
            for k, block in zip(into, got):
                into[k][order] = block
        else:
            for k, block in zip(into, got):
                into[k] = block

    def box(self, lo, hi):
        n = self.p["n"]
        ftype = MPI.DOUBLE.Create_subarray([n] * 3, [b - a for a, b in zip(lo, hi)], list(lo)).Commit()
        out = np.empty([b - a for a, b in zip(lo, hi)])
        fh = MPI.File.Open(COMM, str(self.dir / "out.raw"), MPI.MODE_RDONLY)
        try:
            fh.Set_view(((self.p["steps"] - 1) * self.p["vars"]) * n ** 3 * 8, MPI.DOUBLE, ftype)
            fh.Read_all(out)
        finally:
            fh.Close()
            ftype.Free()
        return out


class HDF5(Contender):
    """Parallel HDF5 through h5py (``driver="mpio"``, collective transfers); one file."""

    name = "hdf5"

    def prepare(self):
        import h5py  # noqa: F401 (before the clock)

    def _file(self, mode: str) -> Any:
        import h5py

        return h5py.File(self.dir / "out.h5", mode, driver="mpio", comm=COMM)

    def _shape(self) -> tuple[int, ...]:
        p = self.p
        return {"a": (p.get("n", 0),) * 3, "b": (p.get("rows", 0), p.get("cols", 0)),
                "c": (p.get("rows", 0), p.get("width", 0)), "d": (p.get("length", 0),)}[self.pattern]

    def _selections(self) -> tuple[Callable[[Any, int], None], Callable[[np.ndarray], np.ndarray]]:
        """How to select this rank's part of step s in a dataset's file space, and the buffer conversion."""
        import h5py

        p, pat = self.p, self.pattern
        if pat == "a":
            _, sl, _ = block_a(p["n"])
            start, count = [s.start for s in sl], [s.stop - s.start for s in sl]

            def select(space: Any, s: int) -> None:
                space.select_hyperslab((s, *start), (1, *count))
            return select, lambda a: a
        if pat == "b":  # block-cyclic is one regular hyperslab (start, stride, count, block)
            grid = geo.dims(SIZE, 2)
            pr, pc = divmod(RANK, grid[1])
            nrb, ncb = p["rows"] // (p["br"] * grid[0]), p["cols"] // (p["bc"] * grid[1])

            def select(space: Any, s: int) -> None:
                space.select_hyperslab((s, pr * p["br"], pc * p["bc"]), (1, nrb, ncb),
                                       stride=(1, grid[0] * p["br"], grid[1] * p["bc"]), block=(1, p["br"], p["bc"]))
            return select, lambda a: a
        if pat == "c":  # a union of hyperslabs, one per run; HDF5 moves the buffer in file order
            rows = local_map(self.args["map"])
            order = np.argsort(rows, kind="stable")
            starts, lengths = runs_of(rows[order])

            def select(space: Any, s: int) -> None:
                space.select_none()
                for r0, m in zip(starts.tolist(), lengths.tolist()):
                    space.select_hyperslab((s, r0, 0), (1, m, p["width"]), op=h5py.h5s.SELECT_OR)
            return select, lambda a: a[order]
        lo, hi = block_1d(p["length"])

        def select(space: Any, s: int) -> None:
            space.select_hyperslab((s, lo), (1, hi - lo))
        return select, lambda a: a

    def _transfer(self, f: Any, arrays: dict[tuple[int, int], np.ndarray], write: bool) -> None:
        import h5py

        select, convert = self._selections()
        dxpl = h5py.h5p.create(h5py.h5p.DATASET_XFER)
        dxpl.set_dxpl_mpio(h5py.h5fd.MPIO_COLLECTIVE)
        datasets = {v: f[name] for v, name in enumerate(names(self.pattern, self.p))}
        for (s, v), buf in arrays.items():
            dset = datasets[v]
            space = dset.id.get_space()
            select(space, s)
            if write:
                mem = np.ascontiguousarray(convert(buf))
                dset.id.write(h5py.h5s.create_simple((mem.size,)), space, mem.reshape(-1), dxpl=dxpl)
            else:
                mem = np.empty(buf.size)
                dset.id.read(h5py.h5s.create_simple((mem.size,)), space, mem, dxpl=dxpl)
                if self.pattern == "c":
                    buf.reshape(buf.shape[0], -1)[np.argsort(local_map(self.args["map"]), kind="stable")] = \
                        mem.reshape(buf.shape[0], -1)
                else:
                    buf[...] = mem.reshape(buf.shape)

    def write(self, arrays):
        with self._file("w") as f:
            for name in names(self.pattern, self.p):
                f.create_dataset(name, (self.p["steps"], *self._shape()), dtype="<f8")
            self._transfer(f, arrays, True)

    def read(self, into):
        with self._file("r") as f:
            self._transfer(f, into, False)

    def box(self, lo, hi):
        import h5py

        with h5py.File(self.dir / "out.h5", "r") as f:  # one process: the default (sec2) driver
            return f["a0"][(self.p["steps"] - 1, *(slice(a, b) for a, b in zip(lo, hi)))]

    def make(self, count):
        import h5py

        for i in range(count):
            with h5py.File(self.dir / f"run-{i:04d}.h5", "w") as f:
                f.attrs.update(geo.scan_attributes(i))
                f["x"] = np.full(16, float(i))

    def scan(self, count):
        import h5py

        matches = 0
        for i in range(count):
            with h5py.File(self.dir / f"run-{i:04d}.h5", "r") as f:
                attrs = f.attrs
                mesh = attrs["mesh"]
                mesh = mesh.decode() if isinstance(mesh, bytes) else str(mesh)
                matches += mesh == "fine" and float(attrs["reynolds"]) > 800
        return matches


class SDM(Contender):
    """SDM: a group at level 3 (one file per group), written and read by name and step."""

    name = "sdm"

    def _url(self) -> str:
        return f"sqlite:///{self.dir / 'catalog.db'}"

    def prepare(self):
        """The installation a run meets: its catalog exists and, given ``calibration=FILE`` (the JSON of
        ``Catalog.latest_calibration`` of a directory on the same file system), holds that calibration."""
        import importlib
        import pkgutil

        import sdm

        # every module a session may use is imported before the clock, as the other libraries are
        # (optional front ends, which import xarray, h5py or matplotlib, are not)
        skip = ("sdm._cli", "sdm.xarray", "sdm.exporting", "sdm.plot", "sdm.fem", "sdm.bench", "sdm.examples",
                "sdm.__main__", "sdm.catalog.migrations")
        for mod in pkgutil.walk_packages(sdm.__path__, "sdm."):
            if not mod.name.startswith(skip):
                importlib.import_module(mod.name)

        if RANK == 0 and not (self.dir / "catalog.db").exists():
            from sdm.catalog import Catalog

            cat = Catalog(self._url())
            try:
                if self.args.get("calibration"):
                    record = json.loads(Path(self.args["calibration"]).read_text())
                    cat.save_calibration(str(self.dir.resolve()), record["nprocs"], record["constants"])
            finally:
                cat.close()
        COMM.Barrier()

    def _view(self) -> Any:
        import sdm

        p, pat = self.p, self.pattern
        if pat == "a":
            return sdm.Block(grid=geo.dims(SIZE, 3))
        if pat == "b":
            return sdm.BlockCyclic(grid=geo.dims(SIZE, 2), blocks=(p["br"], p["bc"]))
        if pat == "c":
            return sdm.MapArray(local_map(self.args["map"]))
        return sdm.Block(grid=(SIZE,))

    def _shape(self) -> tuple[int, ...]:
        return HDF5._shape(self)  # type: ignore[arg-type]

    def _open(self, mode: str) -> Any:
        import sdm

        if mode == "w":  # checksum=off: only to measure what the checksum costs (the default is on)
            return sdm.open("peers", "w", comm=COMM, root=str(self.dir), catalog=self._url(),
                            attributes={"pattern": self.pattern}, checksum=self.args.get("checksum", "on") != "off")
        return sdm.open("peers", "r", comm=COMM, catalog=self._url(), attributes={"pattern": self.pattern},
                        run="latest")  # the run just written (each repeat writes one)

    def write(self, arrays):
        vars_ = names(self.pattern, self.p)
        with self._open("w") as s:
            g = s.make_group(self.pattern, vars_, dtype="<f8", shape=self._shape(), level=3, view=self._view())
            for step in range(self.p["steps"]):
                g.write_step(step, {name: arrays[step, v] for v, name in enumerate(vars_)})

    def read(self, into):
        vars_ = names(self.pattern, self.p)
        with self._open("r") as s:
            g = s.group(self.pattern)
            g.data_view(self._view())
            for (step, v), buf in into.items():
                g.read(vars_[v], step, out=buf)

    def box(self, lo, hi):
        with self._open("r") as s:
            return s.group("a")["a0"][(self.p["steps"] - 1, *(slice(a, b) for a, b in zip(lo, hi)))]

    def make(self, count):
        import sdm

        for i in range(count):
            with sdm.open("sweep", "w", comm=MPI.COMM_SELF, root=str(self.dir), catalog=self._url(),
                          attributes=geo.scan_attributes(i)) as s:
                g = s.make_group("x", ["x"], dtype="<f8", shape=(16,), level=1)
                g.write("x", 0, np.full(16, float(i)))

    def scan(self, count):
        import sdm

        return len(sdm.find(self._url(), application="sweep", attributes=geo.SCAN_CONDITION))


CONTENDERS: dict[str, type[Contender]] = {c.name: c for c in (SDM, RawMPIIO, HDF5)}


def run(args: dict[str, str]) -> dict[str, Any]:
    """Do one op; rank 0's report."""
    try:
        cls = CONTENDERS[args["contender"]]
    except KeyError:
        raise Usage(f"contender= one of {sorted(CONTENDERS)}") from None
    op, pattern = args.get("op"), args.get("pattern")
    allowed = {"box": "a", "make": "f", "scan": "f"}.get(str(op), "abcd")
    if op not in OPS or pattern is None or pattern not in allowed:
        raise Usage(f"op={op} takes pattern= one of {', '.join(allowed)}, got {pattern!r}")
    where = Path(args.get("dir", ""))
    if not where.is_dir():
        raise Usage(f"dir={where} is not a directory")
    p = sizes(pattern, args)
    lo, hi = box_args(args) if op == "box" else ((), ())
    try:  # the application's arrays, before anything is written (a view that does not fit is refused here)
        arrays = data(pattern, p, args) if op in ("write", "read", "check") else {}
    except ValueError as e:
        raise Usage(str(e)) from None
    c = cls(pattern, p, args, where)
    c.prepare()
    if op == "make":
        seconds, _, files = timed(lambda: c.make(p["count"]) if RANK == 0 else None, where, True)
        return {"seconds": seconds, "bytes": 0, "files": files}
    if op == "scan":
        seconds, found, _ = timed(lambda: c.scan(p["count"]), None, False)
        return {"seconds": seconds, "bytes": 0, "matches": found}
    if op == "box":
        seconds, got, _ = timed(lambda: c.box(lo, hi), None, False)
        bad = int(np.count_nonzero(got != box_expected(p["n"], p["steps"] - 1, lo, hi)))
        return {"seconds": seconds, "bytes": got.nbytes, "mismatches": int(COMM.allreduce(bad))}
    nbytes = int(COMM.allreduce(sum(a.nbytes for a in arrays.values())))
    if op == "write":
        seconds, _, files = timed(lambda: c.write(arrays), where, True)
        return {"seconds": seconds, "bytes": nbytes, "files": files}
    into = {k: np.full_like(a, np.nan) for k, a in arrays.items()}
    seconds, _, _ = timed(lambda: c.read(into), None, False)
    out: dict[str, Any] = {"seconds": seconds, "bytes": nbytes}
    if op == "check":
        out["mismatches"] = mismatches(arrays, into)
    return out


def main(argv: list[str]) -> int:
    try:
        report = run(parse(argv))
    except Usage as e:
        print(f"peer_python: {e}", file=sys.stderr)
        return 2
    if RANK == 0:
        print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
