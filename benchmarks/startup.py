"""Startup benchmark: `import sdm`, the `sdm` command and opening a session, this SDM against a baseline.

Run from the repository (no mpiexec: it starts the MPI jobs itself)::

    python benchmarks/startup.py                              # this checkout vs commit b8decca, 4 ranks
    python benchmarks/startup.py --baseline HEAD~3 --repeats 7 --dirs /dev/shm,/scratch/me
    python benchmarks/startup.py --only-box --box-repeats 9    # the serial box read alone (other sections kept)
    python benchmarks/startup.py --only-cli --baseline HEAD~1   # the command line alone (other sections kept)

Contenders are source trees: *this* (``src/`` next to this file) and *baseline* (the
``src/`` of a git commit, extracted with ``git archive`` into a temporary directory and
removed afterwards). Every measurement alternates between them (the order rotates from
repeat to repeat), each in a fresh interpreter:

=====================  ===========================================================================
import sdm             ``python -X importtime -c "import sdm"``: the cumulative import time of
                       ``sdm`` (and ``numpy`` alone, for scale), and which heavy modules it loaded
sdm --help, sdm ls,    the command line (:mod:`_cli_startup`): wall time of ``python -m sdm ...``
sdm ls APP             until it exits (a catalog with 3 runs made beforehand), no MPI, every
                       command of every contender in each of ``--cli-repeats`` repeats, in
                       rotating order; the medians of this checkout against the goals (under
                       0.2 s and 0.3 s), and where its start-up goes (``-X importtime``)
session open           ``mpiexec -n NP``: each job opens sessions in mode ``"w"`` one after the
                       other, alternating a *fresh* data root (new SQLite catalog: creation, run
                       row, run directory) and an *existing* one (the catalog of the first open),
                       and times ``sdm.open`` from a barrier to its return on the slowest rank;
                       ``import sdm`` plus the job's *first* open (fresh catalog, lazy imports
                       included), from a barrier before the import, is reported apart
serial box read        one process (pattern (e) of ``peers.py``, at ``--box-n``): a fresh interpreter
                       imports SDM's modules as ``peers.py`` does (or ``h5py``), then times opening the run
                       read-only (``run="latest"`` by attributes; ``h5py.File(..., "r")``), reading
                       the central box of half the edge at the last step of ``a0`` (``group["a"]
                       ["a0"][box]``, group lookup included; ``f["a0"][box]``) and closing; this
                       checkout's SDM against h5py, interleaved, the result checked against numpy;
                       wall and CPU time; then one more SDM process under cProfile (CPU time):
                       where SDM's time goes, by area and function
=====================  ===========================================================================

Writes ``benchmarks/results/startup.{json,md,png}`` with medians and min-max, the SDM
version, the git commit and the machine (processor, cores, memory, load); the PNG shows
the command line's times against their goals.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

HERE = Path(__file__).resolve().parent
THIS_SRC = HERE.parent / "src"
sys.path.insert(0, str(HERE))
import _cli_startup as CLI  # noqa: E402 - the command-line section, beside this file
HEAVY = ("sqlalchemy", "alembic", "matplotlib", "typer", "rich", "mpi4py", "numpy")


# ------------------------------------------------------------------ the MPI job
def worker(root: Path, count: int) -> None:
    """Open sessions under *root* (collective); rank 0 prints the times as one JSON line."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    comm.Barrier()
    started = time.perf_counter()
    import sdm  # the first open counts what `import sdm` and the open's own imports cost

    def timed(data_root: Path, start: float | None = None) -> float:
        if start is None:
            comm.Barrier()
            start = time.perf_counter()
        session = sdm.open("startup", root=data_root, catalog=f"sqlite:///{data_root}/catalog.db")
        elapsed = time.perf_counter() - start
        session.close()
        return float(comm.allreduce(elapsed, op=MPI.MAX))

    first = timed(root / "first", started)
    times: dict[str, list[float]] = {"fresh": [], "existing": []}
    for i in range(count):
        for mode in ("fresh", "existing") if i % 2 == 0 else ("existing", "fresh"):
            times[mode].append(timed(root / f"fresh-{i}" if mode == "fresh" else root / "first"))
    if comm.Get_rank() == 0:
        print("RESULT " + json.dumps({"first": first, **times}), flush=True)


