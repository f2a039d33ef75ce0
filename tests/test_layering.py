"""The import layering: the import-linter contracts of ``pyproject.toml`` hold, no module of ragen2
takes part in an import circle, and docs/development.md lists the layers the contract checks.

The circle check reads every ``import`` statement of ``ragen2/`` with :mod:`ast`: at module level,
inside functions (lazy imports) and under ``if TYPE_CHECKING:`` (annotation-only imports count:
a module that names another's type belongs above it), so nothing is imported or run.
``lint-imports`` in the repository's root prints the same report as the first test.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from collections import deque
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: module -> {imported module: line of the first import statement}
Graph = dict[str, dict[str, int]]


def test_import_linter_contracts_are_kept():
    # in its own process: import-linter's command configures logging and so disables every logger
    # that already exists, ragen2's included, for the rest of a test session
    r = subprocess.run([str(Path(sys.executable).with_name("lint-imports")), "--no-cache"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr


# ------------------------------------------------------------------------------ the module graph
def _modules(package_dir: Path) -> dict[str, tuple[Path, bool]]:
    """{dotted name: (file, is a package)} of every module under ``package_dir``."""
    out = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return out


def import_graph(package_dir: Path) -> Graph:
    """Which module of the package imports which other one (and where first), from every import
    statement of its source: module level, inside functions and classes, and under
    ``if TYPE_CHECKING:``. ``from a import b`` is an import of module ``a.b`` where that module
    exists, else of ``a``; a name outside the package is left out."""
    modules = _modules(package_dir)

    def known(name: str) -> str | None:  # the module itself, or the package that holds it
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: Graph = {m: {} for m in modules}
    for module, (path, is_package) in modules.items():
        here = module if is_package else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [known(a.name) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the package ``level - 1`` above this one
                    parent = here.split(".")[:len(here.split(".")) - node.level + 1]
                    base = ".".join(parent + ([node.module] if node.module else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else known(base)
                           for a in node.names]
            else:
                continue
            for target in targets:
                if target is not None and target != module:
                    graph[module].setdefault(target, node.lineno)
    return graph


def strongly_connected(graph: Graph) -> list[list[str]]:
    """Tarjan's algorithm (iterative): the strongly connected sets of more than one module, each
    sorted: every module in one imports every other, directly or through the others."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)

    for root in sorted(graph):
        if root in index:
            continue
        visit(root)
        work = [(root, iter(sorted(graph[root])))]
        while work:
            v, edges = work[-1]
            for w in edges:
                if w not in index:
                    visit(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:  # every edge of v seen: close it
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[v])
                if low[v] == index[v]:
                    component = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        component.append(w)
                        if w == v:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return sorted(found)


def one_circle(graph: Graph, component: list[str]) -> str:
    """A shortest import circle through the component's first module, with the lines:
    ``a -> b (line 3) -> a (line 7)``."""
    inside, start = set(component), component[0]
    previous: dict[str, str] = {}
    queue = deque([start])
    while queue:
        v = queue.popleft()
        for w in sorted(graph[v]):
            if w not in inside:
                continue
            if w == start:
                path = [v]
                while path[-1] != start:
                    path.append(previous[path[-1]])
                path.reverse()
                steps = [f"{b} (line {graph[a][b]} of {a})"
                         for a, b in zip(path, path[1:] + [start])]
                return " -> ".join([start] + steps)
            if w not in previous:
                previous[w] = v
                queue.append(w)
    raise AssertionError(f"{component} is not a circle")


def circles_report(graph: Graph) -> str:
    return "; ".join(f"{{{', '.join(c)}}}: {one_circle(graph, c)}"
                     for c in strongly_connected(graph))


def test_strongly_connected_sets_are_found():
    graph = {"a": {"b": 1}, "b": {"c": 2}, "c": {"a": 3, "d": 4}, "d": {"e": 5}, "e": {"d": 6},
             "f": {"a": 7}, "g": {}}
    assert strongly_connected(graph) == [["a", "b", "c"], ["d", "e"]]
    assert one_circle(graph, ["a", "b", "c"]) == (
        "a -> b (line 1 of a) -> c (line 2 of b) -> a (line 3 of c)")
    assert strongly_connected({"a": {"b": 1}, "b": {}, "c": {"a": 1}}) == []


