"""One :class:`~sdm.errors.StorageError` for every failure of MPI-IO or the file system.

The operating system's error number is kept (``errno``), whichever layer saw the
failure: a POSIX call gives it directly, an MPI-IO call gives an error class
(``MPI_ERR_NO_SPACE`` is ``ENOSPC``, ...). A full file system is always ``ENOSPC``:
MPI-IO implementations often report it with a generic class (ROMIO's ``MPI_ERR_IO``,
"Other I/O error"), so when the class is generic the file system is asked
(``os.statvfs``) whether the space the call needed is still free; when it is not, the
error is ``ENOSPC`` with a message that says how much was needed, how much is free and
what to do.

No MPI import at module level: the CLI's storage code (trailers, verify) imports this
module without starting MPI.
"""

from __future__ import annotations

import errno as _errno
from pathlib import Path
from typing import Any

from ..errors import StorageError
from .mounts import free_bytes

__all__ = ["storage_error", "no_space", "mpi_errno"]

_MPI_ERRNO = {  # MPI error classes of file operations -> the operating system's error numbers
    "ERR_NO_SPACE": _errno.ENOSPC,
    "ERR_QUOTA": _errno.EDQUOT,
    "ERR_ACCESS": _errno.EACCES,
    "ERR_NO_SUCH_FILE": _errno.ENOENT,
    "ERR_FILE_EXISTS": _errno.EEXIST,
    "ERR_READ_ONLY": _errno.EROFS,
    "ERR_BAD_FILE": _errno.EINVAL,
    "ERR_FILE_IN_USE": _errno.EBUSY,
    "ERR_IO": _errno.EIO,
}
_GENERIC = (None, _errno.EIO)  # what says nothing about the cause: the file system is asked


def mpi_errno(exc: Any) -> int | None:
    """The ``errno`` matching an MPI-IO error (``ENOSPC`` for ``MPI_ERR_NO_SPACE``, ...), or None."""
    try:
        cls = exc.Get_error_class()
    except Exception:  # noqa: BLE001 - a description only
        return None
    from mpi4py import MPI  # loaded already: *exc* is an MPI error

    for name, number in _MPI_ERRNO.items():
        if getattr(MPI, name, None) == cls:
            return number
    return None


def no_space(what: str, path: str | Path, needed: int | None = None, free: int | None = None) -> StorageError:
    """The :class:`StorageError` (``errno.ENOSPC``) of *what* failing on *path* because its file system is full.

    Parameters
    ----------
    what : str
        The operation, as the message starts (``"MPI-IO write of /data/run/f.sdm"``).
    path : str or Path
        A file or directory on the full file system.
    needed : int, optional
        Bytes the operation needed (None or 0: not known).
    free : int, optional
        Bytes free there (asked from the file system when not given).
    """
    if free is None:
        free = free_bytes(path)
    need = f"{needed} bytes needed, " if needed else ""
    has = f"{free} bytes free" if free is not None else "free space unknown"
    return StorageError(
        f"{what}: no space left on the file system holding {path} ({need}{has}). Free space there or give "
        "another data root (root= or SDM_ROOT) and try again; what was committed before is intact",
        errno=_errno.ENOSPC,
    )


def storage_error(exc: BaseException, what: str, path: str | Path, *, needed: int | None = None) -> StorageError:
    """The :class:`StorageError` of *what* on *path* failing with *exc* (an ``MPI.Exception`` or ``OSError``).

    ``errno`` is the system's error number: from the ``OSError``, or from the MPI error
    class (:func:`mpi_errno`). A full file system is ``ENOSPC`` with the message of
    :func:`no_space`: when the system says so, and when an operation that writes (*needed*
    given) fails with a generic error (an MPI class without a number, or ``EIO``) while
    fewer than *needed* bytes (at least one) are free on the file system of *path*.

    Parameters
    ----------
    exc : BaseException
        The failure: ``MPI.Exception`` or ``OSError`` (anything else: its text, no errno).
    what : str
        The operation, as the message starts (``"MPI-IO write of /data/run/f.sdm"``).
    path : str or Path
        The file operated on.
    needed : int, optional
        Bytes the operation needed on the file system (0: it writes, how much is not
        known; None: it writes nothing, so a generic error is never taken for a full disk).
    """
    if needed is not None:
        needed = max(int(needed), 0)
    described = getattr(exc, "Get_error_string", None)
    if described is not None:  # MPI.Exception
        number = mpi_errno(exc)
        text = str(described())
    else:
        number = getattr(exc, "errno", None)
        text = getattr(exc, "strerror", None) or str(exc)
    if number == _errno.ENOSPC:
        return no_space(what, path, needed)
    if number in _GENERIC and needed is not None:
        free = free_bytes(path)
        if free is not None and free < max(needed, 1):
            return no_space(what, path, needed, free)
    return StorageError(f"{what}: {text}", errno=number)
