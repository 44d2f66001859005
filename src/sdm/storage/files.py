"""Collective opening and caching of MPI files.

At levels 2 and 3 one file receives many writes; the cache keeps it open across them
(the point of those levels is fewer opens), together with the file view last set on it
(:meth:`FileCache.views`), so that an access through the same view skips the collective
``MPI_File_set_view`` (:func:`sdm.io._support.set_view`).  Every rank makes the same sequence of
``get``/``close`` calls, so the collective ``MPI.File.Open``/``Close`` always match.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from pathlib import Path
from typing import Any

from mpi4py import MPI

from .._collective import Failure, agree, capture
from ..errors import StorageError
from .durability import make_durable, sync_unagreed
from .failures import mpi_errno, storage_error

__all__ = ["FileCache", "extend_file", "copy_range", "mpi_errno"]


class FileCache:
    """An LRU of open MPI files keyed by absolute path.

    Parameters
    ----------
    comm : MPI.Comm
        The session communicator.
    writable : bool
        Open read-write (creating files) or read-only.
    capacity : int
        Open files kept at most; the least recently used is closed first.
    info : MPI.Info
        Hints passed to ``MPI.File.Open`` (ROMIO hints such as ``cb_nodes``).
    sync_mode : {"node", "every_rank"}
        How :meth:`sync` makes bytes durable (:mod:`sdm.storage.durability`).
    """

    def __init__(self, comm: MPI.Intracomm, *, writable: bool, capacity: int = 64, info: MPI.Info = MPI.INFO_NULL,
                 sync_mode: str = "node") -> None:
        self.comm = comm
        self.writable = writable
        self.capacity = capacity
        self.info = info
        self.sync_mode = sync_mode
        self._open: OrderedDict[Path, MPI.File] = OrderedDict()
        self._views: dict[Path, dict[str, Any]] = {}  # per cached file: the view last set on it
        self.opens = 0

    def get(self, path: Path, *, cache: bool = True) -> MPI.File:
        """Return the open file for *path* (collective).

        Raises
        ------
        StorageError
            On every rank when any rank cannot open the file.
        """
        fh = self._open.get(path)
        if fh is not None:
            self._open.move_to_end(path)
            return fh
        rank = self.comm.Get_rank()
        made = None
        if self.writable and rank == 0:
            _, made = capture(self._make_parent, path, rank=0)
        agree(self.comm, made)  # the directory exists for everyone before the open
        amode = (MPI.MODE_RDWR | MPI.MODE_CREATE) if self.writable else MPI.MODE_RDONLY
        opened, failure = capture(self._open_file, path, amode, rank=rank)
        try:
            agree(self.comm, failure)
        except StorageError:
            if opened is not None:
                opened.Close()
            raise
        assert opened is not None  # no rank failed
        fh = opened
        self.opens += 1
        if cache:
            self._open[path] = fh
            while len(self._open) > self.capacity:
                gone, old = self._open.popitem(last=False)
                self._views.pop(gone, None)
                old.Close()
        return fh

    def views(self, path: Path) -> dict[str, Any]:
        """The view state of the cached file *path* (an empty, unshared dict for a file not cached).

        The state changes only inside collective ``Set_view`` calls made by every rank,
        so it is the same on every rank; :meth:`reset_views` forgets it everywhere
        after a failed access (a ``Set_view`` may have failed on some ranks only).
        """
        if path not in self._open:
            return {}
        return self._views.setdefault(path, {})

    def reset_views(self) -> None:
        """Forget every file's view state (every rank, after an access failed)."""
        for state in self._views.values():
            state.clear()

    @staticmethod
    def _make_parent(path: Path) -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise storage_error(exc, f"cannot create directory {path.parent}", path.parent, needed=0) from None

    def _open_file(self, path: Path, amode: int) -> MPI.File:
        try:
            return MPI.File.Open(self.comm, str(path), amode, self.info)
        except MPI.Exception as exc:
            raise storage_error(exc, f"cannot open {path} ({'read-write' if self.writable else 'read-only'})",
                                path, needed=0 if self.writable else None) from None

    def sync(self, path: Path, fh: MPI.File | None = None) -> None:
        """Make the bytes written to *path* durable (collective).

        *fh* is the file's handle when it is not (or no longer) in the cache; a path
        neither cached nor given a handle has nothing to sync.

        Raises
        ------
        StorageError
            On every rank, when the sync failed on any.
        """
        fh = self._open.get(path, fh)
        if fh is None:
            return
        make_durable(self.comm, fh, path, self.sync_mode)

    def sync_unagreed(self, path: Path, fh: MPI.File | None = None) -> Failure | None:
        """This rank's part of :meth:`sync`; the caller agrees on the returned failure (see
        :func:`sdm.storage.durability.sync_unagreed`)."""
        fh = self._open.get(path, fh)
        if fh is None:
            return None
        return sync_unagreed(self.comm, fh, path, self.sync_mode)

    def release(self, path: Path, fh: MPI.File) -> None:
        """Close *fh* unless it is cached (collective)."""
        if self._open.get(path) is not fh:
            fh.Close()

    def close_all(self) -> None:
        """Close every cached file (collective)."""
        self._views.clear()
        while self._open:
            _, fh = self._open.popitem(last=False)
            fh.Close()


def extend_file(path: Path, end: int) -> None:
    """Make *path* at least *end* bytes long, creating it if needed (a sparse zero tail).

    Called by rank 0 before a collective write into space reserved up to *end*: bytes no
    rank writes (rows left unowned by a map with ``coverage=False``) then read as zeros,
    and read-modify-write cycles inside MPI-IO never read past the end of the file
    (which returns garbage). The file only ever grows: the last reserved byte is written
    (it belongs to this write's reservation), so a concurrent writer's longer extension
    is never cut back.

    Raises
    ------
    StorageError
    """
    try:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o666)
        except FileNotFoundError:  # the first file of its directory
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o666)
        try:
            if end > 0 and os.fstat(fd).st_size < end:
                os.pwrite(fd, b"\0", end - 1)
        finally:
            os.close(fd)
    except OSError as exc:
        raise storage_error(exc, f"cannot prepare data file {path}", path, needed=0) from None


def copy_range(src: Path, src_offset: int, dst: Path, dst_offset: int, nbytes: int) -> None:
    """Copy *nbytes* from one file's offset to another's (in the kernel where it can).

    Raises
    ------
    StorageError
    """
    try:
        fi = os.open(src, os.O_RDONLY | os.O_CLOEXEC)
        try:
            fo = os.open(dst, os.O_WRONLY | os.O_CLOEXEC)
            try:
                done = 0
                while done < nbytes:
                    n = os.copy_file_range(fi, fo, nbytes - done, src_offset + done, dst_offset + done)
                    if n == 0:
                        raise OSError(5, f"{src} ends before byte {src_offset + nbytes}")
                    done += n
            finally:
                os.close(fo)
        finally:
            os.close(fi)
    except OSError as exc:
        raise storage_error(exc, f"cannot copy {nbytes} bytes from {src} to {dst}", dst, needed=nbytes) from None
