"""The ``sdm`` command line against a catalog filled directly through the Catalog API (no MPI)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
from typer.testing import CliRunner

import sdm
from sdm._cli.main import app, steps_text
from sdm.catalog import Catalog, DatasetSpec
from sdm.catalog import schema as S

pytestmark = pytest.mark.timeout(60)

SRC = Path(__file__).resolve().parents[2] / "src"
RHO_STEPS = list(range(0, 49, 6))  # 0-48/6
E_STEPS = [0, 1, 2, 5]  # 0-2,5


def _write(cat: Catalog, run: int, dataset_id: int, step: int, path: str, offset: int, nbytes: int, level: int) -> None:
    cat.record_write(run_id=run, dataset_id=dataset_id, step=step, path=path, level=level, offset=offset,
                     nbytes=nbytes, checksum=f"{step:016x}", checksum_algo="sum64", method="collective",
                     seconds=0.125, nprocs=4, overwrite=False)


@pytest.fixture
def filled(tmp_path: Path) -> dict:
    """Three runs: ASTRO3D #1 (2 groups of data), ASTRO3D #2 (1 group), climate #3 (no data)."""
    url = f"sqlite:///{tmp_path}/catalog.db"
    cat = Catalog(url)
    r1 = cat.create_run("ASTRO3D", nprocs=4, root=str(tmp_path), problem_size=[64, 32],
                        attributes={"res": 64, "model": "ideal"})
    g = cat.define_group(r1, "fields", 3, [DatasetSpec("rho", "<f8", (64, 32), "C"),
                                           DatasetSpec("e[x]", "<f4", (64, 32), "F")])
    rho, ex = g.datasets
    cat.set_attributes(r1, {"kind": "field"}, group_id=g.id, dataset_ids=[rho.id, ex.id])
    cat.set_distribution([rho.id], {"kind": "block", "grid": [2, 2], "ghosts": 0})
    offset = 0
    for step in RHO_STEPS:
        _write(cat, r1, rho.id, step, "ASTRO3D/run-000001/fields.dat", offset, rho.nbytes, 3)
        offset += rho.nbytes
    for step in E_STEPS:
        _write(cat, r1, ex.id, step, "ASTRO3D/run-000001/fields.dat", offset, ex.nbytes, 3)
        offset += ex.nbytes
    r2 = cat.create_run("ASTRO3D", nprocs=8, root=str(tmp_path), attributes={"res": 128, "model": "mhd"})
    (spec,) = cat.define_group(r2, "diag", 1, [DatasetSpec("spectrum", "<f8", (16,), "C")]).datasets
    _write(cat, r2, spec.id, 3, "ASTRO3D/run-000002/diag/spectrum/3.dat", 0, 128, 1)
    r3 = cat.create_run("climate", nprocs=2, root=str(tmp_path), attributes={"ocean": True})
    with cat.engine.begin() as con:
        for run, day in ((r1, "2024-01-10"), (r2, "2024-02-10"), (r3, "2024-03-10")):
            when = datetime.fromisoformat(day + "T12:00:00").replace(tzinfo=timezone.utc)
            con.execute(S.runs.update().where(S.runs.c.id == run).values(created_at=when))
    cat.close()
    return {"url": url, "runs": (r1, r2, r3), "bytes1": offset, "rho_nbytes": rho.nbytes}


def run_cli(*args: str, env: dict | None = None):
    """Invoke the app in-process; COLUMNS unset so tables are not wrapped."""
    return CliRunner().invoke(app, list(args), env={"COLUMNS": None, **(env or {})})


def ok(*args: str, env: dict | None = None) -> str:
    result = run_cli(*args, env=env)
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return result.stdout


def as_json(*args: str) -> dict:
    return json.loads(ok(*args, "--json"))


def fails(*args: str, env: dict | None = None) -> str:
    """Run a command that must fail cleanly; return its one-line stderr message."""
    result = run_cli(*args, env=env)
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


