"""The storage seam: what every backend answers, whatever holds the bytes.

A backend is the place below the I/O methods where the bytes of one tier live.  The
group opens a *handle* on a file or object through its backend and hands it to an I/O
method (:class:`sdm.io.Transfer`); the method moves the bytes through that handle.  Two
backends exist:

==============  ========  ==================================================================
backend         tier      handle, and what it can do
==============  ========  ==================================================================
``mpiio``       fast      an :class:`~sdm.storage.backends.mpiio.MPIFileHandle` on an
                          ``MPI.File`` opened collectively (:class:`~sdm.storage.backends.
                          mpiio.MPIIOBackend`): partial writes, collective I/O, file views
``objectstore`` archive   an :class:`~sdm.storage.backends.objectstore.ObjectHandle` (the
                          store and the key, no request made): ranged GETs, whole-object and
                          multipart PUTs; no object can be updated in part
==============  ========  ==================================================================

Every I/O method declares the backend it works through (:attr:`sdm.io.IOMethod.backend`),
so the planner only offers a method the bytes' backend supports, and a write through a
backend without :attr:`Backend.partial_writes` is made by aggregators that assemble whole
objects or parts (:mod:`sdm.io.remote`).

Handles are typed (:class:`FileHandle`): what every handle answers (its key and backend,
independent ranged reads, its size, a sync, what the catalog knows of its bytes), and
for MPI-IO the collective surface the ``mpiio`` methods use (:class:`CollectiveHandle`:
file views with the kept-view cache, view-relative ``write_at``/``read_at`` and their
collective forms).  The friendly objects above (a group, a method) never see the
library below (``MPI.File``, the S3 client), as h5py's high-level objects never see its
file drivers.

Besides handles, a backend answers the independent byte-range calls that code outside
the I/O methods needs (a ranked section's header, a verification, a trailer, the
catalog's checks): :meth:`Backend.read`, :meth:`Backend.read_into`, :meth:`Backend.write`,
:meth:`Backend.size`, :meth:`Backend.delete`, :meth:`Backend.list` and
:meth:`Backend.sync`, and the steps of a multipart write whose parts may come from
several processes (:meth:`Backend.start_upload`, :meth:`~Backend.put_part`,
:meth:`~Backend.finish_upload`, :meth:`~Backend.abort_upload`; the object appears whole
when it is finished, or not at all).  Keys are a backend's own names: absolute paths for
``mpiio``, keys under the store's prefix for ``objectstore``.
"""

from __future__ import annotations

import errno
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar, Sequence

from ...errors import StorageError

if TYPE_CHECKING:
    from ..._collective import Failure

__all__ = ["Backend", "FileHandle", "CollectiveHandle"]


