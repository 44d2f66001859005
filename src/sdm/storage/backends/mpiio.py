"""The local or parallel file system through MPI-IO: the fast tier's backend.

:class:`MPIIOBackend` is the session's cache of open MPI files
(:class:`~sdm.storage.files.FileCache`: collective opens kept across accesses, the view
last set on each) seen through the storage seam (:class:`~sdm.storage.backends.base.Backend`):
its handles are ``MPI.File`` objects, and the independent calls are POSIX ones on the
same paths.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from mpi4py import MPI

from ..._collective import os_error
from ...errors import StorageError
from ..files import FileCache
from .base import Backend

__all__ = ["MPIIOBackend"]


class MPIIOBackend(FileCache, Backend):
    """Files under a directory tree, opened collectively through MPI-IO (keys: absolute paths).

    Parameters are those of :class:`~sdm.storage.files.FileCache`.
    """

    name = "mpiio"
    tier = "fast"
    partial_writes = True
    collective_io = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._fds: dict[str, int] = {}  # read-only descriptors kept by read_into
        self._maps: dict[str, np.memmap] = {}  # read-only memory maps kept by mapped

    def open(self, key: Any, *, cache: bool = True) -> MPI.File:
        """The open ``MPI.File`` of path *key* (collective; :meth:`FileCache.get`)."""
        return self.get(Path(key), cache=cache)

    def release(self, key: Any, handle: MPI.File) -> None:
        """Close *handle* unless the cache keeps it (collective; :meth:`FileCache.release`)."""
        super().release(Path(key), handle)

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

    def close_all(self) -> None:
        """Close every cached MPI file and every descriptor kept by :meth:`read_into` (collective)."""
        while self._fds:
            os.close(self._fds.popitem()[1])
        self._maps.clear()
        super().close_all()

    def write(self, key: Any, data: bytes | bytearray | memoryview, offset: int = 0) -> None:
        """``pwrite`` *data* at *offset* (the file is created if needed; not synced: see :meth:`sync`)."""
        try:
            fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o666)
            try:
                view, at = memoryview(data).cast("B"), 0
                while at < len(view):
                    at += os.pwrite(fd, view[at:], int(offset) + at)
            finally:
                os.close(fd)
        except OSError as exc:
            raise os_error(exc, f"cannot write {key}") from None

    def size(self, key: Any) -> int | None:
        try:
            return os.stat(key).st_size
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise os_error(exc, f"cannot stat {key}") from None

    def delete(self, key: Any) -> None:
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
