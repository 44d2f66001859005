"""The README's example works when pasted: run it under mpiexec, then the CLI on its output."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

README = Path(__file__).resolve().parents[2] / "README.md"
BIN = Path(sys.executable).parent


def _example(tmp_path, index: int, name: str) -> dict[str, str]:
    """Write the README's python block *index* to *name*; return the environment to run it."""
    code = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)[index]
    (tmp_path / name).write_text(code)
    env = {"PATH": f"{BIN}:/usr/bin:/bin", "HOME": str(tmp_path)}
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(x) for x in os.environ["PYTHONPATH"].split(os.pathsep))
    return env


def test_readme_example_runs_and_is_found(tmp_path):
    env = _example(tmp_path, 0, "example.py")
    out = subprocess.run(
        [str(BIN / "mpiexec"), "-n", "3", sys.executable, "example.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "run 1 steps [0, 10, 20]" in out.stdout
    found = subprocess.run(
        [sys.executable, "-m", "sdm", "find", "case=demo", "nx>=32", "--json"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
    )
    assert found.returncode == 0, found.stderr
    runs = json.loads(found.stdout)["runs"]
    assert [r["id"] for r in runs] == [1]
    # the bytes of T at step 20 are what the example computed, read with numpy alone
    import sdm

    cat = sdm.Catalog(f"sqlite:///{tmp_path}/sdm-data/catalog.db")
    (w,) = [w for _, d, w in cat.writes(1) if d == "T" and w.step == 20]
    T = np.memmap(tmp_path / "sdm-data" / w.path, dtype="f8", mode="r", offset=w.offset, shape=(64, 64))
    i = np.arange(64)
    np.testing.assert_array_equal(T, 20 + np.add.outer(i, i))
    cat.close()
    # the README's search example, pasted, on that catalog
    env = _example(tmp_path, 2, "search.py")
    out = subprocess.run([sys.executable, "search.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["1 fields/T 3 steps 0 to 20", "1 fields/q 3 steps 0 to 20", "(0, 10, 20)"]


def test_readme_irregular_example_reuses_its_history(tmp_path):
    env = _example(tmp_path, 1, "mesh.py")
    outputs = []
    for _ in range(2):
        out = subprocess.run([str(BIN / "mpiexec"), "-n", "3", sys.executable, "mesh.py"],
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        outputs.append(out.stdout.strip())
    assert outputs[0].startswith("computed - no index history of 'mesh-A' for 3 ranks")
    assert outputs[1].startswith("history - loaded from index history 1")


def test_readme_ranked_example(tmp_path):
    env = _example(tmp_path, 3, "particles.py")
    out = subprocess.run([str(BIN / "mpiexec"), "-n", "3", sys.executable, "particles.py"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["counts (0, 2, 4) total 6 rank 0 rows 0", "whole (6, 3)"]


def test_readme_infos_example(tmp_path):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    index = next(i for i, code in enumerate(blocks) if "set_info" in code)
    env = _example(tmp_path, index, "infos.py")
    out = subprocess.run([str(BIN / "mpiexec"), "-n", "2", sys.executable, "infos.py"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["['units'] ['materials'] ['scale'] ['dt']",
                                       "['m' 's' 'kg'] [2.7e+03 7.0e+10] [0.002]"]
    shown = subprocess.run([sys.executable, "-m", "sdm", "show", "1", "--json"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    infos = json.loads(shown.stdout)["infos"]
    assert [(i["group"], i["dataset"], i["step"], i["name"]) for i in infos] == [
        (None, None, None, "units"), ("state", None, None, "materials"), ("state", "u", None, "scale"),
        ("state", "u", 0, "dt"), ("state", "u", 1, "dt")]
    assert infos[1]["preview"] == [[7850.0, 210e9], [2700.0, 70e9]] and infos[2]["dtype"] == "<f4"
