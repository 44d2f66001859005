"""An xarray backend: ``xr.open_dataset(catalog, engine="sdm", ...)``, lazily, in one process.

::

    import xarray as xr
    ds = xr.open_dataset("sdm-data/catalog.db", engine="sdm", application="heat",
                         where=["case=demo"], group="fields")          # or run=3
    ds["T"].isel(step=-1).sel(x=0.5, method="nearest").values        # reads one column of one step
    ds = xr.open_dataset(..., engine="sdm", chunks={"step": 1})       # dask: one chunk per step
    runs = sdm.xarray.open_runs("sdm-data/catalog.db", application="heat", where=["nx>=32"], group="fields")

*filename_or_obj* is a catalog (an SQLAlchemy URL, or the path of an SQLite catalog
file) or a data root (the directory holding ``catalog.db``).  The run is chosen as
``sdm.open`` chooses it (:mod:`sdm.catalog.selection`): ``run=`` (an id, or
``"latest"``: the newest that ``application=`` and ``where=`` select), else the one run
that ``application=`` and ``where=`` (conditions such as ``"case=demo"``, ``"nx>=32"``,
or a dict of attributes) select; several matching runs raise
:class:`~sdm.errors.AmbiguousRunError` listing them, newest first (:func:`open_runs`
concatenates them along a ``run`` dimension, newest first as :func:`sdm.find` lists them).

One variable per dataset of the group (``group=``, needed when the run has several),
with the dimensions ``("step", *dims)``: the dimension names the writer gave
(``make_group(dims=...)``), else ``dim_0``, ...; a ``step`` coordinate (the steps
written by any dataset of the group; a step a dataset lacks reads as NaN, or 0 for
integers) and a coordinate for every dimension with values given
(``make_group(coords=...)``); the dataset's attributes as ``attrs`` and the run's
(with ``sdm_run``, ``sdm_application``, ``sdm_group``) on the Dataset.  Values are read
only when indexed, through :class:`sdm.lazy.DatasetArray` (only the bytes indexed; the
archive tier's objects by ranged GETs); the session stays open until the Dataset is
closed.  Ranked datasets (no global shape) are left out, with a note in
``attrs["sdm_skipped"]``.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from .errors import InvalidArgumentError, RunNotFoundError

__all__ = ["SDMBackendEntrypoint", "open_runs", "catalog_url"]

try:  # xarray is an optional dependency (pip install sdm[analysis])
    import xarray as xr
    from xarray.backends import BackendArray, BackendEntrypoint
    from xarray.core import indexing
except ImportError:  # pragma: no cover - the module then only names what is missing
    xr = None  # type: ignore[assignment]
    BackendArray = object  # type: ignore[assignment,misc]
    BackendEntrypoint = object  # type: ignore[assignment,misc]


def _need_xarray() -> None:
    if xr is None:
        raise InvalidArgumentError("the xarray backend needs xarray: pip install 'sdm[analysis]'")


def catalog_url(where: Any) -> str:
    """The catalog URL of *where*: a URL as it is, an SQLite file's path, or a data root (its ``catalog.db``).

    Raises
    ------
    InvalidArgumentError
        A path that is neither an existing file nor a directory holding ``catalog.db``.
    """
    from . import config

    text = os.fspath(where) if isinstance(where, os.PathLike) else where
    if not isinstance(text, str) or not text:
        raise InvalidArgumentError(f"expected a catalog URL, an SQLite catalog file or a data root, got {where!r}")
    if config.catalog_url(text) == text:  # a URL, as it is
        return text
    path = Path(text).expanduser()
    if path.is_dir():  # a data root: its catalog
        path = path / "catalog.db"
    if not path.is_file():
        raise InvalidArgumentError(f"{text!r} is neither a catalog URL, an SQLite catalog file nor a data root "
                                   "holding catalog.db")
    return config.catalog_url(str(path))


def _conditions(where: Any) -> list[str]:
    if where is None:
        return []
    if isinstance(where, dict):
        return [f"{k}={v}" for k, v in where.items()]
    if isinstance(where, str):
        return [where]
    return [str(w) for w in where]


def _select(url: str, application: str | None, where: Any, run: int | str | None) -> Any:
    """The one run selected (the rule of :mod:`sdm.catalog.selection`), as a catalog record."""
    from .catalog import Catalog
    from .catalog.selection import PYTHON_ADVICE
    from .values import conditions_of

    conds = conditions_of(where)
    cat = Catalog(url, create=False)
    try:
        return cat.select_run(application, run=run, conditions=conds,
                              advice=f"{PYTHON_ADVICE}, or sdm.xarray.open_runs to concatenate them along 'run'")
    finally:
        cat.close()


def _runs(url: str, application: str | None, where: Any) -> list[Any]:
    """Every run selected, as catalog records (without steps), newest first."""
    from .catalog import Catalog, redact_url
    from .values import conditions_of

    conds = conditions_of(where)
    cat = Catalog(url, create=False)
    try:
        found = cat.find(application=application, conditions=conds, steps=False)
    finally:
        cat.close()
    if not found:
        raise RunNotFoundError(f"no run of {application or 'any application'} matches {_conditions(where)} "
                               f"in {redact_url(url)}")
    return list(found)


class _Lazy(BackendArray):
    """One SDM dataset over the group's steps, indexed lazily (basic indexing)."""

    def __init__(self, array: Any, steps: np.ndarray, lock: threading.Lock) -> None:
        self.array, self.lock = array, lock
        self.steps = steps
        self.shape = (int(steps.size), *array.record.shape)
        self.dtype = array.dtype
        self._fill = np.nan if self.dtype.kind in "fc" else 0
        self._position = {int(s): i for i, s in enumerate(array.steps)}

    def __getitem__(self, key: Any) -> Any:
        return indexing.explicit_indexing_adapter(key, self.shape, indexing.IndexingSupport.BASIC, self._get)

    def _get(self, key: tuple) -> np.ndarray:
        from .layout.boxes import parse_box

        box = parse_box(key, self.shape, f"index of {self.array.name!r}")
        wanted = self.steps[box.indices()[0]]
        space = tuple(slice(a, b, c) for a, b, c in box.ranges[1:])
        out = np.empty((wanted.size, *box.counts[1:]), dtype=self.dtype)
        with self.lock:
            for i, step in enumerate(wanted.tolist()):
                position = self._position.get(int(step))
                if position is None:
                    out[i] = self._fill
                else:
                    out[i] = self.array[(position, *space)]
        return out.reshape(box.shape)


