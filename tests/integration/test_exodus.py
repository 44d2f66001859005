"""Exodus II export and import (:mod:`sdm.fem.exodus`), read back by three independent readers.

A small model (a block of two HEX8, a block of four TETRA4 on top of them, a node set with
distribution factors, a side set over both blocks, 2 nodal, 1 element and 1 global
variable, 3 time steps) is written with :func:`sdm.fem.exodus.write`; its node ids are
not in file order so that every reader must go through the id maps. The file is read by

* ``meshio.read``: points, cells per block, point data of the first step;
* ``ncdump -h`` (Debian's netcdf-bin): dimensions and variables named by the Exodus II
  specification, with their sizes;
* Sandia's Exodus C library (Debian's libexodusii-dev): ``exodus_reader.c`` compiled here
  prints counts, coordinates, a block's connectivity, the side set, a nodal and an element
  variable at the last step and the node set's distribution factors;
* :func:`sdm.fem.exodus.read`: the same model and results.

Everything is compared with numpy references built here. Bad input is refused with its
exact message and leaves no file.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import meshio
import numpy as np
import pytest

from sdm.errors import InvalidArgumentError

from sdm.fem import exodus
from sdm.fem.model import Block, Model, Nodes, NodeSet, SideSet, Variables

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import readers  # noqa: E402

TIMES = [0.0, 0.5, 1.25]


def reference_model() -> Model:
    """Two hexes side by side (x in 0..2), four tets on their top faces with two apex nodes at z = 2."""
    grid = np.array([(x, y, z) for z in (0.0, 1.0) for y in (0.0, 1.0) for x in (0.0, 1.0, 2.0)])
    coords = np.vstack([grid, [(0.5, 0.5, 2.0), (1.5, 0.5, 2.0)]])  # 14 nodes, "natural" number = row + 1
    natural_id = 100 + 7 * np.arange(14)  # global ids
    order = np.array([5, 0, 13, 9, 2, 7, 11, 1, 12, 3, 8, 10, 4, 6])  # the file's (the model's) node order
    g = natural_id  # id of natural node k (0-based)
    hexes = np.array([[g[0], g[1], g[4], g[3], g[6], g[7], g[10], g[9]],
                      [g[1], g[2], g[5], g[4], g[7], g[8], g[11], g[10]]])
    tets = np.array([[g[6], g[7], g[10], g[12]], [g[6], g[10], g[9], g[12]],
                     [g[7], g[8], g[11], g[13]], [g[7], g[11], g[10], g[13]]])
    bottom = g[[0, 1, 2, 3, 4, 5]]
    return Model(
        title="two hexes and four tets",
        nodes=Nodes(natural_id[order], coords[order]),
        blocks=[Block(10, "solid", "HEX8", np.array([31, 32]), hexes),
                Block(20, "cap", "TETRA4", np.array([41, 43, 45, 47]), tets)],
        node_sets=[NodeSet(1, "bottom", bottom[::-1], np.linspace(0.5, 1.0, 6))],
        side_sets=[SideSet(7, "load", np.array([32, 31, 45]), np.array([5, 5, 1]),
                           np.arange(1.0, 12.0))],  # 4 + 4 + 3 nodes
        variables=Variables(nodal=["DISPL", "VELOCITY"], element=["stress"], glob=["energy"]),
        qa=[("sdm", "1.0", "2024-01-02", "03:04:05")],
        info=["a model for the Exodus II tests", "second line"],
    )


def reference_step(model: Model, index: int) -> exodus.Step:
    """Results of step *index*, functions of the coordinates and element ids."""
    xyz = model.nodes.coords
    return exodus.Step(
        TIMES[index],
        {"DISPL": xyz[:, 0] * (index + 1) + xyz[:, 2], "VELOCITY": np.sin(xyz.sum(axis=1) + index)},
        {"stress": {b.id: b.element_ids * 0.25 + index for b in model.blocks}},
        {"energy": 10.0 * index + 0.125},
    )


def steps(model: Model) -> Iterator[exodus.Step]:
    return (reference_step(model, i) for i in range(len(TIMES)))


@pytest.fixture(scope="module")
def model() -> Model:
    return reference_model()


@pytest.fixture(scope="module")
def exo(tmp_path_factory: pytest.TempPathFactory, model: Model) -> Path:
    path = tmp_path_factory.mktemp("exodus") / "model.exo"
    assert exodus.write(path, model, steps(model)) == len(TIMES)
    umask = os.umask(0o022)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask  # as any new file, not a private temporary one
    return path


def local(model: Model, ids: np.ndarray) -> np.ndarray:
    """0-based positions of node *ids* in the model's node order (independent of the writer)."""
    where = {int(i): k for k, i in enumerate(model.nodes.ids)}
    return np.vectorize(where.__getitem__)(ids)


