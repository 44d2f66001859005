"""Export a run to HDF5, NetCDF-4 or Zarr v3, and import such files into a new run.

:func:`export` (``sdm export``) writes one file (a directory for Zarr) with, per SDM
group, one group of the file holding one array per dataset of shape ``(steps, *shape)``,
the ``step`` dimension first and a ``step`` coordinate holding the step numbers, plus
the run's, group's and dataset's attributes. With ``group=`` the file is flat: that
group's arrays at its root. The formats differ only in how they say it:

* HDF5 (h5py): h5py dimension scales for ``step`` and every other dimension
  (``dim_0``, ... holding ``0..n-1``), attributes as HDF5 attributes; chunks of one step.
* NetCDF-4 (netCDF4): CF-style, ``step`` an unlimited dimension with a coordinate
  variable, the others plain dimensions.
* Zarr v3 (zarr-python): one chunk per step along ``step``, stored through zarr's
  sharding codec with one shard per step (inner chunks of at most about 1 MiB), so a
  step is written once, whole; ``dimension_names`` name the dimensions.

A dataset SDM stores compressed is exported compressed with the format's nearest codec
(:mod:`sdm.exporting.codecs`: hdf5plugin's filters, NetCDF's zstd/blosc/zlib, Zarr's
own and numcodecs' codecs), a raw one uncompressed; ``compression=True`` gives raw
datasets the format's default (gzip, zlib, zstd), ``compression="none"`` exports
everything uncompressed and a spec (``"zstd:5"``) compresses every dataset with it.
The array's ``sdm_compression`` attribute names the dataset's SDM codec and, for a
lossy one, ``sdm_bound``/``sdm_max_error`` its bound and recorded error; a lossy
export's own error, measured by reading every step back, is ``sdm_export_max_error``.

The data stream step by step: one step of one dataset is in memory at a time. A step
that one dataset of a group lacks but another has is written as the fill value (NaN
for floating point, 0 else) and listed in the array's ``sdm_missing_steps``
attribute (and in the report's notes), which :func:`import_file` honours. Map-array
datasets come in global row order (the serial read's order). A ranked dataset
(:class:`sdm.Ranked`) has a number of rows that changes with the step, so it has no
``(steps, rows, ...)`` array: it becomes a sub-group named after it holding one array
``step_K`` of shape ``(rows, *row_shape)`` per step K (dimension ``rows_K``).

The file is written under a temporary name beside *out* and renamed at the end, so a
failure leaves nothing behind; an existing *out* is refused unless ``overwrite``.

:func:`import_file` (``sdm import``) reads such a file, or any HDF5/NetCDF/Zarr file,
into a new run: each group of the file becomes an SDM group (arrays at the root: a group
named by the root's ``sdm_group`` attribute, else ``data``); an array whose first
dimension is ``step`` becomes a dataset written step by step at the step numbers of
the ``step`` coordinate, any other array a dataset with a single step 0. Sub-groups
(ranked datasets) are not imported and are named in the notes.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import GroupNotFoundError, IntegrityError, InvalidArgumentError, SDMError, StorageError
from .attributes import attribute_value, dataset_attrs, dimension_names, group_attrs, run_attrs
from .base import STEP, Progress, Sink, Source, SourceArray, beside
from .codecs import Applied, Choice, array_attrs, resolve
from .reports import ExportReport, ImportReport, parse_steps

from ..codecs import CompressionSpec

if TYPE_CHECKING:
    from ..catalog import DatasetRecord, GroupRecord, RunRecord
    from ..group import Group

__all__ = ["ARRAY_FORMATS", "FORMATS", "IMPORT_FORMATS", "VIRTUAL_FORMATS", "ExportReport", "ImportReport", "export", "import_file", "parse_steps", "Sink", "Source",
           "SourceArray"]

#: The formats, by their names on the command line.
ARRAY_FORMATS = ("hdf5", "netcdf", "zarr")  # a run's datasets as arrays over (step, *shape)
IMPORT_FORMATS = (*ARRAY_FORMATS, "exodus")  # exodus: a finite element model (sdm.exporting.exodus)
#: Exports that copy no data: Zarr v3 arrays whose chunks are SDM's own bytes (sdm.exporting.virtual)
VIRTUAL_FORMATS = ("references", "icechunk")
FORMATS = (*IMPORT_FORMATS, *VIRTUAL_FORMATS)

def _selected(steps: tuple[int, ...] | list[int], start: int, stop: int | None, stride: int) -> list[int]:
    return [s for s in steps if s >= start and (stop is None or s < stop) and (s - start) % stride == 0]


def _check_format(fmt: Any, choices: Sequence[str] = FORMATS) -> str:
    if not isinstance(fmt, str) or fmt.lower() not in choices:
        raise InvalidArgumentError(f"unknown format {fmt!r}; choose one of {', '.join(choices)}")
    return fmt.lower()


def _sink(fmt: str, path: Path, measure: bool) -> Sink:
    if fmt == "hdf5":
        from .hdf5 import HDF5Sink

        return HDF5Sink(path, measure)
    if fmt == "netcdf":
        from .netcdf import NetCDFSink

        return NetCDFSink(path)
    from .zarrv3 import ZarrSink

    return ZarrSink(path)


# ------------------------------------------------------------------ attributes
def _plain(value: Any) -> Any:
    """A file attribute as an SDM attribute (int, float, str, bool), or None when it is none of them."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if isinstance(value, np.ndarray):
        if value.size != 1:
            return None
        value = value.reshape(()).item()
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value if isinstance(value, (bool, int, float, str)) else None


