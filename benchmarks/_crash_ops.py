"""The maintenance kinds of ``benchmarks/crash.py``: kill -9 during ``session.truncate``, ``sdm rebuild``,
``sdm export``, ``sdm migrate`` and ``sdm purge``, then check every row and rerun the command.

Each trial: the state the command starts from (a fresh run for ``truncate``; otherwise the
*fixture*, a data root and catalog written once per harness run and copied back before every
trial, at the same path so the catalog's roots stay true), the command started, SIGKILL at a
random moment of its work, every catalog row checked against the exact bytes its writer wrote
on every tier the catalog says holds them (``_crash_exact.py``), the same command run again,
which must complete, and its result checked:

==========  ======================================================================================
truncate    MPI job (2-3 ranks) writing ``--truncate-steps`` steps of group ``g`` (level 1, 2 or 3),
            then ``session.truncate`` after ``cuts`` decreasing steps in turn; killed (a non-zero
            rank, rank 0 or the whole job) during the cuts.  After the kill every dataset holds
            exactly the steps ``<= k`` for ``k`` the last cut that returned or the one in flight;
            the rerun reopens the run (mode "a"), truncates at the interrupted cut and reads every
            step left (``verify=True``); the run then holds exactly the steps ``<= cut``.
rebuild     ``sdm rebuild ROOT --catalog NEW`` of the fixture's data root; every run in the killed
            rebuild's catalog is whole; the rerun's catalog equals the original catalog (runs, run
            attributes, groups, datasets, files, writes) and has its identity (``catalog_info.uuid``,
            which the run directories' markers name).
export      ``sdm export RUN -f hdf5|netcdf|zarr -o OUT`` of fixture run 0: after the kill OUT is
            absent or complete; the rerun (``--overwrite`` when OUT exists) makes OUT, read back
            with h5py / netCDF4 / zarr and equal to numpy's arrays.
migrate     ``sdm migrate RUN --to s3://BUCKET/PREFIX`` of fixture run 0 to a real S3 server
            (versitygw, ``tests/integration/s3server.py``), whole files or packed into superfiles,
            verified by read-back or by the upload's signature; every verified archive copy must
            hold its rows; after the rerun every file has a verified archive copy, the fast copies
            are purged and every step is read from the archive (``verify=True``) and compared.
purge       ``sdm purge RUN --tier fast|archive`` of fixture run 0 once migrated (whole or packed);
            after the rerun the tier holds nothing of the run (files, objects, copies rows) and
            every step is read from the other tier and compared.
==========  ======================================================================================

The kill delay of a trial is ``u * T``, ``u`` drawn uniformly in [0, 1) from the seed and ``T`` the
time the same command took uninterrupted on this machine (measured once per kind and variant,
at its first trial, and recorded), or ``--max-delay`` when given (``--quick``: 0.3 s).  A command
that ends before its kill (the machine is busier or idler than when it was measured) is started
again from the same state with half the delay, three attempts in all; only a trial whose three
attempts all ended first counts as "ended before kill".  Nothing here installs a signal handler; every process and
temporary directory (and the trial's objects in the S3 server) is removed after its trial.
"""

from __future__ import annotations

import json
import random
import secrets
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

import _crash_check as check
import _crash_exact as exact
import _crash_export as exports
import _crash_worker as worker
from _mpijob import Job

HERE = Path(__file__).resolve().parent
CLI = HERE / "_crash_cli.py"

