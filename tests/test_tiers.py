"""The test tiers' rules, read from the test files' source (README "Development").

* A test that starts a training run in its own process (``train``, ``Controller``, or a helper of
  the tests that calls them, followed through the tests' own functions) is in tier 2 (marked
  ``e2e``) or is tier 1's smoke (``smoke``), its tier visible in its own file (a ``pytestmark`` or
  a decorator), and it joins a shared fixture (a run computed once, asserted on by many tests)
  unless its docstring says why it cannot, in a sentence starting "Own run".
* A test that launches the trainer's command line (a string naming ``ragen2.train``,
  ``ragen2-train`` or the collapse study, in the test or its helpers, docstrings aside) says in
  its docstring either why it needs a run of its own ("Own run: ...", and then it is marked
  ``e2e``) or that it starts none ("No run: ...", e.g. the command line refuses a bad config
  before anything starts, or a stand-in replaces the trainer).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
STARTERS = {"train", "Controller"}
COMMANDS = ("ragen2.train", "ragen2-train", "ragen2 train", "collapse_study")
TIER_MARKS = {"e2e", "smoke"}


def _functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}


def _called(fn: ast.AST) -> set[str]:
    out = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Call):
            f = node.func
            out.add(f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else "")
    return out


def _names_a_command(fn: ast.FunctionDef) -> bool:
    """A string of ``fn``'s code (its docstring aside) names the trainer's command line."""
    body = fn.body[1:] if ast.get_docstring(fn) is not None else fn.body
    return any(isinstance(n, ast.Constant) and isinstance(n.value, str)
               and any(c in n.value for c in COMMANDS) for stmt in body for n in ast.walk(stmt))


def _is_fixture(fn: ast.FunctionDef) -> bool:
    return any("fixture" in ast.unparse(d) for d in fn.decorator_list)


def _closure(helpers: dict[str, ast.FunctionDef], seeds: set[str], direct) -> set[str]:
    """``seeds`` plus every helper that calls one of them or satisfies ``direct``, transitively."""
    found = set(seeds)
    changed = True
    while changed:
        changed = False
        for name, fn in helpers.items():
            if name not in found and (_called(fn) & found or direct(fn)):
                found.add(name)
                changed = True
    return found


def run_starters(trees: dict[str, ast.Module]) -> tuple[set[str], set[str]]:
    """Names of the functions that start an in-process run, and of the tests' helpers that launch
    the trainer's command line (in any file, transitively)."""
    helpers = {name: fn for tree in trees.values() for name, fn in _functions(tree).items()
               if not name.startswith("test_") and not _is_fixture(fn)}
    return (_closure(helpers, set(STARTERS), lambda fn: False),
            _closure(helpers, set(), _names_a_command))


def _marks(nodes: list[ast.expr]) -> set[str]:
    out = set()
    for d in nodes:
        for node in ast.walk(d):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) \
                    and node.value.attr == "mark":
                out.add(node.attr)
    return out


def _module_marks(tree: ast.Module) -> set[str]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in node.targets):
            value = node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]
            return _marks(value)
    return set()


def violations(trees: dict[str, ast.Module]) -> list[str]:
    """Every test outside the tiers' rules, one line each."""
    in_process, cli = run_starters(trees)
    out = []
    for path, tree in sorted(trees.items()):
        module = _module_marks(tree)
        for name, fn in _functions(tree).items():
            if not name.startswith("test_") or _is_fixture(fn):
                continue
            where, doc = f"{path}::{name}", (ast.get_docstring(fn) or "").lower()
            tiered = bool((module | _marks(fn.decorator_list)) & TIER_MARKS)
            calls = _called(fn)
            if calls & in_process:
                if not tiered:
                    out.append(f"{where} starts a training run but is marked neither e2e nor smoke")
                if "own run" not in doc:
                    out.append(f"{where} starts a training run of its own: join a shared fixture, "
                               "or say why it cannot in its docstring ('Own run: ...')")
            elif calls & cli or _names_a_command(fn):
                if "own run" in doc and not tiered:
                    out.append(f"{where} launches a training run but is marked neither e2e nor smoke")
                elif "own run" not in doc and "no run" not in doc:
                    out.append(f"{where} launches the trainer's command line: say in its docstring "
                               "why it needs a run of its own ('Own run: ...') or that it starts "
                               "none ('No run: ...')")
    return out


def _trees() -> dict[str, ast.Module]:
    return {str(p.relative_to(TESTS.parent)): ast.parse(p.read_text())
            for p in sorted(TESTS.rglob("*.py"))}


def test_every_training_run_is_in_a_tier_and_shared_or_justified():
    assert violations(_trees()) == []


HELPERS = '''
def step1(x):
    return train(x)

def cli(d):
    """ragen2-train"""
    return ["python", "-m", "ragen2.train"]

def doc_only():
    """ragen2-train"""
'''

TESTS_SRC = '''
import pytest

def test_direct():
    train(cfg)

def test_helper():
    step1(1)

@pytest.mark.e2e
def test_cli():
    cli(2)

@pytest.mark.e2e
def test_justified():
    """Own run: it kills its run."""
    cli(2)

def test_untiered_cli():
    """Own run: it kills its run."""
    cli(2)

def test_refusal():
    """No run: refused at config time."""
    cli(2)

def test_docstring_names_it():
    """Runs ragen2-train? No."""
    doc_only()

def test_fixture_user(four_steps):
    assert four_steps

@pytest.fixture
def shared():
    return train(cfg)
'''


def test_the_rule_finds_runs_direct_indirect_and_by_command_line():
    found = violations({"helpers": ast.parse(HELPERS), "tests": ast.parse(TESTS_SRC)})
    assert sorted({line.split(" ")[0] for line in found}) == [
        "tests::test_cli", "tests::test_direct", "tests::test_helper", "tests::test_untiered_cli"]
    untiered = sorted(line.split(" ")[0] for line in found if "neither e2e nor smoke" in line)
    assert untiered == ["tests::test_direct", "tests::test_helper", "tests::test_untiered_cli"]


@pytest.mark.parametrize("marks, ok", [("pytestmark = pytest.mark.e2e", True),
                                        ("pytestmark = [pytest.mark.e2e, pytest.mark.vllm]", True),
                                        ("pytestmark = pytest.mark.smoke", True),
                                        ("pytestmark = pytest.mark.vllm", False)])
def test_the_tier_may_be_the_module_mark(marks, ok):
    src = f'import pytest\n{marks}\n\ndef test_x():\n    """Own run: because."""\n    train(1)\n'
    assert (violations({"t": ast.parse(src)}) == []) is ok
