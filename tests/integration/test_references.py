"""Virtual Zarr (``sdm export --format references | icechunk``): runs read by xarray, zarr and Icechunk, no copy.

Runs are written by ``_references_job.py`` at 1 rank (in this process) and at 2, 3 and 4
ranks (``mpiexec``): every view (Block, BlockCyclic, MapArray, Ranked), both orders, ten
dtypes, levels 1-3 with a file every 2 steps, compressed datasets (zstd, lz4, zfp) and
subfiles. Each is exported to kerchunk JSON (read by ``xarray.open_dataset("reference://",
engine="zarr", ...)``, with and without consolidated metadata), to kerchunk Parquet (read
by zarr through fsspec) and to an Icechunk repository (read by xarray), and every array
must equal SDM's own serial read and the job's numpy references, its fill where a step
is missing. A run migrated and purged to the archive tier is read through the versitygw
server (superfile members by offset). Every refusal has its exact message and leaves
nothing behind.
"""

from __future__ import annotations

import json
import re
import sqlite3
import sys
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import sdm
from sdm import export
from sdm.errors import IntegrityError, InvalidArgumentError, RunStateError

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import _references_job as job  # noqa: E402
from test_rebuild import cli, mpi  # noqa: E402

LOSSY = {"zf": 1e-3, "zr": 0.05}  # zfp: SDM's read and the references decode the same stream; numpy within this


@pytest.fixture(autouse=True)
def _quiet() -> Any:
    with warnings.catch_warnings():  # zarr: "numcodecs codecs are not in the Zarr v3 specification", ...
        warnings.simplefilter("ignore")
        yield


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The catalog and the runs written at 1 to 4 ranks."""
    root = tmp_path_factory.mktemp("refs-runs")
    url = f"sqlite:///{root}/catalog.db"
    ids = {1: _write_here(root / "data", url)}
    for ranks in (2, 3, 4):
        out = mpi(ranks, "write", str(root / "data"), url, job="_references_job.py")
        ids[ranks] = int(re.search(r"RUN (\d+)", out).group(1))  # type: ignore[union-attr]
    reads = {ranks: sdm_reads(url, run) for ranks, run in ids.items()}
    return {"root": root / "data", "url": url, "ids": ids, "reads": reads}


def _write_here(root: Path, url: str, skip: tuple[str, ...] = ()) -> int:
    """The job's run on this process (one rank), without the datasets in *skip*; its id."""
    import contextlib
    import io

    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        job.write(str(root), url, skip)
    return int(re.search(r"RUN (\d+)", text.getvalue()).group(1))  # type: ignore[union-attr]


def sdm_reads(url: str, run: int) -> dict[tuple[str, str, int], np.ndarray]:
    """Every step of every dataset as SDM reads it in this (serial) process."""
    out = {}
    with sdm.open("references", "r", catalog=url, run=run) as s:
        for group in s.groups:
            g = s.group(group)
            for name in g.datasets:
                for step in g.steps(name):
                    out[group, name, step] = g.read(name, step)
    return out


def run_dir(url: str, run: int) -> str:
    """The run's directory under its data root."""
    with sdm.open("references", "r", catalog=url, run=run) as s:
        return str(s.run_dir)


def fill_of(dtype: np.dtype) -> Any:
    """The fill value a missing step reads as (sdm.exporting.virtual's rule, restated)."""
    if dtype.kind == "f":
        return np.nan
    return np.iinfo(dtype).min if dtype.kind == "i" else np.iinfo(dtype).max


