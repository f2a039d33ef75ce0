"""Blocks from ``benchmarks/results/tier1_cold.json``: tier 1 (``make test``) timed on fresh
clones with empty caches, as ``.ci/run`` runs it (issue 43, item 5)."""

from __future__ import annotations

from .data import load

DOC = "benchmarks/results/tier1_cold.json"


def _span(xs: list[float]) -> str:
    lo, hi = min(xs), max(xs)
    return f"{lo:,.0f} s" if round(lo) == round(hi) else f"{lo:,.0f}-{hi:,.0f} s"


def readme_test_row() -> list[str]:
    """The README's ``make test`` row: the cold runs' times against the budget."""
    d = load(DOC)
    runs = d["runs"]
    ok = all(r["exit"] == 0 and r["failed"] == 0 for r in runs)
    return ["`make test`",
            f"{_span([r['pytest_s'] for r in runs])} of pytest, "
            f"{_span([r['wall_s'] for r in runs])} with the venv build "
            f"({len(runs)} cold runs, [measured](docs/development.md); budget 5 and 10 min)",
            ("tier 1, " + ("every run passed" if ok else "a run FAILED")
             + "; `make test-e2e` runs tier 2 (budget 25 min)")]


def tier1_cold() -> str:
    """docs/development.md: the cold tier-1 runs, one line each."""
    d = load(DOC)
    runs = d["runs"]
    lines = [f"- run {r['run']}: exit {r['exit']}, {r['passed']:,} passed, {r['skipped']} skipped, "
             f"{r['failed']} failed; pytest {r['pytest_s']:,.0f} s, {r['wall_s']:,} s with the "
             "venv build" for r in runs]
    return (f"Tier 1 at commit {d['commit']}, {d['date']}, {len(runs)} runs in a row on a "
            f"{d['machine']['cpus']}-core machine ({d['machine']['cpu'] or 'CPU unnamed'}), each "
            f"on a fresh clone with every cache empty; {d['note']}:\n\n" + "\n".join(lines))
