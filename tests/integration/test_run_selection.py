"""One rule for choosing a run, on SQLite and a real PostgreSQL server, and one order for listing them.

:meth:`Catalog.select_run` (what ``sdm.open``, xarray, :func:`sdm.export` and the
``sdm show`` / ``sdm export`` commands use): ``run=ID`` is that run, ``run="latest"`` the
newest match, and otherwise exactly one run must match; several raise
:class:`sdm.AmbiguousRunError` listing them newest first (ten at most, the rest counted),
and change nothing. :func:`sdm.find`, ``sdm find`` and ``sdm ls`` list runs in that same
order: latest creation time first, runs created at the same instant by id, highest first
(creation times are set here against the order of the ids, so the two orders differ).
The commands refuse an ambiguous selection with one ``error:`` line and leave no export
behind; an export of the chosen run is read back with h5py and compared with numpy.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest
import typer
from click.testing import CliRunner

import sdm
from sdm._cli.main import app
from sdm.catalog import Catalog
from sdm.catalog import schema as S
from sdm.catalog.selection import run_choice
from sdm.errors import (
    AmbiguousRunError,
    ApplicationNotFoundError,
    InvalidArgumentError,
    RunNotFoundError,
)

pytestmark = pytest.mark.timeout(300)

UTC = timezone.utc
T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
LISTED = r"run (\d+) \(created (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) UTC, ([^)]*)\)"


def _created(cat: Catalog, run: int, when: datetime) -> None:
    with cat.engine.begin() as con:
        con.execute(S.runs.update().where(S.runs.c.id == run).values(created_at=when))


@pytest.fixture
def cat(catalog_url: str):
    c = Catalog(catalog_url)
    yield c
    c.close()


@pytest.fixture
def runs(cat: Catalog) -> list[int]:
    """Five runs of 'heat' whose creation times do not follow their ids, and one of 'other'.

    ids:      r0      r1      r2      r3      r4
    case:     demo    demo    demo    other   demo
    created:  T0+3h   T0+1h   T0+3h   T0+2h   T0
    newest first (time, then id): r2, r0, r3, r1, r4
    """
    ids = [cat.create_run("heat", nprocs=2, root="/r", attributes={"case": c, "nx": 8 * (i + 1)})
           for i, c in enumerate(("demo", "demo", "demo", "other", "demo"))]
    for rid, hours in zip(ids, (3, 1, 3, 2, 0)):
        _created(cat, rid, T0 + timedelta(hours=hours))
    cat.create_run("other", nprocs=1, root="/r", attributes={"case": "demo"})
    return ids


def test_several_matches_are_listed_newest_first_and_nothing_changes(cat: Catalog, runs: list[int]) -> None:
    r0, r1, r2, r3, r4 = runs
    before = cat.counts()
    with pytest.raises(AmbiguousRunError) as info:
        cat.select_run("heat", {"case": "demo"})
    text = str(info.value)
    assert text.startswith("4 runs of 'heat' match attributes {'case': 'demo'}, newest first: ")
    assert text.endswith("; pass run=ID to choose one, or run='latest' for the newest")
    listed = re.findall(LISTED, text)
    assert [int(i) for i, _, _ in listed] == [r2, r0, r1, r4]
    assert [t for _, t, _ in listed] == ["2024-05-01 15:00:00", "2024-05-01 15:00:00", "2024-05-01 13:00:00",
                                         "2024-05-01 12:00:00"]
    assert [a for _, _, a in listed] == ["case='demo', nx=24", "case='demo', nx=8", "case='demo', nx=16",
                                         "case='demo', nx=40"]
    with pytest.raises(AmbiguousRunError) as info:  # no attributes: every run of the application
        cat.select_run("heat")
    assert [int(i) for i, _, _ in re.findall(LISTED, str(info.value))] == [r2, r0, r3, r1, r4]
    assert str(info.value).startswith("5 runs of 'heat', newest first: ")
    with pytest.raises(AmbiguousRunError) as info:  # any application
        cat.select_run(None, {"case": "demo"})
    assert str(info.value).startswith("5 runs match attributes {'case': 'demo'}, newest first: ")
    assert cat.counts() == before


def test_the_caller_says_which(cat: Catalog, runs: list[int]) -> None:
    r0, r1, r2, r3, r4 = runs
    assert cat.select_run("heat", {"case": "demo"}, "latest").id == r2  # created at the same time as r0: higher id
    assert cat.select_run("heat", {"case": "demo", "nx": ("<", 20)}, "latest").id == r0  # r0 (nx=8) is newer than r1
    assert cat.select_run("heat", {"case": "demo"}, r4).id == r4  # an id is that run
    assert cat.select_run("heat", run=np.int64(r3)).id == r3
    assert cat.select_run("heat", {"case": "other"}).id == r3  # exactly one matches
    assert cat.select_run("heat", {"nx": 40}).id == r4
    assert cat.latest_run("heat", {"case": "demo"}).id == r2
    with pytest.raises(RunNotFoundError) as missing:
        cat.select_run("heat", {"case": "nope"})
    assert str(missing.value) == ("no run of 'heat' has attributes {'case': 'nope'}; `sdm ls` lists the runs and "
                                  "`sdm show RUN` their attributes")
    with pytest.raises(RunNotFoundError, match=r"^no run of 'heat' has attributes \{'case': 'nope'\}"):
        cat.select_run("heat", {"case": "nope"}, "latest")
    with pytest.raises(RunNotFoundError, match=rf"^no run {r4 + 1} of application 'heat'"):
        cat.select_run("heat", run=r4 + 1)
    with pytest.raises(ApplicationNotFoundError):
        cat.select_run("nope")


@pytest.mark.parametrize("bad, shown", [("newest", "'newest'"), (True, "True"), (0, "0"), (-3, "-3"),
                                        (1.5, "float 1.5"), ([1], "list [1]"), (2**63, str(2**63))])
def test_a_bad_run_is_refused(cat: Catalog, runs: list[int], bad, shown: str) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        cat.select_run("heat", run=bad)
    assert str(info.value) == f"run must be a run id (an integer >= 1) or 'latest', got {shown}"
    assert not isinstance(info.value, AmbiguousRunError)
    assert run_choice(None) is None and run_choice("latest") == "latest" and run_choice(np.int32(7)) == 7


def test_more_than_ten_matches_are_counted(cat: Catalog) -> None:
    ids = [cat.create_run("many", nprocs=1, root="/r", attributes={"k": 1}) for _ in range(13)]
    for i, rid in enumerate(ids):
        _created(cat, rid, T0 + timedelta(minutes=i))
    with pytest.raises(AmbiguousRunError) as info:
        cat.select_run("many", {"k": 1})
    assert [int(i) for i, _, _ in re.findall(LISTED, str(info.value))] == ids[::-1][:10]
    assert "; and 3 more; pass run=ID" in str(info.value)


# ------------------------------------------------------------------ one order for every listing
def _cli(*args: str) -> dict:
    result = CliRunner().invoke(typer.main.get_command(app), list(args), env={"COLUMNS": "200", "SDM_CATALOG": None})
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_find_ls_and_the_find_command_list_runs_in_one_order(catalog_url: str, runs: list[int]) -> None:
    r0, r1, r2, r3, r4 = runs
    newest_first = [r2, r0, r3, r1, r4]
    assert [r.id for r in sdm.find(catalog=catalog_url, application="heat")] == newest_first
    assert [r["id"] for r in _cli("ls", "heat", "--json", "--catalog", catalog_url)["runs"]] == newest_first
    assert [r["id"] for r in _cli("find", "--app", "heat", "--json", "--catalog", catalog_url)["runs"]] == newest_first
    page = _cli("ls", "heat", "--json", "--limit", "2", "--offset", "1", "--catalog", catalog_url)
    assert [r["id"] for r in page["runs"]] == newest_first[1:3] and page["more"] == 2
    demo = [r2, r0, r1, r4]
    assert [r.id for r in sdm.find(catalog=catalog_url, application="heat", attributes={"case": "demo"})] == demo
    assert [r["id"] for r in _cli("find", "case=demo", "--app", "heat", "--json", "--catalog", catalog_url)["runs"]] \
        == demo


# ------------------------------------------------------------------ the commands and sdm.export
def _write(root: Path, url: str, case: str, scale: float) -> int:
    from mpi4py import MPI

    with sdm.open("heat", "w", root=root, catalog=url, attributes={"case": case}, comm=MPI.COMM_SELF) as s:
        g = s.make_group("fields", ["T"], dtype="f8", shape=(3, 4), level=3)
        for step in (0, 1):
            g.write("T", step, _values(scale, step))
        return s.run_id


def _values(scale: float, step: int) -> np.ndarray:
    return (np.arange(12.0).reshape(3, 4) + step) * scale


@pytest.fixture
def written(tmp_path: Path) -> tuple[str, Path, list[int]]:
    url = f"sqlite:///{tmp_path}/catalog.db"
    root = tmp_path / "data"
    return url, root, [_write(root, url, "demo", 1.0), _write(root, url, "demo", 2.0), _write(root, url, "x", 3.0)]


def _fails(*args: str) -> str:
    result = CliRunner().invoke(typer.main.get_command(app), list(args), env={"COLUMNS": "200", "SDM_CATALOG": None})
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and result.stdout == "", result.output
    return lines[0]


def test_show_and_export_commands_refuse_to_guess(written, tmp_path: Path) -> None:
    url, _, (a, b, c) = written
    out = tmp_path / "demo.h5"
    for args, listed in ((("show", "--app", "heat", "case=demo"), [b, a]), (("show", "--app", "heat"), [c, b, a]),
                         (("export", "case=demo", "--app", "heat", "-f", "hdf5", "-o", str(out)), [b, a])):
        line = _fails(*args, "--catalog", url)
        assert line.startswith(f"error: {len(listed)} runs of 'heat'") and ", newest first: " in line, line
        assert line.endswith("; name one by its id, or add `latest` for the newest"), line
        assert [int(i) for i, _, _ in re.findall(LISTED, line)] == listed
    assert not out.exists() and list(tmp_path.glob("demo.h5*")) == []  # nothing left behind
    assert _cli("show", "--app", "heat", "case=demo", "latest", "--json", "--catalog", url)["run"]["id"] == b
    assert _cli("show", "case=x", "--json", "--catalog", url)["run"]["id"] == c  # one match, any application
    assert _cli("show", str(a), "--json", "--catalog", url)["run"]["id"] == a
    for words, message in ((["case"], "'case' is neither a run id, `latest` nor a KEY=VALUE condition"),
                           ([str(a), "latest"], "give one run id, or conditions (with `latest` for the newest), not "
                                                "both"),
                           ([], "give a run id, or --app APP and/or KEY=VALUE conditions")):
        result = CliRunner().invoke(typer.main.get_command(app), ["show", *words, "--catalog", url])
        said = " ".join(result.output.replace("\u2502", " ").split())  # the usage box, unwrapped
        assert result.exit_code == 2 and message in said, said


def test_export_chooses_by_the_same_rule(written, tmp_path: Path) -> None:
    import h5py

    url, _, (a, b, c) = written
    out = tmp_path / "newest.h5"
    with pytest.raises(AmbiguousRunError) as info:
        sdm.export(application="heat", where=["case=demo"], format="hdf5", out=out, catalog=url)
    assert [int(i) for i, _, _ in re.findall(LISTED, str(info.value))] == [b, a]
    assert list(tmp_path.glob("newest.h5*")) == []
    with pytest.raises(InvalidArgumentError, match="^export needs a run: its id, or application= and/or where="):
        sdm.export(format="hdf5", out=out, catalog=url)
    report = sdm.export("latest", application="heat", where={"case": "demo"}, format="hdf5", out=out, catalog=url)
    assert report.run == b
    with h5py.File(out, "r") as f:
        np.testing.assert_array_equal(f["fields/T"][...], np.stack([_values(2.0, s) for s in (0, 1)]))
    cli_out = tmp_path / "x.h5"
    done = CliRunner().invoke(typer.main.get_command(app), ["export", "--app", "heat", "case=x", "-f", "hdf5", "-o",
                                                            str(cli_out), "--catalog", url, "--json"])
    assert done.exit_code == 0, done.output
    with h5py.File(cli_out, "r") as f:
        np.testing.assert_array_equal(f["fields/T"][...], np.stack([_values(3.0, s) for s in (0, 1)]))
