"""A finite element model stored in SDM (PXI over PDS): the mesh as topology, results as state.

Every function here is collective over the session's communicator and raises the same
:class:`sdm.SDMError` on every rank when any rank's input is wrong, before anything is
written.

Stored layout (a model named ``name``, default ``"mesh"``)
----------------------------------------------------------
Group ``name`` (kind ``"topology"``, step 0): the mesh.

=========================  ==============  ====================================================
dataset                    shape, dtype    contents
=========================  ==============  ====================================================
``node_ids``               (N,) i8         global node ids, sorted (global order = by id)
``coords``                 (N, dim) f8     coordinates, rows in ``node_ids`` order
``b<k>.ids``               (E_k,) i8       element ids of the k-th block (0-based), sorted
``b<k>.conn``              (E_k, npe) i8   its connectivity, as global node ids
``ns<k>.nodes``            ranked i8       node set k: each writer rank's entries as given
``ns<k>.factors``          ranked f8       its distribution factors (no rows without)
``ss<k>.elements``         ranked i8       side set k: element ids
``ss<k>.sides``            ranked i8       local side numbers (1-based)
``ss<k>.nfactors``         ranked i8       distribution factors of each side (nodes of the side)
``ss<k>.factors``          ranked f8       the factors, flattened
``dec.internal_nodes``     ranked i8       the writer's :class:`~sdm.fem.model.Decomposition`,
``dec.border_nodes``                       per writer rank (rows of rank r are rank r's map)
``dec.internal_elements``
``dec.border_elements``
``dec.cmap_ranks``         ranked i8       neighbour of each communication map
``dec.cmap_counts``        ranked i8       its node count
``dec.cmap_nodes``         ranked i8       its node ids, maps one after the other
=========================  ==============  ====================================================

The map datasets are written through :class:`sdm.MapArray` views: each rank gives the
nodes and elements it owns (any order; ghost nodes marked by ``Model.ghost_nodes``) and
the files hold them in global order, sorted by global id, so any tool reads them with
numpy. Sets are *ranked sections* (:class:`sdm.Ranked`): a set is what the ranks list,
with no owner per entry (a node on a border may be listed by two ranks); a reader gets
them back in global order, sorted by id (by ``(element, side)`` for side sets), each
entry once (the first writer rank's factors kept). The decomposition is ranked too, so
the maps of writer rank ``r`` are the rows rank ``r`` wrote.

Infos of the group (:meth:`sdm.Group.set_info`): ``title``, ``block_ids``,
``block_names``, ``block_types``, ``node_set_ids``/``names``/``factors`` (bool: has
factors), the same for ``side_set_*``, ``qa`` (``(n, 4)`` strings), ``info``,
``nodal_variables``, ``element_variables``, ``global_variables`` and ``layout``
(``[format, dim, writer ranks, has decomposition, node ids dense]``, where dense means
the ids are ``1..N``) and ``block_dense`` (per block: its ids are consecutive).

Group ``name + ".results"`` (kind ``"state"``), one dump per :func:`write_results` step:
``time`` (1,) f8, ``glob`` (G,) f8 (the global variables in declared order, when there
are any), ``nod.<var>`` (N,) f8, ``elem.<var>.b<k>`` (E_k,) f8.

Global ids: :func:`write_mesh` gathers the owned ids of every node and element on every
rank (8 bytes per node and element, once) to sort them, find duplicates and check that
connectivity, ghosts and sets name existing ids; readers read the id datasets whole only
when ids are not consecutive.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np
from mpi4py import MPI

from .._collective import agree, capture
from ..errors import (
    CollectiveMismatchError,
    DistributionError,
    InvalidArgumentError,
    LocalArrayError,
)
from ..group import Dataset, Group
from ..layout.agreement import differences
from ..layout.maparray import MapArray
from ..layout.ranked import Ranked
from .model import ELEMENT_TYPES, Block, Decomposition, Model, Nodes, NodeSet, SideSet, Variables

if TYPE_CHECKING:
    from ..session import Session

__all__ = ["SIDE_NODES", "StoredMesh", "Results", "write_mesh", "write_results", "read_mesh", "read_results",
           "read_decomposition"]

FORMAT = 1
_SHOW = 5  # example ids named in an error message

#: Nodes on each local side (1-based side = index + 1) of each element type: the number of
#: distribution factors a side-set entry carries (Exodus II side numbering).
SIDE_NODES: dict[str, tuple[int, ...]] = {
    "BAR2": (1, 1), "TRI3": (2, 2, 2), "QUAD4": (2, 2, 2, 2), "TETRA4": (3, 3, 3, 3),
    "HEX8": (4, 4, 4, 4, 4, 4), "WEDGE6": (4, 4, 4, 3, 3),
}

_DEC = ("internal_nodes", "border_nodes", "internal_elements", "border_elements")


@dataclass
class StoredMesh:
    """What :func:`write_mesh` made: the groups and the views :func:`write_results` writes through.

    Attributes
    ----------
    name : str
    mesh, results : Group
        The topology group and the state group.
    model : Model
        The model written (this rank's part).
    node_map : MapArray
        This rank's nodes (ghosts marked) in global rows.
    block_maps : list of MapArray
        This rank's elements of each block in global rows.
    """

    name: str
    mesh: Group
    results: Group
    model: Model
    node_map: MapArray
    block_maps: list[MapArray]
    owned: np.ndarray = field(repr=False)  # positions of the owned nodes in model.nodes


@dataclass
class Results:
    """Variables of one step on a rank's nodes and elements (:func:`read_results`).

    Attributes
    ----------
    step : int
    time : float
    nodal : dict of str to numpy.ndarray
        One value per node of the model (ghosts included), in the model's node order.
    element : dict of str to dict of int to numpy.ndarray
        Per variable, per block id, one value per element of the block.
    glob : dict of str to float
    """

    step: int
    time: float
    nodal: dict[str, np.ndarray] = field(default_factory=dict)
    element: dict[str, dict[int, np.ndarray]] = field(default_factory=dict)
    glob: dict[str, float] = field(default_factory=dict)


_STORED: "weakref.WeakKeyDictionary[Any, list[StoredMesh]]" = weakref.WeakKeyDictionary()


# ----------------------------------------------------------------------------- checks


def _ids(value: Any, what: str) -> np.ndarray:
    """A 1-D integer array of ids >= 1 (as int64)."""
    arr = np.asarray(value)
    if arr.ndim != 1 or not (arr.size == 0 or np.issubdtype(arr.dtype, np.integer)):
        raise LocalArrayError(f"{what} must be a 1-D array of integer ids, got {arr.dtype} of shape {arr.shape}")
    arr = arr.astype(np.int64, copy=False)
    if arr.size and arr.min() < 1:
        raise LocalArrayError(f"{what} must be ids >= 1 (Exodus ids are 1-based), got {int(arr.min())}")
    return arr


def _floats(value: Any, shape: tuple[int, ...], what: str) -> np.ndarray:
    arr = np.asarray(value)
    if not (arr.size == 0 or np.issubdtype(arr.dtype, np.number)) or arr.shape != shape:
        raise LocalArrayError(f"{what} must be numbers of shape {shape}, got {arr.dtype} of shape {arr.shape}")
    return np.ascontiguousarray(arr, dtype=np.float64)


def _names(items: Sequence[str], what: str) -> list[str]:
    out = [str(x) for x in items]
    if len(set(out)) != len(out):
        raise InvalidArgumentError(f"{what} lists a name twice: {out}")
    return out


def _strings(values: Sequence[str]) -> np.ndarray:
    """Strings as a fixed-width unicode array (at least ``<U1``, also when empty)."""
    width = max([1] + [len(v) for v in values])
    return np.array(list(values), dtype=f"<U{width}")


@dataclass
class _Checked:
    """One rank's model, checked locally, arrays normalised."""

    node_ids: np.ndarray
    coords: np.ndarray
    ghost: np.ndarray
    blocks: list[tuple[np.ndarray, np.ndarray]]  # (element ids, connectivity)
    node_sets: list[tuple[np.ndarray, np.ndarray]]  # (node ids, factors or empty)
    side_sets: list[tuple[np.ndarray, np.ndarray, np.ndarray]]  # (elements, sides, factors or empty)
    schema: tuple


def _check_model(model: Any, rank: int, size: int) -> _Checked:
    """Check one rank's model alone (types, shapes, element types); its schema for the collective comparison."""
    if not isinstance(model, Model):
        raise InvalidArgumentError(f"write_mesh needs a sdm.fem.model.Model, got {type(model).__name__}")
    ids = _ids(model.nodes.ids, "nodes.ids")
    coords = np.asarray(model.nodes.coords)
    if coords.ndim != 2 or not 1 <= coords.shape[1] <= 3 or coords.shape[0] != ids.size \
            or not (coords.size == 0 or np.issubdtype(coords.dtype, np.number)):
        raise LocalArrayError(f"nodes.coords must be numbers of shape ({ids.size}, dim) with dim 1 to 3, "
                              f"got {coords.dtype} of shape {coords.shape}")
    if model.ghost_nodes is None:
        ghost = np.zeros(ids.size, dtype=bool)
    else:
        ghost = np.asarray(model.ghost_nodes)
        if ghost.shape != ids.shape or ghost.dtype != np.bool_:
            raise LocalArrayError(f"ghost_nodes must be booleans of shape {ids.shape}, got {ghost.dtype} of "
                                  f"shape {ghost.shape}")
    blocks = []
    for b in model.blocks:
        if b.type not in ELEMENT_TYPES:
            raise InvalidArgumentError(f"block {b.id}: element type {b.type!r} is not one of "
                                       f"{', '.join(ELEMENT_TYPES)}")
        eids = _ids(b.element_ids, f"block {b.id}: element_ids")
        conn = np.asarray(b.connectivity)
        npe = ELEMENT_TYPES[b.type]
        if conn.shape != (eids.size, npe) or not (conn.size == 0 or np.issubdtype(conn.dtype, np.integer)):
            raise LocalArrayError(f"block {b.id}: connectivity of {b.type} must be integers of shape "
                                  f"({eids.size}, {npe}), got {conn.dtype} of shape {conn.shape}")
        blocks.append((eids, np.ascontiguousarray(conn, dtype=np.int64)))
    node_sets = []
    for ns in model.node_sets:
        nodes = _ids(ns.node_ids, f"node set {ns.id}: node_ids")
        factors = np.zeros(0) if ns.factors is None else _floats(ns.factors, nodes.shape,
                                                                 f"node set {ns.id}: factors")
        node_sets.append((nodes, factors))
    side_sets = []
    for ss in model.side_sets:
        elems = _ids(ss.element_ids, f"side set {ss.id}: element_ids")
        sides = _ids(ss.sides, f"side set {ss.id}: sides")
        if sides.shape != elems.shape:
            raise LocalArrayError(f"side set {ss.id}: {sides.size} sides for {elems.size} elements")
        factors = np.zeros(0) if ss.factors is None else np.ascontiguousarray(ss.factors, dtype=np.float64).ravel()
        side_sets.append((elems, sides, factors))
    dec = model.decomposition
    if dec is not None and (dec.rank != rank or dec.nranks != size):
        raise InvalidArgumentError(f"the decomposition is of rank {dec.rank} of {dec.nranks}; this is rank {rank} "
                                   f"of {size}")
    v = model.variables
    for what, names in (("nodal", v.nodal), ("element", v.element), ("global", v.glob)):
        _names(names, f"{what} variables")
    schema = (
        str(model.title), int(coords.shape[1]),
        tuple((int(b.id), str(b.name), str(b.type)) for b in model.blocks),
        tuple((int(s.id), str(s.name), s.factors is not None) for s in model.node_sets),
        tuple((int(s.id), str(s.name), s.factors is not None) for s in model.side_sets),
        (tuple(map(str, v.nodal)), tuple(map(str, v.element)), tuple(map(str, v.glob))),
        tuple(tuple(map(str, q)) for q in model.qa), tuple(map(str, model.info)), dec is not None,
    )
    for what, items in (("block", schema[2]), ("node set", schema[3]), ("side set", schema[4])):
        seen = [i[0] for i in items]
        if len(set(seen)) != len(seen):
            raise InvalidArgumentError(f"{what} ids must be unique, got {seen}")
    if any(len(q) != 4 for q in schema[6]):
        raise InvalidArgumentError("QA records are (code, version, date, time): four strings each")
    return _Checked(ids, np.ascontiguousarray(coords, dtype=np.float64), ghost, blocks, node_sets, side_sets, schema)


_SCHEMA_PARTS = ("title", "dimension", "blocks (id, name, type)", "node sets (id, name, has factors)",
                 "side sets (id, name, has factors)", "variables", "QA records", "info records",
                 "presence of a decomposition")


def _same_schema(schemas: list[Any]) -> tuple:
    """The schema every rank gave, or CollectiveMismatchError naming the first part that differs."""
    first = schemas[0]
    for r, other in enumerate(schemas):
        if other != first:
            part = next(i for i in range(len(first)) if first[i] != other[i])
            raise CollectiveMismatchError(
                f"ranks describe different models: {_SCHEMA_PARTS[part]} of rank 0 is {first[part]!r}, of rank {r} "
                f"{other[part]!r}; every rank lists the same blocks, sets, variables and records")
    return tuple(first)


def _gather_sorted(comm: MPI.Comm, ids: np.ndarray) -> np.ndarray:
    """Every rank's *ids*, concatenated and sorted, on every rank (one Allgatherv)."""
    counts = np.array(comm.allgather(int(ids.size)), dtype=np.int64)
    out = np.empty(int(counts.sum()), dtype=np.int64)
    displs = np.concatenate([[0], np.cumsum(counts)[:-1]])
    comm.Allgatherv(np.ascontiguousarray(ids, dtype=np.int64), [out, counts, displs, MPI.INT64_T])
    out.sort(kind="stable")
    return out


def _duplicates(sorted_ids: np.ndarray) -> np.ndarray:
    return np.unique(sorted_ids[1:][np.diff(sorted_ids) == 0])


def _missing(sorted_ids: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """The values of *ids* not in *sorted_ids* (unique, sorted)."""
    if sorted_ids.size == 0:
        return np.unique(ids)
    pos = np.minimum(np.searchsorted(sorted_ids, ids), sorted_ids.size - 1)
    return np.unique(ids[sorted_ids[pos] != ids])


def _some(values: np.ndarray) -> str:
    return f"{values[:_SHOW].tolist()}" + (f" ({values.size} in all)" if values.size > _SHOW else "")


def _global_ids(comm: MPI.Comm, c: _Checked, rank: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """The sorted global node ids and each block's sorted element ids, checked (collective)."""
    all_nodes = _gather_sorted(comm, c.node_ids[~c.ghost])
    all_blocks = [_gather_sorted(comm, eids) for eids, _ in c.blocks]

    def check() -> None:
        dup = _duplicates(all_nodes)
        if dup.size:
            raise DistributionError(f"node ids owned more than once: {_some(dup)}; each node has one owner, "
                                    "mark the other copies in ghost_nodes")
        every = np.sort(np.concatenate(all_blocks)) if all_blocks else np.zeros(0, np.int64)
        dup = _duplicates(every)
        if dup.size:
            raise DistributionError(f"element ids given more than once: {_some(dup)}; an element belongs to one "
                                    "block of one rank")
        bad = _missing(all_nodes, c.node_ids[c.ghost])
        if bad.size:
            raise DistributionError(f"ghost node ids that no rank owns: {_some(bad)}")
        for (eids, conn), schema in zip(c.blocks, _block_schema(c)):
            bad = _missing(all_nodes, conn.ravel())
            if bad.size:
                raise DistributionError(f"connectivity of block {schema[0]} names node ids no rank owns: {_some(bad)}")
        for (nodes, _), (sid, _, _) in zip(c.node_sets, c.schema[3]):
            bad = _missing(all_nodes, nodes)
            if bad.size:
                raise DistributionError(f"node set {sid} names node ids no rank owns: {_some(bad)}")

    agree(comm, capture(check, rank=rank)[1])
    return all_nodes, all_blocks


def _block_schema(c: _Checked) -> tuple:
    return tuple(c.schema[2])


def _side_factor_counts(c: _Checked, rank: int) -> list[np.ndarray]:
    """Per side set, the number of distribution factors of each entry (nodes of its side), checked."""
    types = np.concatenate([np.full(e.size, k) for k, (e, _) in enumerate(c.blocks)]) if c.blocks else np.zeros(0, int)
    eids = np.concatenate([e for e, _ in c.blocks]) if c.blocks else np.zeros(0, np.int64)
    order = np.argsort(eids)
    eids, types = eids[order], types[order]
    out = []
    for (elems, sides, factors), (sid, _, has) in zip(c.side_sets, c.schema[4]):
        bad = _missing(eids, elems)
        if bad.size:
            raise DistributionError(f"side set {sid} names element ids this rank does not have: {_some(bad)}; "
                                    "a side belongs to the rank of its element")
        kinds = types[np.searchsorted(eids, elems)] if elems.size else np.zeros(0, int)
        counts = np.zeros(elems.size, dtype=np.int64)
        for k, (_, _, etype) in enumerate(c.schema[2]):
            table = np.array(SIDE_NODES[etype])
            here = kinds == k
            wrong = here & ((sides < 1) | (sides > table.size))
            if wrong.any():
                raise LocalArrayError(f"side set {sid}: a {etype} element has sides 1 to {table.size}, got "
                                      f"{_some(np.unique(sides[wrong]))}")
            counts[here] = table[sides[here] - 1]
        if has and factors.size != int(counts.sum()):
            raise LocalArrayError(f"side set {sid}: {factors.size} distribution factors, expected {int(counts.sum())}"
                                  " (one per node of each side)")
        out.append(counts)
    return out


# ----------------------------------------------------------------------------- write


def _node_datasets(dim: int, nn: int, nblocks: Sequence[tuple[int, int]]) -> list[Dataset]:
    out = [Dataset("node_ids", shape=(nn,), dtype="i8"), Dataset("coords", shape=(nn, dim), dtype="f8")]
    for k, (ne, npe) in enumerate(nblocks):
        out += [Dataset(f"b{k}.ids", shape=(ne,), dtype="i8"), Dataset(f"b{k}.conn", shape=(ne, npe), dtype="i8")]
    return out


def _ranked_names(schema: tuple) -> list[tuple[str, str]]:
    """(name, dtype) of every ranked dataset of the mesh group."""
    out = []
    for k in range(len(schema[3])):
        out += [(f"ns{k}.nodes", "i8"), (f"ns{k}.factors", "f8")]
    for k in range(len(schema[4])):
        out += [(f"ss{k}.elements", "i8"), (f"ss{k}.sides", "i8"), (f"ss{k}.nfactors", "i8"),
                (f"ss{k}.factors", "f8")]
    if schema[8]:
        out += [(f"dec.{n}", "i8") for n in (*_DEC, "cmap_ranks", "cmap_counts", "cmap_nodes")]
    return out


def _ranked_rows(c: _Checked, nfactors: list[np.ndarray], dec: Decomposition | None) -> dict[str, np.ndarray]:
    rows: dict[str, np.ndarray] = {}
    for k, (nodes, factors) in enumerate(c.node_sets):
        rows[f"ns{k}.nodes"], rows[f"ns{k}.factors"] = nodes, factors
    for k, (elems, sides, factors) in enumerate(c.side_sets):
        rows.update({f"ss{k}.elements": elems, f"ss{k}.sides": sides, f"ss{k}.nfactors": nfactors[k],
                     f"ss{k}.factors": factors})
    if dec is not None:
        for n in _DEC:
            rows[f"dec.{n}"] = _ids(getattr(dec, n), f"decomposition.{n}")
        neighbours = sorted(int(r) for r in dec.node_cmaps)
        maps = [_ids(dec.node_cmaps[r], f"decomposition.node_cmaps[{r}]") for r in neighbours]
        rows["dec.cmap_ranks"] = np.array(neighbours, dtype=np.int64)
        rows["dec.cmap_counts"] = np.array([m.size for m in maps], dtype=np.int64)
        rows["dec.cmap_nodes"] = np.concatenate(maps) if maps else np.zeros(0, np.int64)
    return {n: np.ascontiguousarray(a) for n, a in rows.items()}


def write_mesh(session: "Session", model: Model, name: str = "mesh", *, level: int | None = None) -> StoredMesh:
    """Store the topology of a model and define its results group (collective).

    Parameters
    ----------
    session : Session
        A writing session.
    model : Model
        This rank's part: the nodes it owns (any order) plus ghosts marked in
        ``ghost_nodes``, its elements of every block, its entries of every set, and
        optionally its :class:`~sdm.fem.model.Decomposition`. Every rank lists the same
        blocks, sets, variables, QA and info records.
    name : str
        The model's name: the mesh group; the results group is ``name + ".results"``.
    level : {1, 2, 3}, optional
        File organization level of both groups (default SDM's).

    Returns
    -------
    StoredMesh
        Pass it (or *model*) to :func:`write_results`.

    Raises
    ------
    InvalidArgumentError
        An element type not in :data:`~sdm.fem.model.ELEMENT_TYPES`, repeated ids of
        blocks or sets, a decomposition of another rank.
    LocalArrayError
        Arrays of the wrong shape or dtype.
    DistributionError
        A node id owned twice, an element id given twice, connectivity, ghosts or node
        sets naming a node no rank owns, a side set naming an element the rank lacks.
    CollectiveMismatchError
        Ranks that describe different blocks, sets, variables or records.
    """
    comm, rank, size = session.comm, session.rank, session.size
    c, failure = capture(_check_model, model, rank, size, rank=rank)
    schemas = agree(comm, failure, c.schema if c else None)
    _, failure = capture(_same_schema, schemas, rank=rank)
    agree(comm, failure)
    assert c is not None
    schema = c.schema
    all_nodes, all_blocks = _global_ids(comm, c, rank)
    nfactors, failure = capture(_side_factor_counts, c, rank, rank=rank)
    agree(comm, failure)
    assert nfactors is not None
    rows, failure = capture(_ranked_rows, c, nfactors, model.decomposition, rank=rank)
    agree(comm, failure)
    assert rows is not None

    dim, nn = schema[1], int(all_nodes.size)
    shapes = [(int(e.size), ELEMENT_TYPES[t]) for e, (_, _, t) in zip(all_blocks, schema[2])]
    ranked = _ranked_names(schema)
    mesh = session.make_group(name, [*_node_datasets(dim, nn, shapes), *(Dataset(n, shape=(), dtype=d)
                                                                          for n, d in ranked)],
                              kind="topology", level=level)
    node_map = MapArray(np.searchsorted(all_nodes, c.node_ids), ghost=c.ghost)
    block_maps = [MapArray(np.searchsorted(every, eids)) for every, (eids, _) in zip(all_blocks, c.blocks)]
    mesh.data_view(node_map, ["node_ids", "coords"])
    for k, m in enumerate(block_maps):
        mesh.data_view(m, [f"b{k}.ids", f"b{k}.conn"])
    mesh.write_step(0, {"node_ids": c.node_ids, "coords": c.coords,
                        **{f"b{k}.{p}": a for k, (eids, conn) in enumerate(c.blocks)
                           for p, a in (("ids", eids), ("conn", conn))}})
    if ranked:
        mesh.data_view(Ranked(), [n for n, _ in ranked])
        mesh.write_step(0, rows)
    _set_infos(mesh, schema, size, nn, all_nodes, all_blocks)

    v = schema[5]
    res = [Dataset("time", shape=(1,), dtype="f8")]
    if v[2]:
        res.append(Dataset("glob", shape=(len(v[2]),), dtype="f8"))
    res += [Dataset(f"nod.{n}", shape=(nn,), dtype="f8") for n in v[0]]
    res += [Dataset(f"elem.{n}.b{k}", shape=(ne,), dtype="f8") for n in v[1] for k, (ne, _) in enumerate(shapes)]
    results = session.make_group(name + ".results", res, kind="state", level=level)
    results.data_view(_root_map(rank, 1), ["time"])
    if v[2]:
        results.data_view(_root_map(rank, len(v[2])), ["glob"])
    if v[0]:
        results.data_view(node_map, [f"nod.{n}" for n in v[0]])
    for k, m in enumerate(block_maps):
        if v[1]:
            results.data_view(m, [f"elem.{n}.b{k}" for n in v[1]])
    stored = StoredMesh(name, mesh, results, model, node_map, block_maps, np.flatnonzero(~c.ghost))
    _STORED.setdefault(session, []).append(stored)
    return stored


def _root_map(rank: int, n: int) -> MapArray:
    """Rows ``0 .. n-1`` owned by rank 0 (values every rank knows: time, global variables)."""
    return MapArray(np.arange(n) if rank == 0 else np.zeros(0, np.int64))


def _consecutive(ids: np.ndarray, first: int | None = None) -> bool:
    start = int(ids[0]) if first is None and ids.size else (first or 1)
    return bool(ids.size == 0 or (ids[0] == start and ids[-1] == start + ids.size - 1))


def _set_infos(g: Group, schema: tuple, size: int, nn: int, all_nodes: np.ndarray,
               all_blocks: list[np.ndarray]) -> None:
    blocks, nsets, ssets, v = schema[2], schema[3], schema[4], schema[5]
    infos: dict[str, np.ndarray] = {
        "layout": np.array([FORMAT, schema[1], size, int(schema[8]), int(_consecutive(all_nodes, 1))], dtype=np.int64),
        "title": _strings([schema[0]]),
        "block_ids": np.array([b[0] for b in blocks], dtype=np.int64),
        "block_names": _strings([b[1] for b in blocks]),
        "block_types": _strings([b[2] for b in blocks]),
        "block_dense": np.array([_consecutive(e) for e in all_blocks], dtype=bool),
        "qa": _strings([x for q in schema[6] for x in q]).reshape(len(schema[6]), 4),
        "info": _strings(list(schema[7])),
        "nodal_variables": _strings(list(v[0])),
        "element_variables": _strings(list(v[1])),
        "global_variables": _strings(list(v[2])),
    }
    for prefix, sets in (("node_set", nsets), ("side_set", ssets)):
        infos[f"{prefix}_ids"] = np.array([s[0] for s in sets], dtype=np.int64)
        infos[f"{prefix}_names"] = _strings([s[1] for s in sets])
        infos[f"{prefix}_factors"] = np.array([s[2] for s in sets], dtype=bool)
    for key, value in infos.items():
        g.set_info(key, value)


def _stored_of(session: "Session", target: Any) -> StoredMesh:
    if isinstance(target, StoredMesh):
        return target
    for stored in _STORED.get(session, []):
        if stored.model is target:
            return stored
    raise InvalidArgumentError("write_results needs the StoredMesh write_mesh returned, or the Model it wrote in "
                               f"this session; got {type(target).__name__}")


def _local_values(value: Any, n_local: int, owned: np.ndarray, what: str) -> np.ndarray:
    """One value per local node (ghosts included) or per owned node, as a local array."""
    arr = np.asarray(value)
    if arr.ndim == 1 and np.issubdtype(arr.dtype, np.number) and arr.size in (n_local, owned.size):
        if arr.size == n_local:
            return np.ascontiguousarray(arr, dtype=np.float64)
        out = np.zeros(n_local, dtype=np.float64)
        out[owned] = arr
        return out
    raise LocalArrayError(f"{what} needs one number per node of this rank ({n_local}, ghosts included) or per owned "
                          f"node ({owned.size}), got {arr.dtype} of shape {arr.shape}")


def write_results(session: "Session", target: StoredMesh | Model, step: int, time: float, *,
                  nodal: Mapping[str, Any] | None = None, element: Mapping[str, Mapping[int, Any]] | None = None,
                  glob: Mapping[str, float] | None = None) -> None:
    """Write the variables of one time step as one dump of the results group (collective).

    Parameters
    ----------
    session : Session
    target : StoredMesh or Model
        What :func:`write_mesh` returned, or the model it wrote.
    step : int
        Time step (>= 0; steps may be sparse: every k-th step).
    time : float
        The time value (the same on every rank).
    nodal : mapping of str to array
        Every declared nodal variable: one value per node of the model (ghosts included,
        their values ignored) or per owned node (in the model's order of owned nodes).
    element : mapping of str to mapping of int to array
        Every declared element variable, per block id: one value per element of the block.
    glob : mapping of str to float
        Every declared global variable (the same on every rank).

    Raises
    ------
    InvalidArgumentError
        Variables missing or not declared.
    LocalArrayError
        An array of the wrong length.
    CollectiveMismatchError
        Time or global values that differ between ranks.
    """
    rank = session.rank

    def prepare() -> tuple[StoredMesh, dict[str, np.ndarray], tuple[float, ...]]:
        stored = _stored_of(session, target)
        m = stored.model
        v = m.variables
        given = {"nodal": dict(nodal or {}), "element": dict(element or {}), "global": dict(glob or {})}
        for what, declared in (("nodal", v.nodal), ("element", v.element), ("global", v.glob)):
            if set(given[what]) != set(declared):
                raise InvalidArgumentError(f"step {step}: {what} variables {sorted(given[what])} given, "
                                           f"{sorted(declared)} declared; give every declared variable")
        arrays: dict[str, np.ndarray] = {}
        n_local = int(np.asarray(m.nodes.ids).size)
        for n in v.nodal:
            arrays[f"nod.{n}"] = _local_values(given["nodal"][n], n_local, stored.owned, f"nodal variable {n!r}")
        for n in v.element:
            per = given["element"][n]
            if set(per) != {b.id for b in m.blocks}:
                raise InvalidArgumentError(f"element variable {n!r}: blocks {sorted(per)} given, "
                                           f"{sorted(b.id for b in m.blocks)} expected")
            for k, b in enumerate(m.blocks):
                ne = int(np.asarray(b.element_ids).size)
                arrays[f"elem.{n}.b{k}"] = _floats(per[b.id], (ne,), f"element variable {n!r} of block {b.id}")
        values = (float(time), *(float(given["global"][n]) for n in v.glob))
        return stored, arrays, values

    prepared, failure = capture(prepare, rank=rank)
    shared = agree(session.comm, failure, prepared[2] if prepared else None)
    if any(s != shared[0] for s in shared):
        assert prepared is not None  # no rank failed (agree raised otherwise)
        names = ("time", *prepared[0].model.variables.glob)
        raise CollectiveMismatchError(f"step {step}: ranks give different time and global values: "
                                      f"{differences([list(zip(names, s or ())) for s in shared])}; they are one "
                                      "value for the whole model")
    assert prepared is not None
    stored, arrays, values = prepared
    arrays["time"] = np.array(values[:1] if rank == 0 else [], dtype=np.float64)
    if len(values) > 1:
        arrays["glob"] = np.array(values[1:] if rank == 0 else [], dtype=np.float64)
    stored.results.write_step(step, arrays)


# ----------------------------------------------------------------------------- read


def _info_strings(g: Group, key: str) -> list[str]:
    return [str(x) for x in g.info(key).tolist()]


def _balanced(n: int, size: int, rank: int) -> tuple[int, int]:
    return n * rank // size, n * (rank + 1) // size


def _whole(g: Group, name: str) -> np.ndarray:
    """The whole dataset on every rank (a box read)."""
    return g.read(name, 0, box=(...,), verify=False)


class _Rows:
    """Global rows of ids: ``id - first`` for consecutive ids, else by search in the stored ids (read once)."""

    def __init__(self, g: Group, dataset: str, dense: bool, first: int = 1) -> None:
        self.g, self.dataset, self.dense, self.first = g, dataset, dense, first
        self.ids: np.ndarray | None = None

    def rows(self, ids: np.ndarray) -> np.ndarray:
        if self.dense:
            return ids - self.first
        if self.ids is None:
            self.ids = _whole(self.g, self.dataset)
        return np.searchsorted(self.ids, ids)

    def id_of(self, rows: np.ndarray) -> np.ndarray:
        if self.dense:
            return rows + self.first
        if self.ids is None:
            self.ids = _whole(self.g, self.dataset)
        return self.ids[rows]


@dataclass
class _Layout:
    dim: int
    writers: int
    has_dec: bool
    nodes: _Rows
    nn: int


def _layout(g: Group) -> _Layout:
    fmt, dim, writers, has_dec, dense = (int(x) for x in g.info("layout"))
    if fmt != FORMAT:
        raise InvalidArgumentError(f"group {g.name!r}: stored model format {fmt}, this SDM reads {FORMAT}")
    return _Layout(dim, writers, bool(has_dec), _Rows(g, "node_ids", bool(dense)), int(g.dataset("node_ids").shape[0]))


def _read_map(g: Group, names: Sequence[str], rows: np.ndarray, step: int) -> list[np.ndarray]:
    """Rows *rows* (any, overlapping between ranks) of datasets *names* at *step*."""
    g.data_view(MapArray(rows).all_rows(), list(names))
    return [g.read(n, step, verify=False) for n in names]


def _all_ranked(g: Group, name: str, writers: int) -> np.ndarray:
    return g.read(name, 0, ranks=(0, writers), verify=False)


def _first_each(keys: np.ndarray) -> np.ndarray:
    """Indices that sort the rows of *keys* (n, k) and keep the first of equal rows (stable)."""
    if keys.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort(keys.T[::-1])
    k = keys[order]
    keep = np.concatenate([[True], (np.diff(k, axis=0) != 0).any(axis=1)])
    return order[keep]


def read_mesh(session: "Session", name: str = "mesh", share: str = "balanced") -> Model:
    """Read a stored model: this rank's share of it, on any number of ranks (collective).

    Parameters
    ----------
    session : Session
    name : str
        The model's name given to :func:`write_mesh`.
    share : {"balanced", "whole"}
        ``"balanced"``: each rank gets a contiguous balanced share of each block's
        elements (in global order) and the nodes they use; the nodes are also shared
        out in balanced ranges of the global order, each owned by one rank: a node a
        rank uses but does not own is a ghost (``Model.ghost_nodes``), so the model can
        be written again as it is. With one process: the whole model (many-to-one).
        ``"whole"``: every rank reads the whole model.

    Returns
    -------
    Model
        Global ids kept; nodes in global order; this rank's entries of each set (node
        set entries of its owned nodes, side set entries of its elements), in global
        order, each once. No decomposition (see :func:`read_decomposition`).

    Raises
    ------
    GroupNotFoundError, InvalidArgumentError
    """
    size, rank = session.size, session.rank
    if share not in ("balanced", "whole"):
        raise InvalidArgumentError(f"share must be 'balanced' or 'whole', got {share!r}")
    if share == "whole":
        size, rank = 1, 0
    g = session.group(name)
    lay = _layout(g)
    ids, names, types = g.info("block_ids"), _info_strings(g, "block_names"), _info_strings(g, "block_types")
    blocks = []
    for k in range(ids.size):
        lo, hi = _balanced(g.dataset(f"b{k}.ids").shape[0], size, rank)
        eids = g.read(f"b{k}.ids", 0, box=(slice(lo, hi),), verify=False)
        conn = g.read(f"b{k}.conn", 0, box=(slice(lo, hi), ...), verify=False)
        blocks.append(Block(int(ids[k]), names[k], types[k], eids, conn))
    nlo, nhi = _balanced(lay.nn, size, rank)
    used = np.unique(np.concatenate([lay.nodes.rows(np.unique(b.connectivity)) for b in blocks] or [np.zeros(0, int)]))
    rows = np.union1d(np.arange(nlo, nhi), used).astype(np.int64)
    (coords,) = _read_map(g, ["coords"], rows, 0)
    ghost = (rows < nlo) | (rows >= nhi)
    model = Model(_info_strings(g, "title")[0], Nodes(lay.nodes.id_of(rows), coords), blocks, ghost_nodes=ghost)
    _read_sets(g, model, lay, rows[~ghost])
    model.variables = Variables(*(_info_strings(g, f"{k}_variables") for k in ("nodal", "element", "global")))
    model.qa = [(q[0], q[1], q[2], q[3]) for q in g.info("qa").tolist()]
    model.info = _info_strings(g, "info")
    return model


def _read_sets(g: Group, model: Model, lay: _Layout, owned_rows: np.ndarray) -> None:
    """This rank's entries of every set (each stored set read whole, sorted, each entry once)."""
    w = lay.writers
    owned_ids = np.sort(lay.nodes.id_of(owned_rows))
    for k, (sid, sname, has) in enumerate(zip(g.info("node_set_ids").tolist(), _info_strings(g, "node_set_names"),
                                              g.info("node_set_factors").tolist())):
        nodes = _all_ranked(g, f"ns{k}.nodes", w)
        factors = _all_ranked(g, f"ns{k}.factors", w)
        keep = _first_each(nodes[:, None])
        keep = keep[np.isin(nodes[keep], owned_ids)]
        model.node_sets.append(NodeSet(int(sid), sname, nodes[keep], factors[keep] if has else None))
    mine = np.concatenate([b.element_ids for b in model.blocks] or [np.zeros(0, np.int64)])
    for k, (sid, sname, has) in enumerate(zip(g.info("side_set_ids").tolist(), _info_strings(g, "side_set_names"),
                                              g.info("side_set_factors").tolist())):
        elems, sides = _all_ranked(g, f"ss{k}.elements", w), _all_ranked(g, f"ss{k}.sides", w)
        nf = _all_ranked(g, f"ss{k}.nfactors", w)
        factors = _all_ranked(g, f"ss{k}.factors", w)
        keep = _first_each(np.stack([elems, sides], axis=1))
        keep = keep[np.isin(elems[keep], mine)]
        f = None
        if has:
            start = np.concatenate([[0], np.cumsum(nf)[:-1]]).astype(np.int64)
            f = np.concatenate([factors[start[i]:start[i] + nf[i]] for i in keep] or [np.zeros(0)])
        model.side_sets.append(SideSet(int(sid), sname, elems[keep], sides[keep], f))


def read_results(session: "Session", model: Model, step: int, name: str = "mesh") -> Results:
    """Read the variables of one step on the nodes and elements of *model* (collective).

    Parameters
    ----------
    session : Session
    model : Model
        This rank's model (from :func:`read_mesh`, or any model whose node and element
        ids are stored ids: each rank names the ones it wants, overlaps allowed).
    step : int
    name : str

    Returns
    -------
    Results
        Nodal values for every node of the model (ghosts included), element values per
        block id, global values, the time.

    Raises
    ------
    StepNotFoundError, GroupNotFoundError, InvalidArgumentError
    """
    g, r = session.group(name), session.group(name + ".results")
    lay = _layout(g)
    nodal, element, glob = (_info_strings(g, f"{k}_variables") for k in ("nodal", "element", "global"))
    out = Results(int(step), float(r.read("time", step, box=(...,), verify=False)[0]))
    if glob:
        values = r.read("glob", step, box=(...,), verify=False)
        out.glob = {n: float(x) for n, x in zip(glob, values)}
    if nodal:
        rows = lay.nodes.rows(np.asarray(model.nodes.ids, dtype=np.int64))
        out.nodal = dict(zip(nodal, _read_map(r, [f"nod.{n}" for n in nodal], rows, step)))
    stored = [int(x) for x in g.info("block_ids")]
    dense = g.info("block_dense")
    out.element = {n: {} for n in element}
    for b in model.blocks:
        k = stored.index(int(b.id))
        eids = np.asarray(b.element_ids, dtype=np.int64)
        first = int(g.read(f"b{k}.ids", 0, box=(slice(0, 1),), verify=False)[0]) if dense[k] else 1
        rows = _Rows(g, f"b{k}.ids", bool(dense[k]), first).rows(eids)
        for n, values in zip(element, _read_map(r, [f"elem.{n}.b{k}" for n in element], rows, step)):
            out.element[n][int(b.id)] = values
    return out


def read_decomposition(session: "Session", name: str = "mesh",
                       ranks: tuple[int, int] | None = None) -> list[Decomposition]:
    """Rebuild the writer's decomposition maps, per writer rank (collective).

    Parameters
    ----------
    session : Session
    name : str
    ranks : (int, int), optional
        The writer ranks ``first`` to ``stop - 1`` whose maps this rank wants (each rank
        its own range). Default: its own rank when the session has the writer's number
        of ranks, else every writer rank.

    Returns
    -------
    list of Decomposition
        One per writer rank asked for, in rank order.

    Raises
    ------
    InvalidArgumentError
        The model was written without a decomposition.
    """
    g = session.group(name)
    lay = _layout(g)
    if not lay.has_dec:
        raise InvalidArgumentError(f"model {name!r} was written without a decomposition")
    if ranks is None:
        ranks = (session.rank, session.rank + 1) if session.size == lay.writers else (0, lay.writers)
    first, stop = int(ranks[0]), int(ranks[1])
    parts: dict[str, list[np.ndarray]] = {}
    for n in (*_DEC, "cmap_ranks", "cmap_counts", "cmap_nodes"):
        rows = g.read(f"dec.{n}", 0, ranks=(first, stop), verify=False)
        counts = g.ranked_counts(f"dec.{n}", 0).counts[first:stop]
        parts[n] = np.split(rows, np.cumsum(counts)[:-1]) if counts else []
    out = []
    for i, r in enumerate(range(first, stop)):
        nodes = np.split(parts["cmap_nodes"][i], np.cumsum(parts["cmap_counts"][i])[:-1])
        cmaps = {int(nb): m for nb, m in zip(parts["cmap_ranks"][i], nodes)}
        out.append(Decomposition(r, lay.writers, parts["internal_nodes"][i], parts["border_nodes"][i],
                                 parts["internal_elements"][i], parts["border_elements"][i], node_cmaps=cmaps))
    return out