KINDS = ("truncate", "rebuild", "export", "migrate", "purge")
KILLS = ("rank", "rank0", "job")
#: The variants each kind cycles through.
VARIANTS: dict[str, tuple[str, ...]] = {
    "truncate": tuple(f"level {lv} {k}" for k in KILLS for lv in (1, 2, 3)),
    "rebuild": ("new catalog",),
    "export": ("hdf5", "netcdf", "zarr"),
    "migrate": ("whole read-back", "whole upload", "packed read-back", "packed upload"),
    "purge": ("fast", "archive", "fast packed", "archive packed"),
}
BUCKET = "sdm-crash"
PACK_BELOW = 32768  # the level-1 files (24 and 6 KB) go into superfiles, the others stay whole
READY_TIMEOUT = 240.0  # s from a job's start to "ready" (the truncate job writes its steps first)
ATTEMPTS = 3  # a command that ended before its kill is started again with half the delay, this many times in all
EXIT_GRACE = 20.0  # s for mpiexec to end the other ranks after one was killed
RERUN_TIMEOUT = 300.0  # s for a rerun, a set-up command or a read-back
FIXTURE_TIMEOUT = 900.0  # s to write the fixture
PRELOAD = {  # imported before "ready", so the kill lands in the command's work
    "rebuild": ["sqlalchemy", "sdm.catalog", "sdm.catalog.rebuild"],
    "export": ["mpi4py.MPI", "h5py", "netCDF4", "zarr", "sdm.exporting", "sdm.exporting.hdf5",
               "sdm.exporting.netcdf", "sdm.exporting.zarrv3", "sdm.session"],
    "migrate": ["sdm.catalog", "sdm.ops.tiers", "sdm.storage.backends.objectstore"],
    "purge": ["sdm.catalog", "sdm.ops.tiers", "sdm.storage.backends.objectstore"],
}


