"""Storage: file naming, organization levels, and open-file management."""

from .files import FileCache
from .naming import check_name, component, inside, run_dir
from .organization import LEVELS, appends, check_level, relative_path

__all__ = ["FileCache", "check_name", "component", "inside", "run_dir", "LEVELS", "appends", "check_level", "relative_path"]
