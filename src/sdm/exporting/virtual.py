"""Virtual Zarr: a run's datasets as Zarr v3 arrays whose chunks are byte ranges of SDM's own files.

SDM's files hold each dataset step's raw bytes in canonical global order at the offset
the catalog records, so a step is already a Zarr chunk where it lies: this module turns
the catalog's rows into a description of Zarr v3 arrays and, for every chunk, the place
of its bytes (:class:`Place`: a file of the run under its data root, or an object of the
archive tier, a superfile member by its offset), without reading a byte of data. The
two formats write that description their own way: :mod:`sdm.exporting.references`
(kerchunk reference sets, JSON or Parquet) and :mod:`sdm.exporting.icechunk`
(an Icechunk repository of virtual chunks).

What becomes an array (one Zarr group per SDM group, ``step`` first, as the copies of
:func:`sdm.exporting.export` make them):

* a raw dataset: chunks of one step, cut along the slowest stored dimension into
  contiguous runs of at most :data:`CHUNK_BYTES` (a divisor of that dimension);
* a compressed dataset (:mod:`sdm.engine.compressed`): one chunk per stored chunk, with
  the Zarr codecs that decode SDM's (:func:`~sdm.exporting.codecs.stored_zarr_codecs`),
  where the chunks of every step tile the array as one regular grid;
* a subfiled step (:mod:`sdm.storage.subfiles`): one chunk per extent, where the extents
  are all of one size that is a block of the array (the rows split evenly);
* a ranked dataset (:class:`sdm.Ranked`): a sub-group named after it with one array
  ``step_K`` of ``(rows, *row_shape)`` per step, the rows in rank order after the step's
  header (their number told by the row's size and its writer's ranks).

A Fortran-order dataset keeps its logical shape: its chunks go through Zarr's
``transpose`` codec, whose encoded form is the chunk's Fortran bytes. A step a dataset
lacks (but another of its group has) has no chunk, so it reads as the array's fill value,
listed in the array's ``sdm_missing_steps``: NaN for floating point (complex: NaN+NaNj),
NaT for dates, the smallest value of signed integers and the largest of unsigned ones
(never 0), False for booleans, empty strings; the dataset's own ``_FillValue`` attribute
wins. Zarr v3 readers (xarray included) do not mask values equal to the fill, so a real
value is never hidden; ``sdm_missing_steps`` says which steps are fill.

A dataset that cannot be referenced (irregular chunks or extents, a codec no Zarr
reader has) is refused with the reason, or with ``materialize`` copied: its steps read
through SDM and written as the format's own (zstd-compressed) chunks.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import IntegrityError, InvalidArgumentError
from .attributes import dataset_attrs, dimension_names, group_attrs, run_attrs
from .base import STEP, inner_chunks
from .codecs import bytes_codec, stored_zarr_codecs

if TYPE_CHECKING:
    from ..catalog import DatasetRecord, GroupRecord, RunRecord, WriteRecord
    from ..group import Group

__all__ = ["CHUNK_BYTES", "Place", "VirtualArray", "VirtualGroup", "Description", "Unreferenceable", "Root", "Sink",
           "describe", "build", "chunk_key", "fill_value", "root_of", "zarr_dtype_refusal"]

#: The largest chunk a raw step is cut into (bytes; a step whose slowest rows are larger keeps one row a chunk).
CHUNK_BYTES = 4 << 20


@dataclass(frozen=True)
class Place:
    """Where one chunk's bytes are.

    Attributes
    ----------
    url : str
        On the fast tier, the file's path relative to the data root (``fast``); on the
        archive tier, the object's ``s3://BUCKET/KEY``.
    offset, length : int
        The chunk's bytes in it.
    fast : bool
        Whether *url* is relative to the data root.
    """

    url: str
    offset: int
    length: int
    fast: bool


@dataclass
class VirtualArray:
    """One Zarr array: its metadata, its chunks' places, and what is written into the format itself.

    Attributes
    ----------
    path : str
        Its path in the store (``"fields/T"``, ``"T"`` when flat).
    refs : list of (index, Place)
        The chunks by their index in the chunk grid.
    written : list of (index, source)
        What the format stores itself (coordinates, materialized steps): ``array[index] = source()``.
    """

    path: str
    dtype: np.dtype
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    dims: tuple[str, ...]
    fill: Any
    codecs: dict[str, Any]  #: zarr ``create_array`` arguments: serializer, filters, compressors
    attrs: dict[str, Any]
    refs: list[tuple[tuple[int, ...], Place]] = field(default_factory=list)
    written: list[tuple[Any, Callable[[], np.ndarray]]] = field(default_factory=list)
    coordinate: bool = False  #: a coordinate (steps, a dimension's values), not a dataset


@dataclass
class VirtualGroup:
    """One Zarr group: its path (``""`` for the root) and attributes."""

    path: str
    attrs: dict[str, Any]


@dataclass
class Description:
    """A run as Zarr groups and arrays (see the module documentation)."""

    attrs: dict[str, Any]  #: the root group's
    groups: list[VirtualGroup]
    arrays: list[VirtualArray]
    notes: list[str] = field(default_factory=list)
    run_dir: str = ""  #: the run's directory under the data root (every file of the run lies in it)
    steps: int = 0  #: dataset steps described
    nbytes: int = 0  #: their bytes (as the arrays hold them)

    def places(self) -> list[Place]:
        """Every chunk's place."""
        return [p for a in self.arrays for _, p in a.refs]