@dataclass
class Settings:
    """Sizes of the work each trial kills (``--quick`` makes them small)."""

    runs: int = 12  #: fixture runs (what ``sdm rebuild`` replays)
    steps: int = 100  #: steps of fixture run 0 (what export, migrate and purge move)
    other_steps: int = 30  #: steps of the other fixture runs
    truncate_steps: int = 240  #: steps written before the cuts
    cuts: int = 4  #: truncations per truncate job
    max_delay: float | None = None  #: kill delays uniform in [0, this] s; None: in [0, the measured duration]

    @classmethod
    def quick(cls) -> "Settings":
        """Small sizes, kills within 0.3 s of the start of the work (nothing measured first): a smoke test."""
        return cls(runs=3, steps=12, other_steps=4, truncate_steps=30, cuts=2, max_delay=0.3)

    def cut_steps(self) -> list[int]:
        """The cuts of the truncate job: ``cuts`` decreasing steps, evenly spread."""
        n, s = self.cuts, self.truncate_steps
        return [s * (n - j) // (n + 1) - 1 for j in range(n)]


def plan(trials: int, seed: int, kinds: tuple[str, ...]) -> list[dict[str, Any]]:
    """Every trial's kind, variant, rank count, killed rank and delay fraction, drawn from *seed*."""
    rng = random.Random(seed)
    out = []
    for t in range(trials):
        kind = kinds[t % len(kinds)]
        variants = VARIANTS[kind]
        variant = variants[(t // len(kinds)) % len(variants)]
        p: dict[str, Any] = dict(trial=t, kind=kind, variant=variant, u=round(rng.random(), 4))
        if kind == "truncate":
            p["nprocs"] = rng.choice((2, 3))
            kill = variant.split()[-1]
            p["victim"] = 0 if kill == "rank0" else (rng.randrange(1, p["nprocs"]) if kill == "rank" else None)
        out.append(p)
    return out


# ------------------------------------------------------------------------------------- jobs
def _error(job: Job) -> str:
    lines = [line for line in job.progress() if line.startswith("error ")]
    return " ".join((lines[-1] if lines else job.output(800)).split())[:400]


def _finish(job: Job, timeout: float) -> tuple[bool, str]:
    """Wait for an uninterrupted job; (ended well, the error otherwise)."""
    try:
        status = job.wait(timeout)
    finally:
        job.cleanup()
        job.remove_leftovers()
    ok = status == 0 and any(line.startswith("finished") for line in job.progress())
    return ok, "" if ok else (f"exit {status}: " if status is not None else f"no end in {timeout:.0f} s: ") + _error(job)


def _kill_during(job: Job, delay: float, how: str, victim: int | None = None) -> dict[str, Any]:
    """Wait for ``ready``, then *delay* s, then SIGKILL (*how*: ``rank``/``rank0`` one rank, else the whole job)."""
    out: dict[str, Any] = {}
    try:
        if not job.wait_for("ready", READY_TIMEOUT):
            out.update(started=False, error=_error(job))
            return out
        out["started"] = True
        status = job.wait(delay)
        if status is not None:
            out["killed"] = False
            return out
        out["killed"] = True
        if how in ("rank", "rank0"):
            job.kill_rank(0 if how == "rank0" else int(victim or 1))
            job.wait(EXIT_GRACE)
        else:
            job.kill_all()
    finally:
        job.cleanup()
        job.remove_leftovers()
    return out


@dataclass
class Fixture:
    """The data root and catalog the non-truncate trials start from: written once, copied back per trial."""

    base: Path
    settings: Settings
    index: dict[int, int] = field(default_factory=dict)  #: run id -> fixture index
    seconds: float = 0.0

    @property
    def work(self) -> Path:
        return self.base / "work"

    @property
    def root(self) -> Path:
        return self.work / "data"

    @property
    def url(self) -> str:
        return f"sqlite:///{self.work / 'catalog.db'}"

    @property
    def target(self) -> int:
        """The run export, migrate and purge work on (index 0)."""
        return next(r for r, i in self.index.items() if i == 0)

    def build(self) -> None:
        """Write the fixture (2 ranks) and keep a pristine copy of it."""
        t0 = time.monotonic()
        self.work.mkdir(parents=True)
        logs = self.base / "populate"
        logs.mkdir()
        s = self.settings
        cfg = dict(task="populate", dir=str(logs), root=str(self.root), catalog=self.url,
                   runs=[s.steps] + [s.other_steps] * (s.runs - 1))
        job = Job(2, cfg, logs / "log")
        ok, error = _finish(job, FIXTURE_TIMEOUT)
        if not ok:
            raise RuntimeError(f"the fixture could not be written: {error}")
        for line in job.progress():
            if line.startswith("populated "):
                _, run, index = line.split()
                self.index[int(run)] = int(index)
        shutil.copytree(self.work, self.base / "pristine", symlinks=True)
        self.original = exact.catalog_content(self.url)
        self.identity = exact.catalog_identity(self.url)
        self.seconds = time.monotonic() - t0

    def restore(self) -> None:
        """The work copy back as written."""
        shutil.rmtree(self.work, ignore_errors=True)
        shutil.copytree(self.base / "pristine", self.work, symlinks=True)

    def want(self, row: check.Row) -> np.ndarray | None:
        """The array a fixture row must hold."""
        index = self.index.get(row.run_id)
        if index is None or row.group not in worker.FIXTURE_GROUPS:
            return None
        return worker.expected(worker.dataset_index(row.dataset), row.step, worker.fixture_version(index, row.group))

    def exported(self) -> dict[tuple[str, str], np.ndarray]:
        """``(group, dataset) -> (steps, *shape)``: what an export of run 0 must hold."""
        return {(g, n): np.stack([worker.expected(worker.dataset_index(n), step, worker.fixture_version(0, g))
                                  for step in range(self.settings.steps)])
                for g in worker.FIXTURE_GROUPS for n, _, _ in worker.DATASETS}


class Lab:
    """Where the maintenance trials run: a temporary directory, the fixture, the S3 server when needed,
    and the measured duration of every (kind, variant)."""

    def __init__(self, kinds: tuple[str, ...], settings: Settings) -> None:
        self.kinds = kinds
        self.settings = settings
        self.base = Path(tempfile.mkdtemp(prefix="sdm-crash-ops-"))
        self.fixture = Fixture(self.base / "fixture", settings)
        self.server: Any = None
        self.archive: exact.Archive | None = None
        self.env: dict[str, str] = {}
        self.durations: dict[str, float] = {}

    def __enter__(self) -> "Lab":
        try:
            if {"migrate", "purge"} & set(self.kinds):
                sys.path.insert(0, str(worker_repo() / "tests" / "integration"))
                from s3server import S3Server

                self.server = S3Server()
                self.server.start()
                self.env = self.server.env()
                self.archive = exact.Archive(self.server.endpoint, self.env)
                self.archive.ensure_bucket(BUCKET)
            if set(self.kinds) - {"truncate"}:
                self.fixture.build()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self.server is not None:
            self.server.stop()
        shutil.rmtree(self.base, ignore_errors=True)

    # ------------------------------------------------------------------ commands
    def cli(self, where: Path, argv: list[str], kind: str) -> Job:
        """The ``sdm`` command *argv* started in a new directory *where* (its progress and log)."""
        where.mkdir(parents=True)
        cfg = dict(task="cli", dir=str(where), argv=argv, preload=PRELOAD.get(kind, []))
        return Job(1, cfg, where / "log", CLI, mpi=False, env=self.env)

    def run_cli(self, where: Path, argv: list[str], kind: str) -> tuple[bool, str]:
        return _finish(self.cli(where, argv, kind), RERUN_TIMEOUT)

    def inspect(self, where: Path, url: str, run: int, *, fixture: bool) -> dict[str, Any]:
        return inspect(where, url, run, fixture=fixture, env=self.env)

    def duration(self, key: str, measure: Callable[[], float]) -> float:
        """The uninterrupted duration of *key* (kind and variant), measured once (``max_delay`` when set)."""
        if self.settings.max_delay is not None:
            return self.settings.max_delay
        if key not in self.durations:
            self.durations[key] = round(measure(), 4)
        return self.durations[key]


def inspect(where: Path, url: str, run: int, *, fixture: bool, env: dict[str, str] | None = None) -> dict[str, Any]:
    """A serial reader's view of a run (``_crash_cli.py inspect``): ``state`` (its ``previous_state``),
    ``read`` (steps read with ``verify=True``), ``read_bad`` (those unequal to numpy's), ``ok``, ``error``."""
    where.mkdir(parents=True)
    cfg = dict(task="inspect", dir=str(where), catalog=url, run=run, fixture=fixture, app=worker.APP)
    job = Job(1, cfg, where / "log", CLI, mpi=False, env=env)
    ok, error = _finish(job, RERUN_TIMEOUT)
    out: dict[str, Any] = dict(ok=ok, error=error)
    for line in job.progress():
        words = line.split()
        if words[0] == "state":
            out["state"] = words[1]
        elif words[0] == "checked":
            out["read"], out["read_bad"] = int(words[1]), int(words[2])
    return out


def worker_repo() -> Path:
    return HERE.parent


def _cli_seconds(job: Job) -> float:
    for line in job.progress():
        if line.startswith("finished "):
            return float(line.split()[2])
    raise RuntimeError(f"the uninterrupted command failed: {_error(job)}")


# ------------------------------------------------------------------------------------- trials
def run_trial(lab: Lab, p: dict[str, Any]) -> dict[str, Any]:
    """One trial of kind ``p["kind"]``; returns its record (see :func:`summarize`)."""
    t0 = time.monotonic()
    where = lab.base / f"trial-{p['trial']}"
    where.mkdir()
    rec: dict[str, Any] = dict(p)
    try:
        TRIALS[p["kind"]](lab, p, where, rec)
    except Exception as exc:  # noqa: BLE001 - a harness failure is recorded, never hidden
        rec["harness_error"] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:400]}"
    finally:
        shutil.rmtree(where, ignore_errors=True)
        rec["seconds"] = round(time.monotonic() - t0, 2)
    return rec


def _rows_check(url: str, want: Callable[[check.Row], np.ndarray | None], lab: Lab | None = None) -> dict[str, Any]:
    rows = check.load_rows(url)
    if lab is not None and lab.archive is not None:
        lab.archive.forget()
        sources = exact.tiers(exact.load_copies(url), lab.archive)
    else:
        sources = exact.fast_only
    return exact.check_exact(rows, want, sources)


# ----- truncate
def _steps_by_dataset(rows: list[check.Row]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {n: [] for n, _, _ in worker.DATASETS}
    for r in rows:
        out.setdefault(r.dataset, []).append(r.step)
    return {k: sorted(v) for k, v in out.items()}


def _holds_through(steps: dict[str, list[int]], cut: int) -> bool:
    return all(v == list(range(cut + 1)) for v in steps.values())


def trial_truncate(lab: Lab, p: dict[str, Any], where: Path, rec: dict[str, Any]) -> None:
    s = lab.settings
    level = int(p["variant"].split()[1])
    how = p["variant"].split()[2]
    cuts = s.cut_steps()

    def job(base: Path) -> Job:
        """The truncate job on a new run in *base* (its data, catalog, and the job's progress in ``kill``)."""
        (base / "kill").mkdir(parents=True)
        cfg = dict(task="truncate", dir=str(base / "kill"), root=str(base / "data"), catalog=f"sqlite:///{base}/c.db",
                   level=level, steps=s.truncate_steps, cuts=cuts, trial=p["trial"])
        return Job(p["nprocs"], cfg, base / "kill" / "log")

    def measure() -> float:
        j = job(Path(tempfile.mkdtemp(prefix=f"calibrate-truncate-{level}-", dir=lab.base)))
        if not j.wait_for("ready", READY_TIMEOUT):
            raise RuntimeError(f"the truncate job did not start: {_error(j)}")
        t_ready = time.monotonic()
        cut = j.wait_for("truncated", RERUN_TIMEOUT)
        seconds = time.monotonic() - t_ready
        ok, error = _finish(j, RERUN_TIMEOUT)
        if not (ok and cut):
            raise RuntimeError(f"the uninterrupted truncate job failed: {error}")
        return seconds

    duration = lab.duration(f"truncate level {level}", measure)
    for attempt in range(ATTEMPTS):
        rec["attempts"], rec["delay"] = attempt + 1, round(p["u"] * duration / 2**attempt, 4)
        base = where / f"attempt-{attempt}"
        killed = job(base)
        rec.update(_kill_during(killed, rec["delay"], how, p.get("victim")))
        if rec.get("killed") is not False:
            break
    if not rec.get("killed"):
        return
    where = base
    lines = killed.progress()
    run = next(int(line.split()[1]) for line in lines if line.startswith("run "))
    done = [int(line.split()[1]) for line in lines if line.startswith("cut ")]
    started = [int(line.split()[1]) for line in lines if line.startswith("cutting ")]
    in_flight = started[-1] if len(started) > len(done) else None
    intents = check.Intents().read(lines, lambda i: worker.DATASETS[i][0])

    def want(row: check.Row) -> np.ndarray | None:
        if (row.dataset, row.step) not in intents.tried:
            return None
        return worker.expected(worker.dataset_index(row.dataset), row.step, 0)

    url = f"sqlite:///{where}/c.db"
    first = _rows_check(url, want)
    rec["rows"], rec["bad"] = first["rows"], first["bad"]
    steps = _steps_by_dataset(check.load_rows(url))
    before = done[-1] if done else s.truncate_steps - 1
    committed = in_flight is not None and _holds_through(steps, in_flight)
    if not (committed or _holds_through(steps, before)):
        rec["bad"] = rec["bad"] + [dict(reason="torn_truncation", detail=f"steps {_ranges(steps)} after the kill; "
                                        f"expected 0..{before}" + (f" or 0..{in_flight}" if in_flight is not None else ""))]
    rec["at"] = ("between cuts" if in_flight is None else
                 f"cut {cuts.index(in_flight) + 1} of {len(cuts)}, {'committed' if committed else 'not committed'}")
    cut = in_flight if in_flight is not None else before
    again = where / "rerun"
    again.mkdir()
    cfg = dict(task="retruncate", dir=str(again), root=str(where / "data"), catalog=url, run=run, cut=cut)
    rec["rerun"], rec["rerun_error"] = _finish(Job(p["nprocs"], cfg, again / "log"), RERUN_TIMEOUT)
    second = _rows_check(url, want)
    rec["rows_after"], rec["bad_after"] = second["rows"], second["bad"]
    steps = _steps_by_dataset(check.load_rows(url))
    rec["result"] = _holds_through(steps, cut)
    if not rec["result"]:
        rec["result_detail"] = f"steps {_ranges(steps)} after truncate({cut}); expected 0..{cut}"
    held = {r.file.resolve() for r in check.load_rows(url)}
    rec["files_left"] = sum(1 for f in exact.data_files(where / "data") if f.resolve() not in held)


def _ranges(steps: dict[str, list[int]]) -> str:
    def one(v: list[int]) -> str:
        return "none" if not v else f"{v[0]}..{v[-1]}" + ("" if v == list(range(v[0], v[-1] + 1)) else f" ({len(v)})")

    return ", ".join(f"{k}: {one(v)}" for k, v in steps.items())


# ----- the commands on the fixture
def _killed_cli(lab: Lab, p: dict[str, Any], where: Path, rec: dict[str, Any], key: str, argv: list[str],
                setup: Callable[[Path], None] | None = None) -> bool:
    """Restore the fixture (and *setup*), measure the command once if not yet, restore again, run and kill it."""
    fx = lab.fixture

    def measure() -> float:
        fx.restore()
        base = Path(tempfile.mkdtemp(prefix=f"calibrate-{key.replace(' ', '-')}-", dir=lab.base))
        if setup is not None:
            setup(base / "setup")
        j = lab.cli(base / "run", argv, p["kind"])
        ok, error = _finish(j, RERUN_TIMEOUT)
        if not ok:
            raise RuntimeError(f"the uninterrupted `sdm {' '.join(argv[:2])}` failed: {error}")
        return _cli_seconds(j)

    duration = lab.duration(key, measure)
    for attempt in range(ATTEMPTS):
        rec["attempts"], rec["delay"] = attempt + 1, round(p["u"] * duration / 2**attempt, 4)
        fx.restore()
        if setup is not None:
            setup(where / f"setup-{attempt}")
        rec.update(_kill_during(lab.cli(where / f"kill-{attempt}", argv, p["kind"]), rec["delay"], "job"))
        if rec.get("killed") is not False:
            break
    return bool(rec.get("killed"))


def trial_rebuild(lab: Lab, p: dict[str, Any], where: Path, rec: dict[str, Any]) -> None:
    fx = lab.fixture
    url = f"sqlite:///{fx.work / 'rebuilt.db'}"
    argv = ["rebuild", str(fx.root), "--catalog", url]
    if not _killed_cli(lab, p, where, rec, "rebuild", argv):
        return
    first = _rows_check(url, fx.want)
    rec["rows"], rec["bad"] = first["rows"], first["bad"]
    got = exact.catalog_content(url)
    rec["at"] = f"{len(got['runs'])} of {len(fx.original['runs'])} runs"
    torn = [rid for (rid, *_rest) in got["runs"]
            if {w for w in got["writes"] if w[0] == rid} != {w for w in fx.original["writes"] if w[0] == rid}]
    if torn:
        rec["bad"] = rec["bad"] + [dict(reason="torn_run", detail=f"runs {torn} are in the killed rebuild's catalog "
                                        "with other writes than the original's")]
    rec["rerun"], rec["rerun_error"] = lab.run_cli(where / "rerun", argv, "rebuild")
    second = _rows_check(url, fx.want)
    rec["rows_after"], rec["bad_after"] = second["rows"], second["bad"]
    wrong = exact.differences(fx.original, exact.catalog_content(url))
    identity = exact.catalog_identity(url)
    if identity != fx.identity:
        wrong.append(f"identity {identity} is not the original catalog's {fx.identity} (the run directories' markers "
                     "name the original: appending to a run through this catalog is refused)")
    rec["result"] = not wrong
    if wrong:
        rec["result_detail"] = "; ".join(wrong)[:600]


def trial_export(lab: Lab, p: dict[str, Any], where: Path, rec: dict[str, Any]) -> None:
    fx = lab.fixture
    fmt = p["variant"]
    out = fx.work / f"export.{exports.SUFFIX[fmt]}"
    argv = ["export", str(fx.target), "-f", fmt, "-o", str(out), "--catalog", fx.url]
    if not _killed_cli(lab, p, where, rec, f"export {fmt}", argv):
        return
    first = _rows_check(fx.url, fx.want)
    rec["rows"], rec["bad"] = first["rows"], first["bad"]
    wanted = fx.exported()
    exists = out.exists()
    rec["at"] = "output complete" if exists else "no output"
    if exists:
        wrong = exports.problems(out, fmt, wanted)
        if wrong:
            rec["bad"] = rec["bad"] + [dict(reason="incomplete_export", detail="; ".join(wrong)[:300])]
    rec["leftovers"] = len(exports.partials(out))
    rerun = argv + (["--overwrite"] if exists else [])
    rec["rerun"], rec["rerun_error"] = lab.run_cli(where / "rerun", rerun, "export")
    second = _rows_check(fx.url, fx.want)
    rec["rows_after"], rec["bad_after"] = second["rows"], second["bad"]
    wrong = exports.problems(out, fmt, wanted)
    rec["result"] = not wrong
    if wrong:
        rec["result_detail"] = "; ".join(wrong)[:600]
    rec["leftovers_after"] = len(exports.partials(out))


def _target_files(url: str, run: int) -> list[str]:
    return sorted(str(r["path"]) for r in check.query(url, f"SELECT path FROM files WHERE run_id = {int(run)}",
                                                      table="files"))


def _tier_count(url: str, run: int, tier: str) -> tuple[int, int]:
    """(files of *run* with a verified copy on *tier*, files of *run*); a file without copies rows is on fast."""
    copies = exact.load_copies(url)
    files = _target_files(url, run)
    have = 0
    for path in files:
        found = copies.get((run, path), [])
        if (not found and tier == "fast") or any(c["tier"] == tier and c["state"] == "verified" for c in found):
            have += 1
    return have, len(files)


def _orphan_objects(archive: exact.Archive, url: str, prefix: str) -> int:
    """Objects under the trial's prefix that no ``copies`` row names (uploads a kill cut off; information)."""
    named = {exact.Archive.split(str(c["location"]))[1] for found in exact.load_copies(url).values() for c in found
             if c["tier"] == "archive"}
    return sum(1 for key in archive.keys(BUCKET, prefix + "/") if key not in named)


def _migrate_argv(lab: Lab, prefix: str, packed: bool, upload: bool) -> list[str]:
    fx = lab.fixture
    assert lab.server is not None
    return (["migrate", str(fx.target), "--to", f"s3://{BUCKET}/{prefix}", "--catalog", fx.url,
             "--endpoint", lab.server.endpoint] + (["--pack-below", str(PACK_BELOW)] if packed else [])
            + (["--verify", "upload"] if upload else []))


def _purge_argv(lab: Lab, tier: str) -> list[str]:
    assert lab.server is not None
    return ["purge", str(lab.fixture.target), "--tier", tier, "--catalog", lab.fixture.url,
            "--endpoint", lab.server.endpoint]


def _prefix(p: dict[str, Any]) -> str:
    return f"t{p['trial']:03d}-{secrets.token_hex(4)}"


def _readable(lab: Lab, where: Path, rec: dict[str, Any]) -> None:
    """Every step of run 0 read back through SDM (verified, compared): the trial's result."""
    fx = lab.fixture
    seen = lab.inspect(where, fx.url, fx.target, fixture=True)
    expected = sum(len(worker.DATASETS) * fx.settings.steps for _ in worker.FIXTURE_GROUPS)
    rec["read"] = seen.get("read", 0)
    if not seen["ok"] or seen.get("read") != expected or seen.get("read_bad"):
        rec["result"] = False
        rec["result_detail"] = (f"read back {seen.get('read', 0)} of {expected} steps, {seen.get('read_bad', 0)} "
                                f"different; {seen['error']}")[:600]


def trial_migrate(lab: Lab, p: dict[str, Any], where: Path, rec: dict[str, Any]) -> None:
    fx = lab.fixture
    assert lab.archive is not None
    packed, upload = p["variant"].startswith("packed"), p["variant"].endswith("upload")
    prefix = _prefix(p)
    argv = _migrate_argv(lab, prefix, packed, upload)
    try:
        if not _killed_cli(lab, p, where, rec, f"migrate {p['variant']}", argv):
            return
        first = _rows_check(fx.url, fx.want, lab)
        rec["rows"], rec["bad"] = first["rows"], first["bad"]
        have, files = _tier_count(fx.url, fx.target, "archive")
        rec["at"] = f"{have} of {files} files archived"
        rec["rerun"], rec["rerun_error"] = lab.run_cli(where / "rerun", argv, "migrate")
        rec["orphan_objects"] = _orphan_objects(lab.archive, fx.url, prefix)
        have, files = _tier_count(fx.url, fx.target, "archive")
        rec["result"] = have == files
        if have != files:
            rec["result_detail"] = f"{files - have} of {files} files without a verified archive copy after the rerun"
        ok, error = lab.run_cli(where / "purge", _purge_argv(lab, "fast"), "purge")  # read from the archive alone
        if not ok:
            rec["result"], rec["result_detail"] = False, f"purge of the fast copies after the rerun failed: {error}"
        second = _rows_check(fx.url, fx.want, lab)
        rec["rows_after"], rec["bad_after"] = second["rows"], second["bad"]
        _readable(lab, where / "read", rec)
    finally:
        lab.archive.remove(BUCKET, prefix + "/")


def trial_purge(lab: Lab, p: dict[str, Any], where: Path, rec: dict[str, Any]) -> None:
    fx = lab.fixture
    assert lab.archive is not None
    tier = p["variant"].split()[0]
    packed = p["variant"].endswith("packed")
    prefix = _prefix(p)

    def migrated(directory: Path) -> None:
        ok, error = lab.run_cli(directory, _migrate_argv(lab, prefix, packed, False), "migrate")
        if not ok:
            raise RuntimeError(f"the migration before the purge failed: {error}")

    argv = _purge_argv(lab, tier)
    try:
        if not _killed_cli(lab, p, where, rec, f"purge {p['variant']}", argv, setup=migrated):
            return
        first = _rows_check(fx.url, fx.want, lab)
        rec["rows"], rec["bad"] = first["rows"], first["bad"]
        have, files = _tier_count(fx.url, fx.target, tier)
        rec["at"] = f"{files - have} of {files} files purged"
        rec["rerun"], rec["rerun_error"] = lab.run_cli(where / "rerun", argv, "purge")
        second = _rows_check(fx.url, fx.want, lab)
        rec["rows_after"], rec["bad_after"] = second["rows"], second["bad"]
        have, files = _tier_count(fx.url, fx.target, tier)
        wrong = [f"{have} of {files} files still have a {tier} copy"] if have else []
        if tier == "fast":
            run_dir = check.query(fx.url, f"SELECT dir FROM runs WHERE id = {fx.target}", table="runs")[0]["dir"]
            left = exact.data_files(fx.root / run_dir)
            wrong += [f"{len(left)} data files left on the fast tier"] if left else []
        else:
            left_keys = lab.archive.keys(BUCKET, prefix + "/")
            wrong += [f"{len(left_keys)} objects left in the archive"] if left_keys else []
        rec["result"] = not wrong
        if wrong:
            rec["result_detail"] = "; ".join(wrong)
        _readable(lab, where / "read", rec)
    finally:
        lab.archive.remove(BUCKET, prefix + "/")


TRIALS: dict[str, Callable[[Lab, dict[str, Any], Path, dict[str, Any]], None]] = {
    "truncate": trial_truncate, "rebuild": trial_rebuild, "export": trial_export, "migrate": trial_migrate,
    "purge": trial_purge,
}
