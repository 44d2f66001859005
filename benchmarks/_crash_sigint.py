"""The SIGINT kind of ``benchmarks/crash.py``: Ctrl-C to ``mpiexec`` at a random moment of a write loop.

A trial starts ``mpiexec -n 4 python benchmarks/_crash_worker.py`` (task ``crash``: a new run,
group ``g`` at level 1, 2 or 3, a loop of ``write`` or ``write_step``), waits for ``ready`` and a
delay drawn uniformly in [0, ``--max-delay``], then sends SIGINT to the ``mpiexec`` process
alone (never to a rank; the ranks get what mpiexec forwards), and measures:

* **the end**: whether the job ended within ``--end-limit`` s (10) of the signal, later, or not
  within ``--hang-limit`` s (30): a **hang**, after which every process of the job is killed;
  ranks still alive ``--end-limit`` seconds after mpiexec ended are counted as orphans (and killed); for a hang, a late
  end or orphans, where each rank was (the worker's per-rank events: the call the exception
  interrupted, and whether the session's close that followed ended);
* **the run's state**: ``runs.state`` in the catalog as the job left it, and the
  ``previous_state`` a reader then sees (``sdm.open(app, "r", run=R)``): ``interrupted`` is
  right (the writers died without closing it);
* **the rows**: every committed row checked against its bytes with numpy (``_crash_check.py``:
  bad rows, lost commits), then every committed step read back through SDM with
  ``verify=True`` and compared with numpy.

The job ends by itself only when SDM turns the ``KeyboardInterrupt`` of one rank into the end of
the whole job; a job that keeps waiting in a collective is a hang.
"""

from __future__ import annotations

import random
import shutil
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import _crash_check as check
import _crash_exact as exact
import _crash_worker as worker
from _crash_ops import inspect
from _mpijob import Job, _alive

LEVELS = (1, 2, 3)
OPS = ("write", "write_step")
READY_TIMEOUT = 90.0