def same(got: np.ndarray, want: np.ndarray, name: str, exact: bool = True) -> None:
    """Equal values (lossy datasets within their bound), the same dtype where the array holds stored bytes."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (name, got.shape, want.shape)
    if name in LOSSY and not exact:
        np.testing.assert_allclose(got, want, atol=LOSSY[name], rtol=0)
    elif got.dtype.fields is not None:
        assert got.tobytes() == want.astype(got.dtype).tobytes(), name
    else:
        np.testing.assert_array_equal(got, want, err_msg=name)


def check_run(read: Callable[[str], np.ndarray], reads: dict[tuple[str, str, int], np.ndarray], ranks: int,
              skip: tuple[str, ...] = ()) -> int:
    """Every array of a run's export (*read*: store path -> its values) against SDM's reads and the numpy
    references (but the datasets in *skip*); the number of arrays checked."""
    checked = 0
    for group, names in job.DATASETS.items():
        steps = job.STEPS[group]
        same(read(f"{group}/step"), np.asarray(steps), "step")
        for name, (shape, dtype, _) in names.items():
            if name in skip:
                continue
            values = read(f"{group}/{name}")
            assert values.shape == (len(steps), *shape), (group, name, values.shape)
            for k, step in enumerate(steps):
                if step not in job.steps_of(group, name):
                    fill = fill_of(np.dtype(dtype))
                    assert (np.isnan(values[k]) if np.isnan(fill) else values[k] == fill).all(), (name, step)
                    continue
                same(values[k], reads[group, name, step], name)  # SDM's own read, exactly
                same(values[k], job.reference(group, name, step), name, exact=False)
            checked += 1
    for step in job.STEPS["parts"]:  # ranked: one (rows, 2) array per step
        want = job.reference("parts", "p", step, ranks)
        same(read(f"parts/p/step_{step}"), want, "p")
        same(reads["parts", "p", step], want, "p")
        checked += 1
    same(read("cyclic/x"), job.X, "x")  # a dimension's values (make_group(coords=...))
    return checked


def reference_reader(refs: Any, **options: Any) -> Callable[[str], np.ndarray]:
    """Arrays of a reference set through zarr and fsspec's ReferenceFileSystem."""
    import zarr

    group = zarr.open_group("reference://", mode="r", storage_options={"fo": refs, **options})
    return lambda path: np.asarray(group[path][...])


def icechunk_reader(repo: Path, prefixes: list[str]) -> Callable[[str], np.ndarray]:
    """Arrays of an Icechunk repository's branch main (its virtual chunk containers *prefixes* authorized)."""
    import icechunk as ic
    import zarr

    opened = ic.Repository.open(ic.local_filesystem_storage(str(repo)),
                                authorize_virtual_chunk_access={p: None for p in prefixes})
    group = zarr.open_group(opened.readonly_session("main").store, mode="r")
    return lambda path: np.asarray(group[path][...])


