"""Kerchunk reference sets of a run (``sdm export --format references``): version 1 JSON, or Parquet.

The references describe the Zarr v3 hierarchy of :mod:`sdm.exporting.virtual` (one group
per SDM group, one array per dataset over ``(step, *shape)``); fsspec's
``ReferenceFileSystem`` serves it to zarr and xarray::

    xr.open_dataset("reference://", engine="zarr", group="fields",
                    backend_kwargs={"storage_options": {"fo": "refs.json"}})

* Metadata: each ``zarr.json`` as JSON text; the root's carries the consolidated
  metadata of the whole hierarchy (Zarr v3 ``consolidated_metadata``), so a reader that
  opens a group by ``group=`` lists nothing (with ``consolidated=False``, open
  ``reference://GROUP`` instead: zarr lists a sub-path of a reference store, not a group
  under its root).
* Chunk keys in Zarr's ``v2`` encoding (``fields/T/3.0.0``), which kerchunk's Parquet
  layout indexes; each chunk ``[path or URL, offset, length]``. A file of the run is
  ``{{run}}/<its path in the run's directory>``, the template ``run`` being the run's
  directory under its data root (an absolute path), or under ``--root-url`` when given
  (fsspec's ``template_overrides`` moves it again); an archive object is its ``s3://`` URL.
* What the set holds itself (the ``step`` coordinate, dimension values, copies of
  ``--materialize``): ``base64:`` text.

Parquet (``-o refs.parq``, a directory, for runs of many chunks): kerchunk's lazy layout
that fsspec reads (``.zmetadata`` with the metadata and ``record_size``; per array
``<array>/refs.<k>.parq`` of :data:`RECORD_SIZE` rows ``path, offset, size, raw``, the
chunk numbered in C order of the chunk grid), written with pandas and fastparquet, full
paths (that layout has no templates). Each array also has a ``<array>/.zarray`` entry
holding only its ``shape`` and ``chunks``: what that layout numbers chunks by (and each
group, and the root's ``zarr.json``, one of no chunk: fsspec's reader takes the parent of
every metadata key for an array when it looks for the references' protocol). A chunk
left out (a step the dataset lacks) cannot be said there (fsspec's reader fails on the
row of a missing chunk), so the set holds it: the chunk of fill values, encoded (Parquet
compresses the repeated rows; at most :data:`FILL_LIMIT` bytes of them a file, else the
export is refused and JSON does it).
"""

from __future__ import annotations

import base64
import json
import math
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import IntegrityError, InvalidArgumentError
from .virtual import Description, Root, Sink, VirtualArray, build, chunk_key

if TYPE_CHECKING:
    from ..catalog import RunRecord

__all__ = ["PARQUET_SUFFIXES", "RECORD_SIZE", "FILL_LIMIT", "ReferenceSink", "references", "fill_chunk"]

#: An output ending so is a Parquet reference set (a directory); any other a JSON file.
PARQUET_SUFFIXES = (".parq", ".parquet")
#: References per Parquet file (kerchunk's ``record_size``).
RECORD_SIZE = 10_000
#: The most bytes of chunks of fill values one Parquet file holds (each is held in memory when read).
FILL_LIMIT = 64 << 20
_SEP = "."  # chunk keys in Zarr's "v2" encoding


def _compact(raw: bytes) -> Any:
    return json.loads(raw)


Grids = dict[str, tuple[tuple[int, ...], tuple[int, ...]]]  #: each array's shape and chunk shape, by path


def references(d: Description, root: Root | None) -> tuple[dict[str, Any], Grids]:
    """The reference set of *d*: ``{key: JSON text, base64 text or [path or URL, offset, length]}`` (a run's
    file as ``{{run}}/...`` when *root* is None, else its full path or URL under *root*), and each array's shape
    and chunk shape."""
    import zarr
    from zarr.storage import MemoryStore

    held: dict[str, Any] = {}
    build(MemoryStore(store_dict=held), d, key_separator=_SEP)
    with warnings.catch_warnings():  # "consolidated metadata is not part of the Zarr v3 specification"
        warnings.simplefilter("ignore", UserWarning)
        zarr.consolidate_metadata(MemoryStore(store_dict=held))
    refs: dict[str, Any] = {}
    for key, value in held.items():
        raw = value.to_bytes()
        if key == "zarr.json" or key.endswith("/zarr.json"):
            refs[key] = json.dumps(_compact(raw), separators=(",", ":"))
        else:
            refs[key] = "base64:" + base64.b64encode(raw).decode("ascii")
    grids: Grids = {}
    inside = f"{d.run_dir}/"
    for a in d.arrays:
        grids[a.path] = (a.shape, a.chunks)
        for index, p in a.refs:
            if not p.fast:
                where = p.url
            elif root is not None:
                where = root.of(p.url)
            elif p.url.startswith(inside):
                where = "{{run}}/" + p.url[len(inside):]
            else:  # never: sdm.storage.confine refuses a row naming a file outside the run's directory
                raise IntegrityError(f"{p.url} lies outside the run's directory {d.run_dir}")
            refs[chunk_key(a.path, index, _SEP)] = [where, p.offset, p.length]
    return refs, grids


