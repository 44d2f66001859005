"""The changes of the catalog, one typed object per kind: what a run's meta-file journals and a rebuild replays.

Every change a session (or a tier operation) makes to the catalog is one of the frozen
dataclasses below. Each knows

* its meta-file record (:meth:`Change.to_record`; None for a change the meta-file does
  not keep, such as reserved space), in format 1 of ``docs/format.md``: records name
  groups and datasets, never catalog ids, so the format does not depend on the catalog;
* how to read it back (:meth:`Change.from_record`, from a record already checked by
  :func:`sdm.catalog.metafile.read_meta`: its schema and its place among the records
  before it);
* how to apply itself to a :class:`~sdm.catalog.Catalog` (:meth:`Change.apply`: one typed
  catalog method).

:class:`~sdm.catalog.recorder.Recorder` journals a change, then applies it; ``sdm rebuild``
(:mod:`sdm.catalog.rebuild`) reads the records back into changes and applies them through
the same :meth:`Change.apply`. :class:`Names` translates between the two: the ids the
catalog gives and the names a record keeps.

This module never imports SQLAlchemy (the catalog's modules load on first use).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Generic, Sequence, TypeVar

from ..errors import IntegrityError, InvalidArgumentError
from .infos import InfoValue
from .records import DatasetSpec, GroupRecord, Truncation
from .values import decode, encode

if TYPE_CHECKING:
    from .catalog import Catalog

__all__ = [
    "Names", "Change", "RunCreated", "RunOpened", "RunClosed", "GroupDefined", "DistributionSet", "AttributesSet",
    "InfoSet", "SpaceReserved", "WritesRecorded", "ImportRecorded", "Truncated", "CopyPut", "CopyDropped",
    "CHANGES", "change_of",
]

T = TypeVar("T")

Record = dict[str, Any]


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text)


def _iso(when: datetime | None) -> str | None:
    return None if when is None else when.isoformat()


def plain_attributes(attributes: dict[str, Any] | None) -> dict[str, Any]:
    """Attributes as the catalog stores them (numpy scalars as Python values), for a record."""
    return {k: decode(*encode(k, v)) for k, v in (attributes or {}).items()}


class Names:
    """The names of a run's groups and datasets by their catalog ids, and back.

    A live session learns them from the group records the catalog returns (to write
    records that name things); a rebuild learns them from the groups it defines again (to
    turn the names of a record into the new catalog's ids).
    """

    def __init__(self) -> None:
        self.groups: dict[int, str] = {}
        self.datasets: dict[int, tuple[str, str]] = {}
        self.group_ids: dict[str, int] = {}
        self.dataset_ids: dict[tuple[str, str], int] = {}

    def learn(self, group: Any) -> None:
        """Remember the ids of a group record (:class:`~sdm.catalog.GroupRecord`) and its datasets."""
        self.groups[int(group.id)] = group.name
        self.group_ids[group.name] = int(group.id)
        for d in group.datasets:
            self.datasets[int(d.id)] = (group.name, d.name)
            self.dataset_ids[(group.name, d.name)] = int(d.id)

    def group(self, gid: int | None) -> str | None:
        return None if gid is None else self.groups[int(gid)]

    def dataset(self, did: int) -> tuple[str, str]:
        return self.datasets[int(did)]

    def group_id(self, name: str | None) -> int | None:
        return None if name is None else self.group_ids[name]

    def dataset_id(self, group: str, dataset: str) -> int:
        return self.dataset_ids[(group, dataset)]


class Change(Generic[T]):
    """One change of the catalog (a frozen dataclass); :data:`kind` is its record type (``"t"``), empty when the
    meta-file does not keep it."""

    kind: ClassVar[str] = ""

    def to_record(self, names: Names) -> Record | None:
        """The change's meta-file record (its ``"t"`` first; ``v``, ``id`` and ``crc`` are the writer's), or None."""
        raise NotImplementedError

    @classmethod
    def from_record(cls, rec: Record, names: Names, run_id: int) -> "Change[Any]":
        """The change a checked record of run *run_id* describes (names turned into ids by *names*)."""
        raise NotImplementedError(f"{cls.__name__} is not kept in the meta-file")

    def apply(self, catalog: "Catalog") -> T:
        """Make the change in *catalog* (one typed call); its result."""
        raise NotImplementedError

    def learn(self, result: T, names: Names) -> None:
        """What the catalog's answer teaches *names* (a group defined: its ids)."""


