"""CE-QUAL-ICM water-quality template (Cronk, Fagg, Moore: section 3.2).

CE-QUAL-ICM spreads the cells of an estuary over the ranks irregularly; each rank's
arrays hold its resident cells and, scattered among them, 20-35 % ghost cells (copies
of cells other ranks own).  Every simulated month it appends all resident cells of
all its arrays to the results.  Here: an ``nx x ny`` grid of cells numbered row by
row (the global order), partitioned with METIS or bisection; each rank keeps its cells
in column-major order with its ghosts (rings around its region, trimmed to the
requested fraction) in between, so memory order and file order differ, as in the
paper's figure 4.  Eight ``float32`` arrays (``T``, ``S``, ``DO``, ``NH4``, ``NO3``,
``PO4``, ``DOC``, ``ALG``); the value of array ``a`` in cell ``c`` at month ``m`` is
``field(a, c, m)``; a ghost holds last month's value (it is refreshed before the next
computation), so a ghost written by mistake would show.

Two mapping files describe the decomposition (written once by the pre-processor,
rank 0): ``resident.map`` (for every process, a flag per local cell: resident or ghost)
and ``global.map`` (for every process, the global cell of every local cell).  Both
ways of writing start from them:

* **SDM**: each rank reads its part of the maps, builds one :class:`sdm.MapArray` with
  the ghost mask, and every month writes the eight arrays through it into one group
  (level 3: one file, months appended, arrays in order).
* **original**: every month each process appends its whole arrays, ghosts included,
  in memory order, to its own file; after the run a sequential post-processor reads
  the two mapping files and, month by month and process by process, reads each
  process file, keeps the resident cells and puts them at their global positions,
  then writes the eight global arrays of the month to one global file.

Both give the same bytes: ``--verify`` compares the merged global file with SDM's data
file byte for byte (and both with values computed by numpy).

Run it under MPI::

    mpiexec -n 4 python -m sdm.examples.cequal --cells 300 --months 12 --original --verify
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from mpi4py import MPI

import sdm
from sdm import config
from sdm._collective import root_call

from . import meshes
from ._template import _connect_url
from ._irregular import (Phases, add_arguments, catalog_writes, compare_writes, exit_status, inputs_dir, parts_for,
                         print_catalog, print_phases, print_verdict, shared_result)

__all__ = ["APPLICATION", "ARRAYS", "Decomposition", "decompose", "write_maps", "read_maps", "monthly_values",
           "write_per_process", "post_process", "run", "main"]

APPLICATION = "CE-QUAL-ICM"
ARRAYS = ("T", "S", "DO", "NH4", "NO3", "PO4", "DOC", "ALG")
DTYPE = np.dtype("<f4")
GROUP = "monthly"


@dataclass(frozen=True)
class Decomposition:
    """One process's cells in memory order.

    Attributes
    ----------
    cells : numpy.ndarray
        Global cell of every local cell (int64).
    resident : numpy.ndarray
        ``True`` for resident cells, ``False`` for ghosts.
    """

    cells: np.ndarray
    resident: np.ndarray

    @property
    def ghost_fraction(self) -> float:
        return float(np.count_nonzero(~self.resident) / self.cells.size) if self.cells.size else 0.0


def _dilate(mask: np.ndarray) -> np.ndarray:
    out = mask.copy()
    out[1:] |= mask[:-1]
    out[:-1] |= mask[1:]
    out[:, 1:] |= mask[:, :-1]
    out[:, :-1] |= mask[:, 1:]
    return out


def _ghosts(own: np.ndarray, need: int, rng: np.random.Generator) -> np.ndarray:
    """Rings of cells around *own* (2-D mask) until *need* cells; the last ring sampled."""
    ghost = np.zeros_like(own)
    reach, have = own, 0
    while have < need:
        grown = _dilate(reach)
        ring = np.flatnonzero(grown & ~reach)
        if ring.size == 0:
            break
        take = ring if have + ring.size <= need else rng.choice(ring, need - have, replace=False)
        ghost.flat[take] = True
        have += take.size
        reach = grown
    return ghost


def decompose(nx: int, ny: int, nprocs: int, nparts: int | None = None, *, ghost_fraction: float = 0.25,
              partitioner: str = "auto", shuffle: int | None = None, seed: int = 0) -> tuple[list[Decomposition], str]:
    """Decompose an ``nx x ny`` cell grid over *nprocs* processes (the pre-processor).

    Parameters
    ----------
    nx, ny : int
        Cells along each side; cell ``(i, j)`` is global cell ``i * ny + j``.
    nprocs : int
        Processes (entries in the mapping files).
    nparts : int, optional
        Processes that get cells (default all; fewer leaves the last ones empty).
    ghost_fraction : float
        Ghost share of each local array (where enough neighbours exist).
    partitioner : {"auto", "metis", "rcb"}
    shuffle : int, optional
        Seed of a random memory order (default column-major, ghosts in between).
    seed : int
        Seed for the sampling of the outermost ghost ring.

    Returns
    -------
    (list of Decomposition, str)
        One decomposition per process, and the partitioner used.
    """
    if not 0.0 <= ghost_fraction < 1.0:
        raise ValueError(f"ghost_fraction must be in [0, 1), got {ghost_fraction}")
    nparts = nprocs if nparts is None else nparts
    grid = np.arange(nx * ny).reshape(nx, ny)
    edges = meshes.grid_edges((nx, ny), ((1, 0), (0, 1)))
    coords = np.stack(np.unravel_index(grid.ravel(), (nx, ny)), axis=1)
    part, used = meshes.partition_vector(nx * ny, edges, coords, nparts, partitioner)
    owner = part.reshape(nx, ny)
    rng = np.random.default_rng(seed)
    column_major = grid.T.ravel()  # memory order: by column, then row
    out = []
    for r in range(nprocs):
        own = owner == r
        need = int(round(ghost_fraction / (1.0 - ghost_fraction) * np.count_nonzero(own)))
        ghost = _ghosts(own, need, rng)
        local = (own | ghost).ravel()[column_major]
        cells = column_major[local]
        if shuffle is not None:
            cells = cells[np.random.default_rng(shuffle + r).permutation(cells.size)]
        out.append(Decomposition(cells.astype(np.int64), own.ravel()[cells]))
    return out, used


def write_maps(directory: Path, parts: Sequence[Decomposition]) -> None:
    """The two mapping files: ``resident.map`` (int8 flags) and ``global.map`` (int32 cells).

    Each starts with ``int32 nprocs`` and ``int32 n_local[nprocs]``; the processes'
    entries follow one after the other, in memory order.
    """
    directory.mkdir(parents=True, exist_ok=True)
    head = np.array([len(parts)] + [p.cells.size for p in parts], dtype="<i4").tobytes()
    for name, data in (("resident.map", [p.resident.astype("i1") for p in parts]),
                       ("global.map", [p.cells.astype("<i4") for p in parts])):
        tmp = directory / (name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(head)
            for a in data:
                f.write(a.tobytes())
        tmp.replace(directory / name)


def _map_sizes(path: Path) -> np.ndarray:
    n = int(np.fromfile(path, dtype="<i4", count=1)[0])
    return np.fromfile(path, dtype="<i4", count=n, offset=4).astype(np.int64)


def read_maps(directory: Path, rank: int | None = None) -> list[Decomposition]:
    """Read the mapping files: every process's decomposition, or only *rank*'s."""
    sizes = _map_sizes(directory / "resident.map")
    head = 4 * (1 + sizes.size)
    starts = np.concatenate([[0], np.cumsum(sizes)])
    ranks = range(sizes.size) if rank is None else [rank]
    out = []
    for r in ranks:
        n, at = int(sizes[r]), int(starts[r])
        flags = np.fromfile(directory / "resident.map", dtype="i1", count=n, offset=head + at)
        cells = np.fromfile(directory / "global.map", dtype="<i4", count=n, offset=head + 4 * at)
        out.append(Decomposition(cells.astype(np.int64), flags.astype(bool)))
    return out


def monthly_values(d: Decomposition, month: int) -> np.ndarray:
    """``(len(ARRAYS), n_local)`` float32 local arrays of *month*; ghosts hold last month's values."""
    out = np.empty((len(ARRAYS), d.cells.size), dtype=DTYPE)
    ghost = ~d.resident
    for k, name in enumerate(ARRAYS):
        out[k] = meshes.field(name, d.cells, month)
        out[k, ghost] = meshes.field(name, d.cells[ghost], month - 1)
    return out


