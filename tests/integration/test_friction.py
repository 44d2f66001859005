"""What a new user trips over: catalog paths, did-you-mean, the reason column, the demo's next commands, the README."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from mpi4py import MPI

import sdm
from sdm.catalog import Catalog
from sdm.errors import ApplicationNotFoundError, CatalogUnavailableError, GroupNotFoundError, RunNotFoundError
from sdm.examples._template import next_commands
from sdm.suggest import closest

README = Path(__file__).resolve().parents[2] / "README.md"


def _sdm(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``python -m sdm ARGS`` in *cwd*, importing the same sdm as the tests."""
    full = {k: v for k, v in os.environ.items() if k not in ("SDM_CATALOG", "SDM_ROOT")}
    full.update(PYTHONPATH=str(Path(sdm.__file__).resolve().parents[1]), **env)
    return subprocess.run([sys.executable, "-m", "sdm", *args], cwd=cwd, env=full, capture_output=True, text=True,
                          timeout=120)


def _write_run(root: Path, catalog: str, application: str = "heat") -> int:
    with sdm.open(application, "w", root=root, catalog=catalog, comm=MPI.COMM_SELF,
                  attributes={"case": "demo", "nx": 64}) as s:
        g = s.make_group("fields", ["T"], dtype="f8", shape=(8, 8))
        g.write("T", 0, np.arange(64.0).reshape(8, 8))
        return s.run_id


def test_closest() -> None:
    assert closest("feilds", ["fields", "flat"]) == "; did you mean 'fields'?"
    assert closest("t", ["T", "q"]) == "; did you mean 'T'?"  # case does not hide a name
    assert closest("rho", ["rhoo", "rh0", "rho_u"]) == "; did you mean 'rhoo' or 'rho_u' or 'rh0'?"  # the closest first
    assert closest("xyz", ["T"]) == "" and closest("T", ["T"]) == "" and closest(3, ["T"]) == ""


