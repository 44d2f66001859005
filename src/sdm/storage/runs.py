"""Run directories: unique without the catalog, owned by one catalog, locked by live writers.

A run's directory is ``<application>/run-<id>-<UTC time>-<random>`` under the data root:
the id makes it easy to find, the time and 48 random bits make it unique even when the
catalog is lost and ids start again, or when two catalogs share a data root. It is
created with ``mkdir`` (never reused) and holds a marker file, ``.sdm-run``, naming the
catalog and run that created it; SDM writes into a run directory only when the marker
names the catalog and run writing. Every session writing the run holds a shared
``flock`` on the marker for its lifetime, so a run the catalog says is ``open`` but whose
marker nobody holds was interrupted (its writers died: a kill, a node failure).
"""

from __future__ import annotations

import contextlib

import fcntl
import json
import os
import secrets
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

from ..errors import RunStateError, StorageError
from .naming import component

__all__ = ["MARKER", "make_run_dir", "check_run_dir", "RunLock", "writer_alive", "legacy_run_dir", "keeps_metafile",
           "read_marker"]

#: Name of the marker file in every run directory.
MARKER = ".sdm-run"

_LOCK_TRIES, _LOCK_WAIT = 50, 0.02  # a writer waits at most about a second for an exclusive holder


def legacy_run_dir(application: str, run_id: int) -> str:
    """The directory of a run made before run directories were unique (catalog revision < 0004)."""
    return f"{component(application)}/run-{run_id:06d}"


def make_run_dir(root: Path, application: str, run_id: int, catalog_id: str, *, metafile: bool = True) -> str:
    """Create a new, unique run directory with its marker; returns it relative to *root*.

    A run written without a meta-file (*metafile* False) says so in its marker
    (``"metafile": false``), so ``sdm rebuild`` and later sessions know.

    Raises
    ------
    StorageError
        The directory cannot be created (permissions, full file system, ...).
    """
    app_dir = Path(root) / component(application)
    try:
        app_dir.mkdir(parents=True, exist_ok=True)
        for _ in range(8):
            stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
            name = f"run-{run_id:06d}-{stamp}-{secrets.token_hex(6)}"
            try:
                (app_dir / name).mkdir()
                break
            except FileExistsError:
                continue
        else:  # pragma: no cover - 48 random bits collided eight times
            raise StorageError(f"cannot make a unique run directory under {app_dir}")
        marker: dict[str, object] = {"catalog": catalog_id, "run": int(run_id), "application": application,
                                     "created": stamp}
        if not metafile:
            marker["metafile"] = False
        path = app_dir / name / MARKER
        with open(path, "x") as f:
            json.dump(marker, f)
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        raise StorageError(f"cannot create the run directory under {app_dir}: {exc.strerror}", exc.errno) from None
    return f"{component(application)}/{name}"


#: A marker is about 150 bytes; a larger file is refused before it is read.
MARKER_MAX = 64 << 10


def read_marker(run_dir: Path) -> dict[str, Any] | None:
    """The marker of *run_dir*, checked against :data:`sdm.file_formats.MARKER`; None when there is none.

    Raises
    ------
    StorageError
        The marker cannot be read.
    IntegrityError
        The marker is not what SDM writes (not JSON, too large, a member missing or of the
        wrong type); the message names the file and the member.
    """
    from ..file_formats import MARKER as SCHEMA
    from ..file_formats import Where, load_object, read_regular

    path = Path(run_dir) / MARKER
    where = Where(str(path), "the run directory's marker was changed or not written by SDM; SDM writes only into "
                             "run directories it created, and reads a run through its meta-file")
    try:
        raw = read_regular(path, where, MARKER_MAX)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StorageError(f"cannot read the marker {path}: {exc.strerror}", exc.errno) from None
    result: dict[str, Any] = SCHEMA.validate(load_object(raw, where, "the marker"), where)
    return result


