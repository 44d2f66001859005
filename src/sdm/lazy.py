"""Datasets that index like numpy arrays, reading only what is indexed: ``g["T"][20, 10:15, :]``.

``group[name]`` gives a :class:`DatasetArray`: a lazy array of shape ``(steps, *shape)``
whose first axis runs over the steps written (in order; :attr:`DatasetArray.steps` gives
their numbers, :meth:`DatasetArray.at` indexes by step number), with ``dtype``,
``ndim``, ``attrs``, ``len()`` and ``__array__``; iterating over it yields each step in
turn and ends after the last (an integer index past the end raises
:class:`~sdm.errors.IndexOutOfRangeError`, an :class:`IndexError`, as numpy does).
Indexing takes numpy's basic indexing (ints, slices with a positive step, ``...``) and
returns a numpy array, reading only the bytes indexed:

* in one process (a plain ``python``, no ``mpiexec``), the rows of every step are
  looked up once (one catalog query per dataset, kept by the array: a snapshot of the
  steps written when it was made); a box whose bytes are few contiguous runs in the file
  is read with one ``pread`` (or ranged GET on the archive tier) per run straight into
  the result; another box of a step is one strided numpy copy out of a memory map of its
  file on the fast tier, or goes through :meth:`sdm.Group.read` with ``box=`` (an MPI-IO
  file view) on the archive tier;
* with several ranks, indexing is collective (every rank indexes, each its own box):
  one :meth:`sdm.Group.read` with ``box=`` per step.

Partial reads are not checked against the step's checksum (it covers the whole step);
``sdm verify`` or ``group.read(name, step, verify=True)`` checks whole steps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator, Protocol

import numpy as np

from .dtypes import from_text
from ._collective import agree, capture
from .engine.operations import collective
from .errors import CollectiveMismatchError, InvalidArgumentError, StepNotFoundError
from .layout.boxes import Box, Hyperslab, parse_box
from .layout.regions import runs
from .suggest import closest
from .storage.confine import row_record

if TYPE_CHECKING:
    from .catalog import DatasetRecord
    from .engine.group_engine import GroupEngine
    from .engine.session_state import SessionState

__all__ = ["DatasetArray"]


class Group(Protocol):
    """What a lazy array takes of its group (:class:`sdm.Group`): its names, records and steps, its read, and
    its engine's places of the bytes."""

    @property
    def name(self) -> str: ...
    @property
    def session(self) -> SessionState: ...
    @property
    def engine(self) -> GroupEngine: ...
    @property
    def datasets(self) -> list[str]: ...

    def dataset(self, name: str) -> DatasetRecord: ...

    def steps(self, name: str) -> list[int]: ...

    def read(self, name: str, step: int, out: np.ndarray | None = None, *, verify: bool | None = None,
             box: Any = None) -> np.ndarray: ...

#: Runs of one step a serial read makes with one request each; more go through an MPI-IO file view.
DIRECT_RUNS = 64


