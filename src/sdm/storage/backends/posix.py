"""The fast tier's files by plain POSIX calls: the independent half of the ``mpiio`` backend.

:class:`PosixFiles` answers every independent call of the storage seam
(:class:`~sdm.storage.backends.base.Backend`) on files under a directory tree: ranged
reads (kept descriptors, ``preadv`` into the caller's buffer, memory maps), writes, sizes,
listings, removal, multipart writes (parts beside the file, joined and renamed into
place), and giving space back (``truncate``, punched holes). It needs no MPI: tools that
run without a session (``sdm verify``, ``sdm gc``, the tiers) use it as it is.
:class:`~sdm.storage.backends.mpiio.MPIIOBackend` is the same with the collective opens
of a session's communicator; only that one hands out handles.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from ...errors import StorageError
from ..failures import storage_error
from .base import Backend, FileHandle

if TYPE_CHECKING:
    import numpy as np

__all__ = ["PosixFiles"]

_PUNCH = 0x02 | 0x01  # FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE


def _os_error(exc: OSError, what: str) -> StorageError:
    """A :class:`StorageError` for an operating-system error, its ``errno`` kept."""
    text = exc.strerror or str(exc)
    where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
    return StorageError(f"{what}: {text}{where}", errno=exc.errno)


class PosixFiles(Backend):
    """Files under a directory tree, by POSIX calls of this process (keys: absolute paths).

    It opens no handle (:meth:`open` raises): the fast tier's handles are MPI-IO files
    opened collectively by a session (:class:`~sdm.storage.backends.mpiio.MPIIOBackend`).
    """

    name = "mpiio"
    tier = "fast"
    partial_writes = True
    collective_io = False
    multipart = True
    mappable = True

    def __init__(self) -> None:
        self._fds: dict[str, int] = {}  # read-only descriptors kept by read_into
        self._maps: dict[str, np.memmap] = {}  # read-only memory maps kept by mapped

    def open(self, key: Any, *, cache: bool = True) -> FileHandle:
        """Refused: handles on the fast tier are opened collectively (``MPIIOBackend``).

        Raises
        ------
        StorageError
        """
        raise StorageError(f"cannot open {key} for an I/O method without a communicator; a session's MPIIOBackend "
                           "opens the fast tier's handles")

    def release(self, key: Any, handle: Any) -> None:
        """Nothing is held."""

    def read(self, key: Any, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """``pread`` of each range (short at the end of the file), through the descriptor :meth:`_fd` keeps."""
        fd = self._fd(key)
        try:
            return [os.pread(fd, int(n), int(o)) if n else b"" for o, n in ranges]
        except OSError as exc:
            raise _os_error(exc, f"cannot read {key}") from None

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
            raise _os_error(exc, f"cannot read {key}") from None
        return done

    def mapped(self, key: Any, end: int) -> "np.ndarray":
        """The bytes of file *key* as a read-only memory map (uint8), at least *end* of them (kept for the
        next calls; made again when the file grew).

        Raises
        ------
        StorageError
            The file cannot be mapped, or is shorter than *end*.
        """
        import numpy as np

        name = str(key)
        found = self._maps.get(name)
        if found is None or found.size < end:
            self._maps.pop(name, None)
            while len(self._maps) >= 16:  # a few at most, the oldest dropped
                self._maps.pop(next(iter(self._maps)))
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
                raise _os_error(exc, f"cannot read {key}") from None
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
        """Close every descriptor kept by :meth:`read_into` and drop every kept memory map."""
        while self._fds:
            os.close(self._fds.popitem()[1])
        self._maps.clear()

    def write(self, key: Any, data: Any, offset: int = 0, *, what: str = "") -> None:
        """``pwrite`` *data* (any contiguous buffer) at *offset* (the file is created if needed; not synced:
        see :meth:`sync`).

        Raises
        ------
        StorageError
            The write failed; a full file system says so (:func:`~sdm.storage.failures.storage_error`).
        """
        view = memoryview(data).cast("B")
        try:
            fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o666)  # SDM makes no links
        except OSError as exc:
            raise storage_error(exc, f"cannot open {what + ' ' if what else ''}{key}", Path(key),
                                needed=len(view)) from None
        try:
            at = 0
            while at < len(view):
                at += os.pwrite(fd, view[at:], int(offset) + at)
        except OSError as exc:
            raise storage_error(exc, f"cannot write {what + ' ' if what else ''}{key}", Path(key),
                                needed=len(view)) from None
        finally:
            os.close(fd)

    # ------------------------------------------------------------------ giving space back
    def truncate(self, key: Any, size: int) -> None:
        """``truncate(2)``."""
        self._forget(key)
        try:
            os.truncate(key, int(size))
        except OSError as exc:
            raise _os_error(exc, f"cannot cut {key} to {size} bytes") from None

    def reclaim(self, key: Any, offset: int, nbytes: int) -> None:
        """Punch a hole (``fallocate`` with ``FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE``).

        Raises
        ------
        StorageError
            ``EOPNOTSUPP`` or ``ENOSYS`` where the file system cannot punch holes.
        """
        import ctypes
        import ctypes.util

        try:
            fd = os.open(key, os.O_WRONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise _os_error(exc, f"cannot open {key}") from None
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
            libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
            if libc.fallocate(fd, _PUNCH, int(offset), int(nbytes)) != 0:
                err = ctypes.get_errno()
                raise StorageError(f"cannot give back bytes {offset}..{offset + nbytes} of {key}: {os.strerror(err)}",
                                   err)
        finally:
            os.close(fd)

    def reclaimed(self, key: Any, start: int, end: int) -> bool:
        """No data in the range's whole blocks (``SEEK_DATA``: nothing read), zeros at its edges."""
        try:
            fd = os.open(key, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            block = os.fstat(fd).st_blksize or 4096
            inner_a, inner_b = -(-start // block) * block, end // block * block
            if inner_a < inner_b:
                try:
                    if os.lseek(fd, inner_a, os.SEEK_DATA) < inner_b:
                        return False
                except OSError:  # ENXIO: no data after inner_a
                    pass
            else:
                inner_a = inner_b = end
            edges = [(start, min(inner_a, end)), (max(inner_b, start), end)]
            return all(not any(os.pread(fd, b - a, a)) for a, b in edges if b > a)
        except OSError:
            return False
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
            raise _os_error(exc, f"cannot abort the multipart write of {key}") from None
        for name in names:
            if name == base.name or name.startswith(base.name + "."):
                (base.parent / name).unlink(missing_ok=True)

    @staticmethod
    def sync_path(key: Any) -> None:
        """``fsync`` of file *key* by this process alone.

        Raises
        ------
        StorageError
        """
        try:
            fd = os.open(key, os.O_WRONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise StorageError(f"sync of {key} failed: cannot open it ({exc.strerror})", errno=exc.errno) from None
        try:
            os.fsync(fd)
        except OSError as exc:
            raise storage_error(exc, f"sync of {key} failed", Path(key), needed=0) from None
        finally:
            os.close(fd)

    def sync(self, key: Any, handle: Any = None) -> None:
        """:meth:`sync_path` (this process alone)."""
        self.sync_path(key)

    def size(self, key: Any) -> int | None:
        try:
            return os.stat(key).st_size
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise _os_error(exc, f"cannot stat {key}") from None

    def delete(self, key: Any) -> None:
        self._forget(key)
        try:
            Path(key).unlink(missing_ok=True)
        except OSError as exc:
            raise _os_error(exc, f"cannot remove {key}") from None

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