def test_a_plain_path_is_an_sqlite_catalog(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SDM_CATALOG", raising=False)
    run = _write_run(tmp_path / "data", "runs/catalog.db")
    assert (tmp_path / "runs" / "catalog.db").is_file()
    with sdm.open("heat", "r", catalog="runs/catalog.db", run=run, comm=MPI.COMM_SELF) as s:
        np.testing.assert_array_equal(s.group("fields").read("T", 0), np.arange(64.0).reshape(8, 8))
    assert [r.id for r in sdm.find(catalog="runs/catalog.db", application="heat")] == [run]
    cat = Catalog("./runs/catalog.db", create=False)
    assert cat.url == f"sqlite:///{tmp_path / 'runs' / 'catalog.db'}"
    cat.close()
    out = _sdm("ls", "heat", "--catalog", "runs/catalog.db", "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert [r["id"] for r in json.loads(out.stdout)["runs"]] == [run]
    env = _sdm("ls", "--json", cwd=tmp_path, SDM_CATALOG="runs/catalog.db")  # the variable takes a path too
    assert [a["name"] for a in json.loads(env.stdout)["applications"]] == ["heat"]


def test_bad_catalog_paths_say_what_is_wrong(tmp_path) -> None:
    (tmp_path / "runs").mkdir()
    with pytest.raises(CatalogUnavailableError) as info:
        Catalog(str(tmp_path / "runs"))
    url = f"sqlite:///{tmp_path / 'runs'}"
    assert str(info.value) == (f"catalog {url!r}: {tmp_path / 'runs'} is a directory; name the catalog file, "
                               f"e.g. {str(tmp_path / 'runs' / 'catalog.db')!r}")
    with pytest.raises(CatalogUnavailableError) as info:
        Catalog(str(tmp_path / "nowhere" / "catalog.db"), create=False)
    assert str(info.value) == (f"catalog 'sqlite:///{tmp_path / 'nowhere' / 'catalog.db'}': directory "
                               f"{tmp_path / 'nowhere'} does not exist")
    out = _sdm("ls", "--catalog", "runs/missing.db", cwd=tmp_path)
    assert out.returncode == 1
    assert out.stderr.startswith(f"error: no catalog at {tmp_path / 'runs' / 'missing.db'}; pass --catalog")


def test_did_you_mean_for_applications_and_groups(tmp_path) -> None:
    catalog = str(tmp_path / "catalog.db")
    run = _write_run(tmp_path, catalog)
    cat = Catalog(catalog, create=False)
    url = cat.url
    with pytest.raises(GroupNotFoundError) as info:
        cat.group(run, "feilds")
    assert str(info.value) == f"run {run} has no group 'feilds'; its groups are ['fields']; did you mean 'fields'?"
    with pytest.raises(ApplicationNotFoundError) as info:
        cat.latest_run("haet")
    assert str(info.value) == f"no application 'haet' in catalog {url!r}; did you mean 'heat'?"
    with pytest.raises(RunNotFoundError) as info:
        cat.run(run, application="haet")
    assert str(info.value) == f"no run {run} of application 'haet' in catalog {url!r}; run {run} is of application " \
                              "'heat'"
    cat.close()
    with pytest.raises(ApplicationNotFoundError) as info:
        sdm.open("Heat", "r", catalog=catalog, comm=MPI.COMM_SELF)
    assert str(info.value) == f"no application 'Heat' in catalog {url!r}; did you mean 'heat'?"
    out = _sdm("ls", "hat", "--catalog", catalog, cwd=tmp_path)
    assert out.returncode == 1
    assert out.stderr == (f"error: no application 'hat' in catalog {url!r}; `sdm ls` lists the applications; "
                          "did you mean 'heat'?\n")


def test_show_writes_has_the_planners_reason(tmp_path) -> None:
    catalog = str(tmp_path / "catalog.db")
    run = _write_run(tmp_path, catalog)
    cat = Catalog(catalog, create=False)
    ((_, _, w),) = cat.writes(run)
    cat.close()
    assert w.reason  # method="auto": the planner says why
    out = _sdm("show", str(run), "--writes", "--catalog", catalog, "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    (row,) = json.loads(out.stdout)["writes"]
    assert row["reason"] == w.reason and row["method"] == w.method
    table = _sdm("show", str(run), "--writes", "--wide", "--catalog", catalog, cwd=tmp_path)
    head = next(line for line in table.stdout.splitlines() if "checksum" in line and "method" in line)
    assert "reason" in head
    assert w.reason.split()[0] in table.stdout  # the reason's first words, whatever the wrapping


def test_demo_prints_commands_that_show_its_run(tmp_path) -> None:
    root = tmp_path / "demo-data"
    catalog = f"sqlite:///{root / 'catalog.db'}"
    run = _write_run(root, catalog, application="ASTRO3D")
    result = {"catalog": catalog, "run_id": run, "application": "ASTRO3D",
              "groups": [{"group": "fields", "datasets": ["T"], "steps": [0]}]}
    commands = next_commands(result, cwd=tmp_path)
    assert [c.split()[1:] for c in commands] == [
        ["ls", "ASTRO3D", "--catalog", "demo-data/catalog.db"],
        ["show", str(run), "--writes", "--catalog", "demo-data/catalog.db"],
        ["verify", str(run), "--catalog", "demo-data/catalog.db"],
        ["plot", str(run), "fields/T", "--step", "0", "--catalog", "demo-data/catalog.db"],
    ]
    for command in commands:  # pasted in the directory `make demo` ran in, with SDM_ROOT elsewhere
        out = _sdm(*shlex.split(command)[1:], cwd=tmp_path, SDM_ROOT=str(tmp_path / "elsewhere"))
        assert out.returncode == 0, (command, out.stderr)
    picture = tmp_path / f"run{run}-fields-T-step0.png"  # named after what it shows (the whole 2-D step)
    assert picture.is_file()
    before = picture.read_bytes()
    again = _sdm(*shlex.split(commands[-1])[1:], cwd=tmp_path, SDM_ROOT=str(tmp_path / "elsewhere"))
    assert (again.returncode, again.stderr) == (1, f"error: {picture.name} already exists; pass --overwrite "
                                                   "(overwrite=True) to replace it, or name another file with --out\n")
    assert picture.read_bytes() == before


def test_demo_says_its_plot_needs_the_analysis_extra_without_matplotlib(tmp_path, monkeypatch) -> None:
    """`make demo` installs no matplotlib: the plot command it prints says what installs it, as a shell comment."""
    import importlib.util

    from sdm.examples import _template

    real = importlib.util.find_spec
    result = {"catalog": f"sqlite:///{tmp_path}/catalog.db", "run_id": 3, "application": "ASTRO3D",
              "groups": [{"group": "fields", "datasets": ["T"], "steps": [0, 4]}]}
    with_plots = next_commands(result, cwd=tmp_path)[-1]
    monkeypatch.setattr(_template.importlib.util, "find_spec", lambda name: None if name == "matplotlib" else real(name))
    without = next_commands(result, cwd=tmp_path)[-1]
    assert without == with_plots + "   # after `make analysis` (matplotlib)"
    assert shlex.split(without, comments=True) == shlex.split(with_plots)


def test_readme_shell_commands_are_quoted() -> None:
    """No unquoted comparison in a README shell block: `nx>=32` bare would write a file named `=32`."""
    blocks = re.findall(r"```bash\n(.*?)```", README.read_text(), re.S)
    assert blocks
    for block in blocks:
        for line in block.splitlines():
            code = line.split("  #", 1)[0]
            bare = re.sub(r"'[^']*'|\"[^\"]*\"", "", code)
            assert not re.search(r"\w(<|>|<=|>=|!=)\w", bare), f"unquoted comparison in README: {line}"