def test_meshio(exo: Path, model: Model) -> None:
    mesh = meshio.read(exo)  # meshio reads the first time step (and says it skips the others)
    np.testing.assert_array_equal(mesh.points, model.nodes.coords)
    assert [c.type for c in mesh.cells] == ["hexahedron", "tetra"]
    for cells, block in zip(mesh.cells, model.blocks):
        np.testing.assert_array_equal(cells.data, local(model, block.connectivity))
    first = reference_step(model, 0)
    assert sorted(mesh.point_data) == sorted(first.nodal)
    for name, values in first.nodal.items():
        np.testing.assert_array_equal(mesh.point_data[name], values)
    np.testing.assert_array_equal(np.concatenate(mesh.cell_data["stress"]),
                                  np.concatenate([first.element["stress"][b.id] for b in model.blocks]))
    assert mesh.point_sets["bottom"].tolist() == local(model, model.node_sets[0].node_ids).tolist()


def ncdump_header(path: Path) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """Dimensions (name -> size), variables (name -> "type(dims)") and global attributes from ``ncdump -h``."""
    text = subprocess.run(["ncdump", "-h", str(path)], check=True, capture_output=True, text=True).stdout
    dims_text = text.split("dimensions:")[1].split("variables:")[0]
    dims = {name: size + (f" ({now} currently)" if now else "") for name, size, now in
            re.findall(r"^\s+(\w+) = (\w+) ;(?: // \((\d+) currently\))?", dims_text, re.M)}
    vars_text = text.split("variables:")[1].split("// global attributes:")[0]
    variables = {name: f"{kind}({args})" for kind, name, args in re.findall(r"^\t(\w+) (\w+)\((.*)\) ;", vars_text, re.M)}
    glob = dict(re.findall(r"^\t\t:(\w+) = (.*) ;", text.split("// global attributes:")[1], re.M))
    return dims, variables, glob


def test_ncdump_names(exo: Path) -> None:
    readers.install()
    dims, variables, glob = ncdump_header(exo)
    assert dims == {
        "len_string": "33", "len_name": "33", "len_line": "81", "four": "4", "time_step": "UNLIMITED (3 currently)",
        "num_dim": "3", "num_nodes": "14", "num_elem": "6", "num_el_blk": "2", "num_el_in_blk1": "2",
        "num_nod_per_el1": "8", "num_el_in_blk2": "4", "num_nod_per_el2": "4", "num_node_sets": "1",
        "num_nod_ns1": "6", "num_side_sets": "1", "num_side_ss1": "3", "num_df_ss1": "11", "num_qa_rec": "1",
        "num_info": "2", "num_glo_var": "1", "num_nod_var": "2", "num_elem_var": "1"}
    assert variables == {
        "time_whole": "double(time_step)", "coordx": "double(num_nodes)", "coordy": "double(num_nodes)",
        "coordz": "double(num_nodes)", "node_num_map": "int(num_nodes)", "coor_names": "char(num_dim, len_name)",
        "elem_num_map": "int(num_elem)", "eb_status": "int(num_el_blk)", "eb_prop1": "int(num_el_blk)",
        "eb_names": "char(num_el_blk, len_name)", "connect1": "int(num_el_in_blk1, num_nod_per_el1)",
        "connect2": "int(num_el_in_blk2, num_nod_per_el2)", "ns_status": "int(num_node_sets)",
        "ns_prop1": "int(num_node_sets)", "ns_names": "char(num_node_sets, len_name)",
        "node_ns1": "int(num_nod_ns1)", "dist_fact_ns1": "double(num_nod_ns1)", "ss_status": "int(num_side_sets)",
        "ss_prop1": "int(num_side_sets)", "ss_names": "char(num_side_sets, len_name)",
        "elem_ss1": "int(num_side_ss1)", "side_ss1": "int(num_side_ss1)", "dist_fact_ss1": "double(num_df_ss1)",
        "qa_records": "char(num_qa_rec, four, len_string)", "info_records": "char(num_info, len_line)",
        "name_glo_var": "char(num_glo_var, len_name)", "vals_glo_var": "double(time_step, num_glo_var)",
        "name_nod_var": "char(num_nod_var, len_name)", "vals_nod_var1": "double(time_step, num_nodes)",
        "vals_nod_var2": "double(time_step, num_nodes)", "name_elem_var": "char(num_elem_var, len_name)",
        "elem_var_tab": "int(num_el_blk, num_elem_var)",
        "vals_elem_var1eb1": "double(time_step, num_el_in_blk1)",
        "vals_elem_var1eb2": "double(time_step, num_el_in_blk2)"}
    assert glob == {"api_version": "8.03f", "version": "8.03f", "floating_point_word_size": "8", "file_size": "1",
                    "maximum_name_length": "32", "int64_status": "0", "title": '"two hexes and four tets"'}


