"""The I/O methods of the archive tier (an S3 object store): SRB-OL's remote I/O.

These are :class:`~sdm.io.IOMethod` s of the ``objectstore`` backend
(:mod:`sdm.storage.backends`): their :attr:`Transfer.fh <sdm.io.Transfer>` is an
:class:`~sdm.storage.backends.objectstore.ObjectHandle`, and every request goes through
it (ranged GETs, PUTs, the steps of a multipart upload).  When the bytes of a dataset's
step are on the archive tier only (the fast copy was purged, :mod:`sdm.ops.tiers`,
or the group writes to the archive), :meth:`sdm.Group.read` reads them from the object
without staging the whole file, with one of the methods of Shen, Liao and Choudhary
(sections 4.1-4.3), each rank filling its own piece of any distribution:

==================  ===========================================================================
remote-naive        every rank: one ranged GET request per contiguous file region of its
                    piece, one after another (:meth:`ObjectStore.get_each`), as the paper's
                    naive remote I/O and its model
remote-sieving      every rank: one ranged GET over the span of its regions, the regions
                    extracted locally
remote-collective   the ranks as aggregators: each GETs (at most) one contiguous part of an
                    even split of the span all ranks need, then the bytes go to the ranks
                    that need them in one ``Alltoallv`` (requests travel in another)
remote-subfile      the byte ranges a read needs are staged into the fast tier as a cached
                    subfile (``<run directory>/.sdm-cache/``) and read there; later reads of
                    the same ranges make no request at all
remote-superfile    for files packed into a superfile by ``sdm migrate --pack-below``: every
                    rank fetches the whole object once (one GET) and keeps it in memory (at
                    most :data:`SUPERFILE_MEMORY` bytes), so reads of the other members make no
                    request (``auto`` picks it for a packed file)
==================  ===========================================================================

Writes (a group made with ``archive=``) go through ``remote-collective`` only, since an
object cannot be updated in part: the ranks send their bytes to aggregators that each
assemble one contiguous part of the object (bytes no rank writes are zeros), and the
parts go up as one multipart upload (each part's SHA-256 signed and checked by the
server), completed by the first rank once every part is in: the object appears whole or
not at all.  An object below :data:`PART_MIN` bytes times two is assembled and PUT by one
aggregator.  :func:`put_collective` is the same for any byte ranges (ranked sections).

``auto`` (or any local method name) on an archived row lets the remote model choose
(:func:`sdm.planner.remote.read_method`: :func:`~sdm.planner.remote.choose_remote` on
the ranks' real layout statistics) with the
constants of the newest calibration of the archive: catalog target
``archive:<endpoint URL>``, else ``archive:s3://BUCKET/PREFIX`` for the object's folder
and each folder above it up to the bucket, else the paper's preset
:data:`sdm.planner.remote.SRB_HPSS_2003`.  The constants are looked up once per session
and archive.  A remote method name on a row whose fast copy is present reads the fast
copy with the session's method.

The subfile cache: per object, ``<hash>.bytes`` holds the cached bytes at their offsets
in the object (a sparse file) and ``<hash>.json`` the ranges it holds and the archive
copy's checksum (``sha256:...``, recorded by :func:`sdm.ops.tiers.migrate`).  Bytes
are written and synced before rank 0 adds their ranges to the index (written aside and
renamed), so the index never claims bytes the file does not hold.  The cache is
invalidated when the archive copy's checksum differs from the index's (a new object
replaced the old: its index starts empty), and is not used at all while the fast copy
exists.  It is a cache only: :func:`clear_cache` (or removing the directory) is always
safe.

Every rank makes the same collective calls in the same order; a failure (an S3 error
on one rank) is returned, not raised, so the caller's closing exchange raises the same
:class:`~sdm.errors.StorageError` on every rank.  :func:`counters` counts this
process's ranged GETs (what the tests compare).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence, cast

import numpy as np
from mpi4py import MPI

from .._collective import Failure, capture
from ..errors import IntegrityError, InvalidArgumentError, StorageError
from ..layout.regions import expand, runs
from ..storage.backends import is_object
from ..storage.backends.posix import PosixFiles
from .base import IOMethod, Transfer, register

if TYPE_CHECKING:
    from ..catalog.tiers import Copy
    from ..storage.backends.objectstore import ObjectHandle


__all__ = ["METHODS", "CACHE_DIR", "PART_MIN", "is_method", "plan_path", "archived", "RemoteMethod",
           "put_collective", "counters", "clear_cache", "forget_superfiles"]

#: The remote read methods, by the names ``Group.read(method=...)`` takes.
METHODS = ("remote-naive", "remote-sieving", "remote-collective", "remote-subfile", "remote-superfile")
#: Bytes of superfiles a process keeps in memory (the oldest dropped first).
SUPERFILE_MEMORY = 256 << 20
#: The subfile cache's directory, under the run's directory.
CACHE_DIR = ".sdm-cache"
#: The smallest part of a multipart upload (S3's minimum for every part but the last).
PART_MIN = 5 << 20
_COUNTS = {"requests": 0, "bytes": 0}  # this process's ranged GETs
_SUPERFILES: dict[str, bytes] = {}  # superfile location -> its bytes (fetched once, then served from memory)


# ----------------------------------------------------------------------------- plan
def is_method(name: object) -> bool:
    """Whether *name* is one of :data:`METHODS`."""
    return isinstance(name, str) and name in METHODS


def plan_path(location: str, checksum: str | None) -> str:
    """What a read plan carries for an archive copy: its location and, after ``#``, its checksum."""
    return f"{location}#{checksum}" if checksum else location