# ---------------------------------------------------------------------- steps_text
@pytest.mark.parametrize("steps, text", [
    ([], "-"),
    ([7], "7"),
    ([0, 6], "0,6"),
    ([0, 1, 2, 3], "0-3"),
    (list(range(0, 49, 6)), "0-48/6"),
    ([0, 1, 2, 5], "0-2,5"),
    ([0, 2, 4, 7, 9], "0-4/2,7,9"),
    ([10, 0, 5, 5], "0-10/5"),
    ([1, 2, 4, 8, 16], "1,2,4,8,16"),
])
def test_steps_text(steps: list[int], text: str) -> None:
    assert steps_text(steps) == text


# ----------------------------------------------------------------------------- ls
def test_ls_applications(filled: dict) -> None:
    out = ok("ls", "--catalog", filled["url"])
    lines = {line.split()[1]: line for line in out.splitlines() if "ASTRO3D" in line or "climate" in line}
    assert lines["ASTRO3D"].split()[3:6] == ["2", "│", "2024-02-10"]
    assert lines["climate"].split()[3:6] == ["1", "│", "2024-03-10"]

    data = as_json("ls", "--catalog", filled["url"])
    assert data == {"applications": [
        {"name": "ASTRO3D", "runs": 2, "last_run": "2024-02-10T12:00:00+00:00"},
        {"name": "climate", "runs": 1, "last_run": "2024-03-10T12:00:00+00:00"},
    ]}


def test_ls_runs_of_an_application(filled: dict) -> None:
    r1, r2, _ = filled["runs"]
    out = ok("ls", "ASTRO3D", "--catalog", filled["url"])
    assert "runs of ASTRO3D" in out
    row1 = next(line for line in out.splitlines() if line.startswith(f"│  {r1} "))
    assert "2024-01-10 12:00:00" in row1 and "[64, 32]" in row1 and "res=64 model=ideal" in row1
    assert [c.strip() for c in row1.split("│")[1:-1]][2] == "closed"  # state
    assert [c.strip() for c in row1.split("│")[1:-1]][3] == "4"  # ranks
    assert [c.strip() for c in row1.split("│")[1:-1]][6] == "2"  # datasets
    assert "climate" not in out

    data = as_json("ls", "ASTRO3D", "--catalog", filled["url"])
    assert data["application"] == "ASTRO3D"
    assert (data["total"], data["offset"], data["limit"], data["more"]) == (2, 0, 20, 0)
    assert [(r["id"], r["nprocs"], r["datasets"], r["writes"], r["bytes"]) for r in data["runs"]] == [
        (r2, 8, 1, 1, 128), (r1, 4, 2, len(RHO_STEPS) + len(E_STEPS), filled["bytes1"])]  # newest first
    assert data["runs"][1]["attributes"] == {"res": 64, "model": "ideal"}
    assert data["runs"][1]["problem_size"] == [64, 32]
    assert (data["runs"][1]["state"], data["runs"][1]["dir"]) == ("closed", None)  # registered without a directory
    assert data["runs"][0]["created_at"] == "2024-02-10T12:00:00+00:00"


def test_ls_pages(filled: dict) -> None:
    r1, r2, _ = filled["runs"]
    url = filled["url"]
    first = as_json("ls", "ASTRO3D", "--limit", "1", "--catalog", url)
    assert ([r["id"] for r in first["runs"]], first["total"], first["more"]) == ([r2], 2, 1)
    second = as_json("ls", "ASTRO3D", "--limit", "1", "--offset", "1", "--catalog", url)
    assert ([r["id"] for r in second["runs"]], second["total"], second["more"]) == ([r1], 2, 0)
    past = as_json("ls", "ASTRO3D", "--offset", "5", "--catalog", url)
    assert (past["runs"], past["total"], past["more"]) == ([], 2, 0)
    out = ok("ls", "ASTRO3D", "-n", "1", "--catalog", url)
    assert "runs 1-1 of 2; 1 more: sdm ls ASTRO3D --offset 1" in out
    assert "runs 2-2 of 2" in ok("ls", "ASTRO3D", "--limit", "1", "--offset", "1", "--catalog", url)
    assert "no runs past 5 of 2" in ok("ls", "ASTRO3D", "--offset", "5", "--catalog", url)
    for bad in (["--limit", "0"], ["--offset", "-1"], ["--limit", "x"]):
        assert run_cli("ls", "ASTRO3D", *bad, "--catalog", url).exit_code == 2


