"""Writing and reading ranked sections (datasets under :class:`sdm.layout.ranked.Ranked`).

One step of a ranked dataset is one write row of the catalog: at its offset a header
(:func:`header_bytes`, documented byte by byte in ``docs/format.md``) and then the rows
of every rank in rank order, in the dataset's dtype; the row's ``nbytes`` is the header
and the rows together, so it changes from step to step.

A write, as the data flows: local checks on every rank and rank 0's plan -> the opening
exchange of :meth:`sdm.engine.state.GroupState._agree_call`, whose layout statistics are every rank's row
counts (so a step with the counts of an earlier one moves no more than a block write)
-> rank 0 reserves header and rows through the catalog, one ``Bcast`` -> rank 0 writes
the header, every rank its rows at the prefix sum of the counts before it, in one
``Write_at_all`` -> sync -> the closing reduction of errors, timings and checksum
shares -> the commit of :meth:`sdm.engine.state.GroupState._commit_dump`.  The checksum covers the stored
bytes, header included: each rank's share is of its rows at their word positions, rank
0's also of the header, so ``sdm verify`` checks a ranked step as any other.

A read: rank 0 looks the step up and reads the header; the opening exchange carries
both to every rank; each rank reads its rows with one ``Read_at_all``; with
verification every rank also computes the share of its part of a partition of the
whole step (its own rows, or its balanced share: the rows it read when it asked for no
range, else a separate independent read), so the stored checksum is checked whole.
"""

from __future__ import annotations

import math
import struct
import time
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np
from mpi4py import MPI

from .. import _validate as check
from .. import integrity
from .._collective import Failure, agree, capture, root_call
from ..catalog.changes import DistributionSet
from ..convert import describe
from ..dtypes import check_dtype, from_text
from ..errors import (
    DistributionError,
    IntegrityError,
    InvalidArgumentError,
    InvalidNameError,
    LocalArrayError,
    SDMError,
    StorageError,
)
from ..layout.ranked import KIND
from ..storage.sections import FIXED, MAGIC, RankedCounts, header_bytes, header_length, parse_header
from ..planner import choose_method
from ..storage import appends
from ..io.remote import put_collective
from ..storage.failures import storage_error
from ..storage.backends.base import CollectiveHandle
from .background import check_wait
from .checks import WRITE_CALL

if TYPE_CHECKING:
    from .placement import Placing
    from .state import GroupState as Group

__all__ = ["MAGIC", "FIXED", "RankedCounts", "header_bytes", "header_length", "parse_header", "stream_share",
           "set_view", "write", "read", "counts"]

_DECISION = SimpleNamespace(method=SimpleNamespace(name="collective"), reason="ranked section (Write_at_all)")
_ARCHIVE_DECISION = SimpleNamespace(method=SimpleNamespace(name="remote-collective"),
                                    reason="ranked section on the archive tier: aggregators assemble the object")


def stream_share(raw: np.ndarray, start: int, itemsize: int, algorithm: str) -> int:
    """The checksum share of contiguous stored bytes *raw* that start *start* bytes into a write row.

    The words are those of :mod:`sdm.integrity` for elements of *itemsize* bytes, at
    their positions in the whole row (``start`` is a multiple of the word size).
    """
    algorithm = integrity.canonical(algorithm)
    w = integrity.word_size(itemsize)
    words = np.ascontiguousarray(raw).reshape(-1).view(np.uint8).view(np.dtype(f"<u{w}"))
    if words.size == 0:
        return 0
    first = start // w
    if algorithm == integrity.MIX64:
        span: Any = range(first, first + words.size)  # a range: no index array (partial_mix64 takes one)
        return integrity.partial_mix64(words, (span,), (first + words.size,), "C", increasing=True)
    index = np.arange(first, first + words.size, dtype=np.int64)
    return integrity.partial_sum64(words, (index,), (first + words.size,), "C")


# ----------------------------------------------------------------------------- view