def test_exodus_c_library(exo: Path, model: Model, tmp_path: Path) -> None:
    readers.install()
    program = tmp_path / "exodus_reader"
    subprocess.run(["cc", "-O1", "-o", str(program), str(HERE / "exodus_reader.c"), "-lexoIIv2c"], check=True,
                   capture_output=True, text=True)
    out = subprocess.run([str(program), str(exo), "20", "7", "2", "1"], check=True, capture_output=True, text=True).stdout
    lines = {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in out.splitlines()}
    title, counts = lines["init"].split("|")
    assert title == model.title
    assert [int(x) for x in counts.split()] == [3, 14, 6, 2, 1, 1]
    assert int(lines["steps"]) == len(TIMES)
    for axis in range(3):
        np.testing.assert_array_equal(np.array(lines[f"coord{'xyz'[axis]}"].split(), float), model.nodes.coords[:, axis])
    block_id, elem_type, ne, per, *conn = lines["conn"].split()
    assert (int(block_id), elem_type, int(ne), int(per)) == (20, "TETRA", 4, 4)
    np.testing.assert_array_equal(np.array(conn, int).reshape(4, 4), local(model, model.blocks[1].connectivity) + 1)
    elem_ids = np.concatenate([b.element_ids for b in model.blocks])  # the file's element order
    ss = model.side_sets[0]
    set_id, *elems = lines["sideset_elems"].split()
    assert int(set_id) == 7 and elem_ids[np.array(elems, int) - 1].tolist() == ss.element_ids.tolist()
    assert [int(x) for x in lines["sideset_sides"].split()[1:]] == ss.sides.tolist()
    assert lines["sideset_factors"] == "7 11"
    index, step, *values = lines["nodal_var"].split()
    assert (int(index), int(step)) == (2, 3)
    np.testing.assert_array_equal(np.array(values, float), reference_step(model, 2).nodal["VELOCITY"])
    index, step, block_id, *values = lines["elem_var"].split()
    assert (int(index), int(step), int(block_id)) == (1, 3, 20)
    np.testing.assert_array_equal(np.array(values, float), reference_step(model, 2).element["stress"][20])
    set_id, *values = lines["nodeset_factors"].split()
    assert int(set_id) == 1
    np.testing.assert_array_equal(np.array(values, float), model.node_sets[0].factors)


def same_model(a: Model, b: Model) -> None:
    assert (a.title, a.variables, a.qa, a.info, a.dim) == (b.title, b.variables, b.qa, b.info, b.dim)
    np.testing.assert_array_equal(a.nodes.ids, b.nodes.ids)
    np.testing.assert_array_equal(a.nodes.coords, b.nodes.coords)
    assert len(a.blocks) == len(b.blocks)
    for x, y in zip(a.blocks, b.blocks):
        assert (x.id, x.name, x.type) == (y.id, y.name, y.type)
        np.testing.assert_array_equal(x.element_ids, y.element_ids)
        np.testing.assert_array_equal(x.connectivity, y.connectivity)
    for xs, ys in ((a.node_sets, b.node_sets), (a.side_sets, b.side_sets)):
        assert [(s.id, s.name) for s in xs] == [(s.id, s.name) for s in ys]
    for p, q in zip(a.node_sets, b.node_sets):
        np.testing.assert_array_equal(p.node_ids, q.node_ids)
        np.testing.assert_array_equal(p.factors, q.factors)
    for s, t in zip(a.side_sets, b.side_sets):
        for field in ("element_ids", "sides", "factors"):
            np.testing.assert_array_equal(getattr(s, field), getattr(t, field))


