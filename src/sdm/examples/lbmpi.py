"""LBMPI (Cronk, Fagg and Moore, section 3.1): four interleaved fields, one file or four.

The contaminant-dispersion code keeps four conceptual 3-D fields in one Fortran array
``f(4, nx, ny, nz)`` (the field index fastest, for cache hits), each rank holding a
block-block piece over ``(x, y)`` with a ghost layer on every side.  Its original I/O
opened four files (one per field) on every rank and wrote every element with its own
``write`` at a computed offset -- no two values of a field are adjacent in memory --
and spent as long on I/O as on computing.  MPI-IO's subarray types fix both sides;
the paper compares one file against four, non-collective against collective.

Variants (``run``):

==================  ======================================================================
original            each rank writes element by element (``os.pwrite``) into four files
one-file            SDM: the 4-D array is one dataset, one file (level 2), ghosts skipped
four-files          SDM: four 3-D datasets, four files (level 2), one field at a time
==================  ======================================================================

Each SDM variant runs with any I/O method: ``collective`` and ``datatype``
(non-collective, independent through the same file view) are the paper's pair, and
``auto`` lets the planner choose.  Values are :func:`sdm.examples._template.pattern` of
field ``f<k>`` over the 3-D grid, so files can be checked with numpy alone.

Run ``mpiexec -n 4 python -m sdm.examples.lbmpi --n 64 --steps 2 --verify``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from mpi4py import MPI

import sdm
from sdm.examples._template import MB, Stopwatch, pattern
from sdm.io._support import byte_view

__all__ = ["Grid", "FIELDS", "local_array", "global_field", "run", "original", "predicted", "verify", "VARIANTS",
           "main"]

FIELDS = 4
VARIANTS = ("original", "one-file", "four-files")


@dataclass(frozen=True)
class Grid:
    """The global grid and this job's block-block decomposition over ``(x, y)``.

    Attributes
    ----------
    shape : tuple of int
        ``(nx, ny, nz)``.
    procs : tuple of int
        Ranks along x and y (product = number of ranks).
    dtype : str
        Element type of the fields.
    """

    shape: tuple[int, int, int]
    procs: tuple[int, int]
    dtype: str = "f8"

    @classmethod
    def of(cls, n: int | Sequence[int], nprocs: int, dtype: str = "f8") -> "Grid":
        shape = (n, n, n) if isinstance(n, int) else tuple(int(x) for x in n)
        px, py = MPI.Compute_dims(nprocs, [0, 0])
        return cls(shape, (px, py), dtype)  # type: ignore[arg-type]

    @property
    def field_view(self) -> sdm.Block:
        """One 3-D field: blocks over x and y, z whole, one ghost layer everywhere."""
        return sdm.Block(grid=(*self.procs, 1), ghosts=1)

    @property
    def array_view(self) -> sdm.Block:
        """The 4-D array: the field index whole (no ghosts), then as for one field."""
        return sdm.Block(grid=(1, *self.procs, 1), ghosts=[0, 1, 1, 1])

    def piece(self, nprocs: int, rank: int) -> sdm.layout.Piece:
        """This rank's piece of one field."""
        return self.field_view.piece(self.shape, nprocs, rank)

    @property
    def field_bytes(self) -> int:
        return int(np.prod(self.shape)) * np.dtype(self.dtype).itemsize


def local_array(grid: Grid, nprocs: int, rank: int, step: int) -> np.ndarray:
    """The rank's ``f(4, lx+2, ly+2, nz+2)`` (Fortran order): interior values, ghosts -1."""
    p = grid.piece(nprocs, rank)
    f = np.full((FIELDS, *p.memory_shape), -1, dtype=grid.dtype, order="F")
    for k in range(FIELDS):
        f[k][p.interior] = pattern(f"f{k}", step, p.indices, grid.shape, grid.dtype)
    return f


def global_field(grid: Grid, k: int, step: int) -> np.ndarray:
    """Field *k* at *step* over the whole grid (the reference for the files)."""
    return pattern(f"f{k}", step, [np.arange(n) for n in grid.shape], grid.shape, grid.dtype)


# ------------------------------------------------------------------ original I/O
def original_paths(root: Path) -> list[Path]:
    """The four files of the original code (one per field, steps appended)."""
    return [Path(root) / "original" / f"f{k}.dat" for k in range(FIELDS)]


