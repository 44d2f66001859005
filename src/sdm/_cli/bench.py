"""``sdm bench ncio``, ``sdm calibrate`` and ``sdm predict``: the planner's commands.

``bench ncio`` and ``calibrate`` run MPI: under ``mpiexec -n N sdm ...`` they use the
ranks they were started with; ``--np N`` starts ``mpiexec`` itself (the one next to
the Python interpreter, else the first on ``PATH``).  Only rank 0 prints and writes
files.  ``predict`` computes without I/O.  Nothing here imports MPI before a command
runs, so ``sdm ls`` and friends stay MPI-free.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from .. import config
from ..urls import mask_urls, redact_url
from ..errors import CalibrationError, SDMError
from ..storage.mounts import fs_type

if TYPE_CHECKING:  # rich loads when a command prints (never for --help)
    from rich.console import Console

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
    from rich.console import Console

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
    from rich.console import Console
    from rich.text import Text

    err = Console(file=sys.stderr, highlight=False, soft_wrap=True)
    err.print(Text("error: ", style="bold red") + Text(mask_urls(message), style="red"))
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
    return config.catalog_url(catalog) if catalog else config.default_catalog_url(directory)


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


def _meta(comm: Any, extra: dict[str, Any]) -> dict[str, Any]:
    """The SDM version and commit, ranks, host facts and date of a run, with *extra*."""
    from mpi4py import MPI

    from .. import __version__

    return {"sdm_version": __version__, "git_commit": _commit(), "nprocs": comm.Get_size(),
            "cores": os.cpu_count(), "mpi": MPI.Get_library_version().splitlines()[0].strip(),
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


# ----------------------------------------------------------------------- calibrate
def run_calibration(comm: Any, directory: Path, *, quick: bool, repeats: int | None, say: Any = None) -> tuple:
    """Calibrate *directory* on *comm* (collective); the label names the target."""
    from ..bench.calibrate import calibrate

    return calibrate(comm, directory, quick=quick, repeats=repeats, progress=say)


def calibrate_cmd(
    target: Annotated[str, typer.Argument(metavar="DIR|s3://BUCKET/PREFIX",
                                          help="Directory (storage target) or object store to measure.")],
    np_: NpOpt = None,
    catalog: CatalogOpt = None,
    quick: Annotated[bool, typer.Option("--quick", help="Fewer, smaller runs (seconds instead of ten).")] = False,
    repeats: Annotated[int | None, typer.Option("--repeats", help="Timed repeats per run (median; default 5).")] = None,
    endpoint: Annotated[str | None, typer.Option(
        "--endpoint", metavar="URL", help="s3://: the server (default $SDM_S3_ENDPOINT or $AWS_ENDPOINT_URL).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Measure the cost-model constants of DIR (or of the archive tier's object store) and store them in the catalog."""
    from rich.table import Table

    if target.startswith("s3://"):
        _calibrate_archive(target, catalog, quick, repeats, endpoint, as_json)
        return
    directory = Path(target)
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
    except CalibrationError as exc:  # measured, but unusable: said, and not stored
        _fail(f"calibration of {directory} not stored: {exc}")
    except SDMError as exc:
        _fail(f"measured, but could not store the calibration in {redact_url(url)}: {exc}")
    if as_json:
        sys.stdout.write(json.dumps({"id": row, "target": str(directory), "catalog": redact_url(url), **model.to_json()},
                                    indent=2) + "\n")
        return
    table = Table(title=f"calibration {row} of {directory} ({model.nprocs} ranks, {model.cores} cores)",
                  title_justify="left")
    table.add_column("constant")
    table.add_column("value", justify="right")
    for k, v in model.constants.items():
        table.add_row(k, f"{v:.3g}")
    con.print(table)
    con.print(f"stored in {redact_url(url)}; sessions with root={directory} use it for method='auto'")


