"""SDM: a scientific data manager for parallel applications.

Applications write and read distributed arrays by name, time step and attributes;
the bytes go through MPI-IO (collective I/O, derived datatypes) into files SDM names
and organizes, and every piece of metadata goes into a relational catalog.

>>> import sdm                                                  # doctest: +SKIP
>>> with sdm.open("ASTRO3D", attributes={"resolution": 64}) as s:
...     g = s.make_group("analysis", ["rho", "e"], dtype="f4", shape=(64, 64, 64))
...     g.write("rho", 0, rho_local)
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from . import errors
from .errors import *  # noqa: F401,F403 - the exception hierarchy is part of the API

if TYPE_CHECKING:
    from .catalog import Catalog
    from .datasets import Dataset
    from .group import Group
    from .layout import Block, BlockCyclic, Cyclic, Distribution, MapArray, Ranked, Subarray
    from .exporting import export, import_file
    from .session import Session, open

from ._version import __version__ as __version__

# Names load on first use: `import sdm` costs little more than its exceptions, never
# initializes MPI (which may fail or hang on a login node) and never imports SQLAlchemy.
_LAZY = {
    "Catalog": "catalog",
    "open": "session",
    "Session": "session",
    "Group": "group",
    "Dataset": "datasets",
    "Distribution": "layout",
    "Block": "layout",
    "Cyclic": "layout",
    "BlockCyclic": "layout",
    "Subarray": "layout",
    "MapArray": "layout",
    "Ranked": "layout",
    "export": "exporting",  # runs to HDF5, NetCDF-4, Zarr v3
    "import_file": "exporting",  # and back
}


_SUBMODULES = {"catalog", "config", "irregular", "integrity", "layout", "io", "planner", "storage", "examples", "xarray",
               "lazy"}


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        module = import_module(f".{name}", __name__)
        globals()[name] = module
        return module
    if name in _LAZY:
        value = getattr(import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'sdm' has no attribute {name!r}")


def find(catalog: str | None = None, application: str | None = None, **kwargs: Any) -> list[Any]:
    """Find runs and datasets in a catalog without MPI (for scripts and notebooks).

    Parameters
    ----------
    catalog : str, optional
        Catalog URL (default ``$SDM_CATALOG`` or the SQLite catalog in ``$SDM_ROOT``).
    application : str, optional
    **kwargs
        ``run``, ``since``, ``until``, ``attributes``, ``conditions``, ``steps``, ``compression``
        as for :meth:`Catalog.find` (``steps=True`` reads every step; else each dataset carries
        ``nsteps``, ``first_step`` and ``last_step``; ``compression=["ratio>4"]`` keeps the
        compressed datasets whose steps compressed that well).

    Returns
    -------
    list of RunRecord
        Newest first, as ``sdm ls`` and ``sdm find`` list them (latest creation time first;
        runs created at the same instant by id, highest first).
    """
    from . import config
    from .catalog import Catalog

    cat = Catalog(catalog or config.default_catalog_url(), create=False)
    try:
        return cat.find(application=application, **kwargs)
    finally:
        cat.close()


def migrate(runs: Any = None, *, to: str, **kwargs: Any) -> list[Any]:
    """Copy runs to the archive tier ``to="s3://BUCKET/PREFIX"`` and verify every copy (``sdm migrate``).

    ``runs`` are run ids, or select with ``where=["key=value", ...]`` and ``application=``;
    ``endpoint=``, ``catalog=`` and ``progress=`` as for :func:`sdm.ops.tiers.run`, which
    documents the rules. Returns one :class:`~sdm.ops.tiers.TierReport` per run.
    """
    from .ops import tiers

    return tiers.run("migrate", runs, to=to, **kwargs)


def stage(runs: Any = None, **kwargs: Any) -> list[Any]:
    """Bring runs back from the archive tier to the fast tier, verified (``sdm stage``); as :func:`migrate`."""
    from .ops import tiers

    return tiers.run("stage", runs, **kwargs)


def purge(runs: Any = None, *, tier: str = "fast", **kwargs: Any) -> list[Any]:
    """Remove runs' copies from *tier*, refused unless a verified copy exists elsewhere (``sdm purge``)."""
    from .ops import tiers

    return tiers.run("purge", runs, tier=tier, **kwargs)


__all__ = [
    "open",
    "find",
    "migrate",
    "stage",
    "purge",
    "export",
    "import_file",
    "Session",
    "Group",
    "Dataset",
    "Catalog",
    "Distribution",
    "Block",
    "Cyclic",
    "BlockCyclic",
    "Subarray",
    "MapArray",
    "Ranked",
    "errors",
    *errors.__all__,
]