# ----------------------------------------------------------------------------- runs
@dataclass(frozen=True)
class RunCreated(Change[None]):
    """A new run (the meta-file's first record). A session journals it inside the catalog's transaction that
    creates the run (:meth:`~sdm.catalog.Catalog.new_run`); a rebuild applies it with the run's own id."""

    kind: ClassVar[str] = "run"
    application: str
    run_id: int
    catalog_id: str
    nprocs: int
    problem_size: Any
    attributes: dict[str, Any]
    created: datetime
    root: str
    directory: str
    sdm: str | None = None

    def to_record(self, names: Names) -> Record:
        from .._version import __version__

        return {"t": "run", "application": self.application, "run": int(self.run_id), "catalog": self.catalog_id,
                "nprocs": int(self.nprocs), "problem_size": self.problem_size,
                "attributes": plain_attributes(self.attributes), "created": self.created.isoformat(),
                "root": self.root, "dir": self.directory, "sdm": self.sdm or __version__}

    @classmethod
    def from_record(cls, rec: Record, names: Names, run_id: int) -> "RunCreated":
        return cls(application=rec["application"], run_id=int(rec["run"]), catalog_id=str(rec["catalog"]),
                   nprocs=int(rec["nprocs"]), problem_size=rec["problem_size"], attributes=dict(rec["attributes"]),
                   created=_time(rec["created"]), root=rec["root"], directory=rec["dir"], sdm=rec.get("sdm"))

    def apply(self, catalog: "Catalog") -> None:
        """Register the run again under its own id (``open``, one writer, as a new run starts)."""
        catalog.restore_run(self.run_id, self.application, nprocs=self.nprocs, root=self.root,
                            directory=self.directory, problem_size=self.problem_size, attributes=self.attributes,
                            created_at=self.created)


@dataclass(frozen=True)
class RunOpened(Change[str]):
    """A session starts writing the run (``mode="a"``); *claim* takes its hold (see
    :meth:`~sdm.catalog.Catalog.open_run`; None: a rebuild, where the count simply goes on)."""

    kind: ClassVar[str] = "open"
    run_id: int
    claim: Callable[[], bool] | None = field(default=None, compare=False)
    at: datetime = field(default_factory=_now)

    def to_record(self, names: Names) -> Record:
        return {"t": "open", "at": self.at.isoformat()}

    @classmethod
    def from_record(cls, rec: Record, names: Names, run_id: int) -> "RunOpened":
        return cls(run_id, None, _time(rec["at"]) if rec.get("at") else _now())

    def apply(self, catalog: "Catalog") -> str:
        return catalog.open_run(self.run_id, self.claim)


@dataclass(frozen=True)
class RunClosed(Change[str]):
    """A session stops writing the run (the last one closes it)."""

    kind: ClassVar[str] = "close"
    run_id: int
    at: datetime = field(default_factory=_now)

    def to_record(self, names: Names) -> Record:
        return {"t": "close", "at": self.at.isoformat()}

    @classmethod
    def from_record(cls, rec: Record, names: Names, run_id: int) -> "RunClosed":
        return cls(run_id, _time(rec["at"]) if rec.get("at") else _now())

    def apply(self, catalog: "Catalog") -> str:
        return catalog.close_run(self.run_id)


