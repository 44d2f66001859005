"""The interface every I/O method implements, and the registry that names them.

A :class:`Transfer` is one rank's share of one collective dataset access: the open
file, where the dataset starts in it, the element and file types, and the memory
buffer spec.  Methods differ only in *how* they move the bytes; the bytes on disk
are identical whichever method is used.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from mpi4py import MPI

from ..errors import InvalidNameError

__all__ = ["Transfer", "IOMethod", "register", "get_method", "method_names"]


@dataclass
class Transfer:
    """One rank's part of one dataset access."""

    fh: MPI.File
    disp: int
    etype: MPI.Datatype
    filetype: MPI.Datatype
    memory: list


class IOMethod(ABC):
    """An I/O method: every rank calls ``write``/``read`` (methods may be collective)."""

    name: str = ""
    collective: bool = False

    @abstractmethod
    def write(self, t: Transfer) -> None:
        """Write this rank's elements."""

    @abstractmethod
    def read(self, t: Transfer) -> None:
        """Read this rank's elements into the memory buffer."""


_REGISTRY: dict[str, IOMethod] = {}


def register(method: IOMethod) -> IOMethod:
    """Add a method to the registry under its name."""
    _REGISTRY[method.name] = method
    return method


def get_method(name: str) -> IOMethod:
    """Return the registered method called *name*.

    Raises
    ------
    InvalidNameError
        Unknown name; the message lists the known ones.
    """
    try:
        return _REGISTRY[name]
    except KeyError:
        raise InvalidNameError(f"unknown I/O method {name!r}; choose one of {method_names() + ['auto']}") from None


def method_names() -> list[str]:
    """Names of the registered methods."""
    return sorted(_REGISTRY)
