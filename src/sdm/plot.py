"""Pictures of a run's data: a 2-D slice of one step, or a time series across steps.

:func:`plot_slice` writes a PNG of a 2-D slice of one step of a dataset (matplotlib's
Agg backend, a colour bar, a title with the run, application, dataset, step and the
run's attributes, axes named after the dataset's dimensions); :func:`plot_series`
writes a line plot of one point, or of a reduction (``mean``, ``min``, ``max``) of the
whole array or of a slice, at every step. Both return the plotted numbers
(:class:`Plot`), so what is drawn can be checked against numpy. ``sdm plot`` calls them.

A slice is written as numpy indices, one per dimension (``":,5,:"``, ``"10"``,
``"0:32,:,7"``; missing trailing dimensions are whole), or by dimension name
(``"z=10"``, ``"dim_0=10,dim_2=0:32"``; names are the dataset's dimension names when
the writer declared them, else ``dim_0``, ``dim_1``, ...). A slice must leave exactly
two dimensions for a picture; dimensions left over in front are taken at their middle
index (the default for a 3-D array is its middle plane ``n0 // 2``).

The default file name says what is plotted (:func:`default_name`):
``run<R>-<group>-<dataset>-step<K>-<slice>.png`` for a slice (``dim_0=32``: the indices
taken, ``z=2-9by3`` a range, first and last included), ``...-point3,4,5.png`` for a point
and ``...-mean[-<slice>].png`` for a reduction, in the current directory. An existing
file is never replaced unless ``overwrite=True`` (``sdm plot --overwrite``): the picture
is written beside it and renamed into place, so a failure leaves no partial PNG.

The data is read in one process (no mpiexec) through :func:`sdm.open` and the whole
step is read, then sliced (:func:`_read` is the one place that reads).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from . import config
from .errors import (
    DatasetNotFoundError,
    GroupNotFoundError,
    InvalidArgumentError,
    SDMError,
    StepNotFoundError,
)
from .suggest import closest

if TYPE_CHECKING:
    from .catalog import RunRecord
    from .catalog.records import DatasetRecord
    from .group import Group

__all__ = ["Plot", "plot_slice", "plot_series", "parse_slice", "dimension_names", "default_name", "REDUCTIONS"]

#: Reductions a time series may take of each step.
REDUCTIONS = ("mean", "min", "max")

Index = tuple[int | slice, ...]


@dataclass(frozen=True)
class Plot:
    """What a plot drew.

    Attributes
    ----------
    path : Path
        The PNG written.
    data : numpy.ndarray
        The plotted values: the 2-D slice (:func:`plot_slice`) or one value per step
        (:func:`plot_series`).
    steps : tuple of int
        The steps plotted (one for a slice).
    index : tuple
        The numpy index applied to each step (ints and slices).
    title : str
        The figure's title.
    labels : tuple of str
        Axis labels: (rows, columns) of a slice, (x, y) of a series.
    """

    path: Path
    data: np.ndarray
    steps: tuple[int, ...]
    index: Index
    title: str
    labels: tuple[str, str] = field(default=("", ""))


def dimension_names(record: DatasetRecord) -> tuple[str, ...]:
    """The dataset's dimension names: as declared by the writer, else ``dim_0``, ``dim_1``, ..."""
    dims = getattr(record, "dims", None)
    if dims and len(dims) == len(record.shape):
        return tuple(str(d) for d in dims)
    return tuple(f"dim_{i}" for i in range(len(record.shape)))


def _shape_text(shape: Sequence[int]) -> str:
    return "x".join(str(n) for n in shape) or "scalar"


def _steps_text(steps: Sequence[int]) -> str:
    """``6, 12`` or, for many steps, ``0, 1, 2, ..., 98, 99 (100 steps)``."""
    if len(steps) <= 12:
        return ", ".join(str(s) for s in steps) or "none"
    return ", ".join(str(s) for s in steps[:3]) + ", ..., " + ", ".join(str(s) for s in steps[-2:]) + \
        f" ({len(steps)} steps)"


