"""Storage: file naming, organization levels, and open-file management."""

from .files import FileCache, extend_file
from .naming import check_name, component, inside, run_dir
from .organization import LEVELS, appends, check_level, relative_path

__all__ = ["FileCache", "extend_file", "check_name", "component", "inside", "run_dir", "LEVELS", "appends", "check_level", "relative_path"]
