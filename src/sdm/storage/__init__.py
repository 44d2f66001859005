"""Storage: file naming, organization levels, run directories, open files and durability.

Names load on first use, so what needs no MPI (naming, run directories: ``sdm ls``,
``sdm verify``) never imports mpi4py.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from . import durability, runs, trailer
    from .durability import make_durable, sync_mode
    from .files import FileCache, copy_range, extend_file
    from .naming import check_name, component, inside
    from .organization import LEVELS, appends, check_level, check_steps_per_file, relative_path

__all__ = [
    "durability", "runs", "trailer", "make_durable", "sync_mode", "FileCache", "copy_range", "extend_file", "check_name", "component",
    "inside", "LEVELS", "appends", "check_level", "check_steps_per_file", "relative_path",
]

# name -> submodule that defines it
_LAZY = {
    "make_durable": "durability", "sync_mode": "durability",
    "FileCache": "files", "copy_range": "files", "extend_file": "files",
    "check_name": "naming", "component": "naming", "inside": "naming",
    "LEVELS": "organization", "appends": "organization", "check_level": "organization", "relative_path": "organization",
    "check_steps_per_file": "organization",
}


def __getattr__(name: str) -> Any:
    if name in ("durability", "runs", "trailer"):
        return import_module(f".{name}", __name__)
    if name in _LAZY:
        value = getattr(import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
