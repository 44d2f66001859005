"""The crash harness, short: kill -9 during writes and maintenance commands, SIGINT to mpiexec.

Runs ``benchmarks/crash.py --quick`` (10 trials: every organization level, every call --
``write``, ``write_step``, ``write(..., overwrite=True)`` / ``write_step(..., overwrite=True)``
-- and every kill -- a non-zero rank, rank 0, the whole job -- at a random moment drawn from a
fixed seed; then 6 trials of compressed dumps, zstd levels 1-3 with and without the byte
shuffle, covering every level, call and kill twice; then 3 trials of nonblocking dumps --
``write``/``write_step`` with ``wait=False``, up to 4 dumps outstanding, the worker's arrays
overwritten right after each call -- one per level, each call and kill once), in this process, so that a timeout still
runs the harness's clean-up of its jobs and temporary directories.  ``benchmarks/README.md``
says exactly when a row is bad; a compressed row's chunks are checked one by one (their
xxh3-64 checksums, boxes and decoded values; ``tests/integration/test_crash_check.py``
corrupts such rows on purpose to check the checker).

The data is checked with numpy and sqlite3 alone, never through SDM's read path; the
checksums are recomputed with the current ``sdm.integrity``.  Each assertion is its own test,
so a failing run shows at once whether rows were bad, commits lost, or reopens failed.  After
the kill, a catalog is also rebuilt from the data alone (``sdm rebuild``) and checked the same way.

``--kinds ops --quick`` then kills each maintenance command once -- ``session.truncate`` (MPI),
``sdm rebuild``, ``sdm export``, ``sdm migrate`` and ``sdm purge`` (to the harness's own versitygw)
-- within 0.3 s of the start of its work, checks every row on every tier the catalog names, runs
the command again and checks its result.  ``--kinds sigint`` sends SIGINT to ``mpiexec`` during a
4-rank write loop twice: the job must end within 10 s, leave the run ``interrupted``, and no
committed row may be bad.
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
COMPRESSED = 6  # the compressed trials --quick adds after the TRIALS others
NONBLOCKING = 3  # the nonblocking trials --quick adds after the compressed ones


def _harness():
    spec = importlib.util.spec_from_file_location("sdm_crash_harness", REPO / "benchmarks" / "crash.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


@pytest.fixture(scope="module")
def crash_run(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("crash-results")
    harness = _harness()
    harness.main(["--quick", "--trials", str(TRIALS), "--seed", str(SEED), "--out", str(out)])
    data = json.loads((out / "crash.json").read_text())
    data["trials"] = harness.check.records_of(data["trials"])  # stored as one table
    return data


def _where(t: dict) -> str:
    return (f"trial {t['trial']} (level {t['level']}, {t['op']}, kill {t['kill']}, n={t['nprocs']}, "
            f"{t.get('compression') or 'raw'}{', nonblocking' if t.get('nonblocking') else ''}, delay {t['delay']} s)")


def test_trials_cover_every_level_call_and_kill(crash_run):
    assert len(crash_run["trials"]) == TRIALS + COMPRESSED + NONBLOCKING
    trials = [t for t in crash_run["trials"] if t.get("compression") is None and not t.get("nonblocking")]
    assert len(trials) == TRIALS
    assert {t["level"] for t in trials} == {1, 2, 3}
    assert {t["op"] for t in trials} == {"write", "write_step", "overwrite"}
    assert {t["kill"] for t in trials} == {"rank", "rank0", "job"}
    assert {(t["level"], t["kill"]) for t in trials} == {(lv, k) for lv in (1, 2, 3) for k in ("rank", "rank0", "job")}
    not_started = [_where(t) for t in trials if not t["started"]]
    assert not not_started, f"jobs that never reached their write loop: {not_started}"
    killed = sum(1 for t in trials if t["killed"])
    assert killed >= TRIALS - 2, f"only {killed} of {TRIALS} jobs were still writing when the kill came"
    assert all(t["check"].get("compressed_rows", 0) == 0 for t in trials)


def test_compressed_trials_cover_every_level_call_and_kill(crash_run):
    """The compressed trials: zstd levels 1-3, shuffled and not, each level, call and kill twice; their rows are
    compressed ones, checked chunk by chunk (the bad-row, lost-commit and reopen tests below cover them too)."""
    trials = [t for t in crash_run["trials"] if t.get("compression") is not None]
    assert len(trials) == COMPRESSED and not any(t.get("nonblocking") for t in trials)
    assert {t["compression"] for t in trials} == {f"zstd:{lv}:{sh}" for lv in (1, 2, 3) for sh in ("shuffle", "noshuffle")}
    for key in ("level", "op", "kill"):
        assert Counter(t[key] for t in trials) == Counter({v: 2 for v in {t[key] for t in trials}})
        assert len({t[key] for t in trials}) == 3
    not_started = [_where(t) for t in trials if not t["started"]]
    assert not not_started, f"jobs that never reached their write loop: {not_started}"
    killed = sum(1 for t in trials if t["killed"])
    assert killed >= COMPRESSED - 1, f"only {killed} of {COMPRESSED} compressed jobs were still writing when killed"
    raw = [_where(t) for t in trials if t["check"]["rows"] != t["check"]["compressed_rows"]
           or t["reopen"]["check"]["rows"] != t["reopen"]["check"]["compressed_rows"]]
    assert not raw, f"compressed trials with rows not compressed: {raw}"
    assert sum(t["check"]["rows"] for t in trials) > 0
    unchecked = [_where(t) for t in trials if t["check"]["checksums_unchecked"]]
    assert not unchecked, f"compressed rows whose checksums the checker could not recompute: {unchecked}"


def test_nonblocking_trials_cover_every_level_call_and_kill_with_dumps_in_flight(crash_run):
    """The nonblocking trials: one per level, each call and kill once, raw rows; each worker had several dumps
    outstanding at once (its handles not ended just after a call), and dumps were in flight when it was killed
    (intents not reported done); their rows are checked like the others by the tests below."""
    trials = [t for t in crash_run["trials"] if t.get("nonblocking")]
    assert len(trials) == NONBLOCKING
    assert {t["level"] for t in trials} == {1, 2, 3}
    assert {t["op"] for t in trials} == {"write", "write_step", "overwrite"}
    assert {t["kill"] for t in trials} == {"rank", "rank0", "job"}
    assert all(t.get("compression") is None and t["check"]["compressed_rows"] == 0 for t in trials)
    not_started = [_where(t) for t in trials if not t["started"]]
    assert not not_started, f"jobs that never reached their write loop: {not_started}"
    killed = [t for t in trials if t["killed"]]
    assert len(killed) >= NONBLOCKING - 1, f"only {len(killed)} of {NONBLOCKING} nonblocking jobs were killed"
    serial = [f"{_where(t)}: at most {t.get('max_outstanding')}" for t in trials if t.get("max_outstanding", 0) < 2]
    assert not serial, f"nonblocking trials that never had two dumps outstanding at once: {serial}"
    assert all(t.get("max_outstanding", 0) <= 4 for t in trials)  # the worker waits beyond 3 queued
    assert any(t.get("undone_at_kill", 0) > 0 for t in killed), "no nonblocking dump was in flight at a kill"
    assert sum(t["check"]["rows"] for t in trials) > 0


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


# --------------------------------------------------------------------------- maintenance commands
OPS_KINDS = ("truncate", "rebuild", "export", "migrate", "purge")


def _table(part: dict) -> list[dict]:
    """The trials of a compact result file (``columns`` and ``rows``) as one dict each."""
    return [dict(zip(part["columns"], row)) for row in part["rows"]]


@pytest.fixture(scope="module")
def ops_run(tmp_path_factory) -> dict:
    """``crash.py --kinds ops --quick``: one kill -9 of each maintenance kind (its own versitygw for migrate and
    purge), every row checked, the command rerun and its result checked."""
    out = tmp_path_factory.mktemp("crash-ops-results")
    _harness().main(["--kinds", "ops", "--quick", "--trials", str(len(OPS_KINDS)), "--seed", str(SEED),
                     "--out", str(out)])
    data = json.loads((out / "crash_ops.json").read_text())
    data["records"] = _table(data["trials"])
    return data


def _ops_where(t: dict) -> str:
    return f"trial {t['trial']} ({t['kind']} {t['variant']}, delay {t['delay']} s, at {t['at']})"


def _details(data: dict, trial: int) -> dict:
    return next((f for f in data["trials"]["failures"] if f["trial"] == trial), {})


def test_each_maintenance_command_is_killed_in_its_work(ops_run):
    trials = ops_run["records"]
    assert [t["kind"] for t in trials] == list(OPS_KINDS)
    errors = [f"{_ops_where(t)}: {_details(ops_run, t['trial'])}" for t in trials
              if t["started"] is not True or _details(ops_run, t["trial"]).get("harness_error")]
    assert not errors, "\n".join(errors)
    killed = sum(1 for t in trials if t["killed"])
    assert killed >= len(trials) - 1, f"only {killed} of {len(trials)} commands were still running when the kill came"


def test_no_row_is_bad_after_a_killed_maintenance_command(ops_run):
    bad = [f"{_ops_where(t)}: {_details(ops_run, t['trial']).get('bad')}" for t in ops_run["records"] if t["bad"]]
    assert not bad, "\n".join(bad)
    assert sum(t["rows"] or 0 for t in ops_run["records"]) > 0  # rows were there to check


def test_every_killed_maintenance_command_completes_when_run_again(ops_run):
    failures = [f"{_ops_where(t)}: {_details(ops_run, t['trial']).get('rerun_error')}"
                for t in ops_run["records"] if t["killed"] and t["rerun"] is not True]
    assert not failures, "\n".join(failures)


def test_the_rerun_gives_the_right_result_and_no_bad_row(ops_run):
    """Truncated exactly at the cut, the original catalog rebuilt, the export equal to numpy, the run read back
    from the archive (migrate, purge of the fast tier) or the fast tier (purge of the archive)."""
    wrong = [f"{_ops_where(t)}: {_details(ops_run, t['trial'])}" for t in ops_run["records"]
             if t["killed"] and (t["result"] is not True or t["bad_after"])]
    assert not wrong, "\n".join(wrong)
    read = {t["kind"]: t["read"] for t in ops_run["records"] if t["killed"]}
    assert all(read.get(k, 1) > 0 for k in ("migrate", "purge")), read


# --------------------------------------------------------------------------- SIGINT to mpiexec
SIGINT_HANG_LIMIT = 15  # s; the benchmark's default is 30


@pytest.fixture(scope="module")
def sigint_run(tmp_path_factory) -> dict:
    """``crash.py --kinds sigint``, two trials: SIGINT to mpiexec during a 4-rank write loop."""
    out = tmp_path_factory.mktemp("crash-sigint-results")
    _harness().main(["--kinds", "sigint", "--trials", "2", "--seed", str(SEED), "--hang-limit",
                     str(SIGINT_HANG_LIMIT), "--out", str(out)])
    data = json.loads((out / "crash_sigint.json").read_text())
    data["records"] = _table(data["trials"])
    return data


def test_sigint_trials_end_one_way_or_another_and_no_committed_row_is_bad(sigint_run):
    """Whatever the job does with the signal, the harness ends it (killing it after the hang limit) and every
    committed row is whole and reads back verified."""
    trials = sigint_run["records"]
    assert len(trials) == 2 and all(t["started"] for t in trials)
    assert all(t["end"] in ("in time", "late", "hang") for t in trials if t["interrupted"])
    problems = [f"trial {t['trial']}: {_details(sigint_run, t['trial'])}" for t in trials
                if t["bad"] or t["lost"] or t["read_bad"]]
    assert not problems, "\n".join(problems)


def test_sigint_ends_the_job_within_10_s_and_leaves_the_run_interrupted(sigint_run):
    """A KeyboardInterrupt on any rank ends the whole job (before the collective protocol, 7 of 10 such jobs hung
    and the others closed the run as if it had ended normally)."""
    signalled = [t for t in sigint_run["records"] if t["interrupted"]]
    assert signalled
    assert [t["end"] for t in signalled] == ["in time"] * len(signalled)
    assert [t["state"] for t in signalled] == ["interrupted"] * len(signalled)