class Backend(ABC):
    """One storage backend (see the module documentation).

    Attributes
    ----------
    name : str
        ``"mpiio"`` or ``"objectstore"``: what I/O methods name as their backend.
    tier : str
        The tier its bytes are on (``"fast"`` or ``"archive"``, :mod:`sdm.catalog.tiers`).
    partial_writes : bool
        Bytes inside an existing file can be written in place (else a write makes whole
        objects, or the parts of one).
    collective_io : bool
        The ranks share one handle and can make collective calls on it (MPI-IO).
    """

    name: ClassVar[str]
    tier: ClassVar[str]
    partial_writes: ClassVar[bool]
    collective_io: ClassVar[bool]

    #: Whether :meth:`start_upload` and the calls after it are supported.
    multipart: ClassVar[bool] = False
    #: Whether :meth:`mapped` gives the bytes as a memory map (local files).
    mappable: ClassVar[bool] = False

    def serves(self, method_backend: str) -> bool:
        """Whether an I/O method that declares *method_backend* (:attr:`sdm.io.IOMethod.backend`) can move
        this backend's bytes."""
        return method_backend == self.name

    @abstractmethod
    def open(self, key: Any, *, cache: bool = True) -> "FileHandle":
        """The handle an I/O method moves the bytes of *key* through (collective for ``mpiio``).

        Raises
        ------
        StorageError
            On every rank, when any rank cannot open it.
        """

    @abstractmethod
    def release(self, key: Any, handle: Any) -> None:
        """Done with *handle* (closed unless the backend keeps it open for the next access)."""

    def sync_unagreed(self, key: Any, handle: Any = None) -> "Failure | None":
        """This rank's part of making what was written to *key* durable, its failure returned for the
        caller's exchange to agree on (collective where :meth:`sync` is). None here: a completed
        write is durable."""
        return None

    @abstractmethod
    def read(self, key: Any, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """The bytes of each ``(offset, nbytes)`` range of *key* (independent: this process alone).

        Raises
        ------
        StorageError
            The key cannot be read; a range past its end comes back short.
        """

    def read_into(self, key: Any, offset: int, out: Any) -> int:
        """Read ``len(out)`` bytes of *key* from *offset* into the writable buffer *out*; the bytes read
        (fewer at the end). Backends that can read without a copy override it.

        Raises
        ------
        StorageError
        """
        view = memoryview(out).cast("B")
        (data,) = self.read(key, [(int(offset), len(view))])
        view[:len(data)] = data
        return len(data)

    def read_exactly(self, key: Any, offset: int, out: Any) -> None:
        """:meth:`read_into` that must fill *out* whole.

        Raises
        ------
        StorageError
            *key* ends before the last byte asked for (it is shorter than its catalog row).
        """
        want = memoryview(out).nbytes
        if want and self.read_into(key, offset, out) != want:
            raise StorageError(f"{key} ends before byte {int(offset) + want}; it is shorter than its catalog row")

    def mapped(self, key: Any, end: int) -> Any:
        """The bytes of *key* as a read-only ``uint8`` memory map holding at least *end* of them
        (:attr:`mappable` backends only).

        Raises
        ------
        StorageError
            The backend cannot map its bytes, or *key* is shorter than *end*.
        """
        raise StorageError(f"{self.name} backend: {key} cannot be memory-mapped; read its ranges", errno.EOPNOTSUPP)

    @abstractmethod
    def write(self, key: Any, data: Any, offset: int = 0, *, what: str = "") -> None:
        """Write *data* (any contiguous buffer) at *offset* of *key* (independent); *what* names the bytes in
        messages (``"subfile"``).

        Raises
        ------
        StorageError
            The write failed, or the backend cannot write in part (*offset* not 0 without
            :attr:`partial_writes`: an object is replaced whole).
        """

    @abstractmethod
    def sync(self, key: Any, handle: Any = None) -> None:
        """Make what was written to *key* durable (a no-op where a completed write is durable)."""

    @abstractmethod
    def size(self, key: Any) -> int | None:
        """The size of *key* in bytes, or None when it does not exist."""

    @abstractmethod
    def delete(self, key: Any) -> None:
        """Remove *key* (nothing happens if it does not exist)."""

    @abstractmethod
    def list(self, prefix: str = "") -> list[tuple[str, int]]:
        """``(key, size)`` of every file or object under *prefix*, sorted."""

    # ------------------------------------------------------------------ giving space back (sdm gc)

    def truncate(self, key: Any, size: int) -> None:
        """Cut *key* to its first *size* bytes.

        Raises
        ------
        StorageError
            The backend cannot (an object is replaced whole, never cut), or the call failed.
        """
        raise StorageError(f"{self.name} backend: {key} cannot be cut to {size} bytes", errno.EOPNOTSUPP)

    def reclaim(self, key: Any, offset: int, nbytes: int) -> None:
        """Give back the space of bytes *offset* .. *offset* + *nbytes* of *key*, which then read as zeros
        (its size unchanged).

        Raises
        ------
        StorageError
            With ``errno`` ``EOPNOTSUPP`` where the backend (or its file system) cannot.
        """
        raise StorageError(f"{self.name} backend: bytes of {key} cannot be given back in part", errno.EOPNOTSUPP)

    def reclaimed(self, key: Any, start: int, end: int) -> bool:
        """Whether bytes *start* .. *end* of *key* hold nothing but zeros (were given back); False when *key*
        cannot be read. Backends that know where their data is answer without reading it all."""
        try:
            at = start
            while at < end:
                n = min(end - at, 1 << 22)
                (got,) = self.read(key, [(at, n)])
                if len(got) != n or any(got):
                    return False
                at += n
        except StorageError:
            return False
        return True

    # ------------------------------------------------------------------ multipart writes (several processes)

    def _no_multipart(self, key: Any) -> StorageError:
        return StorageError(f"{self.name} backend: no multipart writes to {key}", errno.EOPNOTSUPP)

    def start_upload(self, key: Any) -> str:
        """Begin a multipart write of *key* whose parts may come from several processes; its id.

        Raises
        ------
        StorageError
            The backend has no multipart writes (:attr:`multipart`), or the call failed.
        """
        raise self._no_multipart(key)

    def put_part(self, key: Any, upload: str, number: int, data: bytes | bytearray | memoryview) -> str:
        """Write part *number* (1, 2, ...) of *upload*; its tag for :meth:`finish_upload`.

        Raises
        ------
        StorageError
        """
        raise self._no_multipart(key)

    def finish_upload(self, key: Any, upload: str, tags: Sequence[str]) -> None:
        """Complete *upload* from its parts' tags in part order: *key* holds the parts one after the
        other, at once (whatever it held before is replaced).

        Raises
        ------
        StorageError
        """
        raise self._no_multipart(key)

    def abort_upload(self, key: Any, upload: str) -> None:
        """Abandon *upload* (its parts are removed; *key* is left as it was)."""
        raise self._no_multipart(key)


class FileHandle(ABC):
    """An open file or object, as a backend hands it to an I/O method (:attr:`sdm.io.Transfer.fh`).

    What every handle answers, whatever holds the bytes: independent reads of byte
    ranges (absolute offsets, whatever view is set), the size, a sync, and what the
    catalog knows of the bytes. Handles of backends with :attr:`Backend.collective_io`
    are :class:`CollectiveHandle` s.

    Attributes
    ----------
    backend : Backend or None
        The backend that opened it (None for a file opened elsewhere and wrapped).
    key : object
        Its key in that backend.
    """

    backend: Backend | None
    key: Any

    @abstractmethod
    def read_into(self, offset: int, out: Any) -> int:
        """Read ``len(out)`` bytes from byte *offset* into the writable buffer *out*; the bytes read
        (fewer at the end).

        Raises
        ------
        StorageError
        """

    def read_exactly(self, offset: int, out: Any) -> None:
        """:meth:`read_into` that must fill *out* whole.

        Raises
        ------
        StorageError
            The bytes end before the last byte asked for.
        """
        want = memoryview(out).nbytes
        if want and self.read_into(offset, out) != want:
            raise StorageError(f"{self.key} ends before byte {int(offset) + want}; it is shorter than its catalog row")

    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """The bytes of each ``(offset, nbytes)`` range (short at the end), independent (:meth:`Backend.read`).

        Raises
        ------
        StorageError
        """
        if self.backend is None:
            raise StorageError(f"{self.key}: a handle without a backend reads no ranges")
        return self.backend.read(self.key, ranges)

    @abstractmethod
    def get_size(self) -> int:
        """The bytes it holds now.

        Raises
        ------
        StorageError
        """

    def expect(self, *, copy: str = "", size: int = 0) -> None:
        """What the catalog knows of the bytes before an access: the archive copy's checksum *copy* (a
        read) or the *size* the bytes will have (a write). Ignored where it does not matter."""

    @property
    def digest(self) -> str:
        """After a write, where the backend computes it: the digest of the bytes written
        (:mod:`sdm.storage.digests`); else empty."""
        return ""


class CollectiveHandle(FileHandle):
    """A handle the ranks share, with file views and collective calls (MPI-IO's surface).

    Offsets of :meth:`write_at`, :meth:`read_at` and their collective forms count etypes
    of the view in effect (bytes under a byte view), and buffers are mpi4py buffer specs
    (an array, or ``[buffer, count, datatype]``), exactly as ``MPI_File_write_at`` takes
    them: the methods keep their derived datatypes, and a call here is one MPI call.
    """

    @abstractmethod
    def set_view(self, disp: int, etype: Any, filetype: Any, *, info: Sequence[tuple[str, str]] = (),
                 key: Any = None, extent: int = 0, elements: int = 0) -> int:
        """Set the view ``(disp, etype, filetype)`` with the hints *info* (collective), unless the view
        set last already reaches *disp*.

        Parameters
        ----------
        disp : int
            Byte offset the view starts at.
        etype, filetype : MPI.Datatype
        info : sequence of (str, str)
            Hints given with the view (none: ``MPI_INFO_NULL``).
        key : object, optional
            What the view is, the same on every rank; without it the view is set every time.
        extent : int
            Bytes after which *filetype* repeats.
        elements : int
            Etypes this rank sees in one *filetype*.

        Returns
        -------
        int
            Offset, in etypes, of *disp* in the view now in effect: 0 after a new view,
            ``k * elements`` when the view kept from ``disp - k * extent`` is reused.
        """

    @abstractmethod
    def forget_view(self) -> None:
        """Forget the kept view (a view is set outside :meth:`set_view`, or an access failed)."""

    @abstractmethod
    def write_at(self, offset: int, buf: Any) -> None:
        """Write *buf* at *offset* of the view (independent)."""

    @abstractmethod
    def read_at(self, offset: int, buf: Any) -> None:
        """Read into *buf* from *offset* of the view (independent)."""

    @abstractmethod
    def read_fully(self, offset: int, buf: Any) -> None:
        """Read ``buf.size`` bytes into the byte array *buf* from *offset* of a byte view (independent);
        bytes past the end of the file read as zeros."""

    @abstractmethod
    def write_at_all(self, offset: int, buf: Any) -> None:
        """:meth:`write_at`, collective (every rank calls it, with its own part, possibly empty)."""

    @abstractmethod
    def read_at_all(self, offset: int, buf: Any) -> None:
        """:meth:`read_at`, collective."""

    @abstractmethod
    def sync_all(self) -> None:
        """Flush every rank's writes to storage and make them visible to the others (collective
        ``MPI_File_sync``)."""
