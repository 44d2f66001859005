"""``sdm export`` / ``sdm import``: runs to HDF5, NetCDF-4 and Zarr v3, read back by the real tools.

Two runs are written by ``_export_job.py`` under ``mpiexec`` (1 rank; 3 ranks with a
ranked dataset), both with a :class:`sdm.MapArray` dataset and a dataset that lacks
some steps. Each is exported to every format and read back by ``h5dump`` (Debian's
hdf5-tools), ``ncdump`` (netcdf-bin), ``zarr.open`` and ``xarray.open_dataset`` with the
h5netcdf, netcdf4 and zarr engines; every value must equal the numpy reference of the
job and SDM's own serial read. Then each export is imported into a new run and read
back through SDM; every bad input is refused with its exact message and leaves nothing.
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import sdm
from sdm import export

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import _export_job as job  # noqa: E402
import readers  # noqa: E402
from test_rebuild import cli, mpi  # noqa: E402

FORMATS = {"hdf5": "h5", "netcdf": "nc", "zarr": "zarr"}
ARRAYS = {"fields": ["T", "n"], "mesh": ["x"]}
STEPS = {"fields": [0, 1, 2, 3, 4], "mesh": [0, 1]}


@pytest.fixture(scope="module", autouse=True)
def tools() -> None:
    readers.install()


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The catalog, the data root and the run ids written on 1 and 3 ranks."""
    root = tmp_path_factory.mktemp("export-runs")
    url = f"sqlite:///{root}/catalog.db"
    ids = {}
    for ranks in (1, 3):
        out = mpi(ranks, "write", str(root), url, *(["ranked"] if ranks == 3 else []), job="_export_job.py")
        ids[ranks] = int(re.search(r"RUN (\d+)", out).group(1))  # type: ignore[union-attr]
    return {"root": root, "url": url, "ids": ids}


def expected(group: str, name: str) -> np.ndarray:
    """The ``(steps, *shape)`` array an export must hold: the references, the fill value where a step is missing."""
    out = []
    for step in STEPS[group]:
        ref = job.reference(name, 0)
        if step in job.STEPS[name]:
            out.append(job.reference(name, step))
        else:
            out.append(np.full(ref.shape, np.nan if ref.dtype.kind == "f" else 0, ref.dtype))
    return np.stack(out)


def sdm_reads(url: str, run: int) -> dict[tuple[str, str, int], np.ndarray]:
    """Every step of every dataset as SDM reads it in this (serial) process."""
    out = {}
    with sdm.open("exported", "r", catalog=url, run=run) as s:
        for group in s.groups:
            g = s.group(group)
            for name in g.datasets:
                for step in g.steps(name):
                    out[group, name, step] = g.read(name, step)
    return out


def h5dump(path: Path, dataset: str) -> tuple[tuple[int, ...], np.ndarray]:
    """Shape and values of *dataset* as ``h5dump`` prints them."""
    text = subprocess.run(["h5dump", "-y", "-w", "0", "-m", "%.17g", "-d", dataset, str(path)], check=True,
                          capture_output=True, text=True).stdout
    shape = tuple(int(n) for n in re.search(r"DATASPACE\s+SIMPLE \{ \( ([\d, ]+) \)", text).group(1).split(","))  # type: ignore[union-attr]
    data = re.search(r"DATA \{(.*?)\}", text, re.S).group(1)  # type: ignore[union-attr]
    return shape, np.array([float(v) for v in data.replace(",", " ").split()])


def ncdump(path: Path, group: str | None, name: str) -> tuple[tuple[int, ...], np.ndarray]:
    """Shape (from the dimensions) and values of variable *name* as ``ncdump`` prints them."""
    text = subprocess.run(["ncdump", "-p", "9,17", str(path)], check=True, capture_output=True, text=True).stdout
    if group is not None:
        text = re.search(rf"group: {group} \{{(.*?)\}} // group {group}", text, re.S).group(1)  # type: ignore[union-attr]
    dims = {}
    for m in re.finditer(r"^\s+(\w+) = (?:(\d+)|UNLIMITED ; // \((\d+) currently\))",
                         text.split("variables:", 1)[0], re.M):
        dims[m.group(1)] = int(m.group(2) or m.group(3))
    decl = re.search(rf"^\s+\w+ {name}\(([\w, ]+)\) ;", text, re.M).group(1)  # type: ignore[union-attr]
    shape = tuple(dims[d.strip()] for d in decl.split(","))
    data = re.search(rf"^\s*{name} =\s*(.*?);", text.split("data:", 1)[1], re.S | re.M).group(1)  # type: ignore[union-attr]
    return shape, np.array([float(v) for v in data.replace(",", " ").split()])


def same(got: Any, want: Any) -> None:
    np.testing.assert_array_equal(np.asarray(got, dtype=np.float64).ravel(), np.asarray(want, np.float64).ravel())