def set_view(g: "Group", names: Sequence[str]) -> None:
    """``data_view(Ranked(), names)`` (collective, after every rank agreed to the view and the names)."""
    s = g.session

    def resolve() -> None:
        for n in names:
            rec = g.dataset(n)
            if rec.order == "F" and len(rec.shape) > 1:
                raise DistributionError(f"dataset {n!r} is stored in Fortran order; ranked rows need C order")
            if g._steps[n] and n not in g._ranked:
                raise DistributionError(f"dataset {n!r} holds steps written as one global array; it cannot "
                                        "become ranked (give ranked rows a dataset of their own)")

    _, failure = capture(resolve, rank=s.rank)
    agree(s.comm, failure)
    g._drop_views(names)
    g._ranked.update(names)
    if s.mode != "r":
        root_call(s.comm, s.record, DistributionSet(tuple(g.dataset(n).id for n in names), {"kind": KIND}))


# ----------------------------------------------------------------------------- write


def _rows_of(array: Any, name: str, row: tuple[int, ...], dtype: np.dtype, rank: int) -> np.ndarray:
    """This rank's local rows, checked: a C-contiguous ``(n, *row)`` array of the stored dtype."""
    if not isinstance(array, np.ndarray):
        try:
            array = np.asarray(array)
        except (TypeError, ValueError, OverflowError):
            array = None
    if array is None or array.dtype.hasobject:
        raise LocalArrayError(f"the local rows of ranked dataset {name!r} on rank {rank} must be a numpy array of "
                              f"{describe(dtype)}")
    if array.dtype != dtype:
        raise LocalArrayError(f"ranked dataset {name!r} stores {describe(dtype)} but the local rows on rank {rank} are "
                              f"{describe(array.dtype)}; ranked rows are written in the stored dtype")
    if array.ndim != 1 + len(row) or tuple(array.shape[1:]) != row:
        want = "(n, " + ", ".join(map(str, row)) + ")" if row else "(n,)"
        raise LocalArrayError(f"ranked dataset {name!r} takes local rows of shape {want} on rank {rank}, "
                              f"got {array.shape}")
    return np.ascontiguousarray(array)


def write(g: "Placing", step: int, arrays: Mapping[str, Any], *, overwrite: bool, method: str | None,
          casting: str | None, wait: Any = True) -> None:
    """Write one step of ranked datasets, every rank its own rows (collective; see :meth:`sdm.Group.write_step`)."""
    s = g.session
    names = list(arrays)

    def local() -> tuple[list[np.ndarray], list[tuple[int, ...]]]:
        check_wait(wait)
        check.integer(step, "time step")
        if not names or len(set(names)) != len(names):
            raise InvalidNameError(f"write_step needs distinct dataset names, got {names}")
        records = [g.dataset(n) for n in names]
        plain = [n for n in names if n not in g._ranked]
        if plain:
            raise InvalidArgumentError(f"write_step cannot write ranked datasets "
                                       f"{[n for n in names if n in g._ranked]} and other datasets {plain} in one "
                                       "dump; write them in separate calls")
        check.flag(overwrite, "overwrite")
        check.text(method, "method", optional=True)
        g._check_write_method(method)
        if casting is not None:
            raise InvalidArgumentError(f"casting= is not supported for ranked datasets ({names}); give the rows in "
                                       "the stored dtype")
        rows = [_rows_of(arrays[n], n, tuple(r.shape), from_text(r.dtype), s.rank) for n, r in zip(names, records)]
        return rows, [r.shape[:1] for r in rows]

    prepared, failure = capture(local, rank=s.rank)
    plan = None
    if s.rank == 0:
        failure = s._settle() or failure
        if failure is None:
            plan, failure = capture(g._plan_write, names, int(step), overwrite, rank=0)
    stats = ("ranked", tuple(c[0] for c in prepared[1])) if prepared else None
    call = (KIND, tuple(names), step if isinstance(step, int) else repr(step), bool(overwrite), repr(method),
            g._pool.signature())  # the chunks reserved ahead, from which ranks may place the dump alike
    _, statsets = g._agree_call("write", call, failure, plan, stats, names=("view", *WRITE_CALL))
    rows, _ = prepared  # type: ignore[misc]
    layouts = []
    for i, name in enumerate(names):
        rec = g.dataset(name)
        itemsize = from_text(rec.dtype).itemsize
        rb = itemsize * math.prod(rec.shape)
        everyone = [int(st[1][i]) for st in statsets]
        layouts.append((header_bytes(everyone, rb, itemsize), rb, sum(everyone[:s.rank]), itemsize))
    sizes = [len(h) + rb * int(sum(st[1][i] for st in statsets)) for i, (h, rb, _, _) in enumerate(layouts)]
    places = g._reserve_everywhere(names, int(step), plan, sizes)
    seconds = [0.0] * len(names)
    shares = [0] * len(names)
    failure = None
    digests = [""] * len(names)
    for i, (arr, (head, rb, before, itemsize), (rel, offset, _, _)) in enumerate(zip(rows, layouts, places)):
        if g.record.archive is not None:  # an object: assembled by aggregators (sdm.io.remote)
            moved, f = _put_object(g, rel, offset + sizes[i], offset, head, len(head) + before * rb, arr, digests, i)
        else:
            moved, f = _move(g, g._absolute(rel), offset, head, len(head) + before * rb, arr, True)
        seconds[i] = moved
        failure = failure or f
        if s.checksum and failure is None:
            share, f = capture(_write_share, head, arr, len(head) + before * rb, itemsize, s.rank, rank=s.rank)
            shares[i], failure = share or 0, f
    try:
        slowest, sums = g._closing(failure, seconds, shares)
    except SDMError:
        s.files.reset_views()
        raise
    checksums = [integrity.to_hex(int(x)) if s.checksum else "" for x in sums]
    decision = _ARCHIVE_DECISION if g.record.archive is not None else _DECISION
    g._commit_dump(names, int(step), places, checksums, [decision] * len(names), [float(x) for x in slowest],
                   overwrite, sizes, digests if g.record.archive is not None else None)


