"""The storage seam: what every backend answers, whatever holds the bytes.

A backend is the place below the I/O methods where the bytes of one tier live.  The
group opens a *handle* on a file or object through its backend and hands it to an I/O
method (:class:`sdm.io.Transfer`); the method moves the bytes through that handle.  Two
backends exist:

==============  ========  ==================================================================
backend         tier      handle, and what it can do
==============  ========  ==================================================================
``mpiio``       fast      an ``MPI.File`` opened collectively (:class:`~sdm.storage.backends.
                          mpiio.MPIIOBackend`): partial writes, collective I/O, file views
``objectstore`` archive   an :class:`~sdm.storage.backends.objectstore.ObjectHandle` (the
                          store and the key, no request made): ranged GETs, whole-object and
                          multipart PUTs; no object can be updated in part
==============  ========  ==================================================================

Every I/O method declares the backend it works through (:attr:`sdm.io.IOMethod.backend`),
so the planner only offers a method the bytes' backend supports, and a write through a
backend without :attr:`Backend.partial_writes` is made by aggregators that assemble whole
objects or parts (:mod:`sdm.io.remote`).

Besides handles, a backend answers the independent byte-range calls that code outside
the I/O methods needs (a ranked section's header, a verification, the catalog's checks):
:meth:`Backend.read`, :meth:`Backend.write`, :meth:`Backend.size`, :meth:`Backend.delete`,
:meth:`Backend.list` and :meth:`Backend.sync`.  Keys are a backend's own names: absolute
paths for ``mpiio``, keys under the store's prefix for ``objectstore``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar, Sequence

from ...errors import StorageError

__all__ = ["Backend"]


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

    @abstractmethod
    def open(self, key: Any, *, cache: bool = True) -> Any:
        """The handle an I/O method moves the bytes of *key* through (collective for ``mpiio``).

        Raises
        ------
        StorageError
            On every rank, when any rank cannot open it.
        """

    @abstractmethod
    def release(self, key: Any, handle: Any) -> None:
        """Done with *handle* (closed unless the backend keeps it open for the next access)."""

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

    @abstractmethod
    def write(self, key: Any, data: bytes | bytearray | memoryview, offset: int = 0) -> None:
        """Write *data* at *offset* of *key* (independent).

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