def test_ls_unknown_application(filled: dict) -> None:
    assert fails("ls", "nope", "--catalog", filled["url"]).startswith("error: no application 'nope' in catalog")


# --------------------------------------------------------------------------- show
def test_show_run(filled: dict) -> None:
    r1 = filled["runs"][0]
    out = ok("show", str(r1), "--catalog", filled["url"])
    assert "application   ASTRO3D" in out and "ranks         4" in out
    assert "res=64 model=ideal" in out and "problem size  [64, 32]" in out
    rho = next(line for line in out.splitlines() if "│ rho " in line)
    assert [c.strip() for c in rho.split("│")[1:-1]] == [
        "fields", "rho", "<f8", "64x32", "C", "block grid=2x2", "0-48/6", "-"]
    ex = next(line for line in out.splitlines() if "e[x]" in line)  # brackets are not markup
    assert [c.strip() for c in ex.split("│")[1:-1]][:7] == ["fields", "e[x]", "<f4", "64x32", "F", "-", "0-2,5"]
    f = next(line for line in out.splitlines() if "fields.dat" in line)
    assert [c.strip() for c in f.split("│")[1:-1]] == ["ASTRO3D/run-000001/fields.dat", "3", "13", "176.0 KiB"]  # 9 x 16 KiB + 4 x 8 KiB
    assert "kind=field" in out  # the group's attributes
    assert "checksum" not in out  # writes only with --writes

    out = ok("show", str(r1), "--writes", "--wide", "--catalog", filled["url"])  # every column, in full
    w = next(line for line in out.splitlines() if "fields/rho" in line and "│   12 │" in line)
    assert [c.strip() for c in w.split("│")[1:-1]] == [
        "fields/rho", "12", "ASTRO3D/run-000001/fields.dat", str(2 * filled["rho_nbytes"]),
        str(filled["rho_nbytes"]), "sum64:000000000000000c", "collective", "0.125000", "-"]  # no reason recorded
    out = ok("show", str(r1), "--writes", "--catalog", filled["url"])  # one line each, the informative columns
    w = next(line for line in out.splitlines() if line.startswith("fields/rho") and " 12 " in line)
    assert w.split() == ["fields/rho", "12", "…TRO3D/run-000001/fields.dat", "16.0", "KiB", "125.00", "collective",
                         "-"]  # the run has no directory: the path as recorded, its end kept in 28 characters


def test_show_json(filled: dict) -> None:
    r1 = filled["runs"][0]
    data = as_json("show", str(r1), "--writes", "--catalog", filled["url"])
    assert data["run"]["id"] == r1 and data["run"]["application"] == "ASTRO3D"
    assert data["run"]["created_at"] == "2024-01-10T12:00:00+00:00"
    (group,) = data["groups"]
    assert (group["name"], group["level"], group["attributes"]) == ("fields", 3, {"kind": "field"})
    rho, ex = group["datasets"]
    assert (rho["name"], rho["dtype"], rho["shape"], rho["order"]) == ("rho", "<f8", [64, 32], "C")
    assert rho["steps"] == RHO_STEPS and rho["steps_range"] == "0-48/6"
    assert rho["distribution"] == {"kind": "block", "grid": [2, 2], "ghosts": 0}
    assert (ex["name"], ex["order"], ex["steps"], ex["steps_range"]) == ("e[x]", "F", E_STEPS, "0-2,5")
    assert data["files"] == [{"path": "ASTRO3D/run-000001/fields.dat", "level": 3, "writes": 13,
                              "bytes": filled["bytes1"]}]
    assert len(data["writes"]) == 13
    assert [w["offset"] for w in data["writes"]] == sorted(w["offset"] for w in data["writes"])
    first = data["writes"][0]
    assert {k: first[k] for k in ("group", "dataset", "step", "offset", "nbytes", "checksum", "method")} == {
        "group": "fields", "dataset": "rho", "step": 0, "offset": 0, "nbytes": filled["rho_nbytes"],
        "checksum": "0000000000000000", "method": "collective"}
    assert "writes" not in as_json("show", str(r1), "--catalog", filled["url"])


