"""Groups of datasets (the paper's datalists): the user's handles.

A :class:`Group` builds a request from the user's call and hands it to its
:class:`~sdm.engine.group_engine.GroupEngine`, which owns the protocol of the access
(check -> agree -> plan -> execute -> make durable -> commit: :mod:`sdm.engine.write`,
:mod:`sdm.engine.read`; docs/design.md follows one write down the layers).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from . import _validate as check
from .engine import ranked as _ranked
from ._collective import (agree, capture, root_call)
from .catalog import DatasetRecord, GroupRecord
from .catalog.changes import AttributesSet
from .values import merge_attributes
from .engine.operations import collective
from .layout import Distribution, Piece
from .engine.background import DumpHandle, dump
from .engine.checks import _check_step
if TYPE_CHECKING:
    from .engine.session_state import SessionState
    from .lazy import DatasetArray

from .datasets import Dataset  # noqa: F401 (sdm.group.Dataset, as before)
from .engine.group_engine import GroupEngine

__all__ = ["Dataset", "Group"]  # Dataset: defined in sdm.datasets, named here too


class Group:
    """A group of datasets written and read together (collective methods).

    Obtained from :meth:`Session.make_group` or :meth:`Session.group`.
    """

    def __init__(self, session: "SessionState", record: GroupRecord) -> None:
        self.session = session
        self.name = record.name
        self.level = record.level
        self.engine = GroupEngine(session, record)  #: the protocol of this group's accesses (sdm.engine)

    @property
    def record(self) -> GroupRecord:
        """The group's catalog record (as this session knows it)."""
        return self.engine.record

    # --------------------------------------------------------------- metadata
    @property
    def datasets(self) -> list[str]:
        """Dataset names in group order."""
        return list(self.engine._datasets)

    def __getitem__(self, name: str) -> "DatasetArray":
        """Dataset *name* as a lazy array over ``(steps, *shape)`` that reads only what is indexed
        (:class:`sdm.lazy.DatasetArray`): ``g["T"][20, 10:15, :]``, ``g["T"][:, 0, 0]``.

        Raises
        ------
        KeyError
            No such dataset (the message names the closest ones).
        """
        from .lazy import dataset_array

        return dataset_array(self, name)

    def __contains__(self, name: object) -> bool:
        return name in self.engine._datasets

    def dataset(self, name: str) -> DatasetRecord:
        """The catalog record of a dataset (dtype, shape, order).

        Raises
        ------
        DatasetNotFoundError
        """
        return self.engine.dataset(name)

    def steps(self, name: str) -> list[int]:
        """Time steps at which *name* has been written, ascending (after the nonblocking dumps issued before)."""
        self.session._ops.drain(quiet=True)
        self.dataset(name)
        return sorted(self.engine._steps[name])

    @property
    def kind(self) -> str:
        """``"state"`` (written every step) or ``"topology"`` (written once or rarely); see :mod:`sdm.segments`."""
        return self.record.kind

    @property
    def steps_per_file(self) -> int | None:
        """Levels 2 and 3: steps per data file (None: one file)."""
        return self.record.steps_per_file

    @property
    def tier(self) -> str:
        """Where the group's writes go: ``"fast"`` (files) or ``"archive"`` (objects, see :attr:`archive`)."""
        return "archive" if self.record.archive else "fast"

    @property
    def subfiles(self) -> int | str | None:
        """K subfiles per step, ``"auto"`` (chosen per write), or None: one file (see :mod:`sdm.storage.subfiles`)."""
        k = self.record.subfiles
        return "auto" if k == 0 else k

    @property
    def archive(self) -> str | None:
        """``s3://BUCKET/PREFIX`` the group writes its objects to (None: the fast tier)."""
        return self.record.archive

    def step_at(self, name: str, step: int) -> int | None:
        """The last step of *name* written at or before *step* (None: none), e.g. the topology in effect
        at a state step."""
        _check_step(step)
        earlier = [s for s in self.steps(name) if s <= step]
        return earlier[-1] if earlier else None

    @collective("group_set_attributes")
    def set_attributes(
        self, attributes: dict[str, Any] | None = None, *, datasets: Sequence[str] | None = None, **kw: Any
    ) -> None:
        """Set typed attributes (collective).

        Without ``datasets``: on the group, propagated to all its datasets (the paper's
        ``SDM_set_attributes``). With ``datasets``: on those datasets only, overriding
        the group's and the run's values for them.

        Raises
        ------
        ReadOnlyError, DatasetNotFoundError, InvalidArgumentError
        """
        self.session._check_writable("set attributes")

        def resolve() -> tuple[dict[str, Any], list[int]]:
            merged = merge_attributes(attributes, kw)
            names = self.datasets if datasets is None else check.names(datasets, "datasets")
            return merged, [self.dataset(n).id for n in names]

        resolved, failure = capture(resolve, rank=self.session.rank)
        agree(self.session.comm, failure)  # a bad name on any rank: the same error on all
        merged, ids = resolved  # type: ignore[misc]
        root_call(
            self.session.comm,
            self.session.record,
            AttributesSet(self.session.run_id, merged, self.record.id, tuple(ids), datasets is None),
        )

    # ------------------------------------------------------------------ infos
    @collective("group_set_info")
    def set_info(self, name: str, array: Any, dataset: str | None = None, step: int | None = None) -> None:
        """Store an info on the group, or on its *dataset*, or on one *step* of it (collective; see :mod:`sdm.infos`)."""
        from .infos import set_info

        set_info(self.session, name, array, group=self, dataset=dataset, step=step)

    @collective("group_info")
    def info(self, name: str, dataset: str | None = None, step: int | None = None) -> np.ndarray:
        """The info *name* of the group, its *dataset* or one *step* of it, on every rank (collective)."""
        from .infos import get_info

        return get_info(self.session, name, group=self, dataset=dataset, step=step)

    @collective("group_infos")
    def infos(self, dataset: str | None = None, step: int | None = None) -> list[str]:
        """The names of the infos of the group, its *dataset* or one *step* of it (collective)."""
        from .infos import list_infos

        return list_infos(self.session, group=self, dataset=dataset, step=step)

    # ------------------------------------------------------------------ views
    @collective("data_view")
    def data_view(self, view: Distribution, datasets: Sequence[str] | None = None) -> None:
        """Set the data view (distribution) of datasets of the group (collective).

        The paper's ``SDM_data_view``: how the local arrays of the ranks map onto the
        global array.  Explicit :class:`~sdm.Subarray` views are checked across all
        ranks: a gap or an overlap raises :class:`DistributionError` everywhere.
        In a writing session the view is recorded as the datasets' access pattern.

        Every rank must give the same kind of view with the same parameters (grid, block
        sizes, map options; Subarray boxes, MapArray rows and ghost layers are each
        rank's own) for the same datasets: this is checked with one exchange before
        anything else, and a difference raises :class:`CollectiveMismatchError` with
        the same message on every rank, naming the ranks and their views.

        Raises
        ------
        CollectiveMismatchError, DistributionError, DatasetNotFoundError
        """
        self.engine._set_data_view(view, datasets)

    def local_shape(self, name: str) -> tuple[int, ...]:
        """Shape of this rank's local array for *name* (ghost layers included)."""
        return self.engine._view(name).piece.memory_shape

    def piece(self, name: str) -> Piece:
        """This rank's piece of *name* under the current view."""
        return self.engine._view(name).piece

    @collective("ranked_counts")
    def ranked_counts(self, name: str, step: int) -> "_ranked.RankedCounts":
        """The header of one step of a ranked dataset, without its rows (collective).

        Returns
        -------
        sdm.engine.ranked.RankedCounts
            Per-rank row counts, their total and maximum, the writer's number of ranks.

        Raises
        ------
        DatasetNotFoundError, StepNotFoundError, InvalidArgumentError (not ranked), IntegrityError, StorageError
        """
        return _ranked.counts(self.engine, name, step)

    # ------------------------------------------------------------------ write
    def write(self, name: str, step: int, array: Any, *, overwrite: bool = False, method: str | None = None,
              casting: str | None = None, wait: bool | None = None) -> DumpHandle | None:
        """Write this rank's piece of dataset *name* at time *step* (collective).

        Parameters
        ----------
        name : str
            Dataset of this group.
        step : int
            Time step (>= 0).
        array : numpy.ndarray
            The local array, ghost layers included, of the shape :meth:`local_shape`
            gives, of the dataset's dtype or of one SDM converts to it (any numeric
            dtype to a numeric one, byte order included; see :mod:`sdm.convert`). The
            conversion is made in the one copy of the array the write then moves; the
            checksum is the stored bytes'.
        overwrite : bool
            Replace a step written before (otherwise :class:`StepExistsError`).
        method : str, optional
            I/O method for this call (default: the session's).
        casting : {None, "no", "equiv", "safe", "same_kind", "unsafe"}
            None (default): a conversion numpy does not call safe checks the values
            written and refuses them all if one does not fit (overflow, NaN, infinity
            or a fraction to an integer, ...); numpy's names allow what
            ``numpy.can_cast`` allows, unchecked (``"unsafe"``: as ``astype``).
        wait : bool, optional
            False: return once SDM holds a copy of *array* (reuse it at once); the dump runs in
            the background, in issue order; every later collective call waits for it and raises
            its error (later dumps then cancelled; :mod:`sdm.engine.background`). Default: the
            session's ``asynchronous``.

        Returns
        -------
        DumpHandle or None
            With ``wait=False``, the dump's handle (``wait()``, ``done()``, its timings); else None.

        Raises
        ------
        ReadOnlyError, DatasetNotFoundError, LocalArrayError, ConversionError,
        StepExistsError, CollectiveMismatchError, StorageError, CatalogError
        """
        return dump(self, wait, "Group.write", (name, step), array, lambda a, w: self._write_now(
            name, step, a, overwrite=overwrite, method=method, casting=casting, wait=w))

    def write_step(self, step: int, arrays: Mapping[str, Any], *, overwrite: bool = False,
                   method: str | None = None, casting: str | None = None,
                   wait: bool | None = None) -> DumpHandle | None:
        """Write several datasets of one time step as one dump (collective).

        Like ADIOS2's ``BeginStep``/``EndStep`` or PnetCDF's ``iput`` + ``wait_all``:
        one exchange checks the arguments of every rank, one hands out every file and
        offset, the data of each dataset is moved, then one sync per file, one
        exchange of errors, timings and checksums, and one catalog transaction that
        records all the datasets or none (in the background with the session's
        ``async_commit``). Every rank passes the same names in the same order.

        Parameters
        ----------
        step : int
        arrays : mapping of str to numpy.ndarray
            Local arrays by dataset name (see :meth:`write`).
        overwrite, method, casting, wait
            As for :meth:`write` (a value that does not fit in any array refuses the whole dump).

        Returns
        -------
        DumpHandle or None
            As for :meth:`write`, and so are the errors raised.
        """
        return dump(self, wait, "Group.write_step", (step, arrays), arrays, lambda a, w: self._write_step_now(
            step, a, overwrite=overwrite, method=method, casting=casting, wait=w))

    @collective("write", opens=False, label="Group.write")  # write_step's first exchange opens it
    def _write_now(self, name: str, step: int, array: Any, *, overwrite: bool, method: str | None,
                   casting: str | None, wait: Any) -> None:
        try:  # (blocking: also the worker's call of a nonblocking write)
            arrays = {name: array}
        except TypeError:  # an unhashable name: refused (on every rank) as an unknown dataset
            arrays = {repr(name): array}
        self.engine._write_dump(step, arrays, overwrite=overwrite, method=method, casting=casting, wait=wait)

    @collective("write", opens=False, label="Group.write_step")  # exchange 1 (_agree_call) opens it
    def _write_step_now(self, step: int, arrays: Mapping[str, Any], *, overwrite: bool, method: str | None,
                        casting: str | None, wait: Any) -> None:
        self.engine._write_dump(step, arrays, overwrite=overwrite, method=method, casting=casting, wait=wait)

    # ------------------------------------------------------------------- read
    @collective("read", opens=False)  # exchange 1 (_agree_call) opens it
    def read(self, name: str, step: int, out: np.ndarray | None = None, *, method: str | None = None,
             verify: bool | None = None, dtype: Any = None, casting: str | None = None,
             ranks: tuple[int, int] | None = None, box: Any = None) -> np.ndarray:
        """Read this rank's piece of dataset *name* at time *step* (collective), or a box of it.

        Parameters
        ----------
        name : str
        step : int
        out : numpy.ndarray, optional
            Local array to fill (C- or Fortran-contiguous, ghost layers included;
            ghosts are left untouched). Allocated (zero ghosts) when omitted. Of
            the dataset's dtype or one SDM converts it to (see *dtype*).
        method : str, optional
            I/O method for this call.
        verify : bool, optional
            Check the bytes against the write-time checksum (default: the session's).
        dtype : numpy dtype-like, optional
            The dtype of the result (default: *out*'s, else the dataset's). Another
            dtype than the stored one is converted after the bytes are read and
            verified (rules in :mod:`sdm.convert`); every rank must read into the
            same dtype.
        casting : {None, "no", "equiv", "safe", "same_kind", "unsafe"}
            As for :meth:`write`: by default a value that does not fit the result's
            dtype refuses the read (nothing set in *out*).
        ranks : (int, int), optional
            Ranked datasets only (:class:`sdm.Ranked`): read the rows the writer's
            ranks ``first`` to ``stop - 1`` wrote (each rank may name its own range).
            Without it a rank of a ranked dataset gets its own rows under the writer's
            number of ranks, else a balanced share of all rows, in order. Ranked rows
            are read in their stored dtype (no *out*, *dtype* or *casting*); the
            verification covers the whole step.
        box : tuple, optional
            Read this box of the global array instead of the rank's piece of the data
            view: per dimension an int, a ``start:stop:step`` slice (step > 0) or ``...``,
            as numpy's basic indexing (:func:`sdm.layout.boxes.parse_box`). Each rank
            gives its own box; boxes may overlap, be empty or leave parts unread, and only
            their bytes are read. The result keeps every dimension (an int gives extent
            1); *out*, if given, has that shape. Either every rank gives a box or none.
            A box is not checked against the step's checksum (it covers the whole
            step): ``verify=True`` is refused, the session's default skipped.

        Returns
        -------
        numpy.ndarray
            *out*, or the new local array.

        Raises
        ------
        DatasetNotFoundError, StepNotFoundError, LocalArrayError, ConversionError,
        StorageError, IntegrityError, CollectiveMismatchError
        """
        return self.engine._read_step(name, step, out, method=method, verify=verify, dtype=dtype, casting=casting,
                                      ranks=ranks, box=box)

    @collective("read_step", opens=False)  # its opening exchange (_agree_call) opens it
    def read_step(self, step: int, names: Sequence[str] | None = None, *,
                  out: Mapping[str, np.ndarray] | None = None, method: str | None = None,
                  verify: bool | None = None) -> dict[str, np.ndarray]:
        """Read several datasets of one time step as one access (collective): the read side of :meth:`write_step`.

        One exchange checks every rank's call, one broadcast hands out where each step's
        bytes are (looked up together on rank 0), the datasets that share a file are read
        with one file view and one call (as PnetCDF's ``wait_all``), and one exchange
        carries the errors and the checksums. Datasets stored elsewhere (subfiles, the
        archive tier) or larger than a combined call takes are read one by one in the same
        access. Every rank passes the same names in the same order.

        Parameters
        ----------
        step : int
        names : sequence of str, optional
            The datasets to read (default: all of the group's, in order); global arrays only
            (read ranked datasets with :meth:`read`).
        out : mapping of str to numpy.ndarray, optional
            Local arrays to fill, by name (of the stored dtype; ghosts untouched); the others
            are allocated.
        method, verify
            As for :meth:`read`.

        Returns
        -------
        dict of str to numpy.ndarray
            This rank's piece of each dataset, by name, in the order of *names*.

        Raises
        ------
        As for :meth:`read`.
        """
        return self.engine._read_dump(step, names, out, method=method, verify=verify)

    def __repr__(self) -> str:
        return f"<sdm.Group {self.name!r} level={self.level} datasets={self.datasets}>"