def _calibrate_archive(url: str, catalog: str | None, quick: bool, repeats: int | None, endpoint: str | None,
                       as_json: bool) -> None:
    """``sdm calibrate s3://...``: the remote model's constants (:mod:`sdm.bench.remote_calibrate`)."""
    from rich.table import Table

    from ..bench.remote_calibrate import calibrate_archive
    from ..planner.remote import archive_target

    con = _console()
    cat_url = _catalog_url(catalog, config.default_root())
    try:
        with con.status(f"calibrating {redact_url(url)}", spinner="dots") if not as_json else contextlib.nullcontext():
            row, constants, _ = calibrate_archive(url, cat_url, endpoint=endpoint, quick=quick, repeats=repeats)
    except SDMError as exc:
        _fail(str(exc))
    if as_json:
        sys.stdout.write(json.dumps({"id": row, "target": archive_target(url), "catalog": redact_url(cat_url),
                                     "constants": constants.to_json()}, indent=2) + "\n")
        return
    table = Table(title=f"calibration {row} of {archive_target(url)}", title_justify="left")
    table.add_column("constant")
    table.add_column("value", justify="right")
    for k, v in constants.to_json().items():
        table.add_row(k, f"{v:.3g} s" if not isinstance(v, list) else
                      ", ".join(f"{int(b)} B: {t:.3g} s" for b, t in v))
    con.print(table)
    con.print(f"stored in {redact_url(cat_url)}; `sdm predict --tier archive --endpoint {redact_url(url)}` and auto use it")


# ------------------------------------------------------------------------- predict
def parse_shape(text: str) -> tuple[int, ...]:
    """``"256x256x64"`` or ``"256,256,64"`` -> ``(256, 256, 64)``."""
    parts = [p for p in re.split(r"[x,\s]+", text.strip()) if p]
    try:
        shape = tuple(int(p) for p in parts)
    except ValueError:
        raise ValueError(f"shape {text!r}: write sizes like 256x256x64") from None
    if not shape or any(n <= 0 for n in shape):
        raise ValueError(f"shape {text!r}: sizes must be positive")
    return shape


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
    tier: Annotated[str, typer.Option("--tier", help="local (the fast tier's methods, per run) or archive "
                                      "(the remote methods of one read from the object store).")] = "local",
    view: Annotated[str | None, typer.Option("--view", help="Archive: the readers' view: block, block:2x2, "
                                             "cyclic[:GRID], '(Block, *)', map:R (default: --dist).")] = None,
    constants: Annotated[Path | None, typer.Option("--constants", metavar="FILE.json", help="Archive: the "
                                                   "model's constants (default: the endpoint's calibration, "
                                                   "else the paper's).")] = None,
    endpoint: Annotated[str | None, typer.Option("--endpoint", metavar="s3://BUCKET/PREFIX", help="Archive: "
                                                 "the endpoint whose calibration to use.")] = None,
) -> None:
    """Predict the I/O time of a described run, per method and organization level (--tier local), or of
    one read from the archive per remote method, with the method the planner would choose (--tier archive)."""
    from rich.table import Table
    from rich.text import Text

    from ..planner.model import CostModel
    from ..planner.predict import Workload, predict

    if tier == "archive":
        _predict_archive(shape, dtype, ranks, view or dist, datasets, order, constants, endpoint, catalog, hint,
                         as_json)
        return
    if tier != "local":
        _fail(f"--tier {tier!r}: choose local or archive")
    if view is not None or constants is not None or endpoint is not None:
        _fail("--view, --constants and --endpoint describe archive reads: add --tier archive")
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


def _archive_constants(constants: Path | None, endpoint: str | None, catalog: str | None) -> tuple[Any, str]:
    """The remote model's constants and where they come from (file, stored calibration, or the paper)."""
    from ..planner.remote import SRB_HPSS_2003, RemoteConstants, archive_target

    if constants is not None:
        return RemoteConstants.load(constants), f"file {constants}"
    if endpoint is not None:
        target = archive_target(endpoint)
        record = _latest(_catalog_url(catalog, config.default_root()), target)
        if record is not None:
            return (RemoteConstants.from_json(record["constants"]),
                    f"calibration {record['id']} of {target} ({record['created_at']})")
        return SRB_HPSS_2003, f"no calibration of {target}: the paper's constants SRB_HPSS_2003 " \
            f"(run `sdm calibrate {endpoint}`)"
    return SRB_HPSS_2003, "no --constants or --endpoint: the paper's constants SRB_HPSS_2003"