def plan(trials: int, seed: int, max_delay: float) -> list[dict[str, Any]]:
    """Every trial's level, call and delay (the 6 level x call pairs in turn), drawn from *seed*."""
    rng = random.Random(seed)
    return [dict(trial=t, level=LEVELS[t % 3], op=OPS[(t // 3) % 2], delay=round(rng.uniform(0.0, max_delay), 4))
            for t in range(trials)]


def _expected(name: str, step: int, version: int) -> Any:
    return worker.expected(worker.dataset_index(name), step, version)


def run_trial(p: dict[str, Any], *, nprocs: int, end_limit: float, hang_limit: float,
              max_steps: int) -> dict[str, Any]:
    """One trial (see the module docstring); returns its record."""
    rec: dict[str, Any] = dict(p, nprocs=nprocs)
    tmp = Path(tempfile.mkdtemp(prefix="sdm-crash-sigint-"))
    t_start = time.monotonic()
    try:
        url = f"sqlite:///{tmp / 'catalog.db'}"
        cfg = dict(task="crash", dir=str(tmp), root=str(tmp / "data"), catalog=url, level=p["level"], op=p["op"],
                   max_steps=max_steps, max_rounds=1, overwrite_steps=3, trial=p["trial"], events=True)
        job = Job(nprocs, cfg, tmp / "crash.log")
        try:
            rec["started"] = job.wait_for("ready", READY_TIMEOUT)
            if rec["started"]:
                rec.update(_interrupt(job, p["delay"], end_limit, hang_limit))
            else:
                rec["error"] = job.output(800)
        finally:
            job.cleanup()
            job.remove_leftovers()
        lines = job.progress()
        rec["in_flight"] = lines[-1] if lines and lines[-1].startswith("intent ") else None
        run = next((int(line.split()[1]) for line in lines if line.startswith("run ")), None)
        if run is None:
            return rec
        intents = check.Intents().read(lines, lambda i: worker.DATASETS[i][0])
        found = check.check(check.load_rows(url), intents, _expected)
        rec["rows"], rec["bad"], rec["lost"] = found["rows"], found["bad"], found["lost"]
        rec["catalog_state"] = exact.run_states(url).get(run)
        seen = inspect(tmp / "inspect", url, run, fixture=False)
        rec["state"] = seen.get("state")
        rec["read"], rec["read_bad"] = seen.get("read", 0), seen.get("read_bad", 0)
        if not seen["ok"]:
            rec["read_error"] = seen["error"]
        return rec
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        rec["seconds"] = round(time.monotonic() - t_start, 2)


def _interrupt(job: Job, delay: float, end_limit: float, hang_limit: float) -> dict[str, Any]:
    """SIGINT to mpiexec after *delay* s; how and when the job ended."""
    out: dict[str, Any] = {}
    if job.wait(delay) is not None:
        out["interrupted"] = False
        return out
    job.scan()  # every rank's pid, to find orphans and hung ranks
    out["interrupted"] = job.interrupt()
    t0 = time.monotonic()
    status = job.wait(end_limit)
    if status is None:
        status = job.wait(max(hang_limit - end_limit, 0.0))
    waited = time.monotonic() - t0
    ranks = job.rank_pids()
    alive = sorted(r for r, pid in ranks.items() if _alive(pid))
    if status is not None and alive:  # ranks still ending (MPI_Abort's kill takes a moment): give them end_limit
        deadline = time.monotonic() + end_limit
        while alive and time.monotonic() < deadline:
            time.sleep(0.01)
            alive = [r for r in alive if _alive(ranks[r])]
        out["ranks_ended_s"] = round(time.monotonic() - t0, 3)
    if status is None:
        out.update(end="hang", hung_ranks=alive, ranks=_events(job, ranks))
    else:
        out.update(end="in time" if waited <= end_limit else "late", end_s=round(waited, 3), exit=status)
        if alive:
            out["orphans"] = alive  # ranks mpiexec left behind (killed by the clean-up)
        if alive or out["end"] != "in time":
            out["ranks"] = _events(job, ranks)
    return out


def _events(job: Job, ranks: dict[int, int]) -> dict[int, str]:
    """Each rank's last event (``raised KeyboardInterrupt in write step 5``: the interrupted call, the
    session's close then running; ``left ...``/``closed``: that close ended) or ``-`` (the signal has not
    reached the rank's loop: it is still in its call)."""
    out = {}
    for rank in sorted(ranks):
        try:
            lines = (job.dir / f"events.{rank}").read_text().splitlines()
        except OSError:
            lines = []
        out[rank] = lines[-1] if lines else "-"
    return out


def failed_trial(t: dict[str, Any]) -> bool:
    """A hang, a late end, an orphan, a state other than interrupted, a bad row, a lost commit, a failed read."""
    if t.get("started") is False:
        return True
    if not t.get("interrupted"):
        return bool(t.get("bad") or t.get("lost"))
    return bool(t.get("end") != "in time" or t.get("orphans") or t.get("state") != "interrupted" or t.get("bad")
                or t.get("lost") or t.get("read_bad") or t.get("read_error"))


def summarize(trials: list[dict[str, Any]]) -> dict[str, Any]:
    """Totals, and by level and call."""

    def totals(ts: list[dict[str, Any]]) -> dict[str, Any]:
        sig = [t for t in ts if t.get("interrupted")]
        return dict(
            trials=len(ts), signalled=len(sig), ended_before_signal=sum(1 for t in ts if t.get("interrupted") is False),
            not_started=sum(1 for t in ts if t.get("started") is False),
            ended_in_time=sum(1 for t in sig if t.get("end") == "in time"),
            ended_late=sum(1 for t in sig if t.get("end") == "late"), hangs=sum(1 for t in sig if t.get("end") == "hang"),
            orphans=sum(1 for t in sig if t.get("orphans")),
            states=dict(Counter(str(t.get("state")) for t in sig)),
            catalog_states=dict(Counter(str(t.get("catalog_state")) for t in sig)),
            rows=sum(t.get("rows", 0) for t in ts), bad_rows=sum(len(t.get("bad", [])) for t in ts),
            lost=sum(len(t.get("lost", [])) for t in ts), read=sum(t.get("read", 0) for t in ts),
            read_failures=sum(1 for t in ts if t.get("read_bad") or t.get("read_error")),
            failed_trials=sum(1 for t in ts if failed_trial(t)),
        )

    def by(key: Callable[[dict[str, Any]], str]) -> dict[str, Any]:
        groups: dict[str, list[dict[str, Any]]] = {}
        for t in trials:
            groups.setdefault(key(t), []).append(t)
        return {k: totals(v) for k, v in sorted(groups.items())}

    return dict(total=totals(trials), by_level_op=by(lambda t: f"level {t['level']} {t['op']}"))


COLUMNS = ("trial", "level", "op", "nprocs", "delay", "started", "interrupted", "end", "end_s", "ranks_ended_s", "exit",
           "hung_ranks", "orphans", "ranks", "catalog_state", "state", "rows", "bad", "lost", "read", "read_bad", "in_flight",
           "seconds")


def compact(trials: list[dict[str, Any]]) -> dict[str, Any]:
    """The trials as a table (bad and lost as counts) plus the details of failed trials' rows and errors."""
    rows = [[len(t[c]) if c in ("bad", "lost") and c in t else t.get(c) for c in COLUMNS] for t in trials]
    details = [dict(trial=t["trial"], **{k: v for k, v in t.items() if k in ("bad", "lost", "read_error", "error") and v})
               for t in trials if t.get("bad") or t.get("lost") or t.get("read_error") or t.get("error")]
    return dict(columns=list(COLUMNS), rows=rows, failures=details)


def markdown(data: dict[str, Any]) -> str:
    """``crash_sigint.md``: totals, by level and call, the trials that failed."""
    m, s, o = data["meta"], data["summary"], data["options"]
    cols = ("trials", "signalled", "ended_in_time", "ended_late", "hangs", "orphans", "states", "rows", "bad_rows",
            "lost", "read", "read_failures")
    head = (f"trials", "SIGINT sent", f"ended within {o['end_limit']:g} s", "ended later", "hangs",
            "orphan ranks", "state seen by a reader", "rows checked", "bad rows", "lost commits", "steps read back",
            "read failures")

    def fmt(v: Any) -> str:
        return ", ".join(f"{k}: {n}" for k, n in v.items()) if isinstance(v, dict) else str(v)

    t = s["total"]
    lines = [
        "# Crash harness: SIGINT to mpiexec during SDM writes",
        "",
        f"SDM {m['sdm_version']}, commit {m['git_commit'][:12]}{' (modified)' if m['git_dirty'] else ''}, "
        f"{m['date']}; {m['host']}: {m['cores']} cores, {m['platform']}, Python {m['python']}, "
        f"{m['mpi']}; load {m['load_before']:.2f} before, {m['load_after']:.2f} after; {m['seconds']:.0f} s.",
        "",
        f"Options: {o}.",
        "",
        f"**{t['trials']} trials, SIGINT sent to mpiexec in {t['signalled']}: {t['ended_in_time']} jobs ended within "
        f"{o['end_limit']:g} s, {t['ended_late']} later, {t['hangs']} hung (killed after {o['hang_limit']:g} s); "
        f"run state seen by a reader: {fmt(t['states'])}; {t['bad_rows']} bad rows, {t['lost']} lost commits, "
        f"{t['read_failures']} trials whose committed steps did not all read back verified.**",
        "",
        "| | " + " | ".join(head) + " |", "|---" * (len(head) + 1) + "|",
    ]
    for k, v in [("all", t), *s["by_level_op"].items()]:
        lines.append(f"| {k} | " + " | ".join(fmt(v[c]) for c in cols) + " |")
    lines.append("")
    failures = data["trials"]["failures"]
    if failures:
        lines += ["### Trials with bad rows, lost commits or failed reads (first 20)", "", "| trial | what |", "|---|---|"]
        for f in failures[:20]:
            what = " ".join(str({k: v for k, v in f.items() if k != "trial"}).split())[:400].replace("|", "/")
            lines.append(f"| {f['trial']} | {what} |")
        lines.append("")
    return "\n".join(lines)