# ------------------------------------------------------------- the serial box read
BOX_STEPS, BOX_VARS = 2, 4


def _box(n: int) -> tuple[Any, ...]:
    """Pattern (e)'s box: half the edge in every dimension, centred, at the last step."""
    return (BOX_STEPS - 1, *(slice(n // 4, n // 4 + n // 2),) * 3)


def _box_values(n: int, step: int, var: int) -> Any:
    import numpy as np

    return np.arange(n ** 3, dtype="<f8").reshape(n, n, n) * (var + 1) + step


def box_setup(where: Path, n: int) -> None:
    """Write pattern a's run (one process) with SDM and the same ``a0`` with h5py, under *where*."""
    import h5py
    from mpi4py import MPI

    import sdm

    names = [f"a{v}" for v in range(BOX_VARS)]
    with sdm.open("peers", "w", comm=MPI.COMM_SELF, root=str(where), catalog=f"sqlite:///{where}/catalog.db",
                  attributes={"pattern": "a"}) as s:
        g = s.make_group("a", names, dtype="<f8", shape=(n, n, n), level=3)
        for step in range(BOX_STEPS):
            g.write_step(step, {name: _box_values(n, step, v) for v, name in enumerate(names)})
    with h5py.File(where / "out.h5", "w") as f:
        d = f.create_dataset("a0", (BOX_STEPS, n, n, n), dtype="<f8")
        for step in range(BOX_STEPS):
            d[step] = _box_values(n, step, 0)


#: Where a profile's CPU time is counted: (area, test on "file:function") in order, the first that holds
PROFILE_AREAS = (("SQLite / PostgreSQL driver (statements)", lambda k: "sqlite3" in k or "psycopg" in k),
                 ("SQLAlchemy", lambda k: "/sqlalchemy/" in k),
                 ("sdm.catalog", lambda k: "/sdm/catalog/" in k),
                 ("sdm (session, group, lazy arrays, engine)", lambda k: "/sdm/" in k),
                 ("numpy", lambda k: "numpy" in k),
                 ("Python and other libraries", lambda k: True))


def _profile_summary(pr: Any, top: int = 12) -> dict[str, Any]:
    """CPU time of a cProfile run by area (:data:`PROFILE_AREAS`) and its costliest functions (own time)."""
    import pstats

    rows = []
    for (file, line, func), (_cc, nc, tt, _ct, _callers) in pstats.Stats(pr).stats.items():  # type: ignore[attr-defined]
        label = func if file == "~" else f"{Path(file).parent.name}/{Path(file).name}:{line}({func})"
        rows.append((f"{file}:{func}", tt, nc, label))
    areas: dict[str, float] = {name: 0.0 for name, _ in PROFILE_AREAS}
    for key, tt, _nc, _label in rows:
        areas[next(name for name, test in PROFILE_AREAS if test(key))] += tt
    rows.sort(key=lambda r: r[1], reverse=True)
    return {"areas": areas, "top": [[label, tt, nc] for _key, tt, nc, label in rows[:top]],
            "total": sum(r[1] for r in rows)}


def box_worker(contender: str, where: Path, n: int) -> None:
    """One fresh process: the imports, then open / read the box / close timed; prints one JSON line.

    ``sdm-profile``: SDM's, under cProfile counting CPU time; also prints its summary.
    """
    import cProfile
    import importlib

    import numpy as np

    profile = contender == "sdm-profile"
    contender = "sdm" if profile else contender
    if contender == "sdm":
        from mpi4py import MPI

        import sdm

        import pkgutil

        # every module a session may use, before the clock, as peers.py does (optional front ends aside)
        skip = ("sdm._cli", "sdm.xarray", "sdm.exporting", "sdm.plot", "sdm.fem", "sdm.bench", "sdm.examples",
                "sdm.__main__", "sdm.catalog.migrations")
        for mod in pkgutil.walk_packages(sdm.__path__, "sdm."):
            if not mod.name.startswith(skip):
                importlib.import_module(mod.name)
    else:
        import h5py
    box = _box(n)
    pr = cProfile.Profile(time.process_time) if profile else None
    if pr is not None:
        pr.enable()
    c0, t0 = time.process_time(), time.perf_counter()
    if contender == "sdm":
        s = sdm.open("peers", "r", comm=MPI.COMM_SELF, catalog=f"sqlite:///{where}/catalog.db",
                     attributes={"pattern": "a"}, run="latest")
        t1 = time.perf_counter()
        got = s.group("a")["a0"][box]
        t2 = time.perf_counter()
        s.close()
    else:
        f = h5py.File(where / "out.h5", "r")
        t1 = time.perf_counter()
        got = f["a0"][box]
        t2 = time.perf_counter()
        f.close()
    t3, c3 = time.perf_counter(), time.process_time()
    if pr is not None:
        pr.disable()
        print("PROFILE " + json.dumps(_profile_summary(pr)), flush=True)
    bad = int(np.count_nonzero(got != _box_values(n, BOX_STEPS - 1, 0)[box[1:]]))
    print("RESULT " + json.dumps({"open": t1 - t0, "read": t2 - t1, "close": t3 - t2, "total": t3 - t0,
                                  "total CPU time": c3 - c0, "mismatches": bad}), flush=True)


def _box_job(src: Path, contender: str, where: Path, n: int) -> dict[str, Any]:
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--box-worker", contender, str(where),
                          "--box-n", str(n)], capture_output=True, text=True, env=_env(src), check=True, timeout=300)
    found = json.loads(next(x for x in out.stdout.splitlines() if x.startswith("RESULT "))[len("RESULT "):])
    profile = [x for x in out.stdout.splitlines() if x.startswith("PROFILE ")]
    if profile:
        found["profile"] = json.loads(profile[0][len("PROFILE "):])
    if found["mismatches"]:
        raise SystemExit(f"serial box read of {contender}: {found['mismatches']} wrong values")
    return found


# ------------------------------------------------------------------- the driver
def _env(src: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(src)}


def _importtime(src: Path, module: str) -> tuple[float, list[str]]:
    """Cumulative import time of *module* (seconds) and the heavy modules it loaded, in a fresh interpreter."""
    code = f"import {module}, sys; print(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True,
                         env=_env(src), check=True)
    cumulative = [int(m.group(1)) for m in re.finditer(rf"^import time:\s+\d+ \|\s+(\d+) \| {re.escape(module)}$",
                                                       out.stderr, re.M)]
    return cumulative[-1] / 1e6, out.stdout.split()