class DatasetArray:
    """A dataset of a group as a lazy array over ``(steps, *shape)`` (see the module documentation).

    Parameters
    ----------
    group : Group
    name : str
    """

    def __init__(self, group: "Group", name: str) -> None:
        self.group = group
        self.name = name
        self.record = group.dataset(name)
        self._steps = np.array(group.steps(name), dtype=np.int64)
        self._where: tuple[list[tuple[Any, Any]], np.ndarray, np.ndarray] | None = None  # serial: see _table

    # ------------------------------------------------------------------ metadata
    @property
    def steps(self) -> np.ndarray:
        """The step numbers written, ascending: the labels of the first axis."""
        return self._steps.copy()

    @property
    def shape(self) -> tuple[int, ...]:
        return (int(self._steps.size), *self.record.shape)

    @property
    def dtype(self) -> np.dtype:
        return from_text(self.record.dtype)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def attrs(self) -> dict[str, Any]:
        """The dataset's attributes (the group's included)."""
        return dict(self.record.attributes)

    def __len__(self) -> int:
        return int(self._steps.size)

    def __iter__(self) -> Iterator[np.ndarray]:
        """Each step in turn, read whole when reached (as a numpy array yields its rows); ends after the last."""
        for position in range(len(self)):
            yield self[position]

    def __repr__(self) -> str:
        return (f"<sdm.DatasetArray {self.group.name}/{self.name} shape={self.shape} dtype={self.dtype.str} "
                f"steps={self._steps[:3].tolist()}{'...' if self._steps.size > 3 else ''}>")

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self[...]
        return out if dtype is None else out.astype(dtype)

    # ------------------------------------------------------------------ indexing
    def at(self, step: int) -> "_StepArray":
        """Step number *step* (not its position) as a lazy array of the dataset's shape.

        Raises
        ------
        StepNotFoundError
        """
        where = np.flatnonzero(self._steps == step) if isinstance(step, (int, np.integer)) else []
        if not len(where):
            raise StepNotFoundError(f"dataset {self.name!r} (group {self.group.name!r}) was never written at step "
                                    f"{step!r}; written steps: {self._steps.tolist()}")
        return _StepArray(self, int(where[0]))

    @collective("index", label="DatasetArray.__getitem__")
    def __getitem__(self, key: Any) -> np.ndarray:
        s = self.group.session
        box, failure = capture(parse_box, key, self.shape, f"index of dataset {self.name!r}", rank=s.rank)
        if s.size > 1:  # collective: one read per step, so every rank must select the same steps
            chosen = agree(s.comm, failure, None if box is None else self._steps[box.indices()[0]].tolist())
            if any(c != chosen[0] for c in chosen):
                raise CollectiveMismatchError(
                    f"indexing dataset {self.name!r} on several ranks reads step by step, collectively: every rank "
                    f"must select the same steps (each its own box within them); ranks selected {chosen[:4]}"
                    + (" ..." if len(chosen) > 4 else ""))
        elif failure is not None:
            raise failure.exception(1)
        assert box is not None
        positions = box.indices()[0]
        space = Box(box.ranges[1:], [d - 1 for d in box.dropped if d > 0])
        out = np.empty((positions.size, *space.counts), dtype=self.dtype)
        if s.size > 1:
            for i, step in enumerate(self._steps[positions].tolist()):  # every rank its own box
                self._read_view(int(step), space, out[i])
        elif out.size:
            self._read_serial(positions, space, out)
        return out.reshape(box.shape)

    def _read_view(self, step: int, space: Box, out: np.ndarray) -> None:
        """One step's box through :meth:`sdm.Group.read` (an MPI-IO file view, or the archive's methods)."""
        self.group.read(self.name, step, out=out, box=tuple(slice(a, b, c) for a, b, c in space.ranges),
                        verify=False)

    def _read_serial(self, positions: np.ndarray, space: Box, out: np.ndarray) -> None:
        """One process: the box's runs in the file computed once for every step; the bytes copied from a
        memory map of each file on the fast tier (a point over many steps of one file: one numpy gather),
        read by ranged requests from the archive tier, or through a file view when they are scattered."""
        rec = self.record
        segments = runs(Hyperslab(space).piece(rec.shape, 1, 0), rec.order, out.dtype.itemsize,
                        list(out.strides[1:]))
        files, file_of, offset_of = self._table()
        chosen = file_of[positions]
        if segments.count > DIRECT_RUNS:  # many runs: a strided copy from the memory map of a local file
            for i, index in enumerate(chosen.tolist()):
                if index >= 0 and files[index][0].mappable:
                    self._copy_mapped(files[index], int(offset_of[positions[i]]), space, out[i])
                else:
                    self._read_view(int(self._steps[positions[i]]), space, out[i])
            return
        for i in np.flatnonzero(chosen < 0).tolist():  # subfiled steps: Group.read knows their extents
            self._read_view(int(self._steps[positions[i]]), space, out[i])
        self._read_plain(positions, segments, out, files, file_of, offset_of)

    def _copy_mapped(self, place: tuple[Any, Any], offset: int, space: Box, out: np.ndarray) -> None:
        """One step's box out of the memory map of its file on the fast tier: one strided numpy copy (the map is
        checked to hold the whole step, see :meth:`sdm.storage.backends.mpiio.MPIIOBackend.mapped`)."""
        rec, dtype = self.record, out.dtype
        backend, key = place
        nbytes = int(np.prod(rec.shape, dtype=np.int64)) * dtype.itemsize
        mapped = backend.mapped(key, offset + nbytes)
        whole = np.ndarray(tuple(rec.shape), dtype=dtype, buffer=mapped, offset=offset, order="F" if rec.order == "F" else "C")
        out[...] = whole[tuple(slice(a, b, c) for a, b, c in space.ranges)]

    def _read_plain(self, positions: np.ndarray, segments: Any, out: np.ndarray, files: list, file_of: np.ndarray,
                    offset_of: np.ndarray) -> None:
        """:meth:`_read_serial` of the steps stored as one run of bytes each (file index >= 0)."""
        assert segments.memory is not None
        f, m, n = segments.file, segments.memory, segments.length
        flat = out.reshape(positions.size, -1).view(np.uint8)
        chosen_files, offsets = file_of[positions], offset_of[positions]
        for index in np.unique(chosen_files[chosen_files >= 0]).tolist():
            backend, key = files[index]
            rows = np.flatnonzero(chosen_files == index)
            if not backend.mappable:
                for i in rows.tolist():
                    for a, b, c in zip(f.tolist(), m.tolist(), n.tolist()):
                        backend.read_exactly(key, int(offsets[i]) + a, flat[i, b:b + c])
                continue
            mapped = backend.mapped(key, int(offsets[rows].max() + (f + n).max()))
            if f.size == 1 and int(n[0]) <= 4096:  # a point or a short run per step: one gather
                span = np.arange(int(n[0]))
                flat[rows[:, None], int(m[0]) + span] = mapped[offsets[rows][:, None] + int(f[0]) + span]
                continue
            for i in rows.tolist():
                offset = int(offsets[i])
                for a, b, c in zip(f.tolist(), m.tolist(), n.tolist()):
                    flat[i, b:b + c] = mapped[offset + a:offset + a + c]

    def _table(self) -> tuple[list[tuple[Any, Any]], np.ndarray, np.ndarray]:
        """Where every step's bytes are, by position: ``(files as (backend, key), file index, offset)``;
        looked up at the first call."""
        if self._where is None:
            rows = _rows(self.group, self.name)
            lost = [int(s) for s in self._steps.tolist() if int(s) not in rows]
            if lost:
                raise StepNotFoundError(f"dataset {self.name!r} steps {lost[:5]} are no longer in the catalog")
            files: dict[tuple[int, str], int] = {}
            places = [(backend, key) for backend, key, _ in (rows[int(s)] for s in self._steps.tolist())]
            index = [-1 if b is None else files.setdefault((id(b), str(k)), len(files)) for b, k in places]
            unique = {i: p for i, p in zip(index, places)}
            self._where = ([unique[i] for i in range(len(files))], np.array(index, dtype=np.int64),
                           np.array([rows[int(s)][2] for s in self._steps.tolist()], dtype=np.int64))
        return self._where


