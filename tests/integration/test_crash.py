"""The crash harness, short: kill -9 during writes, then every committed row must be intact.

Runs ``benchmarks/crash.py --quick`` (10 trials: every organization level, every call --
``write``, ``write_step``, ``write(..., overwrite=True)`` / ``write_step(..., overwrite=True)``
-- and every kill -- a non-zero rank, rank 0, the whole job -- at a random moment drawn from a
fixed seed), in this process, so that a timeout still runs the harness's clean-up of its
jobs and temporary directories.  ``benchmarks/README.md`` says exactly when a row is bad.

The data is checked with numpy and sqlite3 alone, never through SDM's read path; the
checksums are recomputed with the current ``sdm.integrity``.  Each assertion is its own test,
so a failing run shows at once whether rows were bad, commits lost, or reopens failed.  After
the kill, a catalog is also rebuilt from the data alone (``sdm rebuild``) and checked the same way.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from collections import Counter
from pathlib import Path

import pytest

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(420)]

REPO = Path(__file__).resolve().parents[2]
SEED = int(os.environ.get("SDM_CRASH_SEED", "15"))  # a different seed draws other moments and rank counts
TRIALS = 10


def _harness():
    spec = importlib.util.spec_from_file_location("sdm_crash_harness", REPO / "benchmarks" / "crash.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


@pytest.fixture(scope="module")
def crash_run(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("crash-results")
    _harness().main(["--quick", "--trials", str(TRIALS), "--seed", str(SEED), "--out", str(out)])
    return json.loads((out / "crash.json").read_text())


def _where(t: dict) -> str:
    return f"trial {t['trial']} (level {t['level']}, {t['op']}, kill {t['kill']}, n={t['nprocs']}, delay {t['delay']} s)"


def test_trials_cover_every_level_call_and_kill(crash_run):
    trials = crash_run["trials"]
    assert len(trials) == TRIALS
    assert {t["level"] for t in trials} == {1, 2, 3}
    assert {t["op"] for t in trials} == {"write", "write_step", "overwrite"}
    assert {t["kill"] for t in trials} == {"rank", "rank0", "job"}
    assert {(t["level"], t["kill"]) for t in trials} == {(lv, k) for lv in (1, 2, 3) for k in ("rank", "rank0", "job")}
    not_started = [_where(t) for t in trials if not t["started"]]
    assert not not_started, f"jobs that never reached their write loop: {not_started}"
    killed = sum(1 for t in trials if t["killed"])
    assert killed >= TRIALS - 2, f"only {killed} of {TRIALS} jobs were still writing when the kill came"


def test_no_committed_row_is_bad_after_a_kill(crash_run):
    bad = [(t, b) for t in crash_run["trials"] for b in t["check"]["bad"]]
    by = Counter((t["level"], t["op"], t["kill"], b["reason"]) for t, b in bad)
    details = [f"{_where(t)}: {b['dataset']} step {b['step']} {b['reason']} ({b['detail']})" for t, b in bad]
    assert not bad, (f"{len(bad)} bad rows in {len({t['trial'] for t, _ in bad})} of {len(crash_run['trials'])} trials; "
                     f"by (level, call, kill, reason): {dict(by)}\n" + "\n".join(details))


def test_no_returned_write_is_lost(crash_run):
    lost = [f"{_where(t)}: {x}" for t in crash_run["trials"] for x in t["check"]["lost"]]
    assert not lost, "\n".join(lost)


def test_every_killed_run_reopens_and_continues(crash_run):
    failures = [f"{_where(t)}: {t['reopen'].get('error', t['reopen'].get('reason'))}"
                for t in crash_run["trials"] if t["reopen"].get("ok") is not True]
    assert not failures, "\n".join(failures)


def test_no_row_is_bad_after_the_run_is_continued(crash_run):
    bad = [f"{_where(t)}: {b['dataset']} step {b['step']} {b['reason']} ({b['detail']})"
           for t in crash_run["trials"] for b in t["reopen"].get("check", {}).get("bad", [])]
    lost = [f"{_where(t)}: {x}" for t in crash_run["trials"] for x in t["reopen"].get("check", {}).get("lost", [])]
    assert not bad and not lost, "\n".join(bad + lost)


def test_a_catalog_rebuilt_after_a_kill_is_consistent_with_the_bytes(crash_run):
    """``sdm rebuild`` from the killed run's data alone: no bad row, no committed step missing."""
    trials = crash_run["trials"]
    failures = [f"{_where(t)}: {t['rebuild'].get('error')}" for t in trials if t.get("rebuild", {}).get("ok") is False]
    bad = [f"{_where(t)}: {b['dataset']} step {b['step']} {b['reason']} ({b['detail']})"
           for t in trials for b in t.get("rebuild", {}).get("bad", [])]
    missing = [f"{_where(t)}: {m}" for t in trials for m in t.get("rebuild", {}).get("missing", [])]
    lost = [f"{_where(t)}: {x}" for t in trials for x in t.get("rebuild", {}).get("lost", [])]
    assert all("rebuild" in t for t in trials)
    assert not failures and not bad and not missing and not lost, "\n".join(failures + bad + missing + lost)
