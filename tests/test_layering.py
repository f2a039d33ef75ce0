"""The import layering: the import-linter contracts of ``pyproject.toml`` hold, and no module of
ragen2 takes part in an import circle.

Both read the import graph grimp builds from the source (every import statement, lazy ones inside
functions included), so nothing is imported or run. ``lint-imports`` in the repository's root
prints the same report as the first test.
"""

from __future__ import annotations

from pathlib import Path

import grimp
from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parents[1]


def test_import_linter_contracts_are_kept(capsys):
    code = lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True, no_logo=True)
    assert code == 0, capsys.readouterr().out


def import_cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm): each is a
    set of modules that import one another in a circle, directly or through each other."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, imported = work[-1]
            for other in imported:
                if other not in index:
                    index[other] = low[other] = len(index)
                    stack.append(other)
                    on_stack.add(other)
                    work.append((other, iter(sorted(graph.find_modules_directly_imported_by(other)))))
                    break
                if other in on_stack:
                    low[module] = min(low[module], index[other])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[module])
                if low[module] == index[module]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == module:
                            break
                    if len(component) > 1:
                        cycles.append(sorted(component))
    return cycles


def test_import_cycles_are_found():
    graph = grimp.ImportGraph()
    for module in ("a", "a.b", "a.c", "a.d", "a.e"):
        graph.add_module(module)
    for importer, imported in (("a.b", "a.c"), ("a.c", "a.d"), ("a.d", "a.b"), ("a.d", "a.e")):
        graph.add_import(importer=importer, imported=imported)
    assert import_cycles(graph) == [["a.b", "a.c", "a.d"]]


def test_no_module_of_ragen2_is_in_an_import_circle():
    graph = grimp.build_graph("ragen2", cache_dir=None)
    cycles = import_cycles(graph)
    assert not cycles, "import circles (each a set of modules importing one another): " + "; ".join(
        ", ".join(c) for c in cycles)