def process_file(directory: Path, rank: int) -> Path:
    """The original's per-process output file."""
    return directory / f"proc{rank:04d}.out"


def write_per_process(directory: Path, rank: int, local: np.ndarray) -> None:
    """The original's monthly output: open the process file, append every whole array, close."""
    with open(process_file(directory, rank), "ab") as f:
        for row in local:
            f.write(row.tobytes())


def post_process(maps: Path, outputs: Path, months: int, n_cells: int, merged: Path, sync: bool = False) -> None:
    """The original's sequential post-processing: merge the process files into one global file.

    Reads the two mapping files; then for every month, for every process, reads that
    month's arrays from the process file, keeps the resident cells and stores them at
    their global positions; then writes the month's global arrays (in :data:`ARRAYS`
    order) to *merged*.
    """
    parts = read_maps(maps)
    with open(merged, "wb") as out:
        for month in range(months):
            glob = np.zeros((len(ARRAYS), n_cells), dtype=DTYPE)
            for p, d in enumerate(parts):
                n = d.cells.size
                with open(process_file(outputs, p), "rb") as f:
                    f.seek(month * len(ARRAYS) * n * DTYPE.itemsize)
                    data = np.fromfile(f, dtype=DTYPE, count=len(ARRAYS) * n).reshape(len(ARRAYS), n)
                glob[:, d.cells[d.resident]] = data[:, d.resident]
            out.write(glob.tobytes())
        if sync:
            out.flush()
            os.fsync(out.fileno())


