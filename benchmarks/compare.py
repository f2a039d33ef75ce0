"""Regression check: a fresh benchmark run against the committed results, on the ratio fields.

Each fresh ``<name>[.quick].json`` is compared with the committed document of the same name (a
quick run with the committed quick results, a full run with the full ones). A ratio regresses
when it moved the wrong way (its ``better`` direction) by more than ``--tolerance`` (15%)
relative to the committed value *and* by more than ``--atol`` (0.01) in absolute terms (so a
monitor share of 0.010 -> 0.012 is noise, not a regression). Goals are shown, not enforced.
Exit status 1 on any regression or failed benchmark.

Usage::

    python benchmarks/compare.py                 # runs `run.py --quick` into a temp dir first
    python benchmarks/compare.py FRESH_DIR       # compares an existing results dir
    python benchmarks/compare.py --only trl sync --baseline-dir benchmarks/results
"""

from __future__ import annotations

import argparse
import json
import operator
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent
OPS = {"<=": operator.le, ">=": operator.ge, "<": operator.lt, ">": operator.gt}


def goal_met(goal: str | None, value: float) -> str:
    """'met' / 'MISSED' for a goal such as '<= 1.05 (note)'; '' without one."""
    if not goal:
        return ""
    op, num = goal.split()[:2]
    return "met" if OPS[op](value, float(num)) else "MISSED"


def compare(fresh: dict, base: dict | None, tol: float, atol: float) -> list[tuple]:
    rows = []
    for k, v in fresh["ratios"].items():
        better = fresh["better"][k]
        b = (base or {}).get("ratios", {}).get(k)
        if b is None:
            verdict, change = "new", float("nan")
        else:
            change = v / b - 1 if b else float("inf")
            worse = v - b if better == "lower" else b - v
            verdict = "REGRESSED" if worse > atol and worse > tol * abs(b) else "ok"
        rows.append((fresh["benchmark"], k, better, b, v, change, verdict,
                     fresh.get("goal", {}).get(k, ""), goal_met(fresh.get("goal", {}).get(k), v)))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("fresh_dir", nargs="?", help="results of a fresh run (default: run --quick now)")
    ap.add_argument("--baseline-dir", default=str(HERE / "results"))
    ap.add_argument("--tolerance", type=float, default=0.15)
    ap.add_argument("--atol", type=float, default=0.01)
    ap.add_argument("--only", nargs="+", metavar="NAME", help="benchmarks to run (with no fresh_dir)")
    args = ap.parse_args()
    run_failed = False
    if args.fresh_dir is None:
        args.fresh_dir = tempfile.mkdtemp(prefix="ragen2-bench-")
        cmd = [sys.executable, str(HERE / "run.py"), "--quick", "--out-dir", args.fresh_dir]
        run_failed = subprocess.run(cmd + (["--only", *args.only] if args.only else [])).returncode != 0
    rows, notes = [], []
    for path in sorted(Path(args.fresh_dir).glob("*.json")):
        fresh = json.loads(path.read_text())
        base_path = Path(args.baseline_dir) / path.name
        base = json.loads(base_path.read_text()) if base_path.exists() else None
        if base is None:
            notes.append(f"{path.name}: no committed baseline in {args.baseline_dir}")
        elif base.get("settings") != fresh.get("settings"):
            notes.append(f"{path.name}: settings differ from the baseline's")
        if base and base["machine"].get("cpu") != fresh["machine"].get("cpu"):
            notes.append(f"{path.name}: baseline measured on {base['machine'].get('cpu')!r} "
                         f"({base['machine'].get('cpus')} cpus)")
        rows.extend(compare(fresh, base, args.tolerance, args.atol))
    print(f"{'benchmark':<17} {'ratio':<38} {'better':<6} {'baseline':>9} {'fresh':>9} "
          f"{'change':>8}  {'verdict':<9} goal")
    for bench, k, better, b, v, change, verdict, goal, met in rows:
        bs = f"{b:9.3f}" if b is not None else f"{'-':>9}"
        print(f"{bench:<17} {k:<38} {better:<6} {bs} {v:9.3f} {change:+8.1%}  {verdict:<9} "
              f"{goal} {met}".rstrip())
    for n in notes:
        print("note:", n)
    bad = [r for r in rows if r[6] == "REGRESSED"]
    print(f"{len(rows)} ratios, {len(bad)} regressed (tolerance {args.tolerance:.0%}, atol {args.atol})"
          + ("; some benchmarks FAILED to run" if run_failed else ""))
    sys.exit(1 if bad or run_failed else 0)


if __name__ == "__main__":
    main()
