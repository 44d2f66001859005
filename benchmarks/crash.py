"""Crash harness: kill -9 MPI jobs in the middle of SDM writes, then check every committed row.

A serial driver (run it with plain ``python``, not under mpiexec); each trial launches
``mpiexec -n 2|3 python benchmarks/_crash_worker.py`` in a fresh temporary directory with a
fresh SQLite catalog::

    PYTHONPATH=src python benchmarks/crash.py                 # 200 trials (~10 min on 2 cores)
    PYTHONPATH=src python benchmarks/crash.py --quick         # 10 trials, every level, call and kill
    PYTHONPATH=src python benchmarks/crash.py --trials 54 --seed 7 --out /tmp/crash-results
    PYTHONPATH=src python benchmarks/crash.py --compression zstd:3:shuffle --trials 27 --out /tmp/crash-z
    PYTHONPATH=src python benchmarks/crash.py --trials 0 --nonblocking-trials 27 --out /tmp/crash-nb

A trial:

1. the worker opens a run (mode "w"), defines group ``g`` (``a``: <f8 64x48, ``b``: <i4 30x50)
   at level 1, 2 or 3, says ``ready`` and loops over one kind of call: ``write`` (one dataset
   per call, new steps), ``write_step`` (both datasets, new steps) or ``overwrite`` (three
   steps written once, then rounds of ``write(..., overwrite=True)`` and
   ``write_step(..., overwrite=True)`` alternately, each round a new version);
2. after ``ready`` the driver waits a random delay (uniform in [0, ``--max-delay``], drawn per
   trial from ``--seed`` and recorded) and kills with SIGKILL one of: a non-zero rank
   (``rank``), rank 0 (``rank0``), or the whole job at once (``job``: every rank, Hydra's proxy
   and mpiexec);
3. every ``writes`` row of the catalog is checked against the bytes on disk with numpy and
   sqlite3 alone (``_crash_check.py`` says exactly when a row is bad);
4. the run is reopened (``sdm.open(app, "a", run=R)``) by a new job that writes two more
   steps, overwrites two committed ones and reads back what it wrote with ``verify=True``; a
   failure (non-zero exit, timeout, wrong values) is a *reopen failure*; then every row is
   checked again.

Trials cycle through the 27 combinations of level x call x kill kind, so that any 9
consecutive trials cover every (level, kill) pair and every call at each level and each
kill (``--quick``: 10 trials).  The rank count (2 or 3) and the killed rank are drawn per
trial too.  Every subprocess runs under a timeout, in its own session; every process and
temporary directory is removed at the end of its trial.  No signal handler is installed.

Compressed dumps: ``--compression CODEC`` (a zstd or lz4 codec text, e.g.
``zstd:1:noshuffle``) makes both datasets of every trial compressed (``make_group(...,
compression=CODEC)``; the reopen job finds the codec in the catalog); ``--compressed-trials
N`` adds N compressed trials after the others instead, cycling through zstd levels 1-3 with
and without the byte shuffle and through the combinations so that each 3 (trials N to N+2,
then N+3 to N+5, ...) cover every level, call and kill, and each 9 every (level, kill) pair (``--quick``: 6 of them, unless ``--compression`` is
given).  Their rows are checked chunk by chunk (``_crash_check.py``: each chunk's
``xxh3-64``, the row's ``xxh3-64-extents``, the boxes covering the array once, the chunks
decoded with numcodecs and compared with numpy).  Each trial's record says its
``compression`` (None: raw).

Nonblocking dumps: ``--nonblocking`` makes every trial's loop issue its calls with
``wait=False`` (``"nonblocking": true`` in the worker's configuration); ``--nonblocking-trials
N`` adds N nonblocking trials after the others instead, their combinations taken like the
compressed ones' (``--quick``: 3, one per level, each call and kill once, unless
``--nonblocking`` is given).  The worker keeps up to 3 dumps queued between calls (4 just after
one; it waits for the oldest handle beyond that), overwrites its own arrays with -1 right after
each call (a dump that did not copy them commits bytes matching no version), reports ``intent``
before each call and ``done`` once the dump's handle's ``wait()`` returned (its commit
happened), so the rows are checked by the same rules: a dump whose intent came without done may
or may not be committed, a done one must be.  Each trial's record says ``nonblocking``, and for
those ``max_outstanding`` (the most dumps whose handles had not ended just after a call) and
``undone_at_kill`` (intents not reported done when the kill came).

Writes ``crash.json`` (every trial) and ``crash.md`` (tables) into ``--out``
(default ``benchmarks/results``).  Exit status 0 when every trial ended with 0 bad rows, 0
lost commits and every reopen working, 1 otherwise.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
if (REPO / "src" / "sdm").is_dir() and str(REPO / "src") not in sys.path:
    sys.path.insert(0, str(REPO / "src"))  # this checkout's SDM, as the workers see it

import numpy as np  # noqa: E402

import _crash_check as check  # noqa: E402
import _crash_ops as ops  # noqa: E402
import _crash_ops_report as ops_report  # noqa: E402
import _crash_sigint as sigint  # noqa: E402
import _crash_worker as worker  # noqa: E402
from _mpijob import Job, mpiexec  # noqa: E402

LEVELS = (1, 2, 3)
OPS = ("write", "write_step", "overwrite")
KILLS = ("rank", "rank0", "job")
READY_TIMEOUT = 90.0  # s from launch to "ready"
EXIT_GRACE = 20.0  # s for mpiexec to end the other ranks after one was killed
CONTINUE_TIMEOUT = 120.0  # s for the reopen job


def combinations() -> list[tuple[int, str, str]]:
    """The 27 (level, op, kill) combinations, ordered so that each 9 form a Latin square."""
    out = []
    for shift in range(3):
        for i in range(9):
            level, kill = LEVELS[i % 3], KILLS[i // 3]
            op = OPS[(i % 3 + i // 3 + shift) % 3]
            out.append((level, op, kill))
    return out


#: The codecs of the compressed trials added by ``--compressed-trials`` (and ``--quick``), in turn
COMPRESSED_CODECS = ("zstd:1:noshuffle", "zstd:2:shuffle", "zstd:3:noshuffle", "zstd:2:noshuffle", "zstd:3:shuffle",
                     "zstd:1:shuffle")
QUICK_COMPRESSED = 6  # compressed trials of --quick
QUICK_NONBLOCKING = 3  # nonblocking trials of --quick (one per level, each call and each kill once)
OUTSTANDING = 3  # a nonblocking worker's dumps queued between calls (4 outstanding just after a call)


def plan(trials: int, seed: int, max_delay: float, *, compression: str | None = None,
         compressed_trials: int = 0, nonblocking: bool = False, nonblocking_trials: int = 0) -> list[dict[str, Any]]:
    """Every trial's parameters, drawn from *seed* (reproducible).

    *trials* trials compressed with *compression* (None: raw), then *compressed_trials* more, compressed with
    :data:`COMPRESSED_CODECS` in turn (shifted by one after each round, so that a codec meets every level),
    their combinations taken 0, 4, 8, 3, 7, 2, 6, 1, 5 of each 9 (so that each 3 cover every level, call and kill,
    each 9 every (level, kill) pair), their draws from their own generator (the first *trials* trials are the
    same with or without them); then *nonblocking_trials* nonblocking ones (compressed with *compression*), their
    combinations taken the same way, their draws from a third generator.  *nonblocking*: every trial nonblocking.
    """
    rng = random.Random(seed)
    combos = combinations()
    out = []

    def one(t: int, combo: tuple[int, str, str], codec: str | None, draw: random.Random,
            nb: bool = nonblocking) -> dict[str, Any]:
        level, op, kill = combo
        nprocs = draw.choice((2, 3))
        return dict(trial=t, level=level, op=op, kill=kill, nprocs=nprocs,
                    victim=0 if kill == "rank0" else (draw.randrange(1, nprocs) if kill == "rank" else None),
                    delay=round(draw.uniform(0.0, max_delay), 4), compression=codec, nonblocking=nb)

    for t in range(trials):
        out.append(one(t, combos[t % len(combos)], compression, rng))
    extra = random.Random(f"{seed} compressed")
    for k in range(compressed_trials):
        index = (k // 9) * 9 + (4 * k) % 9
        out.append(one(trials + k, combos[index % len(combos)], COMPRESSED_CODECS[(k + k // len(COMPRESSED_CODECS)) % len(COMPRESSED_CODECS)], extra))
    later = random.Random(f"{seed} nonblocking")
    for k in range(nonblocking_trials):
        index = (k // 9) * 9 + (4 * k) % 9
        out.append(one(trials + compressed_trials + k, combos[index % len(combos)], compression, later, True))
    return out


def canonical_codec(text: str) -> str:
    """The canonical text of a codec the checker decodes (zstd or lz4, with or without the byte shuffle).

    Raises
    ------
    ValueError
        Another codec, or a text ``sdm.codecs`` refuses.
    """
    from sdm.codecs import parse_compression

    try:
        spec = parse_compression(text)
    except Exception as exc:  # noqa: BLE001 - SDM's own refusal, reported as the option's error
        raise ValueError(f"--compression {text!r}: {exc}") from None
    if spec is None or check._codec_parts(spec.text) is None:
        raise ValueError(f"--compression takes a zstd or lz4 codec (shuffle or noshuffle); got {text!r}")
    return spec.text


def _names(index: int) -> str:
    return worker.DATASETS[index][0]


def _expected(name: str, step: int, version: int) -> np.ndarray:
    return worker.expected(worker.dataset_index(name), step, version)


def _run_id(lines: list[str]) -> int | None:
    for line in lines:
        if line.startswith("run "):
            return int(line.split()[1])
    return None


def run_trial(p: dict[str, Any], *, max_steps: int, max_rounds: int) -> dict[str, Any]:
    """One trial (see the module docstring); returns its record."""
    result: dict[str, Any] = dict(p)
    tmp = Path(tempfile.mkdtemp(prefix="sdm-crash-"))
    try:
        catalog = f"sqlite:///{tmp / 'catalog.db'}"
        cfg = dict(task="crash", dir=str(tmp), root=str(tmp / "data"), catalog=catalog, level=p["level"], op=p["op"],
                   max_steps=max_steps, max_rounds=max_rounds, overwrite_steps=3, trial=p["trial"],
                   compression=p.get("compression"))
        if p.get("nonblocking"):
            cfg.update(nonblocking=True, outstanding=OUTSTANDING)
        job = Job(p["nprocs"], cfg, tmp / "crash.log")
        try:
            ready = job.wait_for("ready", READY_TIMEOUT)
            result["started"] = ready
            if not ready:
                result["start_error"] = job.output()
            else:
                t0 = time.monotonic()
                status = job.wait(p["delay"])  # the job may end first (then nothing is killed)
                lines = job.progress()
                result["calls_done_at_kill"] = sum(1 for line in lines if line.startswith("done "))
                result["in_flight"] = lines[-1] if lines and lines[-1].startswith("intent ") else None
                if p.get("nonblocking"):  # dumps issued (intent) and not reported done when the kill came
                    result["undone_at_kill"] = (sum(1 for line in lines if line.startswith("intent "))
                                                - result["calls_done_at_kill"])
                if status is not None:
                    result["killed"] = False
                    result["finished_before_kill"] = "finished" in lines
                else:
                    result["killed"] = True
                    if p["kill"] == "job":
                        job.kill_all()
                    else:
                        job.kill_rank(p["victim"])
                    result["killed_after_s"] = round(time.monotonic() - t0, 4)
                    result["job_ended_by_itself"] = job.wait(EXIT_GRACE if p["kill"] != "job" else 0.5) is not None
        finally:
            job.cleanup()
            job.remove_leftovers()  # the driver runs one job at a time
        lines = job.progress()
        run = _run_id(lines)
        if p.get("nonblocking"):  # the most dumps issued and not ended just after a call (the worker's count)
            result["max_outstanding"] = max((int(line.split()[1]) for line in lines
                                             if line.startswith("outstanding ")), default=0)
        intents = check.Intents().read(lines, _names)
        rows = check.load_rows(catalog)
        first = check.check(rows, intents, _expected)
        first["unreferenced_bytes"] = check.unreferenced_bytes(rows, _data_files(tmp / "data"))
        result["check"] = first
        result["rebuild"] = _rebuilt(tmp, rows, intents)
        if run is None:
            result["reopen"] = dict(ok=None, reason="no run was created")
            return result
        version = max([v for vs in intents.tried.values() for v in vs], default=0) + 1
        ccfg = dict(task="continue", dir=str(tmp), root=str(tmp / "data"), catalog=catalog, run=run, version=version,
                    compression=p.get("compression"))  # the reopened group must have it
        cont = Job(p["nprocs"], ccfg, tmp / "continue.log")
        try:
            status = cont.wait(CONTINUE_TIMEOUT)
        finally:
            cont.cleanup()
            cont.remove_leftovers()
        clines = cont.progress()
        ok = status == 0 and "finished" in clines
        reopen: dict[str, Any] = dict(ok=ok, status=status, timed_out=status is None)
        if not ok:
            errors = [line for line in clines if line.startswith("error ")]
            reopen["error"] = errors[-1] if errors else cont.output(1500)
        intents.read(clines, _names)
        rows = check.load_rows(catalog)
        second = check.check(rows, intents, _expected)
        reopen["check"] = second
        result["reopen"] = reopen
        return result
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _rebuilt(tmp: Path, rows: list[Any], intents: Any) -> dict[str, Any]:
    """The catalog ``sdm rebuild`` makes from the killed run's data alone, checked like the original.

    ``missing``: steps the original catalog holds and the rebuilt one does not (the meta-file
    must know at least what the catalog knows); ``newer``: steps whose rebuilt row is another
    version (a dump appended to the meta-file, not committed when the kill came).
    """
    from sdm.catalog.rebuild import rebuild

    url = f"sqlite:///{tmp / 'rebuilt.db'}"
    try:
        rebuild(tmp / "data", url)
    except Exception as exc:  # noqa: BLE001 - recorded, the trial counts as failed
        return dict(ok=False, error=f"{type(exc).__name__}: {exc}")
    again = check.load_rows(url)
    out = check.check(again, intents, _expected)
    steps = {(r.group, r.dataset, r.step): r for r in again}
    missing = [f"{r.group}/{r.dataset} step {r.step}" for r in rows if (r.group, r.dataset, r.step) not in steps]
    newer = sum(1 for r in rows if (k := steps.get((r.group, r.dataset, r.step))) is not None
                and (k.path, k.offset) != (r.path, r.offset))
    return dict(ok=True, rows=len(again), bad=out["bad"], lost=out["lost"], missing=missing, newer=newer)


def _data_files(root: Path) -> list[Path]:
    return [f for f in root.rglob("*.sdm") if f.is_file()] if root.is_dir() else []


# --------------------------------------------------------------------------------- report
def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, timeout=20,
                              stdin=subprocess.DEVNULL).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def host_facts() -> dict[str, Any]:
    """SDM version, git commit, and the machine the trials ran on."""
    import sdm

    try:
        mpi = subprocess.run([mpiexec(), "--version"], capture_output=True, text=True, timeout=20,
                             stdin=subprocess.DEVNULL).stdout
        version = [line.split(":", 1)[1].strip() for line in mpi.splitlines() if line.strip().startswith("Version:")]
        mpi = f"Hydra/MPICH {version[0]}" if version else (mpi.strip().splitlines() or ["unknown"])[0]
    except (OSError, subprocess.SubprocessError):
        mpi = "unknown"
    tmp = Path(tempfile.gettempdir()).resolve()
    fs = ""
    try:
        best = ""
        for line in Path("/proc/mounts").read_text().splitlines():
            parts = line.split()
            if len(parts) > 2 and str(tmp).startswith(parts[1]) and len(parts[1]) >= len(best):
                best, fs = parts[1], parts[2]
    except OSError:
        pass
    return {"sdm_version": sdm.__version__, "sdm_path": str(Path(sdm.__file__).parent),
            "git_commit": _git("rev-parse", "HEAD"), "git_dirty": bool(_git("status", "--porcelain")),
            "host": platform.node(), "platform": platform.platform(), "python": platform.python_version(),
            "cores": os.cpu_count(), "numpy": np.__version__, "sqlite": sqlite3.sqlite_version, "mpi": mpi,
            "tmpdir": str(tmp), "fs": fs or "unknown", "load_before": os.getloadavg()[0],
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}


def summarize(trials: list[dict[str, Any]]) -> dict[str, Any]:
    """Totals over the trials, and by level, call, kill kind and level x call."""

    def totals(ts: list[dict[str, Any]]) -> dict[str, Any]:
        bad = [b for t in ts for b in t.get("check", {}).get("bad", [])]
        return dict(
            trials=len(ts),
            compressed=sum(1 for t in ts if t.get("compression")),
            nonblocking=sum(1 for t in ts if t.get("nonblocking")),
            max_outstanding=max((t.get("max_outstanding", 0) for t in ts), default=0),
            compressed_rows=sum(t.get("check", {}).get("compressed_rows", 0) for t in ts),
            killed=sum(1 for t in ts if t.get("killed")),
            not_started=sum(1 for t in ts if not t.get("started")),
            finished_before_kill=sum(1 for t in ts if t.get("killed") is False),
            rows=sum(t.get("check", {}).get("rows", 0) for t in ts),
            bad_rows=len(bad),
            trials_with_bad_rows=sum(1 for t in ts if t.get("check", {}).get("bad")),
            bad_by_reason=dict(Counter(b["reason"] for b in bad)),
            lost=sum(len(t.get("check", {}).get("lost", [])) for t in ts),
            overlapping_rows=sum(len(t.get("check", {}).get("overlap", [])) for t in ts),
            reopen_failures=sum(1 for t in ts if t.get("reopen", {}).get("ok") is False),
            bad_rows_after_reopen=sum(len(t.get("reopen", {}).get("check", {}).get("bad", [])) for t in ts),
            lost_after_reopen=sum(len(t.get("reopen", {}).get("check", {}).get("lost", [])) for t in ts),
            unreferenced_bytes=sum(t.get("check", {}).get("unreferenced_bytes", 0) for t in ts),
            rebuild_failures=sum(1 for t in ts if t.get("rebuild", {}).get("ok") is False),
            bad_rows_after_rebuild=sum(len(t.get("rebuild", {}).get("bad", [])) for t in ts),
            missing_after_rebuild=sum(len(t.get("rebuild", {}).get("missing", [])) for t in ts),
        )

    def by(key) -> dict[str, Any]:
        groups: dict[str, list] = defaultdict(list)
        for t in trials:
            groups[key(t)].append(t)
        return {k: totals(v) for k, v in sorted(groups.items())}

    return dict(total=totals(trials), by_level=by(lambda t: f"level {t['level']}"), by_op=by(lambda t: t["op"]),
                by_kill=by(lambda t: t["kill"]), by_level_op=by(lambda t: f"level {t['level']} {t['op']}"),
                by_level_kill=by(lambda t: f"level {t['level']} {t['kill']}"),
                by_compression=by(lambda t: t.get("compression") or "raw"),
                by_nonblocking=by(lambda t: "nonblocking" if t.get("nonblocking") else "blocking"))


def failed(summary: dict[str, Any]) -> bool:
    t = summary["total"]
    return bool(t["bad_rows"] or t["lost"] or t["overlapping_rows"] or t["reopen_failures"] or t["not_started"]
                or t["bad_rows_after_reopen"] or t["lost_after_reopen"] or t["rebuild_failures"]
                or t["bad_rows_after_rebuild"] or t["missing_after_rebuild"])


def markdown(data: dict[str, Any]) -> str:
    m, s = data["meta"], data["summary"]
    cols = ("trials", "killed", "finished_before_kill", "rows", "compressed_rows", "nonblocking", "max_outstanding",
            "bad_rows", "trials_with_bad_rows", "lost",
            "overlapping_rows", "reopen_failures", "bad_rows_after_reopen", "bad_rows_after_rebuild",
            "missing_after_rebuild")
    head = ("trials", "killed", "ended before kill", "rows checked", "compressed rows", "nonblocking trials",
            "most dumps outstanding", "bad rows", "trials with bad rows", "lost commits",
            "overlapping rows", "reopen failures", "bad rows after reopen", "bad rows after rebuild",
            "rows missing after rebuild")

    def table(title: str, part: dict[str, Any]) -> list[str]:
        out = [f"### {title}", "", "| | " + " | ".join(head) + " |", "|---" * (len(head) + 1) + "|"]
        for k, v in part.items():
            out.append(f"| {k} | " + " | ".join(str(v.get(c, 0)) for c in cols) + " |")
        return out + [""]

    t = s["total"]
    lines = [
        "# Crash harness: kill -9 during SDM writes",
        "",
        f"SDM {m['sdm_version']}, commit {m['git_commit'][:12]}{' (modified)' if m['git_dirty'] else ''}, "
        f"{m['date']}; {m['host']}: {m['cores']} cores, {m['platform']}, Python {m['python']}, numpy {m['numpy']}, "
        f"SQLite {m['sqlite']}, {m['mpi']}; temporary directories on {m['fs']}; load {m['load_before']:.2f} "
        f"before, {m['load_after']:.2f} after; {m['seconds']:.0f} s.",
        "",
        f"Options: {data['options']}.",
        "",
        f"**{t['trials']} trials ({t.get('compressed', 0)} compressed, {t.get('nonblocking', 0)} nonblocking), "
        f"{t['killed']} killed; {t['bad_rows']} bad rows in {t['trials_with_bad_rows']} trials "
        f"({', '.join(f'{k}: {v}' for k, v in t['bad_by_reason'].items()) or 'none'}); {t['lost']} lost commits; "
        f"{t['overlapping_rows']} overlapping rows; {t['reopen_failures']} reopen failures; "
        f"{t['bad_rows_after_reopen']} bad rows after reopen.**",
        "",
        "A row is bad when its file is missing or short, its length is wrong, its bytes equal no version the "
        "worker ever tried for its (dataset, step), or they equal one but not the one its checksum describes "
        "(see `benchmarks/README.md`); a compressed row's chunks must match their xxh3-64 checksums, cover the array "
        "once and decode to that version.",
        "",
    ]
    lines += table("By level", s["by_level"]) + table("By call", s["by_op"]) + table("By kill", s["by_kill"])
    lines += table("By level and call", s["by_level_op"]) + table("By level and kill", s["by_level_kill"])
    if "by_compression" in s:
        lines += table("By compression", s["by_compression"])
    if "by_nonblocking" in s:
        lines += table("By nonblocking", s["by_nonblocking"])
    bad = [(tr, b) for tr in data["trials"] for b in tr.get("check", {}).get("bad", [])]
    if bad:
        lines += ["### Bad rows (first 30)", "",
                  "| trial | level | call | kill | compression | nonblocking | dataset | step | reason | detail |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for tr, b in bad[:30]:
            lines.append(f"| {tr['trial']} | {tr['level']} | {tr['op']} | {tr['kill']} | {tr.get('compression') or 'raw'} "
                         f"| {'yes' if tr.get('nonblocking') else 'no'} "
                         f"| {b['dataset']} | {b['step']} | {b['reason']} | {b['detail']} |")
        lines.append("")
    fails = [tr for tr in data["trials"] if tr.get("reopen", {}).get("ok") is False]
    if fails:
        lines += ["### Reopen failures (first 20)", "",
                  "| trial | level | call | kill | compression | nonblocking | error |", "|---|---|---|---|---|---|---|"]
        for tr in fails[:20]:
            err = " ".join(str(tr["reopen"].get("error", "")).split())[:300].replace("|", "/")
            lines.append(f"| {tr['trial']} | {tr['level']} | {tr['op']} | {tr['kill']} | "
                         f"{tr.get('compression') or 'raw'} | {'yes' if tr.get('nonblocking') else 'no'} | {err} |")
        lines.append("")
    return "\n".join(lines)


def parse_kinds(text: str) -> tuple[str, ...]:
    """``write``, ``sigint``, or a comma-separated subset of the maintenance kinds (``ops``: all of them)."""
    names = tuple(dict.fromkeys(k.strip() for k in text.split(",") if k.strip()))
    if names in (("write",), ("sigint",)):
        return names
    if names == ("ops",):
        return ops.KINDS
    unknown = [k for k in names if k not in ops.KINDS]
    if not names or unknown:
        raise ValueError(f"--kinds takes write, sigint, ops or a comma-separated subset of {', '.join(ops.KINDS)}; "
                         f"got {text!r}")
    return names


def _save(args: argparse.Namespace, name: str, data: dict[str, Any], md: str) -> None:
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{name}.json").write_text(json.dumps(data, separators=(",", ":"), default=str))  # compact
    (args.out / f"{name}.md").write_text(md)
    print(md)


def main_ops(args: argparse.Namespace, kinds: tuple[str, ...], meta: dict[str, Any]) -> int:
    """The maintenance kinds (``_crash_ops.py``): kill -9 during truncate, rebuild, export, migrate, purge."""
    trials = args.trials if args.trials is not None else (2 * len(kinds) if args.quick else 200)
    settings = ops.Settings.quick() if args.quick else ops.Settings(
        runs=args.fixture_runs, steps=args.fixture_steps, other_steps=args.other_steps,
        truncate_steps=args.truncate_steps, cuts=args.cuts)
    if args.max_delay is not None:
        settings.max_delay = args.max_delay
    options = dict(kinds=list(kinds), trials=trials, seed=args.seed, **dataclasses.asdict(settings))
    print(f"crash harness ({', '.join(kinds)}): {trials} trials, seed {args.seed}, SDM from {meta['sdm_path']} "
          f"({meta['git_commit'][:12]})", flush=True)
    t0 = time.monotonic()
    records = []
    with ops.Lab(kinds, settings) as lab:
        if lab.fixture.index:
            print(f"fixture: {len(lab.fixture.index)} runs written in {lab.fixture.seconds:.1f} s", flush=True)
        for p in ops.plan(trials, args.seed, kinds):
            r = ops.run_trial(lab, p)
            records.append(r)
            print(f"trial {p['trial']:3d}: {p['kind']:8s} {p['variant']:17s} delay {r.get('delay', 0):6.3f}s "
                  f"{'killed' if r.get('killed') else 'NOT KILLED' if r.get('started') else 'NOT STARTED'}"
                  f" at {r.get('at', '-')!s:32s} rows {r.get('rows', 0):4d} bad {len(r.get('bad', []))}"
                  f"  rerun {'ok' if r.get('rerun') else 'FAILED' if r.get('rerun') is False else '-'}"
                  f" bad after {len(r.get('bad_after', []))} result "
                  f"{'ok' if r.get('result') else 'WRONG' if r.get('result') is False else '-'}"
                  + (f"  HARNESS ERROR {r['harness_error']}" if r.get("harness_error") else ""), flush=True)
        durations = dict(lab.durations)
        meta["fixture_seconds"] = round(lab.fixture.seconds, 1)
    meta["seconds"] = time.monotonic() - t0
    meta["load_after"] = os.getloadavg()[0]
    summary = ops_report.summarize(records)
    data = dict(meta=meta, options=options, durations=durations, summary=summary, trials=ops_report.compact(records))
    _save(args, args.name or "crash_ops", data, ops_report.markdown(data))
    return 1 if any(ops_report.failed_trial(r) for r in records) else 0


def main_sigint(args: argparse.Namespace, meta: dict[str, Any]) -> int:
    """SIGINT to mpiexec during a write loop (``_crash_sigint.py``)."""
    trials = args.trials if args.trials is not None else (3 if args.quick else 100)
    options = dict(trials=trials, seed=args.seed, nprocs=args.nprocs, max_delay=args.max_delay,
                   end_limit=args.end_limit, hang_limit=args.hang_limit, max_steps=args.max_steps)
    print(f"crash harness (SIGINT to mpiexec): {trials} trials of {args.nprocs} ranks, seed {args.seed}, SDM from "
          f"{meta['sdm_path']} ({meta['git_commit'][:12]})", flush=True)
    t0 = time.monotonic()
    records = []
    for p in sigint.plan(trials, args.seed, args.max_delay):
        r = sigint.run_trial(p, nprocs=args.nprocs, end_limit=args.end_limit, hang_limit=args.hang_limit,
                             max_steps=args.max_steps)
        records.append(r)
        end = r.get("end") or ("ended before the signal" if r.get("interrupted") is False else "not started")
        print(f"trial {p['trial']:3d}: level {p['level']} {p['op']:10s} delay {p['delay']:.3f}s  {end}"
              f"{' after %.2f s' % r['end_s'] if r.get('end_s') is not None else ''}"
              f"{' (ranks still waiting: %s)' % r['hung_ranks'] if r.get('hung_ranks') else ''}"
              f"  state {r.get('catalog_state')}/{r.get('state')}  rows {r.get('rows', 0):4d} "
              f"bad {len(r.get('bad', []))} lost {len(r.get('lost', []))} read {r.get('read', 0)} "
              f"bad {r.get('read_bad', 0)}", flush=True)
    meta["seconds"] = time.monotonic() - t0
    meta["load_after"] = os.getloadavg()[0]
    data = dict(meta=meta, options=options, summary=sigint.summarize(records), trials=sigint.compact(records))
    _save(args, args.name or "crash_sigint", data, sigint.markdown(data))
    return 1 if any(sigint.failed_trial(r) for r in records) else 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kinds", default="write",
                    help="write (kill -9 during writes, the default), sigint (SIGINT to mpiexec during writes), or "
                         "a comma-separated subset of truncate,rebuild,export,migrate,purge (ops: all five)")
    ap.add_argument("--trials", type=int, default=None,
                    help="number of trials (default 200, sigint 100; --quick: 10, two per maintenance kind, 3)")
    ap.add_argument("--seed", type=int, default=1, help="seed of the per-trial draws (default 1)")
    ap.add_argument("--quick", action="store_true",
                    help="few trials covering every level, call and kill kind (maintenance kinds: small sizes)")
    ap.add_argument("--max-delay", type=float, default=None,
                    help="the kill (signal) delay after 'ready' is uniform in [0, this] s (write, sigint: default 1; "
                         "maintenance kinds: default the command's measured duration, 0.3 with --quick)")
    ap.add_argument("--compression", default=None, metavar="CODEC",
                    help="write: both datasets of every trial compressed with CODEC (zstd or lz4, e.g. "
                         "zstd:1:noshuffle, zstd:3:shuffle; default none: raw bytes)")
    ap.add_argument("--compressed-trials", type=int, default=None, metavar="N",
                    help="write: N compressed trials after the others, zstd levels 1-3 with and without the byte "
                         "shuffle in turn (default 0; --quick: 6, none with --compression)")
    ap.add_argument("--nonblocking", action="store_true",
                    help="write: every trial's loop issues its calls with wait=False (up to 4 dumps outstanding at once)")
    ap.add_argument("--nonblocking-trials", type=int, default=None, metavar="N",
                    help="write: N nonblocking trials after the others, cycling through level x call x kill "
                         "(default 0; --quick: 3, one per level, none with --nonblocking)")
    ap.add_argument("--max-steps", type=int, default=1000, help="steps of the write loops (< 1024)")
    ap.add_argument("--max-rounds", type=int, default=250, help="rounds of the overwrite loop (< 254)")
    ap.add_argument("--fixture-runs", type=int, default=12, help="maintenance kinds: runs of the fixture (rebuild)")
    ap.add_argument("--fixture-steps", type=int, default=100,
                    help="maintenance kinds: steps of fixture run 0 (export, migrate, purge)")
    ap.add_argument("--other-steps", type=int, default=30, help="maintenance kinds: steps of the other fixture runs")
    ap.add_argument("--truncate-steps", type=int, default=240, help="truncate: steps written before the cuts")
    ap.add_argument("--cuts", type=int, default=4, help="truncate: truncations per job")
    ap.add_argument("--nprocs", type=int, default=4, help="sigint: ranks of the write loop")
    ap.add_argument("--end-limit", type=float, default=10.0, help="sigint: a job must end within this many s")
    ap.add_argument("--hang-limit", type=float, default=30.0, help="sigint: a job still running after this is a hang")
    ap.add_argument("--out", type=Path, default=HERE / "results", help="results directory")
    ap.add_argument("--name", default=None,
                    help="base name of the result files (crash, crash_ops or crash_sigint after the kinds)")
    args = ap.parse_args(argv)
    try:
        kinds = parse_kinds(args.kinds)
    except ValueError as exc:
        ap.error(str(exc))
    if not (0 < args.max_steps < worker.STEP_SPAN - 3 and 0 < args.max_rounds < worker.VERSION_SPAN - 3):
        ap.error("--max-steps must be in 1..1020 and --max-rounds in 1..252")
    if not (args.fixture_runs >= 1 and args.fixture_steps >= 1 and args.other_steps >= 1 and args.cuts >= 1
            and args.truncate_steps > args.cuts and args.truncate_steps < worker.STEP_SPAN and args.nprocs >= 2
            and 0 < args.end_limit <= args.hang_limit and 3 * args.fixture_runs <= worker.VERSION_SPAN
            and max(args.fixture_steps, args.other_steps) < worker.STEP_SPAN):
        ap.error("sizes: --fixture-runs 1..85, --fixture-steps, --other-steps 1..1023, --cuts >= 1, "
                 "--truncate-steps > --cuts and < 1024, --nprocs >= 2, 0 < --end-limit <= --hang-limit")
    if args.max_delay is not None and args.max_delay < 0:
        ap.error("--max-delay must be >= 0")
    meta = host_facts()
    if kinds in (("write",), ("sigint",)) and args.max_delay is None:
        args.max_delay = 1.0
    if kinds == ("sigint",):
        return main_sigint(args, meta)
    if kinds != ("write",):
        return main_ops(args, kinds, meta)
    args.name = args.name or "crash"
    trials = args.trials if args.trials is not None else (10 if args.quick else 200)
    try:
        compression = canonical_codec(args.compression) if args.compression else None
    except ValueError as exc:
        ap.error(str(exc))
    extra = args.compressed_trials if args.compressed_trials is not None else (
        QUICK_COMPRESSED if args.quick and compression is None else 0)
    if extra < 0:
        ap.error("--compressed-trials must be >= 0")
    later = args.nonblocking_trials if args.nonblocking_trials is not None else (
        QUICK_NONBLOCKING if args.quick and not args.nonblocking else 0)
    if later < 0:
        ap.error("--nonblocking-trials must be >= 0")
    options = dict(trials=trials, seed=args.seed, max_delay=args.max_delay, max_steps=args.max_steps,
                   max_rounds=args.max_rounds, compression=compression, compressed_trials=extra,
                   nonblocking=args.nonblocking, nonblocking_trials=later)
    print(f"crash harness: {trials}{' nonblocking' if args.nonblocking else ''} trials"
          f"{f' compressed with {compression}' if compression else ''}"
          f"{f' and {extra} compressed trials' if extra else ''}"
          f"{f' and {later} nonblocking trials' if later else ''}, seed {args.seed}, SDM from {meta['sdm_path']} "
          f"({meta['git_commit'][:12]})", flush=True)
    t0 = time.monotonic()
    records = []
    for p in plan(trials, args.seed, args.max_delay, compression=compression, compressed_trials=extra,
                  nonblocking=args.nonblocking, nonblocking_trials=later):
        r = run_trial(p, max_steps=args.max_steps, max_rounds=args.max_rounds)
        records.append(r)
        c, ro = r.get("check", {}), r.get("reopen", {})
        print(f"trial {p['trial']:3d}: level {p['level']} {p['op']:10s} kill {p['kill']:5s} n={p['nprocs']} "
              f"{p['compression'] or 'raw':16s} {'nb' if p['nonblocking'] else '  '} "
              f"delay {p['delay']:.3f}s  {'killed' if r.get('killed') else 'NOT KILLED' if r.get('started') else 'NOT STARTED'}"
              f"  rows {c.get('rows', 0):4d} bad {len(c.get('bad', []))} lost {len(c.get('lost', []))}"
              f"  reopen {'ok' if ro.get('ok') else 'FAILED' if ro.get('ok') is False else '-'}"
              f" bad after {len(ro.get('check', {}).get('bad', []))}"
              + (f"  outstanding max {r.get('max_outstanding', 0)}, {r.get('undone_at_kill', '-')} not done at kill"
                 if p["nonblocking"] else ""), flush=True)
    meta["seconds"] = time.monotonic() - t0
    meta["load_after"] = os.getloadavg()[0]
    data = dict(meta=meta, options=options, summary=summarize(records), trials=records)
    md = markdown(data)
    _save(args, args.name, {**data, "trials": check.flat_table(records)}, md)  # records: check.records_of
    return 1 if failed(data["summary"]) else 0


if __name__ == "__main__":
    sys.exit(main())