def _dims(record: DatasetRecord, ranked: bool) -> tuple[str, ...]:
    dims = getattr(record, "dims", None)
    if dims and len(dims) == len(record.shape):
        return tuple(str(d) for d in dims)
    start = 1 if ranked else 0  # a ranked dataset's rows come first
    return tuple(f"dim_{i + start}" for i in range(len(record.shape)))


def _fill(dtype: np.dtype) -> Any:
    return np.nan if dtype.kind in "fc" else 0


# ------------------------------------------------------------------ export
@dataclass
class _Item:
    """One dataset to export, with the steps the file holds for it."""

    record: DatasetRecord
    dtype: np.dtype
    ranked: bool
    steps: list[int]  # the dataset's own (selected) steps
    dims: tuple[str, ...]
    choice: Choice = Choice(None)  # what compression the export gives it


def _plan(rec: RunRecord, group: str | None, steps: str | None) -> list[tuple[GroupRecord, list[_Item], list[int]]]:
    from ..dtypes import from_text
    from ..layout.ranked import is_ranked

    spec = parse_steps(steps)
    names = [g.name for g in rec.groups]
    if group is not None and group not in names:
        raise GroupNotFoundError(f"run {rec.id} has no group {group!r}; its groups are {names}")
    plan = []
    for g in rec.groups:
        if group is not None and g.name != group:
            continue
        items = []
        for d in g.datasets:
            ranked = is_ranked(d.distribution)
            items.append(_Item(d, from_text(d.dtype).newbyteorder("="), ranked, _selected(d.steps or (), *spec),
                               _dims(d, ranked)))
        plan.append((g, items, sorted({s for i in items if not i.ranked for s in i.steps})))
    if not any(i.steps for _, items, _ in plan for i in items):
        where = f"group {group!r} of run {rec.id}" if group is not None else f"run {rec.id}"
        raise InvalidArgumentError(f"{where} has no step in steps {steps!r}; `sdm show {rec.id}` lists its steps")
    return plan


def _check_dtypes(fmt: str, plan: list[tuple[GroupRecord, list[_Item], list[int]]]) -> None:
    for g, items, _ in plan:
        for i in items:
            dt = i.dtype
            if dt.fields is not None and fmt != "hdf5":
                raise InvalidArgumentError(f"dataset {g.name}/{i.record.name}: a structured dtype ({dt}) cannot be "
                                           f"exported to {fmt}; export to hdf5")
            if fmt == "netcdf" and dt.kind not in "iuf":
                raise InvalidArgumentError(f"dataset {g.name}/{i.record.name}: NetCDF-4 has no {dt} variables; "
                                           "export to hdf5 or zarr")


