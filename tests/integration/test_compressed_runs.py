"""Compressed runs beyond the write path: the archive tier, xarray, the command line, the catalog's answers.

Runs are written by one process (the MPI cases are in tests/mpi/test_compressed.py) and
every value read back is compared with arrays built here with numpy.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

import sdm
from sdm.catalog import Catalog
from sdm.ops import tiers
from sdm.storage.backends.objectstore import ObjectStore

SHAPE = (24, 10, 6)
STEPS = [0, 1, 2]


def smooth(step: int) -> np.ndarray:
    z, y, x = np.meshgrid(*[np.linspace(0, 1, n) for n in SHAPE], indexing="ij")
    return (np.sin(2 * np.pi * z + step) * np.cos(np.pi * y) + x).astype("<f8")


def ids(step: int) -> np.ndarray:
    return (np.arange(np.prod(SHAPE), dtype="<i8").reshape(SHAPE) // 13) * (step + 1)


def write_run(root: Path, url: str) -> int:
    with sdm.open("packed", root=str(root), catalog=url, attributes={"case": "c"}) as s:
        g = s.make_group("fields", ["T", sdm.Dataset("n", dtype="<i8", compression="zstd:1:shuffle")], dtype="<f8",
                         shape=SHAPE, compression={"codec": "zfp", "tolerance": 1e-4}, chunks=(8, 10, 6))
        raw = s.make_group("raw", ["R"], dtype="<f8", shape=SHAPE, level=1)
        for step in STEPS:
            g.write_step(step, {"T": smooth(step), "n": ids(step)})
            raw.write("R", step, smooth(step))
        return s.run_id


@pytest.fixture
def run(tmp_path: Path) -> tuple[Path, str, int]:
    root, url = tmp_path / "root", f"sqlite:///{tmp_path}/c.db"
    return root, url, write_run(root, url)


def check_values(root: Path, url: str, run_id: int, verify: bool) -> None:
    with sdm.open("packed", "r", root=str(root), catalog=url, run=run_id) as s:
        g = s.group("fields")
        for step in STEPS:
            np.testing.assert_array_equal(g.read("n", step, verify=verify), ids(step))
            assert np.abs(g.read("T", step, verify=verify) - smooth(step)).max() <= 1e-4
            np.testing.assert_array_equal(g["n"][step, 5:19, 3, 1:5], ids(step)[5:19, 3, 1:5])
            assert np.abs(g["T"][step, 7:9, :, 2] - smooth(step)[7:9, :, 2]).max() <= 1e-4


@pytest.fixture
def store(s3_server) -> Iterator[ObjectStore]:
    made = ObjectStore(f"s3://sdm-packed/t-{uuid.uuid4().hex[:8]}", endpoint=s3_server.endpoint)
    made.ensure_bucket()
    yield made


def test_compressed_steps_are_read_from_the_archive_tier_chunk_by_chunk(run, store: ObjectStore, s3_server,
                                                                       monkeypatch) -> None:
    monkeypatch.setenv("SDM_S3_ENDPOINT", s3_server.endpoint)
    root, url, run_id = run
    cat = Catalog(url)
    try:
        tiers.migrate(cat, run_id, store)
        tiers.purge(cat, run_id, "fast")
    finally:
        cat.close()
    assert not list(root.rglob("*.sdm"))  # only the archive holds the bytes now
    check_values(root, url, run_id, verify=True)


def test_xarray_dask_chunks_follow_the_chunks(run) -> None:
    xr = pytest.importorskip("xarray")
    pytest.importorskip("dask")
    root, url, run_id = run
    ds = xr.open_dataset(url, engine="sdm", application="packed", run=run_id, group="fields", chunks={})
    try:
        assert ds["T"].chunks == ((1, 1, 1), (8, 8, 8), (10,), (6,))
        assert ds["n"].chunks == ((1, 1, 1), (8, 8, 8), (10,), (6,))
        assert ds["T"].attrs["sdm_compression"] == "zfp:tolerance=0.0001"
        np.testing.assert_array_equal(ds["n"].isel(step=1).values, ids(1))
        assert float(np.abs(ds["T"].isel(step=2).values - smooth(2)).max()) <= 1e-4
    finally:
        ds.close()


def sdm_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sdm", *args], capture_output=True, text=True, timeout=120,
                          env={"COLUMNS": "160", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(sdm.__file__).parents[1])})


def test_show_and_find_report_what_compression_achieved(run) -> None:
    root, url, run_id = run
    cat = Catalog(url)
    try:
        rows = {(d, w.step): w for _, d, w in cat.writes(run_id)}
    finally:
        cat.close()
    T = [rows["T", s] for s in STEPS]
    n = [rows["n", s] for s in STEPS]
    shown = json.loads(sdm_cli("show", str(run_id), "--catalog", url, "--json").stdout)
    by = {c["dataset"]: c for c in shown["compression"]}
    assert by["fields/T"]["codec"] == "zfp:tolerance=0.0001"
    assert by["fields/T"]["stored_nbytes"] == sum(w.stored_nbytes for w in T)
    assert by["fields/T"]["max_error"] == max(w.max_error for w in T)
    assert by["fields/n"]["ratio"] == pytest.approx(sum(w.nbytes for w in n) / sum(w.stored_nbytes for w in n))
    assert "raw/R" not in by
    assert {d["name"]: d["compression"] for g in shown["groups"] for d in g["datasets"]} == {
        "T": "zfp:tolerance=0.0001", "n": "zstd:1:shuffle", "R": None}
    text = sdm_cli("show", str(run_id), "--catalog", url).stdout
    assert "compression" in text and "zstd:1:shuffle" in text
    ratio_n = sum(w.nbytes for w in n) / sum(w.stored_nbytes for w in n)
    ratio_T = sum(w.nbytes for w in T) / sum(w.stored_nbytes for w in T)
    assert ratio_n > ratio_T > 1  # what the conditions below rely on
    cut = (ratio_n + ratio_T) / 2
    found = json.loads(sdm_cli("find", "--compression", f"ratio>{cut}", "--catalog", url, "--json").stdout)
    assert [[d["name"] for d in r["datasets"]] for r in found["runs"]] == [["n"]]
    found = sdm.find(url, compression=["ratio>1", "max_error>0"])
    assert [[d.name for g in r.groups for d in g.datasets] for r in found] == [["T"]]
    assert sdm.find(url, compression=["codec=lz4:1:noshuffle"]) == []
    bad = sdm_cli("find", "--compression", "speed>1", "--catalog", url)
    assert bad.returncode == 1 and "error: compression condition on 'speed': the keys are ratio" in bad.stderr
