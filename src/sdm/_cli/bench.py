"""``sdm bench ncio``, ``sdm calibrate`` and ``sdm predict``: the planner's commands.

``bench ncio`` and ``calibrate`` run MPI: under ``mpiexec -n N sdm ...`` they use the
ranks they were started with; ``--np N`` starts ``mpiexec`` itself (the one next to
the Python interpreter, else the first on ``PATH``).  Only rank 0 prints and writes
files.  ``predict`` computes without I/O.  Nothing here imports MPI before a command
runs, so ``sdm ls`` and friends stay MPI-free.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from .. import config
from ..errors import SDMError

__all__ = ["register", "bench_app", "run_ncio", "run_calibration", "write_ncio", "fs_type"]

bench_app = typer.Typer(name="bench", help="Benchmarks of the I/O methods (MPI).", no_args_is_help=True,
                        add_completion=False, pretty_exceptions_enable=False)

NpOpt = Annotated[int | None, typer.Option("--np", metavar="N", help="Start N ranks with mpiexec "
                                           "(default: the ranks this command was started with).")]
CatalogOpt = Annotated[str | None, typer.Option("--catalog", "-c", metavar="URL",
                                                help="Catalog URL (default: $SDM_CATALOG, else SQLite in DIR).")]
HintOpt = Annotated[list[str] | None, typer.Option("--hint", metavar="KEY=VALUE",
                                                   help="MPI-IO or method hint (repeatable).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]


# ------------------------------------------------------------------------ helpers
def _console() -> Console:
    wide = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 200
    return Console(file=sys.stdout, width=wide, highlight=False)


class _Progress:
    """A progress bar on rank 0 (rich, from the first second); one line per step when not on a terminal.

    ``step(text, advance)`` moves it; ``total`` may grow (:meth:`extend`).  Other ranks
    get a silent one.
    """

    def __init__(self, con: Console | None, total: int, text: str) -> None:
        self.con, self.total, self.done, self.bar, self.task = con, total, 0, None, None
        if con is not None and con.is_terminal:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                TimeElapsedColumn(), console=con, transient=True)
            self.bar.start()
            self.task = self.bar.add_task(text, total=total)
        else:
            self._line(text)

    def _line(self, text: str) -> None:
        if self.con is not None:
            self.con.print(f"[{self.done}/{self.total}] {text}", highlight=False, markup=False)
            self.con.file.flush()

    def extend(self, steps: int) -> None:
        self.total += steps
        if self.bar is not None:
            self.bar.update(self.task, total=self.total)  # type: ignore[arg-type]

    def step(self, text: str, advance: int = 1) -> None:
        self.done += advance
        if self.bar is not None:
            self.bar.update(self.task, advance=advance, description=text)  # type: ignore[arg-type]
        else:
            self._line(text)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def _fail(message: str) -> None:
    err = Console(file=sys.stderr, highlight=False, soft_wrap=True)
    err.print(Text("error: ", style="bold red") + Text(message, style="red"))
    raise typer.Exit(2)


def _mpiexec() -> str:
    local = Path(sys.executable).parent / "mpiexec"
    found = str(local) if local.exists() else shutil.which("mpiexec")
    if not found:
        _fail("--np needs mpiexec next to the Python interpreter or on PATH")
    return found  # type: ignore[return-value]


def _launch(np_: int, argv: list[str]) -> None:
    """Run ``python -m sdm <argv>`` on *np_* ranks and exit with its status."""
    if np_ < 1:
        _fail(f"--np must be at least 1, got {np_}")
    code = subprocess.call([_mpiexec(), "-n", str(np_), sys.executable, "-m", "sdm", *argv])
    raise typer.Exit(code)


def _args(**options: Any) -> list[str]:
    """Command-line options from keyword values (``None``/``False`` left out)."""
    out = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            out.append(flag)
        elif isinstance(value, (list, tuple)):
            for v in value:
                out += [flag, str(v)]
        else:
            out += [flag, str(value)]
    return out


def _hints(items: list[str] | None) -> dict[str, str]:
    out = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"hint {item!r} must look like key=value")
        out[key.strip()] = value.strip()
    return out


def _catalog_url(catalog: str | None, directory: Path) -> str:
    return catalog or config.default_catalog_url(directory)


def _latest(url: str, target: str) -> dict[str, Any] | None:
    """The newest calibration stored for *target*, or None (no catalog file: None)."""
    from ..catalog import Catalog

    if url.startswith("sqlite:///") and not Path(url[len("sqlite:///"):]).is_file():
        return None
    cat = Catalog(url, create=False)
    try:
        return cat.latest_calibration(target)
    finally:
        cat.close()


def _save(url: str, target: Path, model: Any, samples: list, direct: dict) -> int:
    """Store a calibration of *target* in the catalog at *url*; returns its id."""
    from ..bench.calibrate import store

    return store(url, target, model, samples, direct)


def _meta(comm: Any, directory: Path, extra: dict[str, Any]) -> dict[str, Any]:
    from mpi4py import MPI

    from .. import __version__

    return {"sdm_version": __version__, "git_commit": _commit(), "load_now": os.getloadavg()[0],
            "nprocs": comm.Get_size(), "cores": os.cpu_count(), "directory": str(directory),
            "fs": fs_type(directory) or "unknown", "mpi": MPI.Get_library_version().splitlines()[0].strip(),
            "python": platform.python_version(), "host": platform.node(),
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), **extra}


def _commit() -> str:
    """The git commit of the SDM sources running (``+dirty`` with local changes), or 'unknown'."""
    here = str(Path(__file__).resolve().parent)
    try:
        head = subprocess.run(["git", "-C", here, "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "-C", here, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def fs_type(path: Path) -> str:
    """File system type of the mount holding *path* (Linux /proc/mounts), or ''."""
    try:
        best, kind, target = "", "", str(path.resolve())
        for line in Path("/proc/mounts").read_text().splitlines():
            parts = line.split()
            if len(parts) > 2 and target.startswith(parts[1]) and len(parts[1]) >= len(best):
                best, kind = parts[1], parts[2]
        return kind
    except OSError:
        return ""


# ----------------------------------------------------------------------- calibrate
def run_calibration(comm: Any, directory: Path, *, quick: bool, repeats: int | None, say: Any = None) -> tuple:
    """Calibrate *directory* on *comm* (collective); the label names the target."""
    from ..bench.calibrate import calibrate

    return calibrate(comm, directory, quick=quick, repeats=repeats, progress=say)


def calibrate_cmd(
    directory: Annotated[Path, typer.Argument(metavar="DIR", help="Directory (storage target) to measure.")],
    np_: NpOpt = None,
    catalog: CatalogOpt = None,
    quick: Annotated[bool, typer.Option("--quick", help="Fewer, smaller runs (seconds instead of ten).")] = False,
    repeats: Annotated[int | None, typer.Option("--repeats", help="Timed repeats per run (median; default 5).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Measure the cost-model constants of DIR and store them in the catalog."""
    if np_ is not None:
        _launch(np_, ["calibrate", str(directory), *_args(catalog=catalog, quick=quick, repeats=repeats,
                                                           json=as_json)])
    from mpi4py import MPI

    from ..bench.calibrate import REPEATS

    comm = MPI.COMM_WORLD
    directory = directory.resolve()
    rank0 = comm.Get_rank() == 0
    con = _console()
    bar = _Progress(con if rank0 and not as_json else None, 2 + (repeats or REPEATS),
                    f"calibrating {directory}: memory, open, sync, SDM overhead")
    try:
        model, samples, direct = run_calibration(comm, directory, quick=quick, repeats=repeats, say=bar.step)
    finally:
        bar.close()
    if not rank0:
        return
    url = _catalog_url(catalog, directory)
    try:
        row = _save(url, directory, model, samples, direct)
    except SDMError as exc:
        _fail(f"measured, but could not store the calibration in {url}: {exc}")
    if as_json:
        sys.stdout.write(json.dumps({"id": row, "target": str(directory), "catalog": url, **model.to_json()},
                                    indent=2) + "\n")
        return
    table = Table(title=f"calibration {row} of {directory} ({model.nprocs} ranks, {model.cores} cores)",
                  title_justify="left")
    table.add_column("constant")
    table.add_column("value", justify="right")
    for k, v in model.constants.items():
        table.add_row(k, f"{v:.3g}")
    con.print(table)
    con.print(f"stored in {url}; sessions with root={directory} use it for method='auto'")