def _index_text(index: Index) -> str:
    def one(i: int | slice) -> str:
        if isinstance(i, int):
            return str(i)
        text = ("" if i.start is None else str(i.start)) + ":" + ("" if i.stop is None else str(i.stop))
        return text + ("" if i.step in (None, 1) else f":{i.step}")

    return ",".join(one(i) for i in index)


def _index_slug(index: Index, shape: Sequence[int], dims: Sequence[str]) -> str:
    """What *index* takes of each dimension, for a file name: ``dim_0=32``, ``z=2-9by3`` (first and last
    index, and the stride); dimensions taken whole are not named (nothing when every one is)."""
    parts = []
    for k, i in enumerate(index):
        if isinstance(i, int):
            parts.append(f"{dims[k]}={i}")
            continue
        r = range(*i.indices(shape[k]))
        if (r.start, r.step, len(r)) != (0, 1, shape[k]):
            parts.append(f"{dims[k]}={r[0]}-{r[-1]}" + (f"by{r.step}" if r.step != 1 else ""))
    return ",".join(parts)


def default_name(run: int, group: str, dataset: str, what: str, index: Index = (), shape: Sequence[int] = (),
                 dims: Sequence[str] = ()) -> Path:
    """The PNG a plot writes when none is named: after the run, the dataset, *what* (``step12``, ``point3,4,5``,
    ``mean``) and the part of the array *index* takes (see the module documentation)."""
    slug = _index_slug(index, shape, dims)
    return Path(f"run{run}-{group}-{dataset}-{what}" + (f"-{slug}" if slug else "") + ".png")


def _refuse_existing(path: Path, overwrite: bool) -> None:
    if not overwrite and (path.exists() or path.is_symlink()):
        raise InvalidArgumentError(f"{path} already exists; pass --overwrite (overwrite=True) to replace it, "
                                   "or name another file with --out")


# ---------------------------------------------------------------------- slices
def _one_index(text: str, n: int, dim: str, spec: str, shape: Sequence[int]) -> int | slice:
    """One dimension's index from text (``5``, ``-1``, ``:``, ``2:10``, ``::2``), checked against *n*."""
    where = f"slice {spec!r} does not fit shape {_shape_text(shape)}"
    parts = text.strip().split(":")
    try:
        values = [int(p) if p.strip() else None for p in parts]
    except ValueError:
        raise InvalidArgumentError(
            f"slice {spec!r}: {text.strip()!r} (dimension {dim}) is not an index; write an integer or start:stop[:step]"
        ) from None
    if len(values) == 1:
        i = values[0]
        if i is None:
            raise InvalidArgumentError(f"slice {spec!r}: dimension {dim} has an empty index")
        if not -n <= i < n:
            raise InvalidArgumentError(f"{where}: index {i} of dimension {dim} is outside 0..{n - 1}")
        return i % n
    if len(values) > 3:
        raise InvalidArgumentError(f"slice {spec!r}: {text.strip()!r} (dimension {dim}) has too many ':'")
    start, stop, step = (values + [None])[:3]
    if step == 0:
        raise InvalidArgumentError(f"slice {spec!r}: dimension {dim} has step 0")
    sl = slice(start, stop, step)
    if len(range(*sl.indices(n))) == 0:
        raise InvalidArgumentError(f"{where}: {text.strip()!r} selects nothing of dimension {dim} (length {n})")
    return sl