def _choose(url: str, rec: RunRecord, plan: list[tuple[GroupRecord, list[_Item], list[int]]], compression: Any) -> None:
    """Set every item's :class:`Choice`: what ``compression=`` asks (:func:`~sdm.exporting.codecs.resolve`) of it.

    Raises
    ------
    CompressionSpecError
        A spec SDM refuses, or one that cannot compress a dataset's dtype (its message).
    """
    mode, spec = resolve(compression)
    lossy = any(i.record.compression is not None and CompressionSpec.from_record(i.record.compression).lossy
                for _, items, _ in plan for i in items)
    errors: dict[tuple[str, str], float] = {}
    if lossy:  # the largest error each lossy dataset's steps recorded at write time
        from ..catalog import Catalog

        cat = Catalog(url, create=False)
        try:
            for gname, dname, w in cat.writes(rec.id):
                if w.max_error is not None:
                    errors[gname, dname] = max(errors.get((gname, dname), 0.0), float(w.max_error))
        finally:
            cat.close()
    for g, items, _ in plan:
        for i in items:
            source = i.record.compression
            own = CompressionSpec.from_record(source) if source is not None else None
            m = errors.get((g.name, i.record.name)) if own is not None and own.lossy else None
            if mode == "spec":
                assert spec is not None
                spec.check_dtype(i.dtype)
                i.choice = Choice(spec, source, m)
            elif mode == "none":
                i.choice = Choice(None, source, m)
            else:
                i.choice = Choice(own, source, m, default=mode == "default" and own is None)


