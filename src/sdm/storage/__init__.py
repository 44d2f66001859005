"""Storage: file naming, organization levels, run directories, open files and durability."""

from . import durability, runs
from .durability import make_durable, sync_mode
from .files import FileCache, copy_range, extend_file
from .naming import check_name, component, inside
from .organization import LEVELS, appends, check_level, relative_path

__all__ = [
    "durability", "runs", "make_durable", "sync_mode", "FileCache", "copy_range", "extend_file", "check_name", "component",
    "inside", "LEVELS", "appends", "check_level", "relative_path",
]
