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


@pytest.mark.skipif(not MPIEXEC.exists(), reason="no mpiexec next to this Python")
@pytest.mark.timeout(400)
def test_the_template_run_exports_to_exodus_and_imports_back(tmp_path):
    """``sdm export --format exodus`` of a run written at 2 ranks: read by meshio, by sdm.fem.exodus.read and
    compared with the stored model read whole; ``sdm import`` of the file gives the same model again."""
    import meshio
    import numpy as np

    import sdm
    from sdm.fem import exodus
    from sdm.fem.store import read_mesh, read_results

    env = dict(os.environ)
    src = str(ROOT / "src")
    env["PYTHONPATH"] = src + os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else src
    command = [str(MPIEXEC), "-n", "2", sys.executable, "-m", "sdm.examples.transient", "--root", str(tmp_path),
               "--nx", "6", "--ny", "3", "--nz", "2", "--steps", "4", "--every", "2"]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=360)
    assert done.returncode == 0, done.stdout + done.stderr
    url = f"sqlite:///{tmp_path}/catalog.db"
    out = tmp_path / "model.exo"
    report = sdm.export(1, format="exodus", out=out, catalog=url)
    assert report.steps == 3 and out.stat().st_size == report.nbytes
    with sdm.open("transient", "r", catalog=url, run=1) as s:
        whole = read_mesh(s, share="whole")
        last = read_results(s, whole, 4)
    model, steps = exodus.read(out)
    steps = list(steps)
    np.testing.assert_array_equal(model.nodes.ids, whole.nodes.ids)
    np.testing.assert_array_equal(model.nodes.coords, whole.nodes.coords)
    for mine, theirs in zip(model.blocks, whole.blocks):
        assert (mine.id, mine.type) == (theirs.id, theirs.type)
        np.testing.assert_array_equal(mine.connectivity, theirs.connectivity)
    assert [s.time for s in steps][-1] == last.time
    for var, values in last.nodal.items():
        np.testing.assert_array_equal(steps[-1].nodal[var], values)
    mesh = meshio.read(out)  # an independent reader
    np.testing.assert_allclose(mesh.points, whole.nodes.coords)
    assert sum(len(c.data) for c in mesh.cells) == sum(len(b.element_ids) for b in whole.blocks)
    again = sdm.import_file(out, format="exodus", application="reimported", catalog=url, root=tmp_path)
    with sdm.open("reimported", "r", catalog=url, run=again.run) as s:
        back = read_mesh(s, share="whole")
        np.testing.assert_array_equal(back.nodes.coords, whole.nodes.coords)
        np.testing.assert_array_equal(read_results(s, back, 2).nodal[whole.variables.nodal[0]],
                                      steps[-1].nodal[whole.variables.nodal[0]])