class Unreferenceable(InvalidArgumentError):
    """Why a dataset's chunks cannot be Zarr chunks (raised and caught in this module, which words the refusal)."""


# ------------------------------------------------------------------ dtypes, fills, codecs
def zarr_dtype_refusal(dtype: np.dtype) -> str | None:
    """Why Zarr has no data type for *dtype* (None: it has one)."""
    from zarr.core.dtype import parse_data_type

    try:
        parse_data_type(dtype, zarr_format=3)
    except (ValueError, TypeError) as exc:
        return f"Zarr has no {dtype} data type ({exc})"
    return None


def _swapped_fields(dtype: np.dtype) -> bool:
    """Whether a structured *dtype* has a big-endian field (Zarr's ``structured`` data type names its fields'
    types without a byte order, and readers take them as little-endian)."""
    if dtype.fields is None:
        return dtype.subdtype is not None and _swapped_fields(dtype.subdtype[0])
    for sub, *_ in dtype.fields.values():
        base = sub.subdtype[0] if sub.subdtype is not None else sub
        if base.fields is not None:
            if _swapped_fields(base):
                return True
        elif base.itemsize > 1 and base.kind not in "bSV" and (
                base.byteorder == ">" or (base.byteorder == "=" and sys.byteorder == "big")):
            return True
    return False


def fill_value(dtype: np.dtype, attrs: dict[str, Any]) -> Any:
    """The fill value of an array of *dtype* (see the module documentation); the dataset's ``_FillValue`` first."""
    own = attrs.get("_FillValue")
    if own is not None and dtype.fields is None:
        try:
            return np.asarray(own).astype(dtype, casting="same_kind").reshape(()).item()
        except (TypeError, ValueError):
            pass
    if dtype.kind in "fc":
        return complex("nan+nanj") if dtype.kind == "c" else float("nan")
    if dtype.kind == "i":
        return int(np.iinfo(dtype).min)
    if dtype.kind == "u":
        return int(np.iinfo(dtype).max)
    if dtype.kind == "b":
        return False
    return None  # zarr's default: NaT, empty strings, zeros for structures


def _transpose(order: str, ndim: int) -> list[Any]:
    """Zarr's ``transpose`` codec mapping a ``(step, *shape)`` chunk of a dataset of *ndim* dimensions to its
    Fortran bytes (none for C order, or fewer than two dimensions)."""
    if order != "F" or ndim < 2:
        return []
    from zarr.codecs import TransposeCodec

    return [TransposeCodec(order=(0, *range(ndim, 0, -1)))]


def _stored(order: str, shape: Sequence[int]) -> tuple[int, ...]:
    """The shape whose C order is the stored order (reversed for Fortran order)."""
    return tuple(shape) if order == "C" else tuple(shape)[::-1]