def object_place(location: str) -> tuple[str, int]:
    """``(object location, where the copy's bytes start in it)``: 0 for a whole object, the member's
    offset for a file packed in a superfile (:func:`sdm.ops.tiers.pack`)."""
    from ..storage.naming import member

    where, at = member(location)
    return where, at or 0


def _packed(location: str) -> bool:
    """Whether an object is a superfile (many small files in one object)."""
    from ..storage.naming import SUPERFILE_SUFFIX

    return location.endswith(SUPERFILE_SUFFIX)


def _split(path: str) -> tuple[str, str]:
    """``(location, copy checksum)`` of a :func:`plan_path`."""
    location, _, checksum = path.partition("#")
    return location, checksum


def archived(found: Sequence["Copy"], need: int) -> "Copy | None":
    """The verified archive copy among *found* holding at least *need* bytes, or None."""
    from ..catalog.tiers import ARCHIVE

    for copy in found:
        if copy.tier == ARCHIVE and copy.verified and copy.size >= need and is_object(copy.location):
            return copy
    return None


# ----------------------------------------------------------------------------- the methods
class RemoteMethod(IOMethod):
    """One of :data:`METHODS` (collective: every rank calls it, whatever it needs).

    A failure on one rank (an S3 error) does not stop the others' collective calls: it is
    raised once every call was made, so the caller's closing exchange raises the same
    error on every rank.
    """

    collective = True
    backend = "objectstore"

    def __init__(self, name: str) -> None:
        self.name = name

    def read(self, t: Transfer) -> None:
        comm = t.comm
        assert comm is not None, "remote methods need the session's communicator"
        rank, handle = comm.Get_rank(), cast("ObjectHandle", t.fh)  # the engine checked the backend
        got, failure = capture(_Part, handle, t.piece, t.order, t.array, rank=rank)
        offset = int(t.disp)
        if self.name == "remote-collective":
            failure = _collective(comm, got, offset, t.stats, t.array.dtype.itemsize, failure)
        elif self.name == "remote-subfile":
            failure = _subfile(comm, got, offset, handle.location, handle.copy, Path(t.scratch), failure)
        elif failure is None:
            assert got is not None
            fetch = {"remote-naive": _naive, "remote-sieving": _sieving}.get(self.name)
            if fetch is None:
                failure = capture(_superfile, got, offset, handle.location, rank=rank)[1]
            else:
                failure = capture(fetch, got, offset, rank=rank)[1]
        if failure is not None:
            raise failure.exception(1)  # the message as it was made (the closing exchange names the rank)

    def write(self, t: Transfer) -> None:
        comm = t.comm
        assert comm is not None, "remote methods need the session's communicator"
        rank, handle = comm.Get_rank(), cast("ObjectHandle", t.fh)
        if self.name != "remote-collective":
            raise InvalidArgumentError(f"method {self.name!r} cannot write to the archive tier: an object cannot be "
                                       "updated in part, so writes assemble whole objects with 'remote-collective'")
        got, failure = capture(_Part, handle, t.piece, t.order, t.array, rank=rank)
        starts, lengths = got.regions if got is not None else (np.zeros(0, np.int64), np.zeros(0, np.int64))
        data = capture(got.gather, rank=rank)[0] if got is not None and failure is None else None
        failure = put_collective(comm, handle, int(t.disp) + starts, lengths,
                                 data if data is not None else np.zeros(0, np.uint8), failure)
        if failure is not None:
            raise failure.exception(1)