def prepare(comm: MPI.Comm, directory: Path, nx: int, ny: int, nparts: int, ghost_fraction: float, partitioner: str,
            shuffle: int | None) -> tuple[Path, str]:
    """Rank 0 decomposes and writes the mapping files once (kept in *directory* for later runs)."""
    tag = f"cequal-{nx}x{ny}-p{comm.Get_size()}.{nparts}-g{ghost_fraction:g}-{partitioner}" + (
        f"-s{shuffle}" if shuffle is not None else "")
    maps = directory / tag

    def make() -> str:
        used = maps / "partitioner"
        if not used.exists():
            parts, kind = decompose(nx, ny, comm.Get_size(), nparts, ghost_fraction=ghost_fraction,
                                    partitioner=partitioner, shuffle=shuffle)
            write_maps(maps, parts)
            used.write_text(kind)
        return used.read_text()

    return maps, root_call(comm, make)


def _check(url: str, run_id: int, root: Path, level: int, merged: Path | None, n_cells: int, months: int) -> list[str]:
    """Rank 0: SDM's writes against numpy and, with the original, against the merged file."""
    ids = np.arange(n_cells)
    bad = compare_writes(url, run_id, root, lambda g, name, m: meshes.field(name, ids, m).astype(DTYPE))
    if merged is None:
        return bad
    whole = np.memmap(merged, dtype=DTYPE, mode="r").reshape(months, len(ARRAYS), n_cells)
    bad += compare_writes(url, run_id, root, lambda g, name, m: whole[m - 1, ARRAYS.index(name)])
    if level == 3:
        (path,) = {w.path for _, _, w in catalog_writes(url, run_id)}
        if (Path(root) / path).read_bytes() != merged.read_bytes():
            bad.append(f"SDM's data file {path} and the merged file {merged.name} differ")
    return bad


