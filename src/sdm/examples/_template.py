"""The driver the application templates share (ASTRO3D, Euler) and the benchmarks use.

A template is a list of :class:`GroupSpec` (datasets, dtype, shape, dump period, and the
function of its values); :func:`run_template` writes every group at its dump steps
through SDM, optionally reads everything back on another data view and checks every
value against that function (:func:`pattern` unless the group names another; a pure
function of dataset name, step and global index, so any rank of any decomposition can
regenerate what it reads), and reports bandwidths with the share of the time spent in
the catalog (:class:`CatalogClock`).
"""

from __future__ import annotations

import argparse
import importlib.util
import shlex
import sys
import time
import zlib
from contextlib import contextmanager
from dataclasses import dataclass
from functools import wraps
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np
from mpi4py import MPI

import sdm
from sdm import config
from sdm.catalog import Catalog
from sdm.layout import Block, Cyclic, Distribution, default_grid

__all__ = [
    "next_commands",
    "MB",
    "READ_VIEWS",
    "GroupSpec",
    "pattern",
    "CatalogClock",
    "Stopwatch",
    "make_view",
    "run_template",
    "add_common_arguments",
    "print_report",
    "finish",
]

MB = 1e6  # bandwidths are reported in MB/s with 1 MB = 10**6 bytes
READ_VIEWS = ("same", "slab", "cyclic")


@dataclass(frozen=True)
class GroupSpec:
    """One data group of a template.

    Attributes
    ----------
    name : str
        Group name.
    datasets : tuple of str
        Dataset names, in order.
    dtype : str
        numpy dtype of every dataset.
    shape : tuple of int
        Global shape of every dataset.
    every : int
        Dump period in time steps.
    split : int
        Leading dimensions distributed over the process grid (the rest stay whole,
        e.g. the 5 components of the Euler solution).
    values : callable, optional
        ``values(name, step, indices, shape, dtype)``: the values of a dataset at a step
        on the box ``indices`` (global indices per dimension), with the signature of
        :func:`pattern` (the default).
    """

    name: str
    datasets: tuple[str, ...]
    dtype: str
    shape: tuple[int, ...]
    every: int
    split: int = 3
    values: Callable[..., np.ndarray] | None = None

    @property
    def nbytes(self) -> int:
        """Bytes of one dataset at one step."""
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize

    def value(self, name: str, step: int, indices: Sequence[np.ndarray]) -> np.ndarray:
        """The values of dataset *name* at *step* on the box *indices* (see ``values``)."""
        return (self.values or pattern)(name, step, indices, self.shape, self.dtype)

    def dump_steps(self, steps: int) -> list[int]:
        """Steps in ``1 .. steps`` at which the group is dumped."""
        return list(range(self.every, steps + 1, self.every))


def pattern(name: str, step: int, indices: Sequence[np.ndarray], shape: Sequence[int], dtype: Any) -> np.ndarray:
    """Deterministic values of *name* at *step* on the box ``indices`` of a C-order array.

    ``h = (flat * 2654435761 + crc32(name) + 40503 * step) mod 2**24`` where ``flat`` is
    the element's C-order index in the global array; floats hold ``h / 16`` (exact in
    float32), integers the low bits of ``h``.

    Parameters
    ----------
    name : str
        Dataset name.
    step : int
        Time step.
    indices : sequence of numpy.ndarray
        Global indices along each dimension (a :class:`~sdm.layout.Piece`'s ``indices``).
    shape : sequence of int
        Global shape.
    dtype : numpy dtype-like

    Returns
    -------
    numpy.ndarray
        Shape ``tuple(len(i) for i in indices)``.
    """
    ndim = len(shape)
    flat = np.zeros((1,) * ndim, dtype=np.uint64)
    stride = 1
    for d in range(ndim - 1, -1, -1):
        idx = np.asarray(indices[d], dtype=np.uint64).reshape([-1 if k == d else 1 for k in range(ndim)])
        flat = flat + idx * np.uint64(stride)
        stride *= int(shape[d])
    flat = np.broadcast_to(flat, tuple(len(i) for i in indices))
    salt = np.uint64((zlib.crc32(name.encode()) + 40503 * int(step)) % 2**64)
    h = (flat * np.uint64(2654435761) + salt) & np.uint64(0xFFFFFF)
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return h.astype(dt) * dt.type(0.0625)
    return h.astype(dt)


