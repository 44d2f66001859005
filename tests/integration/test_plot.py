"""``sdm plot`` and :mod:`sdm.plot`: the PNG is a real, non-blank picture of exactly the numbers asked for."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from mpi4py import MPI

import sdm
from sdm.errors import (
    DatasetNotFoundError,
    GroupNotFoundError,
    InvalidArgumentError,
    RunNotFoundError,
    StepNotFoundError,
)
from sdm.plot import plot_series, plot_slice

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
STEPS = (0, 3, 7, 10)
SHAPE3 = (6, 5, 7)
SHAPE2 = (9, 11)


def _values(step: int) -> dict[str, np.ndarray]:
    """The reference arrays of one step, made from a seed alone (not read back from SDM)."""
    rng = np.random.default_rng(1000 + step)
    return {
        "T": rng.standard_normal(SHAPE3),
        "u": rng.integers(-50, 50, SHAPE2).astype("i4"),
        "line": rng.standard_normal(8),
        "q": rng.standard_normal(SHAPE2),
    }


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, int]:
    """A run with a 3-D, a 2-D and a 1-D dataset at four steps, and ``q`` in two groups; the catalog as a plain path."""
    root = tmp_path_factory.mktemp("plot")
    catalog = str(root / "runs" / "catalog.db")
    with sdm.open("heat", "w", root=root, catalog=catalog, comm=MPI.COMM_SELF,
                  attributes={"case": "plot", "nx": 6}) as s:
        g = s.make_group("fields", ["T"], dtype="f8", shape=SHAPE3)
        g2 = s.make_group("flat", [sdm.Dataset("u", shape=SHAPE2, dtype="i4"), sdm.Dataset("line", shape=(8,)),
                                   sdm.Dataset("q", shape=SHAPE2)], dtype="f8", shape=SHAPE2)
        g3 = s.make_group("other", ["q"], dtype="f8", shape=SHAPE2)
        for step in STEPS:
            v = _values(step)
            g.write("T", step, v["T"])
            g2.write_step(step, {"u": v["u"], "line": v["line"], "q": v["q"]})
            g3.write("q", step, -v["q"])
        run = s.run_id
    return catalog, run


def _check_png(path: Path) -> np.ndarray:
    """A valid PNG of a sane size whose pixels are not all alike; returns its pixels."""
    import matplotlib.image

    raw = path.read_bytes()
    assert raw[:8] == PNG_MAGIC
    assert 5_000 < len(raw) < 200_000
    pixels = matplotlib.image.imread(path)
    assert pixels.shape[:2] == (480, 640)
    rgb = pixels[..., :3].reshape(-1, 3)
    assert len(np.unique(rgb, axis=0)) > 50  # not blank: many colours
    return pixels


@pytest.mark.parametrize("spec, index", [
    (None, (3, slice(None), slice(None))),              # default: the middle of the leading dimension
    (":,2,:", (slice(None), 2, slice(None))),
    ("dim_2=4", (slice(None), slice(None), 4)),         # by name: the two others are left
    ("dim_0=1,dim_1=1:4", (1, slice(1, 4), slice(None))),
    ("-1,::2,1:6:2", (-1, slice(None, None, 2), slice(1, 6, 2))),
])
def test_slice_equals_numpy(written, tmp_path, spec, index):
    catalog, run = written
    out = tmp_path / "slice.png"
    p = plot_slice(run, "T", 7, select=spec, out=out, catalog=catalog)
    want = _values(7)["T"][index]
    assert want.ndim == 2
    np.testing.assert_array_equal(p.data, want)
    assert p.path == out and p.steps == (7,)
    _check_png(out)


def test_slice_title_and_labels(written, tmp_path):
    catalog, run = written
    p = plot_slice(run, "fields/T", 3, select="dim_1=2", out=tmp_path / "t.png", catalog=catalog)
    assert p.title == f"run {run} (heat): fields/T step 3 [dim_1=2]\ncase=plot nx=6"
    assert p.labels == ("dim_0", "dim_2") and p.index == (slice(None), 2, slice(None))
    np.testing.assert_array_equal(p.data, _values(3)["T"][:, 2, :])


def test_two_d_dataset_whole_and_integer_dtype(written, tmp_path):
    catalog, run = written
    p = plot_slice(run, "u", 10, out=tmp_path / "u.png", catalog=catalog)
    np.testing.assert_array_equal(p.data, _values(10)["u"])
    assert p.data.dtype == np.dtype("i4") and p.labels == ("dim_0", "dim_1")
    _check_png(p.path)


def test_group_chooses_between_namesakes(written, tmp_path):
    catalog, run = written
    flat = plot_slice(run, "q", 0, group="flat", out=tmp_path / "a.png", catalog=catalog)
    other = plot_slice(run, "other/q", 0, out=tmp_path / "b.png", catalog=catalog)
    np.testing.assert_array_equal(flat.data, _values(0)["q"])
    np.testing.assert_array_equal(other.data, -_values(0)["q"])
    with pytest.raises(DatasetNotFoundError) as info:
        plot_slice(run, "q", 0, out=tmp_path / "c.png", catalog=catalog)
    assert str(info.value) == (f"dataset 'q' is in groups 'flat', 'other' of run {run}; choose one with --group "
                               "(or write GROUP/q)")


def test_point_series_equals_numpy(written, tmp_path):
    catalog, run = written
    p = plot_series(run, "T", point="1,-1,6", out=tmp_path / "p.png", catalog=catalog)
    assert p.steps == STEPS
    np.testing.assert_array_equal(p.data, [_values(s)["T"][1, 4, 6] for s in STEPS])
    assert p.labels == ("step", "T[dim_0=1, dim_1=4, dim_2=6]")
    _check_png(p.path)


@pytest.mark.parametrize("reduce", ["mean", "min", "max"])
def test_reduction_series_equals_numpy(written, tmp_path, reduce):
    catalog, run = written
    p = plot_series(run, "T", reduce=reduce, out=tmp_path / "r.png", catalog=catalog)
    want = [getattr(np, reduce)(_values(s)["T"]) for s in STEPS]
    np.testing.assert_allclose(p.data, want, rtol=1e-12)
    part = plot_series(run, "u", reduce=reduce, select="2:5,:3", out=tmp_path / "r2.png", catalog=catalog)
    np.testing.assert_allclose(part.data, [getattr(np, reduce)(_values(s)["u"][2:5, :3]) for s in STEPS])
    assert part.labels == ("step", f"{reduce}(u[2:5,:3])") and p.labels == ("step", f"{reduce}(T)")
    _check_png(p.path)


@pytest.mark.parametrize("call, error, message", [
    (lambda r, c, o: plot_slice(r, "T", 5, out=o, catalog=c), StepNotFoundError,
     "dataset fields/T of run {run} was never written at step 5; its steps are 0, 3, 7, 10"),
    (lambda r, c, o: plot_slice(r, "Tx", 3, out=o, catalog=c), DatasetNotFoundError,
     "run {run} has no dataset 'Tx'; its datasets are fields/T, flat/u, flat/line, flat/q, other/q; "
     "did you mean 'T'?"),
    (lambda r, c, o: plot_slice(r, "t", 3, group="fields", out=o, catalog=c), DatasetNotFoundError,
     "group 'fields' of run {run} has no dataset 't'; its datasets are T; did you mean 'T'?"),
    (lambda r, c, o: plot_slice(r, "T", 3, group="feilds", out=o, catalog=c), GroupNotFoundError,
     "run {run} has no group 'feilds'; its groups are fields, flat, other; did you mean 'fields'?"),
    (lambda r, c, o: plot_slice(r + 1, "T", 3, out=o, catalog=c), RunNotFoundError,
     "no run {next} in catalog '{url}'"),
    (lambda r, c, o: plot_slice(r, "T", 3, select="9,:,:", out=o, catalog=c), InvalidArgumentError,
     "slice '9,:,:' does not fit shape 6x5x7: index 9 of dimension dim_0 is outside 0..5"),
    (lambda r, c, o: plot_slice(r, "T", 3, select=":,:,8:", out=o, catalog=c), InvalidArgumentError,
     "slice ':,:,8:' does not fit shape 6x5x7: '8:' selects nothing of dimension dim_2 (length 7)"),
    (lambda r, c, o: plot_slice(r, "T", 3, select="1,2,3,4", out=o, catalog=c), InvalidArgumentError,
     "slice '1,2,3,4' has 4 indices but the dataset has 3 dimension(s) (shape 6x5x7)"),
    (lambda r, c, o: plot_slice(r, "T", 3, select="z=1", out=o, catalog=c), InvalidArgumentError,
     "slice 'z=1': the dataset has no dimension 'z'; its dimensions are dim_0, dim_1, dim_2 "
     "(or give one index per dimension, e.g. '0,:,:')"),
    (lambda r, c, o: plot_slice(r, "T", 3, select="1,2", out=o, catalog=c), InvalidArgumentError,
     "slice '1,2' leaves 1 dimension(s); a 2-D plot needs 2"),
    (lambda r, c, o: plot_slice(r, "line", 3, out=o, catalog=c), InvalidArgumentError,
     "the dataset (shape 8) has 1 dimension(s); a 2-D plot needs 2; plot a time series with --point or --reduce"),
    (lambda r, c, o: plot_series(r, "T", point="1,2", out=o, catalog=c), InvalidArgumentError,
     "point '1,2' has 2 indices but the dataset has 3 dimension(s) (shape 6x5x7)"),
    (lambda r, c, o: plot_series(r, "T", reduce="maxx", out=o, catalog=c), InvalidArgumentError,
     "reduction 'maxx' is not one of mean, min, max; did you mean 'max'?"),
    (lambda r, c, o: plot_series(r, "T", out=o, catalog=c), InvalidArgumentError,
     "a time series needs either a point (--point i,j,...) or a reduction (--reduce mean|min|max), not both"),
])
def test_bad_input_is_refused_exactly(written, tmp_path, call, error, message):
    catalog, run = written
    out = tmp_path / "never.png"
    with pytest.raises(error) as info:
        call(run, catalog, out)
    url = f"sqlite:///{Path(catalog).resolve()}"
    assert str(info.value) == message.format(run=run, next=run + 1, url=url)
    assert not out.exists()


def _sdm(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python -m sdm ARGS`` in *cwd*, importing the same sdm as the tests."""
    env = dict(os.environ, PYTHONPATH=str(Path(sdm.__file__).resolve().parents[1]))
    return subprocess.run([sys.executable, "-m", "sdm", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)


def test_cli_writes_the_png_and_reports_errors_on_one_line(written, tmp_path):
    catalog, run = written
    out = _sdm("plot", str(run), "T", "--step", "3", "--slice", ":,1,:", "--catalog", catalog, "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["shape"] == [6, 7] and doc["steps"] == [3] and doc["labels"] == ["dim_0", "dim_2"]
    _check_png(Path(doc["path"]))
    assert Path(doc["path"]) == tmp_path / f"run{run}-fields-T-step3-dim_1=1.png"
    series = _sdm("plot", str(run), "u", "--point", "0,0", "--catalog", catalog, "--json", "--out", "s.png",
                  cwd=tmp_path)
    assert series.returncode == 0, series.stderr
    assert json.loads(series.stdout)["values"] == [int(_values(s)["u"][0, 0]) for s in STEPS]
    _check_png(tmp_path / "s.png")
    bad = _sdm("plot", str(run), "T", "--step", "4", "--catalog", catalog, cwd=tmp_path)
    assert bad.returncode == 1
    assert bad.stderr == f"error: dataset fields/T of run {run} was never written at step 4; its steps are 0, 3, 7, " \
                         "10\n"
    usage = _sdm("plot", str(run), "T", "--catalog", catalog, cwd=tmp_path)
    assert usage.returncode == 2 and "give --step K" in usage.stderr


def _in_process(*args: str):
    """``sdm ARGS`` in this process (in the current directory), as typed."""
    from typer.testing import CliRunner

    from sdm._cli.main import app

    return CliRunner().invoke(app, list(args), env={"COLUMNS": None})


@pytest.mark.parametrize("args, name", [
    (("T", "--step", "3"), "run{run}-fields-T-step3-dim_0=3.png"),             # the default: the middle plane
    (("T", "--step", "3", "--slice", "dim_2=4"), "run{run}-fields-T-step3-dim_2=4.png"),
    (("T", "--step", "7", "--slice", "1,1:4"), "run{run}-fields-T-step7-dim_0=1,dim_1=1-3.png"),
    (("T", "--step", "7", "--slice", "-1,::2"), "run{run}-fields-T-step7-dim_0=5,dim_1=0-4by2.png"),
    (("u", "--step", "0"), "run{run}-flat-u-step0.png"),                       # 2-D: the whole step
    (("T", "--point", "1,-1,6"), "run{run}-fields-T-point1,4,6.png"),
    (("T", "--reduce", "max"), "run{run}-fields-T-max.png"),
    (("u", "--reduce", "mean", "--slice", "2:5,:3"), "run{run}-flat-u-mean-dim_0=2-4,dim_1=0-2.png"),
])
def test_default_names_say_what_is_plotted(written, tmp_path, monkeypatch, args, name):
    catalog, run = written
    monkeypatch.chdir(tmp_path)
    out = _in_process("plot", str(run), *args, "--catalog", catalog)
    assert out.exit_code == 0, out.stderr
    assert [p.name for p in tmp_path.iterdir()] == [name.format(run=run)]
    assert out.stdout.startswith(f"wrote {name.format(run=run)} (")


def test_an_existing_picture_is_kept_unless_overwrite(written, tmp_path, monkeypatch):
    catalog, run = written
    monkeypatch.chdir(tmp_path)
    first = _in_process("plot", "latest", "T", "--step", "3", "--catalog", catalog)  # `latest`: the newest run
    assert first.exit_code == 0, first.stderr
    (picture,) = tmp_path.iterdir()
    kept = picture.read_bytes()
    for again in (("T", "--step", "7", "--out", picture.name), ("T", "--step", "3")):
        refused = _in_process("plot", str(run), *again, "--catalog", catalog)
        assert (refused.exit_code, refused.stdout) == (1, "")
        assert refused.stderr == (f"error: {picture.name} already exists; pass --overwrite (overwrite=True) to replace "
                                  "it, or name another file with --out\n")
        assert picture.read_bytes() == kept and list(tmp_path.iterdir()) == [picture]  # nothing else left either
    with pytest.raises(InvalidArgumentError) as info:
        plot_series(run, "T", reduce="mean", out=picture, catalog=catalog)
    assert str(info.value).startswith(f"{picture} already exists") and picture.read_bytes() == kept
    replaced = _in_process("plot", str(run), "T", "--step", "7", "--out", picture.name, "--overwrite", "--json",
                           "--catalog", catalog)
    assert replaced.exit_code == 0, replaced.stderr
    assert json.loads(replaced.stdout)["steps"] == [7] and picture.read_bytes() != kept
    assert list(tmp_path.iterdir()) == [picture]  # no temporary file left beside it
    _check_png(picture)
