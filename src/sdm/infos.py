"""Infos of a session: named homogeneous arrays kept as metadata (the paper's PDS infos).

A material table, a units vector, the coefficients a step was computed with: an info is
a small array (bool, integer, float, complex, or fixed-width ``S<n>``/``U<n>`` strings, at
most :data:`~sdm.catalog.infos.MAX_BYTES` = 16 MiB) attached to the run
(``session.set_info``), to a group, to one of its datasets or to one step of a dataset
(``group.set_info(name, array, dataset=, step=)``). Setting an info again at the same
place replaces it. It is stored in the catalog and in the run's meta-file (so ``sdm
rebuild`` restores it), and read back as a numpy array of the dtype (byte order
included) and shape it was given.

Every call is collective. Setting: every rank checks its arguments and passes one
digest of them (name, place, dtype, shape, bytes) in one ``Allgather``; any difference
raises :class:`~sdm.errors.CollectiveMismatchError` on every rank and nothing is stored;
then rank 0 appends the meta-file record and commits the catalog row. Reading: rank 0
reads the catalog and broadcasts the array's bytes.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from . import _validate as check
from ._collective import capture, exchange, root_call
from .catalog.changes import InfoSet
from .catalog.infos import InfoValue, info_value
from .errors import CollectiveMismatchError, InvalidArgumentError

if TYPE_CHECKING:
    from .catalog import DatasetRecord, GroupRecord
    from .engine.session_state import SessionState as Session

__all__ = ["set_info", "get_info", "list_infos"]


class Group(Protocol):
    """What an info's place takes of a group (:class:`sdm.Group`): its catalog record and its datasets'."""

    @property
    def record(self) -> GroupRecord: ...

    def dataset(self, name: str) -> DatasetRecord: ...


def _place(group: Group | None, dataset: Any, step: Any) -> tuple[int | None, int | None, int | None]:
    """Catalog ids of a place (group, dataset) and the step, checked on this rank.

    Raises
    ------
    DatasetNotFoundError
        *dataset* is not a dataset of the group.
    InvalidArgumentError
        A step without a dataset, or a step that is not an integer ``>= 0``.
    """
    if group is None:
        return None, None, None
    did = None if dataset is None else group.dataset(check.text(dataset, "dataset") or "").id
    if step is None:
        return group.record.id, did, None
    if did is None:
        raise InvalidArgumentError(f"an info of step {step!r} belongs to a dataset: give dataset= with step=")
    return group.record.id, did, check.integer(step, "time step")


def _names(group: Group | None, ids: tuple[int | None, int | None, int | None]) -> tuple[str | None, str | None,
                                                                                        int | None]:
    """The names of a place, for the catalog's reads and for messages."""
    if group is None:
        return None, None, None
    dname = None if ids[1] is None else next(d.name for d in group.record.datasets if d.id == ids[1])
    return group.record.name, dname, ids[2]


def _digest(name: str, place: tuple[Any, ...], value: InfoValue) -> int:
    """A 63-bit digest of an info set (name, place, dtype, shape, bytes), the same in every process."""
    h = hashlib.blake2b(digest_size=8)
    h.update(repr((name, place, value.dtype, value.shape)).encode())
    h.update(value.data)
    return int.from_bytes(h.digest(), "little") >> 1


def set_info(session: Session, name: str, array: Any, *, group: Group | None = None, dataset: Any = None,
             step: Any = None) -> None:
    """Store an info on the run, or on *group*, its *dataset*, or one *step* of it (collective).

    Raises
    ------
    ReadOnlyError
        The session reads (``mode="r"``).
    InvalidNameError, UnsupportedDtypeError, InvalidArgumentError, DatasetNotFoundError
        A bad name, dtype, size or place on any rank (nothing is stored).
    CollectiveMismatchError
        The ranks passed different names, places or arrays (nothing is stored).
    CatalogError, StorageError
        The catalog or the meta-file refused it.
    """
    session._check_writable(f"set info {name!r}")

    def prepare() -> tuple[tuple[int | None, int | None, int | None], InfoValue]:
        ids = _place(group, dataset, step)
        return ids, info_value(name, array)

    got, failure = capture(prepare, rank=session.rank)
    mine = 0 if got is None else _digest(name, _names(group, got[0]), got[1])
    digests = exchange(session.comm, failure, [mine])[:, 0]  # one Allgather; a failure is raised on every rank
    differ = [r for r in range(len(digests)) if digests[r] != digests[0]]
    if differ:
        raise CollectiveMismatchError(
            f"ranks passed different infos to set_info({name!r}, ...): ranks {differ} differ from rank 0 in the "
            "name, the place, the dtype, the shape or the values; every rank must pass the same array")
    assert got is not None  # no rank failed
    (gid, did, st), value = got
    root_call(session.comm, lambda: session.record(InfoSet(session.run_id, name, value, gid, did, st)))


def get_info(session: Session, name: str, *, group: Group | None = None, dataset: Any = None,
             step: Any = None) -> np.ndarray:
    """The info *name* of the run, or of *group*, its *dataset* or one *step* of it (collective).

    Rank 0 reads it from the catalog and broadcasts it; every rank returns its own copy.

    Raises
    ------
    NotFoundError
        No such info (a ``KeyError``), on every rank.
    InvalidNameError, InvalidArgumentError, DatasetNotFoundError
        A bad name or place.
    IntegrityError
        The catalog's bytes do not match their CRC-32.
    """
    def read() -> tuple[str, tuple[int, ...], bytes]:
        from .storage import check_name

        check_name(name, "info")
        where = _names(group, _place(group, dataset, step))
        rec = session.open_catalog().info(session.run_id, name, group=where[0], dataset=where[1], step=where[2])
        return rec.dtype, rec.shape, rec.data

    dtype, shape, data = root_call(session.comm, read)
    return InfoValue(dtype, shape, data, "").array()


def list_infos(session: Session, *, group: Group | None = None, dataset: Any = None, step: Any = None) -> list[str]:
    """The names of the infos of the run, or of *group*, its *dataset* or one *step* of it (collective)."""
    def names() -> list[str]:
        where = _names(group, _place(group, dataset, step))
        recs = session.open_catalog().infos(session.run_id, group=where[0], dataset=where[1], step=where[2],
                                            data=False)
        return [r.name for r in recs]

    return root_call(session.comm, names)