def parse_slice(spec: str | None, shape: Sequence[int], dims: Sequence[str], *, free: int | None = 2) -> Index:
    """The numpy index (one int or slice per dimension) a slice text means.

    Parameters
    ----------
    spec : str or None
        ``":,5,:"`` (positional; missing trailing dimensions are whole) or
        ``"z=10"`` / ``"dim_0=10,dim_2=0:32"`` (by name; the others are whole).
        None or ``""``: every dimension whole.
    shape : sequence of int
        The dataset's shape.
    dims : sequence of str
        The dataset's dimension names (see :func:`dimension_names`).
    free : int or None
        How many dimensions the index must leave (2 for a picture); leading extra ones
        are taken at their middle. None: leave them as they are.

    Returns
    -------
    tuple of int and slice

    Raises
    ------
    InvalidArgumentError
        The text is not an index, names an unknown dimension, does not fit *shape*, or
        leaves fewer than *free* dimensions.
    """
    text = (spec or "").strip()
    nd = len(shape)
    index: list[int | slice] = [slice(None)] * nd
    given = [False] * nd
    if text and "=" in text:
        for part in text.split(","):
            name, sep, value = part.partition("=")
            name = name.strip()
            if not sep:
                raise InvalidArgumentError(f"slice {spec!r}: {part.strip()!r} is not NAME=INDEX; write e.g. "
                                           f"{dims[0] if dims else 'dim_0'}=0")
            if name not in dims:
                raise InvalidArgumentError(
                    f"slice {spec!r}: the dataset has no dimension {name!r}; its dimensions are "
                    f"{', '.join(dims) or 'none'}{closest(name, dims)} (or give one index per dimension, e.g. "
                    f"{','.join(['0'] + [':'] * (nd - 1))!r})"
                )
            k = dims.index(name)
            if given[k]:
                raise InvalidArgumentError(f"slice {spec!r}: dimension {name} is given twice")
            index[k], given[k] = _one_index(value, shape[k], name, text, shape), True
    elif text:
        parts = text.split(",")
        if len(parts) > nd:
            raise InvalidArgumentError(
                f"slice {spec!r} has {len(parts)} indices but the dataset has {nd} dimension(s) "
                f"(shape {_shape_text(shape)})"
            )
        for k, part in enumerate(parts):
            index[k], given[k] = _one_index(part, shape[k], dims[k], text, shape), True
    if free is None:
        return tuple(index)
    open_dims = [k for k in range(nd) if isinstance(index[k], slice)]
    if len(open_dims) < free:
        what = f"slice {spec!r} leaves" if text else f"the dataset (shape {_shape_text(shape)}) has"
        raise InvalidArgumentError(
            f"{what} {len(open_dims)} dimension(s); a 2-D plot needs {free}"
            + ("; plot a time series with --point or --reduce" if nd < free else "")
        )
    for k in open_dims[: len(open_dims) - free]:  # leading extra dimensions: their middle, unless given
        if not given[k]:
            index[k] = shape[k] // 2
    left = [k for k in range(nd) if isinstance(index[k], slice)]
    if len(left) != free:
        raise InvalidArgumentError(
            f"slice {spec!r} leaves {len(left)} dimensions ({', '.join(dims[k] for k in left)}); a 2-D plot needs "
            f"{free}: give an index to {len(left) - free} of them"
        )
    return tuple(index)


def parse_point(text: str, shape: Sequence[int], dims: Sequence[str]) -> tuple[int, ...]:
    """One index per dimension (``"3,4,5"``; negative from the end), checked against *shape*.

    Raises
    ------
    InvalidArgumentError
    """
    parts = [p for p in text.split(",")]
    if len(parts) != len(shape):
        raise InvalidArgumentError(
            f"point {text!r} has {len(parts)} indices but the dataset has {len(shape)} dimension(s) "
            f"(shape {_shape_text(shape)})"
        )
    point = []
    for k, part in enumerate(parts):
        i = _one_index(part, shape[k], dims[k], text, shape)
        if not isinstance(i, int):
            raise InvalidArgumentError(f"point {text!r}: {part.strip()!r} (dimension {dims[k]}) is not one index")
        point.append(i)
    return tuple(point)