# ----------------------------------------------------------------------------- groups and datasets
@dataclass(frozen=True)
class GroupDefined(Change[GroupRecord]):
    """A group and its datasets defined (or reopened, identically)."""

    kind: ClassVar[str] = "group"
    run_id: int
    name: str
    level: int
    specs: tuple[DatasetSpec, ...]
    group_kind: str = "state"
    steps_per_file: int | None = None
    archive: str | None = None
    subfiles: int | None = None

    def to_record(self, names: Names) -> Record:
        return {"t": "group", "name": self.name, "level": int(self.level), "kind": self.group_kind,
                "steps_per_file": self.steps_per_file, "archive": self.archive,
                **({"subfiles": int(self.subfiles)} if self.subfiles is not None else {}), "datasets": [
                    {"name": s.name, "dtype": s.dtype, "shape": list(s.shape), "order": s.order,
                     **({"dims": list(s.dims)} if s.dims is not None else {}),
                     **({"compression": s.compression} if s.compression is not None else {}),
                     **({"chunks": list(s.chunks)} if s.chunks is not None else {})} for s in self.specs]}

    @classmethod
    def from_record(cls, rec: Record, names: Names, run_id: int) -> "GroupDefined":
        specs = tuple(DatasetSpec(d["name"], d["dtype"], tuple(d["shape"]), d["order"],
                                  None if d.get("dims") is None else tuple(d["dims"]), _compression(d),
                                  None if d.get("chunks") is None else tuple(d["chunks"]))
                      for d in rec["datasets"])
        return cls(run_id, rec["name"], int(rec["level"]), specs, rec.get("kind", "state"), rec.get("steps_per_file"),
                   rec.get("archive"), rec.get("subfiles"))

    def apply(self, catalog: "Catalog") -> GroupRecord:
        return catalog.define_group(self.run_id, self.name, self.level, self.specs, kind=self.group_kind,
                                    steps_per_file=self.steps_per_file, archive=self.archive, subfiles=self.subfiles)

    def learn(self, result: GroupRecord, names: Names) -> None:
        names.learn(result)


@dataclass(frozen=True)
class DistributionSet(Change[None]):
    """The writers' data view (the paper's access pattern) of datasets, as JSON."""

    kind: ClassVar[str] = "distribution"
    dataset_ids: tuple[int, ...]
    distribution: dict[str, Any] | None

    def to_record(self, names: Names) -> Record:
        return {"t": "distribution", "datasets": [list(names.dataset(i)) for i in self.dataset_ids],
                "distribution": self.distribution}

    @classmethod
    def from_record(cls, rec: Record, names: Names, run_id: int) -> "DistributionSet":
        return cls(tuple(names.dataset_id(g, d) for g, d in rec["datasets"]), rec["distribution"])

    def apply(self, catalog: "Catalog") -> None:
        catalog.set_distribution(self.dataset_ids, self.distribution)


@dataclass(frozen=True)
class AttributesSet(Change[None]):
    """Typed attributes set on the run (*group_id* None), or on a group (unless not *on_group*) and its datasets."""

    kind: ClassVar[str] = "attributes"
    run_id: int
    attributes: dict[str, Any]
    group_id: int | None = None
    dataset_ids: tuple[int, ...] = ()
    on_group: bool = True

    def to_record(self, names: Names) -> Record:
        return {"t": "attributes", "group": names.group(self.group_id),
                "datasets": [names.dataset(i)[1] for i in self.dataset_ids], "on_group": bool(self.on_group),
                "attributes": plain_attributes(self.attributes)}

    @classmethod
    def from_record(cls, rec: Record, names: Names, run_id: int) -> "AttributesSet":
        group = rec["group"]
        return cls(run_id, dict(rec["attributes"]), names.group_id(group),
                   tuple(names.dataset_id(group, d) for d in rec["datasets"]), bool(rec["on_group"]))

    def apply(self, catalog: "Catalog") -> None:
        catalog.set_attributes(self.run_id, self.attributes, group_id=self.group_id, dataset_ids=self.dataset_ids,
                               on_group=self.on_group)


