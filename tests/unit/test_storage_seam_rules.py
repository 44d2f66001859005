"""The storage seam's rules, read from the source: the I/O methods never touch an ``MPI.File`` (they call
their typed handle), and neither the engine nor the methods branch on a backend's name."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "sdm"
#: The calls of ``MPI.File`` that moving bytes, setting views or syncing would make.
FILE_CALLS = {"Set_view", "Get_view", "Write_at", "Read_at", "Write_at_all", "Read_at_all", "Write", "Read",
              "Write_all", "Read_all", "Iwrite_at", "Iread_at", "Iwrite_at_all", "Iread_at_all",
              "Write_at_all_begin", "Write_at_all_end", "Read_at_all_begin", "Read_at_all_end",
              "Set_size", "Preallocate", "Open", "Close"}
BACKEND_NAMES = {"mpiio", "objectstore"}


def _modules(folder: str) -> list[Path]:
    return sorted((SRC / folder).glob("*.py"))


@pytest.mark.parametrize("path", _modules("io"), ids=lambda p: p.name)
def test_no_io_method_module_references_mpi_file(path: Path) -> None:
    tree = ast.parse(path.read_text(), str(path))
    # the one place allowed to name it: make_transfer takes a plain MPI.File (benchmarks, tests) and wraps it
    allowed = {id(n) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and f.name == "make_transfer"
               for a in f.args.args if a.annotation is not None for n in ast.walk(a.annotation)}
    found = []
    for node in ast.walk(tree):
        if id(node) in allowed:
            continue
        if isinstance(node, ast.Attribute):
            if node.attr == "File" and isinstance(node.value, ast.Name) and node.value.id == "MPI":
                found.append(f"line {node.lineno}: MPI.File")
            elif node.attr in FILE_CALLS and not (isinstance(node.value, ast.Name) and node.value.id == "MPI"):
                found.append(f"line {node.lineno}: .{node.attr}")  # an MPI.File's call on some object
        elif isinstance(node, ast.ImportFrom) and node.module == "mpi4py.MPI":
            found += [f"line {node.lineno}: import {a.name}" for a in node.names if a.name == "File"]
    assert not found, f"{path.name} reaches MPI.File instead of its handle: {found}"


def _compares_a_backend_name(node: ast.AST) -> bool:
    if isinstance(node, ast.Compare):
        sides = [node.left, *node.comparators]
        for side in sides:
            if isinstance(side, ast.Constant) and side.value in BACKEND_NAMES:
                return True
            if isinstance(side, (ast.Tuple, ast.List, ast.Set)) and any(
                    isinstance(e, ast.Constant) and e.value in BACKEND_NAMES for e in side.elts):
                return True
    if isinstance(node, ast.Dict):  # a table of backend names is a dispatch too
        return any(isinstance(k, ast.Constant) and k.value in BACKEND_NAMES for k in node.keys)
    return False


@pytest.mark.parametrize("path", _modules("io") + _modules("engine"), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_branch_on_a_backend_name(path: Path) -> None:
    tree = ast.parse(path.read_text(), str(path))
    found = [n.lineno for n in ast.walk(tree) if _compares_a_backend_name(n)]
    found += [n.lineno for n in ast.walk(tree)
              if isinstance(n, ast.Compare) and any(isinstance(s, ast.Attribute) and s.attr == "name"
                                                    and isinstance(s.value, ast.Name) and "backend" in s.value.id
                                                    for s in [n.left, *n.comparators])]
    assert not found, f"{path.parent.name}/{path.name} branches on a backend's name at lines {sorted(found)}"


def test_the_rules_see_what_they_forbid() -> None:
    """The checks above find the forms they forbid (else they would pass on anything)."""
    bad = ast.parse("if backend.name == 'objectstore':\n    fh.Set_view(0, MPI.BYTE, MPI.BYTE)\nx = MPI.File\n")
    assert any(_compares_a_backend_name(n) for n in ast.walk(bad))
    attrs = {n.attr for n in ast.walk(bad) if isinstance(n, ast.Attribute)}
    assert "Set_view" in attrs and "File" in attrs