# ------------------------------------------------------------------------- predict
def predict_cmd(
    shape: Annotated[str, typer.Option("--shape", help="Global shape of each dataset, e.g. 256x256x256.")],
    ranks: Annotated[int, typer.Option("--ranks", help="MPI ranks of the run.")] = 1,
    dtype: Annotated[str, typer.Option("--dtype", help="numpy dtype.")] = "f8",
    dist: Annotated[str, typer.Option("--dist", help="Access pattern: block, cyclic, '(Block, Block, *)'.")] = "block",
    datasets: Annotated[int, typer.Option("--datasets", help="Datasets written at each dump.")] = 1,
    every: Annotated[int, typer.Option("--every", help="Dump period (iterations).")] = 1,
    iterations: Annotated[int, typer.Option("--iterations", help="Iterations of the run.")] = 1,
    ghosts: Annotated[int, typer.Option("--ghosts", help="Ghost layer width of the local arrays.")] = 0,
    reads: Annotated[float, typer.Option("--reads", help="Expected reads of each written step.")] = 0.0,
    read_dist: Annotated[str | None, typer.Option("--read-dist", help="Access pattern of the reads.")] = None,
    order: Annotated[str, typer.Option("--order", help="Storage order C or F.")] = "C",
    sync: Annotated[bool, typer.Option("--sync/--no-sync", help="Sync every write to storage.")] = True,
    directory: Annotated[Path | None, typer.Option("--dir", help="Storage target whose calibration to use "
                                                   "(default: $SDM_ROOT or ./sdm-data).")] = None,
    catalog: CatalogOpt = None,
    hint: HintOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Predict the I/O time of a described run, per method and organization level."""
    from ..planner.model import CostModel
    from ..planner.predict import Workload, parse_shape, predict

    target = (directory or config.default_root()).resolve()
    try:
        w = Workload(parse_shape(shape), dtype, dist, datasets, every, iterations, ranks, ghosts, reads,
                     read_dist, order, sync)
        record = _latest(_catalog_url(catalog, target), str(target))
        model = CostModel.from_calibration(record)
        hints = _hints(hint)
        result = predict(w, model, hints={"frequency": reads} if reads else None, mpi_hints=hints)
    except (ValueError, SDMError) as exc:
        _fail(str(exc))
    if as_json:
        sys.stdout.write(json.dumps(result, indent=2, default=str) + "\n")
        return
    con = _console()
    wl = result["workload"]
    con.print(f"{wl['writes']} writes of {wl['bytes_per_write'] / 1e6:.3g} MB ({datasets} datasets x "
              f"{wl['dumps']} dumps) by {ranks} ranks, {dist}; "
              + ("no reads" if not reads else f"{reads:g} reads per step, {read_dist or dist}"))
    if not result["calibrated"]:
        con.print(Text(f"no calibration for {target}: built-in defaults (run `sdm calibrate {target}`)",
                       style="yellow"))
    else:
        con.print(f"model: {result['model']}")
    table = Table(title="predicted I/O time of the run (seconds)", title_justify="left")
    for col in ("method", "per write", "per read", "level 1", "level 2", "level 3"):
        table.add_column(col, justify="left" if col == "method" else "right")
    for r in result["rows"]:
        name = r["method"] if r["method"] != "auto" else f"auto ({r['write_method']}" + (
            f"/{r['read_method']})" if r["read_method"] else ")")
        table.add_row(name, f"{r['per_write']:.4g}", "-" if r["per_read"] is None else f"{r['per_read']:.4g}",
                      *(f"{r['total'][lv]:.4g}" for lv in (1, 2, 3)))
    con.print(table)
    con.print(Text(result["auto"]["write"], style="dim"))


# ---------------------------------------------------------------------- bench ncio
@bench_app.command("ncio")
def ncio_cmd(
    np_: NpOpt = None,
    directory: Annotated[Path | None, typer.Option("--dir", help="Directory for the scratch files "
                                                   "(default: a new temporary directory under $SDM_ROOT).")] = None,
    out: Annotated[Path, typer.Option("--out", help="Where ncio.json/.md/.png go.")] = Path("ncio-results"),
    quick: Annotated[bool, typer.Option("--quick", help="Tiny sweeps, one repeat (a smoke test).")] = False,
    repeats: Annotated[int | None, typer.Option("--repeats", help="Timed repeats (default 5; 1 with --quick).")] = None,
    sweep: Annotated[list[str] | None, typer.Option("--sweep", help="Sweeps to run: size, count, spacing, "
                                                    "contiguity (repeatable; default all).")] = None,
    method: Annotated[list[str] | None, typer.Option("--method", help="Methods (repeatable; default all).")] = None,
    calibrate: Annotated[bool, typer.Option("--calibrate", help="Calibrate DIR first and store it "
                                            "(otherwise the stored calibration is used, if any).")] = False,
    catalog: CatalogOpt = None,
    hint: HintOpt = None,
) -> None:
    """The NCIO benchmark: every method against region count, size and spacing."""
    if np_ is not None:
        _launch(np_, ["bench", "ncio", *_args(dir=directory, out=out, quick=quick, repeats=repeats, sweep=sweep,
                                               method=method, calibrate=calibrate, catalog=catalog, hint=hint)])
    from mpi4py import MPI

    from ..bench import ncio
    from ..planner.model import METHODS

    names = tuple(sweep or ncio.SWEEP_NAMES)
    methods = tuple(method or METHODS)
    bad = [n for n in names if n not in ncio.SWEEP_NAMES] + [m for m in methods if m not in METHODS]
    if bad:
        _fail(f"unknown sweeps or methods {bad}; sweeps: {list(ncio.SWEEP_NAMES)}, methods: {list(METHODS)}")
    run_ncio(MPI.COMM_WORLD, directory, out, quick=quick, repeats=repeats, sweeps=names, methods=methods,
             calibrate=calibrate, catalog=catalog, hints=_hints(hint))


def run_ncio(comm: Any, directory: Path | None, out: Path, *, quick: bool = False, repeats: int | None = None,
             sweeps: tuple[str, ...] | None = None, methods: tuple[str, ...] | None = None, calibrate: bool = False,
             catalog: str | None = None, hints: dict[str, str] | None = None) -> None:
    """Run the NCIO sweeps on *comm* and write the results in *out* (collective; rank 0 prints)."""
    from ..bench import ncio
    from ..bench.measure import WARM_BYTES, steady_memory
    from ..planner.model import METHODS

    rank0 = comm.Get_rank() == 0
    con = _console()
    names, methods = tuple(sweeps or ncio.SWEEP_NAMES), tuple(methods or METHODS)
    plan = ncio.sweeps(quick, names)
    reps = repeats or (1 if quick else 5)
    bar = _Progress(con if rank0 else None, ncio.steps(plan, methods), "NCIO: warming memory")
    temp = None
    if directory is None:
        temp = comm.bcast(tempfile.mkdtemp(prefix="sdm-ncio-", dir=_ensure(config.default_root()))
                          if rank0 else None, root=0)
    target = Path(temp or directory).resolve()
    load_before = os.getloadavg()[0]
    try:
        with steady_memory(comm, WARM_BYTES // 8 if quick else WARM_BYTES):
            model, calibration = _model_for(comm, target, catalog, calibrate, quick, con if rank0 else None, bar)
            rows = ncio.run(comm, target, plan, methods=methods, repeats=reps, model=model, hints=hints or {},
                            progress=bar.step if rank0 else None)
            if calibration:  # the same samples again: how far the machine drifted meanwhile
                calibration["after"] = _retime(comm, target, model, quick, bar)
    finally:
        bar.close()
        comm.Barrier()
        if temp and rank0:
            shutil.rmtree(temp, ignore_errors=True)
    if not rank0:
        return
    meta = _meta(comm, target, {"repeats": reps, "methods": list(methods), "sweeps": list(names), "quick": quick,
                                "model": model.label, "load_before": load_before, "load_after": os.getloadavg()[0]})
    if calibration.get("after"):
        meta["calibration_drift"] = ncio.drift([s["seconds"] for s in calibration["samples"]],
                                               [s["seconds"] for s in calibration["after"]])
    write_ncio(rows, meta, model, out, calibration)
    con.print(f"wrote {out}/ncio.json, ncio.md, ncio.png")


def _retime(comm: Any, target: Path, model: Any, quick: bool, bar: _Progress) -> list[dict[str, Any]]:
    """The calibration's method samples timed again, as the calibration timed them (collective)."""
    from ..bench.calibrate import QUICK_RUNS, REPEATS, RUNS, measure_runs

    rounds = 1 if quick else REPEATS
    bar.extend(rounds)
    samples = measure_runs(comm, target, QUICK_RUNS if quick else RUNS, rounds, dict(model.romio),
                           progress=lambda text: bar.step(f"calibration samples again: {text}"))
    return [s.as_dict() for s in samples]


def _ensure(path: Path) -> str:
    path.mkdir(parents=True, exist_ok=True)
    return str(path)


def _model_for(comm: Any, target: Path, catalog: str | None, fresh: bool, quick: bool,
               con: Console | None, bar: _Progress) -> tuple[Any, dict[str, Any]]:
    """The stored calibration of *target*, or a fresh one (stored), or the defaults; with the
    fresh calibration's direct timings and samples (empty otherwise)."""
    from ..planner.model import CostModel

    rank0 = comm.Get_rank() == 0
    url = _catalog_url(catalog, target)
    if fresh:
        from ..bench.calibrate import REPEATS

        bar.extend(3 + (1 if quick else REPEATS))
        bar.step(f"calibrating {target}")
        model, samples, direct = run_calibration(comm, target, quick=quick, repeats=1 if quick else None,
                                                 say=lambda text: bar.step(f"calibrating: {text}"))
        if rank0:
            row = _save(url, target, model, samples, direct)
            if con is not None:
                con.print(f"calibration {row} stored in {url}")
        return model, {"direct": direct, "samples": [s.as_dict() for s in samples]}
    record = comm.bcast(_latest(url, str(target)) if rank0 else None, root=0)
    return CostModel.from_calibration(record), {}


def write_ncio(rows: list[dict[str, Any]], meta: dict[str, Any], model: Any, out: Path,
               calibration: dict[str, Any] | None = None) -> None:
    """ncio.json (every sample, and the samples of a fresh calibration), ncio.md (tables and
    goals) and ncio.png in *out*."""
    from ..bench import ncio

    out.mkdir(parents=True, exist_ok=True)
    summary = ncio.summarize(rows)
    (out / "ncio.json").write_text(json.dumps({"meta": meta, "model": model.to_json(), "calibration": calibration or {},
                                               "summary": summary, "goals": ncio.goals(summary), "rows": rows},
                                              separators=(",", ":"), default=str))  # compact: results stay small
    (out / "ncio.md").write_text(ncio.markdown(summary, meta))
    ncio.plot(summary, meta, out / "ncio.png")


def register(app: typer.Typer) -> None:
    """Add ``bench``, ``calibrate`` and ``predict`` to the ``sdm`` command."""
    app.add_typer(bench_app, name="bench")
    app.command("calibrate")(calibrate_cmd)
    app.command("predict")(predict_cmd)
