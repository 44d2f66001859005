"""Compressed datasets: chunks encoded by their writers, placed from one exchange, moved with independent I/O.

A dataset made with ``compression=`` (:mod:`sdm.codecs`) is stored as *chunks*: each rank
encodes the boxes it owns (its piece without ghost cells: one box for a Block view, one per
block for BlockCyclic, one per run of consecutive rows for a map; ``chunks=`` cuts them
further) with the dataset's codec pipeline, before any collective call of the dump.  The write then runs the dump's usual
protocol (:mod:`sdm.engine.write`) with one more exchange, an ``allgather`` of every
rank's chunks (box, stored bytes, ``xxh3-64`` of the stored bytes, largest error
measured), so that every rank knows the dataset step's stored size and where each chunk
goes without asking: rank 0 reserves the step's stored bytes as one span (from the space
reserved ahead, or one transaction), the chunks lie in it in rank order, and each rank
writes its own chunks with plain ``pwrite`` calls and syncs them: no collective call
moves compressed bytes.  The step's catalog row keeps the chunks as its extents
(:class:`~sdm.catalog.records.ExtentRecord` with a ``box``), so space accounting,
``sdm verify`` (each chunk's checksum over its stored bytes) and ``sdm gc`` treat them as
any other bytes; the row also keeps the codec, the bytes stored and, for a lossy codec,
the largest absolute error measured at write time (every value checked; a chunk that
breaks its bound is a :class:`~sdm.errors.CompressionBoundError` on every rank and
nothing of the dump is written).

A read finds the chunks that meet each rank's piece (any distribution, any box, any
number of ranks), reads their stored bytes (a verified read checks each chunk's
checksum), decodes them and copies what the piece holds.
"""

from __future__ import annotations

import itertools
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from .. import integrity
from ..errors import IntegrityError, InvalidArgumentError

if TYPE_CHECKING:
    from ..catalog import WriteRecord
    from ..codecs import CompressionSpec
    from ..layout.distribution import Piece
    from ..layout.views import ResolvedView

__all__ = ["METHOD", "Chunks", "ChunkPlan", "spec_of", "check_piece", "encode_piece", "row_fields", "write",
           "read_plan", "read", "stored_sizes"]

METHOD = "posix"  #: the I/O method of a compressed step: each rank writes its own chunks (independent ``pwrite``)

Box = tuple[tuple[int, ...], tuple[int, ...]]  #: ``(starts, counts)`` of a chunk in the global array


def spec_of(text: str) -> "CompressionSpec":
    """The codec spec of a dataset's ``compression`` text (checked; :mod:`sdm.codecs`)."""
    from ..codecs import CompressionSpec

    return CompressionSpec.from_record(text)


@dataclass
class Chunks:
    """This rank's encoded chunks of one dataset step: their boxes, stored bytes, checksums and errors."""

    boxes: list[Box]
    blobs: list[bytes]
    digests: list[int]
    error: float  #: the largest error measured over them (0.0: lossless)

    def meta(self) -> tuple[list[Box], list[int], list[int], float]:
        """What the dump's exchange carries of them (no bytes)."""
        return self.boxes, [len(b) for b in self.blobs], self.digests, self.error


#: The smallest mean chunk (bytes) a view may cut a piece into: below it a codec's frame costs more than it saves
MIN_CHUNK_BYTES = 256


def _runs(indices: np.ndarray) -> list[tuple[int, int, int]]:
    """The runs of consecutive global indices of one dimension of a piece: ``(first local position, length,
    first global index)``, in order (*indices* ascending, as a piece holds them)."""
    idx = np.asarray(indices, dtype=np.int64)
    if idx.size == 0:
        return []
    cuts = np.flatnonzero(np.diff(idx) != 1) + 1
    starts = np.concatenate(([0], cuts))
    ends = np.concatenate((cuts, [idx.size]))
    return [(int(a), int(b - a), int(idx[a])) for a, b in zip(starts, ends)]


def check_piece(piece: "Piece", view: Any, name: str, itemsize: int) -> list[list[tuple[int, int, int]]]:
    """The runs of each dimension of a piece (:func:`_runs`): its boxes are their products.

    Raises
    ------
    InvalidArgumentError
        A map that leaves rows unwritten (a compressed step is written whole), or a view that
        cuts the piece into boxes of fewer than :data:`MIN_CHUNK_BYTES` bytes on average.
    """
    from ..layout.maparray import MapArray

    if isinstance(view, MapArray) and not view.coverage:
        raise InvalidArgumentError(
            f"dataset {name!r} is compressed, and its map leaves rows unwritten (coverage=False): a compressed step "
            "is written whole; give every row to some rank")
    runs = [_runs(idx) for idx in piece.indices]
    boxes = math.prod(len(r) for r in runs)
    nbytes = math.prod(piece.counts) * itemsize
    if boxes > 1 and nbytes / boxes < MIN_CHUNK_BYTES:  # one box: the piece itself, however small
        raise InvalidArgumentError(
            f"dataset {name!r} is compressed, and its view cuts this rank's piece into {boxes} boxes of "
            f"{nbytes / boxes:.0f} bytes on average (at least {MIN_CHUNK_BYTES} make a chunk worth a codec's "
            "frame): write it with a view of larger boxes (sdm.Block, or BlockCyclic with larger blocks), and read "
            "it back with any view")
    return runs


