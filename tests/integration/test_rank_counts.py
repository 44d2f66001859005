"""The randomized map and distribution tests at rank counts the MPI suite does not use.

Collective call sequences that depend on a rank's data (a ``Set_view`` made once on
some ranks and twice on others) hang only at some rank counts (with 37 rows and every
other row mapped: 7-11, 13, 14, 16 ranks).  ``make test`` runs tests/mpi at 1-4 and 8
ranks; this test draws two more counts from 5-11 and runs tests/mpi/test_random_io.py
there, oversubscribed, under ``mpiexec`` in a subprocess with a time limit, so a hang
fails the test instead of the run.

``$SDM_TEST_SEED`` fixes the seed (rank counts and draws); it is printed either way.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
MPIEXEC = Path(sys.executable).parent / "mpiexec"
SEED = int(os.environ["SDM_TEST_SEED"]) if os.environ.get("SDM_TEST_SEED") else int.from_bytes(os.urandom(4), "little")
COUNTS = sorted(np.random.default_rng([SEED, 0]).choice([5, 6, 7, 9, 10, 11], 2, replace=False).tolist())
LIMIT = 420  # seconds for one mpiexec run (about 60-120 s on 2 shared cores)


@pytest.mark.skipif(not MPIEXEC.exists(), reason="no mpiexec next to this Python")
@pytest.mark.timeout(LIMIT + 60)
@pytest.mark.parametrize("index", range(len(COUNTS)))
def test_random_io_at_other_rank_counts(index, tmp_path):
    ranks = COUNTS[index]
    print(f"seed {SEED}: {ranks} ranks (counts drawn: {COUNTS})")
    env = dict(os.environ, SDM_TEST_SEED=str(SEED), SDM_TEST_DRAWS="2", SDM_MPI_TMPDIR=str(tmp_path))
    src = str(ROOT / "src")
    env["PYTHONPATH"] = src + os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else src
    command = [str(MPIEXEC), "-n", str(ranks), sys.executable, "-m", "pytest", "tests/mpi/test_random_io.py", "-q",
               "-p", "no:cacheprovider"]
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=LIMIT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # mpiexec and the ranks it started (their own session)
        out, _ = proc.communicate()
        pytest.fail(f"seed {SEED}: mpiexec -n {ranks} did not finish within {LIMIT} s (a hang?)\n{out[-4000:]}")
    assert proc.returncode == 0, f"seed {SEED}: mpiexec -n {ranks} failed ({proc.returncode}):\n{out[-6000:]}"
    assert " passed" in out and " failed" not in out, out[-6000:]