class CatalogClock:
    """Time spent in :class:`sdm.Catalog` methods (rank 0 is the only rank calling them).

    :meth:`installed` wraps every public method of the class (and ``__init__``, the
    connection) with a timer for the duration of a ``with`` block; nested catalog calls
    count once.  The library code is not changed.
    """

    def __init__(self) -> None:
        self.seconds = 0.0
        self.calls = 0
        self._depth = 0

    def reset(self) -> tuple[float, int]:
        """Return ``(seconds, calls)`` so far and start again from zero."""
        out = (self.seconds, self.calls)
        self.seconds, self.calls = 0.0, 0
        return out

    def _wrap(self, fn: Callable) -> Callable:
        @wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if self._depth:
                return fn(*args, **kwargs)
            self._depth += 1
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - t0
                self.calls += 1
                self._depth -= 1

        return timed

    @contextmanager
    def installed(self) -> Iterator["CatalogClock"]:
        """Wrap the Catalog methods while the block runs."""
        names = [k for k, v in vars(Catalog).items() if callable(v) and (k == "__init__" or not k.startswith("_"))]
        saved = {k: vars(Catalog)[k] for k in names}
        for k, fn in saved.items():
            setattr(Catalog, k, self._wrap(fn))
        try:
            yield self
        finally:
            for k, fn in saved.items():
                setattr(Catalog, k, fn)


class Stopwatch:
    """Accumulates wall time of barrier-aligned sections (data generation stays outside)."""

    def __init__(self, comm: MPI.Comm) -> None:
        self.comm = comm
        self.seconds = 0.0

    @contextmanager
    def __call__(self) -> Iterator[None]:
        self.comm.Barrier()
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds += time.perf_counter() - t0

    def total(self) -> float:
        """Slowest rank's time (collective)."""
        return self.comm.allreduce(self.seconds, op=MPI.MAX)


def make_view(kind: str, spec: GroupSpec, nprocs: int, ghosts: int = 0) -> Distribution:
    """A data view for a group's datasets.

    Parameters
    ----------
    kind : {"block", "same", "slab", "cyclic"}
        ``block``/``same``: blocks over a balanced grid on the ``split`` leading
        dimensions (the writer's view); ``slab``: blocks along the last split
        dimension only (another grid); ``cyclic``: round-robin over the balanced grid.
    spec : GroupSpec
    nprocs : int
    ghosts : int
        Ghost width around each block (block views only).
    """
    grid = list(default_grid(nprocs, spec.split))
    if kind == "slab":
        grid = [1] * (spec.split - 1) + [nprocs]
    grid += [1] * (len(spec.shape) - spec.split)
    if kind in ("block", "same"):
        return Block(grid=grid, ghosts=[ghosts] * spec.split + [0] * (len(spec.shape) - spec.split))
    if kind == "slab":
        return Block(grid=grid)
    if kind == "cyclic":
        return Cyclic(grid=grid)
    raise ValueError(f"unknown view {kind!r}; choose one of block, {', '.join(READ_VIEWS)}")


def _local(group: sdm.Group, spec: GroupSpec, name: str, step: int) -> np.ndarray:
    """This rank's local array (ghosts included, ghosts filled with a marker)."""
    piece = group.piece(name)
    values = spec.value(name, step, piece.indices)
    if not piece.has_ghosts:
        return np.ascontiguousarray(values)
    out = np.full(piece.memory_shape, 7, dtype=spec.dtype)
    out[piece.interior] = values
    return out


def _say(comm: MPI.Comm, progress: bool, text: str) -> None:
    if progress and comm.Get_rank() == 0:
        print(text, flush=True)


