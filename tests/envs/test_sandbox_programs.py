"""The sandbox's three programs are real files (package data, read as text): each parses, uses
the standard library only, is what ragen2_envs.sandbox runs, and works through the sandbox."""

from __future__ import annotations

import ast
import sys
import tomllib
from importlib.resources import files
from pathlib import Path

import pytest

from ragen2_envs import sandbox
from ragen2_envs.sandbox import SandboxLimits, run_python, sandbox_capabilities

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = {"launcher": "_LAUNCHER", "runner": "_RUNNER", "probe": "_PROBE"}


def _text(name: str) -> str:
    return files("ragen2_envs").joinpath("sandbox_programs").joinpath(f"{name}.py").read_text()


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_each_program_parses_uses_the_standard_library_only_and_is_what_runs(name):
    text = _text(name)
    compile(text, f"sandbox_programs/{name}.py", "exec")
    imported = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module.split(".")[0])
    assert imported and imported <= sys.stdlib_module_names, imported - sys.stdlib_module_names
    assert getattr(sandbox, PROGRAMS[name]) == text


def test_the_programs_are_package_data():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "sandbox_programs/*.py" in data["tool"]["setuptools"]["package-data"]["ragen2_envs"]


@pytest.mark.parametrize("namespaces", [None, False])  # every layer here / the fallback
def test_launcher_and_runner_run_a_program_and_calls(namespaces):
    limits = SandboxLimits(wall_s=20.0)
    res = run_python("def f(a, b):\n    return [a + b, {'s': str(a)}]\n", function="f",
                     calls=[(1, 2), (3, 4)], limits=limits, namespaces=namespaces)
    assert res.status == "ok" and res.payload["complete"] and res.payload["error"] is None, res
    assert [r["value"] for r in res.payload["results"]] == [[3, {"s": "1"}], [7, {"s": "3"}]]
    res = run_python("print('hello from the sandbox')", limits=limits, namespaces=namespaces)
    assert res.status == "ok" and "hello from the sandbox" in res.stdout, res


def test_the_probe_reports_the_layers():
    caps = sandbox_capabilities()
    assert isinstance(caps, dict) and caps and all(isinstance(v, bool) for v in caps.values())