def test_show_unknown_run(filled: dict) -> None:
    assert fails("show", "999", "--catalog", filled["url"]) == f"error: no run 999 in catalog {filled['url']!r}"


# --------------------------------------------------------------------------- find
def test_find_conditions(filled: dict) -> None:
    r1, r2, r3 = filled["runs"]
    url = filled["url"]
    assert [r["id"] for r in as_json("find", "--catalog", url)["runs"]] == [r3, r2, r1]  # newest first, as ls
    data = as_json("find", "res>=100", "--steps", "--catalog", url)
    assert [r["id"] for r in data["runs"]] == [r2]
    assert data["conditions"] == ["res>=100"]
    assert [(d["group"], d["name"], d["shape"], d["steps"]) for d in data["runs"][0]["datasets"]] == [
        ("diag", "spectrum", [16], [3])]
    # without --steps: the summary only, read in SQL
    (spectrum,) = as_json("find", "res>=100", "--catalog", url)["runs"][0]["datasets"]
    assert (spectrum["nsteps"], spectrum["first_step"], spectrum["last_step"]) == (1, 3, 3)
    assert "steps" not in spectrum and "steps_range" not in spectrum
    assert [r["id"] for r in as_json("find", "res<=128", "model!=mhd", "--catalog", url)["runs"]] == [r1]
    assert [r["id"] for r in as_json("find", "res>64", "--catalog", url)["runs"]] == [r2]
    assert [r["id"] for r in as_json("find", "ocean=true", "--catalog", url)["runs"]] == [r3]
    assert [r["id"] for r in as_json("find", "model=ideal", "--catalog", url)["runs"]] == [r1]
    assert as_json("find", "res=64", "--app", "climate", "--catalog", url)["runs"] == []
    # a group attribute selects that group's datasets only
    (run,) = as_json("find", "kind=field", "--steps", "--catalog", url)["runs"]
    assert [(d["name"], d["steps_range"]) for d in run["datasets"]] == [("rho", "0-48/6"), ("e[x]", "0-2,5")]
    (run,) = as_json("find", "kind=field", "--catalog", url)["runs"]
    assert [(d["name"], d["nsteps"], d["first_step"], d["last_step"]) for d in run["datasets"]] == [
        ("rho", len(RHO_STEPS), 0, 48), ("e[x]", len(E_STEPS), 0, 5)]

    out = ok("find", "res=64", "--steps", "--catalog", url)
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in out.splitlines() if line.startswith("│")]
    assert rows[0][0] == str(r1) and rows[0][5:] == ["fields/rho", "<f8", "64x32", "0-48/6"]
    assert rows[1][0] == "" and rows[1][5:] == ["fields/e[x]", "<f4", "64x32", "0-2,5"]
    out = ok("find", "res=64", "--catalog", url)
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in out.splitlines() if line.startswith("│")]
    assert rows[0][5:] == ["fields/rho", "<f8", "64x32", f"0..48 ({len(RHO_STEPS)} steps)"]
    assert rows[1][5:] == ["fields/e[x]", "<f4", "64x32", f"0..5 ({len(E_STEPS)} steps)"]
    assert "no matching runs" in ok("find", "res=1", "--catalog", url)