def run(
    comm: MPI.Comm,
    cells: int = 300,
    months: int = 12,
    level: int = 3,
    root: str | Path | None = None,
    catalog: str | None = None,
    verify: bool = False,
    *,
    inputs: str | Path | None = None,
    ghost_fraction: float = 0.25,
    partitioner: str = "auto",
    io_method: str = "auto",
    sdm_run: bool = True,
    original: bool = False,
    sync: bool | None = None,
    idle_last: bool = False,
    shuffle: int | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    """Run the CE-QUAL-ICM template on a ``cells x cells`` grid (collective).

    Parameters
    ----------
    comm : MPI.Comm
    cells : int
        Cells along each side of the grid.
    months : int
        Simulated months; all arrays are appended every month.
    level : {1, 2, 3}
    root, catalog, inputs, partitioner, io_method, idle_last, progress
        As for :func:`sdm.examples.fun3d.run`.
    verify : bool
        Compare SDM's files with numpy and, with *original*, with the merged file
        (byte for byte at level 3).
    ghost_fraction : float
        Ghost share of each local array (default 0.25).
    sdm_run : bool
        Write through SDM (phase ``sdm``).
    original : bool
        Also run the original way (phases ``per-process write`` and ``post-process``).
    sync : bool, optional
        SDM's sync before each commit, and an fsync of the merged file (default SDM's).
    shuffle : int, optional
        Seed of a random memory order of the local cells.

    Returns
    -------
    dict
        The same on every rank: ``run_id`` (None without *sdm_run*), ``phases``,
        ``ghost_fraction`` (of all local cells), ``merged`` (path), ``mismatches``.
    """
    rank, size = comm.Get_rank(), comm.Get_size()
    sync = config.sync_enabled() if sync is None else bool(sync)
    n_cells = cells * cells
    maps, kind = prepare(comm, inputs_dir(root, inputs), cells, cells, parts_for(comm, idle_last), ghost_fraction,
                         partitioner, shuffle)
    phases = Phases(comm)
    run_id = url = data_root = None
    if sdm_run:
        with phases("sdm", months * len(ARRAYS) * n_cells * DTYPE.itemsize):
            (mine,) = read_maps(maps, rank)
            s = sdm.open(APPLICATION, "w", comm=comm, root=root, catalog=catalog, method=io_method, sync=sync,
                         attributes={"cells": n_cells, "months": months, "ghost_fraction": ghost_fraction},
                         problem_size=[n_cells])
            try:
                g = s.make_group(GROUP, list(ARRAYS), dtype=DTYPE, shape=(n_cells,), level=level,
                                 view=sdm.MapArray(mine.cells, ghost=~mine.resident))
                for month in range(1, months + 1):
                    local = monthly_values(mine, month)  # the computation (inside: both ways pay it)
                    g.write_step(month, {name: local[k] for k, name in enumerate(ARRAYS)})  # one dump
                    if progress and rank == 0:
                        print(f"month {month}: appended {len(ARRAYS)} arrays through SDM", flush=True)
            finally:
                s.close()
        run_id, url, data_root = s.run_id, _connect_url(catalog, s.root), Path(s.root)
    merged = None
    if original:
        work = Path(root_call(comm, _original_dir, root, run_id))
        with phases("per-process write", months * len(ARRAYS) * n_cells * DTYPE.itemsize):
            (mine,) = read_maps(maps, rank)
            for month in range(1, months + 1):
                write_per_process(work, rank, monthly_values(mine, month))
        merged = work / "global.out"
        with phases("post-process", months * len(ARRAYS) * n_cells * DTYPE.itemsize):
            root_call(comm, post_process, maps, work, months, n_cells, merged, sync)
    bad = root_call(comm, _check, url, run_id, data_root, level, merged, n_cells, months) if verify and sdm_run else []
    local_cells = root_call(comm, lambda: sum(d.cells.size for d in read_maps(maps)))
    return shared_result(
        comm, url, run_id, application=APPLICATION, root=str(data_root) if data_root else None, nprocs=size,
        level=level, months=months, n_cells=n_cells, arrays=list(ARRAYS), partitioner=kind, sync=sync,
        ghost_fraction=1.0 - n_cells / local_cells if local_cells else 0.0, phases=phases.totals(),
        merged=str(merged) if merged else None, verified=verify and sdm_run, mismatches=len(bad), bad_files=bad,
    )


def _original_dir(root: str | Path | None, run_id: int | None) -> str:
    """A fresh directory for the original's files (rank 0)."""
    base = Path(root).resolve() if root is not None else config.default_root()
    n = 0
    while (d := base / f"cequal-original-{run_id if run_id is not None else 'x'}-{n}").exists():
        n += 1
    d.mkdir(parents=True)
    return str(d)


def print_report(result: dict[str, Any]) -> None:
    """The run as rich tables (call on rank 0)."""
    from rich.console import Console

    con = Console()
    con.print(f"[b]{result['application']}[/b] run {result['run_id']}: {result['n_cells']} cells, "
              f"{len(result['arrays'])} float32 arrays, {result['months']} months on {result['nprocs']} ranks "
              f"({result['partitioner']} partition, {100 * result['ghost_fraction']:.1f} % of the local cells are ghosts)")
    if "groups" in result:
        print_catalog(f"catalog contents (level {result['level']})", result["groups"])
    ph = result["phases"]
    notes = {"sdm": "map array with ghosts, months appended (end to end)",
             "per-process write": "whole arrays, ghosts included, memory order",
             "post-process": "sequential merge into one global file"}
    if "sdm" in ph and "post-process" in ph:
        orig = ph["per-process write"]["seconds"] + ph["post-process"]["seconds"]
        notes["post-process"] += f"; original total {orig:.3f} s = {orig / ph['sdm']['seconds']:.2f} x SDM"
    print_phases(f"monthly output on {result['nprocs']} ranks (sync {'on' if result['sync'] else 'off'})", ph, notes)
    print_verdict(result, "SDM's output equals numpy's" + (" and is byte-identical to the merged file" if result["merged"] else ""))


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point (run under mpiexec)."""
    p = argparse.ArgumentParser(prog="python -m sdm.examples.cequal", description=__doc__.splitlines()[0])
    p.add_argument("--cells", type=int, default=300, help="cells along each side of the grid (default 300)")
    add_arguments(p, steps=12, steps_help="simulated months (default 12)")
    p.add_argument("--ghosts", type=float, default=0.25, help="ghost share of each local array (default 0.25)")
    p.add_argument("--partitioner", choices=("auto", "metis", "rcb"), default="auto", help="cell partitioner")
    p.add_argument("--original", action="store_true", help="also run per-process files + sequential post-processing")
    a = p.parse_args(argv)
    comm = MPI.COMM_WORLD
    result = run(comm, a.cells, a.steps, a.level, a.root, a.catalog, a.verify, inputs=a.inputs, ghost_fraction=a.ghosts,
                 partitioner=a.partitioner, io_method=a.method, original=a.original, idle_last=a.idle_last,
                 progress=not a.quiet)
    return exit_status(comm, result, print_report)


if __name__ == "__main__":
    sys.exit(main())
