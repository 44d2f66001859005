"""SDM's version (a leaf module: what any part of SDM may import without importing the package)."""

__version__ = "0.1.0"
