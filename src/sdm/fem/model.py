"""The finite element data model of PXI (PDS/PIO paper, section "PXI"), after Exodus II and Nemesis I.

These classes hold one rank's part of a model in memory, as the application has it; how
they are stored in SDM (map arrays, ranked sections, topology and state segments) is
:mod:`sdm.fem.store`, and Exodus II files are :mod:`sdm.fem.exodus`.

Conventions (as Exodus II): node and element ids are global, 1-based, unique; a block's
connectivity lists the *global node ids* of each element's nodes in the Exodus node
order of its element type; a side set names ``(element id, local side number)`` pairs,
sides numbered from 1 as the Exodus II specification numbers them for each type.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["ELEMENT_TYPES", "Nodes", "Block", "NodeSet", "SideSet", "Variables", "Decomposition", "Model"]

#: Element types and their nodes per element (Exodus II names, upper case).
ELEMENT_TYPES: dict[str, int] = {"BAR2": 2, "TRI3": 3, "QUAD4": 4, "TETRA4": 4, "HEX8": 8, "WEDGE6": 6}


@dataclass
class Nodes:
    """Nodes: ``ids`` (global, 1-based, shape (n,)) and ``coords`` (shape (n, dim), dim 1-3)."""

    ids: np.ndarray
    coords: np.ndarray


@dataclass
class Block:
    """An element block: one element type, its elements' ids and connectivity (global node ids)."""

    id: int
    name: str
    type: str
    element_ids: np.ndarray  # (ne,)
    connectivity: np.ndarray  # (ne, nodes per element)


@dataclass
class NodeSet:
    id: int
    name: str
    node_ids: np.ndarray
    factors: np.ndarray | None = None  # distribution factors, one per node, optional


@dataclass
class SideSet:
    id: int
    name: str
    element_ids: np.ndarray
    sides: np.ndarray  # local side numbers (1-based)
    factors: np.ndarray | None = None  # one per node of each side, optional (flattened)


@dataclass
class Variables:
    """Result variable names: nodal, element (for every block) and global."""

    nodal: list[str] = field(default_factory=list)
    element: list[str] = field(default_factory=list)
    glob: list[str] = field(default_factory=list)


@dataclass
class Decomposition:
    """Nemesis-like maps of one rank: which of its nodes and elements are internal or on the border,
    and, per neighbour rank, the node ids shared with it (communication maps)."""

    rank: int
    nranks: int
    internal_nodes: np.ndarray
    border_nodes: np.ndarray
    internal_elements: np.ndarray
    border_elements: np.ndarray
    node_cmaps: dict[int, np.ndarray] = field(default_factory=dict)


@dataclass
class Model:
    """One rank's part of a finite element model (the whole model in one process).

    Attributes
    ----------
    title : str
    nodes : Nodes
        The nodes this rank owns (and may use); ``ghost_nodes`` marks those it does not own.
    blocks : list of Block
        Element blocks with this rank's elements (every rank lists every block, possibly empty).
    node_sets, side_sets : list
        This rank's part of each set (every rank lists every set).
    variables : Variables
    qa : list of (code, version, date, time)
    info : list of str
    decomposition : Decomposition or None
    """

    title: str
    nodes: Nodes
    blocks: list[Block]
    node_sets: list[NodeSet] = field(default_factory=list)
    side_sets: list[SideSet] = field(default_factory=list)
    variables: Variables = field(default_factory=Variables)
    qa: list[tuple[str, str, str, str]] = field(default_factory=list)
    info: list[str] = field(default_factory=list)
    ghost_nodes: np.ndarray | None = None  # bool per node: True where this rank does not own it
    decomposition: Decomposition | None = None

    @property
    def dim(self) -> int:
        return int(self.nodes.coords.shape[1])
