"""Datasets that index like numpy arrays, reading only what is indexed: ``g["T"][20, 10:15, :]``.

``group[name]`` gives a :class:`DatasetArray`: a lazy array of shape ``(steps, *shape)``
whose first axis runs over the steps written (in order; :attr:`DatasetArray.steps` gives
their numbers, :meth:`DatasetArray.at` indexes by step number), with ``dtype``,
``ndim``, ``attrs`` and ``__array__``.  Indexing takes numpy's basic indexing (ints,
slices with a positive step, ``...``) and returns a numpy array, reading only the bytes
indexed:

* in one process (a plain ``python``, no ``mpiexec``), the rows of every step are
  looked up once (one catalog query per dataset, kept by the array: a snapshot of the
  steps written when it was made); a box whose bytes are few contiguous runs in the file
  is read with one ``pread`` (or ranged GET on the archive tier) per run straight into
  the result; another box of a step goes through :meth:`sdm.Group.read` with ``box=``
  (an MPI-IO file view);
* with several ranks, indexing is collective (every rank indexes, each its own box):
  one :meth:`sdm.Group.read` with ``box=`` per step.

Partial reads are not checked against the step's checksum (it covers the whole step);
``sdm verify`` or ``group.read(name, step, verify=True)`` checks whole steps.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .dtypes import from_text
from .errors import InvalidArgumentError, StepNotFoundError, StorageError
from .layout.boxes import Box, Hyperslab, parse_box
from .layout.regions import runs

if TYPE_CHECKING:
    from .group import Group

__all__ = ["DatasetArray", "closest"]

#: Runs of one step a serial read makes with one request each; more go through an MPI-IO file view.
DIRECT_RUNS = 64


def closest(name: object, names: list[str]) -> str:
    """``"; did you mean 'x'?"`` for the names closest to *name* (or ``""``)."""
    if not isinstance(name, str):
        return ""
    lowered: dict[str, list[str]] = {}
    for n in names:  # a difference of case alone is the closest there is
        lowered.setdefault(n.lower(), []).append(n)
    near = [n for low in difflib.get_close_matches(name.lower(), list(lowered), n=3, cutoff=0.6) for n in lowered[low]]
    if not near:
        return ""
    return "; did you mean " + " or ".join(repr(n) for n in near) + "?"


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
        self._rows: dict[int, tuple[Any, Any, int]] | None = None  # serial: step -> (backend, key, offset)

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

    def __getitem__(self, key: Any) -> np.ndarray:
        box = parse_box(key, self.shape, f"index of dataset {self.name!r}")
        positions = box.indices()[0]
        space = Box(box.ranges[1:], [d - 1 for d in box.dropped if d > 0])
        out = np.empty((positions.size, *space.counts), dtype=self.dtype)
        for i, position in enumerate(positions.tolist()):
            self._read_step(int(self._steps[position]), space, out[i])
        return out.reshape(box.shape)

    def _read_step(self, step: int, space: Box, out: np.ndarray) -> None:
        """Fill *out* (the box's counts, C order) with the box *space* of one step."""
        g = self.group
        if g.session.size > 1:  # collective: every rank reads its own box
            g.read(self.name, step, out=out, box=tuple(slice(a, b, c) for a, b, c in space.ranges), verify=False)
            return
        backend, key, offset = self._row(step)
        rec = self.record
        piece = Hyperslab(space).piece(rec.shape, 1, 0)
        itemsize = out.dtype.itemsize
        if out.size == 0:
            return
        segments = runs(piece, rec.order, itemsize, list(out.strides))
        if segments.count > DIRECT_RUNS:  # scattered: an MPI-IO file view reads them in one call
            g.read(self.name, step, out=out, box=tuple(slice(a, b, c) for a, b, c in space.ranges), verify=False)
            return
        assert segments.memory is not None
        flat = out.reshape(-1).view(np.uint8)
        for f, m, n in zip(segments.file.tolist(), segments.memory.tolist(), segments.length.tolist()):
            got = backend.read_into(key, offset + f, flat[m:m + n])
            if got != n:
                raise StorageError(f"{key} ends before byte {offset + f + n}; step {step} of {self.name!r} "
                                   "is shorter than its catalog row")

    def _row(self, step: int) -> tuple[Any, Any, int]:
        """Where the bytes of *step* are: ``(backend, key, offset)``; every step's looked up at the first call."""
        if self._rows is None:
            self._rows = _rows(self.group, self.name)
        found = self._rows.get(step)
        if found is None:
            raise StepNotFoundError(f"dataset {self.name!r} step {step} is no longer in the catalog")
        return found


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

    def __getitem__(self, key: Any) -> np.ndarray:
        items = key if isinstance(key, tuple) else (key,)
        return self.parent[(self.position, *items)]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self[...]
        return out if dtype is None else out.astype(dtype)


def _rows(g: "Group", name: str) -> dict[int, tuple[Any, Any, int]]:
    """Serial: every step of *name* as ``(backend, key, offset)``: its file on the fast tier, else its
    verified archive copy (one catalog query for the rows, one for the copies of files not found)."""
    from .catalog.tiers import copies
    from .io import remote
    from .storage.backends import object_at

    s = g.session
    rec = g.dataset(name)
    found: dict[int, tuple[Any, Any, int]] = {}
    away = {}
    for step, w in s.catalog_call("dataset_writes", rec.id).items():
        path = g._absolute(w.path)
        try:
            size = os.path.getsize(path)
        except OSError:
            away[step] = w
            continue
        if size < w.offset + w.nbytes:
            raise StorageError(f"data file {path} holds {size} bytes but step {step} of {name!r} needs bytes "
                               f"{w.offset}..{w.offset + w.nbytes}; the file was truncated")
        found[step] = (s.files, Path(path), int(w.offset))
    if away:
        held = copies(s.open_catalog(), s.run_id, sorted({w.path for w in away.values()}))
        for step, w in away.items():
            copy = remote.archived(held.get(w.path, []), w.offset + w.nbytes)
            if copy is None:
                raise StorageError(f"data file {g._absolute(w.path)} of run {s.run_id} is missing")
            where, at = remote.object_place(copy.location)
            store, key = object_at(where)
            found[step] = (store, key, at + int(w.offset))
    return found


def dataset_array(group: "Group", name: Any) -> DatasetArray:
    """``group[name]``, with a ``KeyError`` naming the closest datasets for an unknown name."""
    if not isinstance(name, str) or name not in group.datasets:
        raise KeyError(f"group {group.name!r} has no dataset {name!r}{closest(name, group.datasets)}; its datasets "
                       f"are {group.datasets}")
    if group._is_ranked(name):
        raise InvalidArgumentError(f"ranked dataset {name!r} has no global shape to index; read it with "
                                   "group.read(name, step, ranks=...)")
    return DatasetArray(group, name)
