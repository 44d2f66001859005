"""``benchmarks/subfiles.py`` end to end: a ``--quick`` run at 2 ranks on /dev/shm and a disk directory
(real MPI jobs, real SQLite catalogs) whose every contender's bytes the script checked with numpy, and bad
command lines refused with exit code 2 and their exact message.

Only what was run and written is checked, never the machine's timing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from quick_bench import REPO, TIMEOUT, run_quick  # tests/integration is on sys.path

SCRIPT = REPO / "benchmarks" / "subfiles.py"


def _scratch_in_shm() -> set[str]:
    return {p for p in os.listdir("/dev/shm") if p.startswith("sdm-subfiles-")}


@pytest.mark.timeout(TIMEOUT + 60)
def test_quick_run_at_two_ranks_checks_every_contender_bytes(tmp_path: Path) -> None:
    out, disk = tmp_path / "results", tmp_path / "disk"
    disk.mkdir()
    before = _scratch_in_shm()
    data = run_quick("subfiles", out, "--ranks", "2", "--disk", str(disk))
    contenders = data["options"]["contenders"]
    assert set(contenders) | set(data["na"]) == {"sdm-subfiled", "sdm-subfiled-nochecksum", "sdm-shared",
                                                 "raw-shared", "fpp-posix"}
    assert set(data["na"]) <= {"sdm-subfiled", "sdm-subfiled-nochecksum"}
    assert data["checks"]["values_wrong"] == {f"{place} {c}": 0 for place in ("/dev/shm", "disk") for c in contenders}
    assert data["problems"] == []
    for place in ("/dev/shm", "disk"):
        layout = data["checks"]["layout"]
        assert layout[f"{place} fpp-posix"]["files"] == 2 and layout[f"{place} raw-shared"]["files"] == 1
        assert layout[f"{place} sdm-shared"] == {**layout[f"{place} sdm-shared"], "files": 1, "extents_per_step": [1]}
        for c in set(contenders) & {"sdm-subfiled", "sdm-subfiled-nochecksum"}:  # one subfile per rank
            assert layout[f"{place} {c}"] == {**layout[f"{place} {c}"], "files": 2, "extents_per_step": [2]}
    samples = [dict(zip(data["samples"]["fields"], row)) for row in data["samples"]["rows"]]
    assert sorted((s["place"], s["contender"]) for s in samples) == sorted(
        (place, c) for place in ("/dev/shm", "disk") for c in contenders)
    for s in samples:
        assert s["mismatches"] == 0 and s["bytes"] == 4 * 2 * 24 ** 3 * 8 and s["write"] > 0 and s["read"] > 0
    assert data["options"] == {**data["options"], "ranks": 2, "n": 24, "arrays": 4, "steps": 2, "rounds": 1}
    assert data["meta"]["git_commit"] and data["meta"]["sdm_version"] and data["meta"]["nprocs"] == 2
    assert (out / "subfiles.png").stat().st_size < 60_000
    assert list(disk.iterdir()) == [] and _scratch_in_shm() <= before  # nothing left behind


@pytest.mark.timeout(120)
@pytest.mark.parametrize("args, message", [
    (["--ranks", "0"], "--ranks must be at least 1, got 0"),
    (["--rounds", "-1"], "--rounds must be at least 1, got -1"),
    (["--n", "3", "--ranks", "4"], "--n 3 gives some of the 4 ranks no rows: use --n >= --ranks"),
    (["--places", "tape"], "--places: unknown 'tape' (choose from /dev/shm, disk)"),
    (["--contenders", "sdm-subfiled,hdf5"],
     "--contenders: unknown 'hdf5' (choose from sdm-subfiled, sdm-subfiled-nochecksum, sdm-shared, raw-shared, "
     "fpp-posix)"),
    (["--places", ","], "--places: unknown empty list (choose from /dev/shm, disk)"),
    (["--disk", "/nonexistent/dir"], "--disk /nonexistent/dir is not a directory"),
    (["--timeout", "0"], "--timeout must be positive, got 0"),
    (["--steps", "x"], "argument --steps: invalid int value: 'x'"),
])
def test_bad_command_lines_exit_2_with_the_message(tmp_path: Path, args: list[str], message: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "out"), *args], capture_output=True,
                          text=True, timeout=100, env=env, stdin=subprocess.DEVNULL)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == f"subfiles.py: error: {message}"
    assert not (tmp_path / "out").exists()