def test_round_trip(exo: Path, model: Model, tmp_path: Path) -> None:
    back, results = exodus.read(exo)
    same_model(back, model)
    count = 0
    for index, step in enumerate(results):
        want = reference_step(model, index)
        assert step.time == want.time and step.glob == want.glob
        assert step.nodal.keys() == want.nodal.keys() and step.element.keys() == want.element.keys()
        for name in want.nodal:
            np.testing.assert_array_equal(step.nodal[name], want.nodal[name])
        for name in want.element:
            assert step.element[name].keys() == want.element[name].keys()
            for block_id, values in want.element[name].items():
                np.testing.assert_array_equal(step.element[name][block_id], values)
        count += 1
    assert count == len(TIMES)
    # and once more: what read() gives, written again, reads back the same
    again = tmp_path / "again.exo"
    assert exodus.write(again, back, exodus.read(exo)[1]) == len(TIMES)
    same_model(exodus.read(again)[0], model)


def test_empty_block_and_no_results(tmp_path: Path, model: Model) -> None:
    empty = Block(30, "nothing yet", "WEDGE6", np.zeros(0, np.int64), np.zeros((0, 6), np.int64))
    bare = Model(model.title, model.nodes, [*model.blocks, empty], variables=Variables(element=["stress"]))
    path = tmp_path / "bare.exo"
    assert exodus.write(path, bare, [(0.0, {}, {"stress": {10: np.ones(2), 20: np.ones(4)}}, {})]) == 1
    back, results = exodus.read(path)
    same_model(back, bare)
    (step,) = list(results)
    assert step.element["stress"][30].shape == (0,)


def bad(model: Model, what: str) -> tuple[Model, list[exodus.Step]]:
    """*model* and its steps, broken as *what* says."""
    blocks = [Block(b.id, b.name, b.type, b.element_ids, b.connectivity.copy()) for b in model.blocks]
    broken = Model(model.title, model.nodes, blocks, model.node_sets, model.side_sets, model.variables,
                   model.qa, model.info)
    results = list(steps(model))
    if what == "type":
        blocks[1].type = "PYRAMID5"
    elif what == "node":
        blocks[0].connectivity[1, 3] = 999
    elif what == "length":
        results[2].nodal["DISPL"] = results[2].nodal["DISPL"][:-1]
    elif what == "side":
        broken.side_sets = [SideSet(7, "load", np.array([41]), np.array([5]))]
    return broken, results


@pytest.mark.parametrize("what, message", [
    ("type", "block 20: unknown element type 'PYRAMID5' (known: BAR2, TRI3, QUAD4, TETRA4, HEX8, WEDGE6)"),
    ("node", "block 10: connectivity names node id 999 which is not in the model"),
    ("length", "step 2: nodal variable 'DISPL' has shape (13,), expected (14,) (one value per node)"),
    ("side", "side set 7: element 41 (TETRA4) has no side 5"),
])
def test_bad_input(tmp_path: Path, model: Model, what: str, message: str) -> None:
    broken, results = bad(model, what)
    with pytest.raises(InvalidArgumentError) as info:
        exodus.write(tmp_path / "bad.exo", broken, results)
    assert str(info.value) == message
    assert list(tmp_path.iterdir()) == []


def test_failure_keeps_the_old_file(exo: Path, model: Model, tmp_path: Path) -> None:
    path = tmp_path / "kept.exo"
    path.write_bytes(exo.read_bytes())
    with pytest.raises(InvalidArgumentError):
        exodus.write(path, *bad(model, "length"))
    assert path.read_bytes() == exo.read_bytes() and list(tmp_path.iterdir()) == [path]


def test_64_bit_ids(tmp_path: Path, model: Model) -> None:
    big = 2**40
    shift = {int(i): int(i) + big for i in model.nodes.ids}
    blocks = [Block(b.id + big, b.name, b.type, b.element_ids + big, np.vectorize(shift.__getitem__)(b.connectivity))
              for b in model.blocks]
    wide = Model(model.title, Nodes(model.nodes.ids + big, model.nodes.coords), blocks,
                 [NodeSet(1, "bottom", model.node_sets[0].node_ids + big, model.node_sets[0].factors)],
                 [SideSet(7, "load", model.side_sets[0].element_ids + big, model.side_sets[0].sides)],
                 model.variables, model.qa, model.info)
    path = tmp_path / "wide.exo"
    exodus.write(path, wide, ((s.time, s.nodal, {"stress": {b.id + big: v for b, v in
                               zip(model.blocks, s.element["stress"].values())}}, s.glob) for s in steps(model)))
    _, variables, glob = ncdump_header(path)
    assert glob["int64_status"] == str(0x1C00)
    assert variables["node_num_map"] == "int64(num_nodes)" and variables["connect1"].startswith("int64(")
    back, results = exodus.read(path)
    same_model(back, wide)
    assert [s.time for s in results] == TIMES