def export(run: int | str | None = None, *, format: str, out: str | os.PathLike[str],  # noqa: A002
           catalog: str | None = None, root: str | os.PathLike[str] | None = None, group: str | None = None,
           steps: str | None = None, compression: Any = None, overwrite: bool = False,
           progress: Progress | None = None, application: str | None = None, where: Any = None,
           verify: bool = False, root_url: str | None = None, materialize: bool = False) -> ExportReport:
    """Export one run to an HDF5 file, a NetCDF-4 file or a Zarr v3 store, or reference it (``sdm export``).

    ``format="references"`` and ``"icechunk"`` copy no data: they describe the run's datasets
    as Zarr v3 arrays whose chunks are byte ranges of SDM's own files (a kerchunk reference
    set, an Icechunk repository of virtual chunks: :mod:`sdm.exporting.virtual`,
    ``docs/references.md``).

    Parameters
    ----------
    run : int, "latest" or None
        The run id; or, with *application* and/or *where*, ``"latest"`` (the newest that
        matches) or None (exactly one must match: several raise
        :class:`~sdm.errors.AmbiguousRunError` listing them), as ``sdm.open`` chooses
        (:mod:`sdm.catalog.selection`).
    format : {"hdf5", "netcdf", "zarr", "exodus", "references", "icechunk"}
    out : path
        The file (a directory for Zarr and Icechunk) to make; refused if it exists unless
        *overwrite*. References: a JSON file, or Parquet where *out* ends in ``.parq`` or
        ``.parquet`` (a directory).
    catalog : str, optional
        Catalog URL (default ``$SDM_CATALOG`` or the SQLite catalog in ``$SDM_ROOT``).
    root : path, optional
        Data root to read from (default: the run's own).
    group : str, optional
        Export this group only, flat at the file's root.
    steps : str, optional
        ``START:STOP[:STRIDE]`` (STOP excluded), ``START:``, ``:STOP`` or one step ``K``.
    compression : None, bool, str, dict or CompressionSpec
        None (default): every dataset compressed as SDM stores it, with the format's
        nearest codec (``docs/compression.md``, "Exports"), raw ones uncompressed; True (or
        ``"default"``): the same, raw datasets with gzip (HDF5), zlib (NetCDF) or zstd (Zarr);
        False or ``"none"``: nothing compressed; a spec in SDM's grammar (``"zstd:5"``,
        ``"zfp:tolerance=1e-3"``, see :func:`sdm.codecs.parse_compression`): every dataset
        compressed with it.
    overwrite : bool
        Replace an existing *out*.
    progress : callable, optional
        Called with ``(bytes done, bytes in all)`` after every step written.
    application : str, optional
        Select the run among this application's.
    where : str, sequence of str or dict, optional
        Attribute conditions the run must match (``"case=demo"``, ``["nx>=32"]``, or a dict).
    verify : bool
        References and Icechunk: read every referenced step through SDM, its checksums checked, first.
    root_url : str, optional
        References and Icechunk: where the run's data root is served (another mount, or an
        ``http(s)://`` or ``s3://`` prefix) instead of its own absolute path.
    materialize : bool
        References and Icechunk: copy the datasets that cannot be referenced (irregular
        chunks or extents, codecs no Zarr reader has) instead of refusing them.

    Returns
    -------
    ExportReport

    Raises
    ------
    AmbiguousRunError
        Several runs match and *run* is None.
    RunNotFoundError, GroupNotFoundError, InvalidArgumentError, StorageError
        Nothing is left at *out* (nor beside it) after an error.
    CompressionSpecError
        A *compression* spec SDM refuses or that cannot compress a dataset's dtype; nothing is written.
    IntegrityError
        References and Icechunk: a catalog row that contradicts its dataset, or (*verify*) bytes that do
        not match their checksums; nothing is written.
    RunStateError
        Icechunk: the run is being written.
    """
    from .. import config
    from ..catalog import Catalog
    from ..catalog.selection import run_choice
    from ..values import conditions_of

    fmt = _check_format(format)
    parse_steps(steps)
    resolve(compression)  # a refused spec: refused before anything is read or written
    virtual = fmt in VIRTUAL_FORMATS
    if virtual:
        from .referencing import check_options

        check_options(fmt, compression, root_url, out)
    elif verify or materialize or root_url is not None:
        raise InvalidArgumentError(f"verify, root_url and materialize (--verify, --root-url, --materialize) apply to "
                                   f"the formats {' and '.join(VIRTUAL_FORMATS)}, not {fmt}")
    if group is not None and not isinstance(group, str):
        raise InvalidArgumentError(f"group must be a group name, got {group!r}")
    target = Path(out).expanduser().absolute()
    if target.exists() and not overwrite:
        raise InvalidArgumentError(f"{target} already exists; pass --overwrite (overwrite=True) to replace it")
    if run is None and application is None and where is None:
        raise InvalidArgumentError("export needs a run: its id, or application= and/or where= selecting one")
    conds = conditions_of(where)
    url = catalog or config.default_catalog_url()
    cat = Catalog(url, create=False)
    try:
        rec = cat.select_run(application, run=run, conditions=conds)  # the rule of sdm.open
        if not isinstance(run_choice(run), int):  # selected: the whole run, every step (not the datasets matched)
            rec = cat.run(rec.id)
    finally:
        cat.close()
    if fmt == "exodus":  # a finite element model (group `group`, default "mesh") and its results
        from .exodus import export_exodus

        return export_exodus(rec, url, root, target, group, steps, progress)
    plan = _plan(rec, group, steps)
    if virtual:
        from .referencing import export_virtual

        return export_virtual(fmt, rec, url, root, target, plan, flat=group is not None, overwrite=overwrite,
                              verify=verify, root_url=root_url, materialize=materialize, progress=progress)
    _check_dtypes(fmt, plan)
    _choose(url, rec, plan, compression)
    t0 = time.perf_counter()
    from ..session import open as open_session

    with open_session(rec.application, "r", catalog=url, run=rec.id, **({"root": root} if root is not None else {})) as s, \
            beside(target, overwrite) as tmp:
        measure = any(isinstance(i.choice.spec, CompressionSpec) and i.choice.spec.lossy for _, items, _ in plan
                      for i in items)
        sink = _sink(fmt, tmp, measure)
        try:
            report = _write(sink, s, rec, plan, flat=group is not None, fmt=fmt, progress=progress)
        finally:
            sink.close()
    report.out, report.seconds = str(target), time.perf_counter() - t0
    return report


def _total(plan: list[tuple[GroupRecord, list[_Item], list[int]]]) -> int:
    total = 0
    for _, items, steps in plan:
        for i in items:
            if not i.ranked:
                total += len(steps) * i.record.nbytes
    return total