def test_lazy_and_type_checking_imports_close_a_circle(tmp_path):
    """The graph counts an import inside a function and one under ``if TYPE_CHECKING:``."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from pkg.sub import b\n")
    (pkg / "sub" / "b.py").write_text("from typing import TYPE_CHECKING\n\n"
                                      "if TYPE_CHECKING:\n    from .c import C\n")
    (pkg / "sub" / "c.py").write_text("import os\nimport pkg.a\n")
    graph = import_graph(pkg)
    assert graph["pkg.a"] == {"pkg.sub.b": 2} and graph["pkg.sub.b"] == {"pkg.sub.c": 4}
    assert graph["pkg.sub.c"] == {"pkg.a": 2}
    assert strongly_connected(graph) == [["pkg.a", "pkg.sub.b", "pkg.sub.c"]]
    assert "pkg.a -> pkg.sub.b (line 2 of pkg.a)" in circles_report(graph)
    (pkg / "sub" / "c.py").write_text("import os\n")
    assert strongly_connected(import_graph(pkg)) == []


def test_no_module_of_ragen2_is_in_an_import_circle():
    graph = import_graph(ROOT / "ragen2")
    assert len(graph) > 100 and "ragen2.learner.rank" in graph["ragen2.learner.group"]
    assert not strongly_connected(graph), (
        "import circles (each a set of modules importing one another, lazy and TYPE_CHECKING "
        "imports counted; move the shared part down a layer): " + circles_report(graph))


# ------------------------------------------------------------------------------ the layer list
def contract_layers() -> list[list[str]]:
    """The layers contract of pyproject.toml, top to bottom, each layer's modules."""
    linter = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (layers,) = [c for c in linter["contracts"] if c["type"] == "layers"]
    assert layers["containers"] == ["ragen2"] and not layers.get("ignore_imports")
    return [[m.strip() for m in line.split("|")] for line in layers["layers"]]


def documented_layers(text: str) -> list[list[str]]:
    """The layer list of docs/development.md: the ``text`` block after its ``<!-- layers -->``
    marker, one layer a line, top to bottom."""
    block = re.search(r"<!-- layers[^>]*-->\s*```text\n(.*?)```", text, re.S)
    assert block, "docs/development.md has no layer list (a ```text block after <!-- layers -->)"
    return [[m.strip() for m in line.split("|")] for line in block.group(1).splitlines()
            if line.strip()]


def test_the_layers_are_strict():
    """No two modules of a layer may import each other (``:`` would allow it), and none is
    exempt: every layer is one module or independent ``|`` siblings."""
    for layer in contract_layers():
        assert all(re.fullmatch(r"[a-z_]+", m) for m in layer), layer


def test_the_development_page_lists_the_contracts_layers():
    documented = documented_layers((ROOT / "docs" / "development.md").read_text())
    assert [sorted(x) for x in documented] == [sorted(x) for x in contract_layers()]
    top = {p.stem if p.is_file() else p.name for p in (ROOT / "ragen2").iterdir()
           if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()}
    assert {m for layer in documented for m in layer} == top  # every top-level module, once


def test_the_layout_lists_the_modules_in_layer_order():
    """The page's Layout block names ragen2's modules top to bottom, as the layers order them."""
    text = (ROOT / "docs" / "development.md").read_text()
    layout = text[text.index("## Layout"):text.index("### The import layering")]
    floor = {m: i for i, layer in enumerate(contract_layers()) for m in layer}
    named = [m for m in re.findall(r"ragen2/([a-z_]+)(?:\.py|/)", layout) if m in floor]
    assert set(named) == set(floor), set(floor) ^ set(named)  # every one, each once
    assert len(named) == len(floor), named
    assert [floor[m] for m in named] == sorted(floor[m] for m in named), named


def test_a_changed_layer_list_is_caught():
    text = "x\n<!-- layers: pyproject.toml -->\n```text\ncli\ntrain | analysis\nconfig\n```\n"
    assert documented_layers(text) == [["cli"], ["train", "analysis"], ["config"]]
    assert documented_layers(text) != documented_layers(text.replace("cli\n", ""))