class _StepArray:
    """One step of a :class:`DatasetArray`, indexed over the dataset's shape."""

    def __init__(self, parent: DatasetArray, position: int) -> None:
        self.parent, self.position = parent, position

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.parent.record.shape)

    @property
    def dtype(self) -> np.dtype:
        return self.parent.dtype

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a step of a scalar dataset")
        return self.shape[0]

    def __iter__(self) -> Iterator[np.ndarray]:
        """The rows of the step in turn (each read when reached), as numpy iterates over an array."""
        for i in range(len(self)):
            yield self[i]

    def __getitem__(self, key: Any) -> np.ndarray:
        items = key if isinstance(key, tuple) else (key,)
        return self.parent[(self.position, *items)]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self[...]
        return out if dtype is None else out.astype(dtype)


def _rows(g: "Group", name: str) -> dict[int, tuple[Any, Any, int]]:
    """Serial: every step of *name* as ``(backend, key, offset)``: its file on the fast tier, else its
    verified archive copy (:meth:`sdm.engine.state.GroupState._locate`; one catalog query for the rows, one for the copies
    of the files not found)."""
    from .catalog.tiers import copies

    s = g.session
    rows = s.open_catalog().dataset_writes(g.dataset(name).id)
    missing = sorted({w.path for step, w in rows.items()
                      if not w.extents and not g.engine._absolute(w.path, row_record(s.run_id, g.name, name, step)).exists()})
    held = copies(s.open_catalog(), s.run_id, missing) if missing else {}
    found: dict[int, tuple[Any, Any, int]] = {}
    for step, w in rows.items():
        if w.extents:  # subfiled: no one file (read through Group.read)
            found[step] = (None, None, 0)
            continue
        path, offset = g.engine._locate(name, step, w, held)
        backend, key, _ = g.engine._backend_of(path)
        found[step] = (backend, key, offset)
    return found


def dataset_array(group: "Group", name: Any) -> DatasetArray:
    """``group[name]``, with a ``KeyError`` naming the closest datasets for an unknown name."""
    if not isinstance(name, str) or name not in group.datasets:
        raise KeyError(f"group {group.name!r} has no dataset {name!r}; its datasets are {group.datasets}"
                       f"{closest(name, group.datasets)}")
    if group.engine._is_ranked(name):
        raise InvalidArgumentError(f"ranked dataset {name!r} has no global shape to index; read it with "
                                   "group.read(name, step, ranks=...)")
    return DatasetArray(group, name)
