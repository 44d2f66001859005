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
from .ranked import Ranked

__all__ = [
    "Block",
    "BlockCyclic",
    "Cyclic",
    "Distribution",
    "MapArray",
    "Piece",
    "Ranked",
    "Subarray",
    "check_tiling",
    "default_grid",
    "distribution_from_json",
]
