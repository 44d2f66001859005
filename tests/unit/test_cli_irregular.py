"""`sdm show` lists imports; `sdm histories` lists index histories and their reuse."""

from __future__ import annotations

import json

from sdm._cli.main import app
from sdm.catalog import Catalog
from sdm.catalog import irregular as records
from typer.testing import CliRunner


def _catalog(tmp_path):
    url = f"sqlite:///{tmp_path}/c.db"
    cat = Catalog(url)
    run = cat.create_run("fun3d", nprocs=4, root=str(tmp_path))
    records.record_import(cat, run_id=run, name="edge1", source="/data/mesh.bin", offset=0, dtype="<i4", count=10,
                          shape=(10,), mode="contiguous", nbytes=40, checksum="00ff", seconds=0.5, nprocs=4)
    hid = records.register_history(cat, application="fun3d", problem="wing", content_hash="ab" * 32, nprocs=4,
                                   root=str(tmp_path), path="fun3d/histories/wing.idx", nbytes=4096, run_id=run,
                                   parts=[records.HistoryPart("nodes", 0, 0, 5, "<i8")])
    later = cat.create_run("fun3d", nprocs=4, root=str(tmp_path))
    records.record_history_use(cat, hid, later, 0.01)
    cat.close()
    return url, run, later


def test_show_lists_imports(tmp_path):
    url, run, _ = _catalog(tmp_path)
    out = CliRunner().invoke(app, ["show", str(run), "--catalog", url, "--json"])
    assert out.exit_code == 0, out.output
    (imp,) = json.loads(out.output)["imports"]
    assert (imp["name"], imp["source"], imp["dtype"], imp["mode"], imp["nbytes"]) == ("edge1", "/data/mesh.bin", "<i4", "contiguous", 40)
    text = CliRunner().invoke(app, ["show", str(run), "--catalog", url]).output
    assert "imports" in text and "/data/mesh.bin" in text


def test_histories_and_their_uses(tmp_path):
    url, run, later = _catalog(tmp_path)
    out = CliRunner().invoke(app, ["histories", "fun3d", "--catalog", url, "--json"])
    assert out.exit_code == 0, out.output
    (h,) = json.loads(out.output)
    assert (h["problem"], h["nprocs"], h["run"], [u["run"] for u in h["uses"]]) == ("wing", 4, run, [later])
    assert CliRunner().invoke(app, ["histories", "fun3d", "--problem", "other", "--catalog", url, "--json"]).output.strip() == "[]"