def _write(sink: Sink, s: Any, rec: RunRecord, plan: list[tuple[GroupRecord, list[_Item], list[int]]], *,
           flat: bool, fmt: str, progress: Progress | None) -> ExportReport:
    js = fmt == "zarr"
    sink.attrs(sink.root, run_attrs(rec, json_only=js))
    report = ExportReport(rec.id, fmt, "", [g.name for g, _, _ in plan], 0, 0, 0, 0.0)
    total, done = _total(plan), 0
    for g, items, steps in plan:
        where = sink.root if flat else sink.group(sink.root, g.name)
        sink.attrs(where, group_attrs(g, json_only=js))
        if steps:
            sink.dimension(where, STEP, len(steps), np.asarray(steps, dtype=np.int64))
        sizes: dict[str, int] = {}
        group = s.group(g.name)
        for item in items:
            if not item.steps:
                report.notes.append(f"{g.name}/{item.record.name}: no step selected, not exported")
                continue
            if item.ranked:
                done = _ranked(sink, where, group, item, js, report, done, total, progress)
                continue
            dims = _shared(sink, where, item, sizes)
            missing = sorted(set(steps) - set(item.steps))
            attrs = dataset_attrs(g, item.record, json_only=js)
            if missing:
                attrs["sdm_missing_steps"] = missing if js else np.asarray(missing, dtype=np.int64)
                report.notes.append(f"{g.name}/{item.record.name}: steps {missing} are missing; written as the fill "
                                    f"value {_fill(item.dtype)}")
            arr, applied = sink.array(where, item.record.name, item.dtype, (len(steps), *item.record.shape),
                                      (STEP, *dims), _fill(item.dtype), item.choice)
            _noted(report, f"{g.name}/{item.record.name}", applied)
            sink.attrs(arr, {**attrs, **array_attrs(item.choice, applied, None)})
            have, error = set(item.steps), 0.0
            for index, data in enumerate(_prefetched(group, item, steps)):  # the next step read while this one is written
                if not applied.lossy or steps[index] in have:  # a lossy codec is given no fill value (NaN)
                    data = np.ascontiguousarray(data, dtype=item.dtype)
                    sink.put(arr, index, data)
                    if applied.lossy:
                        error = max(error, _measured(sink.get(arr, index), data))
                del data
                done += item.record.nbytes
                report.nbytes += item.record.nbytes
                if progress is not None:
                    progress(done, total)
            if applied.lossy:
                sink.attrs(arr, array_attrs(item.choice, applied, error))
            report.steps += len(set(item.steps) & set(steps))
            report.arrays += 1
    return report


def _measured(got: np.ndarray, want: np.ndarray) -> float:
    """The error a lossy export made on one step (read back from the file) against SDM's values."""
    from ..codecs import max_abs_error

    return max_abs_error(want, got)


def _noted(report: ExportReport, where: str, applied: Applied) -> None:
    if applied.note:
        report.notes.append(f"{where}: {applied.note}")


def _prefetched(group: Group, item: _Item, steps: Sequence[int]) -> Iterator[np.ndarray]:
    """Every step of *item* in *steps* (a missing one as the fill value), the next one read by a worker thread
    while the caller writes the last: two steps in memory at most (the session is used by that thread only
    while the caller writes, which touches no MPI and no catalog)."""
    from concurrent.futures import ThreadPoolExecutor

    have = set(item.steps)

    def fetch(step: int) -> np.ndarray:
        if step in have:
            return group.read(item.record.name, step)
        return np.full(item.record.shape, _fill(item.dtype), dtype=item.dtype)

    if not steps:
        return
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="sdm-export-read") as pool:
        pending = pool.submit(fetch, steps[0])
        for following in [*steps[1:], None]:
            data = pending.result()
            if following is not None:
                pending = pool.submit(fetch, following)
            yield data


def _shared(sink: Sink, where: Any, item: _Item, sizes: dict[str, int]) -> tuple[str, ...]:
    """The dataset's dimension names in its group, each declared once (:func:`~sdm.exporting.attributes.dimension_names`)."""
    names, new = dimension_names(item.dims, item.record.shape, sizes)
    for name, size in new:
        sink.dimension(where, name, size, None)
    return names


