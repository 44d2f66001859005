"""Catalog scale benchmark: SDM's searches, listings and commits against the catalog's size.

Run from the repository with plain Python (the session opened here is a one-rank MPI job)::

    PYTHONPATH=src python benchmarks/catalog_scale.py                       # SQLite 1e5,1e6,1e7 + PostgreSQL 1e5,1e6
    PYTHONPATH=src python benchmarks/catalog_scale.py --engines sqlite --sizes 1e5,1e6 --repeat 3
    PYTHONPATH=src python benchmarks/catalog_scale.py --quick --out /tmp/r  # CI size: SQLite, 1e4 writes, 1 repeat

Catalogs of 10^5, 10^6 and 10^7 writes shaped like real runs (1000 runs of 4
applications, 10 datasets and 16 attribute rows per run; the shape is documented in
``_catalog_populate.py``) are made once and then measured with SDM's own API and CLI:

=================  =========================================================================
find =             ``sdm.find(catalog=URL, application=APP, attributes={"case": "case-07"})``
find range         ``... attributes={"re": (">=", 10900.0)}`` (~1% of the application's runs)
find 2 attrs       ``... attributes={"mesh": "channel", "nx": 128}``
open by attrs      ``sdm.open(APP, "r", catalog=URL, attributes={"case": "case-07"}, run="latest")`` and close
                   (one rank; the newest matching run)
sdm ls APP         the CLI command, in-process (typer's ``CliRunner``: no interpreter start)
                   and as a subprocess (``sdm ls APP --catalog URL``, output to a pipe)
sdm show RUN       the same two ways, for the probe run (10 datasets x 10 steps in every catalog)
sdm --version      the subprocess's fixed cost (interpreter, imports), for scale
commit             what rank 0 does per write: ``Catalog.reserve`` + ``Catalog.record_writes``
                   of a new step of an existing dataset (the probe run's ``fields/rho``), per write
=================  =========================================================================

Every operation runs once untimed on every catalog first (imports, compiled statements,
the page cache: reported as ``first``), then ``--repeat`` times, the catalogs and
operations interleaved (the order rotates from repeat to repeat); an operation stops
repeating once its samples add up to ``--budget`` seconds. Medians with min-max. The
commits add steps far beyond the catalog's own (step >= 10^9), which are deleted again
(and the file's high-water mark restored) at the end, so a cached catalog stays as made.

SQLite catalogs are kept in ``--cache`` (default ``/var/tmp/sdm-catalog-scale``) under a
name made of the shape, size, seed and schema (``--rebuild`` makes them again), since
populating 10^7 writes takes a while. PostgreSQL catalogs live in a throwaway server
(``tests/integration/pgserver.py``: durability switched off, fsync and synchronous
commit off) that is populated on every run and stopped at the end.

Writes ``catalog_scale.json`` (every sample), ``catalog_scale.md`` (medians, goal
verdicts) and ``catalog_scale.png`` (time against writes, log-log) into ``--out``
(default ``benchmarks/results``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

import _catalog_populate as P  # noqa: E402

APP = P.APPS[0]
SHOW_RUN = P.PROBE_RUN  # the same size (10 datasets x 10 steps) in every catalog
COMMIT_RUN = P.PROBE_RUN  # its dataset fields/rho; the commits touch nothing the searches measure
COMMIT_STEP0 = 10**9
QUERIES: dict[str, dict[str, Any]] = {
    "find_eq": {"case": "case-07"},
    "find_range": {"re": (">=", 10900.0)},
    "find_two": {"mesh": "channel", "nx": 128},
}
OPEN_QUERY = QUERIES["find_eq"]
OPS: dict[str, str] = {  # key -> label, in table order
    "find_eq": "find = (case)",
    "find_range": "find range (re >=)",
    "find_two": "find 2 attrs (mesh, nx)",
    "open": "open by attrs (1 rank)",
    "ls_inproc": "sdm ls APP (in-process)",
    "ls_subproc": "sdm ls APP (subprocess)",
    "show_inproc": "sdm show RUN (in-process)",
    "show_subproc": "sdm show RUN (subprocess)",
    "startup_subproc": "sdm --version (subprocess)",
    "commit": "commit of one write",
}
ENGINE_LABEL = {"sqlite": "SQLite", "postgresql": "PostgreSQL"}


# ------------------------------------------------------------------ catalogs
@dataclass
class Target:
    """One populated catalog and its measurements."""

    engine: str
    writes: int
    url: str
    populate_s: float
    reused: bool
    samples: dict[str, list[float]] = field(default_factory=dict)
    first: dict[str, float] = field(default_factory=dict)
    checks: dict[str, Any] = field(default_factory=dict)
    commit_state: dict[str, Any] = field(default_factory=dict)
    committer: Committer | None = None

    @property
    def name(self) -> str:
        return f"{ENGINE_LABEL[self.engine]} {_size_text(self.writes)}"


def _size_text(writes: int) -> str:
    exp = len(str(writes)) - 1
    return f"1e{exp}" if writes == 10**exp else str(writes)


def _say(text: str) -> None:
    print(text, flush=True)


def _progress(label: str) -> Callable[[str, int], None]:
    last = [time.perf_counter()]

    def report(table: str, done: int) -> None:
        now = time.perf_counter()
        if now - last[0] > 10:
            last[0] = now
            _say(f"  {label}: {table} {done:,} rows")
    return report


def sqlite_target(cache: Path, writes: int, seed: int, rebuild: bool) -> Target:
    """The cached SQLite catalog of *writes* (populated first when missing or *rebuild*)."""
    key = P.shape_key(writes, seed)
    path, info_path = cache / f"{key}.db", cache / f"{key}.json"
    if rebuild:
        for old in (path, info_path):
            old.unlink(missing_ok=True)
    if path.exists() and info_path.exists():
        info = json.loads(info_path.read_text())
        _say(f"SQLite {_size_text(writes)}: reusing {path} (populated in {info['seconds']:.1f} s)")
        return Target("sqlite", writes, f"sqlite:///{path}", info["seconds"], True)
    cache.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(cache).free
    need = 200 * writes  # about 150 bytes per write row with its indexes, with a margin
    if free < need + 2 * 2**30:
        raise SystemExit(f"not enough space in {cache}: {free / 2**30:.1f} GiB free, about {need / 2**30:.1f} GiB needed")
    partial = cache / f".{key}.partial.db"
    for leftover in (partial, partial.with_name(partial.name + "-wal"), partial.with_name(partial.name + "-shm")):
        leftover.unlink(missing_ok=True)
    _say(f"SQLite {_size_text(writes)}: populating {path} ...")
    info = P.populate(f"sqlite:///{partial}", writes, seed=seed, root=str(cache / "data"),
                      progress=_progress(f"SQLite {_size_text(writes)}"))
    os.replace(partial, path)
    info_path.write_text(json.dumps(info, indent=1))
    _say(f"SQLite {_size_text(writes)}: populated in {info['seconds']:.1f} s ({path.stat().st_size / 2**20:.0f} MiB)")
    return Target("sqlite", writes, f"sqlite:///{path}", info["seconds"], False)


def _load_pgserver() -> Any:
    spec = importlib.util.spec_from_file_location("sdm_bench_pgserver", REPO / "tests" / "integration" / "pgserver.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextmanager
def postgresql_server() -> Iterator[Any]:
    """A throwaway PostgreSQL server (durability off), stopped and removed afterwards."""
    server = _load_pgserver().PgServer()
    try:
        server.start()
        yield server
    finally:
        server.stop()


def postgresql_target(server: Any, writes: int, seed: int) -> Target:
    """A new database on *server*, populated with *writes*."""
    url = server.url_for(server.create_database(f"scale_{writes}"))
    _say(f"PostgreSQL {_size_text(writes)}: populating ...")
    info = P.populate(url, writes, seed=seed, progress=_progress(f"PostgreSQL {_size_text(writes)}"))
    _say(f"PostgreSQL {_size_text(writes)}: populated in {info['seconds']:.1f} s")
    return Target("postgresql", writes, url, info["seconds"], False)


# ------------------------------------------------------------------ operations
def _cli_env() -> dict[str, str]:
    """The environment of ``sdm`` subprocesses: this checkout's sources first."""
    src = str(REPO / "src")
    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": src + (os.pathsep + path if path else "")}


