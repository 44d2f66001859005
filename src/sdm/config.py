"""Defaults for where SDM keeps data and metadata, overridable by environment.

``SDM_ROOT``     directory under which SDM creates every data file (default ``./sdm-data``)
``SDM_CATALOG``  catalog URL, or the path of an SQLite catalog file (default
                 ``sqlite:///<SDM_ROOT>/catalog.db``)
``SDM_SYNC``     ``0`` to skip the data sync before each catalog commit (default ``1``)
``SDM_CHECKSUM`` ``0`` to skip the checksum (``mix64-v2``) of each write (default ``1``)
``SDM_OPEN_FILES`` data files a session keeps open at levels 2 and 3 (default 64, at most a
                 quarter of the process's open-file limit)
"""

from __future__ import annotations

import os
import re
from pathlib import Path

__all__ = ["default_root", "default_catalog_url", "catalog_url", "sync_enabled", "checksum_enabled", "open_files"]


def default_root() -> Path:
    """Return the data root: ``$SDM_ROOT`` or ``./sdm-data``, made absolute."""
    return Path(os.environ.get("SDM_ROOT", "sdm-data")).resolve()


def default_catalog_url(root: Path | None = None) -> str:
    """Return ``$SDM_CATALOG`` (a URL or a file path) or an SQLite catalog inside the data root."""
    url = os.environ.get("SDM_CATALOG")
    if url:
        return catalog_url(url)
    root = Path(root) if root is not None else default_root()
    return f"sqlite:///{root / 'catalog.db'}"


# "scheme:" at the start: a URL (perhaps mistyped, "sqlite:/x"), never taken for a file name
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:")


def catalog_url(value: str) -> str:
    """Return the catalog URL meant by *value*: a URL as it is, a plain path as its SQLite URL.

    ``runs/catalog.db``, ``./catalog.db`` or ``/data/catalog.db`` (no ``scheme:`` in
    front) mean that SQLite file, made absolute: ``sqlite:////abs/runs/catalog.db``.
    Anything that starts like a URL (``sqlite:/x``, ``host:5432/db``) is returned as it
    is, for :func:`sdm.catalog.normalize_url` to accept or refuse with a clear message.

    Parameters
    ----------
    value : str
        A catalog URL or the path of an SQLite catalog file (``~`` is expanded).

    Returns
    -------
    str
    """
    if not value or "://" in value or _SCHEME.match(value) or "\0" in value:
        return value
    return f"sqlite:///{Path(value).expanduser().resolve()}"


def _flag(name: str) -> bool:
    return os.environ.get(name, "1").lower() not in {"0", "false", "no", "off"}


def sync_enabled() -> bool:
    """Whether data is synced to storage before each catalog commit (``$SDM_SYNC``)."""
    return _flag("SDM_SYNC")


def checksum_enabled() -> bool:
    """Whether each write records a checksum (``$SDM_CHECKSUM``)."""
    return _flag("SDM_CHECKSUM")


def open_files() -> int:
    """How many data files a session keeps open (``$SDM_OPEN_FILES``, default 64).

    Capped at a quarter of the soft ``RLIMIT_NOFILE`` so MPI and the catalog keep room.
    """
    wanted = int(os.environ.get("SDM_OPEN_FILES", "64"))
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft > 0:
            wanted = min(wanted, max(1, soft // 4))
    except (ImportError, ValueError, OSError):
        pass
    return max(1, wanted)