def original(comm: MPI.Comm, grid: Grid, root: Path, steps: Sequence[int], sync: bool = True) -> float:
    """The original I/O: every rank writes each of its elements with one ``pwrite``.

    Four files (one per field, dump ``i`` at offset ``i * field_bytes``) in Fortran
    order; each rank opens them, computes every element's offset, and writes the
    element straight from the interleaved array (no packing), then syncs and closes.
    Returns the seconds of the slowest rank (collective).
    """
    rank, nprocs = comm.Get_rank(), comm.Get_size()
    paths = original_paths(root)
    if rank == 0:
        paths[0].parent.mkdir(parents=True, exist_ok=True)
    comm.Barrier()
    p = grid.piece(nprocs, rank)
    item = np.dtype(grid.dtype).itemsize
    # element offsets in a field file (Fortran order) and in the local 4-D array, in column order
    x, y, z = (np.asarray(i, dtype=np.int64) for i in p.indices)
    nx, ny, _ = grid.shape
    file_off = ((x[:, None, None] + nx * (y[None, :, None] + ny * z[None, None, :])) * item).ravel(order="F")
    clock = Stopwatch(comm)
    for i, step in enumerate(steps):
        f = local_array(grid, nprocs, rank, step)
        mem = byte_view(f).data
        lo = [g[0] for g in p.ghosts]
        mi = [(lo[d] + np.arange(c, dtype=np.int64)) * f.strides[d + 1] for d, c in enumerate(p.counts)]
        mem_off = (mi[0][:, None, None] + mi[1][None, :, None] + mi[2][None, None, :]).ravel(order="F")
        with clock():
            for k, path in enumerate(paths):
                fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
                try:
                    base = i * grid.field_bytes
                    for fo, mo in zip((file_off + base).tolist(), (mem_off + k * f.strides[0]).tolist()):
                        os.pwrite(fd, mem[mo:mo + item], fo)  # one value per call: the original code
                    if sync:
                        os.fsync(fd)
                finally:
                    os.close(fd)
    return clock.total()


# ----------------------------------------------------------------------- SDM I/O
def run(
    comm: MPI.Comm,
    grid: Grid,
    variant: str,
    steps: Sequence[int],
    *,
    root: str | Path,
    catalog: str | None = None,
    method: str = "collective",
    sync: bool | None = None,
    hints: dict[str, str] | None = None,
    checksum: bool | None = None,
) -> dict[str, Any]:
    """Write every step with one variant; returns seconds, bytes, run id and decisions.

    The time covers the writes (file opens, I/O, syncs, checksums and catalog commits
    included, session set-up and data generation excluded), on the slowest rank.
    ``checksum=False`` leaves out SDM's write-time checksum (the original has none).
    """
    rank, nprocs = comm.Get_rank(), comm.Get_size()
    nbytes = FIELDS * grid.field_bytes * len(steps)
    if variant == "original":
        seconds = original(comm, grid, Path(root), steps, sync if sync is not None else True)
        return {"variant": variant, "method": "posix (element by element)", "seconds": seconds, "bytes": nbytes,
                "files": FIELDS}
    if variant not in VARIANTS:
        raise ValueError(f"unknown LBMPI variant {variant!r}; choose one of {VARIANTS}")
    clock = Stopwatch(comm)
    url = catalog or f"sqlite:///{Path(root)}/catalog.db"
    with sdm.open("LBMPI", root=root, catalog=url, method=method, sync=sync, hints=hints, comm=comm, checksum=checksum,
                  attributes={"variant": variant, "method": method}, problem_size=list(grid.shape)) as s:
        if variant == "one-file":
            g = s.make_group("lbm", ["f"], dtype=grid.dtype, shape=(FIELDS, *grid.shape), order="F", level=2,
                             view=grid.array_view)
        else:
            g = s.make_group("lbm", [f"f{k}" for k in range(FIELDS)], dtype=grid.dtype, shape=grid.shape,
                             order="F", level=2, view=grid.field_view)
        for step in steps:
            f = local_array(grid, nprocs, rank, step)
            with clock():
                if variant == "one-file":
                    g.write("f", step, f)
                else:
                    for k in range(FIELDS):
                        g.write(f"f{k}", step, f[k])
        run_id = s.run_id
    return {"variant": variant, "method": method, "seconds": clock.total(), "bytes": nbytes, "run_id": run_id,
            "catalog": url, "files": 1 if variant == "one-file" else FIELDS}


def files_of(result: dict[str, Any], root: Path) -> dict[str, list[tuple[int, Path, int]]]:
    """Per dataset, ``(step, path, offset)`` of every write the catalog recorded (rank 0)."""
    cat = sdm.Catalog(result["catalog"], create=False)
    try:
        rows = cat.writes(result["run_id"])
        out: dict[str, list[tuple[int, Path, int]]] = {}
        for _, name, w in rows:
            out.setdefault(name, []).append((w.step, Path(root) / w.path, w.offset))
        return out
    finally:
        cat.close()


def verify(comm: MPI.Comm, grid: Grid, result: dict[str, Any], root: Path, steps: Sequence[int]) -> int:
    """Compare every written file with the numpy reference; returns mismatching values (collective)."""
    bad = 0
    if comm.Get_rank() == 0:
        item = np.dtype(grid.dtype)
        if result["variant"] == "original":
            for k, path in enumerate(original_paths(root)):
                for i, step in enumerate(steps):
                    got = np.memmap(path, dtype=item, mode="r", offset=i * grid.field_bytes, shape=grid.shape,
                                    order="F")
                    bad += int(np.count_nonzero(got != global_field(grid, k, step)))
        else:
            for name, writes in files_of(result, root).items():
                for step, path, offset in writes:
                    if name == "f":
                        got = np.memmap(path, dtype=item, mode="r", offset=offset, shape=(FIELDS, *grid.shape),
                                        order="F")
                        bad += sum(int(np.count_nonzero(got[k] != global_field(grid, k, step))) for k in range(FIELDS))
                    else:
                        got = np.memmap(path, dtype=item, mode="r", offset=offset, shape=grid.shape, order="F")
                        bad += int(np.count_nonzero(got != global_field(grid, int(name[1:]), step)))
    return int(comm.bcast(bad, root=0))


