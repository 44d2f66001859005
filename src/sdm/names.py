"""The rule every name a user gives SDM obeys (application, group, dataset, info, import).

A name is checked before it reaches anything: the catalog, a file name
(:mod:`sdm.storage.naming` makes file names out of checked names), or a file SDM reads
back (:class:`sdm.file_formats.Name`). Nothing here imports more than SDM's errors.
"""

from __future__ import annotations

from .errors import InvalidNameError

__all__ = ["check_name"]


def check_name(name: object, what: str) -> str:
    """Validate a user-given name (application, group, dataset).

    Names may hold any printable characters except path separators; they cannot be
    empty, ``.`` or ``..``.

    Raises
    ------
    InvalidNameError
    """
    if not isinstance(name, str):
        raise InvalidNameError(f"{what} name must be a string, got {type(name).__name__}")
    if not name or not name.strip():
        raise InvalidNameError(f"{what} name must not be empty")
    if "/" in name or "\\" in name or name in {".", ".."} or ".." in name.split("."):
        raise InvalidNameError(
            f"{what} name {name!r} would leave the data root; use a name without '/', '\\\\' or '..'"
        )
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in name):
        raise InvalidNameError(f"{what} name {name!r} contains control characters")
    if len(name) > 255:
        raise InvalidNameError(f"{what} name is {len(name)} characters long; the limit is 255")
    return name