def _variables(session: Any, group: Any, lock: threading.Lock, drop: set[str]) -> tuple[dict, dict, list[str]]:
    """The group's variables, coordinates, and the datasets left out."""
    from .lazy import DatasetArray

    arrays = {n: DatasetArray(group, n) for n in group.datasets if n not in drop and not group.engine._is_ranked(n)}
    skipped = [n for n in group.datasets if group.engine._is_ranked(n)]
    steps = np.array(sorted({int(s) for a in arrays.values() for s in a.steps}), dtype=np.int64)
    variables: dict[str, Any] = {}
    named: dict[str, int] = {}
    for name, arr in arrays.items():
        rec = arr.record
        dims = tuple(rec.dims) if rec.dims else tuple(f"dim_{d}" for d in range(len(rec.shape)))
        named.update(zip(dims, rec.shape))
        data = indexing.LazilyIndexedArray(_Lazy(arr, steps, lock))
        attrs = {k: v for k, v in rec.attributes.items() if isinstance(v, (str, int, float, bool))}
        encoding: dict[str, Any] = {}
        if rec.compression is not None:  # dask chunks (chunks={}) follow SDM's: one step, one chunk's box
            attrs["sdm_compression"] = rec.compression
            chunk = _chunk_shape(group, rec, arr.steps)
            if chunk is not None:
                encoding["preferred_chunks"] = {"step": 1, **dict(zip(dims, chunk))}
        variables[name] = xr.Variable(("step", *dims), data, attrs=attrs, encoding=encoding)
    coords: dict[str, Any] = {"step": ("step", steps)}
    for dim in named:
        if f"coord.{dim}" in group.infos():
            coords[dim] = (dim, group.info(f"coord.{dim}"))
    return variables, coords, skipped


