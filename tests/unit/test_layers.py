"""SDM's layers import each other in one direction only (docs/design.md, "Layers and modules").

Read from the source alone (nothing of SDM is imported): every ``import`` statement of
every module under ``src/sdm``, at module level, inside functions and under
``TYPE_CHECKING`` alike, since a type-only import ties two modules as firmly as any.

* **Between parts**: each module directly under ``src/sdm`` and each package there (a
  folder, taken whole) is one part. Parts form no loop, so they stand in layers, each
  importing only those below it.
* **Between modules**: no module stands in a loop of imports, but those of the command
  line (``sdm._cli``, whose commands register with its main module and use its options).

A lower module that needs an object of a higher one names what it needs in a
``typing.Protocol`` of its own (``sdm.engine.session_state.SessionState``, say) instead of
importing the higher module.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from functools import lru_cache
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = SRC / "sdm"
#: Modules allowed to stand in a loop: the command line's.
LOOPS_ALLOWED = ("sdm._cli.",)


def _modules() -> dict[str, Path]:
    """Every module of the package by its dotted name (a package by its own name)."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


@lru_cache(maxsize=1)
def _read() -> dict[str, dict[str, list[str]]]:
    """:func:`_imports` of every module of the package (read once for the tests of this file)."""
    return _imports(_modules())


def _imports(modules: dict[str, Path]) -> dict[str, dict[str, list[str]]]:
    """``{module: {imported module: [where, ...]}}`` over the package's own modules.

    ``from P import N`` imports the module ``P.N`` when there is one, else the module ``P``.
    """
    out: dict[str, dict[str, list[str]]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: dict[str, list[str]] = defaultdict(list)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in modules else source for a in node.names]
            for target in targets:
                while target and target not in modules:  # a name defined in a module: that module
                    target = target.rpartition(".")[0]
                where = f"{path.relative_to(SRC.parent)}:{node.lineno}"
                if target and target != name and where not in found[target]:
                    found[target].append(where)
        out[name] = dict(found)
    return out


def _loops(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected sets of more than one node of *graph* (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    loops: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    break
                if nxt in on:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    members = []
                    while True:
                        member = stack.pop()
                        on.discard(member)
                        members.append(member)
                        if member == node:
                            break
                    if len(members) > 1:
                        loops.append(sorted(members))
    return loops


def _part(module: str) -> str:
    """The part a module belongs to: ``sdm.catalog.urls`` -> ``sdm.catalog``; ``sdm`` itself is its own."""
    return ".".join(module.split(".")[:2])


def _explain(loop: list[str], edges: dict[tuple[str, str], list[str]]) -> str:
    lines = [" <-> ".join(loop)]
    for (a, b), where in sorted(edges.items()):
        if a in loop and b in loop:
            lines.append(f"  {a} -> {b}: {', '.join(where[:4])}{' ...' if len(where) > 4 else ''}")
    return "\n".join(lines)


def test_the_parts_of_sdm_import_each_other_in_one_direction() -> None:
    imports = _read()
    graph: dict[str, set[str]] = defaultdict(set)
    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    for module, targets in imports.items():
        graph[_part(module)]
        for target, where in targets.items():
            a, b = _part(module), _part(target)
            if a != b:
                graph[a].add(b)
                edges[(a, b)] += where
    loops = _loops(graph)
    assert not loops, ("parts of sdm import each other in a loop; move what the lower one takes into its own layer "
                       "or name it in a Protocol there:\n" + "\n".join(_explain(loop, edges) for loop in loops))


def test_no_module_but_the_command_lines_stands_in_an_import_loop() -> None:
    imports = _read()
    graph = {module: set(targets) for module, targets in imports.items()}
    edges = {(a, b): where for a, targets in imports.items() for b, where in targets.items()}
    loops = [loop for loop in _loops(graph) if not all(m.startswith(LOOPS_ALLOWED) for m in loop)]
    assert not loops, "modules of sdm import each other in a loop:\n" + "\n".join(_explain(loop, edges) for loop in loops)


def test_the_reader_of_imports_sees_a_known_loop() -> None:
    """The check above is not blind: the command line's modules do stand in a loop, and it finds it."""
    imports = _read()
    loops = _loops({module: set(targets) for module, targets in imports.items()})
    assert any("sdm._cli.main" in loop for loop in loops)