def run_template(
    comm: MPI.Comm,
    application: str,
    groups: Sequence[GroupSpec],
    steps: int,
    level: int = 3,
    root: str | Path | None = None,
    catalog: str | None = None,
    verify: bool = False,
    *,
    method: str = "auto",
    read: bool = True,
    read_view: str = "slab",
    ghosts: int = 0,
    sync: bool | None = None,
    attributes: dict[str, Any] | None = None,
    problem_size: Any = None,
    progress: bool = False,
) -> dict[str, Any]:
    """Write every group at its dump steps through SDM, read it back, and measure.

    Collective over *comm*.  Write time runs from ``sdm.open`` to ``Session.close``
    (file opens, syncs and catalog commits included; data generation excluded); read
    time likewise for a second, read-only session.  Catalog time is rank 0's time
    inside :class:`sdm.Catalog` methods (connection included).

    Parameters
    ----------
    comm : MPI.Comm
    application : str
    groups : sequence of GroupSpec
    steps : int
        Time steps ``1 .. steps`` are simulated.
    level : {1, 2, 3}
        File organization level of every group.
    root : str or Path, optional
        Data root (default: SDM's).
    catalog : str, optional
        Catalog URL (default: SQLite in the data root).
    verify : bool
        Compare every value read with the group's values (:attr:`GroupSpec.values`; and check SDM's checksums).
    method : str
        SDM I/O method.
    read : bool
        Read everything back (implied by *verify*).
    read_view : {"same", "slab", "cyclic"}
        Distribution of the reading session (see :func:`make_view`).
    ghosts : int
        Ghost layer width of the writers' blocks.
    sync : bool, optional
        Sync before each catalog commit (default: SDM's).
    attributes : dict, optional
        Run attributes.
    problem_size : object, optional
    progress : bool
        Print a line per dump on rank 0.

    Returns
    -------
    dict
        The same on every rank: ``run_id``, ``files``, ``writes``, ``bytes_written``,
        ``write_seconds``, ``write_mbps``, ``write_catalog_seconds``,
        ``write_catalog_share``, the same ``read_*`` keys, ``mismatches``, ``groups``
        (per-group catalog summary) and the parameters.
    """
    rank, size = comm.Get_rank(), comm.Get_size()
    read = read or verify
    clock = CatalogClock()
    tw, tr = Stopwatch(comm), Stopwatch(comm)
    nwrites = nbytes = 0
    with clock.installed():
        with tw():
            s = sdm.open(application, "w", comm=comm, root=root, catalog=catalog, method=method, sync=sync,
                         attributes=attributes, problem_size=problem_size)
        try:
            handles = {}
            with tw():
                for spec in groups:
                    handles[spec.name] = s.make_group(spec.name, list(spec.datasets), dtype=spec.dtype,
                                                      shape=spec.shape, level=level,
                                                      view=make_view("block", spec, size, ghosts))
            for step in range(1, steps + 1):
                for spec in groups:
                    if step % spec.every:
                        continue
                    g, t0 = handles[spec.name], tw.seconds
                    dump = {name: _local(g, spec, name, step) for name in spec.datasets}
                    with tw():
                        g.write_step(step, dump)  # the group's datasets as one dump
                    nwrites, nbytes = nwrites + len(dump), nbytes + len(dump) * spec.nbytes
                    _say(comm, progress, f"step {step:4d}  wrote {spec.name:<14s} {len(spec.datasets)} x "
                         f"{spec.nbytes / MB:8.2f} MB in {tw.seconds - t0:7.3f} s")
        finally:
            with tw():
                s.close()
        run_id, url = s.run_id, _connect_url(catalog, s.root)
        write_cat = clock.reset()

        nreads = rbytes = mismatches = 0
        if read:
            with tr():
                r = sdm.open(application, "r", comm=comm, catalog=url, run=run_id, method=method)
            try:
                for spec in groups:
                    with tr():
                        g = r.group(spec.name)
                        g.data_view(make_view(read_view, spec, size))
                    t0 = tr.seconds
                    for name in spec.datasets:
                        piece = g.piece(name)
                        out = np.empty(piece.memory_shape, dtype=spec.dtype)
                        for step in g.steps(name):
                            with tr():
                                g.read(name, step, out=out, verify=verify)
                            nreads, rbytes = nreads + 1, rbytes + spec.nbytes
                            if verify:
                                want = spec.value(name, step, piece.indices)
                                mismatches += int(np.count_nonzero(out[piece.interior] != want))
                    _say(comm, progress, f"read  {spec.name:<14s} {len(spec.datasets)} datasets in "
                         f"{tr.seconds - t0:7.3f} s")
            finally:
                with tr():
                    r.close()
        read_cat = clock.reset()

    write_s, read_s = tw.total(), tr.total()
    mismatches = comm.allreduce(mismatches, op=MPI.SUM)
    result = None
    if rank == 0:
        result = dict(
            application=application, run_id=run_id, catalog=s.catalog_url, root=str(s.root), nprocs=size, level=level,
            steps=steps, method=method, read_view=read_view if read else None, verified=verify,
            writes=nwrites, bytes_written=nbytes, write_seconds=write_s,
            write_mbps=nbytes / MB / write_s if write_s else 0.0,
            write_catalog_seconds=write_cat[0], write_catalog_calls=write_cat[1],
            write_catalog_share=write_cat[0] / write_s if write_s else 0.0,
            reads=nreads, bytes_read=rbytes, read_seconds=read_s,
            read_mbps=rbytes / MB / read_s if read_s else 0.0,
            read_catalog_seconds=read_cat[0], read_catalog_calls=read_cat[1],
            read_catalog_share=read_cat[0] / read_s if read_s else 0.0,
            mismatches=mismatches,
            **_catalog_summary(url, run_id),
        )
    return comm.bcast(result, root=0)


