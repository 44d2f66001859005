"""The local or parallel file system through MPI-IO: the fast tier's backend.

:class:`MPIIOBackend` is the session's cache of open MPI files
(:class:`~sdm.storage.files.FileCache`: collective opens kept across accesses, the view
last set on each) seen through the storage seam (:class:`~sdm.storage.backends.base.Backend`):
its handles are :class:`MPIFileHandle` s (an ``MPI.File`` and the view state the cache
keeps for it), and the independent calls are POSIX ones on the same paths.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from mpi4py import MPI

from ..._collective import Failure, os_error
from ...errors import StorageError
from ..failures import storage_error
from ..files import FileCache
from .base import Backend, CollectiveHandle

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


class MPIIOBackend(FileCache, Backend):
    """Files under a directory tree, opened collectively through MPI-IO (keys: absolute paths).

    Parameters are those of :class:`~sdm.storage.files.FileCache`.
    """

    name = "mpiio"
    tier = "fast"
    partial_writes = True
    collective_io = True
    multipart = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._fds: dict[str, int] = {}  # read-only descriptors kept by read_into
        self._maps: dict[str, np.memmap] = {}  # read-only memory maps kept by mapped

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

    def read(self, key: Any, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """``pread`` of each range (short at the end of the file), through the descriptor :meth:`_fd` keeps."""
        fd = self._fd(key)
        try:
            return [os.pread(fd, int(n), int(o)) if n else b"" for o, n in ranges]
        except OSError as exc:
            raise os_error(exc, f"cannot read {key}") from None

    def read_into(self, key: Any, offset: int, out: Any) -> int:
        """``preadv`` straight into *out* (no copy), the file descriptor kept open for the next call."""
        view = memoryview(out).cast("B")
        fd = self._fd(key)
        done = 0
        try:
            while done < len(view):
                n = os.preadv(fd, [view[done:]], int(offset) + done)
                if n == 0:
                    break
                done += n
        except OSError as exc:
            raise os_error(exc, f"cannot read {key}") from None
        return done

    def mapped(self, key: Any, end: int) -> np.ndarray:
        """The bytes of file *key* as a read-only memory map (uint8), at least *end* of them (kept for the
        next calls; made again when the file grew).

        Raises
        ------
        StorageError
            The file cannot be mapped, or is shorter than *end*.
        """
        name = str(key)
        found = self._maps.get(name)
        if found is None or found.size < end:
            try:
                found = self._maps[name] = np.memmap(name, dtype=np.uint8, mode="r")
            except (OSError, ValueError) as exc:
                raise StorageError(f"cannot map {key}: {exc}") from None
            if found.size < end:
                raise StorageError(f"data file {key} holds {found.size} bytes, fewer than the {end} its rows need; "
                                   "the file was truncated")
        return found

    def _fd(self, key: Any) -> int:
        """A read-only descriptor of *key*, kept for the next reads (a few at most, the oldest closed)."""
        fds = self._fds
        name = str(key)
        fd = fds.get(name)
        if fd is None:
            try:
                fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC)
            except OSError as exc:
                raise os_error(exc, f"cannot read {key}") from None
            while len(fds) >= 16:
                os.close(fds.pop(next(iter(fds))))
            fds[name] = fd
        return fd

    def _forget(self, key: Any) -> None:
        """Close the descriptor and drop the memory map kept for *key* (it was replaced or removed)."""
        fd = self._fds.pop(str(key), None)
        if fd is not None:
            os.close(fd)
        self._maps.pop(str(key), None)

    def close_all(self) -> None:
        """Close every cached MPI file and every descriptor kept by :meth:`read_into` (collective)."""
        while self._fds:
            os.close(self._fds.popitem()[1])
        self._maps.clear()
        super().close_all()

    def write(self, key: Any, data: Any, offset: int = 0) -> None:
        """``pwrite`` *data* (any contiguous buffer) at *offset* (the file is created if needed; not synced:
        see :meth:`sync`).

        Raises
        ------
        StorageError
            The write failed; a full file system says so (:func:`~sdm.storage.failures.storage_error`).
        """
        view = memoryview(data).cast("B")
        try:
            fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o666)
        except OSError as exc:
            raise storage_error(exc, f"cannot open {key}", Path(key), needed=len(view)) from None
        try:
            at = 0
            while at < len(view):
                at += os.pwrite(fd, view[at:], int(offset) + at)
        except OSError as exc:
            raise storage_error(exc, f"cannot write {key}", Path(key), needed=len(view)) from None
        finally:
            os.close(fd)

    # ------------------------------------------------------------------ multipart, as an object store makes them
    @staticmethod
    def _part(key: Any, upload: str, number: int | None = None) -> Path:
        """Where part *number* of *upload* of *key* is kept (beside *key*); None: the assembled file."""
        path = Path(key)
        if not upload.isalnum():
            raise StorageError(f"multipart write of {key}: {upload!r} is no upload of this backend")
        return path.with_name(f".{path.name}.upload-{upload}" + ("" if number is None else f".{int(number)}"))

    def start_upload(self, key: Any) -> str:
        """A new upload id; each part becomes a file beside *key* until :meth:`finish_upload` joins them."""
        return uuid.uuid4().hex

    def put_part(self, key: Any, upload: str, number: int, data: Any) -> str:
        """Write part *number* to its own file (synced); its tag is the part's SHA-256 (hex)."""
        if int(number) < 1:
            raise StorageError(f"multipart write of {key}: part numbers start at 1, got {number}")
        path = self._part(key, upload, number)
        self.write(path, data)
        self.sync_path(path)
        return hashlib.sha256(memoryview(data).cast("B")).hexdigest()

    def finish_upload(self, key: Any, upload: str, tags: Sequence[str]) -> None:
        """Join the parts in part order into a file beside *key*, check each against its tag, sync it and rename
        it onto *key*: *key* changes at once, whole. The parts are removed.

        Raises
        ------
        StorageError
            A part is missing or differs from its tag (nothing replaced).
        """
        whole = self._part(key, upload)
        try:
            with open(whole, "wb") as out:
                for number, tag in enumerate(tags, 1):
                    part = self._part(key, upload, number)
                    digest = hashlib.sha256()
                    with open(part, "rb") as src:
                        for block in iter(lambda: src.read(1 << 22), b""):
                            digest.update(block)
                            out.write(block)
                    if digest.hexdigest() != tag:
                        raise StorageError(f"multipart write of {key}: part {number} differs from its tag")
                out.flush()
                os.fsync(out.fileno())
            os.replace(whole, key)
            self._forget(key)  # a descriptor or map kept for reads is of the file replaced
        except OSError as exc:
            whole.unlink(missing_ok=True)
            if isinstance(exc, StorageError):
                raise
            raise storage_error(exc, f"cannot finish the multipart write of {key}", Path(key), needed=0) from None
        self.abort_upload(key, upload)

    def abort_upload(self, key: Any, upload: str) -> None:
        """Remove the parts of *upload* (and a half-joined file); *key* is left as it was."""
        base = self._part(key, upload)
        try:
            names = os.listdir(base.parent)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise os_error(exc, f"cannot abort the multipart write of {key}") from None
        for name in names:
            if name == base.name or name.startswith(base.name + "."):
                (base.parent / name).unlink(missing_ok=True)

    @staticmethod
    def sync_path(key: Any) -> None:
        """``fsync`` of file *key* by this process alone (:func:`~sdm.storage.durability.fsync_path`)."""
        from ..durability import fsync_path

        fsync_path(Path(key))

    def size(self, key: Any) -> int | None:
        try:
            return os.stat(key).st_size
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise os_error(exc, f"cannot stat {key}") from None

    def delete(self, key: Any) -> None:
        self._forget(key)
        try:
            Path(key).unlink(missing_ok=True)
        except OSError as exc:
            raise os_error(exc, f"cannot remove {key}") from None

    def list(self, prefix: str = "") -> list[tuple[str, int]]:
        """``(path, size)`` of every file under the directory *prefix*, sorted."""
        out = []
        for folder, _, names in os.walk(prefix or "."):
            for name in names:
                path = os.path.join(folder, name)
                try:
                    out.append((path, os.stat(path).st_size))
                except FileNotFoundError:  # removed meanwhile
                    continue
        return sorted(out)


def _file(handle: MPIFileHandle | MPI.File) -> MPI.File:
    """The ``MPI.File`` of a handle (or the file itself)."""
    return handle.file if isinstance(handle, MPIFileHandle) else handle
