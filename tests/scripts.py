"""Load a script of ``benchmarks/`` as a module, for tests of its pure parts."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load_benchmark(relpath: str, name: str) -> ModuleType:
    """``benchmarks/<relpath>`` executed as module ``name`` (not added to ``sys.modules``)."""
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / relpath)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