for _method in METHODS:
    register(RemoteMethod(_method))


class _Part:
    """This rank's part of a remote read: the object's handle, its segments and regions, the local array."""

    def __init__(self, handle: "ObjectHandle", piece: Any, order: str, arr: np.ndarray) -> None:
        itemsize = arr.dtype.itemsize
        segments = runs(piece, order, itemsize, list(arr.strides))
        self.handle, self.segments, self.arr, self.itemsize = handle, segments, arr, itemsize
        f, n = segments.file, segments.length
        if f.size > 1:  # file regions: segments joined where the file continues
            starts = np.flatnonzero(np.concatenate(([True], f[:-1] + n[:-1] != f[1:])))
            self.regions = (f[starts], np.add.reduceat(n, starts))
        else:
            self.regions = (f, n)

    def place(self, source: np.ndarray, at: np.ndarray) -> None:
        """Copy the segments from *source* (bytes; segment ``i`` at ``at[i]``) into the local array."""
        if not self.segments.count:
            return
        unit = self.itemsize
        assert self.segments.memory is not None
        flat = self.arr.ravel(order="K").view(np.uint8).reshape(-1, unit)
        flat[expand(self.segments.memory, self.segments.length, unit)] = \
            source.reshape(-1, unit)[expand(at, self.segments.length, unit)]

    def gather(self) -> np.ndarray:
        """The bytes of the segments in file order (what :meth:`fill` takes)."""
        if not self.segments.count:
            return np.zeros(0, dtype=np.uint8)
        unit = self.itemsize
        assert self.segments.memory is not None
        flat = self.arr.ravel(order="K").view(np.uint8).reshape(-1, unit)
        return flat[expand(self.segments.memory, self.segments.length, unit)].reshape(-1)

    def fill(self, data: np.ndarray) -> None:
        """Fill the local array from its bytes in file order (the segments one after the other)."""
        n = self.segments.length
        self.place(data, np.cumsum(n) - n)

    def get(self, ranges: list[tuple[int, int]], *, each: bool = False) -> list[bytes]:
        """Ranged GETs of the object (counted): concurrent and coalesced, or with *each* one request per range."""
        _COUNTS["requests"] += sum(1 for _, n in ranges if n > 0)
        _COUNTS["bytes"] += sum(n for _, n in ranges)
        return self.handle.read_each(ranges) if each else self.handle.read_ranges(ranges)


def _bytes(parts: Sequence[bytes]) -> np.ndarray:
    return np.frombuffer(b"".join(parts), dtype=np.uint8)


def _naive(p: _Part, offset: int) -> None:
    f, n = p.regions
    if f.size:
        p.fill(_bytes(p.get([(offset + int(a), int(b)) for a, b in zip(f, n)], each=True)))


def _sieving(p: _Part, offset: int) -> None:
    f, n = p.regions
    if f.size:
        lo, hi = int(f[0]), int(f[-1] + n[-1])
        p.place(_bytes(p.get([(offset + lo, hi - lo)])), p.segments.file - lo)


