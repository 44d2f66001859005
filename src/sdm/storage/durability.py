"""Making written bytes durable: one ``fsync`` per node, or ``MPI_File_sync`` on every rank.

``MPI_File_sync`` is collective, and ROMIO implements it as an ``fsync`` by every rank
of the file's communicator.  On one node those calls queue behind each other on the
file's inode: with four ranks and 8 MB dirty, ``MPI_File_sync`` took 8.0 ms where one
``fsync`` followed by a barrier took 4.1 ms (the same bytes reached the disk).

The cache that holds written bytes belongs to the node, not to the process: the
kernel's page cache on a local file system, the client cache of NFS, Lustre or GPFS.
Once an MPI-IO write call has returned, its bytes are in that cache (ROMIO keeps no
write buffer of its own between calls), and one ``fsync`` of the file by any process
of the node writes back every dirty page of the file on that node, whoever wrote it.
So SDM syncs with one ``fsync`` per node, by the node's first rank, and an exchange of
errors that also keeps every rank waiting until every node is done.

The hint ``sdm_sync`` chooses:

``node`` (default)
    one ``fsync`` per node, as above;
``every_rank``
    ``MPI_File_sync`` on every rank, for file systems whose clients cache per process.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

from mpi4py import MPI

from .._collective import Failure, agree, capture
from ..errors import HintError, StorageError
from .failures import storage_error

__all__ = ["SYNC_MODES", "sync_mode", "node_comm", "make_durable", "sync_unagreed", "fsync_path"]

#: Values of the ``sdm_sync`` hint, the default first.
SYNC_MODES = ("node", "every_rank")

_KEYVAL: list[int] = []  # attribute key under which a communicator keeps its node communicator


def sync_mode(hints: Mapping[str, Any] | None) -> str:
    """The ``sdm_sync`` hint's value (default ``"node"``).

    Raises
    ------
    HintError
        For a value not in :data:`SYNC_MODES`.
    """
    value = str((hints or {}).get("sdm_sync", SYNC_MODES[0])).lower()
    if value not in SYNC_MODES:
        raise HintError(f"hint sdm_sync={value!r}: use one of {', '.join(map(repr, SYNC_MODES))}")
    return value


def _free_node(comm: MPI.Comm, keyval: int, node: Any) -> None:
    if isinstance(node, MPI.Comm) and node != MPI.COMM_NULL:
        node.Free()


def node_comm(comm: MPI.Comm) -> MPI.Comm:
    """The ranks of *comm* on this rank's node (collective the first time; cached on *comm*, freed with it)."""
    if not _KEYVAL:
        _KEYVAL.append(MPI.Comm.Create_keyval(delete_fn=_free_node))
    node = comm.Get_attr(_KEYVAL[0])
    if not isinstance(node, MPI.Comm):
        node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
        comm.Set_attr(_KEYVAL[0], node)
    return node


def _mpi_sync(fh: MPI.File) -> None:
    fh.Sync()


def fsync_path(path: Path) -> None:
    """``fsync`` the file *path* (this process alone).

    Raises
    ------
    StorageError
    """
    try:
        fd = os.open(path, os.O_WRONLY)
    except OSError as exc:
        raise StorageError(f"sync of {path} failed: cannot open it ({exc.strerror})", errno=exc.errno) from None
    try:
        os.fsync(fd)
    except OSError as exc:
        raise storage_error(exc, f"sync of {path} failed", path, needed=0) from None
    finally:
        os.close(fd)


def sync_unagreed(comm: MPI.Comm, fh: MPI.File | None, path: str | Path, mode: str = "node") -> Failure | None:
    """This rank's part of :func:`make_durable` without the exchange of errors.

    For callers that fold the outcome into an exchange they make anyway (a write's
    exchange of timings and checksums): the bytes are durable on every node once every
    rank has passed that exchange with no failure.  ``mode="every_rank"`` makes the
    collective ``MPI_File_sync`` (every rank must call); ``"node"`` is local.

    Returns
    -------
    Failure or None
        This rank's failure, to be agreed on by the caller.
    """
    if mode == "every_rank":
        try:
            _mpi_sync(fh)  # type: ignore[arg-type]
        except MPI.Exception as exc:
            return Failure(storage_error(exc, f"sync of {path} failed", path, needed=0), comm.Get_rank())
        return None
    if node_comm(comm).Get_rank() == 0:
        return capture(fsync_path, Path(path), rank=comm.Get_rank())[1]
    return None


def make_durable(comm: MPI.Comm, fh: MPI.File | None, path: str | Path, mode: str = "node") -> None:
    """Write the bytes written to *path* through MPI-IO back to storage (collective over *comm*).

    Parameters
    ----------
    comm : MPI.Comm
        The communicator the file was written by.
    fh : MPI.File or None
        The open file (needed for ``mode="every_rank"``; may be closed or None for ``"node"``).
    path : str or Path
    mode : {"node", "every_rank"}
        See the module documentation.

    Raises
    ------
    StorageError
        On every rank when the sync failed on any rank.
    """
    agree(comm, sync_unagreed(comm, fh, path, mode))  # every rank waits for every node's fsync