def _write_share(head: bytes, arr: np.ndarray, start: int, itemsize: int, rank: int) -> int:
    """This rank's checksum share of a step: its rows, and on rank 0 the header."""
    share = stream_share(arr, start, itemsize, integrity.ALGORITHM)
    if rank == 0:
        share += stream_share(np.frombuffer(head, dtype=np.uint8), 0, itemsize, integrity.ALGORITHM)
    return integrity.combine([share])


def _byte_view(fh: CollectiveHandle) -> None:
    """Give the open file a plain byte view (collective); kept while no other view is set."""
    fh.set_view(0, MPI.BYTE, MPI.BYTE, key=("bytes",), extent=1, elements=1)


def _move(g: "Group", path: Path, offset: int, head: bytes | None, at: int, arr: np.ndarray, writing: bool
          ) -> tuple[float, Failure | None]:
    """Write (rank 0: *head* too) or read this rank's rows at byte *at* of the step (collective).

    Every collective call is made on every rank even when an earlier one failed here;
    returns the seconds taken and this rank's failure (the caller's closing exchange
    agrees on it).
    """
    s = g.session
    t0 = time.perf_counter()
    failure: Failure | None = None
    fh = None
    try:
        fh = s.files.open(path, cache=appends(g.level))
        _byte_view(fh)
        buf = [arr.reshape(-1).view(np.uint8) if arr.size else np.zeros(0, np.uint8), MPI.BYTE]
        try:
            if writing:
                if s.rank == 0 and head:
                    fh.write_at(offset, [head, MPI.BYTE])
                fh.write_at_all(offset + at, buf)
            else:
                fh.read_at_all(offset + at, buf)
        except MPI.Exception as exc:
            failure = Failure(storage_error(exc, f"MPI-IO {'write' if writing else 'read'} of {path} failed", path,
                                            needed=int(arr.nbytes) if writing else None), s.rank)
        if writing and s.sync:
            failure = s.files.sync_unagreed(path, fh) or failure
    except SDMError as exc:  # the open or the view: raised alike on every rank by the file cache
        failure = Failure(exc, s.rank)
    except MPI.Exception as exc:
        failure = Failure(StorageError(f"cannot set the view of {path}: {exc.Get_error_string()}"), s.rank)
    finally:
        if fh is not None:
            s.files.release(path, fh)
    return time.perf_counter() - t0, failure


