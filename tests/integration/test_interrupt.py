"""A rank that leaves an MPI job's session by an exception ends the job; it never hangs.

Issue: Ctrl-C in ``mpiexec`` during a write left three ranks waiting in ``close`` and one
in the write's exchange, forever. Now a ``KeyboardInterrupt`` (or any exception that is
not SDM's own) leaving an SDM call on one rank is reported and ends the job with
``MPI_Abort`` (:mod:`sdm.engine.operations`), and an exception raised in the
application's code of one rank ends it when the other ranks do not close the session too.
Each case checks that the job ends within 10 s, that the run is ``interrupted``, and that
every committed row's bytes, read with numpy, equal the job's formula and the row's
checksum.
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import sdm
from sdm import integrity
from sdm.catalog import Catalog

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
MPIEXEC = Path(sys.executable).parent / "mpiexec"
sys.path.insert(0, str(ROOT / "benchmarks"))
from _mpijob import Job  # noqa: E402

sys.path.insert(0, str(HERE))
import _interrupt_job as job  # noqa: E402

ENDS_WITHIN = 10.0
pytestmark = [pytest.mark.timeout(240), pytest.mark.skipif(not MPIEXEC.exists(), reason="no mpiexec next to this Python")]


def _start(tmp_path: Path, mode: str, task: str) -> tuple[Job, Path, str]:
    data = tmp_path / "data"
    url = f"sqlite:///{tmp_path}/cat.db"
    cfg = {"dir": str(tmp_path), "task": task, "mode": mode, "root": str(data), "url": url}
    return Job(4, cfg, tmp_path / f"{task}.log", worker=HERE / "_interrupt_job.py"), data, url


def _ended(j: Job, since: float) -> float:
    """Seconds from *since* until the job ended (fails the test, after killing it, if it hangs)."""
    status = j.wait(30)
    seconds = time.monotonic() - since
    if status is None:
        j.cleanup()
        pytest.fail(f"the job still ran 30 s later (a hang): {j.log.read_text()[-3000:]}")
    return seconds


def _check_committed(data: Path, url: str) -> list[int]:
    """The run is interrupted; every row's bytes equal the formula and its checksum. Returns the steps."""
    cat = Catalog(url, create=False)
    try:
        (run,) = cat.find(application="interrupt")
        rows = cat.writes(run.id)
    finally:
        cat.close()
    steps = []
    for _, _, w in rows:
        raw = np.fromfile(data / w.path, dtype=np.uint8, count=w.nbytes, offset=w.offset)
        assert raw.size == w.nbytes, f"step {w.step}: {raw.size} of {w.nbytes} bytes on disk"
        assert integrity.checksum_of_bytes(raw, "<f8", w.checksum_algo) == w.checksum, f"step {w.step}"
        np.testing.assert_array_equal(raw.view("<f8").reshape(job.SHAPE), job.reference(w.step))
        steps.append(w.step)
    with sdm.open("interrupt", "r", catalog=url, run=run.id) as s:
        assert s.previous_state == "interrupted"
        assert s.group("fields").steps("T") == sorted(steps)
    return sorted(steps)


@pytest.mark.parametrize("trial", range(3))
def test_sigint_to_mpiexec_during_writes_ends_the_job(tmp_path, trial):
    j, data, url = _start(tmp_path, "loop", f"sigint{trial}")
    try:
        assert j.wait_for("step", 120), f"no step written: {j.log.read_text()[-3000:]}"
        time.sleep(0.05 + 0.1 * trial)  # somewhere in the middle of a later write
        t0 = time.monotonic()
        j.proc.send_signal(signal.SIGINT)
        seconds = _ended(j, t0)
    finally:
        j.cleanup()
        j.remove_leftovers()
    assert seconds < ENDS_WITHIN, seconds
    assert j.proc.returncode != 0
    steps = _check_committed(data, url)
    assert steps == list(range(len(steps))) and steps  # no gap: a step is committed whole or not at all


@pytest.mark.parametrize("mode", ["one-raises", "one-raises-others-elsewhere"])
def test_an_exception_on_one_rank_ends_the_job(tmp_path, mode):
    j, data, url = _start(tmp_path, mode, mode)
    try:
        t0 = time.monotonic()
        assert j.wait_for("step", 120), f"no step written: {j.log.read_text()[-3000:]}"
        seconds = _ended(j, t0)
    finally:
        j.cleanup()
        j.remove_leftovers()
    log = j.log.read_text()
    assert seconds < 30 + ENDS_WITHIN, seconds
    assert j.proc.returncode != 0
    assert "ValueError: the application failed on rank 1" in log
    assert "sdm: rank 1 of 4: ValueError in the application's code of this rank" in log
    assert "MPI_Abort" in log
    if mode == "one-raises":  # the others' next write met rank 1's close
        assert "while the other ranks made another SDM call" in log
    else:  # the others wait in the application's own barrier: rank 1 waits $SDM_CLOSE_WAIT (5 s) for them
        assert "did not close the session within 5 s" in log
    assert _check_committed(data, url) == [0, 1, 2, 3]
