"""Storage: file naming, organization levels, and open-file management."""

from . import durability
from .durability import make_durable, sync_mode
from .files import FileCache, extend_file
from .naming import check_name, component, inside, run_dir
from .organization import LEVELS, appends, check_level, relative_path

__all__ = ["durability", "make_durable", "sync_mode", "FileCache", "extend_file", "check_name", "component", "inside", "run_dir", "LEVELS", "appends", "check_level", "relative_path"]
