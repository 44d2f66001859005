"""The interface every I/O method implements, and the registry that names them.

A :class:`Transfer` is one rank's share of one collective dataset access: the typed
handle the storage backend opened (:class:`sdm.storage.backends.base.FileHandle`: an
MPI-IO file's :class:`~sdm.storage.backends.mpiio.MPIFileHandle`, or an object's
:class:`~sdm.storage.backends.objectstore.ObjectHandle` on the archive tier; a method
never sees an ``MPI.File`` or the S3 client), where the dataset starts in it, the element and file
types, and the memory buffer spec.  Every method declares the backend it moves bytes
through (:attr:`IOMethod.backend`), so only the methods of the bytes' backend are
offered.  Methods differ only in *how* they move the bytes; the bytes stored are
identical whichever method is used.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np
from mpi4py import MPI

from ..errors import InternalError, InvalidArgumentError
from ..storage.backends.base import CollectiveHandle, FileHandle

__all__ = ["Transfer", "IOMethod", "SymmetricMethod", "register", "get_method", "method_names", "make_transfer"]


@dataclass
class Transfer:
    """One rank's part of one dataset access.

    Attributes
    ----------
    fh : FileHandle or None
        The backend's handle (None for a subfiled step, whose extents are each reached
        through their own place, :mod:`sdm.io.subfiles`): an :class:`~sdm.storage.backends.mpiio.MPIFileHandle` on the
        open file (collectively opened by the session's communicator; it also keeps the
        file's view state, so an unchanged view is not set again) for ``mpiio`` methods
        (:attr:`file`), an :class:`~sdm.storage.backends.objectstore.ObjectHandle` for
        ``objectstore`` ones.
    disp : int
        Byte offset of the dataset in the file.
    etype, filetype : MPI.Datatype
        Element type and this rank's file type (extent: the whole global array).
    memory : list
        mpi4py buffer spec ``[array, count, type]`` selecting the interior.
    piece : Piece
        This rank's piece (global indices per dimension, counts, ghosts).
    array : numpy.ndarray
        The local array, ghost layers included (the buffer ``memory`` refers to).
    order : str
        Storage order of the dataset (``"C"`` or ``"F"``).
    comm : MPI.Comm
        The session communicator (what collective methods synchronize on).
    hints : dict
        Method parameters from the session (aggregators, buffer sizes, ...).
    layout : object
        A key of the dataset's layout that is the same on every rank (the data view's
        identity, dtype and order), or None: the view is then set on every access.
    stats : sequence
        Every rank's layout statistics of this access, in rank order (what methods that
        split the bytes between aggregators plan from; empty when not given).
    scratch : pathlib.Path or None
        A directory on the fast tier a method may keep bytes in (the remote reads' cache).
    """

    fh: FileHandle | None
    disp: int
    etype: MPI.Datatype
    filetype: MPI.Datatype
    memory: list
    piece: Any = None
    array: Any = None
    order: str = "C"
    comm: MPI.Comm | None = None
    hints: dict = field(default_factory=dict)
    layout: Any = None
    stats: Any = ()
    scratch: Any = None

    @property
    def file(self) -> CollectiveHandle:
        """:attr:`fh` as the handle of a shared file with views and collective calls (``mpiio`` methods).

        Raises
        ------
        InternalError
            The handle is not one (a method of one backend was given another's bytes).
        """
        fh = self.fh
        if not isinstance(fh, CollectiveHandle):
            raise InternalError(f"this method needs a handle with file views and collective calls, got {fh!r}")
        return fh


@contextmanager
def make_transfer(
    fh: FileHandle | MPI.File,
    disp: int,
    piece: Any,
    array: np.ndarray,
    order: str,
    comm: MPI.Comm,
    hints: dict | None = None,
) -> Iterator[Transfer]:
    """A :class:`Transfer` for *piece* of *array*, its MPI types freed afterwards.

    What :class:`sdm.Group` builds for a write or a read, for code that drives the
    methods directly (benchmarks, the calibration, tests). A plain ``MPI.File`` is
    wrapped in an :class:`~sdm.storage.backends.mpiio.MPIFileHandle` of its own (its view
    is then set on every access).
    """
    from ..layout.datatypes import element_type, file_type, freeing, memory_spec
    from ..storage.backends.mpiio import MPIFileHandle

    handle = fh if isinstance(fh, FileHandle) else MPIFileHandle(fh)

    etype = element_type(array.dtype).Commit()
    ftype = file_type(piece, etype, order)
    try:
        mem, made = memory_spec(array, piece, etype, order)
        with freeing(made):
            yield Transfer(handle, int(disp), etype, ftype, mem, piece, array, order, comm, dict(hints or {}))
    finally:
        ftype.Free()
        etype.Free()


class IOMethod(ABC):
    """An I/O method: every rank calls ``write``/``read`` (methods may be collective).

    Attributes
    ----------
    name : str
    collective : bool
        Every rank must call it (it makes collective calls).
    backend : str
        The storage backend whose handles it moves bytes through
        (:attr:`sdm.storage.backends.base.Backend.name`).
    """

    name: str = ""
    collective: bool = False
    backend: str = "mpiio"

    @abstractmethod
    def write(self, t: Transfer) -> None:
        """Write this rank's elements."""

    @abstractmethod
    def read(self, t: Transfer) -> None:
        """Read this rank's elements into the memory buffer."""


class SymmetricMethod(IOMethod):
    """A method whose write and read are the same steps in opposite directions."""

    @abstractmethod
    def move(self, t: Transfer, writing: bool) -> None:
        """Write (``writing``) or read this rank's elements."""

    def write(self, t: Transfer) -> None:
        self.move(t, True)

    def read(self, t: Transfer) -> None:
        self.move(t, False)


_REGISTRY: dict[str, IOMethod] = {}


def register(method: IOMethod) -> IOMethod:
    """Add a method to the registry under its name."""
    _REGISTRY[method.name] = method
    return method


def get_method(name: str) -> IOMethod:
    """Return the registered method called *name*.

    Raises
    ------
    InvalidArgumentError
        Unknown name; the message lists the known ones.
    """
    try:
        return _REGISTRY[name]
    except KeyError:
        raise InvalidArgumentError(f"unknown I/O method {name!r}; choose one of {method_names(None) + ['auto']}") from None


def method_names(backend: str | None = "mpiio") -> list[str]:
    """Names of the registered methods of *backend* (None: of every backend)."""
    return sorted(n for n, m in _REGISTRY.items() if backend is None or m.backend == backend)
