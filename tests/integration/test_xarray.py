"""The xarray backend (``engine="sdm"``) against numpy references and against the NetCDF export read by xarray."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import sdm
from sdm.errors import AmbiguousRunError, InvalidArgumentError, RunNotFoundError

SHAPE = (5, 6)
X = np.linspace(0.0, 1.0, SHAPE[1])


def field(name: str, step: int, dtype: str) -> np.ndarray:
    return (np.arange(np.prod(SHAPE)).reshape(SHAPE) * (step + 1) + 100 * len(name)).astype(dtype)


def write(root: Path, case: str, nx: int) -> int:
    with sdm.open("heat", root=str(root), catalog=f"sqlite:///{root}/catalog.db",
                  attributes={"case": case, "nx": nx}) as s:
        g = s.make_group("fields", [sdm.Dataset("T", dtype="<f8"), sdm.Dataset("P", dtype=">i4", order="F")],
                         shape=SHAPE, dims=("y", "x"), coords={"x": X}, attributes={"units": "K"})
        for step in (0, 5, 10):
            g.write("T", step, field("T", step, "<f8"))
            if step != 5:  # P lacks step 5
                g.write("P", step, np.asfortranarray(field("P", step, ">i4")))
        s.make_group("other", ["Q"], dtype="<f4", shape=(3,)).write("Q", 0, np.ones(3, "<f4"))
        return s.run_id


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "data"


def test_a_run_opens_lazily_with_dims_coords_and_attributes(root: Path) -> None:
    run = write(root, "demo", 6)
    with xr.open_dataset(root, engine="sdm", application="heat", where=["case=demo"], group="fields") as ds:
        assert ds["T"].dims == ("step", "y", "x") and ds["T"].shape == (3, *SHAPE)
        assert ds["step"].values.tolist() == [0, 5, 10]
        np.testing.assert_array_equal(ds["x"].values, X)
        assert ds["T"].attrs["units"] == "K" and ds.attrs["case"] == "demo" and ds.attrs["sdm_run"] == run
        np.testing.assert_array_equal(ds["T"].sel(step=10).values, field("T", 10, "<f8"))
        np.testing.assert_array_equal(ds["T"].isel(step=slice(None), y=2, x=3).values,
                                      [field("T", s, "<f8")[2, 3] for s in (0, 5, 10)])
        np.testing.assert_array_equal(ds["P"].isel(step=[0, 2]).values,
                                      np.stack([field("P", s, ">i4") for s in (0, 10)]))
        assert (ds["P"].sel(step=5).values == 0).all()  # a step P lacks: 0 for integers
    with xr.open_dataset(str(root / "catalog.db"), engine="sdm", run=run, group="fields",
                         chunks={"step": 1}) as ds:  # dask
        assert ds["T"].chunks[0] == (1, 1, 1)
        assert float(ds["T"].sum().compute()) == sum(field("T", s, "<f8").sum() for s in (0, 5, 10))


def test_the_backend_equals_the_netcdf_export_read_by_xarray(root: Path, tmp_path: Path) -> None:
    run = write(root, "demo", 6)
    sdm.export(run, format="netcdf", out=tmp_path / "run.nc", catalog=f"sqlite:///{root}/catalog.db",
               group="fields")
    with xr.open_dataset(root, engine="sdm", run=run, group="fields") as ours, \
            xr.open_dataset(tmp_path / "run.nc", engine="netcdf4") as theirs:
        for name in ("T", "P"):
            mine, other = ours[name], theirs[name]
            assert mine.dims == other.dims
            present = [0, 2] if name == "P" else [0, 1, 2]  # the export fills a missing step its own way
            np.testing.assert_array_equal(mine.isel(step=present).values, other.isel(step=present).values)
        np.testing.assert_array_equal(ours["step"].values, theirs["step"].values)


def test_runs_concatenate_along_run_and_bad_selections_are_refused(root: Path) -> None:
    a, b = write(root, "demo", 6), write(root, "demo", 7)
    with sdm.xarray.open_runs(root, application="heat", where={"case": "demo"}, group="fields") as ds:
        assert ds["run"].values.tolist() == [b, a] and ds["T"].shape == (2, 3, *SHAPE)  # newest first, as sdm.find
        np.testing.assert_array_equal(ds["T"].sel(run=b, step=5).values, field("T", 5, "<f8"))
    with pytest.raises(AmbiguousRunError) as err:  # the rule of sdm.open: several matches are listed, not guessed
        xr.open_dataset(root, engine="sdm", application="heat", where=["case=demo"], group="fields")
    assert isinstance(err.value, InvalidArgumentError)
    assert re.fullmatch(
        rf"2 runs of 'heat' match case='demo', newest first: run {b} \(created [0-9: -]+ UTC, case='demo', nx=7\); "
        rf"run {a} \(created [0-9: -]+ UTC, case='demo', nx=6\); pass run=ID to choose one, or run='latest' for "
        r"the newest, or sdm.xarray.open_runs to concatenate them along 'run'", str(err.value)), str(err.value)
    for run, want in (("latest", b), (a, a)):
        with xr.open_dataset(root, engine="sdm", application="heat", where=["case=demo"], run=run,
                             group="fields") as ds:
            assert ds.attrs["sdm_run"] == want and ds.attrs["nx"] == (7 if want == b else 6)
            np.testing.assert_array_equal(ds["T"].sel(step=10).values, field("T", 10, "<f8"))
    with pytest.raises(InvalidArgumentError) as err:
        xr.open_dataset(root, engine="sdm", run=a)
    assert str(err.value) == f"run {a} has groups ['fields', 'other']; choose one with group="
    with pytest.raises(RunNotFoundError) as missing:
        xr.open_dataset(root, engine="sdm", application="heat", where=["case=nope"])
    assert str(missing.value) == ("no run of 'heat' has case='nope'; `sdm ls` lists the runs and `sdm show RUN` "
                                  "their attributes")
    with pytest.raises(InvalidArgumentError) as err:
        xr.open_dataset(root / "nothing", engine="sdm", run=a)
    assert str(err.value) == (f"{str(root / 'nothing')!r} is neither a catalog URL, an SQLite catalog file nor a "
                              "data root holding catalog.db")