def predicted(model: Any, grid: Grid, variant: str, method: str, nprocs: int, steps: int, sync: bool = True,
              hints: dict[str, str] | None = None, checksum: bool = True) -> tuple[float, str]:
    """The cost model's seconds for *steps* dumps of *variant*, and the method it assumes.

    SDM variants: every write's :class:`~sdm.planner.Access` (all ranks' pieces, the
    memory layout SDM sees: the F-ordered 4-D array, or for four files each field as
    the C-ordered copy SDM makes of a strided view) through the method (``auto``: the
    planner's choice), plus the commit, the sync, one open per file, each open file's new
    collective buffer and each dataset's first write.  The original:
    every element a call of its own (:mod:`posix`'s terms), one sync per field file.
    """
    from sdm.layout.regions import file_strides, rank_stats
    from sdm.planner import Access, Planner, row_bytes

    item = np.dtype(grid.dtype).itemsize
    c = model.constants

    def access(view: Any, shape: tuple, mem_order: str) -> Access:
        stats = [rank_stats(p, "F", item, file_strides(p.memory_shape, mem_order, item)).as_tuple()
                 for p in (view.piece(shape, nprocs, r) for r in range(nprocs))]
        return Access.from_stats(stats, writing=True, level=2, itemsize=item, total_bytes=int(np.prod(shape)) * item,
                                 order="F", row_bytes=row_bytes(shape, item, "F"))

    sync_cost = (c["fsync"] + c["fsync_byte"] * grid.field_bytes) if sync else 0.0
    if variant == "original":  # one os.pwrite per element, then a sync per field file
        elements = max(grid.piece(nprocs, r).size for r in range(nprocs))
        per_field = elements * model.scaled(nprocs)["call"] + sync_cost
        return FIELDS * steps * per_field, "posix"
    if variant == "one-file":
        a = access(grid.array_view, (FIELDS, *grid.shape), "F")
        writes, files, nbytes = steps, 1, FIELDS * grid.field_bytes
    else:
        a = access(grid.field_view, grid.shape, "C")
        writes, files, nbytes = FIELDS * steps, FIELDS, grid.field_bytes
    chosen = Planner(mpi_hints=hints, model=model).choose(method, a).method.name
    per_write = model.predict(chosen, a, hints).seconds + model.overhead(nbytes, nprocs, writing=True, sync=sync,
                                                                         checksum=checksum)
    held = files * model.new_handle(chosen, a, hints)  # level 2: every file stays open, its buffer new
    return writes * per_write + files * c["open"] + held, chosen


def main(argv: Sequence[str] | None = None) -> int:
    """Write the LBMPI fields with every variant and print the times (collective)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=48, help="grid edge (default 48)")
    p.add_argument("--steps", type=int, default=2, help="dumps (default 2)")
    p.add_argument("--root", default="lbmpi-data", help="data root (default ./lbmpi-data)")
    p.add_argument("--variants", default="all", help="comma-separated: original, one-file, four-files")
    p.add_argument("--methods", default="collective,datatype", help="SDM methods for the SDM variants")
    p.add_argument("--no-sync", action="store_true", help="do not sync writes (original and SDM alike)")
    p.add_argument("--verify", action="store_true", help="check every file against numpy")
    a = p.parse_args(argv)
    comm = MPI.COMM_WORLD
    grid = Grid.of(a.n, comm.Get_size())
    steps = list(range(1, a.steps + 1))
    variants = VARIANTS if a.variants == "all" else tuple(a.variants.split(","))
    failed = 0
    for variant in variants:
        for method in (["-"] if variant == "original" else a.methods.split(",")):
            root = Path(a.root) / f"{variant}-{method}"
            if comm.Get_rank() == 0:
                import shutil

                shutil.rmtree(root, ignore_errors=True)
                root.mkdir(parents=True)
            comm.Barrier()
            t0 = time.perf_counter()
            res = run(comm, grid, variant, steps, root=root, method=method, sync=not a.no_sync)
            bad = verify(comm, grid, res, root, steps) if a.verify else 0
            failed += bad
            if comm.Get_rank() == 0:
                print(f"{variant:10s} {res['method']:28s} {res['seconds']:8.3f} s  "
                      f"{res['bytes'] / MB / res['seconds']:8.1f} MB/s"
                      + (f"  verified ({bad} wrong values)" if a.verify else "")
                      + f"  [{time.perf_counter() - t0:.1f} s]", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