def _wall(src: Path, argv: Sequence[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, *argv], env={**_env(src), **env}, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def _open_job(src: Path, np_: int, directory: Path, count: int) -> dict[str, Any]:
    mpiexec = Path(sys.executable).parent / "mpiexec"
    root = Path(tempfile.mkdtemp(prefix="sdm-startup-", dir=directory))
    try:
        out = subprocess.run([str(mpiexec if mpiexec.exists() else "mpiexec"), "-n", str(np_), sys.executable,
                              str(Path(__file__).resolve()), "--worker", str(root), "--count", str(count)],
                             capture_output=True, text=True, env=_env(src), check=True, timeout=600)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    line = next(x for x in out.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def _baseline(commit: str, into: Path) -> Path:
    """The ``src/`` of *commit*, extracted into *into*."""
    archive = subprocess.run(["git", "-C", str(HERE.parent), "archive", commit, "src"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into / "src"


def _stats(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def _ms(s: dict[str, float]) -> str:
    return f"{1e3 * s['median']:.1f} ({1e3 * s['min']:.1f}-{1e3 * s['max']:.1f})"


def markdown(results: dict[str, Any], meta: dict[str, Any]) -> str:
    """The tables: time per contender (ms, median and min-max) and the ratio this / baseline."""
    names = list(results["contenders"])
    lines = [f"# Startup: `import sdm`, the `sdm` command, opening a session ({meta['nprocs']} ranks)", ""]
    if "cli" in results:
        lines += CLI.markdown(results["cli"], results["cli_contenders"], meta)
    lines += ["## `import sdm` and opening a session", "",
              f"SDM {meta['sdm_version']} at {meta.get('git_commit_sessions') or meta['git_commit']} against "
              f"{names[1]} ({results['contenders'][names[1]]}); {meta['cores']} cores, {meta['mpi']}, Python "
              f"{meta['python']}, load {meta['load_before']:.2f} before / {meta['load_after']:.2f} after, "
              f"{meta['date']}. Medians (min-max) in ms of {meta['repeats']} alternating repeats (session opens: "
              f"{meta['repeats']} jobs x {meta['count']} opens each).", "",
              "| measurement | " + " | ".join(names) + f" | {names[0]} / {names[1]} |",
              "|---|" + "---|" * (len(names) + 1)]
    for key, rows in results["table"].items():
        a, b = rows[names[0]]["median"], rows[names[1]]["median"]
        lines.append(f"| {key} | " + " | ".join(_ms(rows[n]) for n in names) + f" | {a / b:.2f} |")
    lines += ["", "Heavy modules loaded by `import sdm`: " + "; ".join(
        f"{n}: {', '.join(results['import_loads'][n]) or 'none'}" for n in names) + ".", "",
        "*session open*: `sdm.open(..., mode='w')` from a barrier to its return on the slowest rank (catalog, run row, "
        "run directory, communicator, argument agreement); *fresh*: a new data root and SQLite catalog each time; "
        "*existing*: the catalog of an earlier open; *import sdm + first session open*: from a barrier before `import sdm` "
        "to the return of the job's first open (fresh catalog), every import included. Contenders alternate in every repeat, each in new processes.", ""]
    box = results.get("serial_box")
    if box:
        b = meta["box"]
        lines += [f"## Serial box read (pattern e): one process, {b['box']} of {b['n']}^3 f8, {b['place']}", "",
                  f"Medians (min-max) in ms of {b['repeats']} interleaved fresh processes each; imports made before "
                  "the clock (SDM's modules as in `peers.py`, `h5py`). SDM: `sdm.open(..., 'r', run='latest', "
                  "attributes=...)`, `s.group('a')['a0'][box]` (the group's lookup included), `close`; h5py: "
                  "`h5py.File(path, 'r')`, `f['a0'][box]`, `close`. Ratio: h5py time over SDM time (goal: at least 0.5)."
                  + (f" Measured at {b['git_commit']}, {b['date']}, load {b['load_before']:.2f} before / "
                     f"{b['load_after']:.2f} after." if "git_commit" in b else ""),
                  "", "| part | SDM | h5py | h5py / SDM |", "|---|---|---|---|"]
        for part in ("open", "read", "close", "total", "total CPU time"):
            if part in box:
                a, h = box[part]["sdm"], box[part]["h5py"]
                lines.append(f"| {part} | {_ms(a)} | {_ms(h)} | {h['median'] / a['median']:.2f} |")
        lines.append("")
        prof = results.get("serial_box_profile")
        if prof:
            lines += [f"Where SDM's CPU time goes (one more fresh process under cProfile counting CPU time, "
                      f"{1e3 * prof['total']:.1f} ms in all with the profiler's own cost; the catalog's statements "
                      "run as SQL text on the driver's connection, see `sdm.catalog.reader`):", "",
                      "| area | CPU ms |", "|---|---|"]
            lines += [f"| {area} | {1e3 * t:.1f} |" for area, t in prof["areas"].items()]
            lines += ["", "| costliest functions (own time) | CPU ms | calls |", "|---|---|---|"]
            lines += [f"| `{label}` | {1e3 * t:.2f} | {nc} |" for label, t, nc in prof["top"]]
            lines.append("")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark (or, with ``--worker``, one MPI job of it)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--baseline", default="b8decca", help="git commit to compare with (default b8decca)")
    p.add_argument("--np", type=int, default=4, help="ranks of the session-open jobs (4)")
    p.add_argument("--repeats", type=int, default=5, help="alternating repeats (5)")
    p.add_argument("--count", type=int, default=8, help="opens of each kind per MPI job (8)")
    p.add_argument("--dirs", default=f"/dev/shm,{tempfile.gettempdir()}",
                   help="comma-separated directories for the data roots (default /dev/shm and the temp dir)")
    p.add_argument("--out", type=Path, default=HERE / "results")
    p.add_argument("--box-n", type=int, default=192, help="edge of the serial box read's arrays (192: pattern e)")
    p.add_argument("--box-repeats", type=int, default=15, help="interleaved repeats of the serial box read (15)")
    p.add_argument("--only-box", action="store_true", help="measure the serial box read alone")
    p.add_argument("--cli-repeats", type=int, default=15, help="interleaved repeats of the command line (15)")
    p.add_argument("--only-cli", action="store_true", help="measure the command line alone")
    p.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--box-worker", nargs=2, help=argparse.SUPPRESS)
    p.add_argument("--box-setup", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker is not None:
        worker(args.worker, args.count)
        return 0
    if args.box_setup is not None:
        box_setup(args.box_setup, args.box_n)
        return 0
    if args.box_worker is not None:
        box_worker(args.box_worker[0], Path(args.box_worker[1]), args.box_n)
        return 0
    sys.path.insert(0, str(THIS_SRC))
    sys.path.insert(0, str(HERE))
    from _io_bench import fs_type, provenance  # this checkout's SDM

    if args.only_cli:
        return only_cli(args, provenance)

    load_before = os.getloadavg()[0]
    scratch = Path(tempfile.mkdtemp(prefix="sdm-startup-"))
    try:
        contenders = {"this": THIS_SRC, "baseline": _baseline(args.baseline, scratch)}
        labels = {"this": "this checkout", "baseline": f"commit {args.baseline}"}
        cli = CLI.measure(contenders, args.cli_repeats, _cli_catalog(scratch)) if not args.only_box else None
        dirs = [Path(d) for d in args.dirs.split(",") if d]
        samples: dict[str, dict[str, list[float]]] = {}
        loads: dict[str, list[str]] = {}

        def add(key: str, name: str, value: float) -> None:
            samples.setdefault(key, {}).setdefault(name, []).append(value)

        names = list(contenders)
        box_where = Path(tempfile.mkdtemp(prefix="sdm-startup-box-", dir=dirs[0]))
        subprocess.run([sys.executable, str(Path(__file__).resolve()), "--box-setup", str(box_where), "--box-n",
                        str(args.box_n)], env=_env(THIS_SRC), check=True, timeout=600)
        box_place = f"{dirs[0]} ({fs_type(dirs[0]) or 'unknown'})"
        box: dict[str, dict[str, list[float]]] = {}
        try:
            for r in range(args.box_repeats):
                for c in ("sdm", "h5py") if r % 2 == 0 else ("h5py", "sdm"):
                    for part, value in _box_job(THIS_SRC, c, box_where, args.box_n).items():
                        if part != "mismatches":
                            box.setdefault(part, {}).setdefault(c, []).append(value)
            box_profile = _box_job(THIS_SRC, "sdm-profile", box_where, args.box_n)["profile"]
        finally:
            shutil.rmtree(box_where, ignore_errors=True)
        for r in range(0 if args.only_box else args.repeats):
            order = names[r % 2:] + names[:r % 2]
            for name in order:
                t, loads[name] = _importtime(contenders[name], "sdm")
                add("import sdm (importtime, cumulative)", name, t)
                add("import numpy (importtime, for scale)", name, _importtime(contenders[name], "numpy")[0])
            for d in dirs:
                where = f"{d} ({fs_type(d) or 'unknown'})"
                for name in order:
                    job = _open_job(contenders[name], args.np, d, args.count)
                    for mode in ("fresh", "existing"):
                        for value in job[mode]:
                            add(f"session open, {mode} catalog, {where}", name, value)
                    add(f"import sdm + first session open in a process, {where}", name, job["first"])
            print(f"repeat {r + 1}/{args.repeats} done", flush=True)
        table = {key: {n: _stats(v) for n, v in per.items()} for key, per in samples.items()}
        from mpi4py import MPI

        meta = {**provenance(), "nprocs": args.np, "cores": os.cpu_count(), "repeats": args.repeats,
                "count": args.count, "load_before": load_before, "load_after": os.getloadavg()[0],
                "mpi": MPI.Get_library_version().splitlines()[0].strip(),
                "python": sys.version.split()[0], "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                "dirs": {str(d): fs_type(d) for d in dirs}}
        meta.update(host_facts=CLI.host(), cli_date=meta["date"])
        meta["box"] = {"n": args.box_n, "repeats": args.box_repeats, "place": box_place,
                       "box": f"a0[{BOX_STEPS - 1}, {args.box_n // 4}:{args.box_n // 4 + args.box_n // 2}] x 3"}
        box_table = {part: {c: _stats(v) for c, v in per.items()} for part, per in box.items()}
        results = {"contenders": labels, "table": table, "import_loads": loads, "serial_box": box_table,
                   "serial_box_samples": box, "serial_box_profile": box_profile}
        if cli is not None:
            results.update(cli=cli, cli_contenders=labels)
        earlier = args.out / "startup.json"
        if args.only_box and earlier.exists():  # the other sections as the last full run measured them
            old = json.loads(earlier.read_text())
            meta = {**old["meta"], "box": {**meta["box"], "git_commit": meta.get("git_commit"),
                                           "load_before": load_before, "load_after": os.getloadavg()[0],
                                           "date": meta["date"]}}
            results = {**{k: old[k] for k in ("contenders", "table", "import_loads", "cli", "cli_contenders")
                          if k in old}, "serial_box": box_table, "serial_box_samples": box,
                       "serial_box_profile": box_profile}
            samples = old.get("samples", {})
        _write(args.out, meta, results, samples)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


def _cli_catalog(scratch: Path) -> dict[str, str]:
    """A catalog of 3 runs (one application) for the command line, made by this checkout: the environment naming
    it."""
    catalog = scratch / "cli" / "catalog.db"
    subprocess.run([sys.executable, "-c", (
        "from sdm.catalog import Catalog, DatasetSpec\n"
        f"c = Catalog('sqlite:///{catalog}')\n"
        "for i in range(3):\n"
        f"    run = c.create_run('app', nprocs=4, root='{scratch}', attributes={{'i': i}})\n"
        "    c.define_group(run, 'g', 3, [DatasetSpec('a', '<f8', (64, 64), 'C'), DatasetSpec('b', '<f4', (8,), 'C')])\n"
        "c.close()\n")], env=_env(THIS_SRC), check=True)
    return {"SDM_CATALOG": f"sqlite:///{catalog}"}


def _write(out: Path, meta: dict[str, Any], results: dict[str, Any], samples: dict[str, Any]) -> None:
    """``startup.json`` (everything, the samples included), ``startup.md`` and ``startup.png`` (the command line)."""
    text = markdown(results, meta)
    out.mkdir(parents=True, exist_ok=True)
    (out / "startup.json").write_text(json.dumps({"meta": meta, **results, "samples": samples}, separators=(",", ":")))
    (out / "startup.md").write_text(text)
    if "cli" in results:
        CLI.plot(results["cli"], results["cli_contenders"], out / "startup.png")
    print(text)


def only_cli(args: argparse.Namespace, provenance: Any) -> int:
    """``--only-cli``: the command line section measured again, the other sections as the last full run left them
    (the command-line rows of runs before this section existed dropped from their table)."""
    earlier = args.out / "startup.json"
    old = json.loads(earlier.read_text()) if earlier.exists() else None
    scratch = Path(tempfile.mkdtemp(prefix="sdm-startup-"))
    try:
        contenders = {"this": THIS_SRC, "baseline": _baseline(args.baseline, scratch)}
        labels = {"this": "this checkout", "baseline": f"commit {args.baseline}"}
        load_before = os.getloadavg()[0]
        cli = CLI.measure(contenders, args.cli_repeats, _cli_catalog(scratch))
        now = {**provenance(), "host_facts": CLI.host(), "cli_date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
               "cli_load_before": load_before, "cli_load_after": os.getloadavg()[0]}
        if old is None:
            raise SystemExit("--only-cli needs an earlier full run's startup.json (run without --only-cli first)")
        meta = {**old["meta"], **now, "git_commit_sessions": old["meta"].get("git_commit")}
        table = {k: v for k, v in old["table"].items() if k not in CLI.COMMANDS}
        results = {**{k: old[k] for k in old if k not in ("meta", "samples", "table")}, "table": table, "cli": cli,
                   "cli_contenders": labels}
        samples = {k: v for k, v in old.get("samples", {}).items() if k not in CLI.COMMANDS}
        _write(args.out, meta, results, samples)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
