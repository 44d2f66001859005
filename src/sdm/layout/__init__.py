"""Layout: data views (distributions) and the MPI datatypes they turn into."""

from .distribution import (
    Block,
    BlockCyclic,
    Cyclic,
    Distribution,
    Piece,
    Subarray,
    check_tiling,
    default_grid,
    distribution_from_json,
)
from .maparray import MapArray

__all__ = [
    "Block",
    "BlockCyclic",
    "Cyclic",
    "Distribution",
    "MapArray",
    "Piece",
    "Subarray",
    "check_tiling",
    "default_grid",
    "distribution_from_json",
]
