"""Exports of compressed runs: each format's nearest codec, read back by the real readers.

One run (one process) holds a dataset per codec: ``T`` (float64, ``zfp:tolerance=0.001``),
``Z`` (float64, ``zfp:rate=8``), ``S`` (float64, ``sz3:absolute=0.001``), ``I`` (int32,
``zstd:5:shuffle``), ``B`` (int32, ``blosc2:lz4:5:bitshuffle``), ``L`` (float32,
``lz4:1:noshuffle``) and ``R`` (int32, raw). Each export is read back with h5py (and
``import hdf5plugin``), netCDF4 and zarr, and compared with the numpy arrays built here:
lossless values equal, lossy ones within their bound of the originals (measured with
numpy). The codec each format got is read from the file (h5py ``_filters``, netCDF4
``filters()``, zarr ``metadata.codecs``; ``h5dump -pH`` and ``ncdump -hs``); then the
override (``--compression none``, ``--compression zstd:5``), a refused spec (its message,
no output), and the round trip export -> import keeping the codecs.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import sdm

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from test_rebuild import cli  # noqa: E402

EXT = {"hdf5": "h5", "netcdf": "nc", "zarr": "zarr"}
SPECS = {"T": "zfp:tolerance=0.001", "Z": "zfp:rate=8", "S": "sz3:absolute=0.001", "I": "zstd:5:shuffle",
         "B": "blosc2:lz4:5:bitshuffle", "L": "lz4:1:noshuffle", "R": None}
SHAPES = {"T": (64, 40), "Z": (64, 40), "S": (32, 20), "I": (20, 10), "B": (20, 10), "L": (16, 8), "R": (20, 10)}
DTYPES = {"T": "<f8", "Z": "<f8", "S": "<f8", "I": "<i4", "B": "<i4", "L": "<f4", "R": "<i4"}
STEPS = (0, 1, 2)
BOUND = {"T": 0.001, "S": 0.001}


def reference(name: str, step: int) -> np.ndarray:
    """The values written for *name* at *step* (numpy only)."""
    shape, dtype = SHAPES[name], np.dtype(DTYPES[name])
    if dtype.kind == "f":
        y, x = np.meshgrid(np.linspace(0, 3, shape[0]), np.linspace(0, 2, shape[1]), indexing="ij")
        return (np.sin(x * (step + 1)) * np.cos(y) * 10 + step).astype(dtype)
    return ((np.arange(np.prod(shape)) % 97) * (step + 1)).reshape(shape).astype(dtype)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("compressed-runs")
    url = f"sqlite:///{root}/catalog.db"
    with sdm.open("packed", "w", root=str(root / "data"), catalog=url) as s:
        g = s.make_group("f", [sdm.Dataset(n, shape=SHAPES[n], dtype=DTYPES[n], compression=SPECS[n] or "none")
                               for n in SPECS], compression="zstd:1:shuffle")
        for step in STEPS:
            for n in SPECS:
                g.write(n, step, reference(n, step))
        rid = s.run_id
    return {"url": url, "run": rid, "root": root}


def stacked(name: str) -> np.ndarray:
    return np.stack([reference(name, k) for k in STEPS])


def check_values(name: str, got: np.ndarray, attrs: dict[str, Any]) -> None:
    """Lossless: equal to the references; lossy: within the bound (or, for a rate, the errors recorded)."""
    want = stacked(name)
    assert got.shape == want.shape and got.dtype == want.dtype, name
    spec = SPECS[name]
    if spec is None or not spec.startswith(("zfp", "sz3")):
        np.testing.assert_array_equal(got, want, err_msg=name)
        return
    error = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64))))
    assert error > 0 or name != "Z", name  # rate 8 on float64 is lossy
    assert float(attrs["sdm_max_error"]) <= error + float(attrs.get("sdm_export_max_error", 0.0)) + 1e-12
    if name in BOUND:
        assert error <= BOUND[name], (name, error)
        assert float(attrs["sdm_bound"]) == BOUND[name] and attrs["sdm_bound_kind"] == "absolute"
    else:  # a rate bounds no error: what the run and the export measured bounds it
        assert error <= float(attrs["sdm_max_error"]) + float(attrs.get("sdm_export_max_error", 0.0)) + 1e-12


def _str(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def test_hdf5_gets_hdf5plugin_filters(run: dict[str, Any], tmp_path: Path) -> None:
    import h5py
    import hdf5plugin  # noqa: F401  (the filters a reader needs)

    out = tmp_path / "run.h5"
    sdm.export(run["run"], format="hdf5", out=out, catalog=run["url"])
    want_filters = {"T": "32013", "Z": "32013", "S": "32024", "I": "32015", "B": "32026", "L": "32004"}
    with h5py.File(out, "r") as f:
        for name in SPECS:
            ds = f["f"][name]
            attrs = dict(ds.attrs)
            filters = dict(ds._filters)
            check_values(name, ds[()], attrs)
            if SPECS[name] is None:
                assert filters == {} and "sdm_compression" not in attrs
                assert ds.chunks == (1, *SHAPES[name])  # unchanged for raw datasets
                continue
            assert _str(attrs["sdm_compression"]) == SPECS[name]
            assert want_filters[name] in filters, (name, filters)
            assert ds.chunks is not None and ds.chunks[0] == 1
        assert dict(f["f/I"]._filters) == {"shuffle": (4,), "32015": (5,)}
        assert f["f/B"]._filters["32026"][4:7] == (5, 2, 1)  # level 5, bitshuffle, lz4
        assert float(f["f/T"].attrs["sdm_export_bound"]) <= 0.001 - float(f["f/T"].attrs["sdm_max_error"]) + 1e-15
    if shutil.which("h5dump"):
        text = subprocess.run(["h5dump", "-pH", str(out)], check=True, capture_output=True, text=True).stdout
        for fid in ("32013", "32024", "32015", "32026", "32004"):
            assert f"FILTER_ID {fid}" in text


def test_netcdf_gets_zstd_blosc_and_zlib(run: dict[str, Any], tmp_path: Path) -> None:
    import netCDF4

    out = tmp_path / "run.nc"
    report = sdm.export(run["run"], format="netcdf", out=out, catalog=run["url"])
    assert any(n.startswith("f/T: zfp:tolerance=0.001: NetCDF-4 has no lossy codec") for n in report.notes)
    with netCDF4.Dataset(out) as f:
        f.set_auto_mask(False)
        for name in SPECS:
            var = f["f"][name]
            attrs = {k: var.getncattr(k) for k in var.ncattrs()}
            got = var[...]
            filters = var.filters()
            if SPECS[name] is None:
                assert not any(filters[k] for k in ("zlib", "zstd", "blosc", "shuffle"))
                np.testing.assert_array_equal(got, stacked(name))
                continue
            assert attrs["sdm_compression"] == SPECS[name]
            if name in ("T", "Z", "S"):  # the values SDM reads, stored losslessly
                assert filters["zlib"] and filters["shuffle"] and "sdm_export_note" in attrs
                sdm_values = np.stack([_sdm_read(run, name, k) for k in STEPS])
                np.testing.assert_array_equal(got, sdm_values)
                check_values(name, got, attrs)
                continue
            check_values(name, got, attrs)
        zstd = f["f/I"].filters()
        if netCDF4.__has_zstandard_support__:
            assert zstd["zstd"] and zstd["complevel"] == 5 and not zstd["shuffle"]  # netCDF4: shuffle with zlib only
            assert "without shuffle" in f["f/I"].getncattr("sdm_export_note")
            b, lz = f["f/B"].filters(), f["f/L"].filters()  # no blosc: netCDF-C's fails on incompressible chunks
            assert b["zstd"] and b["complevel"] == 5 and not b["blosc"]
            assert lz["zstd"] and lz["complevel"] == 1 and not lz["shuffle"]
    if shutil.which("ncdump") and netCDF4.__has_zstandard_support__:
        text = subprocess.run(["ncdump", "-hs", str(out)], check=True, capture_output=True, text=True).stdout
        assert 'I:_Filter = "32015,5"' in text and "T:_DeflateLevel = 4" in text


def _sdm_read(run: dict[str, Any], name: str, step: int) -> np.ndarray:
    with sdm.open("packed", "r", catalog=run["url"], run=run["run"]) as s:
        return s.group("f").read(name, step)


def test_zarr_gets_its_own_codecs(run: dict[str, Any], tmp_path: Path) -> None:
    import zarr
    from zarr.codecs import BloscCodec, ShardingCodec, ZstdCodec

    out = tmp_path / "run.zarr"
    sdm.export(run["run"], format="zarr", out=out, catalog=run["url"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # numcodecs' codecs "not in the Zarr v3 specification"
        for name in SPECS:
            arr = zarr.open_array(str(out), path=f"f/{name}", mode="r")
            check_values(name, arr[...], dict(arr.attrs))
            (shard,) = arr.metadata.codecs  # type: ignore[union-attr]
            assert isinstance(shard, ShardingCodec)
            inner = list(shard.codecs)
            names = [getattr(c, "codec_name", type(c).__name__) for c in inner]
            if name in ("T", "Z"):
                assert names == ["numcodecs.zfpy"], names
            elif name == "S":  # no SZ3 codec: the values SDM reads, zstd
                assert isinstance(inner[-1], ZstdCodec) and "sdm_export_note" in arr.attrs
            elif name == "I":
                assert names[1:] == ["numcodecs.shuffle", "ZstdCodec"] and inner[-1].level == 5
            elif name == "B":
                assert isinstance(inner[-1], BloscCodec) and inner[-1].cname.value == "lz4"
                assert inner[-1].shuffle.value == "bitshuffle" and inner[-1].clevel == 5
            elif name == "L":
                assert names[1:] == ["numcodecs.lz4"]
            else:
                assert names == ["BytesCodec"] and "sdm_compression" not in arr.attrs
        t = zarr.open_array(str(out), path="f/T", mode="r")
        assert t.metadata.codecs[0].codecs[0].codec_config["mode"] == 4  # type: ignore[union-attr]


@pytest.mark.parametrize("fmt", list(EXT))
def test_override_none_and_zstd(run: dict[str, Any], tmp_path: Path, fmt: str) -> None:
    import h5py
    import netCDF4
    import zarr

    for spec in ("none", "zstd:5"):
        out = tmp_path / f"{spec.replace(':', '')}.{EXT[fmt]}"
        r = cli("export", str(run["run"]), "-f", fmt, "-o", str(out), "-c", run["url"], "--compression", spec)
        assert r.exit_code == 0, r.output
        for name in ("I", "T", "R"):
            if fmt == "hdf5":
                with h5py.File(out, "r") as f:
                    filters = dict(f["f"][name]._filters)
                    got, attrs = f["f"][name][()], dict(f["f"][name].attrs)
                assert filters == ({} if spec == "none" else {"32015": (5,)}), (name, filters)
            elif fmt == "netcdf":
                with netCDF4.Dataset(out) as f:
                    v = f["f"][name]
                    v.set_auto_maskandscale(False)
                    fl, got, attrs = v.filters(), v[...], {k: v.getncattr(k) for k in v.ncattrs()}
                if spec == "none":
                    assert not any(fl[k] for k in ("zlib", "zstd", "blosc"))
                elif netCDF4.__has_zstandard_support__:
                    assert fl["zstd"] and fl["complevel"] == 5 and not fl["shuffle"]
            else:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", UserWarning)
                    arr = zarr.open_array(str(out), path=f"f/{name}", mode="r")
                    got, attrs = arr[...], dict(arr.attrs)
                    inner = list(arr.metadata.codecs[0].codecs)  # type: ignore[union-attr]
                assert [type(c).__name__ for c in inner] == (["BytesCodec"] if spec == "none" else
                                                            ["BytesCodec", "ZstdCodec"])
                assert spec == "none" or inner[-1].level == 5
            check_values(name, np.asarray(got), attrs)  # T: SDM's zfp values, kept exactly by zstd
            if name == "R" and spec == "none":
                assert "sdm_export_compression" not in attrs
            elif name != "R":
                assert attrs["sdm_export_compression"] == ("none" if spec == "none" else "zstd:5:noshuffle")


@pytest.mark.parametrize(("spec", "message"), [
    ("zstd:99", "the level of 'zstd' is 1 to 22 (or a fast level -1 to -131072); got 99"),
    ("zfp:tolerance=0.001", "a tolerance needs a floating-point dtype; int32 is exact only with a lossless codec "
                            "such as 'zstd'"),
    ("gzip", "unknown compression 'gzip'; known: 'blosc2', 'lz4', 'sz3', 'zfp', 'zstd'"),
])
def test_refused_spec_writes_nothing(run: dict[str, Any], tmp_path: Path, spec: str, message: str) -> None:
    from sdm.codecs import parse_compression
    from sdm.errors import CompressionSpecError

    for fmt in EXT:
        out = tmp_path / f"run.{EXT[fmt]}"
        r = cli("export", str(run["run"]), "-f", fmt, "-o", str(out), "-c", run["url"], "--compression", spec)
        assert r.exit_code == 1, r.output
        assert r.output.strip() == f"error: {message}"
        if spec != "zfp:tolerance=0.001":  # refused by the parser itself, with the same message
            with pytest.raises(CompressionSpecError, match="^" + re.escape(message) + "$"):
                parse_compression(spec)
        with pytest.raises(CompressionSpecError):
            sdm.export(run["run"], format=fmt, out=out, catalog=run["url"], compression=spec)
        assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("fmt", list(EXT))
def test_round_trip_keeps_compression(run: dict[str, Any], tmp_path: Path, fmt: str) -> None:
    out = tmp_path / f"run.{EXT[fmt]}"
    sdm.export(run["run"], format=fmt, out=out, catalog=run["url"])
    url = f"sqlite:///{tmp_path}/back.db"
    r = cli("import", str(out), "--format", fmt, "--application", "back", "--root", str(tmp_path / "data"),
            "--catalog", url, "--json")
    assert r.exit_code == 0, r.output
    with sdm.open("back", "r", catalog=url) as s:
        (group,) = [g for g in s.run.groups if g.name == "f"]
        assert {d.name: d.compression for d in group.datasets} == SPECS
        g = s.group("f")
        for name in SPECS:
            got = np.stack([g.read(name, k) for k in STEPS])
            if SPECS[name] is None or SPECS[name].startswith(("zstd", "lz4", "blosc2")):
                np.testing.assert_array_equal(got, stacked(name))
    url2 = f"sqlite:///{tmp_path}/raw.db"
    report = sdm.import_file(out, format=fmt, application="raw", catalog=url2, root=str(tmp_path / "data2"),
                             compression="none")
    with sdm.open("raw", "r", catalog=url2, run=report.run) as s:
        assert all(d.compression is None for g in s.run.groups for d in g.datasets)


def test_import_of_foreign_files_maps_their_codecs(tmp_path: Path) -> None:
    """Files SDM did not write: their zstd/blosc/zfp codecs become SDM specs, gzip/zlib stay raw."""
    import h5py
    import hdf5plugin
    import netCDF4
    import zarr
    from zarr.codecs import BloscCodec, ZstdCodec

    a = np.arange(200, dtype="<i4").reshape(2, 10, 10)
    h5 = tmp_path / "f.h5"
    with h5py.File(h5, "w") as f:
        f.create_dataset("z", data=a, chunks=(1, 10, 10), shuffle=True, **hdf5plugin.Zstd(clevel=7))
        # Blosc2 (32026): after netCDF4 is imported, h5py may find netCDF4's own blosc (32001) plugin first
        f.create_dataset("b", data=a, chunks=(1, 10, 10),
                         **hdf5plugin.Blosc2(cname="zstd", clevel=4, filters=hdf5plugin.Blosc2.BITSHUFFLE))
        f.create_dataset("g", data=a, chunks=(1, 10, 10), compression="gzip")
    nc = tmp_path / "f.nc"
    with netCDF4.Dataset(nc, "w") as f:
        for d, n in zip(("s", "y", "x"), a.shape):
            f.createDimension(d, n)
        f.createVariable("z", "i4", ("s", "y", "x"), compression="zstd", complevel=2)[:] = a
        f.createVariable("g", "i4", ("s", "y", "x"), zlib=True)[:] = a
    zs = tmp_path / "f.zarr"
    root = zarr.open_group(str(zs), mode="w", zarr_format=3)
    root.create_array("z", data=a, compressors=[ZstdCodec(level=9)])
    root.create_array("b", data=a, compressors=[BloscCodec(cname="lz4hc", clevel=3, shuffle="shuffle")])
    want = {"hdf5": {"z": "zstd:7:shuffle", "b": "blosc2:zstd:4:bitshuffle", "g": None},
            "netcdf": {"z": "zstd:2:noshuffle", "g": None},
            "zarr": {"z": "zstd:9:noshuffle", "b": "blosc2:lz4hc:3:shuffle"}}
    for fmt, path in (("hdf5", h5), ("netcdf", nc), ("zarr", zs)):
        url = f"sqlite:///{tmp_path}/{fmt}.db"
        report = sdm.import_file(path, format=fmt, application="foreign", catalog=url, root=str(tmp_path / fmt))
        with sdm.open("foreign", "r", catalog=url, run=report.run) as s:
            got = {d.name: d.compression for g in s.run.groups for d in g.datasets}
            assert got == want[fmt], fmt
            g = s.group(s.run.groups[0].name)
            for name in want[fmt]:
                np.testing.assert_array_equal(g.read(name, 0), a)
