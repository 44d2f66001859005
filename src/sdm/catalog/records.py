"""Plain records the catalog returns: picklable, so rank 0 can broadcast them."""

from __future__ import annotations

import math

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Sequence


@dataclass(frozen=True)
class DatasetRecord:
    """One dataset of a group as stored in the catalog."""

    id: int
    name: str
    position: int
    dtype: str
    shape: tuple[int, ...]
    order: str
    distribution: dict[str, Any] | None = None
    attributes: dict[str, Any] = field(default_factory=dict)
    dims: tuple[str, ...] | None = None  #: the dimension names the writer gave (None: none given)
    #: Every committed step, ascending; ``None`` when the query did not read them
    #: (``Catalog.find`` reads them with ``steps=True``): the summary below is always there.
    steps: tuple[int, ...] | None = ()
    nsteps: int = 0  #: number of committed steps
    first_step: int | None = None  #: the smallest committed step (None: no step yet)
    last_step: int | None = None  #: the largest committed step
    #: The codec pipeline's canonical text (:mod:`sdm.codecs`); None: stored as raw bytes
    compression: str | None = None
    #: A compressed dataset's chunk shape (None: each writer's box is one chunk)
    chunks: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.steps and not self.nsteps:  # a record made from its steps alone carries their summary
            object.__setattr__(self, "nsteps", len(self.steps))
            object.__setattr__(self, "first_step", min(self.steps))
            object.__setattr__(self, "last_step", max(self.steps))

    @property
    def nbytes(self) -> int:
        """Bytes of one time step of the dataset."""
        import numpy as np

        from ..dtypes import from_text

        return math.prod(int(n) for n in self.shape) * from_text(self.dtype).itemsize


@dataclass(frozen=True)
class GroupRecord:
    """A data group (the paper's datalist) with its datasets."""

    id: int
    run_id: int
    name: str
    level: int
    datasets: tuple[DatasetRecord, ...]
    attributes: dict[str, Any] = field(default_factory=dict)
    kind: str = "state"  #: ``"state"`` (written every step) or ``"topology"`` (written once or rarely)
    steps_per_file: int | None = None  #: levels 2, 3: the data file rolls over every n steps (None: one file)
    truncated_after: int | None = None  #: the step of the group's last truncation (None: never truncated)
    archive: str | None = None  #: ``s3://BUCKET/PREFIX`` of a group written to the archive tier (None: the fast tier)
    subfiles: int | None = None  #: K subfiles per step (0: chosen by the planner; None: one file)

    def dataset(self, name: str) -> DatasetRecord | None:
        """Return the dataset called *name*, or ``None``."""
        for d in self.datasets:
            if d.name == name:
                return d
        return None


@dataclass(frozen=True)
class RunRecord:
    """A run of an application."""

    id: int
    application: str
    created_at: datetime
    nprocs: int
    problem_size: Any
    root: str
    dir: str | None = None  # the run's directory, relative to root
    state: str = "closed"  # open | closed | interrupted
    attributes: dict[str, Any] = field(default_factory=dict)
    groups: tuple[GroupRecord, ...] = ()


@dataclass(frozen=True)
class ExtentRecord:
    """One extent of a subfiled step: bytes ``start .. start + nbytes`` of the step's canonical
    stream, stored at *offset* of the subfile *path* (:mod:`sdm.storage.subfiles`).

    A chunk of a compressed step (:mod:`sdm.engine.compressed`) is an extent too: its
    *nbytes* stored bytes at *offset* of the data file *path* hold the elements of *box*
    (``(starts, counts)`` in the array) encoded by the dataset's codec; *start* is then its
    first byte in the step's logical stream of chunks.
    """

    path: str
    offset: int
    nbytes: int
    start: int
    checksum: str
    checksum_algo: str
    box: tuple[tuple[int, ...], tuple[int, ...]] | None = None


