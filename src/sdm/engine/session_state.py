"""What the engine needs of a session: its state, as a protocol (the engine never imports the user API).

:class:`sdm.Session` satisfies :class:`SessionState` by its attributes; the engine's
functions that open, close, define groups or truncate take any object that does.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Protocol, TypeVar

from mpi4py import MPI

if TYPE_CHECKING:
    from .space import SpacePool
    from ..catalog.catalog import Catalog
    from ..planner import Planner
    from ..storage import FileCache, runs
    from ..storage.backends.mpiio import MPIIOBackend
    from .commits import Commits
    from .operations import Operations
    from .._collective import Failure
    from ..catalog.changes import Change

__all__ = ["GroupHandle", "SessionState"]

T = TypeVar("T")


class GroupEngineHandle(Protocol):
    """What a session's close and truncation need of a group's engine (:class:`~sdm.engine.group_engine.GroupEngine`)."""

    @property
    def _pool(self) -> "SpacePool": ...

    def _free(self) -> None: ...

    def _truncated(self, after_step: int) -> None: ...


class GroupHandle(Protocol):
    """What the engine needs of a session's group handle (:class:`sdm.Group`)."""

    @property
    def engine(self) -> GroupEngineHandle: ...


class SessionState(Protocol):
    """What the engine reads and sets on a session (:class:`sdm.Session`)."""

    _closed: bool
    _lock: runs.RunLock | None

    @property
    def comm(self) -> MPI.Intracomm: ...
    @property
    def rank(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def application(self) -> str: ...
    @property
    def mode(self) -> str: ...
    @property
    def method(self) -> str: ...
    @property
    def hints(self) -> dict[str, str]: ...
    @property
    def sync(self) -> bool: ...
    @property
    def metafile(self) -> bool: ...
    @property
    def run_id(self) -> int: ...
    @property
    def root(self) -> Path: ...
    @property
    def run_dir(self) -> str: ...
    @property
    def described(self) -> set[str]: ...
    @property
    def planner(self) -> Planner: ...
    @property
    def files(self) -> MPIIOBackend: ...
    @property
    def sources(self) -> FileCache: ...
    @property
    def catalog(self) -> Catalog | None: ...
    @property
    def _ops(self) -> Operations: ...
    @property
    def _commits(self) -> Commits: ...
    @property
    def _groups(self) -> Mapping[str, GroupHandle]: ...
    @property
    def checksum(self) -> bool: ...
    @property
    def verify(self) -> bool: ...
    @property
    def async_commit(self) -> bool: ...

    def _check_writable(self, what: str) -> None: ...

    # rank 0's catalog (sdm.engine.commits.Commits), reached through the session
    def record(self, change: "Change[T]") -> T: ...

    def open_catalog(self) -> "Catalog": ...

    def _commit_later(self, rows: list[dict[str, Any]]) -> None: ...

    def _settle(self) -> "Failure | None": ...