# ----------------------------------------------------------------------------- read


def _plan(g: "Group", name: str, step: int) -> tuple[str, int, str, str, RankedCounts, bytes]:
    """Rank 0: where the step is (a file, or an object on the archive tier), its checksum, its header (parsed and raw)."""
    rel, offset, checksum, algorithm = g._plan_read(name, step)
    backend, key, _ = g._backend_of(rel)
    what = f"dataset {name!r} step {step} in {rel.partition('#')[0]}"
    try:
        (raw,) = backend.read(key, [(offset, FIXED)])
        if len(raw) == FIXED:
            length = struct.unpack_from("<Q", raw, 8)[0]
            raw += backend.read(key, [(offset + FIXED, max(0, min(length, 1 << 40) - FIXED))])[0]
        head = parse_header(raw, what)
        size = backend.size(key) or 0
    except StorageError as exc:
        raise StorageError(f"cannot read the header of {what}: {exc}", errno=exc.errno) from None
    if size < offset + head.nbytes:
        raise StorageError(f"data file {key} holds {size} bytes but {what} needs bytes {offset}..{offset + head.nbytes}; "
                           "the file was truncated")
    return rel, offset, checksum, algorithm, head, raw[:head.header]


def _selection(head: RankedCounts, ranks: Any, size: int, rank: int) -> tuple[int, int]:
    """The first row and the row count this rank reads."""
    starts = head.starts()
    if ranks is not None:
        a, b = ranks
        if b > head.nranks:
            raise InvalidArgumentError(f"ranks {(a, b)} go past the {head.nranks} ranks that wrote the step")
        return starts[a], starts[b] - starts[a]
    return _partition(head, size, rank)


def _partition(head: RankedCounts, size: int, rank: int) -> tuple[int, int]:
    """This rank's part of the rows when every rank reads without a range: its own rows under the
    writer's number of ranks, else a balanced share (counts differing by one at most, in order)."""
    if size == head.nranks:
        starts = head.starts()
        return starts[rank], head.counts[rank]
    base, extra = divmod(head.total, size)
    return rank * base + min(rank, extra), base + (rank < extra)


def _check_ranks(ranks: Any) -> tuple[int, int] | None:
    if ranks is None:
        return None
    if isinstance(ranks, (str, bytes)) or not isinstance(ranks, Sequence) or len(ranks) != 2:
        raise InvalidArgumentError(f"ranks must be a pair (first, stop) of writer ranks, got {ranks!r}")
    a = check.integer(ranks[0], "ranks[0]")
    b = check.integer(ranks[1], "ranks[1]")
    if b < a:
        raise InvalidArgumentError(f"ranks {(a, b)} must have first <= stop")
    return a, b