@dataclass(frozen=True)
class WriteRecord:
    """Where one time step of one dataset lives (the paper's execution table row).

    A subfiled step lists its ``extents`` (in stream order); its ``path`` and ``offset``
    are then those of its first extent and ``nbytes`` is the step's total.
    """

    dataset_id: int
    step: int
    path: str
    offset: int
    nbytes: int
    checksum: str
    checksum_algo: str
    method: str
    seconds: float
    nprocs: int
    written_at: datetime
    reason: str | None = None
    version: int = 1
    extents: tuple[ExtentRecord, ...] = ()
    codec: str | None = None  #: a compressed step: its codec pipeline's text (its chunks are its extents)
    stored_nbytes: int | None = None  #: a compressed step: the bytes its chunks take (``nbytes``: the array's)
    max_error: float | None = None  #: a lossy codec's largest absolute error, measured at write time

    @property
    def compressed(self) -> bool:
        """Whether the step is stored as compressed chunks."""
        return self.codec is not None

    @property
    def ratio(self) -> float | None:
        """Logical bytes over stored bytes of a compressed step (None: not compressed)."""
        if self.codec is None or self.stored_nbytes is None:
            return None
        return self.nbytes / self.stored_nbytes if self.stored_nbytes else float("inf")

    def spans(self) -> list[tuple[str, int, int]]:
        """``(path, offset, nbytes)`` of every run of bytes the step occupies: its extents, or its one run."""
        if self.extents:
            return [(e.path, e.offset, e.nbytes) for e in self.extents]
        return [(self.path, self.offset, self.nbytes)]


@dataclass(frozen=True)
class FileRecord:
    """A data file SDM generated, with what it holds."""

    path: str
    level: int
    nwrites: int
    nbytes: int


@dataclass(frozen=True)
class Truncation:
    """What a truncation erased (:meth:`sdm.catalog.Catalog.truncate`, ``Session.truncate``).

    ``writes`` lists the erased ``(group, dataset, step)`` rows, ``nbytes`` their bytes.
    The catalog commit decides; the file space follows it: ``removed_files`` lost their
    last write (deleted after the commit) and ``cut_files`` are ``(path, end)`` whose
    bytes from ``end`` on are no longer referenced (cut after the commit). ``left``
    names the space that could not be released then (``sdm gc`` reclaims it).
    """

    run_id: int
    after_step: int
    groups: tuple[str, ...]
    writes: tuple[tuple[str, str, int], ...] = ()
    nbytes: int = 0
    removed_files: tuple[str, ...] = ()
    cut_files: tuple[tuple[str, int], ...] = ()
    left: tuple[str, ...] = ()


class DatasetSpec:
    """What a group definition says of one dataset (picklable, no catalog ids)."""

    __slots__ = ("name", "dtype", "shape", "order", "dims", "compression", "chunks")

    def __init__(self, name: str, dtype: str, shape: Sequence[int], order: str,
                 dims: Sequence[str] | None = None, compression: str | None = None,
                 chunks: Sequence[int] | None = None) -> None:
        self.name, self.dtype, self.shape, self.order = name, dtype, tuple(int(s) for s in shape), order
        self.dims = None if dims is None else tuple(str(d) for d in dims)
        self.compression = compression
        self.chunks = None if chunks is None else tuple(int(c) for c in chunks)

    def _key(self) -> tuple[Any, ...]:
        return self.name, self.dtype, self.shape, self.order, self.dims, self.compression, self.chunks

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DatasetSpec) and self._key() == other._key()

    def __repr__(self) -> str:
        dims = "" if self.dims is None else f", dims={self.dims}"
        codec = "" if self.compression is None else f", compression={self.compression!r}"
        chunks = "" if self.chunks is None else f", chunks={self.chunks}"
        return f"DatasetSpec({self.name!r}, {self.dtype!r}, {self.shape}, {self.order!r}{dims}{codec}{chunks})"