# ------------------------------------------------------------------ runs at 1-4 ranks, every reader
@pytest.mark.parametrize("ranks", [1, 2, 3, 4])
def test_references_json_read_by_xarray_and_zarr(runs: dict[str, Any], tmp_path: Path, ranks: int) -> None:
    import xarray as xr

    run, out = runs["ids"][ranks], tmp_path / "refs.json"
    report = export(run, format="references", out=out, catalog=runs["url"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["refs.json"]  # nothing else, nothing partial
    assert (report.format, report.arrays) == ("references", 15 + 2)
    assert "fields/n: steps [1, 3] are missing; they read as the fill value -2147483648" in report.notes
    doc = json.loads(out.read_text())
    assert doc["version"] == 1 and doc["templates"] == {"run": str(runs["root"] / run_dir(runs["url"], run))}
    chunk = doc["refs"]["fields/T/0.0.0"]
    assert chunk[0] == "{{run}}/fields.s00000000-00000001.sdm" and chunk[2] == 12 * 5 * 8
    assert check_run(reference_reader(str(out)), runs["reads"][ranks], ranks) == 17

    datasets = {}
    for group in [*job.DATASETS, "parts/p"]:  # xarray: a group by name (consolidated metadata), and by path
        datasets[group] = ds = xr.open_dataset("reference://", engine="zarr", group=group,
                                               backend_kwargs={"storage_options": {"fo": str(out)}})
        flat = xr.open_dataset(f"reference://{group}", engine="zarr",
                               backend_kwargs={"storage_options": {"fo": str(out)}, "consolidated": False})
        assert sorted(flat.variables) == sorted(ds.variables)
    check_run(lambda path: datasets[path.rpartition("/")[0]][path.rpartition("/")[2]].values, runs["reads"][ranks],
              ranks)
    fields, cyclic = datasets["fields"], datasets["cyclic"]
    assert fields["T"].dims == ("step", "dim_0", "dim_1") and fields["T"].attrs["sdm_dtype"] == ">f8"
    assert fields["F"].dims == ("step", "dim_0_4", "dim_1_6") and fields.attrs["units"] == "K"
    assert fields["T"].attrs["sdm_order"] == "C" and fields["n"].attrs["sdm_missing_steps"] == [1, 3]
    assert cyclic["q"].dims == ("step", "x", "y") and list(cyclic.coords) == ["step", "x"]
    assert datasets["comp"]["z"].attrs["sdm_compression"] == "zstd:3:shuffle"
    tree = xr.open_datatree("reference://", engine="zarr", backend_kwargs={"storage_options": {"fo": str(out)}})
    assert tree.attrs["case"] == "refs" and tree.attrs["sdm_run"] == run and tree.attrs["sdm_nprocs"] == ranks


@pytest.mark.parametrize("ranks", [1, 2, 3, 4])
def test_parquet_and_icechunk_read_like_sdm(runs: dict[str, Any], tmp_path: Path, ranks: int) -> None:
    import icechunk as ic
    import xarray as xr
    import zarr

    run = runs["ids"][ranks]
    parq, repo = tmp_path / "refs.parq", tmp_path / "repo"
    export(run, format="references", out=parq, catalog=runs["url"])
    assert (parq / ".zmetadata").is_file() and (parq / "fields" / "T" / "refs.0.parq").is_file()
    assert check_run(reference_reader(str(parq)), runs["reads"][ranks], ranks) == 17
    report = export(run, format="icechunk", out=repo, catalog=runs["url"], verify=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["refs.parq", "repo"]
    prefix = f"{runs['root'].as_uri()}/"
    assert report.notes[-1].endswith(f"its readers authorize the virtual chunk containers {prefix}")
    opened = ic.Repository.open(ic.local_filesystem_storage(str(repo)), authorize_virtual_chunk_access={prefix: None})
    commits = list(opened.ancestry(branch="main"))
    assert len(commits) == 2 and commits[0].message == f"sdm run {run} of references"  # and the repository's first
    assert commits[0].metadata == {**job.ATTRIBUTES, "sdm_run": run, "sdm_application": "references",
                                   "sdm_nprocs": ranks, "sdm_created": commits[0].metadata["sdm_created"]}
    store = opened.readonly_session("main").store
    group = zarr.open_group(store, mode="r")
    assert check_run(lambda path: np.asarray(group[path][...]), runs["reads"][ranks], ranks) == 17
    with xr.open_zarr(store, group="comp", consolidated=False) as ds:
        same(ds["zf"].values[1], runs["reads"][ranks]["comp", "zf", 1], "zf")


def test_cli_verify_root_url_flat_group_and_steps(runs: dict[str, Any], tmp_path: Path) -> None:
    import xarray as xr

    run, out = str(runs["ids"][3]), tmp_path / "refs.json"
    mount = tmp_path / "mount"
    mount.symlink_to(runs["root"])  # the same files, served from another mount
    r = cli("export", run, "--format", "references", "-o", str(out), "--verify", "--root-url", str(mount),
            "--group", "fields", "--steps", "1:4:2", "-c", runs["url"], "--json")
    assert r.exit_code == 0, r.output
    report = json.loads(r.output)
    assert report["steps"] == 2 * 6 + 0 and report["groups"] == ["fields"]  # n has no step in 1:4:2
    doc = json.loads(out.read_text())
    where = run_dir(runs["url"], int(run))
    assert doc["templates"] == {"run": f"{mount}/{where}"} and "n/zarr.json" not in doc["refs"]
    with xr.open_dataset("reference://", engine="zarr",
                         backend_kwargs={"storage_options": {"fo": str(out)}, "consolidated": False}) as ds:
        same(ds["step"].values, np.array([1, 3]), "step")
        same(ds["T"].values, np.stack([job.reference("fields", "T", s) for s in (1, 3)]), "T")
        assert ds.attrs["sdm_group"] == "fields" and ds.attrs["case"] == "refs"
    moved = tmp_path / "moved"  # a reader moves the root again with fsspec's template_overrides
    moved.symlink_to(runs["root"])
    got = reference_reader(str(out), template_overrides={"run": f"{moved}/{where}"})("T")
    same(got[1], job.reference("fields", "T", 3), "T")
    r = cli("export", run, "--format", "icechunk", "-o", str(tmp_path / "repo"), "--root-url", mount.as_uri(),
            "--group", "comp", "-c", runs["url"])
    assert r.exit_code == 0, r.output
    got = icechunk_reader(tmp_path / "repo", [f"{mount.as_uri()}/"])("zf")
    same(got[1], runs["reads"][3]["comp", "zf", 1], "zf")


# ------------------------------------------------------------------ the archive tier
def test_archive_tier_read_through_s3(s3_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run migrated (small files packed in superfiles) and purged: every chunk an s3:// range."""
    import icechunk as ic
    import zarr
    from obstore.fsspec import FsspecStore

    from sdm.catalog import Catalog
    from sdm.ops import tiers
    from sdm.storage.backends.objectstore import ObjectStore

    monkeypatch.setenv("SDM_S3_ENDPOINT", s3_server.endpoint)
    root, url = tmp_path / "data", f"sqlite:///{tmp_path}/c.db"
    run = _write_here(root, url, skip=("r",))  # `sdm migrate` checks a structured dtype's rows wrongly
    reads = sdm_reads(url, run)
    bucket = f"sdm-refs-{uuid.uuid4().hex[:8]}"
    store = ObjectStore(f"s3://{bucket}/archive", endpoint=s3_server.endpoint)
    store.ensure_bucket()
    cat = Catalog(url)
    try:
        tiers.migrate(cat, run, store, pack_below=4096)
        tiers.purge(cat, run, "fast")
    finally:
        cat.close()
    assert not list(root.rglob("*.sdm"))
    out, repo = tmp_path / "refs.json", tmp_path / "repo"
    export(run, format="references", out=out, catalog=url, verify=True)
    refs = json.loads(out.read_text())["refs"]
    urls = {v[0] for v in refs.values() if isinstance(v, list)}
    assert all(u.startswith(f"s3://{bucket}/archive/") for u in urls)
    assert any(u.endswith(".sdmpack") for u in urls)  # superfile members, by their offset in the object
    env = s3_server.env()
    s3 = FsspecStore("s3", config={"endpoint": s3_server.endpoint, "access_key_id": env["AWS_ACCESS_KEY_ID"],
                                   "secret_access_key": env["AWS_SECRET_ACCESS_KEY"], "region": env["AWS_REGION"]},
                     client_options={"allow_http": True}, asynchronous=True)
    assert check_run(reference_reader(str(out), fs={"s3": s3}), reads, 1, ("r",)) == 16
    export(run, format="icechunk", out=repo, catalog=url)
    credentials = ic.s3_credentials(access_key_id=env["AWS_ACCESS_KEY_ID"],
                                    secret_access_key=env["AWS_SECRET_ACCESS_KEY"])
    opened = ic.Repository.open(ic.local_filesystem_storage(str(repo)),
                                authorize_virtual_chunk_access=ic.containers_credentials({f"s3://{bucket}/": credentials}))
    group = zarr.open_group(opened.readonly_session("main").store, mode="r")
    assert check_run(lambda path: np.asarray(group[path][...]), reads, 1, ("r",)) == 16

    direct = tmp_path / "direct.json"  # a group written to the archive tier itself (tier="archive")
    with sdm.open("direct", root=str(tmp_path / "data2"), catalog=url) as s:
        g = s.make_group("a", ["x"], dtype=">f4", shape=(8, 4), order="F", tier="archive",
                         archive=f"s3://{bucket}/direct")
        for step in (0, 1):
            g.write("x", step, np.arange(32, dtype=">f4").reshape(8, 4) * (step + 1))
        later = s.run_id
    export(later, format="references", out=direct, catalog=url)
    values = reference_reader(str(direct), fs={"s3": s3})("a/x")
    same(values, np.stack([np.arange(32, dtype=">f4").reshape(8, 4) * (k + 1) for k in (0, 1)]), "x")


# ------------------------------------------------------------------ what cannot be referenced, and bad input
ODD = {  # group -> (dataset, make_group arguments, a step's values)
    "b2": ("a", {"dtype": "<f8", "shape": (12, 4), "compression": "blosc2:zstd:5:shuffle"}),
    "sz": ("a", {"dtype": "<f8", "shape": (12, 4), "compression": "sz3:absolute=0.01"}),
    "irr": ("a", {"dtype": "<f8", "shape": (12, 4), "subfiles": 5, "level": 2}),
    "map": ("a", {"dtype": "<f8", "shape": (12, 32), "compression": "zstd", "chunks": (5, 32),
                  "view": "map"}),
    "big": ("r", {"dtype": np.dtype([("a", "<f8"), ("b", ">i2")]), "shape": (12,)}),
}
REASONS = {
    "b2": "its chunks are Blosc2 frames, which Zarr's blosc codec (Blosc 1, numcodecs) does not decode",
    "sz": "its chunks are SZ3 streams, which no Zarr codec decodes",
    "irr": "step 0 is cut into 5 extents of [64, 96] bytes, which are no regular grid of (12, 4) (Zarr's chunks are "
           "all of one shape that divides the array: a subfiled step is, when its slowest dimension splits evenly "
           "over the subfiles)",
    "map": "the chunks of step 0 form no regular grid: Zarr's chunks are all of one shape that divides the array "
           "(12, 32), and SDM's are [(2, 32), (5, 32)] (the writers' boxes)",
    "big": "its structured dtype [('a', '<f8'), ('b', '>i2')] has big-endian fields, and Zarr's structured data type "
           "names its fields' types without a byte order (readers take them as little-endian)",
}


def odd_values(group: str, step: int) -> np.ndarray:
    name, kw = ODD[group]
    dtype, shape = np.dtype(kw["dtype"]), kw["shape"]
    base = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape)
    if dtype.fields is not None:
        out = np.zeros(shape, dtype)
        out["a"], out["b"] = base + step, base.astype(int) - step
        return out
    return np.sin(base / 5.0) + step


@pytest.fixture(scope="module")
def odd(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A run (one process) of the datasets references cannot describe as they are, and a ranked one."""
    tmp = tmp_path_factory.mktemp("refs-odd")
    url = f"sqlite:///{tmp}/c.db"
    with sdm.open("odd", root=str(tmp / "data"), catalog=url) as s:
        for group, (name, kw) in ODD.items():
            kw = dict(kw)
            if kw.pop("view", None) == "map":
                kw["view"] = sdm.MapArray(np.arange(12))
            g = s.make_group(group, [name], **kw)
            for step in (0, 1):
                g.write(name, step, odd_values(group, step))
        p = s.make_group("parts", ["p"], dtype="<i8", shape=(2,), view=sdm.Ranked())
        p.write("p", 0, np.arange(6, dtype="<i8").reshape(3, 2))
        return {"url": url, "run": s.run_id, "root": tmp / "data"}


@pytest.mark.parametrize("group", list(ODD))
def test_what_cannot_be_referenced_is_refused_or_copied(odd: dict[str, Any], tmp_path: Path, group: str) -> None:
    out = tmp_path / "refs.json"
    for fmt, target in (("references", out), ("icechunk", tmp_path / "repo")):
        with pytest.raises(InvalidArgumentError) as exc:
            export(odd["run"], format=fmt, out=target, catalog=odd["url"], group=group)
        name = ODD[group][0]
        assert str(exc.value) == (f"dataset {group}/{name} cannot be referenced: {REASONS[group]}; pass --materialize "
                                  "(materialize=True) to copy its values instead")
        assert list(tmp_path.iterdir()) == []
    readers = {}
    for fmt, leaf in (("references", "refs.json"), ("references", "refs.parq"), ("icechunk", "repo")):
        report = export(odd["run"], format=fmt, out=tmp_path / leaf, catalog=odd["url"], group=group,
                        materialize=True)
        assert report.notes[0] == f"{group}/{name}: copied (materialized), not referenced: {REASONS[group]}"
        readers[leaf] = reference_reader(str(tmp_path / leaf)) if fmt == "references" else icechunk_reader(
            tmp_path / leaf, [])
    with sdm.open("odd", "r", catalog=odd["url"], run=odd["run"]) as s:
        for leaf, read in readers.items():
            values = read(name)
            for step in (0, 1):
                same(values[step], s.group(group).read(name, step), name)


def test_bad_input_is_refused_and_leaves_nothing(odd: dict[str, Any], tmp_path: Path) -> None:
    run, url, out = odd["run"], odd["url"], tmp_path / "refs.json"
    cases: list[tuple[dict[str, Any], type[Exception], str]] = [
        ({"run": 999}, sdm.errors.RunNotFoundError, f"no run 999 in catalog {url!r}"),
        ({"steps": "7:"}, InvalidArgumentError,
         f"group 'parts' of run {run} has no step in steps '7:'; `sdm show {run}` lists its steps"),
        ({"compression": "zstd"}, InvalidArgumentError, "compression does not apply to references: its chunks are "
         "SDM's own, referenced as stored (a dataset copied with --materialize is compressed with zstd)"),
        ({"root_url": "mnt/data"}, InvalidArgumentError, "root_url must be an absolute path or a URL (file:///mnt/data, "
         "https://host/data, s3://bucket/data), got 'mnt/data'"),
        ({"format": "hdf5", "verify": True}, InvalidArgumentError, "verify, root_url and materialize (--verify, "
         "--root-url, --materialize) apply to the formats references and icechunk, not hdf5"),
    ]
    for kwargs, error, message in cases:
        args = {"run": run, "format": "references", "out": out, "catalog": url, "group": "parts", **kwargs}
        with pytest.raises(error) as exc:
            export(args.pop("run"), **args)
        assert exc.value.args[0] == message, kwargs
        assert list(tmp_path.iterdir()) == []
    out.write_text("keep")
    with pytest.raises(InvalidArgumentError) as exc:
        export(run, format="references", out=out, catalog=url, group="parts")
    assert str(exc.value) == f"{out} already exists; pass --overwrite (overwrite=True) to replace it"
    assert out.read_text() == "keep"
    export(run, format="references", out=out, catalog=url, group="parts", overwrite=True)
    same(reference_reader(str(out))("p/step_0"), np.arange(6).reshape(3, 2), "p")
    out.unlink()
    r = cli("import", str(tmp_path / "x.json"), "-f", "references", "--app", "x", "-c", url)
    assert r.output.strip() == "error: unknown format 'references'; choose one of hdf5, netcdf, zarr, exodus"
    r = cli("export", str(run), "-f", "references", "-o", str(out), "--group", "b2", "-c", url)
    assert r.exit_code == 1 and r.output.strip() == (f"error: dataset b2/a cannot be referenced: {REASONS['b2']}; "
                                                     "pass --materialize (materialize=True) to copy its values instead")
    assert list(tmp_path.iterdir()) == []


def test_damaged_bytes_and_damaged_rows_are_refused(odd: dict[str, Any], tmp_path: Path) -> None:
    """--verify reads every referenced range with its checksum; a ranked row that is no header and whole rows
    is refused; either leaves nothing."""
    run, url, out = odd["run"], odd["url"], tmp_path / "refs.json"
    with sdm.open("odd", "r", catalog=url, run=run) as s:
        w = s.open_catalog().lookup_write(s.group("big").dataset("r").id, 1)
        path = odd["root"] / w.path
    original = path.read_bytes()
    damaged = bytearray(original)
    damaged[w.offset + 3] ^= 0xFF
    path.write_bytes(bytes(damaged))
    try:
        with sdm.open("odd", "r", catalog=url, run=run) as s, pytest.raises(IntegrityError) as want:
            s.group("big").read("r", 1, verify=True)
        export(run, format="references", out=out, catalog=url, group="big", materialize=True)  # no --verify: made
        out.unlink()
        with pytest.raises(IntegrityError) as exc:
            export(run, format="references", out=out, catalog=url, group="big", materialize=True, verify=True)
        assert str(exc.value) == str(want.value)
        assert list(tmp_path.iterdir()) == []
    finally:
        path.write_bytes(original)
    db = sqlite3.connect(url.removeprefix("sqlite:///"))
    try:
        (nbytes,) = db.execute("SELECT nbytes FROM writes WHERE step = 0 AND dataset_id = (SELECT id FROM datasets "
                               "WHERE name = 'p')").fetchone()
        db.execute("UPDATE writes SET nbytes = nbytes - 4 WHERE step = 0 AND dataset_id = (SELECT id FROM datasets "
                   "WHERE name = 'p')")
        db.commit()
        with pytest.raises(IntegrityError) as exc:
            export(run, format="icechunk", out=tmp_path / "repo", catalog=url, group="parts")
        assert str(exc.value) == (f"ranked dataset parts/p step 0: {nbytes - 4} bytes are not a header for 1 ranks "
                                  "(56 bytes) and whole rows of 16; the row was changed after SDM wrote it")
        assert list(tmp_path.iterdir()) == []
    finally:
        db.execute("UPDATE writes SET nbytes = ? WHERE step = 0 AND dataset_id = (SELECT id FROM datasets WHERE "
                   "name = 'p')", (nbytes,))
        db.commit()
        db.close()


def test_a_run_being_written(tmp_path: Path) -> None:
    """References name the steps committed so far (and say so); Icechunk, which pins the files, refuses."""
    url = f"sqlite:///{tmp_path}/c.db"
    with sdm.open("live", root=str(tmp_path / "data"), catalog=url) as s:
        g = s.make_group("g", ["a"], dtype="<f8", shape=(8,))
        for step in (0, 1):
            g.write("a", step, np.arange(8.0) + step)
        out = tmp_path / "refs.json"
        report = export(s.run_id, format="references", out=out, catalog=url)
        assert report.notes == [f"run {s.run_id} is being written: exported up to its last committed step (1); the "
                                "steps it commits later are not referenced"]
        with pytest.raises(RunStateError) as exc:
            export(s.run_id, format="icechunk", out=tmp_path / "repo", catalog=url)
        assert str(exc.value) == (f"run {s.run_id} is being written: an Icechunk repository pins its files as they "
                                  "are now, and the run still changes them; export it once it is closed, or to "
                                  "--format references")
        g.write("a", 2, np.arange(8.0) + 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.db", "data", "refs.json"]
    same(reference_reader(str(out))("g/a"), np.stack([np.arange(8.0), np.arange(8.0) + 1]), "a")
