"""Data-file trailers: a level-2 or level-3 file copied alone still says what it holds.

When a writing session closes, rank 0 appends to every level-2 and level-3 data file
the session wrote a *trailer*: a JSON index of everything committed in the file (the
run, the group, each dataset's dtype, shape, order and data view, and each step's
offset, length and checksum), followed by a fixed 32-byte footer::

    offset  size  field (little-endian)
    0       8     magic b"SDMTRAIL"
    8       8     uint64  offset of the JSON in the file
    16      8     uint64  length of the JSON in bytes
    24      4     uint32  CRC-32 (zlib) of the JSON bytes
    28      4     uint32  trailer format version (1)

The trailer's space is reserved through the catalog like a write's, so its bytes are
never overwritten: a later session appends after it and writes a new trailer at its
own close, and the older one, now inside the file, lists a prefix of what the newest
lists (``sdm gc`` reclaims it).  The run's meta-file stays the authority: a session
that crashes writes no trailer, and a file's last trailer then describes the writes
committed up to the session before.  ``sdm describe FILE`` prints a trailer; the format
is documented in ``docs/format.md``.
"""

from __future__ import annotations

import errno
import json
import math
import os
import struct
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from ..errors import IntegrityError, StorageError

if TYPE_CHECKING:
    from .backends.base import Backend

__all__ = ["MAGIC", "FOOTER", "VERSION", "body_of", "encode", "write", "index_of", "read_trailer", "read_array", "read_step",
           "trailer_span"]

MAGIC = b"SDMTRAIL"
#: The footer's layout (struct format): magic, JSON offset, JSON length, CRC-32, version.
FOOTER = struct.Struct("<8sQQII")
VERSION = 1


def body_of(index: dict[str, Any]) -> bytes:
    """The JSON of *index* as a trailer holds it (its length plus ``FOOTER.size`` is the trailer's size)."""
    return json.dumps(index, separators=(",", ":"), ensure_ascii=False).encode()


def encode(index: dict[str, Any] | bytes, offset: int) -> bytes:
    """The trailer of *index* (JSON, or the JSON's bytes from :func:`body_of`, then the footer) to be written
    at *offset* of its file."""
    body = index if isinstance(index, bytes) else body_of(index)
    return body + FOOTER.pack(MAGIC, offset, len(body), zlib.crc32(body) & 0xFFFFFFFF, VERSION)


def write(path: Path, offset: int, index: dict[str, Any] | bytes, *, sync: bool,
          files: "Backend | None" = None) -> None:
    """Write the trailer of *index* (or of its JSON's bytes, :func:`body_of`) at *offset* of an existing data
    file (space reserved by the caller).

    The bytes go through the storage seam: *files* (by default the fast tier's files of
    this process, :class:`~sdm.storage.backends.posix.PosixFiles`: the caller is one rank,
    so nothing collective); with *sync*, this process syncs them.

    Raises
    ------
    StorageError
        The file does not exist (a trailer never makes one), or the write or the sync failed.
    """
    from .backends.posix import PosixFiles

    backend = files if files is not None else PosixFiles()
    blob = encode(index, offset)
    if backend.size(path) is None:
        raise StorageError(f"cannot write the trailer of {path}: {os.strerror(errno.ENOENT)}", errno.ENOENT)
    backend.write(path, blob, offset, what="the trailer of")
    if sync:
        backend.sync(path)


def _footer(fd: int, size: int) -> tuple[int, int, int] | None:
    """``(json offset, json length, crc)`` of a well-formed footer ending at *size*, else None."""
    if size < FOOTER.size:
        return None
    raw = os.pread(fd, FOOTER.size, size - FOOTER.size)
    magic, start, length, crc, version = FOOTER.unpack(raw)
    if magic != MAGIC or version != VERSION or start + length + FOOTER.size != size:
        return None
    return start, length, crc


def trailer_span(path: Path) -> tuple[int, int] | None:
    """The bytes ``(start, end)`` of a valid trailer at the very end of a file, or None.

    Used by ``sdm verify`` and ``sdm gc``: the file's last trailer is SDM's own, never
    unreferenced bytes.
    """
    from ..file_formats import Where, open_regular

    try:
        fd = open_regular(path, Where(str(path)))
    except (OSError, IntegrityError):
        return None
    try:
        size = os.fstat(fd).st_size
        found = _footer(fd, size)
        if found is None:
            return None
        start, length, crc = found
        if zlib.crc32(os.pread(fd, length, start)) & 0xFFFFFFFF != crc:
            return None
        return start, size
    finally:
        os.close(fd)


#: What to do about a trailer that is not what SDM writes.
_ADVICE = ("the file was changed after SDM wrote it, or is not an SDM data file; the run directory's meta-file "
           ".sdm-meta.jsonl describes every committed write")