@pytest.mark.parametrize("ranks", [1, 3])
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_export_read_by_real_tools(runs: dict[str, Any], tmp_path: Path, fmt: str, ranks: int) -> None:
    import xarray as xr
    import zarr

    run = runs["ids"][ranks]
    out = tmp_path / f"run.{FORMATS[fmt]}"
    report = export(run, format=fmt, out=out, catalog=runs["url"], compression=ranks == 3)
    assert report.steps == 5 + 3 + 2 + (2 if ranks == 3 else 0)
    assert sorted(p.name for p in tmp_path.iterdir()) == [out.name]
    assert any("fields/n: steps [1, 3] are missing" in n for n in report.notes)
    reads = sdm_reads(runs["url"], run)
    for group, names in ARRAYS.items():
        for name in names:
            want = expected(group, name)
            for step in job.STEPS[name]:  # SDM's read is the reference too
                same(reads[group, name, step], want[STEPS[group].index(step)])
            if fmt == "hdf5":
                shape, values = h5dump(out, f"/{group}/{name}")
                assert shape == want.shape
                same(values, want)
                same(h5dump(out, f"/{group}/step")[1], STEPS[group])
            elif fmt == "netcdf":
                shape, values = ncdump(out, group, name)
                assert shape == want.shape
                same(values, want)
                same(ncdump(out, group, "step")[1], STEPS[group])
            else:
                arr = zarr.open_array(str(out), path=f"{group}/{name}", mode="r")
                assert arr.shape == want.shape and arr.dtype == want.dtype
                assert arr.metadata.dimension_names[0] == "step"  # type: ignore[union-attr,index]
                assert arr.shards == (1, *want.shape[1:]) and arr.chunks[0] == 1
                same(arr[...], want)
                assert arr.attrs["sdm_dataset"] == name
            engines = {"hdf5": ["h5netcdf"], "netcdf": ["netcdf4", "h5netcdf"], "zarr": ["zarr"]}[fmt]
            for engine in engines:
                with xr.open_dataset(out, engine=engine, group=group) as ds:
                    var = ds[name]
                    assert var.dims[0] == "step" and var.shape == want.shape
                    same(ds["step"].values, STEPS[group])
                    same(var.values, want)
                    assert var.attrs["units" if group == "fields" else "sdm_dataset"] == (
                        "K" if group == "fields" else name)
    if ranks == 3:  # the ranked dataset: one (rows, 2) array per step in sub-group parts/p
        for step in (0, 1):
            want = job.reference("p", step, 3)
            same(reads["parts", "p", step], want)
            if fmt == "hdf5":
                assert h5dump(out, f"/parts/p/step_{step}")[0] == want.shape
            elif fmt == "zarr":
                same(zarr.open_array(str(out), path=f"parts/p/step_{step}", mode="r")[...], want)
            else:
                with xr.open_dataset(out, engine="netcdf4", group="parts/p") as ds:
                    same(ds[f"step_{step}"].values, want)


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_flat_group_and_steps(runs: dict[str, Any], tmp_path: Path, fmt: str) -> None:
    import xarray as xr

    out = tmp_path / f"flat.{FORMATS[fmt]}"
    r = cli("export", str(runs["ids"][1]), "--format", fmt, "--out", str(out), "--group", "fields", "--steps", "1:5:2",
            "--catalog", runs["url"], "--json")
    assert r.exit_code == 0, r.output
    engine = {"hdf5": "h5netcdf", "netcdf": "netcdf4", "zarr": "zarr"}[fmt]
    with xr.open_dataset(out, engine=engine) as ds:  # flat: the root
        same(ds["step"].values, [1, 3])
        same(ds["T"].values, np.stack([job.reference("T", 1), job.reference("T", 3)]))
        assert ds.attrs["case"] == "demo" and ds.attrs["sdm_group"] == "fields"
        assert "n" not in ds  # no step of n in 1:5:2


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_round_trip(runs: dict[str, Any], tmp_path: Path, fmt: str) -> None:
    run = runs["ids"][3]
    out = tmp_path / f"run.{FORMATS[fmt]}"
    export(run, format=fmt, out=out, catalog=runs["url"])
    url = f"sqlite:///{tmp_path}/back.db"
    r = cli("import", str(out), "--format", fmt, "--application", "back", "--root", str(tmp_path / "data"),
            "--catalog", url, "--json")
    assert r.exit_code == 0, r.output
    assert "parts/p: a sub-group, not imported" in r.output
    original = sdm_reads(runs["url"], run)
    with sdm.open("back", "r", catalog=url) as s:
        assert s.run.attributes["case"] == "demo" and s.run.attributes["nx"] == 6
        for group, names in ARRAYS.items():
            g = s.group(group)
            for name in names:
                assert g.steps(name) == job.STEPS[name]  # missing steps stay missing
                for step in job.STEPS[name]:
                    got = g.read(name, step)
                    assert got.dtype == original[group, name, step].dtype
                    np.testing.assert_array_equal(got, original[group, name, step])
        assert s.group("fields").dataset("T").attributes["units"] == "K"