def _predict_archive(shape: str, dtype: str, ranks: int, view: str, datasets: int, order: str,
                     constants: Path | None, endpoint: str | None, catalog: str | None, hint: list[str] | None,
                     as_json: bool) -> None:
    """``sdm predict --tier archive``: every remote method's predicted time and the choice."""
    from rich.table import Table
    from rich.text import Text

    from ..planner.remote import REMOTE_METHODS, RemoteWorkload, choose_remote

    try:
        consts, source = _archive_constants(constants, endpoint, catalog)
        w = RemoteWorkload(parse_shape(shape), dtype, ranks, view, datasets, order)
        choice = choose_remote(w, consts, _hints(hint))
    except (ValueError, SDMError) as exc:
        _fail(str(exc))
    if as_json:
        out = {"tier": "archive", "constants_source": source, "constants": consts.to_json(), **choice.to_json()}
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
        return
    con = _console()
    con.print(f"{datasets} dataset(s) of {w.nbytes} B ({shape} {dtype}) read from the archive by {ranks} ranks, "
              f"view {view}" + (f", {choice.prediction.reads:g} reads" if choice.prediction.reads != 1 else ""))
    con.print(Text(f"constants: {source}", style="yellow" if source.startswith("no ") else ""))
    table = Table(title="predicted time of each remote method (seconds)", title_justify="left")
    for col in ("method", "seconds", "requests", "bytes fetched", "offered"):
        table.add_column(col, justify="left" if col in ("method", "offered") else "right")
    for m in REMOTE_METHODS:
        c = choice.prediction.costs[m]
        table.add_row(m + (" *" if m == choice.method else ""), f"{c.seconds:.2f}", str(c.requests),
                      str(c.fetched), "yes" if c.eligible else f"no: {c.why}")
    con.print(table)
    con.print(f"choice: {choice.reason}")


# ---------------------------------------------------------------------- bench ncio
#: What ``bench ncio --calibration`` runs each directory with.
CALIBRATIONS = {"stored": ("stored",), "none": ("none",), "fresh": ("fresh",), "both": ("none", "fresh")}


@bench_app.command("ncio")
def ncio_cmd(
    np_: NpOpt = None,
    directory: Annotated[list[str] | None, typer.Option(
        "--dir", help="Storage target(s) to measure, repeatable or comma-separated (e.g. /dev/shm,/var/tmp); "
        "scratch files go to a new directory inside each, removed afterwards (default: under $SDM_ROOT).")] = None,
    out: Annotated[Path, typer.Option("--out", help="Where ncio.json/.md/.png go.")] = Path("ncio-results"),
    quick: Annotated[bool, typer.Option("--quick", help="Tiny sweeps, one repeat (a smoke test).")] = False,
    repeats: Annotated[int | None, typer.Option("--repeats", help="Timed repeats (default 5; 1 with --quick).")] = None,
    sweep: Annotated[list[str] | None, typer.Option("--sweep", help="Sweeps to run: size, count, spacing, "
                                                    "contiguity (repeatable; default all).")] = None,
    method: Annotated[list[str] | None, typer.Option("--method", help="Methods (repeatable; default all).")] = None,
    calibration: Annotated[str, typer.Option(
        "--calibration", help="The model auto predicts with: 'stored' (the catalog's calibration of each "
        "directory, else the defaults), 'none' (the defaults), 'fresh' (calibrate first), 'both' (each "
        "directory without a calibration, then with a fresh one: one report of all).")] = "stored",
    catalog: CatalogOpt = None,
    hint: HintOpt = None,
) -> None:
    """The NCIO benchmark: every method and auto against region count, size and spacing."""
    if np_ is not None:
        _launch(np_, ["bench", "ncio", *_args(dir=directory, out=out, quick=quick, repeats=repeats, sweep=sweep,
                                               method=method, calibration=calibration, catalog=catalog, hint=hint)])
    from ..bench.ncio import SWEEP_NAMES
    from ..planner.model import METHODS

    names = tuple(sweep or SWEEP_NAMES)
    methods = tuple(method or METHODS)
    bad = [n for n in names if n not in SWEEP_NAMES] + [m for m in methods if m not in METHODS]
    if bad:
        _fail(f"unknown sweeps or methods {bad}; sweeps: {list(SWEEP_NAMES)}, methods: {list(METHODS)}")
    if calibration not in CALIBRATIONS:
        _fail(f"--calibration {calibration!r}: choose one of {', '.join(CALIBRATIONS)}")
    from mpi4py import MPI

    dirs = [Path(d) for item in directory or () for d in item.split(",") if d] or None
    run_ncio(MPI.COMM_WORLD, dirs, out, quick=quick, repeats=repeats, sweeps=names, methods=methods,
             calibration=calibration, catalog=catalog, hints=_hints(hint))