def read_trailer(path: str | Path) -> dict[str, Any]:
    """The index a data file's trailer holds (see the module documentation), checked.

    The JSON is parsed with bounded nesting and checked against
    :data:`sdm.file_formats.TRAILER` (or :data:`~sdm.file_formats.SUPERFILE` for a
    superfile's index): every member's type and range, dtypes SDM stores, every write
    within the bytes before the trailer and of its dataset's size
    (:func:`sdm.file_formats.check_trailer`).

    Returns
    -------
    dict
        ``format``, ``application``, ``run``, ``catalog``, ``dir``, ``file``, ``group``,
        ``level``, ``kind``, ``steps_per_file``, ``datasets`` (``{name: {dtype, shape,
        order, distribution}}``), ``writes`` (``[{dataset, step, offset, nbytes,
        checksum, algo, version}]``, by offset), ``closed_at``, ``sdm``, and
        ``described_bytes``: the file's size when the trailer was written (bytes past
        the trailer were written later).  A superfile's index holds ``format``,
        ``superfile`` (true), ``run`` and ``members`` (``[{path, offset, size,
        checksum}]``) instead, and ``described_bytes``.

    Raises
    ------
    StorageError
        The file cannot be read.
    IntegrityError
        The file has no trailer at its end (written by a session that did not close, or
        not an SDM level-2/3 file), or its trailer is damaged, or it holds what SDM does
        not write; the message says which, naming the member.
    """
    from ..file_formats import Where, check_trailer, load_object, open_regular

    path = Path(path)
    try:
        fd = open_regular(path, Where(str(path), "give a level-2 or level-3 data file"))
    except OSError as exc:
        raise StorageError(f"cannot read {path}: {exc.strerror}", exc.errno) from None
    try:
        size = os.fstat(fd).st_size
        found = _footer(fd, size)
        if found is None:
            tail = os.pread(fd, FOOTER.size, max(0, size - FOOTER.size))
            why = ("it ends with a trailer footer that does not fit the file's size" if tail.startswith(MAGIC)
                   else "it does not end with an SDM trailer")
            raise IntegrityError(
                f"{path} does not describe itself: {why} (a level-1 file, a session that did not close, or not an "
                f"SDM data file); the run directory's meta-file .sdm-meta.jsonl describes every committed write"
            )
        start, length, crc = found  # start + length + footer == size: the read is bounded by the file
        body = os.pread(fd, length, start)
    finally:
        os.close(fd)
    if zlib.crc32(body) & 0xFFFFFFFF != crc:
        raise IntegrityError(f"{path}: the trailer at byte {start} is damaged (its CRC-32 does not match); "
                             "the run directory's meta-file .sdm-meta.jsonl describes every committed write")
    where = Where(f"{path} (trailer at byte {start})", _ADVICE)
    index = check_trailer(load_object(body, where, "the trailer"), where, start)
    index["described_bytes"] = start
    return index


def index_of(run: dict[str, Any], group: Any, path: str, writes: Iterable[tuple[str, Any]],
             closed_at: str) -> dict[str, Any]:
    """The index of one file: the run's facts, its group (a GroupRecord) and the writes in it.

    *writes* yields ``(dataset name, WriteRecord)`` of the file's committed rows.
    """
    from .._version import __version__

    rows = sorted(writes, key=lambda item: item[1].offset)
    names = {name for name, _ in rows}
    return {
        "format": VERSION, **run, "file": path, "group": group.name, "level": group.level, "kind": group.kind,
        "steps_per_file": group.steps_per_file,
        "datasets": {d.name: {"dtype": d.dtype, "shape": list(d.shape), "order": d.order,
                              "distribution": d.distribution} for d in group.datasets if d.name in names},
        "writes": [{"dataset": name, "step": w.step, "offset": w.offset, "nbytes": w.nbytes, "checksum": w.checksum,
                    "algo": w.checksum_algo, "version": w.version, **_compressed(w)} for name, w in rows],
        "closed_at": closed_at, "sdm": __version__,
    }


def _compressed(w: Any) -> dict[str, Any]:
    """What a trailer says of a compressed step besides a raw one's: its codec, stored bytes and chunks."""
    if w.codec is None:
        return {}
    return {"codec": w.codec, "stored": int(w.stored_nbytes or 0),
            "chunks": [{"offset": e.offset, "nbytes": e.nbytes, "checksum": e.checksum, "starts": list(e.box[0]),
                        "counts": list(e.box[1])} for e in w.extents]}


