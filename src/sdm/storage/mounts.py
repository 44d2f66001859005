"""What the operating system says about where files live (no MPI, no numpy: the CLI imports it)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["fs_type"]


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