# ---------------------------------------------------------------------- reading
def _read(group: Group, name: str, step: int, index: Index) -> np.ndarray:
    """The values of *name* at *step* under *index*: only those bytes are read (:class:`sdm.lazy.DatasetArray`)."""
    return np.asarray(group[name].at(step)[index])


def _find_dataset(run: RunRecord, dataset: str, group: str | None) -> tuple[str, DatasetRecord]:
    """The group name and record of *dataset* in *run* (``GROUP/NAME`` or ``NAME`` with *group*).

    Raises
    ------
    GroupNotFoundError, DatasetNotFoundError
    """
    if group is None and "/" in dataset:
        group, dataset = dataset.split("/", 1)
    groups = {g.name: g for g in run.groups}
    if group is not None:
        if group not in groups:
            raise GroupNotFoundError(
                f"run {run.id} has no group {group!r}; its groups are {', '.join(groups) or 'none'}"
                f"{closest(group, groups)}"
            )
        candidates = [groups[group]]
    else:
        candidates = list(groups.values())
    found = [(g.name, d) for g in candidates for d in g.datasets if d.name == dataset]
    if len(found) == 1:
        return found[0]
    where = f"group {group!r} of run {run.id}" if group is not None else f"run {run.id}"
    if not found:
        names = [d.name for g in candidates for d in g.datasets]
        listed = ", ".join(f"{g.name}/{d.name}" if group is None else d.name for g in candidates for d in g.datasets)
        raise DatasetNotFoundError(
            f"{where} has no dataset {dataset!r}; its datasets are {listed or 'none'}{closest(dataset, names)}"
        )
    raise DatasetNotFoundError(
        f"dataset {dataset!r} is in groups {', '.join(repr(g) for g, _ in found)} of run {run.id}; "
        f"choose one with --group (or write GROUP/{dataset})"
    )


class _Target:
    """A dataset of a run opened for reading in this process (a context manager)."""

    def __init__(self, run: int, dataset: str, group: str | None, catalog: str | None) -> None:
        from .catalog import Catalog

        url = config.catalog_url(catalog) if catalog else config.default_catalog_url()
        cat = Catalog(url, create=False)
        try:
            self.run = cat.run(run, steps=False)
        finally:
            cat.close()
        self.group_name, self.record = _find_dataset(self.run, dataset, group)
        if (self.record.distribution or {}).get("kind") == "ranked":
            raise InvalidArgumentError(
                f"dataset {self.group_name}/{self.record.name} is ranked (a row count per rank); sdm plot takes "
                "arrays of a fixed shape"
            )
        self.name = self.record.name
        self.dims = dimension_names(self.record)
        self.shape = tuple(self.record.shape)
        self._url = url

    def __enter__(self) -> _Target:
        from mpi4py import MPI

        from .session import open as sdm_open

        self.session = sdm_open(self.run.application, "r", comm=MPI.COMM_SELF, catalog=self._url, run=self.run.id)
        try:
            self.group = self.session.group(self.group_name)
            self.steps = self.group.steps(self.name)
        except BaseException:
            self.session.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.session.close()

    def check_step(self, step: int) -> None:
        if step not in self.steps:
            raise StepNotFoundError(
                f"dataset {self.group_name}/{self.name} of run {self.run.id} was never written at step {step}; "
                f"its steps are {_steps_text(self.steps)}"
            )

    def title(self, what: str) -> str:
        attrs = " ".join(f"{k}={v}" for k, v in self.run.attributes.items())
        if len(attrs) > 90:
            attrs = attrs[:87] + "..."
        head = f"run {self.run.id} ({self.run.application}): {self.group_name}/{self.name} {what}"
        return head + (f"\n{attrs}" if attrs else "")

    def out(self, out: str | Path | None, what: str, index: Index, overwrite: bool) -> Path:
        """The PNG to write (*out*, else :func:`default_name`), refused if it exists unless *overwrite*."""
        path = Path(out) if out is not None else default_name(self.run.id, self.group_name, self.name, what, index,
                                                              self.shape, self.dims)
        _refuse_existing(path, overwrite)
        return path