def _ranked(sink: Sink, where: Any, group: Group, item: _Item, js: bool, report: ExportReport, done: int,
            total: int, progress: Progress | None) -> int:
    """A ranked dataset: a sub-group holding one ``(rows, *row_shape)`` array ``step_K`` per step."""
    sub = sink.group(where, item.record.name)
    attrs = {k: attribute_value(v, json_only=js) for k, v in item.record.attributes.items()}
    attrs.update(sdm_dataset=item.record.name, sdm_dtype=item.record.dtype, sdm_ranked=1)
    sink.attrs(sub, attrs)
    sizes: dict[str, int] = {}
    for step in item.steps:
        data = np.ascontiguousarray(group.read(item.record.name, step), dtype=item.dtype)
        rows = f"rows_{step}"
        sink.dimension(sub, rows, data.shape[0], None)
        dims = _shared(sink, sub, _Item(item.record, item.dtype, True, [], item.dims), sizes)
        arr, applied = sink.array(sub, f"step_{step}", item.dtype, data.shape, (rows, *dims), _fill(item.dtype),
                                  item.choice)
        sink.put(arr, None, data)
        error = _measured(sink.get(arr, None), data) if applied.lossy else None
        sink.attrs(arr, {"sdm_step": step, **array_attrs(item.choice, applied, error)})
        if step == item.steps[0]:
            _noted(report, f"{item.record.name}", applied)
        report.steps += 1
        report.arrays += 1
        report.nbytes += data.nbytes
        if progress is not None:
            progress(done, total)
    report.notes.append(f"{item.record.name}: ranked dataset, exported as one array per step in sub-group "
                        f"{item.record.name}/ (step_K, rows_K rows)")
    return done


# ------------------------------------------------------------------ import
def _source(fmt: str, path: Path) -> Source:
    if fmt == "hdf5":
        from .hdf5 import HDF5Source

        return HDF5Source(path)
    if fmt == "netcdf":
        from .netcdf import NetCDFSource

        return NetCDFSource(path)
    from .zarrv3 import ZarrSource

    return ZarrSource(path)


def _missing_steps(attrs: dict[str, Any], where: str) -> set[int]:
    """The steps an exported array says are missing (attribute ``sdm_missing_steps``), checked.

    Raises
    ------
    IntegrityError
        Not an integer or a list of integers >= 0.
    """
    value = attrs.get("sdm_missing_steps", [])
    arr = np.asarray(value) if not isinstance(value, (str, bytes)) else np.asarray([value])
    if arr.size == 0 and arr.ndim == 1:  # an empty list (JSON gives no integer type to it)
        return set()
    if arr.ndim > 1 or arr.dtype.kind not in "iu" or int(arr.min()) < 0:
        raise IntegrityError(f"{where}: attribute 'sdm_missing_steps' must be a list of integers >= 0, not "
                             f"{repr(value)[:80]}; the file was not written as SDM exports")
    return {int(x) for x in np.atleast_1d(arr)}


def _sdm_attrs(attrs: dict[str, Any], notes: list[str], where: str) -> dict[str, Any]:
    """The attributes SDM can keep (not ``sdm_*``, not the formats' own ``_*``/``CLASS``/...)."""
    from ..values import encode

    out = {}
    for key, value in attrs.items():
        if key.startswith(("sdm_", "_")) or key in {"CLASS", "NAME", "REFERENCE_LIST", "DIMENSION_LIST", "DIMENSION_LABELS"}:
            continue
        plain = _plain(value)
        try:
            if plain is None:
                raise InvalidArgumentError("not a number or text")
            encode(key, plain)
        except InvalidArgumentError:
            notes.append(f"{where}: attribute {key!r} not imported (not an SDM attribute value)")
            continue
        out[key] = plain
    return out


