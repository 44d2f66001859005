"""Defining a group: its arguments checked and agreed on every rank, its view checked, its record made.

:func:`define_group` is the protocol of :meth:`sdm.Session.make_group` up to the
group's catalog record: every rank checks the arguments, the ranks agree on them (and
on the view) in one exchange, the archive's bucket is made when the group writes to
the object store, a view is checked against every dataset, and rank 0 records the
group (:class:`~sdm.catalog.changes.GroupDefined`). The session then makes the
:class:`~sdm.Group` handle from that record.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from .. import _validate as check
from .._collective import agree, capture, root_call
from ..catalog import DatasetSpec, GroupRecord
from ..catalog.changes import GroupDefined
from ..values import encode
from ..errors import CollectiveMismatchError, DistributionError, InvalidArgumentError, InvalidNameError
from ..layout import Distribution
from ..layout.agreement import agree_view, differences
from ..layout.ranked import Ranked
from ..segments import check_kind
from ..storage import check_level, check_name, check_steps_per_file
from ..storage.subfiles import check_subfiles
from .checks import named

if TYPE_CHECKING:
    from .session_state import SessionState

__all__ = ["define_group", "same_calls", "check_view"]


def define_group(s: SessionState, name: str, specs_of: Callable[[], list[DatasetSpec]], *, level: int | None,
                 view: Distribution | None, attributes: dict[str, Any] | None, kind: str,
                 steps_per_file: int | None, tier: str, archive: str | None, coords: dict[str, Any] | None,
                 subfiles: int | str | None) -> GroupRecord:
    """Check and agree on a new group's arguments, then record it (collective); its catalog record.

    Parameters
    ----------
    specs_of : callable
        Makes the group's dataset specifications (checked on every rank with the rest).
    level, view, attributes, kind, steps_per_file, tier, archive, coords, subfiles
        As :meth:`sdm.Session.make_group`.

    Raises
    ------
    InvalidArgumentError, InvalidNameError, GroupExistsError, DistributionError, CollectiveMismatchError
    """
    where, bad = capture(_archive_of, tier, archive, rank=s.rank)
    level = (1 if where else 3) if level is None else level

    def specs() -> list[DatasetSpec]:
        if bad is not None:
            raise bad.exception(1)
        check_name(name, "group")
        check_level(level)
        check_kind(kind)
        check_steps_per_file(steps_per_file, int(level))
        check_subfiles(subfiles, int(level), bool(where))
        if where and level != 1:
            raise InvalidArgumentError(
                f"group {name!r}: the archive tier stores one object per dataset and step (level 1), since an "
                f"object cannot be appended to; got level {level}. Write levels 2 and 3 on the fast tier and "
                "`sdm migrate --pack-below BYTES` packs small files into superfiles")
        for key, value in check.mapping(attributes, "attributes").items():
            encode(key, value)  # refused now, before the group is defined
        if view is not None and not isinstance(view, Distribution):
            raise InvalidArgumentError(f"view must be a Distribution (Block, Cyclic, MapArray, ...), got {type(view).__name__}")
        out = specs_of()
        _check_compressed(name, out, subfiles, bool(where), view)
        _check_coords(coords, out, name)
        names = [sp.name for sp in out]
        if not out:
            raise InvalidNameError(f"group {name!r} needs at least one dataset")
        if len(set(names)) != len(names):
            raise InvalidNameError(f"group {name!r} lists a dataset twice: {names}")
        return out

    local, failure = capture(specs, rank=s.rank)
    # before anything is recorded: ranks that give different views (or a view and none)
    # would make different collective calls
    agree_view(s.comm, view, f"make_group {name!r}")
    same_calls(agree(s.comm, failure, (name, level, kind, steps_per_file, where, local, subfiles)
                     if failure is None else None), "make_group",
               ("name", "level", "kind", "steps_per_file", "archive", "datasets", "subfiles"))
    assert local is not None  # no rank failed
    if where:  # the bucket exists (made if needed) and answers before anything is recorded
        root_call(s.comm, _ensure_bucket, where)
    if view is not None:  # a view that does not fit is refused before the group is defined
        check_view(s, view, local)
    return root_call(s.comm, lambda: s._commits.record(GroupDefined(
        s.run_id, name, int(level), tuple(local), kind,
        None if steps_per_file is None else int(steps_per_file), where or None,
        None if subfiles is None else check_subfiles(subfiles, int(level), False))))


def _check_compressed(name: str, specs: list[DatasetSpec], subfiles: Any, archived: bool,
                      view: Distribution | None) -> None:
    """Refuse what compressed datasets are not stored with (yet), before anything is recorded.

    Raises
    ------
    InvalidArgumentError
    """
    codecs = sorted({sp.compression for sp in specs if sp.compression})
    if not codecs:
        return
    why = None
    if subfiles is not None:
        why = ("subfiles= cut a step into extents of raw bytes, and compressed datasets are stored as chunks encoded "
               "by their writers, which already write with independent I/O; leave subfiles unset")
    elif archived:
        why = ("the archive tier writes one object per dataset and step from raw bytes; write compressed datasets "
               "on the fast tier (`sdm migrate` moves their files to the archive)")
    elif isinstance(view, Ranked):
        why = "a ranked view's rows are written as they come; compress datasets with views of the array's boxes"
    if why is not None:
        raise InvalidArgumentError(f"group {name!r} is compressed ({', '.join(codecs)}): {why}")


def same_calls(calls: list[Any], what: str, names: Sequence[str] = ()) -> None:
    """Raise :class:`CollectiveMismatchError` (on every rank) unless all ranks passed the same arguments; the
    message names each argument that differs (*names*: of the positions of a call's tuple, or of its one value)
    and who gave what."""
    if any(c != calls[0] for c in calls):
        raise CollectiveMismatchError(
            f"ranks made different {what} calls: {differences([named(c, names) for c in calls])}; every rank must "
            "pass the same arguments"
        )


def check_view(s: SessionState, view: Distribution, specs: Sequence[DatasetSpec]) -> None:
    """Check collectively that *view* fits every dataset of *specs* (raises on every rank)."""
    from ..layout import MapArray

    def pieces() -> dict[tuple[int, ...], Any]:
        if view.kind == "ranked":  # no pieces: every rank gives its own rows (checked by data_view)
            return {}
        if isinstance(view, MapArray) and any(sp.order == "F" and len(sp.shape) > 1 for sp in specs):
            raise DistributionError("map-array views need datasets in C order (rows with their components contiguous)")
        shapes = dict.fromkeys(tuple(sp.shape) for sp in specs)  # each shape once, in order
        return {shape: view.piece(shape, s.size, s.rank) for shape in shapes}

    got, failure = capture(pieces, rank=s.rank)
    agree(s.comm, failure)
    assert got is not None  # no rank failed: every rank has its pieces, for the same shapes
    for shape, piece in got.items():
        agree(s.comm, capture(view.check, shape, piece, s.comm, rank=s.rank)[1])


def _check_coords(coords: Any, specs: Sequence[DatasetSpec], group: str) -> None:
    """Coordinates name a dimension some dataset has, one 1-D array as long as that dimension.

    Raises
    ------
    InvalidArgumentError
    """
    extents: dict[str, set[int]] = {}
    for spec in specs:
        for d, n in zip(spec.dims or (), spec.shape):
            extents.setdefault(d, set()).add(n)
    for dim, values in check.mapping(coords, "coords").items():
        if dim not in extents:
            raise InvalidArgumentError(f"group {group!r}: coordinate {dim!r} names no dimension of its datasets "
                                       f"(dims: {sorted(extents)})")
        arr = np.asarray(values)
        if arr.ndim != 1 or {arr.size} != extents[dim]:
            raise InvalidArgumentError(f"group {group!r}: coordinate {dim!r} must be 1-D with "
                                       f"{'/'.join(map(str, sorted(extents[dim])))} values, got shape {arr.shape}")


def _archive_of(tier: Any, archive: Any) -> str | None:
    """The archive a group writes to (``s3://BUCKET/PREFIX``), or None for the fast tier (checked, every rank alike).

    Raises
    ------
    InvalidArgumentError
    """
    from ..storage.backends.objectstore import parse_url

    if tier not in ("fast", "archive"):
        raise InvalidArgumentError(f"tier must be 'fast' or 'archive', got {tier!r}")
    if tier == "fast":
        if archive is not None:
            raise InvalidArgumentError(f"archive={archive!r} is for groups with tier='archive'")
        return None
    url = archive if archive is not None else os.environ.get("SDM_ARCHIVE")
    if not url:
        raise InvalidArgumentError("tier='archive' needs the object store: archive='s3://BUCKET/PREFIX' "
                                   "(or $SDM_ARCHIVE)")
    check.text(url, "archive")
    bucket, prefix = parse_url(url)
    return f"s3://{bucket}/{prefix}".rstrip("/")


def _ensure_bucket(url: str) -> None:
    """Rank 0: make the archive's bucket if needed (which also proves the server and credentials work)."""
    from ..storage.backends.objectstore import ObjectStore

    ObjectStore(url).ensure_bucket()