def _figure() -> tuple[Any, Any]:
    try:
        import matplotlib
    except ImportError:
        raise SDMError("plots need matplotlib, which is not installed here: `make analysis` (or "
                       "`pip install -e '.[analysis]'`) installs it") from None

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(6.4, 4.8), dpi=100, layout="constrained")


def _save(fig: Any, path: Path, overwrite: bool) -> None:
    """Write *fig* to *path* through a temporary file beside it: renamed over an old file only if *overwrite*,
    else linked into place (so a file that appeared meanwhile is not replaced either)."""
    import os
    import secrets

    import matplotlib.pyplot as plt

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.parent / f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp"
        try:
            with open(tmp, "xb") as f:  # the umask's permissions, as a file saved directly would have
                fig.savefig(f, format="png")
            if overwrite:
                os.replace(tmp, path)
            else:
                try:
                    os.link(tmp, path)
                except FileExistsError:
                    _refuse_existing(path, False)
                    raise
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    finally:
        plt.close(fig)


def plot_slice(run: int, dataset: str, step: int, *, group: str | None = None, select: str | None = None,
               out: str | Path | None = None, catalog: str | None = None, cmap: str = "viridis",
               overwrite: bool = False) -> Plot:
    """Write a PNG of a 2-D slice of one step of a dataset.

    Parameters
    ----------
    run : int
        Run id.
    dataset : str
        Dataset name, or ``GROUP/NAME``.
    step : int
        The step to plot.
    group : str, optional
        The dataset's group (needed only when several groups have a dataset of that name).
    select : str, optional
        Which 2-D slice (see :func:`parse_slice`); default the middle of the leading dimensions.
    out : str or Path, optional
        The PNG to write (default ``run<R>-<group>-<dataset>-step<K>-<slice>.png``, see :func:`default_name`).
    catalog : str, optional
        Catalog URL or SQLite file (default ``$SDM_CATALOG`` or the one in ``$SDM_ROOT``).
    cmap : str
        Matplotlib colour map.
    overwrite : bool
        Replace the PNG if it exists (else refused, nothing read or written).

    Returns
    -------
    Plot
        ``data`` is the plotted 2-D array (the step's values under ``index``).

    Raises
    ------
    RunNotFoundError, GroupNotFoundError, DatasetNotFoundError, StepNotFoundError, InvalidArgumentError
    """
    t = _Target(run, dataset, group, catalog)
    index = parse_slice(select, t.shape, t.dims)
    path = t.out(out, f"step{step}", index, overwrite)  # refused before anything is read
    with t:
        t.check_step(step)
        data = _read(t.group, t.name, step, index)
        row_k, col_k = (k for k, i in enumerate(index) if isinstance(i, slice))
        rows, cols = t.dims[row_k], t.dims[col_k]
        fixed = [f"{t.dims[k]}={i}" for k, i in enumerate(index) if isinstance(i, int)]
        title = t.title(f"step {step}" + (f" [{', '.join(fixed)}]" if fixed else ""))
        fig, ax = _figure()
        shown = data.real if np.iscomplexobj(data) else data
        image = ax.imshow(shown.astype(np.float64), origin="lower", cmap=cmap, interpolation="nearest",
                          aspect="auto", extent=(*_span(index, t.shape, col_k), *_span(index, t.shape, row_k)))
        fig.colorbar(image, ax=ax, label=t.name)
        ax.set_xlabel(cols)
        ax.set_ylabel(rows)
        ax.set_title(title, fontsize=10)
        _save(fig, path, overwrite)
    return Plot(path=path, data=data, steps=(step,), index=index, title=title, labels=(rows, cols))


def _span(index: Index, shape: Sequence[int], k: int) -> tuple[float, float]:
    """Where the image covers dimension *k*: pixel centres on the indices its slice selects."""
    sl = index[k]
    assert isinstance(sl, slice)
    r = range(*sl.indices(shape[k]))
    return r[0] - r.step / 2, r[-1] + r.step / 2