def import_file(path: str | os.PathLike[str], *, format: str, application: str,  # noqa: A002
                catalog: str | None = None, root: str | os.PathLike[str] | None = None,
                progress: Progress | None = None, compression: Any = None) -> ImportReport:
    """Import an HDF5, NetCDF-4 or Zarr v3 file into a new run of *application* (``sdm import``).

    Parameters
    ----------
    path : path
        The file (a directory for Zarr).
    format : {"hdf5", "netcdf", "zarr"}
    application : str
    catalog : str, optional
        Catalog URL (default ``$SDM_CATALOG`` or the SQLite catalog in the data root).
    root : path, optional
        Data root of the new run (default ``$SDM_ROOT`` or ``./sdm-data``).
    progress : callable, optional
        Called with ``(bytes done, bytes in all)`` after every step written.
    compression : None, str, dict or CompressionSpec
        None (default): each array compressed in SDM as in the file, where its codec maps
        to one of SDM's (the ``sdm_compression`` attribute of an SDM export, else zstd,
        lz4, blosc/blosc2 and zfp filters or codecs; not gzip/zlib), raw otherwise;
        False or ``"none"``: every dataset raw; a spec: every dataset compressed with it.

    Returns
    -------
    ImportReport

    Raises
    ------
    InvalidArgumentError, StorageError
        A bad format, or a file that cannot be read as it.
    """
    fmt = _check_format(format, IMPORT_FORMATS)
    mode, override = resolve(compression)
    if mode == "default":
        raise InvalidArgumentError("an import's compression is None, 'none' or a spec; 'default' is for exports")
    src_path = Path(path).expanduser().absolute()
    if not src_path.exists():
        raise StorageError(f"cannot import {src_path}: no such file or directory")
    if fmt == "exodus":
        from .exodus import import_exodus

        return import_exodus(src_path, application, {k: v for k, v in (("catalog", catalog), ("root", root))
                                                     if v is not None}, progress)
    t0 = time.perf_counter()
    try:
        source = _source(fmt, src_path)
    except SDMError:
        raise
    except Exception as exc:  # noqa: BLE001 - the libraries' own errors, said once
        raise StorageError(f"cannot read {src_path} as {fmt}: {type(exc).__name__}: {exc}") from None
    notes: list[str] = []
    try:
        groups = list(source.groups())
        for name, _, arrays, _ in groups:  # what the file says of itself, checked before a run is made
            for a in arrays:
                _missing_steps(a.attrs, f"{src_path}: array {a.name!r}" + (f" of group {name!r}" if name else ""))
                if override is not None:  # a spec that cannot compress an array: refused before a run is made
                    override.check_array(a.dtype, a.shape)
        head = source.attrs()
        run_attrs = {**_sdm_attrs(head, notes, "file"), "imported_from": str(src_path), "imported_format": fmt}
        total = sum(a.dtype.itemsize * math.prod(a.shape) * len(a.steps or [0]) for _, _, arrays, _ in groups
                    for a in arrays)
        kwargs: dict[str, Any] = {"attributes": run_attrs}
        if catalog is not None:
            kwargs["catalog"] = catalog
        if root is not None:
            kwargs["root"] = root
        from ..session import open as open_session

        with open_session(application, "w", **kwargs) as s:
            report = ImportReport(s.run_id, application, str(src_path), fmt, [], 0, 0, 0, 0.0, notes)
            for name, gattrs, arrays, subs in groups:
                gname = name if name is not None else str(_plain(head.get("sdm_group")) or "data")
                for sub in subs:
                    notes.append(f"{gname}/{sub}: a sub-group, not imported")
                if not arrays:
                    continue
                _import_group(s, gname, gattrs, arrays, report, total, progress, (mode, override))
    finally:
        source.close()
    report.seconds = time.perf_counter() - t0
    return report


def _import_spec(a: SourceArray, choice: tuple[str, CompressionSpec | None], where: str,
                 notes: list[str]) -> CompressionSpec | None:
    """The SDM compression an imported array gets: the override, else the one its codec in the file maps to."""
    from ..errors import CompressionSpecError

    mode, override = choice
    spec = override if mode == "spec" else (a.compression if mode == "follow" else None)
    if spec is None:
        return None
    try:
        spec.check_array(a.dtype, a.shape)
    except CompressionSpecError as exc:
        if mode == "spec":
            raise
        notes.append(f"{where}: stored raw, not {spec.text} ({exc})")
        return None
    return spec


def _import_group(s: Any, gname: str, gattrs: dict[str, Any], arrays: list[SourceArray], report: ImportReport,
                  total: int, progress: Progress | None, choice: tuple[str, CompressionSpec | None]) -> None:
    from ..datasets import Dataset

    notes = report.notes
    specs = [Dataset(a.name, shape=a.shape, dtype=a.dtype,
                     compression=_import_spec(a, choice, f"{gname}/{a.name}", notes)) for a in arrays]
    g = s.make_group(gname, specs, attributes=_sdm_attrs(gattrs, notes, gname))
    report.groups.append(gname)
    for a in arrays:
        own = _sdm_attrs(a.attrs, notes, f"{gname}/{a.name}")
        if own:
            g.set_attributes(own, datasets=[a.name])
        skip = _missing_steps(a.attrs, f"{report.source}: array {a.name!r}")
        for index, step in enumerate(a.steps if a.steps is not None else [None]):
            if step in skip:
                continue
            data = a.read(index if step is not None else None)
            g.write(a.name, 0 if step is None else int(step), np.ascontiguousarray(data))
            report.steps += 1
            report.nbytes += data.nbytes
            if progress is not None:
                progress(report.nbytes, total)
        report.datasets += 1