# ------------------------------------------------------------------ places
class _Places:
    """Where one dataset's rows are: each span on the fast tier, else in its verified archive copy
    (:meth:`sdm.engine.state.GroupState._locate_span`), the copies of missing files looked up once."""

    def __init__(self, group: Group, name: str, rows: Sequence[WriteRecord]) -> None:
        from ..catalog.tiers import copies
        from ..storage.confine import row_record

        self.engine, self.name = group.engine, name
        s = self.engine.session
        paths = sorted({p for w in rows for p, _, _ in w.spans()})
        missing = [p for p in paths if not self.engine._absolute(p, row_record(s.run_id, group.name, name)).exists()]
        self.held = copies(s.open_catalog(), s.run_id, missing) if missing else {}

    def of(self, step: int, rel: str, offset: int, nbytes: int) -> Place:
        """The place of *nbytes* at *offset* of the run's file *rel* (a row or one of its extents)."""
        from ..storage.backends import is_object

        path, at = self.engine._locate_span(self.name, step, rel, int(offset), int(nbytes), self.held)
        if is_object(path):
            return Place(path.partition("#")[0], int(at), int(nbytes), False)
        return Place(path, int(at), int(nbytes), True)


# ------------------------------------------------------------------ layouts: chunks and their places
@dataclass
class _Layout:
    """A dataset's chunk shape (over ``(step, *shape)``), codecs and chunk places."""

    chunks: tuple[int, ...]
    codecs: dict[str, Any]
    dtype: np.dtype
    refs: list[tuple[tuple[int, ...], Place]]
    copied: bool = False  #: the steps are copies (read through SDM), not referenced


def _raw(rec: DatasetRecord, dtype: np.dtype, rows: dict[int, WriteRecord], positions: dict[int, int],
         places: _Places) -> _Layout:
    """Raw steps: each one run of bytes, cut into chunks of at most :data:`CHUNK_BYTES` along the slowest
    stored dimension."""
    stored = _stored(rec.order, rec.shape)
    inner = inner_chunks(stored, dtype.itemsize, CHUNK_BYTES) if stored else ()
    count = stored[0] // inner[0] if stored else 1
    per = math.prod(inner) * dtype.itemsize
    refs = []
    for step, w in rows.items():
        if w.nbytes != rec.nbytes:
            raise IntegrityError(f"dataset {rec.name!r} step {step}: its catalog row holds {w.nbytes} bytes, the "
                                 f"dataset's shape {rec.shape} of {dtype} takes {rec.nbytes}; the row was changed "
                                 "after SDM wrote it")
        if not rec.nbytes:
            continue
        whole = places.of(step, w.path, w.offset, w.nbytes)
        for k in range(count):
            index = (k, *([0] * (len(stored) - 1))) if stored else ()
            refs.append(((positions[step], *_logical(rec.order, index)),
                         Place(whole.url, whole.offset + k * per, per, whole.fast)))
    return _Layout((1, *_logical(rec.order, inner)), _plain(rec, dtype), dtype, refs)


def _plain(rec: DatasetRecord, dtype: np.dtype, compressors: Any = None) -> dict[str, Any]:
    """The codecs of chunks of raw bytes in the dataset's order (and byte order), optionally compressed."""
    return {"serializer": bytes_codec(dtype), "filters": _transpose(rec.order, len(rec.shape)),
            "compressors": compressors}


def _logical(order: str, stored: tuple[int, ...]) -> tuple[int, ...]:
    """A stored-order tuple (index or shape) in the dataset's dimensions."""
    return stored if order == "C" else stored[::-1]


