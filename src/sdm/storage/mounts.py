"""What the operating system says about where files live (no MPI, no numpy: the CLI imports it)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["fs_type", "free_bytes"]


def fs_type(path: Path | str) -> str:
    """File system type of the mount holding *path* (Linux /proc/mounts), or ''."""
    try:
        best, kind, target = "", "", str(Path(path).resolve())
        for line in Path("/proc/mounts").read_text().splitlines():
            parts = line.split()
            if len(parts) > 2 and target.startswith(parts[1]) and len(parts[1]) >= len(best):
                best, kind = parts[1], parts[2]
        return kind
    except OSError:
        return ""


def free_bytes(path: Path | str) -> int | None:
    """Bytes an unprivileged process may still write on the file system of *path* (``os.statvfs``), or None.

    *path* need not exist: its nearest existing parent is asked.
    """
    at = Path(path)
    while True:
        try:
            st = os.statvfs(at)
            return int(st.f_bavail) * int(st.f_frsize)
        except FileNotFoundError:
            if at.parent == at:
                return None
            at = at.parent
        except OSError:
            return None
