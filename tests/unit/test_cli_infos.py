"""``sdm show`` lists a run's infos: text table and ``--json`` (catalog filled through the Catalog API, no MPI)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from sdm._cli.main import app
from sdm.catalog import Catalog, DatasetSpec

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def shown(tmp_path: Path) -> tuple[str, int]:
    url = f"sqlite:///{tmp_path}/catalog.db"
    cat = Catalog(url)
    run = cat.create_run("app", nprocs=2, root=str(tmp_path))
    g = cat.define_group(run, "g", 3, [DatasetSpec("a", "<f8", (4,), "C")])
    (a,) = g.datasets
    cat.set_info(run, "units", np.array(["K", "m/s"]))
    cat.set_info(run, "table", np.arange(6, dtype=">i4").reshape(2, 3), group_id=g.id)
    cat.set_info(run, "special", np.array([np.nan, -np.inf, 1.5]), group_id=g.id, dataset_id=a.id)
    cat.set_info(run, "z", np.array([1 + 2j]), group_id=g.id, dataset_id=a.id, step=3)
    cat.set_info(run, "big", np.arange(17, dtype="u1"), group_id=g.id, dataset_id=a.id, step=3)
    cat.set_info(run, "tag", np.bytes_(b"ok"))
    cat.close()
    return url, run


def _out(*args: str) -> str:
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": None})
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return result.stdout


def test_show_json_lists_every_info_with_a_preview_of_small_ones(shown) -> None:
    url, run = shown
    infos = json.loads(_out("show", str(run), "--catalog", url, "--json"))["infos"]
    assert [(i["group"], i["dataset"], i["step"], i["name"]) for i in infos] == [
        (None, None, None, "tag"), (None, None, None, "units"), ("g", None, None, "table"),
        ("g", "a", None, "special"), ("g", "a", 3, "big"), ("g", "a", 3, "z")]
    by_name = {i["name"]: i for i in infos}
    assert {k: by_name["table"][k] for k in ("dtype", "shape", "nbytes", "preview")} == {
        "dtype": ">i4", "shape": [2, 3], "nbytes": 24, "preview": [[0, 1, 2], [3, 4, 5]]}
    assert by_name["units"]["preview"] == ["K", "m/s"] and by_name["units"]["dtype"] == "<U3"
    assert by_name["tag"]["preview"] == "ok" and by_name["tag"]["shape"] == []
    assert by_name["special"]["preview"] == ["nan", "-inf", 1.5]  # strict JSON
    assert by_name["z"]["preview"] == [[1.0, 2.0]]
    assert by_name["big"]["preview"] is None and by_name["big"]["nbytes"] == 17
    assert all(len(i["checksum"]) == 8 for i in infos)


def test_show_prints_an_infos_table(shown) -> None:
    url, run = shown
    out = _out("show", str(run), "--catalog", url)
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in out.split("\ninfos", 1)[1].split("\nfiles")[0]
            .splitlines() if line.startswith("│")]
    assert rows == [
        ["run", "tag", "|S2", "scalar", "b'ok'"],
        ["run", "units", "<U3", "2", "['K' 'm/s']"],
        ["group 'g'", "table", ">i4", "2x3", "[[0 1 2] [3 4 5]]"],
        ["dataset 'g/a'", "special", "<f8", "3", "[ nan -inf 1.5]"],
        ["step 3 of 'g/a'", "big", "|u1", "17", "(17 values)"],
        ["step 3 of 'g/a'", "z", "<c16", "1", "[1.+2.j]"],
    ]


def test_show_without_infos_prints_no_infos_table(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/catalog.db"
    cat = Catalog(url)
    run = cat.create_run("app", nprocs=1, root=str(tmp_path))
    cat.close()
    assert "\ninfos " not in _out("show", str(run), "--catalog", url)
    assert json.loads(_out("show", str(run), "--catalog", url, "--json"))["infos"] == []