def _read_chunks(path: str | Path, spec: dict[str, Any], write: dict[str, Any], verify: bool) -> Any:
    """A compressed step of a data file: its chunks read, checked (*verify*) and decoded into the array."""
    import numpy as np

    from .. import integrity
    from ..codecs import CompressionSpec, pipeline_for
    from ..dtypes import from_text

    dtype, order = from_text(spec["dtype"]), spec["order"]
    out = np.zeros(spec["shape"], dtype=dtype, order=order)
    pipeline = pipeline_for(CompressionSpec.from_record(write["codec"]))
    what = f"step {write['step']} of {write['dataset']!r} in {path}"
    try:
        with open(path, "rb") as f:
            for k, c in enumerate(write["chunks"]):
                f.seek(c["offset"])
                raw = f.read(c["nbytes"])
                if len(raw) != c["nbytes"]:
                    raise IntegrityError(f"{path} ends before chunk {k} of step {write['step']} of {write['dataset']!r} "
                                         f"(bytes {c['offset']}..{c['offset'] + c['nbytes']})")
                if verify and c["checksum"] and integrity.to_hex(integrity.xxh3(raw)) != c["checksum"]:
                    raise IntegrityError(f"chunk {k} of {what} does not match its checksum xxh3-64:{c['checksum']}")
                box = tuple(slice(s, s + n) for s, n in zip(c["starts"], c["counts"]))
                out[box] = pipeline.decode(raw, tuple(c["counts"]), dtype, order)
    except OSError as exc:
        raise StorageError(f"cannot read {path}: {exc.strerror}", exc.errno) from None
    return out


def read_array(path: str | Path, dataset: str, step: int, *, verify: bool = True) -> Any:
    """Read one step of a dataset from a data file alone, through its trailer (no catalog, no MPI).

    Parameters
    ----------
    path : str or Path
        A level-2 or level-3 data file (copied anywhere).
    dataset : str
    step : int
    verify : bool
        Check the bytes against the checksum the trailer records.

    Returns
    -------
    numpy.ndarray
        The whole array, of the stored dtype, shape and order; for a ranked dataset,
        every rank's rows in rank order, of shape ``(total rows, *row shape)``.

    Raises
    ------
    IntegrityError
        No trailer, a damaged trailer, or (``verify``) bytes that do not match their checksum.
    DatasetNotFoundError, StepNotFoundError
        The trailer lists no such dataset or step.
    """
    from ..errors import DatasetNotFoundError, StepNotFoundError

    index = read_trailer(path)
    if index.get("superfile"):
        raise DatasetNotFoundError(f"{path} is a superfile (files packed by `sdm migrate --pack-below`), not a data "
                                   f"file: it holds no dataset {dataset!r}")
    if dataset not in index["datasets"]:
        raise DatasetNotFoundError(f"{path} holds no dataset {dataset!r}; it holds {sorted(index['datasets'])}")
    found = [w for w in index["writes"] if w["dataset"] == dataset and w["step"] == step]
    if not found:
        steps = sorted(w["step"] for w in index["writes"] if w["dataset"] == dataset)
        raise StepNotFoundError(f"{path} holds no step {step} of dataset {dataset!r}; its steps are {steps}")
    return read_step(path, index, found[0], verify=verify)


def read_step(path: str | Path, index: dict[str, Any], write: dict[str, Any], *, verify: bool = True) -> Any:
    """One step of a data file, given its checked trailer *index* and one of its *write* entries.

    What :func:`read_array` does after finding the write (``sdm describe --verify`` reads
    every step of one trailer with it). The bytes read are exactly the write's (the
    trailer's checks bound them by the file's size).

    Raises
    ------
    IntegrityError
        The file ends before the step, (``verify``) its bytes do not match their
        checksum, or a ranked step's header contradicts the trailer.
    StorageError
        The file cannot be read.
    """
    import numpy as np

    from .. import integrity
    from ..dtypes import from_text

    dataset, step, offset, nbytes = write["dataset"], write["step"], write["offset"], write["nbytes"]
    spec = index["datasets"][dataset]
    if "codec" in write:  # compressed: its chunks (sdm.engine.compressed)
        return _read_chunks(path, spec, write, verify)
    dtype = from_text(spec["dtype"])
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            raw = f.read(nbytes)
    except OSError as exc:
        raise StorageError(f"cannot read {path}: {exc.strerror}", exc.errno) from None
    if len(raw) != nbytes:
        raise IntegrityError(f"{path} ends before step {step} of {dataset!r} (bytes {offset}..{offset + nbytes})")
    if verify and write["checksum"] and integrity.checksum_of_bytes(raw, dtype, write["algo"]) != write["checksum"]:
        raise IntegrityError(f"step {step} of {dataset!r} in {path} does not match its checksum "
                             f"{write['algo']}:{write['checksum']}")
    if (spec.get("distribution") or {}).get("kind") == "ranked":  # a header of counts, then every rank's rows
        from .sections import parse_header

        what = f"step {step} of {dataset!r} in {path}"
        head = parse_header(raw, what)
        row_bytes = dtype.itemsize * math.prod(spec["shape"])
        if head.row_bytes != row_bytes or head.nbytes != nbytes:
            raise IntegrityError(f"{what}: its ranked-section header says {head.total} rows of {head.row_bytes} bytes "
                                 f"after {head.header} header bytes, but the trailer says {nbytes} bytes in all and "
                                 f"rows of {row_bytes} bytes (shape {spec['shape']} of {spec['dtype']})")
        return np.frombuffer(raw, dtype=dtype, offset=head.header).reshape(head.total, *spec["shape"]).copy()
    return np.frombuffer(raw, dtype=dtype).reshape(spec["shape"], order=spec["order"]).copy(order=spec["order"])