def keeps_metafile(run_dir: Path) -> bool:
    """False when the marker of *run_dir* says its run was written without a meta-file.

    A marker that is missing or cannot be read says nothing: True (the meta-file decides).

    Raises
    ------
    IntegrityError
        The marker is not what SDM writes (:func:`read_marker`).
    """
    try:
        marker = read_marker(run_dir)
    except StorageError:
        return True
    return marker is None or marker.get("metafile") is not False


def check_run_dir(root: Path, rel_dir: str, catalog_id: str, run_id: int, *, legacy: bool = False) -> None:
    """Make sure the run directory was created by this catalog for this run.

    A run made before unique directories (*legacy*) has no marker; its directory is
    accepted as long as no other catalog's marker is in it.

    Raises
    ------
    RunStateError
        The directory belongs to another catalog or run, or its marker cannot be read.
    IntegrityError
        The marker is not what SDM writes (:func:`read_marker`).
    """
    try:
        marker = read_marker(Path(root) / rel_dir)
    except StorageError as exc:
        raise RunStateError(f"run {run_id}: {exc}") from None
    if marker is None:
        if legacy:
            return
        raise RunStateError(
            f"run {run_id}: its directory {Path(root) / rel_dir} has no {MARKER} marker; SDM writes only into "
            "run directories it created for this catalog"
        )
    if marker["catalog"] != catalog_id or marker["run"] != int(run_id):
        raise RunStateError(
            f"run {run_id}: the directory {Path(root) / rel_dir} was created by another catalog or run "
            f"(marker {marker!r}); SDM never writes into a run directory this catalog did not create"
        )


class RunLock:
    """A shared lock on a run's marker, held while a session writes the run.

    Taken without blocking (retried for about a second), so a session never waits on
    `sdm gc` while it holds the catalog's write lock: it raises :class:`RunStateError`.

    Parameters
    ----------
    root, rel_dir
        The run's data root and directory.
    """

    def __init__(self, root: Path, rel_dir: str) -> None:
        self.path = Path(root) / rel_dir / MARKER
        self._fd: int | None = None
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return  # a legacy run without a marker: nothing to lock
        except OSError as exc:
            raise StorageError(f"cannot open {self.path}: {exc.strerror}", exc.errno) from None
        for attempt in range(_LOCK_TRIES):
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                break
            except BlockingIOError:  # an exclusive holder: a liveness probe (microseconds) or `sdm gc`
                time.sleep(_LOCK_WAIT)
            except OSError:
                os.close(fd)  # a file system without locks: liveness cannot be told, writing still works
                return
        else:
            os.close(fd)
            raise RunStateError(
                f"the run in {self.path.parent} is locked by `sdm gc` (or another exclusive holder); "
                "open it again when that has finished"
            )
        self._fd = fd

    def release(self) -> None:
        """Drop the lock (the run's other writers keep theirs)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def writer_alive(root: Path, rel_dir: str | None) -> bool:
    """Whether a live session holds the run's lock (True when that cannot be told)."""
    if not rel_dir:
        return False
    path = Path(root) / rel_dir / MARKER
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False  # no marker: nobody can hold it
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True  # held by a writer (EWOULDBLOCK), or locks unsupported: assume alive
    finally:
        os.close(fd)
    return False


@contextlib.contextmanager
def exclusive(root: Path, rel_dir: str, run_id: int, command: str) -> Iterator[None]:
    """Hold a run's marker exclusively while *command* changes its files (``sdm gc``, tier operations).

    Taken without waiting: a session writing the run (which holds the marker shared)
    makes it fail, and a session that starts meanwhile is refused by :class:`RunLock`.
    A run without a marker (made before markers) is not locked.

    Raises
    ------
    RunStateError
        A live session is writing the run.
    """
    marker = Path(root) / rel_dir / MARKER
    fd = None
    if marker.exists():
        fd = os.open(marker, os.O_RDONLY | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise RunStateError(
                f"run {run_id} is being written by a live session; run `sdm {command} {run_id}` after it closed"
            ) from None
    try:
        yield
    finally:
        if fd is not None:
            os.close(fd)