def read(g: "Group", name: str, step: int, *, out: Any, method: str | None, verify: Any, dtype: Any,
         casting: str | None, ranks: Any) -> np.ndarray:
    """Read rows of one step of a ranked dataset (collective; see :meth:`sdm.Group.read`)."""
    s = g.session
    rec = g.dataset(name)
    stored = from_text(rec.dtype)

    def local() -> tuple[int, int] | None:
        check.integer(step, "time step")
        check.optional_flag(verify, "verify")
        check.text(method, "method", optional=True)
        choose_method(method or s.method)
        if out is not None:
            raise InvalidArgumentError(f"out= is not supported for ranked dataset {name!r}: the row count is known "
                                       "only from the stored header")
        if casting is not None or (dtype is not None and check_dtype(dtype, f"the dtype read of {name!r}") != stored):
            raise InvalidArgumentError(f"ranked dataset {name!r} is read in its stored dtype {describe(stored)} only "
                                       "(no dtype= or casting=)")
        return _check_ranks(ranks)

    wanted, failure = capture(local, rank=s.rank)
    plan = None
    if s.rank == 0:
        failure = s._settle() or failure
        if failure is None:
            plan, failure = capture(_plan, g, name, int(step), rank=0)
    call = (KIND, name, step if isinstance(step, int) else repr(step), repr(verify))
    got, _ = g._agree_call("read", call, failure, plan, None, names=("view", "dataset", "step", "verify"))
    rel, offset, expected, algorithm, head, raw = got
    verify_now = (s.verify if verify is None else bool(verify)) and bool(expected)
    backend, path, _ = g._backend_of(rel)
    selected, failure = capture(_selection, head, wanted, s.size, s.rank, rank=s.rank)
    first, count = selected or (0, 0)
    arr = np.empty((count, *rec.shape), dtype=stored)
    if backend is s.files:
        moved, f = _move(g, path, offset, None, head.header + first * head.row_bytes, arr, False)
    else:  # on the archive tier only: each rank's rows are one ranged GET
        t0 = time.perf_counter()
        f = capture(backend.read_exactly, path, offset + head.header + first * head.row_bytes,
                    arr.reshape(-1).view(np.uint8), rank=s.rank)[1]
        moved = time.perf_counter() - t0
    failure = failure or f
    share: int | None = 0
    if verify_now and failure is None:
        share, failure = capture(_read_share, g, backend, path, offset, head, raw, arr, (first, count),
                                 stored.itemsize, algorithm, rank=s.rank)
    try:
        _, sums = g._closing(failure, [moved], [share or 0])
    except SDMError:
        s.files.reset_views()
        raise
    if verify_now and integrity.to_hex(int(sums[0])) != expected:
        raise IntegrityError(f"dataset {name!r} step {step} read from {rel} does not match its write-time checksum "
                             f"{algorithm}:{expected}; the file was changed or damaged after the write")
    return arr


def _put_object(g: "Group", rel: str, size: int, offset: int, head: bytes, at: int, arr: np.ndarray,
                digests: list[str], i: int) -> tuple[float, Failure | None]:
    """Write a step of a ranked dataset of an archive-tier group as (part of) one object (collective):
    rank 0's header and every rank's rows go to aggregators (:func:`sdm.io.remote.put_collective`)."""
    s = g.session
    t0 = time.perf_counter()
    handle = g._store().open(rel)
    handle.expect(size=size)
    rows = arr.reshape(-1).view(np.uint8) if arr.size else np.zeros(0, np.uint8)
    head_part = np.frombuffer(head, dtype=np.uint8) if s.rank == 0 else np.zeros(0, np.uint8)
    starts = np.array([offset] * (head_part.size > 0) + [offset + at] * (rows.size > 0), dtype=np.int64)
    lengths = np.array([head_part.size] * (head_part.size > 0) + [rows.size] * (rows.size > 0), dtype=np.int64)
    failure = put_collective(s.comm, handle, starts, lengths, np.concatenate([head_part, rows]))
    digests[i] = handle.digest
    return time.perf_counter() - t0, failure


def _read_share(g: "Group", backend: Any, path: Any, offset: int, head: RankedCounts, raw: bytes, arr: np.ndarray,
                selected: tuple[int, int], itemsize: int, algorithm: str) -> int:
    """This rank's share of the whole step's checksum: its part of the partition (rank 0: and the header)."""
    s = g.session
    first, count = _partition(head, s.size, s.rank)
    if (first, count) == selected:
        rows = arr.reshape(-1).view(np.uint8)
    else:  # a rank that asked for a range reads its part of the partition on its own (independent I/O)
        rows = np.empty(count * head.row_bytes, dtype=np.uint8)
        backend.read_exactly(path, offset + head.header + first * head.row_bytes, rows)
    algorithm = integrity.canonical(algorithm)
    share = stream_share(rows, head.header + first * head.row_bytes, itemsize, algorithm)
    if s.rank == 0:
        share += stream_share(np.frombuffer(raw, dtype=np.uint8), 0, itemsize, algorithm)
    return integrity.combine([share])


def counts(g: "Group", name: str, step: int) -> RankedCounts:
    """The header of one step of a ranked dataset, read by rank 0 and shared (collective)."""

    def fetch() -> RankedCounts:
        g.dataset(name)
        if not g._is_ranked(name):
            raise InvalidArgumentError(f"dataset {name!r} is not ranked (set with data_view(sdm.Ranked()))")
        check.integer(step, "time step")
        return _plan(g, name, int(step))[4]

    return root_call(g.session.comm, fetch)