def _superfile(p: _Part, offset: int, location: str) -> None:
    """The whole object, fetched once per process (one GET) and kept, then this rank's regions from memory.

    The GET asks for one byte more than :data:`SUPERFILE_MEMORY` (no HEAD first: a
    superfile made by ``sdm migrate`` is never that large); an object that is larger
    is not kept, and its regions are read as sieving does.
    """
    data = _SUPERFILES.get(location)
    if data is None:
        data = p.handle.read_ranges([(0, SUPERFILE_MEMORY + 1)])[0]
        _COUNTS["requests"] += 1
        _COUNTS["bytes"] += len(data)
        if len(data) > SUPERFILE_MEMORY:  # too large to keep
            _sieving(p, offset)
            return
        while _SUPERFILES and sum(map(len, _SUPERFILES.values())) + len(data) > SUPERFILE_MEMORY:
            del _SUPERFILES[next(iter(_SUPERFILES))]
        _SUPERFILES[location] = data
    f, n = p.regions
    if f.size:  # as sieving, from the object in memory
        lo, hi = int(f[0]), int(f[-1] + n[-1])
        p.place(np.frombuffer(data, dtype=np.uint8, count=hi - lo, offset=offset + lo), p.segments.file - lo)


def _failed(comm: MPI.Comm, failure: Failure | None) -> bool:
    """Whether any rank failed (one ``Allreduce``)."""
    return bool(comm.allreduce(failure is not None, op=MPI.LOR))