def _grid(boxes: Sequence[tuple[tuple[int, ...], tuple[int, ...]]], shape: tuple[int, ...],
          step: int) -> tuple[tuple[int, ...], list[tuple[int, ...]]]:
    """The regular chunk grid that one step's chunk *boxes* form: its chunk shape and each box's index.

    Raises
    ------
    Unreferenceable
        The boxes are not one shape that divides the array, at its multiples, once each.
    """
    if not boxes:
        if math.prod(shape):
            raise Unreferenceable(f"step {step} has no chunk")
        return tuple(max(n, 1) for n in shape), []
    first = [b for b in boxes if not any(b[0])]
    if len(first) != 1 or len(first[0][1]) != len(shape):
        raise Unreferenceable(f"the chunks of step {step} do not start at the array's origin once")
    chunk = tuple(int(c) for c in first[0][1])
    why = (f"the chunks of step {step} form no regular grid: Zarr's chunks are all of one shape that divides the "
           f"array {shape}, and SDM's are")
    if any(c <= 0 or n % c for n, c in zip(shape, chunk)):
        raise Unreferenceable(f"{why} {sorted({tuple(b[1]) for b in boxes})[:4]} (the writers' boxes)")
    seen: set[tuple[int, ...]] = set()
    out = []
    for starts, counts in boxes:
        index = tuple(int(s) // c for s, c in zip(starts, chunk))
        if (tuple(counts) != chunk or any(int(s) % c for s, c in zip(starts, chunk)) or index in seen
                or any(i * c >= n for i, c, n in zip(index, chunk, shape))):
            raise Unreferenceable(f"{why} {chunk} beside {tuple(counts)} at {tuple(starts)} (the writers' boxes)")
        seen.add(index)
        out.append(index)
    if len(seen) != math.prod(n // c for n, c in zip(shape, chunk)):
        raise Unreferenceable(f"the chunks of step {step} do not cover the array")
    return chunk, out


def _compressed(rec: DatasetRecord, dtype: np.dtype, rows: dict[int, WriteRecord], positions: dict[int, int],
                places: _Places) -> _Layout:
    """Compressed steps: one Zarr chunk per stored chunk, decoded by the Zarr codecs of the dataset's."""
    from ..codecs import CompressionSpec
    from ..errors import CompressionSpecError

    codecs = {w.codec for w in rows.values()}
    if len(codecs) != 1:
        raise Unreferenceable(f"its steps are stored with several codecs ({', '.join(sorted(map(str, codecs)))})")
    (text,) = codecs
    try:
        spec = CompressionSpec.from_record(str(text))
    except CompressionSpecError as exc:
        raise IntegrityError(f"dataset {rec.name!r}: its rows name codec {text!r}, which SDM does not know ({exc})") \
            from None
    chain = stored_zarr_codecs(spec, dtype)
    if isinstance(chain, str):
        raise Unreferenceable(chain)
    shape = tuple(rec.shape)
    chunk: tuple[int, ...] | None = None
    refs = []
    for step, w in rows.items():
        boxes = [e.box for e in w.extents]
        if any(b is None for b in boxes):
            raise IntegrityError(f"dataset {rec.name!r} step {step}: a chunk has no box in the catalog; the row was "
                                 "changed after SDM wrote it")
        got, indices = _grid([b for b in boxes if b is not None], shape, step)
        if indices:
            if chunk is not None and got != chunk:
                raise Unreferenceable(f"its steps are cut into chunks of different shapes ({chunk} and {got})")
            chunk = got
        for e, index in zip(w.extents, indices):
            refs.append(((positions[step], *index), places.of(step, e.path, e.offset, e.nbytes)))
    zdtype, serializer, compressors = chain
    return _Layout((1, *(chunk or tuple(max(n, 1) for n in shape))),
                   {"serializer": serializer, "filters": _transpose(rec.order, len(shape)), "compressors": compressors},
                   zdtype, refs)


def _stream_chunk(stored: tuple[int, ...], elements: int) -> tuple[int, ...] | None:
    """The chunk shape (stored order) of a run of *elements* of the C-order stream of *stored* that tiles it as
    a regular grid: ``(1, ..., 1, c, *stored[d + 1:])`` with *c* dividing ``stored[d]``; None when none does."""
    for d in range(len(stored) - 1, -1, -1):
        tail = math.prod(stored[d + 1:])
        if tail and elements % tail == 0:
            c = elements // tail
            if 1 <= c <= stored[d] and stored[d] % c == 0:
                return (*([1] * d), c, *stored[d + 1:])
    return None


def _subfiled(rec: DatasetRecord, dtype: np.dtype, rows: dict[int, WriteRecord], positions: dict[int, int],
              places: _Places) -> _Layout:
    """Subfiled steps: one Zarr chunk per extent, where the extents are one block of the array each."""
    stored = _stored(rec.order, rec.shape)
    chunk: tuple[int, ...] | None = None
    refs = []
    for step, w in rows.items():
        extents = sorted(w.extents, key=lambda e: e.start)
        sizes = [e.nbytes for e in extents]
        length = sizes[0] if sizes else 0
        if sum(sizes) != rec.nbytes or any(e.start != sum(sizes[:k]) for k, e in enumerate(extents)):
            raise IntegrityError(f"dataset {rec.name!r} step {step}: its extents do not cover its {rec.nbytes} bytes "
                                 "once, in order; the row was changed after SDM wrote it")
        got = _stream_chunk(stored, length // dtype.itemsize) if length and length % dtype.itemsize == 0 else None
        if got is None or len(set(sizes)) != 1:
            raise Unreferenceable(
                f"step {step} is cut into {len(extents)} extents of {sorted(set(sizes))} bytes, which are no regular "
                f"grid of {_logical(rec.order, stored)} (Zarr's chunks are all of one shape that divides the array: "
                "a subfiled step is, when its slowest dimension splits evenly over the subfiles)")
        if chunk is not None and got != chunk:
            raise Unreferenceable(f"its steps are cut into extents of different sizes ({chunk} and {got})")
        chunk = got
        grid = tuple(n // c for n, c in zip(stored, got))
        for k, e in enumerate(extents):
            index = tuple(int(i) for i in np.unravel_index(k, grid)) if grid else ()
            refs.append(((positions[step], *_logical(rec.order, index)), places.of(step, e.path, e.offset, e.nbytes)))
    assert chunk is not None
    return _Layout((1, *_logical(rec.order, chunk)), _plain(rec, dtype), dtype, refs)


def _layout(rec: DatasetRecord, dtype: np.dtype, rows: dict[int, WriteRecord], positions: dict[int, int],
            places: _Places) -> _Layout:
    """The layout of a dataset's selected rows, by how its steps are stored (all alike, else refused)."""
    if _swapped_fields(dtype):
        raise Unreferenceable(f"its structured dtype {dtype} has big-endian fields, and Zarr's structured data type "
                              "names its fields' types without a byte order (readers take them as little-endian)")
    makers = {_compressed if w.codec is not None else _subfiled if w.extents else _raw for w in rows.values()}
    if len(makers) > 1:
        raise Unreferenceable(f"its steps are stored several ways ({', '.join(sorted(_WAYS[m] for m in makers))})")
    make = makers.pop() if makers else _raw
    return make(rec, dtype, rows, positions, places)


#: How each layout's steps are stored, in words.
_WAYS = {_raw: "as raw bytes", _compressed: "as compressed chunks", _subfiled: "in subfiles"}


# ------------------------------------------------------------------ the run
def _materialized(rec: DatasetRecord, dtype: np.dtype) -> _Layout:
    """A copy: each step read through SDM and stored by the format itself, in chunks of at most
    :data:`CHUNK_BYTES` compressed with zstd."""
    from zarr.codecs import ZstdCodec

    chunk = inner_chunks(tuple(rec.shape), dtype.itemsize, CHUNK_BYTES) if rec.shape else ()
    if dtype.fields is not None:  # little-endian fields (see _swapped_fields)
        dtype = dtype.newbyteorder("<")
    return _Layout((1, *chunk), {"serializer": bytes_codec(dtype), "filters": None,
                                 "compressors": [ZstdCodec(level=3)]}, dtype, [], copied=True)


def describe(s: Any, rec: RunRecord, plan: Sequence[tuple[GroupRecord, Sequence[Any], list[int]]], *, flat: bool,
             materialize: bool, verify: bool, progress: Callable[[int, int], None] | None = None) -> Description:
    """The run's datasets as Zarr arrays whose chunks are places of its bytes (see the module documentation).

    Parameters
    ----------
    s : sdm.Session
        The run, opened to read.
    rec : RunRecord
    plan : list
        :func:`sdm.exporting._plan`'s groups, each with its items and selected steps.
    flat : bool
        One group, its arrays at the root.
    materialize : bool
        Copy the datasets that cannot be referenced (else refuse them).
    verify : bool
        Read every referenced step through SDM with its checksums checked first.
    progress : callable, optional
        ``(bytes described, bytes in all)`` after each dataset (each step verified or copied).

    Raises
    ------
    InvalidArgumentError
        A dataset that cannot be referenced (without *materialize*), or a dtype Zarr has no type for.
    IntegrityError
        A catalog row that contradicts its dataset, or (*verify*) bytes that do not match their checksums.
    StorageError
        A file missing with no verified archive copy, or shorter than its rows.
    """

    out = Description(run_attrs(rec, json_only=True), [], [], run_dir=str(s.run_dir))
    total = sum(i.record.nbytes * len(i.steps) for _, items, _ in plan for i in items if not i.ranked)
    done = 0
    for g, items, steps in plan:
        where = "" if flat else g.name
        if flat:
            out.attrs.update(group_attrs(g, json_only=True))
        else:
            out.groups.append(VirtualGroup(where, group_attrs(g, json_only=True)))
        group = s.group(g.name)
        positions = {step: k for k, step in enumerate(steps)}
        if steps:
            values = np.asarray(steps, dtype=np.int64)
            out.arrays.append(_coordinate(_join(where, STEP), STEP, values))
        sizes: dict[str, int] = {}
        for item in items:
            name = f"{g.name}/{item.record.name}"
            if not item.steps:
                out.notes.append(f"{name}: no step selected, not exported")
                continue
            rows = group.session.open_catalog().dataset_writes(item.record.id)
            mine = {st: rows[st] for st in item.steps if st in rows}
            lost = sorted(set(item.steps) - set(mine))
            if lost:
                raise IntegrityError(f"dataset {name} steps {lost[:5]} are no longer in the catalog")
            if verify:
                for st in item.steps:
                    group.read(item.record.name, st, verify=True)
            if item.ranked:
                arrays = _ranked(where, g, item, mine, _Places(group, item.record.name, list(mine.values())))
                out.arrays.extend(arrays)
                out.notes.append(f"{name}: ranked dataset, exported as one array per step in sub-group "
                                 f"{item.record.name}/ (step_K, rows_K rows)")
                out.groups.append(VirtualGroup(_join(where, item.record.name),
                                               {**dataset_attrs(g, item.record, json_only=True), "sdm_ranked": 1}))
                nbytes = sum(p.length for a in arrays for _, p in a.refs)
            else:
                out.arrays.append(_dataset(where, g, item, group, mine, positions, steps, sizes, materialize, out.notes))
                nbytes = item.record.nbytes * len(item.steps)
            out.steps += len(item.steps)
            done += nbytes
            if progress is not None:
                progress(done, max(total, done))  # a ranked dataset's steps: their rows, known once described
        out.arrays.extend(_coordinates(where, group, sizes, {i.record.name for i in items}))
    out.nbytes = done
    return out


def _join(where: str, name: str) -> str:
    return f"{where}/{name}" if where else name


def _coordinate(path: str, dim: str, values: np.ndarray) -> VirtualArray:
    """A small 1-D array written into the format (the ``step`` coordinate, a dimension's values)."""
    from zarr.codecs import ZstdCodec

    values = np.ascontiguousarray(values)
    return VirtualArray(path, values.dtype, values.shape, (max(values.size, 1),), (dim,), fill_value(values.dtype, {}),
                        {"serializer": bytes_codec(values.dtype), "filters": None, "compressors": [ZstdCodec(level=3)]},
                        {}, written=[((slice(None),), partial(np.asarray, values))], coordinate=True)


def _coordinates(where: str, group: Group, sizes: dict[str, int], taken: set[str]) -> list[VirtualArray]:
    """The values of the group's named dimensions (infos ``coord.<dim>``, ``make_group(coords=...)``)."""
    infos = set(group.infos()) if sizes else set()
    out = []
    for dim, size in sizes.items():
        if f"coord.{dim}" in infos and dim not in taken and dim != STEP:
            values = np.asarray(group.info(f"coord.{dim}"))
            if values.ndim == 1 and values.size == size:
                out.append(_coordinate(_join(where, dim), dim, values))
    return out


def _named_dtype(g: GroupRecord, rec: Any) -> tuple[str, np.dtype]:
    """A dataset's name in messages (``group/name``) and its dtype, refused where Zarr has none for it.

    Raises
    ------
    InvalidArgumentError
        A dtype Zarr cannot describe (see :func:`zarr_dtype_refusal`).
    """
    from ..dtypes import from_text

    name, dtype = f"{g.name}/{rec.name}", from_text(rec.dtype)
    why = zarr_dtype_refusal(dtype)
    if why is not None:
        raise InvalidArgumentError(f"dataset {name}: {why}; export it to hdf5")
    return name, dtype


def _dataset(where: str, g: GroupRecord, item: Any, group: Group, rows: dict[int, WriteRecord],
             positions: dict[int, int], steps: list[int], sizes: dict[str, int], materialize: bool,
             notes: list[str]) -> VirtualArray:
    """A dataset that is not ranked: its layout (or its copy), its dimensions, fill and attributes."""
    rec = item.record
    name, dtype = _named_dtype(g, rec)
    mine = {st: rows[st] for st in item.steps}
    own = {st: positions[st] for st in item.steps}
    try:
        layout = _layout(rec, dtype, mine, own, _Places(group, rec.name, list(mine.values())))
    except Unreferenceable as exc:
        if not materialize:
            raise InvalidArgumentError(f"dataset {name} cannot be referenced: {exc}; pass --materialize "
                                       "(materialize=True) to copy its values instead") from None
        layout = _materialized(rec, dtype)
        notes.append(f"{name}: copied (materialized), not referenced: {exc}")
    dims, _ = dimension_names(item.dims, rec.shape, sizes)
    attrs = dataset_attrs(g, item.record, json_only=True)
    if rec.compression is not None:
        attrs["sdm_compression"] = rec.compression
    missing = sorted(set(steps) - set(item.steps))
    fill = fill_value(layout.dtype, rec.attributes)
    if missing:
        attrs["sdm_missing_steps"] = missing
        notes.append(f"{name}: steps {missing} are missing; they read as the fill value {fill!r}")
    arr = VirtualArray(_join(where, rec.name), layout.dtype, (len(steps), *rec.shape), layout.chunks, (STEP, *dims),
                       fill, layout.codecs, attrs, layout.refs)
    if layout.copied:
        arr.written = [((own[st],), partial(_copied, group, rec.name, st, layout.dtype)) for st in item.steps]
    return arr


def _copied(group: Group, name: str, step: int, dtype: np.dtype) -> np.ndarray:
    """One step of a copied (materialized) dataset, read through SDM, in the copy's dtype."""
    return group.read(name, step).astype(dtype, copy=False)


def _ranked(where: str, g: GroupRecord, item: Any, rows: dict[int, WriteRecord], places: _Places) -> list[VirtualArray]:
    """A ranked dataset: one ``(rows, *row_shape)`` array per step, its rows after the step's header.

    Raises
    ------
    InvalidArgumentError
        A step stored as extents (no array form SDM can tell from the catalog).
    IntegrityError
        A row whose size is no header and whole rows.
    """
    from ..storage.sections import header_length

    rec = item.record
    name, dtype = _named_dtype(g, rec)
    if _swapped_fields(dtype):
        raise InvalidArgumentError(f"ranked dataset {name}: its structured dtype {dtype} has big-endian fields, which "
                                   "Zarr's structured data type cannot say; export it to hdf5")
    row_bytes = math.prod(rec.shape) * dtype.itemsize
    out = []
    for step, w in rows.items():
        if w.extents or w.codec is not None or not row_bytes:
            raise InvalidArgumentError(
                f"ranked dataset {name} step {step} has no regular array form SDM can tell from the catalog (its "
                f"rows are {'stored as extents' if w.extents or w.codec else 'of 0 bytes'}); export it to hdf5")
        head = header_length(max(int(w.nprocs), 0), dtype.itemsize)
        count, rest = divmod(w.nbytes - head, row_bytes)
        if w.nbytes < head or rest:
            raise IntegrityError(f"ranked dataset {name} step {step}: {w.nbytes} bytes are not a header for {w.nprocs} "
                                 f"ranks ({head} bytes) and whole rows of {row_bytes}; the row was changed after SDM "
                                 "wrote it")
        rows_dim = f"rows_{step}"
        dims, _ = dimension_names(item.dims, rec.shape, {})
        arr = VirtualArray(f"{_join(where, rec.name)}/step_{step}", dtype, (count, *rec.shape),
                           (max(count, 1), *(max(n, 1) for n in rec.shape)), (rows_dim, *dims),
                           fill_value(dtype, rec.attributes),
                           {"serializer": bytes_codec(dtype), "filters": None, "compressors": None},
                           {"sdm_step": step})
        if count:
            whole = places.of(step, w.path, w.offset, w.nbytes)
            arr.refs.append(((0,) * (len(rec.shape) + 1),
                             Place(whole.url, whole.offset + head, count * row_bytes, whole.fast)))
        out.append(arr)
    return out


# ------------------------------------------------------------------ building the metadata
def build(store: Any, d: Description, *, key_separator: str) -> None:
    """Create *d*'s groups and arrays in the zarr *store* (metadata, and what is written: coordinates, copies).

    *key_separator*: ``"."`` for chunk keys ``path/0.1`` (Zarr's ``v2`` key encoding, which
    kerchunk's Parquet references index), ``"/"`` for Zarr v3's default ``path/c/0/1``.
    """
    import warnings

    import zarr

    encoding: dict[str, Any] = ({"name": "v2", "separator": "."} if key_separator == "." else
                                {"name": "default", "separator": "/"})
    zarr.open_group(store=store, mode="w", zarr_format=3, attributes=d.attrs)
    for g in d.groups:
        zarr.open_group(store=store, path=g.path, mode="w", zarr_format=3, attributes=g.attrs)
    for a in d.arrays:
        with warnings.catch_warnings():  # numcodecs' codecs in zarr: "not part of the Zarr v3 specification"
            warnings.simplefilter("ignore", UserWarning)
            arr = zarr.create_array(store=store, name=a.path, shape=a.shape, dtype=a.dtype, chunks=a.chunks,
                                    fill_value=a.fill, dimension_names=a.dims, attributes=a.attrs,
                                    chunk_key_encoding=encoding, serializer=a.codecs["serializer"],
                                    filters=a.codecs["filters"] or None, compressors=a.codecs["compressors"] or None)
            for index, source in a.written:
                arr[index] = source()


def chunk_key(path: str, index: tuple[int, ...], separator: str) -> str:
    """The store key of chunk *index* of the array at *path* (see :func:`build`)."""
    if separator == ".":
        return f"{path}/{'.'.join(map(str, index))}"
    return f"{path}/c/{'/'.join(map(str, index))}"


# ------------------------------------------------------------------ where the files are, who writes
@dataclass(frozen=True)
class Root:
    """Where the references find the run's data root: an absolute path (its own, or another mount) or a URL."""

    url: str  #: no trailing ``/``

    @property
    def local(self) -> bool:
        """Whether it is a path of this machine (or a ``file://`` URL)."""
        return "://" not in self.url or self.url.startswith("file://")

    @property
    def uri(self) -> str:
        """As a URL (``file://`` for a path)."""
        return Path(self.url).as_uri() if "://" not in self.url else self.url

    @property
    def path(self) -> str:
        """The local path (of a path, or of a ``file://`` URL)."""
        from urllib.parse import unquote, urlparse

        return self.url if "://" not in self.url else unquote(urlparse(self.url).path)

    def of(self, rel: str) -> str:
        """The path or URL of the run's file *rel* (relative to the data root)."""
        return f"{self.url.rstrip('/')}/{rel}"


def root_of(value: str | None, own: Any) -> Root:
    """The :class:`Root` of ``root_url=`` (*own*: the run's data root, used when *value* is None).

    Raises
    ------
    InvalidArgumentError
        Neither an absolute path nor a URL.
    """
    import re

    if value is None:
        return Root(str(Path(own).absolute()).rstrip("/") or "/")
    text = value.strip() if isinstance(value, str) else ""
    if text.startswith("/"):
        return Root(text.rstrip("/") or "/")
    if re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s]+", text):
        return Root(text.rstrip("/"))
    raise InvalidArgumentError(f"root_url must be an absolute path or a URL (file:///mnt/data, https://host/data, "
                               f"s3://bucket/data), got {value!r}")


class Sink:
    """What writes a :class:`Description` in one format (:mod:`sdm.exporting.references`, :mod:`sdm.exporting.icechunk`)."""

    format = ""

    def refuse_open(self, run: int) -> None:
        """Raise if the format cannot reference a run still being written (its files still growing)."""

    def write(self, path: Path, d: Description, root: Root, rec: RunRecord) -> list[str]:
        """Write *d* at *path* (which does not exist): the notes to report."""
        raise NotImplementedError
