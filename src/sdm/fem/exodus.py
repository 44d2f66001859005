"""Exodus II files (the NetCDF-4 flavour) written and read with netCDF4, no Exodus C library.

:func:`write` streams a :class:`~sdm.fem.model.Model` and its results, one time step after
the other, into a file laid out as the Exodus II specification names it (Sandia's
``exodusII_int.h``): the dimensions ``len_string``, ``len_name``, ``len_line``, ``four``,
``num_dim``, ``num_nodes``, ``num_elem``, ``num_el_blk``, ``num_node_sets``,
``num_side_sets``, ``num_el_in_blkN``, ``num_nod_per_elN``, ``num_nod_nsN``,
``num_side_ssN``, ``num_df_ssN``, ``time_step`` (unlimited), ``num_nod_var``,
``num_elem_var``, ``num_glo_var``, ``num_qa_rec``, ``num_info``; the variables
``coordx/y/z``, ``coor_names``, ``eb_status``, ``eb_prop1``, ``eb_names``, ``connectN``
(attribute ``elem_type``), ``ns_status``, ``ns_prop1``, ``ns_names``, ``node_nsN``,
``dist_fact_nsN``, ``ss_status``, ``ss_prop1``, ``ss_names``, ``elem_ssN``, ``side_ssN``,
``dist_fact_ssN``, ``node_num_map``, ``elem_num_map``, ``time_whole``, ``name_nod_var``,
``vals_nod_varK``, ``name_elem_var``, ``vals_elem_varKebB``, ``elem_var_tab``,
``name_glo_var``, ``vals_glo_var``, ``qa_records``, ``info_records``; and the global
attributes ``api_version``, ``version``, ``floating_point_word_size`` (8),
``file_size`` (1: one variable per coordinate and per nodal variable), ``maximum_name_length``,
``int64_status`` and ``title``. :func:`read` is the way back.

Conventions of the file, as the specification has them:

* Nodes are stored in the order of ``model.nodes``; elements block after block, each block's
  in its own order. Connectivity, node set and side set entries are 1-based *positions* in
  these orders; ``node_num_map`` and ``elem_num_map`` give the global ids.
* Block, set and variable numbers (``N``, ``K``, ``B`` above) are 1-based positions, the
  ids are in ``eb_prop1``, ``ns_prop1``, ``ss_prop1`` (attribute ``name = "ID"``).
* A node set's distribution factors share its ``num_nod_nsN`` dimension (the library
  defines no ``num_df_nsN``); a side set's have their own ``num_df_ssN``.
* A dimension of length 0 is never defined (in NetCDF it would be unlimited): an empty
  block has ``eb_status`` 0, no ``connectN`` (its type is kept in the global attribute
  ``elem_type_blkN``) and 0 in the element variable truth table; absent sets, variables,
  QA or info records have no dimension at all.
* Element types are written under names that the Exodus library (which looks at the first
  three letters and the nodes per element), ParaView and meshio all read (:data:`FILE_TYPES`);
  :func:`read` maps any Exodus name back by the same rule. A model block has one element
  type, so blocks never mix types.
* Integers are 32-bit unless an id or count needs 64 bits; then every integer variable is
  64-bit and ``int64_status`` says so (``EX_ALL_INT64_DB``).

The file is written aside (a hidden temporary name in the same directory) and renamed
when complete: a bad model or a bad step raises :class:`~sdm.errors.InvalidArgumentError` and leaves no file.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import netCDF4
import numpy as np

from ..errors import InvalidArgumentError
from .model import ELEMENT_TYPES, Block, Model, Nodes, NodeSet, SideSet, Variables

__all__ = ["FILE_TYPES", "Step", "write", "read"]

#: Exodus version written to ``api_version`` and ``version``.
VERSION = np.float32(8.03)
#: Longest name (``len_name`` - 1) unless a longer one needs more (the library allows 255).
NAME_LENGTH = 32
#: ``len_string`` - 1 (QA record fields) and ``len_line`` - 1 (info records).
STRING_LENGTH, LINE_LENGTH = 32, 80
#: ``int64_status`` when every integer is 64-bit (``EX_MAPS_INT64_DB | EX_IDS_INT64_DB | EX_BULK_INT64_DB``).
ALL_INT64 = 0x0400 | 0x0800 | 0x1000

#: Model element type -> the ``elem_type`` written (read back by prefix and nodes per element).
FILE_TYPES: dict[str, str] = {"BAR2": "BAR2", "TRI3": "TRI3", "QUAD4": "QUAD4", "TETRA4": "TETRA",
                              "HEX8": "HEX8", "WEDGE6": "WEDGE"}
#: Exodus ``elem_type`` prefix (first three letters) -> model types by nodes per element.
_PREFIXES: dict[str, str] = {"BAR": "BAR2", "BEA": "BAR2", "TRU": "BAR2", "TRI": "TRI3", "QUA": "QUAD4",
                             "SHE": "QUAD4", "TET": "TETRA4", "HEX": "HEX8", "WED": "WEDGE6"}
#: Number of sides per element type (side numbers run from 1); in 3-D, TRI3 and QUAD4 are shells
#: whose sides are their two faces and then their edges.
SIDES: dict[str, int] = {"BAR2": 2, "TRI3": 3, "QUAD4": 4, "TETRA4": 4, "HEX8": 6, "WEDGE6": 5}
SHELL_SIDES: dict[str, int] = {"TRI3": 5, "QUAD4": 6}


class Step(NamedTuple):
    """One time step of results.

    Attributes
    ----------
    time : float
    nodal : dict
        Nodal variable name -> ``(n_nodes,)`` array in the model's node order.
    element : dict
        Element variable name -> {block id: ``(ne,)`` array in the block's element order}.
    glob : dict
        Global variable name -> value.
    """

    time: float
    nodal: dict[str, np.ndarray]
    element: dict[str, dict[int, np.ndarray]]
    glob: dict[str, float]


# ---------------------------------------------------------------------------------------- writing

def write(path: str | os.PathLike[str], model: Model, steps: Iterable[tuple[Any, ...]]) -> int:
    """Write *model* and its results to the Exodus II file *path*, one step at a time.

    Parameters
    ----------
    path : path-like
        The file to write (replaced if it exists, only once it is complete).
    model : Model
        The whole model: nodes (ids and coordinates), blocks, sets, variable names, QA and
        info records. Ghost marks and decomposition are not part of an Exodus II file.
    steps : iterable of (time, nodal, element, glob)
        As :class:`Step`; consumed lazily, each step is written before the next is taken.
        Every step names exactly the variables of ``model.variables``.

    Returns
    -------
    int
        The number of time steps written.

    Raises
    ------
    InvalidArgumentError
        The model or a step is not valid (unknown element type, an id not in the model, a
        variable missing, unknown or of the wrong length, ...); no file is left behind.
    """
    target = Path(path)
    # created by the NetCDF library with the umask's permissions (mkstemp's would be 0600)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        with netCDF4.Dataset(tmp, "w", format="NETCDF4") as nc:
            writer = _Writer(nc, model)
            count = 0
            for step in steps:
                writer.step(count, Step(*step))
                count += 1
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return count


def _positions(ids: np.ndarray, wanted: np.ndarray, what: str, kind: str) -> np.ndarray:
    """1-based positions in *ids* (of *kind* "node" or "element") of each of *wanted*.

    Raises
    ------
    InvalidArgumentError
        ``"<what> names <kind> id <id> which is not in the model"`` for the first id not in *ids*.
    """
    wanted = np.asarray(wanted, dtype=np.int64)
    order = np.argsort(ids, kind="stable")
    where = np.searchsorted(ids, wanted, sorter=order) if ids.size else np.zeros(wanted.shape, np.int64)
    where = np.minimum(where, max(ids.size - 1, 0))
    found = ids[order[where]] == wanted if ids.size else np.zeros(wanted.shape, bool)
    if not np.all(found):
        bad = wanted[~found].ravel()[0]
        raise InvalidArgumentError(f"{what} names {kind} id {bad} which is not in the model")
    return (order[where] + 1).astype(np.int64)


def _unique_ids(ids: np.ndarray, what: str) -> None:
    """InvalidArgumentError if *ids* has a repeated or non-positive id."""
    if ids.size and ids.min() < 1:
        raise InvalidArgumentError(f"{what} ids must be >= 1, got {ids.min()}")
    uniq, counts = np.unique(ids, return_counts=True)
    if np.any(counts > 1):
        raise InvalidArgumentError(f"{what} id {uniq[counts > 1][0]} is repeated")


def _chars(strings: list[str], length: int, what: str) -> np.ndarray:
    """*strings* as a ``(n, length)`` array of single bytes (NUL padded); InvalidArgumentError if one is too long."""
    out = np.zeros((len(strings), length), dtype="S1")
    for i, s in enumerate(strings):
        raw = s.encode()
        if len(raw) >= length:
            raise InvalidArgumentError(f"{what} {s!r} is longer than {length - 1} bytes")
        out[i, :len(raw)] = np.frombuffer(raw, dtype="S1")
    return out


def _check_model(model: Model) -> None:
    """InvalidArgumentError for what the file cannot hold: unknown types, bad shapes, repeated ids."""
    n, dim = model.nodes.coords.shape if model.nodes.coords.ndim == 2 else (-1, -1)
    if not 1 <= dim <= 3 or n != model.nodes.ids.shape[0]:
        raise InvalidArgumentError(f"nodes: coordinates of shape {model.nodes.coords.shape} do not match "
                         f"{model.nodes.ids.shape[0]} node ids in 1-3 dimensions")
    _unique_ids(np.asarray(model.nodes.ids), "node")
    for kind, items in (("block", model.blocks), ("node set", model.node_sets), ("side set", model.side_sets)):
        _unique_ids(np.array([x.id for x in items], dtype=np.int64), kind)
    for block in model.blocks:
        if block.type not in ELEMENT_TYPES:
            raise InvalidArgumentError(f"block {block.id}: unknown element type {block.type!r} "
                             f"(known: {', '.join(ELEMENT_TYPES)})")
        ne, per = len(block.element_ids), ELEMENT_TYPES[block.type]
        if np.shape(block.connectivity) != (ne, per):
            raise InvalidArgumentError(f"block {block.id}: connectivity of shape {np.shape(block.connectivity)}, "
                             f"expected ({ne}, {per}) for {ne} {block.type} elements")
    _unique_ids(np.concatenate([np.asarray(b.element_ids, np.int64) for b in model.blocks] or
                               [np.zeros(0, np.int64)]), "element")
    for names, what in ((model.variables.nodal, "nodal"), (model.variables.element, "element"),
                        (model.variables.glob, "global")):
        if len(set(names)) != len(names):
            raise InvalidArgumentError(f"{what} variable names repeat: {names}")


class _Writer:
    """The file being written: the model at construction, then :meth:`step` for each time step."""

    def __init__(self, nc: Any, model: Model) -> None:
        _check_model(model)
        self.nc, self.model = nc, model
        self.node_ids = np.asarray(model.nodes.ids, dtype=np.int64)
        self.elem_ids = np.concatenate([np.asarray(b.element_ids, np.int64) for b in model.blocks] or
                                       [np.zeros(0, np.int64)])
        self.nonempty = [len(b.element_ids) > 0 for b in model.blocks]
        self.int = self._int_type()
        names = [b.name for b in model.blocks] + [s.name for s in model.node_sets] + \
            [s.name for s in model.side_sets] + model.variables.nodal + model.variables.element + \
            model.variables.glob
        self.len_name = max([NAME_LENGTH, *(len(s.encode()) for s in names)]) + 1
        if self.len_name > 256:
            raise InvalidArgumentError(f"a name is longer than 255 bytes (the Exodus II limit): {max(names, key=len)!r}")
        self._header()
        self._nodes()
        self._blocks()
        self._node_sets()
        self._side_sets()
        self._records()
        self._variables()

    def _int_type(self) -> str:
        """``i4`` unless an id or a count needs 64 bits."""
        biggest = max([self.node_ids.size, self.elem_ids.size, *(abs(int(a.max())) for a in
                       (self.node_ids, self.elem_ids) if a.size),
                       *(abs(b.id) for b in self.model.blocks), *(abs(s.id) for s in self.model.node_sets),
                       *(abs(s.id) for s in self.model.side_sets)])
        return "i4" if biggest < 2**31 else "i8"

    def _dim(self, name: str, size: int | None) -> str:
        self.nc.createDimension(name, size)
        return name

    def _var(self, name: str, dtype: str, dims: tuple[str, ...], values: Any = None,
             attrs: dict[str, str] | None = None) -> Any:
        """A variable without fill value (so without pre-filling), written if *values* is given."""
        var = self.nc.createVariable(name, dtype, dims, fill_value=False)
        var.set_auto_maskandscale(False)
        if attrs:
            var.setncatts(attrs)
        if values is not None:
            var[...] = values
        return var

    def _names(self, name: str, dim: str, strings: list[str], what: str) -> None:
        self._var(name, "S1", (dim, "len_name"), _chars(strings, self.len_name, what))

    def _header(self) -> None:
        self.nc.setncatts({"api_version": VERSION, "version": VERSION, "floating_point_word_size": np.int32(8),
                           "file_size": np.int32(1), "maximum_name_length": np.int32(self.len_name - 1),
                           "int64_status": np.int32(ALL_INT64 if self.int == "i8" else 0),
                           "title": self.model.title})
        if len(self.model.title.encode()) > LINE_LENGTH:
            raise InvalidArgumentError(f"title {self.model.title!r} is longer than {LINE_LENGTH} bytes")
        self._dim("len_string", STRING_LENGTH + 1)
        self._dim("len_name", self.len_name)
        self._dim("len_line", LINE_LENGTH + 1)
        self._dim("four", 4)
        self._dim("time_step", None)
        self._var("time_whole", "f8", ("time_step",))

    def _nodes(self) -> None:
        coords = np.asarray(self.model.nodes.coords, dtype=np.float64)
        n, dim = coords.shape
        self._dim("num_dim", dim)
        if n:
            self._dim("num_nodes", n)
            for axis in range(dim):
                self._var(f"coord{'xyz'[axis]}", "f8", ("num_nodes",), coords[:, axis])
            self._var("node_num_map", self.int, ("num_nodes",), self.node_ids)
        self._names("coor_names", "num_dim", ["X", "Y", "Z"][:dim], "coordinate name")

    def _blocks(self) -> None:
        blocks = self.model.blocks
        if self.elem_ids.size:
            self._dim("num_elem", self.elem_ids.size)
            self._var("elem_num_map", self.int, ("num_elem",), self.elem_ids)
        if not blocks:
            return
        self._dim("num_el_blk", len(blocks))
        self._var("eb_status", "i4", ("num_el_blk",), np.array(self.nonempty, dtype=np.int32))
        self._var("eb_prop1", self.int, ("num_el_blk",), [b.id for b in blocks], {"name": "ID"})
        self._names("eb_names", "num_el_blk", [b.name for b in blocks], "block name")
        for k, block in enumerate(blocks, 1):
            if not self.nonempty[k - 1]:
                self.nc.setncattr(f"elem_type_blk{k}", block.type)
                continue
            conn = np.asarray(block.connectivity, dtype=np.int64)
            local = _positions(self.node_ids, conn, f"block {block.id}: connectivity", "node")
            dims = (self._dim(f"num_el_in_blk{k}", conn.shape[0]), self._dim(f"num_nod_per_el{k}", conn.shape[1]))
            self._var(f"connect{k}", self.int, dims, local, {"elem_type": FILE_TYPES[block.type]})

    def _set_header(self, prefix: str, dim: str, sets: list[Any]) -> None:
        self._dim(dim, len(sets))
        self._var(f"{prefix}_status", "i4", (dim,), np.array([len(_entries(s)) > 0 for s in sets], dtype=np.int32))
        self._var(f"{prefix}_prop1", self.int, (dim,), [s.id for s in sets], {"name": "ID"})
        self._names(f"{prefix}_names", dim, [s.name for s in sets], f"{'node' if prefix == 'ns' else 'side'} set name")

    def _node_sets(self) -> None:
        if not self.model.node_sets:
            return
        self._set_header("ns", "num_node_sets", self.model.node_sets)
        for k, ns in enumerate(self.model.node_sets, 1):
            local = _positions(self.node_ids, np.asarray(ns.node_ids), f"node set {ns.id}", "node")
            if not local.size:
                continue
            dim = self._dim(f"num_nod_ns{k}", local.size)
            self._var(f"node_ns{k}", self.int, (dim,), local)
            if ns.factors is not None:
                factors = np.asarray(ns.factors, dtype=np.float64)
                if factors.shape != local.shape:
                    raise InvalidArgumentError(f"node set {ns.id}: {factors.size} distribution factors for {local.size} nodes")
                self._var(f"dist_fact_ns{k}", "f8", (dim,), factors)

    def _side_sets(self) -> None:
        if not self.model.side_sets:
            return
        self._set_header("ss", "num_side_sets", self.model.side_sets)
        types = np.concatenate([np.full(len(b.element_ids), b.type, dtype=object) for b in self.model.blocks] or
                               [np.zeros(0, object)])
        for k, ss in enumerate(self.model.side_sets, 1):
            local = _positions(self.elem_ids, np.asarray(ss.element_ids), f"side set {ss.id}", "element")
            sides = np.asarray(ss.sides, dtype=np.int64)
            if sides.shape != local.shape:
                raise InvalidArgumentError(f"side set {ss.id}: {sides.size} side numbers for {local.size} elements")
            sides_of = {**SIDES, **SHELL_SIDES} if self.model.dim == 3 else SIDES
            limits = np.array([sides_of[t] for t in types[local - 1]], dtype=np.int64)
            bad = (sides < 1) | (sides > limits)
            if np.any(bad):
                i = int(np.argmax(bad))
                raise InvalidArgumentError(f"side set {ss.id}: element {int(ss.element_ids[i])} ({types[local[i] - 1]}) "
                                 f"has no side {int(sides[i])}")
            if not local.size:
                continue
            dim = self._dim(f"num_side_ss{k}", local.size)
            self._var(f"elem_ss{k}", self.int, (dim,), local)
            self._var(f"side_ss{k}", self.int, (dim,), sides)
            if ss.factors is not None and np.size(ss.factors):
                factors = np.asarray(ss.factors, dtype=np.float64).ravel()
                self._var(f"dist_fact_ss{k}", "f8", (self._dim(f"num_df_ss{k}", factors.size),), factors)

    def _records(self) -> None:
        qa, info = self.model.qa, self.model.info
        if qa:
            if any(len(r) != 4 for r in qa):
                raise InvalidArgumentError("a QA record must have 4 fields (code, version, date, time)")
            chars = _chars([f for r in qa for f in r], STRING_LENGTH + 1, "QA record field")
            self._var("qa_records", "S1", (self._dim("num_qa_rec", len(qa)), "four", "len_string"),
                      chars.reshape(len(qa), 4, STRING_LENGTH + 1))
        if info:
            self._var("info_records", "S1", (self._dim("num_info", len(info)), "len_line"),
                      _chars(info, LINE_LENGTH + 1, "info record"))

    def _variables(self) -> None:
        v, n = self.model.variables, self.node_ids.size
        if v.glob:
            self._names("name_glo_var", self._dim("num_glo_var", len(v.glob)), v.glob, "global variable name")
            self._var("vals_glo_var", "f8", ("time_step", "num_glo_var"))
        if v.nodal:
            self._names("name_nod_var", self._dim("num_nod_var", len(v.nodal)), v.nodal, "nodal variable name")
            for k in range(1, len(v.nodal) + 1):
                self._stepped(f"vals_nod_var{k}", "num_nodes", n)
        if v.element:
            self._names("name_elem_var", self._dim("num_elem_var", len(v.element)), v.element,
                        "element variable name")
            if self.model.blocks:
                table = np.repeat(np.array(self.nonempty, dtype=np.int32)[:, None], len(v.element), axis=1)
                self._var("elem_var_tab", "i4", ("num_el_blk", "num_elem_var"), table)
            for k in range(1, len(v.element) + 1):
                for b, block in enumerate(self.model.blocks, 1):
                    if self.nonempty[b - 1]:
                        self._stepped(f"vals_elem_var{k}eb{b}", f"num_el_in_blk{b}", len(block.element_ids))

    def _stepped(self, name: str, dim: str, size: int) -> None:
        """A ``(time_step, dim)`` variable chunked one step (at most 4 Mi values) per chunk."""
        var = self.nc.createVariable(name, "f8", ("time_step", dim), fill_value=False,
                                     chunksizes=(1, min(size, 1 << 22)))
        var.set_auto_maskandscale(False)

    def step(self, index: int, step: Step) -> None:
        """Check *step* against the model and write it as time step *index* (0-based)."""
        v, model, nc = self.model.variables, self.model, self.nc
        where = f"step {index}"
        for given, declared, what in ((step.nodal, v.nodal, "nodal"), (step.element, v.element, "element"),
                                      (step.glob, v.glob, "global")):
            if set(given) != set(declared):
                raise InvalidArgumentError(f"{where}: {what} variables {sorted(given)} are not the model's {sorted(declared)}")
        nodal = {}
        for name in v.nodal:
            values = np.asarray(step.nodal[name], dtype=np.float64)
            if values.shape != (self.node_ids.size,):
                raise InvalidArgumentError(f"{where}: nodal variable {name!r} has shape {values.shape}, "
                                 f"expected ({self.node_ids.size},) (one value per node)")
            nodal[name] = values
        element: dict[tuple[int, int], np.ndarray] = {}
        for k, name in enumerate(v.element, 1):
            per_block = step.element[name]
            known = {b.id for b in model.blocks}
            if not set(per_block) <= known:
                raise InvalidArgumentError(f"{where}: element variable {name!r} names blocks "
                                 f"{sorted(set(per_block) - known)} not in the model")
            for b, block in enumerate(model.blocks, 1):
                ne = len(block.element_ids)
                if block.id not in per_block and ne:
                    raise InvalidArgumentError(f"{where}: element variable {name!r} has no values for block {block.id}")
                values = np.asarray(per_block.get(block.id, np.zeros(0)), dtype=np.float64)
                if values.shape != (ne,):
                    raise InvalidArgumentError(f"{where}: element variable {name!r} of block {block.id} has shape "
                                     f"{values.shape}, expected ({ne},) (one value per element)")
                if ne:
                    element[k, b] = values
        glob = np.array([float(step.glob[name]) for name in v.glob], dtype=np.float64)
        nc["time_whole"][index] = float(step.time)
        if v.glob:
            nc["vals_glo_var"][index, :] = glob
        for k, name in enumerate(v.nodal, 1):
            if nodal[name].size:
                nc[f"vals_nod_var{k}"][index, :] = nodal[name]
        for (k, b), values in element.items():
            nc[f"vals_elem_var{k}eb{b}"][index, :] = values


def _entries(s: NodeSet | SideSet) -> np.ndarray:
    return np.asarray(s.node_ids if isinstance(s, NodeSet) else s.element_ids)


# ---------------------------------------------------------------------------------------- reading

def _strings(nc: Any, name: str) -> list[str]:
    """The rows of a char variable as strings (NUL padding dropped); [] if there is no such variable."""
    if name not in nc.variables:
        return []
    var = nc[name]
    var.set_auto_mask(False)
    raw = np.asarray(var[...], dtype="S1")
    rows = raw.reshape(-1, raw.shape[-1]) if raw.size else raw.reshape(0, 0)
    return [b"".join(row).split(b"\0", 1)[0].decode() for row in rows]


def _ints(nc: Any, name: str) -> np.ndarray:
    var = nc[name]
    var.set_auto_maskandscale(False)
    return np.asarray(var[...], dtype=np.int64)


def _floats(nc: Any, name: str) -> np.ndarray:
    var = nc[name]
    var.set_auto_maskandscale(False)
    return np.asarray(var[...], dtype=np.float64)


def _size(nc: Any, dim: str) -> int:
    return len(nc.dimensions[dim]) if dim in nc.dimensions else 0


def model_type(elem_type: str, per_element: int) -> str:
    """The model's element type for an Exodus ``elem_type`` with *per_element* nodes.

    Raises
    ------
    InvalidArgumentError
        No model type has this name prefix and node count.
    """
    found = _PREFIXES.get(elem_type.strip().upper()[:3])
    if found is None or ELEMENT_TYPES[found] != per_element:
        raise InvalidArgumentError(f"element type {elem_type!r} with {per_element} nodes per element is not supported "
                         f"(known: {', '.join(ELEMENT_TYPES)})")
    return found


def _read_model(nc: Any) -> Model:
    """The model of an open Exodus II file."""
    dim, n, ne = _size(nc, "num_dim"), _size(nc, "num_nodes"), _size(nc, "num_elem")
    if "coord" in nc.variables:
        coords = _floats(nc, "coord").T.reshape(n, dim)
    else:
        coords = np.column_stack([_floats(nc, f"coord{'xyz'[a]}") for a in range(dim)] or
                                 [np.zeros(n)]).reshape(n, dim)
    node_ids = _ints(nc, "node_num_map") if "node_num_map" in nc.variables else np.arange(1, n + 1, dtype=np.int64)
    elem_map = _ints(nc, "elem_num_map") if "elem_num_map" in nc.variables else np.arange(1, ne + 1, dtype=np.int64)
    blocks, start = [], 0
    ids, names = _ints(nc, "eb_prop1") if "eb_prop1" in nc.variables else np.zeros(0, np.int64), \
        _strings(nc, "eb_names")
    for k, block_id in enumerate(ids, 1):
        name = names[k - 1] if k <= len(names) else ""
        if f"connect{k}" not in nc.variables:
            kind = str(nc.getncattr(f"elem_type_blk{k}")) if f"elem_type_blk{k}" in nc.ncattrs() else "NULL"
            blocks.append(Block(int(block_id), name, kind, np.zeros(0, np.int64), np.zeros((0, ELEMENT_TYPES.get(
                kind, 0)), np.int64)))
            continue
        conn = _ints(nc, f"connect{k}")
        kind = model_type(str(nc[f"connect{k}"].getncattr("elem_type")), conn.shape[1])
        blocks.append(Block(int(block_id), name, kind, elem_map[start:start + len(conn)], node_ids[conn - 1]))
        start += len(conn)
    node_sets = []
    names = _strings(nc, "ns_names")
    for k, set_id in enumerate(_ints(nc, "ns_prop1") if "ns_prop1" in nc.variables else [], 1):
        present = f"node_ns{k}" in nc.variables
        nodes = node_ids[_ints(nc, f"node_ns{k}") - 1] if present else np.zeros(0, np.int64)
        factors = _floats(nc, f"dist_fact_ns{k}") if f"dist_fact_ns{k}" in nc.variables else None
        node_sets.append(NodeSet(int(set_id), names[k - 1] if k <= len(names) else "", nodes, factors))
    side_sets = []
    names = _strings(nc, "ss_names")
    for k, set_id in enumerate(_ints(nc, "ss_prop1") if "ss_prop1" in nc.variables else [], 1):
        present = f"elem_ss{k}" in nc.variables
        elems = elem_map[_ints(nc, f"elem_ss{k}") - 1] if present else np.zeros(0, np.int64)
        sides = _ints(nc, f"side_ss{k}") if present else np.zeros(0, np.int64)
        factors = _floats(nc, f"dist_fact_ss{k}") if f"dist_fact_ss{k}" in nc.variables else None
        side_sets.append(SideSet(int(set_id), names[k - 1] if k <= len(names) else "", elems, sides, factors))
    qa = [tuple(_strings(nc, "qa_records")[4 * i:4 * i + 4]) for i in range(_size(nc, "num_qa_rec"))]
    variables = Variables(_strings(nc, "name_nod_var"), _strings(nc, "name_elem_var"), _strings(nc, "name_glo_var"))
    return Model(title=str(nc.getncattr("title")) if "title" in nc.ncattrs() else "", nodes=Nodes(node_ids, coords),
                 blocks=blocks, node_sets=node_sets, side_sets=side_sets, variables=variables,
                 qa=qa,  # type: ignore[arg-type]
                 info=_strings(nc, "info_records"))


def _read_steps(path: Path, model: Model) -> Iterator[Step]:
    """The time steps of the file, read one at a time (the file is opened for the iteration)."""
    with netCDF4.Dataset(path, "r") as nc:
        v = model.variables
        nodal_vars = [f"vals_nod_var{k}" for k in range(1, len(v.nodal) + 1)]
        for index in range(_size(nc, "time_step")):
            time = float(_floats(nc, "time_whole")[index]) if "time_whole" in nc.variables else float(index)
            if nodal_vars and "vals_nod_var" in nc.variables:  # the small-file layout: (time, var, node)
                nodal = {name: _row(nc, "vals_nod_var", index)[k] for k, name in enumerate(v.nodal)}
            else:
                nodal = {name: _row(nc, var, index) for name, var in zip(v.nodal, nodal_vars)}
            element: dict[str, dict[int, np.ndarray]] = {name: {} for name in v.element}
            for k, name in enumerate(v.element, 1):
                for b, block in enumerate(model.blocks, 1):
                    var = f"vals_elem_var{k}eb{b}"
                    element[name][block.id] = _row(nc, var, index) if var in nc.variables else np.zeros(0)
            glob = _row(nc, "vals_glo_var", index) if v.glob else np.zeros(0)
            yield Step(time, nodal, element, {name: float(x) for name, x in zip(v.glob, glob)})


def _row(nc: Any, name: str, index: int) -> np.ndarray:
    var = nc[name]
    var.set_auto_maskandscale(False)
    return np.asarray(var[index], dtype=np.float64)


def read(path: str | os.PathLike[str]) -> tuple[Model, Iterator[Step]]:
    """Read an Exodus II file (either NetCDF flavour): the model, and its time steps one by one.

    Parameters
    ----------
    path : path-like

    Returns
    -------
    model : Model
        Nodes in the file's order with the ids of ``node_num_map`` (1..n without one),
        blocks with element ids from ``elem_num_map`` and connectivity as global node ids,
        node and side sets with their factors, variable names, QA and info records.
    steps : iterator of Step
        The time steps, read lazily (each element variable gets an array for every block,
        empty for a block the truth table leaves out).

    Raises
    ------
    InvalidArgumentError
        A block's element type is not one of the model's types.
    """
    with netCDF4.Dataset(path, "r") as nc:
        model = _read_model(nc)
    return model, _read_steps(Path(path), model)