def _local(run: tuple[int, int, int], box_start: int, count: int) -> np.ndarray:
    """The local positions, in its dimension of a piece, of *count* global indices from *box_start* in *run*."""
    first = run[0] + (box_start - run[2])
    return np.arange(first, first + count, dtype=np.int64)


def tiles(starts: Sequence[int], counts: Sequence[int], chunks: Sequence[int] | None) -> list[Box]:
    """The chunks of a box: the box itself (*chunks* None), else the box cut along the multiples of *chunks*
    in every dimension (so that writers whose boxes meet cut the array along one grid), in C order."""
    if chunks is None:
        return [(tuple(int(s) for s in starts), tuple(int(c) for c in counts))]
    per_dim = []
    for s, n, c in zip(starts, counts, chunks):
        edges = [int(s), *range((int(s) // c + 1) * c, int(s) + int(n), c), int(s) + int(n)]
        per_dim.append([(a, b - a) for a, b in zip(edges, edges[1:])])
    return [(tuple(p[0] for p in part), tuple(p[1] for p in part)) for part in itertools.product(*per_dim)]


def encode_piece(spec: "CompressionSpec", view: "ResolvedView", arr: np.ndarray, name: str,
                 checksum: bool, chunks: Sequence[int] | None = None) -> Chunks:
    """Encode this rank's piece of one dataset step as chunks: each box of consecutive indices it owns
    (:func:`check_piece`; one for a Block view), cut by :func:`tiles`; none when it owns no element.

    Raises
    ------
    InvalidArgumentError
        A view :func:`check_piece` refuses.
    CompressionSpecError, CompressionBoundError
        The codec refuses a chunk, or a lossy codec breaks its bound.
    """
    from ..codecs import pipeline_for

    piece = view.piece
    out = Chunks([], [], [], 0.0)
    if math.prod(piece.counts) == 0:
        return out
    runs = check_piece(piece, view.dist, name, view.dtype.itemsize)
    pipeline = pipeline_for(spec)
    for part in itertools.product(*runs):
        for box in tiles([r[2] for r in part], [r[1] for r in part], chunks):
            local = [_local(r, s, c) for r, s, c in zip(part, box[0], box[1])]
            values = arr[_as_slices(_memory(piece, local))]
            encoded = pipeline.encode_measured(values, view.order)  # type: ignore[arg-type]
            out.boxes.append(box)
            out.blobs.append(encoded.data)
            out.digests.append(integrity.xxh3(encoded.data) if checksum else 0)
            out.error = max(out.error, float(encoded.error))
    return out


def stored_sizes(metas: Sequence[Sequence[Any]], count: int) -> tuple[list[int], list[list[int]]]:
    """From every rank's chunk metadata of a dump (``metas[rank][i]``: :meth:`Chunks.meta` of dataset *i*, or None
    for a dataset not compressed): each dataset's stored bytes and each rank's first byte in them."""
    totals = [0] * count
    starts: list[list[int]] = [[0] * len(metas) for _ in range(count)]
    for i in range(count):
        at = 0
        for r, mine in enumerate(metas):
            starts[i][r] = at
            if mine[i] is not None:
                at += sum(mine[i][1])
        totals[i] = at
    return totals, starts


def write(backend: Any, path: Path, offset: int, chunks: Chunks, written: dict[Path, None]) -> float:
    """Write this rank's chunks at *offset* on, one after the other (independent ``pwrite``); the seconds taken.

    *written* receives *path* (the caller syncs each file it wrote once).
    """
    t0 = time.perf_counter()
    at = int(offset)
    for blob in chunks.blobs:
        if blob:
            backend.write(path, blob, at, what="a compressed chunk of")
        at += len(blob)
    if chunks.blobs:
        written[path] = None
    return time.perf_counter() - t0


def row_fields(spec_text: str, rel: str, offset: int, metas: Sequence[Sequence[Any]], i: int,
               checksum: bool) -> dict[str, Any]:
    """What a compressed step's catalog row says besides a plain row's: its checksum's algorithm, its codec,
    stored bytes, largest error and chunks (extents with boxes, in rank order)."""
    chunks, digests, errors, at, start = [], [], [], int(offset), 0
    for mine in metas:
        if mine[i] is None:
            continue
        boxes, sizes, sums, error = mine[i]
        errors.append(float(error))
        for box, nbytes, digest in zip(boxes, sizes, sums):
            chunks.append(dict(path=rel, offset=at, nbytes=int(nbytes), start=start,
                               checksum=integrity.to_hex(int(digest)) if checksum else "",
                               checksum_algo=integrity.XXH3 if checksum else "none",
                               box=(tuple(box[0]), tuple(box[1]))))
            digests.append(int(digest))
            at += int(nbytes)
            start += int(nbytes)
    spec = spec_of(spec_text)
    return dict(
        checksum=integrity.extents_checksum(digests) if checksum else "",
        checksum_algo=integrity.EXTENTS if checksum else "none",
        extents=chunks, codec=spec_text, stored_nbytes=at - int(offset),
        max_error=max(errors, default=0.0) if spec.lossy else None,
    )


@dataclass(frozen=True)
class ChunkPlan:
    """Rank 0's plan of a compressed step's read, handed to every rank: the codec and each chunk's
    ``(plan path, offset, stored bytes, box, checksum)``."""

    codec: str
    chunks: tuple[tuple[str, int, int, Box, str], ...]


def read_plan(g: Any, name: str, step: int, w: "WriteRecord") -> ChunkPlan:
    """Rank 0: where each chunk of a compressed row is (its file on the fast tier, or its verified archive copy)."""
    from ..storage.confine import row_record

    held = None
    missing = sorted({e.path for e in w.extents
                      if not g._absolute(e.path, row_record(g.session.run_id, g.name, name, step)).exists()})
    if missing:
        from ..catalog.tiers import copies

        held = copies(g.session.open_catalog(), g.session.run_id, missing)
    out = []
    for k, e in enumerate(w.extents):
        if e.box is None:
            raise IntegrityError(f"chunk {k} of step {step} of dataset {name!r} has no box in the catalog: the row "
                                 "was changed after SDM wrote it")
        path, offset = g._locate_span(name, step, e.path, e.offset, e.nbytes, held)
        out.append((path, offset, e.nbytes, e.box, e.checksum))
    assert w.codec is not None
    return ChunkPlan(w.codec, tuple(out))


def _positions(piece: "Piece", box: Box) -> tuple[list[np.ndarray], list[np.ndarray]] | None:
    """Where a chunk's *box* meets a piece: per dimension the piece's local positions and the chunk's
    positions of the same global indices (None when they do not meet)."""
    local, inside = [], []
    for idx, s, c in zip(piece.indices, box[0], box[1]):
        hit = np.flatnonzero((idx >= s) & (idx < s + c))
        if hit.size == 0:
            return None
        local.append(hit)
        inside.append(idx[hit] - s)
    return local, inside


def _memory(piece: "Piece", local: list[np.ndarray]) -> tuple[np.ndarray, ...]:
    """The local array's indices of the piece's local positions *local* (ghost cells before them; a map's rows)."""
    out = []
    for d, pos in enumerate(local):
        if d == 0 and piece.kind == "map" and piece.memory_rows is not None:
            out.append(np.asarray(piece.memory_rows)[pos])
        else:
            out.append(pos + (piece.ghosts[d][0] if piece.ghosts else 0))
    return tuple(out)


def _as_slices(index: tuple[np.ndarray, ...]) -> tuple[Any, ...]:
    """*index* as slices where each dimension's positions are consecutive (a box: a plain copy), else arrays."""
    out: list[Any] = []
    for pos in index:
        if pos.size and int(pos[-1]) - int(pos[0]) + 1 == pos.size:
            out.append(slice(int(pos[0]), int(pos[-1]) + 1))
        else:
            out.append(pos)
    if all(isinstance(x, slice) for x in out):
        return tuple(out)
    return np.ix_(*[np.arange(x.start, x.stop) if isinstance(x, slice) else x for x in out])


def read(g: Any, name: str, step: int, view: "ResolvedView", arr: np.ndarray, plan: ChunkPlan,
         verify: bool) -> float:
    """Fill this rank's piece of *arr* from the chunks that meet it (independent reads); the seconds taken.

    Raises
    ------
    IntegrityError
        (*verify*) a chunk whose stored bytes do not match its checksum, or a chunk that does
        not decode (damaged bytes), named by its number and box.
    """
    t0 = time.perf_counter()
    rec = g.dataset(name)
    spec = spec_of(plan.codec)
    from ..codecs import pipeline_for

    pipeline = pipeline_for(spec)
    piece = view.piece
    dtype = view.dtype
    for k, (path, offset, nbytes, box, checksum) in enumerate(plan.chunks):
        where = _positions(piece, box)
        if where is None:
            continue
        backend, key, _copy = g._backend_of(path)
        buf = bytearray(int(nbytes))
        if nbytes:
            backend.read_exactly(key, int(offset), buf)
        what = f"chunk {k} (box starts {list(box[0])}, counts {list(box[1])}) of step {step} of dataset {name!r}"
        if verify and checksum and integrity.to_hex(integrity.xxh3(bytes(buf))) != checksum:
            raise IntegrityError(f"{what}: its stored bytes do not match their checksum {checksum} (xxh3-64): the "
                                 f"file {path} was changed after SDM wrote it")
        try:
            values = pipeline.decode(buf, tuple(box[1]), dtype, rec.order)
        except IntegrityError as exc:
            raise IntegrityError(f"{what} does not decode: {exc}") from None
        local, inside = where
        arr[_as_slices(_memory(piece, local))] = values[_as_slices(tuple(inside))]
    return time.perf_counter() - t0


def box_text(box: Box) -> str:
    """A chunk's box as ``sdm show`` prints it."""
    return json.dumps([list(box[0]), list(box[1])])