def _sdm_command() -> list[str]:
    script = Path(sys.executable).with_name("sdm")
    return [str(script)] if script.exists() else [sys.executable, "-m", "sdm"]


def _subprocess(args: Sequence[str]) -> int:
    done = subprocess.run([*_sdm_command(), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          stdin=subprocess.DEVNULL, env=_cli_env(), timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(f"sdm {' '.join(args)} failed: {done.stderr.decode(errors='replace')[-500:]}")
    return len(done.stdout)


def _inprocess(args: Sequence[str]) -> int:
    from typer.testing import CliRunner

    from sdm._cli.main import app

    result = CliRunner().invoke(app, list(args))
    if result.exit_code != 0:
        raise RuntimeError(f"sdm {' '.join(args)} failed ({result.exit_code}): {result.output[-500:]}")
    return len(result.output)


def _find(url: str, key: str) -> list[int]:
    import sdm

    return [r.id for r in sdm.find(catalog=url, application=APP, attributes=QUERIES[key])]


def _open(url: str) -> int:
    import sdm

    with sdm.open(APP, "r", catalog=url, attributes=OPEN_QUERY, run="latest") as s:  # the newest of many matches
        return int(s.run_id)


class Committer:
    """New steps of one existing dataset, committed as rank 0 commits a write."""

    def __init__(self, target: Target) -> None:
        import sdm

        self.target = target
        cat = sdm.Catalog(target.url, create=False)
        try:
            run = cat.run(COMMIT_RUN)
        finally:
            cat.close()
        group = next(g for g in run.groups if g.name == P.GROUPS[0][0])
        dataset = group.datasets[0]
        self.dataset_id, self.path = dataset.id, f"{run.dir}/{group.name}.sdm"
        self.nbytes = 8 * int(dataset.shape[0]) * int(dataset.shape[1]) * int(dataset.shape[2])
        state = target.commit_state
        if "alloc_end" not in state:
            state["alloc_end"] = self._alloc_end()
            state["next"] = 0

    def _alloc_end(self) -> int:
        import sqlalchemy as sa

        from sdm.catalog import Catalog
        from sdm.catalog import schema as S

        cat = Catalog(self.target.url, create=False)
        try:
            with cat.engine.connect() as con:
                return int(con.execute(sa.select(S.files.c.alloc_end).where(
                    S.files.c.run_id == COMMIT_RUN, S.files.c.path == self.path)).scalar_one())
        finally:
            cat.close()

    def commit(self, count: int) -> list[float]:
        """Commit *count* new steps; the seconds of each (reserve + record)."""
        import sdm

        state = self.target.commit_state
        cat = sdm.Catalog(self.target.url, create=False)
        times = []
        try:
            for _ in range(count):
                step = COMMIT_STEP0 + 10 * state["next"]
                state["next"] += 1
                started = time.perf_counter()
                offset = cat.reserve(COMMIT_RUN, [(self.path, P.LEVEL, self.nbytes, False)])[0]
                cat.record_writes(COMMIT_RUN, [dict(
                    dataset_id=self.dataset_id, step=step, path=self.path, level=P.LEVEL, offset=offset,
                    nbytes=self.nbytes, checksum=f"{step:016x}", checksum_algo="mix64-v2", method="collective",
                    seconds=0.01, nprocs=64, overwrite=False)])
                times.append(time.perf_counter() - started)
        finally:
            cat.close()
        return times

    def undo(self) -> int:
        """Delete the steps committed here, restore the file's high-water mark and the dataset's step
        summary; returns the rows deleted."""
        import sqlalchemy as sa

        from sdm.catalog import Catalog
        from sdm.catalog import schema as S

        cat = Catalog(self.target.url, create=False)
        try:
            with cat.engine.begin() as con:
                gone = con.execute(S.writes.delete().where(S.writes.c.dataset_id == self.dataset_id,
                                                           S.writes.c.step >= COMMIT_STEP0)).rowcount
                con.execute(S.files.update().where(S.files.c.run_id == COMMIT_RUN, S.files.c.path == self.path)
                            .values(alloc_end=self.target.commit_state["alloc_end"]))
                w, d = S.writes, S.datasets
                mine = w.c.dataset_id == self.dataset_id
                con.execute(d.update().where(d.c.id == self.dataset_id).values(  # the step summary, as it was
                    nsteps=sa.select(sa.func.count()).where(mine).scalar_subquery(),
                    first_step=sa.select(sa.func.min(w.c.step)).where(mine).scalar_subquery(),
                    last_step=sa.select(sa.func.max(w.c.step)).where(mine).scalar_subquery(),
                    nbytes_written=sa.select(sa.func.coalesce(sa.func.sum(w.c.nbytes), 0)).where(mine)
                    .scalar_subquery()))
            if cat.engine.dialect.name == "sqlite":
                with cat.engine.connect() as con:
                    con.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
            return int(gone)
        finally:
            cat.close()


def operations(target: Target, commits: int) -> dict[str, Callable[[], Any]]:
    """Each operation of the benchmark on *target*: a call returning what it found."""
    url = target.url
    committer = target.committer
    assert committer is not None, "the target's committer is made before the measurements"
    ls_args, show_args = ["ls", APP, "--catalog", url], ["show", str(SHOW_RUN), "--catalog", url]
    ops: dict[str, Callable[[], Any]] = {key: partial(_find, url, key) for key in QUERIES}
    ops.update({
        "open": lambda: _open(url),
        "ls_inproc": lambda: _inprocess(ls_args),
        "ls_subproc": lambda: _subprocess(ls_args),
        "show_inproc": lambda: _inprocess(show_args),
        "show_subproc": lambda: _subprocess(show_args),
        "startup_subproc": lambda: _subprocess(["--version"]),
        "commit": lambda: committer.commit(commits),
    })
    return ops


def check(target: Target) -> dict[str, Any]:
    """What the operations found, for the report and its test (untimed; ``--json`` output)."""
    out: dict[str, Any] = {key: _find(target.url, key) for key in QUERIES}
    out["open"] = _open(target.url)
    listing = json.loads(_json_output(["ls", APP, "--catalog", target.url, "--json"]))
    out["ls_runs"] = len(listing["runs"])  # the first page, where `sdm ls` pages
    out["ls_total"] = listing.get("total", len(listing["runs"]))
    out["ls_limit"] = listing.get("limit")
    shown = json.loads(_json_output(["show", str(SHOW_RUN), "--catalog", target.url, "--json"]))
    out["show_datasets"] = sum(len(g["datasets"]) for g in shown["groups"])
    return out


def _json_output(args: list[str]) -> str:
    from typer.testing import CliRunner

    from sdm._cli.main import app

    result = CliRunner().invoke(app, args)
    if result.exit_code != 0:
        raise RuntimeError(f"sdm {' '.join(args)} failed: {result.output[-500:]}")
    return result.output


def _ls_limit() -> bool:
    """Whether ``sdm ls`` has a ``--limit`` option (a first page by default)."""
    from sdm._cli import main as cli

    return any(p.name == "limit" for p in _command_params(cli.app, "ls"))


def _command_params(app: Any, name: str) -> list[Any]:
    import typer.main

    command = typer.main.get_command(app)
    sub = getattr(command, "commands", {}).get(name)
    return list(sub.params) if sub is not None else []


def measure(targets: list[Target], repeat: int, commits: int, budget: float) -> None:
    """Warm up every operation on every catalog, then the interleaved repeats."""
    ops = {id(t): operations(t, commits) for t in targets}
    for t in targets:
        _say(f"{t.name}: first calls")
        for key, fn in ops[id(t)].items():
            started = time.perf_counter()
            found = fn()
            took = time.perf_counter() - started
            t.first[key] = round(statistics.median(found) if key == "commit" else took, 7)
            t.samples[key] = []
        t.checks = check(t)
    for r in range(repeat):
        _say(f"repeat {r + 1}/{repeat}")
        order = targets[r % len(targets):] + targets[:r % len(targets)]
        for t in order:
            keys = list(ops[id(t)])
            keys = keys[r % len(keys):] + keys[:r % len(keys)]
            for key in keys:
                if t.samples[key] and sum(t.samples[key]) >= budget:
                    continue
                started = time.perf_counter()
                found = ops[id(t)][key]()
                took = time.perf_counter() - started
                t.samples[key].append(statistics.median(found) if key == "commit" else took)


# ------------------------------------------------------------------ report
def summary(values: list[float]) -> dict[str, Any]:
    return {"median": round(statistics.median(values), 7), "min": round(min(values), 7),
            "max": round(max(values), 7), "n": len(values)}


def _ms(seconds: float) -> str:
    ms = seconds * 1e3
    return f"{ms:.3g}" if ms < 100 else f"{ms:.0f}"


def _cell(s: dict[str, Any] | None) -> str:
    if not s:
        return "-"
    n = f", n={s['n']}" if s["n"] < 3 else ""
    return f"{_ms(s['median'])} ({_ms(s['min'])}-{_ms(s['max'])}{n})"


GOAL_MS = {"find_eq": 50, "find_range": 50, "find_two": 50, "open": 100, "ls_inproc": 200, "ls_subproc": 200}
GOAL_WRITES = {"sqlite": 10**7, "postgresql": 10**6}  # the sizes the goals name
FLAT_OPS = ("show_inproc", "show_subproc", "commit")
FLAT_RATIO = 1.25


def goals(results: dict[str, dict[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Verdicts: thresholds at the goal's size (:data:`GOAL_WRITES`) and above, else at the largest
    size measured; independence of size from the smallest size to the largest."""
    out = []
    for engine, sizes in results.items():
        if not sizes:
            continue
        ordered = sorted(sizes, key=int)
        big, small = ordered[-1], ordered[0]
        judged = [w for w in ordered if int(w) >= GOAL_WRITES[engine]] or [big]
        for w in judged:
            for key, limit in GOAL_MS.items():
                s = sizes[w].get(key)
                if s:
                    out.append({"engine": engine, "writes": int(w), "op": key, "goal": f"< {limit} ms",
                                "measured_ms": s["median"] * 1e3, "pass": s["median"] * 1e3 < limit})
        for key in FLAT_OPS:
            a, b = sizes[small].get(key), sizes[big].get(key)
            if a and b and big != small:
                ratio = b["median"] / a["median"]
                out.append({"engine": engine, "writes": int(big), "op": key,
                            "goal": f"independent of size ({_size_text(int(small))} -> {_size_text(int(big))})",
                            "measured_ms": b["median"] * 1e3, "ratio": ratio,
                            "pass": ratio <= FLAT_RATIO})
    return out


def markdown(data: dict[str, Any]) -> str:
    results, meta = data["results"], data["meta"]
    cols = [(e, w) for e, sizes in results.items() for w in sorted(sizes, key=int)]
    lines = [
        "# Catalog scale: SDM's searches, listings and commits against catalog size",
        "",
        f"SDM {meta['sdm_version']}, commit {meta['git_commit']}, {meta['date']}, host {meta['host']} "
        f"({meta['cores']} cores, {meta['fs']} for the SQLite files), Python {meta['python']}. "
        f"Milliseconds, median (min-max) of {data['settings']['repeat']} interleaved repeats "
        "(n shown when fewer samples fit the time budget); warm page cache.",
        "",
        "| operation | " + " | ".join(f"{ENGINE_LABEL[e]} {_size_text(int(w))}" for e, w in cols) + " |",
        "|---|" + "---|" * len(cols),
    ]
    for key, label in OPS.items():
        lines.append(f"| {label} | " + " | ".join(_cell(results[e][w].get(key)) for e, w in cols) + " |")
    lines.append("| populate (s) | " + " | ".join(f"{data['catalogs'][f'{e}:{w}']['populate_s']:.1f}"
                                                    for e, w in cols) + " |")
    lines += ["", "## Goals", "", "| engine | writes | operation | goal | measured ms | verdict |", "|---|---|---|---|---|---|"]
    for g in data["goals"]:
        extra = f" (x{g['ratio']:.2f})" if "ratio" in g else ""
        lines.append(f"| {ENGINE_LABEL[g['engine']]} | {_size_text(g['writes'])} | {OPS[g['op']]} | {g['goal']} | "
                     f"{_ms(g['measured_ms'] / 1e3)}{extra} | {'PASS' if g['pass'] else 'FAIL'} |")
    s = data["shape"]
    lines += [
        "",
        f"Shape: {s['runs']} runs over {len(s['applications'])} applications, {s['datasets_per_run']} datasets "
        f"and {s['attribute_rows_per_run']} attribute rows per run, steps per dataset = writes / 10^4 "
        "(`benchmarks/_catalog_populate.py`). Queries on application "
        f"`{APP}` ({s['runs'] // len(s['applications'])} runs): `case = case-07`, `re >= 10900` (~1% of its "
        "runs), `mesh = channel and nx = 128`; open = the newest run with `case = case-07`; `sdm show "
        f"{SHOW_RUN}` (the probe run: 10 datasets x {P.PROBE_STEPS} steps at every size, so what grows is the "
        "catalog, not the run); commit = `Catalog.reserve` + `Catalog.record_writes` of a new step of the probe "
        "run (median per write of "
        f"{data['settings']['commits']} writes per repeat). In-process CLI = typer's CliRunner in this "
        "process; subprocess = `sdm ...` with its output to a pipe (`sdm --version` shows the fixed start cost). "
        f"`sdm ls` has a `--limit` option: {'yes (default first page)' if data['ls_limit'] else 'no (all runs)'}. "
        f"Independent of size: the largest size's median within x{FLAT_RATIO} of the smallest size's.",
    ]
    if "postgresql" in results and results["postgresql"]:
        lines += ["", "PostgreSQL: a throwaway local server (tests/integration/pgserver.py) with durability "
                  "switched off (fsync, synchronous_commit and full_page_writes off), populated with COPY and "
                  "ANALYZEd; its commits are therefore cheaper than a durable server's."]
    return "\n".join(lines) + "\n"


def plot(data: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.6, 3.8), dpi=72)
    colors = plt.get_cmap("tab10")
    for n, key in enumerate(OPS):
        for engine, style in (("sqlite", "-"), ("postgresql", "--")):
            sizes = sorted(data["results"].get(engine, {}), key=int)
            pts = [(int(w), data["results"][engine][w][key]["median"] * 1e3) for w in sizes
                   if data["results"][engine][w].get(key)]
            if pts:
                ax.plot(*zip(*pts), style, marker="o", ms=3, color=colors(n), lw=1.2,
                        label=OPS[key] if engine == "sqlite" or "sqlite" not in data["results"] else None)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("writes in the catalog")
    ax.set_ylabel("ms (median)")
    ax.set_title("SDM catalog: time vs size (SQLite solid, PostgreSQL dashed)", fontsize=9)
    ax.grid(True, which="major", lw=0.3)
    ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    from _plots import save_png
    save_png(fig, path, dpi=72)
    plt.close(fig)


# ------------------------------------------------------------------ main
def _sizes(text: str) -> list[int]:
    return [int(float(x)) for x in text.split(",") if x.strip()]


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="1e5,1e6,1e7", help="writes per SQLite catalog (comma-separated)")
    p.add_argument("--pg-sizes", default="1e5,1e6", help="writes per PostgreSQL catalog (comma-separated)")
    p.add_argument("--engines", default="sqlite,postgresql", help="sqlite, postgresql or both")
    p.add_argument("--repeat", type=int, default=7, help="timed repeats of every operation (7)")
    p.add_argument("--commits", type=int, default=30, help="writes committed per repeat (30)")
    p.add_argument("--budget", type=float, default=120.0, help="stop repeating an operation after this many seconds")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cache", default=None, help="directory of the SQLite catalogs (default /var/tmp/sdm-catalog-scale)")
    p.add_argument("--rebuild", action="store_true", help="populate the SQLite catalogs again")
    p.add_argument("--populate-only", action="store_true", help="make the SQLite catalogs of --sizes, measure nothing")
    p.add_argument("--report", metavar="JSON", help="only write the report again from a catalog_scale.json")
    p.add_argument("--out", default=str(HERE / "results"), help="results directory")
    p.add_argument("--quick", action="store_true", help="CI size: SQLite, 1e4 writes, 1 repeat, 3 commits")
    args = p.parse_args(argv)
    if args.quick:
        args.sizes, args.engines, args.repeat, args.commits = "1e4", "sqlite", 1, 3
    return args


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse(argv)
    if args.report:
        return report(json.loads(Path(args.report).read_text()), Path(args.out))
    from mpi4py import MPI

    from _io_bench import meta

    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    unknown = set(engines) - set(ENGINE_LABEL)
    if unknown:
        raise SystemExit(f"unknown engines {sorted(unknown)}; use sqlite and/or postgresql")
    load_before = os.getloadavg()[0]
    targets: list[Target] = []
    with ExitStack() as stack:
        if args.cache is None and args.quick:
            cache = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="sdm-catscale-")))
        else:
            cache = Path(args.cache or "/var/tmp/sdm-catalog-scale")
        if "sqlite" in engines:
            targets += [sqlite_target(cache, w, args.seed, args.rebuild) for w in _sizes(args.sizes)]
        if args.populate_only:
            return {"catalogs": {t.url: t.populate_s for t in targets}}
        pg_version = None
        if "postgresql" in engines:
            server = stack.enter_context(postgresql_server())
            pg_version = server.psql("SHOW server_version")
            targets += [postgresql_target(server, w, args.seed) for w in _sizes(args.pg_sizes)]
        try:
            for t in targets:
                t.committer = Committer(t)
            measure(targets, args.repeat, args.commits, args.budget)
        finally:
            for t in targets:
                if t.committer is not None:
                    t.committer.undo()
        info = meta(MPI.COMM_WORLD, cache, load_before)
    results: dict[str, dict[str, dict[str, Any]]] = {e: {} for e in engines}
    for t in targets:
        results[t.engine][str(t.writes)] = {k: {**summary(v), "first": t.first[k]} for k, v in t.samples.items() if v}
    data: dict[str, Any] = {
        "meta": {**info, "postgresql": pg_version},
        "settings": {"repeat": args.repeat, "commits": args.commits, "budget_s": args.budget, "seed": args.seed,
                     "quick": args.quick},
        "shape": {"applications": list(P.APPS), "runs": P.RUNS, "datasets_per_run": P.DATASETS_PER_RUN,
                  "attribute_rows_per_run": 16, "shape_version": P.SHAPE_VERSION},
        "queries": {"application": APP, **{k: {a: list(v) if isinstance(v, tuple) else v for a, v in q.items()}
                                           for k, q in QUERIES.items()},
                    "open": OPEN_QUERY, "show_run": SHOW_RUN, "commit_run": COMMIT_RUN},
        "ls_limit": _ls_limit(),
        "catalogs": {f"{t.engine}:{t.writes}": {"populate_s": t.populate_s, "reused": t.reused, "found": t.checks}
                     for t in targets},
        "results": results,
        "samples": {f"{t.engine}:{t.writes}": {k: [round(x, 7) for x in v] for k, v in t.samples.items()}
                    for t in targets},
    }
    return report(data, Path(args.out))


def report(data: dict[str, Any], out: Path) -> dict[str, Any]:
    """Judge the goals and write ``catalog_scale.{json,md,png}`` into *out*."""
    from _io_bench import write_results

    data["goals"] = goals(data["results"])
    write_results(out, "catalog_scale", data, markdown(data), lambda path: plot(data, path))
    return data


if __name__ == "__main__":
    main()