def _collective(comm: MPI.Comm, p: _Part | None, offset: int, stats: Sequence[Sequence[int]], itemsize: int,
                failure: Failure | None) -> Failure | None:
    """Remote collective I/O: even shares of the span as aggregators' GETs, then an ``Alltoallv`` of the bytes."""
    size, rank = comm.Get_size(), comm.Get_rank()
    busy = [s for s in stats if int(s[0])]
    if _failed(comm, failure) or not busy:
        return failure
    assert p is not None
    lo, hi = min(int(s[3]) for s in busy), max(int(s[4]) for s in busy)
    words = (hi - lo) // itemsize
    bounds = lo + itemsize * np.array([words * i // size for i in range(size + 1)], dtype=np.int64)

    # this rank's regions cut at the shares' bounds: requests (start, end) to each aggregator, in file order
    mine, agg = _cut(*p.regions, bounds)
    theirs, theirs_counts = _requests(comm, mine, agg)

    def aggregate() -> np.ndarray:  # one GET of the part of this rank's share that is asked for
        if not theirs.size:
            return np.zeros(0, dtype=np.uint8)
        start, end = int(theirs[:, 0].min()), int(theirs[:, 1].max())
        blob = _bytes(p.get([(offset + start, end - start)]))
        return blob[expand(theirs[:, 0] - start, theirs[:, 1] - theirs[:, 0], 1)]

    out, failure = capture(aggregate, rank=rank)
    if _failed(comm, failure):
        return failure
    assert out is not None
    data = _move_bytes(comm, out, theirs, theirs_counts, mine, agg)
    return capture(p.fill, data, rank=rank)[1]


def _cut(a: np.ndarray, n: np.ndarray, bounds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Regions (starts *a*, lengths *n*, in file order) cut at *bounds*: ``(pieces, share)``.

    *pieces* holds ``(start, end)`` rows in file order, *share* the index of the share
    ``bounds[i]..bounds[i + 1]`` each piece lies in.
    """
    b = a + n
    first = np.searchsorted(bounds, a, side="right") - 1
    last = np.searchsorted(bounds, b - 1, side="right") - 1
    k = last - first + 1
    which = np.repeat(np.arange(a.size), k)
    share = np.arange(int(k.sum()), dtype=np.int64) - np.repeat(np.cumsum(k) - k, k) + first[which]
    start, end = np.maximum(a[which], bounds[share]), np.minimum(b[which], bounds[share + 1])
    kept = end > start
    return np.ascontiguousarray(np.stack([start[kept], end[kept]], axis=1), dtype=np.int64), share[kept]


def _requests(comm: MPI.Comm, mine: np.ndarray, to: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Send each ``(start, end)`` row of *mine* to rank ``to[i]`` (rows grouped by rank, ascending).

    Returns the rows every rank sent here, in rank order, and how many came from each rank.
    """
    size = comm.Get_size()
    counts = np.bincount(to, minlength=size).astype(np.int64)
    theirs_counts = np.empty(size, dtype=np.int64)
    comm.Alltoall(counts, theirs_counts)
    theirs = np.empty((int(theirs_counts.sum()), 2), dtype=np.int64)
    comm.Alltoallv([mine, (2 * counts, 2 * (np.cumsum(counts) - counts)), MPI.INT64_T],
                   [theirs, (2 * theirs_counts, 2 * (np.cumsum(theirs_counts) - theirs_counts)), MPI.INT64_T])
    return theirs, theirs_counts


def _move_bytes(comm: MPI.Comm, out: np.ndarray, rows_out: np.ndarray, counts_out: np.ndarray,
                rows_in: np.ndarray, from_rank: np.ndarray) -> np.ndarray:
    """One ``Alltoallv`` of bytes: *out* holds the bytes of *rows_out* (``counts_out[r]`` rows for rank
    ``r``, in rank order); what comes back are the bytes of *rows_in*, sent by ``from_rank``."""
    size = comm.Get_size()
    send = np.bincount(np.repeat(np.arange(size), counts_out), weights=rows_out[:, 1] - rows_out[:, 0],
                       minlength=size).astype(np.int64)
    recv = np.bincount(from_rank, weights=rows_in[:, 1] - rows_in[:, 0], minlength=size).astype(np.int64)
    data = np.empty(int(recv.sum()), dtype=np.uint8)
    comm.Alltoallv([out, (send, np.cumsum(send) - send), MPI.BYTE], [data, (recv, np.cumsum(recv) - recv), MPI.BYTE])
    return data


# ----------------------------------------------------------------------------- collective write
def _scatter(dst: np.ndarray, at: np.ndarray, lengths: np.ndarray, src: np.ndarray) -> None:
    """Place the pieces of *src* (one after the other) at offsets *at* of *dst*."""
    if at.size <= 64 or src.size >= 4096 * at.size:  # few or large pieces: slices
        pos = 0
        for a, n in zip(at.tolist(), lengths.tolist()):
            dst[a:a + n] = src[pos:pos + n]
            pos += n
    else:
        dst[expand(at, lengths, 1)] = src


def put_collective(comm: MPI.Comm, handle: "ObjectHandle", starts: np.ndarray, lengths: np.ndarray,
                   data: np.ndarray, failure: Failure | None = None) -> Failure | None:
    """Write the object of *handle* (``handle.size`` bytes) from every rank's byte ranges (collective).

    Parameters
    ----------
    comm : MPI.Comm
    handle : ObjectHandle
        The object and its size; after the call, on rank 0, its :attr:`~ObjectHandle.digest`.
    starts, lengths : numpy.ndarray
        This rank's ranges of the object, in ascending order, not overlapping another
        rank's (bytes no rank gives are zeros).
    data : numpy.ndarray
        The bytes of the ranges, one after the other (uint8).
    failure : Failure, optional
        This rank's failure so far: then nothing is written, on any rank.

    Returns
    -------
    Failure or None
        This rank's failure (the caller's closing exchange raises it on every rank). When
        any step failed, no object was written (a multipart upload is aborted).
    """
    from ..storage.digests import DIGEST, parts_digest

    size, rank = comm.Get_size(), comm.Get_rank()
    if _failed(comm, failure):
        return failure
    total = int(handle.size)
    nparts = max(1, min(size, total // PART_MIN))
    part = -(-total // nparts) if total else 0
    nparts = -(-total // part) if part else 1
    bounds = np.minimum(np.arange(nparts + 1, dtype=np.int64) * part, total)
    bounds[-1] = total
    owner = np.array([i * size // nparts for i in range(nparts)], dtype=np.int64)  # aggregators spread out
    mine, share = _cut(np.asarray(starts, np.int64), np.asarray(lengths, np.int64), bounds)
    theirs, theirs_counts = _requests(comm, mine, owner[share])
    # the bytes travel to the aggregators: the requests' reverse, with the data going out
    sent_counts = np.bincount(owner[share], minlength=size).astype(np.int64)
    got = _move_bytes(comm, np.ascontiguousarray(data, dtype=np.uint8), mine, sent_counts, theirs,
                      np.repeat(np.arange(size), theirs_counts))
    index = int(np.flatnonzero(owner == rank)[0]) if rank in owner else -1

    def assemble() -> np.ndarray:
        buf = np.zeros(int(bounds[index + 1] - bounds[index]), dtype=np.uint8)
        _scatter(buf, theirs[:, 0] - bounds[index], theirs[:, 1] - theirs[:, 0], got)
        return buf

    buf, failure = capture(assemble, rank=rank) if index >= 0 else (None, None)
    if nparts == 1:  # one aggregator: one PUT
        def put() -> str:
            assert buf is not None
            handle.put(buf.data)
            return f"{DIGEST}:{hashlib.sha256(buf.data).hexdigest()}"

        if rank == 0 and failure is None:
            digest, failure = capture(put, rank=rank)
            handle.digest = digest or ""
        return failure
    upload, start_failure = capture(handle.start_upload, rank=rank) if rank == 0 else (None, None)
    upload = comm.bcast(upload if start_failure is None else None, root=0)
    failure = failure or start_failure
    if upload is None:
        return failure or (Failure(StorageError(f"the multipart upload of {handle.location} did not start"), rank)
                           if rank == 0 else None)

    def send_part() -> tuple[str, bytes]:
        assert buf is not None
        etag = handle.put_part(upload, index + 1, buf.data)
        return etag, hashlib.sha256(buf.data).digest()

    sent, part_failure = capture(send_part, rank=rank) if index >= 0 and failure is None else (None, None)
    failure = failure or part_failure
    everyone = comm.gather((index, sent, failure is not None), root=0)
    if rank == 0:
        assert everyone is not None
        parts = sorted((i, s) for i, s, _ in everyone if i >= 0)
        if any(bad for _, _, bad in everyone) or any(s is None for _, s in parts):
            capture(handle.abort_upload, upload, rank=rank)
        else:
            def finish() -> str:
                handle.finish_upload(upload, [s[0] for _, s in parts])
                return parts_digest(part, [s[1] for _, s in parts])

            digest, done = capture(finish, rank=rank)
            handle.digest = digest or ""
            if done is not None:
                capture(handle.abort_upload, upload, rank=rank)
            failure = failure or done
    return failure


# ----------------------------------------------------------------------------- subfile
def _name(location: str) -> str:
    return hashlib.sha256(location.encode("utf-8")).hexdigest()[:24]


def _index(path: Path, checksum: str) -> list[tuple[int, int]]:
    """The ranges an index holds for the archive copy *checksum* (none when absent, for another copy, or not
    what SDM writes: :func:`sdm.file_formats.check_cache_index`, every range within the cached bytes)."""
    from ..file_formats import Where, check_cache_index, load_object, read_regular

    where = Where(str(path))
    try:
        data = load_object(read_regular(path, where, 64 << 20), where, "the cache index")
        ranges = check_cache_index(data, where, path.with_suffix(".bytes").stat().st_size)
    except (OSError, IntegrityError):  # a cache: a bad index is no index, the bytes are fetched again
        return []
    return ranges if data["copy"] == checksum else []


def _union(ranges: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _missing(wanted: Sequence[tuple[int, int]], held: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The parts of *wanted* (sorted, disjoint) that *held* (merged) does not cover."""
    out = []
    for lo, hi in wanted:
        at = lo
        for a, b in held:
            if b <= at or a >= hi:
                continue
            if a > at:
                out.append((at, a))
            at = max(at, b)
        if at < hi:
            out.append((at, hi))
    return out


def _subfile(comm: MPI.Comm, p: _Part | None, offset: int, location: str, checksum: str, cache: Path,
             failure: Failure | None) -> Failure | None:
    """Stage what is missing of this rank's regions into the cache, read them from there; rank 0 updates the index."""
    rank = comm.Get_rank()
    base = cache / _name(location)
    index, data = base.with_suffix(".json"), base.with_suffix(".bytes")

    def stage() -> list[tuple[int, int]]:
        assert p is not None
        f, n = p.regions
        if not f.size:
            return []
        wanted = [(offset + int(a), offset + int(a + b)) for a, b in zip(f, n)]
        fetch = _missing(wanted, _union(_index(index, checksum)))
        if cache.is_symlink():  # SDM makes no links in a run's directory: its cache is written there only
            raise IntegrityError(f"subfile cache {cache} is a symbolic link (to {os.readlink(cache)}); SDM writes its "
                                 "cache only inside the run's directory: remove the link")
        try:
            cache.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"subfile cache {cache}: {exc.strerror}", errno=exc.errno) from None
        files = PosixFiles()  # the cache is this rank's own file on the fast tier: no collective call
        try:
            if fetch:
                for (lo, hi), got in zip(fetch, p.get([(lo, hi - lo) for lo, hi in fetch])):
                    if len(got) != hi - lo:
                        raise StorageError(f"GET {p.handle.location}: {len(got)} bytes at {lo}, "
                                           f"{hi - lo} expected; the object is shorter than its catalog copy")
                    files.write(data, got, lo, what="subfile cache")
                files.sync(data)
            lo, hi = wanted[0][0], wanted[-1][1]
            span = np.empty(hi - lo, dtype=np.uint8)
            if files.read_into(data, lo, span) != hi - lo:
                raise StorageError(f"subfile cache {data} holds fewer bytes than its index says; remove {cache}")
        finally:
            files.close_all()
        p.place(span, p.segments.file + offset - lo)
        return fetch

    fetched, failure = (None, failure) if failure is not None else capture(stage, rank=rank)
    gathered = comm.gather(fetched or [], root=0)
    if rank == 0 and gathered is not None and any(gathered):
        new = [r for ranges in gathered for r in ranges]
        done = capture(_update_index, index, checksum, location, new, rank=0)[1]
        failure = failure or done
    return failure


def _update_index(index: Path, checksum: str, location: str, new: Sequence[tuple[int, int]]) -> None:
    """Rank 0: add *new* ranges (their bytes synced) to the cache's index, written aside and renamed."""
    ranges = _union([*_index(index, checksum), *new])
    partial = index.with_suffix(".json.part")
    try:
        partial.write_text(json.dumps({"location": location, "copy": checksum, "ranges": ranges}))
        os.replace(partial, index)
    except OSError as exc:
        raise StorageError(f"subfile cache index {index}: {exc.strerror}", errno=exc.errno) from None


def clear_cache(run_directory: str | os.PathLike[str]) -> int:
    """Remove the subfile cache of a run (``<run_directory>/.sdm-cache``); returns the bytes it held on disk."""
    cache = Path(run_directory) / CACHE_DIR
    held = sum(f.stat().st_blocks * 512 for f in cache.glob("*") if f.is_file()) if cache.is_dir() else 0
    shutil.rmtree(cache, ignore_errors=True)
    return held


def forget_superfiles() -> None:
    """Drop the superfiles this process keeps in memory (the next read of a member fetches its superfile again)."""
    _SUPERFILES.clear()


def counters() -> dict[str, int]:
    """This process's ranged GETs of remote reads so far: ``{"requests": ..., "bytes": ...}``.

    Counted as asked: the client may serve ranges closer than 1 MiB with one HTTP request.
    """
    return dict(_COUNTS)