def _chunk_shape(group: Any, rec: Any, steps: np.ndarray) -> tuple[int, ...] | None:
    """A compressed dataset's chunk shape: the one it was made with, else the largest box of its first step's
    chunks (each writer's box; None when no step was written)."""
    if rec.chunks is not None:
        return tuple(min(int(c), int(n)) for c, n in zip(rec.chunks, rec.shape))
    if not steps.size:
        return None
    w = group.session.open_catalog().lookup_write(rec.id, int(steps[0]))
    boxes = [e.box for e in (w.extents if w is not None else ()) if e.box is not None]
    if not boxes:
        return None
    return tuple(max(int(b[1][d]) for b in boxes) for d in range(len(rec.shape)))


class SDMBackendEntrypoint(BackendEntrypoint):
    """``engine="sdm"`` (see the module documentation)."""

    description = "Open the datasets of an SDM run (catalog + data files or archive) lazily"
    url = "https://github.com/sdm/sdm#reading-with-xarray"
    open_dataset_parameters = ("filename_or_obj", "drop_variables", "application", "run", "where", "group", "root")

    def guess_can_open(self, filename_or_obj: Any) -> bool:
        return False  # catalogs and data roots are named with engine="sdm"

    def open_dataset(self, filename_or_obj: Any, *, drop_variables: Iterable[str] | None = None,
                     application: str | None = None, run: int | str | None = None, where: Any = None,
                     group: str | None = None, root: str | None = None) -> Any:
        """The Dataset of one run's group (see the module documentation).

        Raises
        ------
        AmbiguousRunError
            Several runs match and ``run`` is not given: the message lists them.
        RunNotFoundError, InvalidArgumentError, GroupNotFoundError
        """
        import sdm

        _need_xarray()
        url = catalog_url(filename_or_obj)
        rec = _select(url, application, where, run)
        session = sdm.open(rec.application, "r", catalog=url, run=rec.id, **({"root": root} if root else {}))
        try:
            names = session.groups
            if group is None and len(names) != 1:
                raise InvalidArgumentError(f"run {rec.id} has groups {names}; choose one with group=")
            g = session.group(group or names[0])
            lock = threading.Lock()
            variables, coords, skipped = _variables(session, g, lock, set(drop_variables or ()))
            attrs = {k: v for k, v in rec.attributes.items() if isinstance(v, (str, int, float, bool))}
            attrs.update(sdm_run=rec.id, sdm_application=rec.application, sdm_group=g.name)
            if skipped:
                attrs["sdm_skipped"] = f"ranked datasets (no global shape): {', '.join(skipped)}"
            ds = xr.Dataset(variables, coords=coords, attrs=attrs)
        except BaseException:
            session.close()
            raise
        ds.set_close(session.close)
        return ds


def open_runs(filename_or_obj: Any, *, application: str | None = None, where: Any = None,
              group: str | None = None, **kwargs: Any) -> Any:
    """Every run *application* and *where* select, concatenated along a new ``run`` dimension
    (an outer join on the steps: a step a run lacks is NaN), like ``xr.open_mfdataset``.

    Raises
    ------
    RunNotFoundError, InvalidArgumentError
    """
    _need_xarray()
    url = catalog_url(filename_or_obj)
    found = _runs(url, application, where)
    parts = [xr.open_dataset(url, engine="sdm", run=r.id, group=group, **kwargs) for r in found]
    out = xr.concat(parts, dim=xr.Variable("run", [r.id for r in found]), join="outer",
                    combine_attrs="drop_conflicts")

    def close() -> None:
        for p in parts:
            p.close()

    out.set_close(close)
    return out