@dataclass(frozen=True)
class InfoSet(Change[None]):
    """An info (a named array) set on the run, a group, a dataset or one step of it (replacing one of that name)."""

    kind: ClassVar[str] = "info"
    run_id: int
    name: str
    value: InfoValue
    group_id: int | None = None
    dataset_id: int | None = None
    step: int | None = None
    created_at: datetime = field(default_factory=_now)

    @classmethod
    def of(cls, run_id: int, name: str, array: Any, *, group_id: int | None = None, dataset_id: int | None = None,
           step: int | None = None) -> "InfoSet":
        """The change of setting *array* (checked by :func:`sdm.catalog.infos.info_value`), stamped now."""
        from .infos import info_value

        return cls(run_id, name, info_value(name, array), group_id, dataset_id, step)

    def to_record(self, names: Names) -> Record:
        v = self.value
        return {"t": "info", "name": self.name, "group": names.group(self.group_id),
                "dataset": None if self.dataset_id is None else names.dataset(self.dataset_id)[1],
                "step": None if self.step is None else int(self.step), "dtype": v.dtype, "shape": list(v.shape),
                "checksum": v.checksum, "created": self.created_at.isoformat(),
                "data": base64.b64encode(v.data).decode("ascii")}

    @classmethod
    def from_record(cls, rec: Record, names: Names, run_id: int) -> "InfoSet":
        group, dataset = rec["group"], rec["dataset"]
        value = InfoValue(rec["dtype"], tuple(rec["shape"]), base64.b64decode(rec["data"]), rec["checksum"])
        return cls(run_id, rec["name"], value, names.group_id(group),
                   None if dataset is None else names.dataset_id(group, dataset), rec["step"], _time(rec["created"]))

    def apply(self, catalog: "Catalog") -> None:
        catalog.set_info(self.run_id, self.name, self.value, group_id=self.group_id, dataset_id=self.dataset_id,
                         step=self.step, created_at=self.created_at)


# ----------------------------------------------------------------------------- writes and space
@dataclass(frozen=True)
class SpaceReserved(Change[list[int | None]]):
    """Fresh file space reserved (see :meth:`~sdm.catalog.Catalog.reserve`): not journaled, since space never
    committed is only unreferenced bytes (``sdm verify`` lists them, ``sdm gc`` reclaims them)."""

    run_id: int
    requests: tuple[tuple[Any, ...], ...]

    def to_record(self, names: Names) -> None:
        return None

    def apply(self, catalog: "Catalog") -> list[int | None]:
        return catalog.reserve(self.run_id, self.requests)


#: Members of a write row the meta-file keeps, besides its dataset's names.
_EXTENT = ("path", "offset", "nbytes", "start", "checksum", "checksum_algo")


@dataclass(frozen=True)
class WritesRecorded(Change[None]):
    """The writes of one dump committed (rows of :meth:`~sdm.catalog.Catalog.record_writes`), all at *written_at*.

    Build it with :meth:`of`, which stamps every row with the time, so the catalog and the
    meta-file keep the same.
    """

    kind: ClassVar[str] = "writes"
    run_id: int
    rows: tuple[dict[str, Any], ...]
    written_at: datetime

    @classmethod
    def of(cls, run_id: int, rows: Sequence[dict[str, Any]]) -> "WritesRecorded":
        now = _now()
        return cls(run_id, tuple(dict(w, written_at=now) for w in rows), now)

    def to_record(self, names: Names) -> Record:
        out = []
        for w in self.rows:
            group, dataset = names.dataset(w["dataset_id"])
            out.append({"group": group, "dataset": dataset, "step": int(w["step"]), "path": w["path"],
                        "level": int(w["level"]), "offset": int(w["offset"]), "nbytes": int(w["nbytes"]),
                        "checksum": w["checksum"], "algo": w["checksum_algo"], "method": w["method"],
                        "reason": w.get("reason"), "seconds": float(w["seconds"]), "nprocs": int(w["nprocs"]),
                        "version": int(w.get("version", 1)), "replaces": w.get("replaces"),
                        "overwrite": bool(w["overwrite"]), **({"copy": _copy(w["copy"])} if w.get("copy") else {}),
                        **({"extents": [_extent(x) for x in w["extents"]]} if w.get("extents") else {}),
                        **({"codec": w["codec"], "stored": int(w["stored_nbytes"]), "max_error": w.get("max_error")}
                           if w.get("codec") else {})})
        return {"t": "writes", "written_at": self.written_at.isoformat(), "writes": out}

    @classmethod
    def from_record(cls, rec: Record, names: Names, run_id: int) -> "WritesRecorded":
        when = _time(rec["written_at"])
        rows = []
        for w in rec["writes"]:
            copy = w.get("copy")
            rows.append(dict(
                dataset_id=names.dataset_id(w["group"], w["dataset"]), step=w["step"], path=w["path"],
                level=w["level"], offset=w["offset"], nbytes=w["nbytes"], checksum=w["checksum"],
                checksum_algo=w["algo"], method=w["method"], reason=w["reason"], seconds=w["seconds"],
                nprocs=w["nprocs"], version=w["version"], replaces=w.get("replaces"),
                overwrite=bool(w.get("overwrite", w.get("replaces") is not None)), written_at=when,
                **({"copy": dict(copy, verified_at=None if copy.get("verified_at") is None else
                                 _time(copy["verified_at"]))} if copy else {}),
                **({"extents": [{**{k: x[k] for k in _EXTENT}, **({"box": _box(x["box"])} if x.get("box") else {})}
                                for x in w["extents"]]} if w.get("extents") else {}),
                **({"codec": _codec(w["codec"]), "stored_nbytes": w["stored"], "max_error": w.get("max_error")}
                   if w.get("codec") else {})))
        return cls(run_id, tuple(rows), when)

    def apply(self, catalog: "Catalog") -> None:
        catalog.record_writes(self.run_id, self.rows)