def bad_cases(runs: dict[str, Any], out: Path) -> list[tuple[list[str], str]]:
    run, url = str(runs["ids"][1]), runs["url"]
    return [
        (["export", "999", "-f", "hdf5", "-o", str(out), "-c", url], f"no run 999 in catalog {url!r}"),
        (["export", run, "-f", "hdf4", "-o", str(out), "-c", url],
         "unknown format 'hdf4'; choose one of hdf5, netcdf, zarr, exodus, references, icechunk"),
        (["export", run, "-f", "zarr", "-o", str(out), "--group", "nope", "-c", url],
         f"run {run} has no group 'nope'; its groups are ['fields', 'mesh']"),
        (["export", run, "-f", "netcdf", "-o", str(out), "--steps", "3-4", "-c", url],
         "bad steps '3-4': write START:STOP[:STRIDE] (STOP excluded), START:, :STOP or one step K, with integers "
         ">= 0 and STRIDE >= 1"),
        (["export", run, "-f", "netcdf", "-o", str(out), "--steps", "7:", "-c", url],
         f"run {run} has no step in steps '7:'; `sdm show {run}` lists its steps"),
        (["export", run, "-f", "hdf5", "-c", url],
         "sdm export needs --format hdf5|netcdf|zarr|exodus|references|icechunk and --out PATH"),
        (["import", str(out), "-f", "hdf5", "--app", "x", "-c", url], f"cannot import {out}: no such file or directory"),
        (["import", str(out), "-f", "csv", "--app", "x", "-c", url], "unknown format 'csv'; choose one of hdf5, netcdf, zarr, exodus"),
    ]


def test_bad_input_refused_and_nothing_left(runs: dict[str, Any], tmp_path: Path) -> None:
    out = tmp_path / "out.h5"
    for args, message in bad_cases(runs, out):
        r = cli(*args)
        assert r.exit_code == 1, (args, r.output)
        assert r.output.strip() == f"error: {message}", args
        assert list(tmp_path.iterdir()) == [], args
    out.write_text("keep")  # an existing output: refused unless --overwrite
    r = cli("export", str(runs["ids"][1]), "-f", "hdf5", "-o", str(out), "-c", runs["url"])
    assert r.output.strip() == f"error: {out} already exists; pass --overwrite (overwrite=True) to replace it"
    assert out.read_text() == "keep" and len(list(tmp_path.iterdir())) == 1
    r = cli("export", str(runs["ids"][1]), "-f", "hdf5", "-o", str(out), "-c", runs["url"], "--overwrite")
    assert r.exit_code == 0, r.output
    assert h5dump(out, "/mesh/x")[0] == (2, 9, 2) and len(list(tmp_path.iterdir())) == 1


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_failure_midway_leaves_nothing(runs: dict[str, Any], tmp_path: Path, fmt: str) -> None:
    out = tmp_path / f"run.{FORMATS[fmt]}"
    out.mkdir() if fmt == "zarr" else out.write_bytes(b"old")
    calls = []

    def progress(done: int, total: int) -> None:
        calls.append(done)
        if len(calls) == 4:
            raise KeyboardInterrupt("stopped")

    with pytest.raises(KeyboardInterrupt):
        export(runs["ids"][1], format=fmt, out=out, catalog=runs["url"], overwrite=True, progress=progress)
    assert [p.name for p in tmp_path.iterdir()] == [out.name]  # the old output, untouched
    assert (out.is_dir() and not list(out.iterdir())) if fmt == "zarr" else out.read_bytes() == b"old"
    assert math.isclose(calls[-1], 4 * 30 * 8)  # T's first four steps were written


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_a_subfiled_run_exports_like_any_other(tmp_path: Path, fmt: str) -> None:
    """A group whose steps are cut into extents in 3 subfiles exports to what h5dump, ncdump and zarr read back."""
    import zarr

    url, shape = f"sqlite:///{tmp_path}/c.db", (9, 4)
    want = np.stack([np.arange(36, dtype="<f8").reshape(shape) + 100 * step for step in (0, 1)])
    with sdm.open("exported", root=str(tmp_path / "root"), catalog=url) as s:
        g = s.make_group("sub", ["T"], dtype="<f8", shape=shape, subfiles=3)
        for step in (0, 1):
            g.write("T", step, want[step])
        run = s.run_id
    out = tmp_path / f"run.{FORMATS[fmt]}"
    export(run, format=fmt, out=out, catalog=url)
    if fmt == "hdf5":
        got_shape, values = h5dump(out, "/sub/T")
    elif fmt == "netcdf":
        got_shape, values = ncdump(out, "sub", "T")
    else:
        arr = zarr.open_array(str(out), path="sub/T", mode="r")
        got_shape, values = arr.shape, arr[...]
    assert got_shape == want.shape
    same(values, want)
