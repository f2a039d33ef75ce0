"""The import layering: the import-linter contracts of ``pyproject.toml`` hold, and no module of
ragen2 takes part in an import circle.

Both read the import graph grimp builds from the source (every import statement, lazy ones inside
functions included; the circle check leaves out annotation-only imports under ``TYPE_CHECKING``),
so nothing is imported or run. ``lint-imports`` in the repository's root
prints the same report as the first test.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grimp
import networkx as nx

ROOT = Path(__file__).resolve().parents[1]


def test_import_linter_contracts_are_kept():
    # in its own process: import-linter's command configures logging and so disables every logger
    # that already exists, ragen2's included, for the rest of a test session
    r = subprocess.run([str(Path(sys.executable).with_name("lint-imports")), "--no-cache"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr


def import_cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components of more than one module (networkx): each is a set of
    modules that import one another in a circle, directly or through each other."""
    g = nx.DiGraph()
    g.add_nodes_from(graph.modules)
    g.add_edges_from((m, other) for m in graph.modules
                     for other in graph.find_modules_directly_imported_by(m))
    return sorted(sorted(c) for c in nx.strongly_connected_components(g) if len(c) > 1)


def test_import_cycles_are_found():
    graph = grimp.ImportGraph()
    for module in ("a", "a.b", "a.c", "a.d", "a.e"):
        graph.add_module(module)
    for importer, imported in (("a.b", "a.c"), ("a.c", "a.d"), ("a.d", "a.b"), ("a.d", "a.e")):
        graph.add_import(importer=importer, imported=imported)
    assert import_cycles(graph) == [["a.b", "a.c", "a.d"]]


def test_no_module_of_ragen2_is_in_an_import_circle():
    # imports under `if TYPE_CHECKING:` are annotations only (never executed): the learner's parts
    # name the LearnerRank facade they receive, which imports them at run time
    graph = grimp.build_graph("ragen2", cache_dir=None, exclude_type_checking_imports=True)
    cycles = import_cycles(graph)
    assert not cycles, "import circles (each a set of modules importing one another): " + "; ".join(
        ", ".join(c) for c in cycles)
