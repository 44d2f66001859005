"""Access patterns as the MDMS writes them -- ``(Block, Block, *)`` -- and the distributions they name.

Shen, Liao and Choudhary's applications tell the MDMS how each array is partitioned
among the processors with one word per dimension: ``Block`` (contiguous blocks),
``Cyclic`` (round robin), ``*`` (not split).  The planner compares such a pattern with
the stored layout (:mod:`sdm.planner.hints`); the predictor turns it into a
distribution to describe a workload's accesses (:mod:`sdm.planner.predict`).
"""

from __future__ import annotations

import math
import re
from typing import Any

from ..errors import HintError
from .distribution import Block, BlockCyclic, Distribution, default_grid

__all__ = ["parse_pattern", "distribution_of"]

_WORDS = {"block": "block", "b": "block", "*": "*", "all": "*", "cyclic": "cyclic", "c": "cyclic",
          "block_cyclic": "cyclic", "blockcyclic": "cyclic", "map": "map", "irregular": "map"}


def parse_pattern(text: Any) -> tuple[str, ...]:
    """``"(Block, Block, *)"`` (or a list of words) -> ``("block", "block", "*")``.

    Raises
    ------
    HintError
        A word other than Block, Cyclic, BlockCyclic, Map or ``*``, or no word at all.
    """
    items = text if isinstance(text, (list, tuple)) else [w for w in re.split(r"[\s,()]+", str(text)) if w]
    out = []
    for w in items:
        key = str(w).strip().lower()
        if key not in _WORDS:
            raise HintError(f"access pattern {text!r}: {w!r} is not one of Block, Cyclic, BlockCyclic, Map or *")
        out.append(_WORDS[key])
    if not out:
        raise HintError(f"access pattern {text!r} names no dimension; write e.g. '(Block, Block)'")
    return tuple(out)


def distribution_of(text: str, shape: tuple[int, ...], ranks: int, ghosts: int = 0) -> Distribution:
    """The distribution a pattern such as ``"(Block, Block, *)"`` names on *ranks* ranks.

    ``"block"`` or ``"cyclic"`` alone applies to every dimension; the split dimensions
    get a balanced grid (``MPI_Dims_create``); *ghosts* layers go around block dimensions.

    Raises
    ------
    ValueError
        The pattern has another number of dimensions than *shape*.
    """
    words = parse_pattern(text)
    if len(words) == 1 and len(shape) > 1:
        words = words * len(shape)
    if len(words) != len(shape):
        raise ValueError(f"access pattern {text!r} has {len(words)} dimensions; the shape {shape} has {len(shape)}")
    split = [d for d, w in enumerate(words) if w != "*"] or ([0] if ranks > 1 else [])
    grid = [1] * len(shape)
    for d, g in zip(split, default_grid(ranks, len(split)) if split else ()):
        grid[d] = g
    if all(w in ("block", "*") for w in words):
        return Block(grid=grid, ghosts=[ghosts if w == "block" else 0 for w in words])
    return BlockCyclic(grid=grid, blocks=[1 if w == "cyclic" else max(1, math.ceil(n / g))
                                          for w, n, g in zip(words, shape, grid)])
