"""The transient dynamics template (sdm.examples.transient) at 2 ranks, as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MPIEXEC = Path(sys.executable).parent / "mpiexec"


@pytest.mark.skipif(not MPIEXEC.exists(), reason="no mpiexec next to this Python")
@pytest.mark.timeout(400)
def test_transient_template_verifies_at_two_ranks(tmp_path):
    env = dict(os.environ)
    src = str(ROOT / "src")
    env["PYTHONPATH"] = src + os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else src
    command = [str(MPIEXEC), "-n", "2", sys.executable, "-m", "sdm.examples.transient", "--root", str(tmp_path),
               "--nx", "12", "--ny", "4", "--nz", "3", "--steps", "9", "--every", "3", "--verify"]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=360)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("transient run 1: 144 HEX8 elements, 260 nodes, 3 blocks, results at steps "
                               "[0, 3, 6, 9] on 2 ranks; wrote in ")
    assert "every value matches" in lines[1]
    assert (tmp_path / "catalog.db").exists()