def test_find_by_app_run_and_dates(filled: dict) -> None:
    r1, r2, r3 = filled["runs"]
    url = filled["url"]

    def ids(*args: str) -> list[int]:
        return [r["id"] for r in as_json("find", *args, "--catalog", url)["runs"]]

    assert ids("--app", "ASTRO3D") == [r2, r1]
    assert ids("--run", str(r2)) == [r2]
    assert ids("--since", "2024-02-01") == [r3, r2]
    assert ids("--until", "2024-02-10") == [r2, r1]  # a bare date includes that whole day
    assert ids("--until", "2024-02-10T12:00:00") == [r2, r1]
    assert ids("--until", "2024-02-10T11:59:59") == [r1]
    assert ids("--since", "2024-01-11", "--until", "2024-03-01") == [r2]
    assert ids("--since", "2024-02-10T13:00:00+01:00", "--app", "ASTRO3D") == [r2]
    assert ids("--since", "2025-01-01") == []


def test_find_bad_input(filled: dict) -> None:
    result = run_cli("find", "res", "--catalog", filled["url"])  # a condition that does not read: a usage error
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr.startswith("error: cannot read condition 'res' at its end: no comparison after 'res'")
    result = run_cli("find", "--since", "yesterday", "--catalog", filled["url"])
    assert result.exit_code == 2 and "not an ISO date" in result.stderr and "Traceback" not in result.stderr


# ------------------------------------------------------------ catalogs and errors
def test_default_catalog_from_environment(filled: dict, tmp_path: Path) -> None:
    data = json.loads(ok("ls", "--json", env={"SDM_CATALOG": filled["url"]}))
    assert [a["name"] for a in data["applications"]] == ["ASTRO3D", "climate"]
    data = json.loads(ok("ls", "--json", env={"SDM_CATALOG": None, "SDM_ROOT": str(tmp_path)}))
    assert [a["runs"] for a in data["applications"]] == [2, 1]  # sqlite:///$SDM_ROOT/catalog.db


@pytest.mark.parametrize("url, message", [
    ("postgresql://nobody@127.0.0.1:1/x", "error: cannot open catalog 'postgresql://nobody@127.0.0.1:1/x': "),
    ("mysql://u@h/db", "error: catalog URL scheme 'mysql' is not supported; use sqlite:/// or postgresql://"),
])
def test_unreachable_catalog(url: str, message: str) -> None:
    for args in (["ls"], ["ls", "app"], ["show", "1"], ["find", "a=1"]):
        assert fails(*args, "--catalog", url).startswith(message)


def test_missing_sqlite_catalog_is_not_created(tmp_path: Path) -> None:
    path = tmp_path / "none.db"
    line = fails("ls", "--catalog", f"sqlite:///{path}")
    assert line.startswith(f"error: no catalog at {path}")
    assert not path.exists()
    line = fails("show", "1", env={"SDM_CATALOG": None, "SDM_ROOT": str(tmp_path / "nowhere")})
    assert line.startswith(f"error: no catalog at {tmp_path / 'nowhere' / 'catalog.db'}")


def test_version_help_and_usage_errors() -> None:
    assert ok("--version").strip() == f"sdm {sdm.__version__}"
    assert "find" in ok("--help") and "show" in ok("--help")
    assert run_cli("frobnicate").exit_code == 2
    assert run_cli("show", "not-a-number").exit_code == 2
    assert run_cli("ls", "--no-such-option").exit_code == 2


def test_python_dash_m_sdm(filled: dict) -> None:
    env = {**os.environ, "PYTHONPATH": str(SRC), "COLUMNS": "200"}
    env.pop("SDM_CATALOG", None)
    done = subprocess.run([sys.executable, "-m", "sdm", "ls", "ASTRO3D", "--json", "--catalog", filled["url"]],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert [r["id"] for r in json.loads(done.stdout)["runs"]] == list(filled["runs"][1::-1])  # newest first
    done = subprocess.run([sys.executable, "-m", "sdm", "show", "42", "--catalog", filled["url"]],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.strip() == f"error: no run 42 in catalog {filled['url']!r}"