def _reduce(how: str, values: np.ndarray) -> Any:
    """``mean`` (in float64, whatever the dtype), ``min`` or ``max`` of an array."""
    if how == "mean":
        return np.mean(values, dtype=np.float64)
    return np.min(values) if how == "min" else np.max(values)


def plot_series(run: int, dataset: str, *, point: str | None = None, reduce: str | None = None,
                group: str | None = None, select: str | None = None, out: str | Path | None = None,
                catalog: str | None = None, overwrite: bool = False) -> Plot:
    """Write a PNG of one point, or of a reduction of each step, against the step.

    Parameters
    ----------
    run : int
        Run id.
    dataset : str
        Dataset name, or ``GROUP/NAME``.
    point : str, optional
        One index per dimension (``"3,4,5"``).
    reduce : {"mean", "min", "max"}, optional
        Reduce each step (or its part *select*) to one value; exactly one of *point* and *reduce*.
    group : str, optional
        The dataset's group.
    select : str, optional
        With *reduce*: reduce this part of each step (see :func:`parse_slice`; any number of
        dimensions may be left).
    out : str or Path, optional
        The PNG to write (default ``run<R>-<group>-<dataset>-point<I,J,...>.png`` or
        ``...-<reduction>[-<slice>].png``, see :func:`default_name`).
    catalog : str, optional
        Catalog URL or SQLite file.
    overwrite : bool
        Replace the PNG if it exists (else refused, nothing read or written).

    Returns
    -------
    Plot
        ``data`` holds one value per step of ``steps`` (float64 for reductions).

    Raises
    ------
    RunNotFoundError, GroupNotFoundError, DatasetNotFoundError, InvalidArgumentError
    """
    if (point is None) == (reduce is None):
        raise InvalidArgumentError("a time series needs either a point (--point i,j,...) or a reduction "
                                   f"(--reduce {'|'.join(REDUCTIONS)}), not both")
    if reduce is not None and reduce not in REDUCTIONS:
        raise InvalidArgumentError(f"reduction {reduce!r} is not one of {', '.join(REDUCTIONS)}"
                                   f"{closest(reduce, REDUCTIONS)}")
    if point is not None and select is not None:
        raise InvalidArgumentError("--slice goes with --reduce (the part of each step to reduce), not with --point")
    t = _Target(run, dataset, group, catalog)
    index: Index
    if point is not None:
        index = parse_point(point, t.shape, t.dims)
        path = t.out(out, "point" + ",".join(str(i) for i in index), (), overwrite)  # refused before any read
        ylabel = f"{t.name}[{', '.join(f'{d}={i}' for d, i in zip(t.dims, index))}]"
    else:
        assert reduce is not None
        index = parse_slice(select, t.shape, t.dims, free=None)
        path = t.out(out, reduce, index, overwrite)
        ylabel = f"{reduce}({t.name}" + (f"[{_index_text(index)}]" if select else "") + ")"
    with t:
        if not t.steps:
            raise InvalidArgumentError(f"dataset {t.group_name}/{t.name} of run {t.run.id} has no step yet")
        if point is not None:
            values = np.array([_read(t.group, t.name, s, index) for s in t.steps])
        else:
            assert reduce is not None
            values = np.array([_reduce(reduce, _read(t.group, t.name, s, index)) for s in t.steps])
        title = t.title(f"{len(t.steps)} steps")
        fig, ax = _figure()
        ax.plot(t.steps, values.real if np.iscomplexobj(values) else values, marker="o", markersize=3)
        ax.set_xlabel("step")
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=10)
        ax.grid(True, alpha=0.3)
        _save(fig, path, overwrite)
    return Plot(path=path, data=values, steps=tuple(t.steps), index=index, title=title, labels=("step", ylabel))
