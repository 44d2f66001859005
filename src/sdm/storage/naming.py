"""Every path SDM creates is generated here; user names never reach the file system raw."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from ..errors import InvalidNameError
from ..names import check_name

__all__ = ["check_name", "component", "inside", "MEMBER", "member", "member_location", "SUPERFILE_SUFFIX"]

_SAFE = re.compile(r"[^A-Za-z0-9_.-]")
_MAX = 96


def component(name: str) -> str:
    """A file-name-safe, collision-free form of a (checked) name.

    Safe names stay as they are; others get unsafe characters replaced and a short
    hash of the original appended, so two different names never share a file.
    """
    safe = _SAFE.sub("_", name).lstrip(".")[:_MAX] or "_"
    if safe == name:
        return name
    return f"{safe}-{hashlib.sha1(name.encode()).hexdigest()[:8]}"


def inside(root: Path, relative: Path) -> Path:
    """Resolve *relative* under *root*, refusing anything that escapes it.

    Raises
    ------
    InvalidNameError
    """
    root = Path(root).resolve()
    full = (root / relative).resolve()
    if full != root and root not in full.parents:
        raise InvalidNameError(f"path {relative} would leave the data root {root}")
    return full


# --------------------------------------------------------------------------- archive locations
#: The name ending of a superfile object (several small files of a run packed in one; ``sdm migrate``).
SUPERFILE_SUFFIX = ".sdmpack"

#: Separates a superfile's location from a member's offset in it (``copies.location``).
MEMBER = "@"


def member_location(superfile: str, offset: int) -> str:
    """The location of a file packed at *offset* of the superfile object *superfile*."""
    return f"{superfile}{MEMBER}{int(offset)}"


def member(location: str) -> tuple[str, int | None]:
    """``(object location, offset in it)`` of a copy's location; the offset is None for a whole object."""
    head, sep, tail = location.rpartition(MEMBER)
    if sep and tail.isdigit() and head.startswith("s3://"):
        return head, int(tail)
    return location, None