def _connect_url(catalog: str | None, root: str | Path) -> str:
    """The URL a session opened with ``catalog=`` connected to (``Session.catalog_url`` masks its password)."""
    return catalog or config.default_catalog_url(Path(root))


def _catalog_summary(url: str, run_id: int) -> dict[str, Any]:
    """What the catalog holds about a run: per-group datasets, steps, files, bytes."""
    cat = Catalog(url, create=False)
    try:
        writes, files = cat.writes(run_id), cat.files(run_id)
    finally:
        cat.close()
    groups: dict[str, dict[str, Any]] = {}
    for gname, dname, w in writes:
        g = groups.setdefault(gname, {"group": gname, "datasets": set(), "steps": set(), "files": set(),
                                      "writes": 0, "bytes": 0})
        g["datasets"].add(dname)
        g["steps"].add(w.step)
        g["files"].add(w.path)
        g["writes"] += 1
        g["bytes"] += w.nbytes
    rows = [
        {**g, "datasets": sorted(g["datasets"]), "steps": sorted(g["steps"]), "files": len(g["files"])}
        for g in groups.values()
    ]
    return {"files": len(files), "file_paths": [f.path for f in files], "groups": rows}


def print_report(result: dict[str, Any]) -> None:
    """Print the catalog contents and the bandwidths as rich tables (call on rank 0)."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    t = Table(title=f"{result['application']} run {result['run_id']}: catalog contents (level {result['level']})")
    for col in ("group", "datasets", "steps", "writes", "files", "MB"):
        t.add_column(col, justify="left" if col in ("group", "datasets", "steps") else "right")
    for g in result["groups"]:
        ds = g["datasets"]
        t.add_row(g["group"], f"{len(ds)}: {', '.join(ds)}", ", ".join(map(str, g["steps"])), str(g["writes"]),
                  str(g["files"]), f"{g['bytes'] / MB:.1f}")
    t.add_row("[b]total", "", "", f"[b]{result['writes']}", f"[b]{result['files']}",
              f"[b]{result['bytes_written'] / MB:.1f}")
    console.print(t)
    b = Table(title=f"I/O on {result['nprocs']} ranks, method {result['method']}")
    for col in ("phase", "MB", "seconds", "MB/s", "catalog s", "catalog calls", "catalog share"):
        b.add_column(col, justify="left" if col == "phase" else "right")
    for phase in ("write", "read"):
        if phase == "read" and not result["reads"]:
            continue
        nb = result["bytes_written" if phase == "write" else "bytes_read"]
        label = phase if phase == "write" else f"read/{result['read_view']}"
        b.add_row(label, f"{nb / MB:.1f}", f"{result[f'{phase}_seconds']:.3f}", f"{result[f'{phase}_mbps']:.1f}",
                  f"{result[f'{phase}_catalog_seconds']:.3f}", str(result[f"{phase}_catalog_calls"]),
                  f"{100 * result[f'{phase}_catalog_share']:.1f} %")
    console.print(b)
    if result["verified"]:
        ok = result["mismatches"] == 0
        console.print(("[green]verified:" if ok else "[red]MISMATCH:")
                      + f" {result['reads']} reads, {result['mismatches']} wrong values")


def add_common_arguments(p: argparse.ArgumentParser) -> None:
    """Options shared by the templates."""
    p.add_argument("--level", type=int, choices=(1, 2, 3), default=3, help="file organization level")
    p.add_argument("--root", default=None, help="data root (default $SDM_ROOT or ./sdm-data)")
    p.add_argument("--catalog", default=None, help="catalog URL (default sqlite in the data root)")
    p.add_argument("--verify", action="store_true", help="read everything back and compare every value")
    p.add_argument("--no-read", action="store_true", help="skip the read phase")
    p.add_argument("--read-view", choices=READ_VIEWS, default="slab",
                   help="distribution of the reader (default slab: another process grid)")
    p.add_argument("--method", default="auto", help="SDM I/O method")
    p.add_argument("--ghosts", type=int, default=0, help="ghost layer width of the writers' blocks")
    p.add_argument("--quiet", action="store_true", help="no progress lines")


def next_commands(result: dict[str, Any], cwd: Path | None = None) -> list[str]:
    """The ``sdm`` commands that show the run just made, exactly as they can be pasted.

    The catalog is named on each command (``--catalog demo-data/catalog.db``: a path
    relative to *cwd* when it lies below it), so they find the run whatever
    ``SDM_ROOT`` says; the ``sdm`` program is the one beside this Python
    (``.venv/bin/sdm``), else ``python -m sdm``.
    """
    cwd = Path.cwd() if cwd is None else cwd

    def shown(path: Path) -> str:
        return str(path.relative_to(cwd)) if path.is_relative_to(cwd) else str(path)

    url = str(result["catalog"])
    catalog = shown(Path(url[len("sqlite:///"):])) if url.startswith("sqlite:///") else url
    program = Path(sys.executable).parent / "sdm"
    sdm_cmd = shown(program) if program.is_file() else f"{shown(Path(sys.executable))} -m sdm"
    run, where = result["run_id"], f"--catalog {shlex.quote(catalog)}"
    first = result["groups"][0] if result["groups"] else None
    commands = [f"{sdm_cmd} ls {shlex.quote(result['application'])} {where}",
                f"{sdm_cmd} show {run} --writes {where}",
                f"{sdm_cmd} verify {run} {where}"]
    if first is not None:
        name, step = first["datasets"][0], first["steps"][-1]
        plot = f"{sdm_cmd} plot {run} {shlex.quote(first['group'] + '/' + name)} --step {step} {where}"
        if importlib.util.find_spec("matplotlib") is None:  # make demo installs the runtime alone
            plot += "   # after `make analysis` (matplotlib)"
        commands.append(plot)
    return commands


def finish(comm: MPI.Comm, result: dict[str, Any]) -> int:
    """Print the report on rank 0 and the commands that show the run; return the exit status (1: values mismatched)."""
    if comm.Get_rank() == 0:
        print_report(result)
        print("\nThe run in the catalog:")
        for line in next_commands(result):
            print("  " + line)
    return 1 if result["mismatches"] else 0
