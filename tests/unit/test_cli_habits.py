"""The ``sdm`` command fits a terminal and a person's habits: one line per write, conditions that do not read
pointed at, every export format and repeated conditions in the help, ``sdm ls`` read without SQLAlchemy
(a catalog filled through the Catalog API, no MPI)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import sdm.exporting
from sdm._cli.main import app, caret_lines  # first: the command's modules register themselves with it
from sdm._cli.export import FORMATS
from sdm._cli.writes import NARROW
from sdm.catalog import Catalog, DatasetSpec
from sdm.catalog import reader, schema

pytestmark = pytest.mark.timeout(60)

SRC = Path(__file__).resolve().parents[2] / "src"
REASON = ("6 datasets of the dump in one file: one file view and one collective call for all of them "
          "(sdm.io.combined)")
STEPS = range(0, 60, 3)  # 20 steps of 2 datasets: 40 writes


@pytest.fixture
def catalog(tmp_path: Path) -> str:
    """A run with 40 writes whose reasons are long, in a run directory; a second application without runs."""
    url = f"sqlite:///{tmp_path}/catalog.db"
    cat = Catalog(url)
    run = cat.create_run("ASTRO3D", nprocs=4, root=str(tmp_path), attributes={"nx": 64, "case": "demo"},
                         make_dir=lambda rid: f"ASTRO3D/run-{rid:06d}-x")
    g = cat.define_group(run, "visualization", 3, [DatasetSpec("rho", "<f4", (64, 64), "C"),
                                                   DatasetSpec("temperature", "<f4", (64, 64), "C")])
    offset = 0
    for step in STEPS:
        for d in g.datasets:
            cat.record_write(run_id=run, dataset_id=d.id, step=step, path="ASTRO3D/run-000001-x/visualization.sdm",
                             level=3, offset=offset, nbytes=d.nbytes, checksum=f"{step:016x}", checksum_algo="mix64-v2",
                             method="collective", seconds=0.0071, nprocs=4, overwrite=False, reason=REASON)
            offset += d.nbytes
    cat.close_run(run)
    cat.create_run("heat", nprocs=1, root=str(tmp_path), attributes={"nx": 8},  # left open: its writer is gone
                   make_dir=lambda rid: f"heat/run-{rid:06d}-y")
    cat.close()
    return url


def _run(*args: str, columns: int | None = None):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": None if columns is None else str(columns)})


# ------------------------------------------------------------------ sdm show --writes
@pytest.mark.parametrize("columns", [None, 80, 100, 132])
def test_one_line_per_write_within_the_terminal_and_100_columns(catalog: str, columns: int | None) -> None:
    result = _run("show", "latest", "--app", "ASTRO3D", "--writes", "--catalog", catalog, columns=columns)
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    head = lines.index(next(line for line in lines if line.startswith("writes")))
    listing = lines[head:]
    assert len(listing) == 3 + 2 * len(STEPS)  # title, header, rule, then one line per write
    width = min(columns or NARROW, NARROW)
    assert max(len(line) for line in listing) <= width
    assert listing[1].split() == (["dataset", "step", "file", "size", "ms", "method", "reason"] if width >= 90
                                  else ["dataset", "step", "size", "ms", "method", "reason"])  # the file gives way
    first = listing[3]
    assert first.startswith("visualization/rho ") and " 16.0 KiB " in first and " 7.10 " in first
    assert first.rstrip().endswith("…") and first.split("collective")[1].strip()[:-1] in REASON  # cut, not wrapped
    if width >= 90:
        assert " visualization.sdm " in first  # relative to the run's directory


def test_wide_and_json_give_everything(catalog: str) -> None:
    wide = _run("show", "1", "--writes", "--wide", "--catalog", catalog, columns=80)
    assert wide.exit_code == 0, wide.stderr
    rows = [line for line in wide.stdout.splitlines() if "visualization/" in line]
    assert len(rows) == 2 * len(STEPS)  # still one line each, however long
    assert all(REASON in row and "ASTRO3D/run-000001-x/visualization.sdm" in row and "mix64-v2:" in row
               for row in rows)
    data = json.loads(_run("show", "1", "--writes", "--json", "--catalog", catalog).stdout)
    assert len(data["writes"]) == 2 * len(STEPS) and {w["reason"] for w in data["writes"]} == {REASON}


# ------------------------------------------------------------------ conditions that do not read
@pytest.mark.parametrize("args, condition, position, what", [
    (("find", "nx>>32"), "nx>>32", 3, "a value cannot start with '>' (after the comparison '>')"),
    (("find", "case=demo", "nx=<3"), "nx=<3", 3, "a value cannot start with '<' (after the comparison '=')"),
    (("find", "--compression", "ratio>>4"), "ratio>>4", 6, "a value cannot start with '>' (after the comparison '>')"),
    (("show", "--app", "ASTRO3D", "n x=3"), "n x=3", 2, "'x' where a comparison (= == != < <= > >=) should be"),
    (("export", "--app", "ASTRO3D", ">=3", "--format", "hdf5", "--out", "x.h5"), ">=3", 0,
     "no attribute name before the comparison"),
])
def test_a_condition_that_does_not_read_is_a_usage_error_pointed_at(catalog: str, tmp_path: Path, args: tuple,
                                                                    condition: str, position: int, what: str) -> None:
    db = Path(catalog[len("sqlite:///"):])
    before = db.read_bytes()
    result = _run(*args, "--catalog", catalog)
    assert (result.exit_code, result.stdout) == (2, "")
    where = "at its end" if position >= len(condition) else f"at character {position + 1}"
    assert result.stderr == (f"error: cannot read condition {condition!r} {where}: {what}; write key=value (or "
                             f"key>=value, key<value, ...)\n  {condition}\n  {' ' * position}^\n")
    assert db.read_bytes() == before and not (tmp_path / "x.h5").exists()


def test_the_caret_stays_under_its_character() -> None:
    assert caret_lines("nx>>32", 3) == ["  nx>>32", "     ^"]
    assert caret_lines("novalue", 7) == ["  novalue", "         ^"]  # just past the end
    long = "k" * 100 + "=>1"
    shown, caret = caret_lines(long, 101, width=40)
    assert shown.startswith("  ...") and shown.endswith("=>1") and shown[caret.index("^")] == ">"
    shown, caret = caret_lines("é\tx>>1", 4)  # a tab prints as '?': one column, as every other character
    assert shown == "  é?x>>1" and shown[caret.index("^")] == ">"


# ------------------------------------------------------------------ help texts
def test_help_names_every_export_format_and_repeated_conditions() -> None:
    assert set(FORMATS) == set(sdm.exporting.FORMATS)  # a new format is named in the help as well
    top = _run("--help", columns=80).stdout
    assert "Export a run to HDF5, NetCDF-4, Zarr v3 or Exodus II." in top
    assert all(len(line) <= 80 for line in top.splitlines())
    for command in ("export", "import"):
        text = " ".join(_run(command, "--help", columns=200).stdout.split())
        assert "HDF5, NetCDF-4, Zarr v3 or Exodus II" in text and "hdf5|netcdf|zarr|exodus" in text
    find = _run("find", "--help", columns=100).stdout
    assert "Usage: sdm find [OPTIONS] [CONDITION]..." in find
    assert "sdm find 'nx>=32' 'case=demo'" in find  # an example with two conditions, kept as written


# ------------------------------------------------------------------ sdm ls without SQLAlchemy
def test_ls_reads_an_sqlite_catalog_without_sqlalchemy_and_says_the_same(catalog: str, tmp_path: Path) -> None:
    code = ("import sys\nfrom sdm._cli.main import main\ncatalog = sys.argv[1]\n"
            "for argv in (['ls', '--json'], ['ls', 'ASTRO3D', '--json'], ['ls', 'ASTRO3D'], ['ls']):\n"
            "    sys.argv = ['sdm', *argv, '--catalog', catalog]\n"
            "    try:\n        main()\n    except SystemExit as exc:\n        assert not exc.code, exc.code\n"
            "print('LOADED', sorted(m for m in ('sqlalchemy', 'numpy', 'mpi4py') if m in sys.modules))\n")
    env = {**os.environ, "PYTHONPATH": str(SRC), "COLUMNS": "200"}
    done = subprocess.run([sys.executable, "-c", code, catalog], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip().endswith("LOADED []")
    full = [_run(*argv, "--catalog", catalog, columns=200).stdout  # in this process: SQLAlchemy's Catalog
            for argv in (["ls", "--json"], ["ls", "ASTRO3D", "--json"], ["ls", "ASTRO3D"], ["ls"])]
    assert done.stdout.rstrip()[:-len("LOADED []")] == "".join(full)


def test_ls_records_a_run_left_open_as_interrupted(catalog: str) -> None:
    code = ("import sys\nfrom sdm._cli.main import main\nsys.argv = ['sdm', 'ls', 'heat', '--json', '--catalog', "
            "sys.argv[1]]\ntry:\n    main()\nexcept SystemExit as exc:\n    assert not exc.code, exc.code\n")
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    done = subprocess.run([sys.executable, "-c", code, catalog], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert [r["state"] for r in json.loads(done.stdout)["runs"]] == ["interrupted"]
    cat = Catalog(catalog, create=False)
    try:
        assert cat.run(2).state == "interrupted"  # recorded, through the full catalog (a write)
    finally:
        cat.close()


def test_the_lean_reader_knows_every_date_time_column() -> None:
    import sqlalchemy as sa

    assert reader.DATETIMES == {c.name for t in schema.metadata.tables.values() for c in t.c
                                if isinstance(c.type, sa.DateTime)}
