"""Defaults for where SDM keeps data and metadata, overridable by environment.

``SDM_ROOT``     directory under which SDM creates every data file (default ``./sdm-data``)
``SDM_CATALOG``  catalog URL (default ``sqlite:///<SDM_ROOT>/catalog.db``)
``SDM_SYNC``     ``0`` to skip the data sync before each catalog commit (default ``1``)
``SDM_CHECKSUM`` ``0`` to skip the checksum (``mix64-v2``) of each write (default ``1``)
``SDM_OPEN_FILES`` data files a session keeps open at levels 2 and 3 (default 64, at most a
                 quarter of the process's open-file limit)
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["default_root", "default_catalog_url", "sync_enabled", "checksum_enabled", "open_files"]


def default_root() -> Path:
    """Return the data root: ``$SDM_ROOT`` or ``./sdm-data``, made absolute."""
    return Path(os.environ.get("SDM_ROOT", "sdm-data")).resolve()


def default_catalog_url(root: Path | None = None) -> str:
    """Return ``$SDM_CATALOG`` or an SQLite catalog inside the data root."""
    url = os.environ.get("SDM_CATALOG")
    if url:
        return url
    root = Path(root) if root is not None else default_root()
    return f"sqlite:///{root / 'catalog.db'}"


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