def _extent(x: dict[str, Any]) -> dict[str, Any]:
    """An extent (a subfiled step's) or a chunk (a compressed step's, with its box) as the meta-file keeps it."""
    out = {k: x[k] for k in _EXTENT}
    if x.get("box") is not None:
        starts, counts = x["box"]
        out["box"] = [[int(v) for v in starts], [int(v) for v in counts]]
    return out


def _box(box: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A chunk's box read back from the meta-file (checked there: two lists of integers)."""
    starts, counts = box
    if len(starts) != len(counts):
        raise IntegrityError(f"a chunk's box has {len(starts)} starts and {len(counts)} counts")
    return tuple(int(v) for v in starts), tuple(int(v) for v in counts)


def _codec(text: str) -> str:
    """A codec pipeline's text read back from the meta-file, checked (:mod:`sdm.codecs`)."""
    from ..codecs import CompressionSpec

    try:
        return CompressionSpec.from_record(text).text
    except InvalidArgumentError as exc:  # a spec this SDM cannot read back (or not installed here)
        raise IntegrityError(f"a compression of the meta-file is not one SDM writes: {exc}") from None


def _compression(d: dict[str, Any]) -> str | None:
    """A dataset's compression in a group record of the meta-file (None: raw bytes), checked."""
    return None if d.get("compression") is None else _codec(d["compression"])


def _copy(copy: dict[str, Any]) -> dict[str, Any]:
    """A write's archive copy (archive-tier groups) as the meta-file keeps it."""
    return {"tier": copy["tier"], "location": copy["location"], "size": int(copy["size"]),
            "checksum": copy.get("checksum"), "verified_at": _iso(copy.get("verified_at"))}


@dataclass(frozen=True)
class ImportRecorded(Change[int]):
    """An array imported from a raw file SDM did not write (a row of ``imports``); :attr:`row` holds its columns."""

    kind: ClassVar[str] = "import"
    run_id: int
    row: dict[str, Any]

    def to_record(self, names: Names) -> Record:
        return {"t": "import", **self.row, "shape": [int(n) for n in self.row["shape"]]}

    @classmethod
    def from_record(cls, rec: Record, names: Names, run_id: int) -> "ImportRecorded":
        keep = ("name", "source", "offset", "dtype", "count", "shape", "mode", "nbytes", "checksum", "checksum_algo",
                "seconds", "nprocs")
        return cls(run_id, dict({k: rec[k] for k in keep}, imported_at=_time(rec["imported_at"])))

    def apply(self, catalog: "Catalog") -> int:
        from .irregular import record_import

        return record_import(catalog, run_id=self.run_id, **self.row)


@dataclass(frozen=True)
class Truncated(Change[Truncation]):
    """Every step after *after_step* of the groups named (None: every group) erased.

    *writers*: sessions the caller holds on the run (None: a rebuild, whose truncation was
    allowed when it was made); *confine*: see :meth:`~sdm.catalog.Catalog.truncate`.
    """

    kind: ClassVar[str] = "truncate"
    run_id: int
    after_step: int
    groups: tuple[str, ...] | None = None
    writers: int | None = 0
    confine: Callable[[str, str], Any] | None = field(default=None, compare=False)

    def to_record(self, names: Names) -> Record:
        return {"t": "truncate", "after": int(self.after_step), "groups": None if self.groups is None else list(self.groups)}

    @classmethod
    def from_record(cls, rec: Record, names: Names, run_id: int) -> "Truncated":
        return cls(run_id, rec["after"], None if rec["groups"] is None else tuple(rec["groups"]), None)

    def apply(self, catalog: "Catalog") -> Truncation:
        return catalog.truncate(self.run_id, self.after_step, self.groups, writers=self.writers, confine=self.confine)


# ----------------------------------------------------------------------------- tiers
@dataclass(frozen=True)
class CopyPut(Change[None]):
    """A copy of a data file recorded on a tier (``sdm migrate``/``stage``). The meta-file keeps only a
    *verified* copy (one that counts); a copy being made is the catalog's alone."""

    kind: ClassVar[str] = "copy"
    run_id: int
    path: str
    tier: str
    location: str
    size: int
    checksum: str | None = None
    state: str = "copying"
    verified_at: datetime | None = None
    created_at: datetime | None = None

    def to_record(self, names: Names) -> Record | None:
        if self.state != "verified":
            return None
        return {"t": "copy", "path": self.path, "tier": self.tier, "location": self.location, "size": int(self.size),
                "checksum": self.checksum, "verified_at": _iso(self.verified_at)}

    @classmethod
    def from_record(cls, rec: Record, names: Names, run_id: int) -> "CopyPut":
        when = None if rec["verified_at"] is None else _time(rec["verified_at"])
        return cls(run_id, rec["path"], rec["tier"], rec["location"], int(rec["size"]), rec["checksum"], "verified",
                   when, when)

    def apply(self, catalog: "Catalog") -> None:
        from .tiers import put_copy

        put_copy(catalog, self.run_id, self.path, self.tier, location=self.location, size=self.size,
                 checksum=self.checksum, state=self.state, verified_at=self.verified_at, created_at=self.created_at)


@dataclass(frozen=True)
class CopyDropped(Change[None]):
    """The copy of a data file on a tier forgotten (``sdm purge``)."""

    kind: ClassVar[str] = "uncopy"
    run_id: int
    path: str
    tier: str

    def to_record(self, names: Names) -> Record:
        return {"t": "uncopy", "path": self.path, "tier": self.tier}

    @classmethod
    def from_record(cls, rec: Record, names: Names, run_id: int) -> "CopyDropped":
        return cls(run_id, rec["path"], rec["tier"])

    def apply(self, catalog: "Catalog") -> None:
        from .tiers import drop_copy

        drop_copy(catalog, self.run_id, self.path, self.tier)


#: The changes the meta-file keeps, by record type (``abort`` is the journal's own: a change the catalog refused).
CHANGES: dict[str, type[Change[Any]]] = {c.kind: c for c in (
    RunCreated, RunOpened, RunClosed, GroupDefined, DistributionSet, AttributesSet, InfoSet, WritesRecorded,
    ImportRecorded, Truncated, CopyPut, CopyDropped)}


def change_of(rec: Record, names: Names, run_id: int) -> Change[Any] | None:
    """The change a checked record describes; None for a record that changes nothing (``abort``, an optional
    record of a type this SDM does not know)."""
    kind = CHANGES.get(rec["t"])
    return None if kind is None else kind.from_record(rec, names, run_id)


def problem_size_text(problem_size: Any) -> str | None:
    """A run's problem size as the catalog stores it (JSON)."""
    return None if problem_size is None else json.dumps(problem_size, default=_plain)


def _plain(obj: Any) -> Any:
    if hasattr(obj, "tolist"):
        return obj.tolist()
    raise TypeError(f"{type(obj).__name__} is not JSON")