def run_ncio(comm: Any, directories: list[Path] | None, out: Path, *, quick: bool = False,
             repeats: int | None = None, sweeps: tuple[str, ...] | None = None,
             methods: tuple[str, ...] | None = None, calibration: str = "stored", catalog: str | None = None,
             hints: dict[str, str] | None = None) -> dict[str, Any] | None:
    """Run the NCIO sweeps on every directory with every model *calibration* asks for, and write one
    report of all of them in *out* (collective; rank 0 prints and returns the report)."""
    from ..bench import ncio
    from ..bench.measure import WARM_BYTES, steady_memory
    from ..planner.model import METHODS

    rank0 = comm.Get_rank() == 0
    con = _console()
    names, methods = tuple(sweeps or ncio.SWEEP_NAMES), tuple(methods or METHODS)
    plan = ncio.sweeps(quick, names)
    reps = repeats or (1 if quick else 5)
    targets = [d.resolve() for d in directories or [config.default_root()]]
    runs = [(d, mode) for d in targets for mode in CALIBRATIONS[calibration]]
    bar = _Progress(con if rank0 else None, len(runs) * ncio.steps(plan, methods), "NCIO: warming memory")
    scratch: dict[Path, Path] = {}
    t0, load_before = time.perf_counter(), os.getloadavg()[0]
    configs = []
    try:
        for d in targets:  # a new directory of our own inside each target
            scratch[d] = Path(comm.bcast(tempfile.mkdtemp(prefix="sdm-ncio-", dir=_ensure(d)) if rank0 else None,
                                         root=0))
        with steady_memory(comm, WARM_BYTES // 8 if quick else WARM_BYTES):
            for d, mode in runs:
                t1, load = time.perf_counter(), os.getloadavg()[0]
                model, fresh = _model_for(comm, d, scratch[d], catalog, mode, quick, con if rank0 else None, bar)
                rows = ncio.run(comm, scratch[d], plan, methods=methods, repeats=reps, model=model,
                                hints=hints or {}, progress=bar.step if rank0 else None, quick=quick)
                facts: dict[str, Any] = {}
                if fresh:  # the same samples again: how far the machine drifted meanwhile
                    fresh["after"] = _retime(comm, scratch[d], model, quick, bar)
                    facts["calibration_drift"] = ncio.drift([x["seconds"] for x in fresh["samples"]],
                                                            [x["seconds"] for x in fresh["after"]])
                fs = fs_type(d) or "unknown"
                name = f"{fs if [t for t in targets if fs_type(t) == fs] == [d] else d}, " + (
                    "calibrated" if model.calibrated else "no calibration")
                configs.append(ncio.configuration(
                    name, rows, directory=str(d),
                    fs=fs, calibrated=model.calibrated, model=model.label, constants=model.to_json(),
                    calibration=fresh, load_before=load, load_after=os.getloadavg()[0],
                    seconds=time.perf_counter() - t1, **facts))
    finally:
        bar.close()
        comm.Barrier()
        if rank0:
            for path in scratch.values():
                shutil.rmtree(path, ignore_errors=True)
    if not rank0:
        return None
    report = {"meta": _meta(comm, {"repeats": reps, "methods": list(methods), "sweeps": list(names),
                                   "quick": quick, "calibration": calibration, "load_before": load_before,
                                   "load_after": os.getloadavg()[0], "seconds": time.perf_counter() - t0}),
              "configs": configs}
    write_ncio(report, out)
    for c in configs:
        g = c["goals"]
        con.print(f"{c['name']}: auto/best geomean {g['auto_vs_best_geomean']:.3f}, median "
                  f"{g['auto_vs_best_median']:.3f}, worst {g['auto_vs_best_worst']:.2f} over {g['points']} points "
                  f"(goal {'met' if ncio.met(c) else 'missed'})")
    con.print(f"wrote {out}/ncio.json, ncio.md, ncio.png")
    return report


def _retime(comm: Any, target: Path, model: Any, quick: bool, bar: _Progress) -> list[dict[str, Any]]:
    """The calibration's method samples timed again, as the calibration timed them (collective)."""
    from ..bench.calibrate import QUICK_RUNS, REPEATS, RUNS, measure_runs

    rounds = 1 if quick else REPEATS
    bar.extend(rounds)
    samples = measure_runs(comm, target, QUICK_RUNS if quick else RUNS, rounds, dict(model.romio),
                           progress=lambda text: bar.step(f"calibration samples again: {text}"), quick=quick)
    return [_kept(x) for x in samples]


def _kept(sample: Any) -> dict[str, Any]:
    """A calibration sample as the results keep it: without its counts, which follow from its method and
    pattern (``benchmarks/refit.py`` computes them again with the code of the day)."""
    return {k: v for k, v in sample.as_dict().items() if k != "counts"}


def _ensure(path: Path) -> str:
    path.mkdir(parents=True, exist_ok=True)
    return str(path)


def _model_for(comm: Any, target: Path, scratch: Path, catalog: str | None, mode: str, quick: bool,
               con: Console | None, bar: _Progress) -> tuple[Any, dict[str, Any]]:
    """The model for *mode* (see :data:`CALIBRATIONS`) with, for a fresh calibration of *target*
    (measured in *scratch*, stored in *catalog* if given), its direct timings and samples."""
    from ..planner.model import CostModel

    rank0 = comm.Get_rank() == 0
    if mode == "fresh":
        from ..bench.calibrate import REPEATS

        bar.extend(3 + (1 if quick else REPEATS))
        bar.step(f"calibrating {target}")
        model, samples, direct = run_calibration(comm, scratch, quick=quick, repeats=1 if quick else None,
                                                 say=lambda text: bar.step(f"calibrating: {text}"))
        if rank0 and catalog:
            row = _save(catalog, target, model, samples, direct)
            if con is not None:
                con.print(f"calibration {row} of {target} stored in {redact_url(catalog)}")
        return model, {"direct": direct, "samples": [_kept(x) for x in samples]}
    if mode == "none":
        return CostModel(), {}
    record = comm.bcast(_latest(_catalog_url(catalog, target), str(target)) if rank0 else None, root=0)
    return CostModel.from_calibration(record), {}


def write_ncio(report: dict[str, Any], out: Path) -> None:
    """ncio.json (every sample of every configuration, compact: floats to 4 significant digits), ncio.md and ncio.png in *out*."""
    from ..bench import ncio, rounded

    out.mkdir(parents=True, exist_ok=True)
    (out / "ncio.json").write_text(json.dumps(rounded(report), separators=(",", ":"), default=str))
    (out / "ncio.md").write_text(ncio.markdown(report))
    ncio.plot(report, out / "ncio.png")


def register(app: typer.Typer) -> None:
    """Add ``bench``, ``calibrate`` and ``predict`` to the ``sdm`` command."""
    app.add_typer(bench_app, name="bench")
    app.command("calibrate")(calibrate_cmd)
    app.command("predict")(predict_cmd)
