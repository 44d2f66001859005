"""The local or parallel file system through MPI-IO: the fast tier's backend.

:class:`MPIIOBackend` is the session's cache of open MPI files
(:class:`~sdm.storage.files.FileCache`: collective opens kept across accesses, the view
last set on each) seen through the storage seam (:class:`~sdm.storage.backends.base.Backend`):
its handles are :class:`MPIFileHandle` s (an ``MPI.File`` and the view state the cache
keeps for it), and the independent calls are POSIX ones on the same paths.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np
from mpi4py import MPI

from ..._collective import Failure
from ...errors import StorageError
from ..failures import storage_error
from ..files import FileCache
from .base import CollectiveHandle
from .posix import PosixFiles

__all__ = ["MPIIOBackend", "MPIFileHandle"]


class MPIFileHandle(CollectiveHandle):
    """An open ``MPI.File`` seen through the storage seam: one method call per MPI call.

    Parameters
    ----------
    file : MPI.File
        The open file.
    backend : MPIIOBackend or None
        The backend that opened it (its independent reads go through it); None for a file
        opened elsewhere (:func:`sdm.io.make_transfer`): independent reads then use MPI-IO.
    key : object
        The file's path.
    views : dict, optional
        The file's view state (:meth:`~sdm.storage.files.FileCache.views`): what the last
        :meth:`set_view` was, shared by every handle on the cached file. A fresh dict by default.

    Attributes
    ----------
    file : MPI.File
        For code of the storage layer that needs the file itself (a sync).
    views : dict
    """

    def __init__(self, file: MPI.File, backend: "MPIIOBackend | None" = None, key: Any = None,
                 views: dict[str, Any] | None = None) -> None:
        self.file = file
        self.backend: MPIIOBackend | None = backend
        self.key = key
        self.views = {} if views is None else views

    def __repr__(self) -> str:
        return f"MPIFileHandle({self.key!r})"

    # ------------------------------------------------------------------ views
    def set_view(self, disp: int, etype: MPI.Datatype, filetype: MPI.Datatype, *,
                 info: Sequence[tuple[str, str]] = (), key: Any = None, extent: int = 0, elements: int = 0) -> int:
        """``MPI_File_set_view`` unless the kept view reaches *disp* (see :meth:`CollectiveHandle.set_view`).

        Whether to skip depends only on values that are the same on every rank (*key*,
        *disp*, *extent*, *info*) and on the view state, which only changes here, after
        the collective call succeeded: every rank decides alike.
        """
        ident = None if key is None or extent <= 0 else (key, extent, tuple(info))
        views = self.views
        last = views.get("view")
        if ident is not None and last is not None and last[0] == ident:
            shift = int(disp) - int(last[1])
            if shift >= 0 and shift % extent == 0:
                return shift // extent * elements
        views.pop("view", None)  # unknown until the collective call has succeeded
        if info:
            hints = MPI.Info.Create()
            try:
                for name, value in info:
                    hints.Set(name, value)
                self.file.Set_view(disp, etype, filetype, "native", hints)
            finally:
                hints.Free()
        else:
            self.file.Set_view(disp, etype, filetype, "native")
        if ident is not None:
            views["view"] = (ident, disp)
        return 0

    def forget_view(self) -> None:
        self.views.pop("view", None)

    # ------------------------------------------------------------------ data
    def write_at(self, offset: int, buf: Any) -> None:
        self.file.Write_at(offset, buf)

    def read_at(self, offset: int, buf: Any) -> None:
        self.file.Read_at(offset, buf)

    def write_at_all(self, offset: int, buf: Any) -> None:
        self.file.Write_at_all(offset, buf)

    def read_at_all(self, offset: int, buf: Any) -> None:
        self.file.Read_at_all(offset, buf)

    def read_fully(self, offset: int, buf: np.ndarray) -> None:
        status = MPI.Status()
        self.file.Read_at(offset, buf, status)
        got = status.Get_count(MPI.BYTE)
        if got < buf.size:
            buf[max(got, 0):] = 0

    def sync_all(self) -> None:
        self.file.Sync()

    # ------------------------------------------------------------------ independent, absolute offsets
    def read_into(self, offset: int, out: Any) -> int:
        """``preadv`` through the backend (absolute offsets, whatever the view); through MPI-IO under a
        byte view for a file opened elsewhere."""
        if self.backend is not None:
            return self.backend.read_into(self.key, offset, out)
        view = memoryview(out).cast("B")
        self.set_view(0, MPI.BYTE, MPI.BYTE)  # collective: a handle without a backend is the caller's own
        status = MPI.Status()
        try:
            self.file.Read_at(int(offset), [view, MPI.BYTE], status)
        except MPI.Exception as exc:
            raise storage_error(exc, f"cannot read {self.key}", self.key, needed=None) from None
        return max(int(status.Get_count(MPI.BYTE)), 0)

    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        if self.backend is not None:
            return self.backend.read(self.key, ranges)
        out = []
        for o, n in ranges:
            buf = bytearray(int(n))
            out.append(bytes(buf[:self.read_into(int(o), buf)]))
        return out

    def get_size(self) -> int:
        """``MPI_File_get_size``.

        Raises
        ------
        StorageError
        """
        try:
            return int(self.file.Get_size())
        except MPI.Exception as exc:
            raise storage_error(exc, f"cannot get the size of {self.key}", self.key, needed=None) from None


class MPIIOBackend(FileCache, PosixFiles):
    """Files under a directory tree, opened collectively through MPI-IO (keys: absolute paths).

    Its independent calls are :class:`~sdm.storage.backends.posix.PosixFiles`'s.
    Parameters are those of :class:`~sdm.storage.files.FileCache`.
    """

    name = "mpiio"
    tier = "fast"
    partial_writes = True
    collective_io = True
    multipart = True
    mappable = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        FileCache.__init__(self, *args, **kwargs)
        PosixFiles.__init__(self)

    def close_all(self) -> None:
        """Close every cached MPI file (collective), every kept descriptor and memory map."""
        PosixFiles.close_all(self)
        FileCache.close_all(self)

    def open(self, key: Any, *, cache: bool = True) -> MPIFileHandle:
        """The handle of path *key*: its open ``MPI.File`` (collective; :meth:`FileCache.get`) and the
        view state the cache keeps for it."""
        path = Path(key)
        fh = self.get(path, cache=cache)
        return MPIFileHandle(fh, self, path, self.views(path))

    def release(self, key: Any, handle: MPIFileHandle | MPI.File) -> None:
        """Close *handle* unless the cache keeps it (collective; :meth:`FileCache.release`)."""
        super().release(Path(key), _file(handle))

    def sync(self, key: Any, handle: MPIFileHandle | MPI.File | None = None) -> None:
        """:meth:`FileCache.sync` (collective)."""
        super().sync(Path(key), None if handle is None else _file(handle))

    def sync_unagreed(self, key: Any, handle: MPIFileHandle | MPI.File | None = None) -> Failure | None:
        """:meth:`FileCache.sync_unagreed`."""
        return super().sync_unagreed(Path(key), None if handle is None else _file(handle))


def _file(handle: MPIFileHandle | MPI.File) -> MPI.File:
    """The ``MPI.File`` of a handle (or the file itself)."""
    return handle.file if isinstance(handle, MPIFileHandle) else handle