class ReferenceSink(Sink):
    """A kerchunk reference set being written: JSON, or Parquet (*parquet*)."""

    format = "references"

    def __init__(self, parquet: bool) -> None:
        self.parquet = parquet

    def write(self, path: Path, d: Description, root: Root, rec: RunRecord) -> list[str]:
        """The references of *d* at *path*: a JSON file, or a Parquet directory."""
        if not self.parquet:
            refs, _ = references(d, None)
            doc = {"version": 1, "templates": {"run": root.of(d.run_dir)}, "refs": refs}
            with open(path, "w", encoding="utf-8") as f:
                json.dump(doc, f, separators=(",", ":"))
            return []
        refs, grids = references(d, root)
        _parquet(path, refs, grids, {a.path: a for a in d.arrays})
        return []


def fill_chunk(a: VirtualArray) -> bytes | None:
    """A chunk of *a*'s fill values as its codecs encode it, or None when they do not give the fill back
    (a lossy codec: ZFP has no NaN)."""
    import numpy as np
    import zarr
    from zarr.storage import MemoryStore

    held: dict[str, Any] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        z = zarr.create_array(store=MemoryStore(store_dict=held), shape=a.chunks, chunks=a.chunks, dtype=a.dtype,
                              fill_value=a.fill, serializer=a.codecs["serializer"], filters=a.codecs["filters"] or None,
                              compressors=a.codecs["compressors"] or None, config={"write_empty_chunks": True})
        want = np.full(a.chunks, a.fill, dtype=a.dtype) if a.fill is not None else np.zeros(a.chunks, a.dtype)
        z[...] = want
        try:
            back = np.asarray(z[...])
        except Exception:  # noqa: BLE001 - the codec cannot take the fill back
            return None
    same = back.tobytes() == want.tobytes() if a.dtype.fields is not None else np.array_equal(
        back, want, equal_nan=a.dtype.kind in "fc")
    chunks = [v.to_bytes() for k, v in held.items() if not k.endswith("zarr.json")]
    return chunks[0] if same and len(chunks) == 1 else None


def _parquet(path: Path, refs: dict[str, Any], grids: Grids, arrays: dict[str, VirtualArray]) -> None:
    """Write *refs* in kerchunk's Parquet layout at *path* (a new directory).

    Raises
    ------
    InvalidArgumentError
        An array with missing chunks whose fill does not encode (see :func:`fill_chunk`), or fills of more
        than :data:`FILL_LIMIT` bytes in one file.
    """
    import numpy as np
    import pandas as pd

    metadata: dict[str, Any] = {}
    fields: dict[str, dict[int, Any]] = {}
    sizes = {name: [math.ceil(n / c) for n, c in zip(shape, chunks)] or [1] for name, (shape, chunks) in grids.items()}
    for key, value in refs.items():
        if key == "zarr.json" or key.endswith("/zarr.json"):
            metadata[key] = json.loads(value)
            continue
        field, _, chunk = key.rpartition("/")
        index = [int(i) for i in chunk.split(_SEP)]
        fields.setdefault(field, {})[int(np.ravel_multi_index(index, sizes[field]))] = value
    for name, (shape, chunks) in grids.items():
        metadata[f"{name}/.zarray"] = {"shape": list(shape), "chunks": list(chunks)}
    for name in {k.rsplit("/", 1)[0] for k in metadata if not k.startswith(".z")} - set(grids):
        metadata[f"{name}/.zarray"] = {"shape": [0], "chunks": [1]}  # a group (or the root's key): no chunk
    path.mkdir()
    (path / ".zmetadata").write_text(json.dumps({"metadata": metadata, "record_size": RECORD_SIZE},
                                                separators=(",", ":")))
    for name, entries in fields.items():
        total = math.prod(sizes[name])
        (path / name).mkdir(parents=True, exist_ok=True)
        fill = fill_chunk(arrays[name]) if len(entries) < total else None
        if len(entries) < total and fill is None:
            raise InvalidArgumentError(f"array {name} lacks steps of its group, whose chunks a Parquet reference set "
                                       "holds as chunks of fill values, and its codec does not encode its fill; "
                                       "export the references to JSON (-o refs.json), which leaves them out")
        for record in range(math.ceil(total / RECORD_SIZE)):
            first = record * RECORD_SIZE
            rows = min(RECORD_SIZE, total - first)
            if fill is not None and (rows - sum(first <= n < first + rows for n in entries)) * len(fill) > FILL_LIMIT:
                raise InvalidArgumentError(f"array {name} lacks steps of its group, whose chunks a Parquet reference "
                                           f"set holds as chunks of fill values: more than {FILL_LIMIT} bytes of them in "
                                           "one file; export the references to JSON (-o refs.json), which leaves "
                                           "them out")
            paths = np.full(rows, None, dtype=object)
            offsets = np.zeros(rows, dtype=np.int64)
            lengths = np.zeros(rows, dtype=np.int64)
            raws = np.full(rows, None, dtype=object)
            for n in range(first, first + rows):
                value = entries.get(n)
                if isinstance(value, list):
                    paths[n - first], offsets[n - first], lengths[n - first] = value
                elif isinstance(value, str):
                    raws[n - first] = base64.b64decode(value[len("base64:"):])
                else:
                    raws[n - first] = fill
            df = pd.DataFrame({"path": paths, "offset": offsets, "size": lengths, "raw": raws}, copy=False)
            if df.path.count() / (df.path.nunique() or 1) > 10:  # as kerchunk: repeated paths as categories
                df["path"] = df["path"].astype("category")
            df.to_parquet(path / name / f"refs.{record}.parq", engine="fastparquet", compression="zstd", index=False,
                          stats=False, object_encoding={"raw": "bytes", "path": "utf8"}, has_nulls=["path", "raw"])
