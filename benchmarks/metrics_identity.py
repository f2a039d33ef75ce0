"""Is a refactor numerically neutral? Run the default job's first steps from two checkouts and
compare every logged metric (issue 29 item 6; issue 31 item 1 at ``trainer.max_staleness=0``).

    # 1. before the change: run the job from a clean checkout of the old commit
    python benchmarks/metrics_identity.py run --checkout /tmp/before --out /tmp/id/before
    # 2. after it, from this checkout
    python benchmarks/metrics_identity.py run --checkout . --out /tmp/id/after
    # 3. compare (writes the JSON document named by --json)
    python benchmarks/metrics_identity.py compare /tmp/id/before /tmp/id/after --json results/x.json

``run`` starts ``ragen2.train`` with the checkout (and links naming its ``envs/`` and ``configs/`` as
``ragen2_envs`` / ``ragen2_configs``) first on ``PYTHONPATH`` (Ray workers and the
learner's spawned ranks inherit it), the default config plus ``trainer.total_steps`` (5) and any
extra overrides, an empty ``RAGEN2_CACHE`` and ``hydra.run.dir=<out>``. ``compare`` reads both
``metrics.jsonl`` files and reports, per metric, the largest absolute and relative difference over
the steps; wall-clock keys (``timing/``, ``*_s`` and throughput) are listed apart and never count.
Identical "to float rounding" means every other metric's relative difference is <= ``--rtol``
(default 1e-6); ``--exact`` asks for bit equality.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

WALL_CLOCK_PREFIXES = ("timing/",)
PACKAGE_DIRS = {"ragen2_envs": "envs", "ragen2_configs": "configs"}
WALL_CLOCK_SUFFIXES = ("_s", "/tokens_per_s", "/episodes_per_s", "_per_s")


def is_wall_clock(key: str) -> bool:
    return key.startswith(WALL_CLOCK_PREFIXES) or key.endswith(WALL_CLOCK_SUFFIXES)


def run(checkout: Path, out: Path, steps: int, overrides: list[str], python: str) -> int:
    checkout = checkout.resolve()
    out = out.resolve()
    env = dict(os.environ)
    # the installed names that map to other folders (pyproject's package-dir): an editable install
    # would resolve them to its own checkout, so they are linked to this one's, first on the path
    shim = Path(tempfile.mkdtemp(prefix="ragen2-identity-path-"))
    for name, folder in PACKAGE_DIRS.items():
        (shim / name).symlink_to(checkout / folder)
    env["PYTHONPATH"] = os.pathsep.join([str(shim), str(checkout), env.get("PYTHONPATH", "")]
                                        ).rstrip(os.pathsep)
    env["RAGEN2_CACHE"] = tempfile.mkdtemp(prefix="ragen2-identity-cache-")
    env.setdefault("RAY_AUTH_MODE", "disabled")
    env.setdefault("RAY_worker_niceness", "0")  # Ray's default 15 starves the run beside other work
    cmd = [python, "-m", "ragen2.train", f"trainer.total_steps={steps}", f"hydra.run.dir={out}",
           *overrides]
    print("+", " ".join(cmd), f"(cwd {checkout}, RAGEN2_CACHE {env['RAGEN2_CACHE']})", flush=True)
    return subprocess.call(cmd, cwd=checkout, env=env)


def _rows(run_dir: Path) -> dict[int, dict[str, float]]:
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        sys.exit(f"metrics_identity: no metrics.jsonl in {run_dir} (is it a run folder?)")
    rows: dict[int, dict[str, float]] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            rows[int(row["step"])] = row
    return rows


def compare(before: Path, after: Path, rtol: float, exact: bool) -> dict:
    a, b = _rows(before), _rows(after)
    steps = sorted(set(a) | set(b))
    missing_steps = sorted(set(a) ^ set(b))
    worst: dict[str, dict[str, float]] = {}
    only_before: set[str] = set()
    only_after: set[str] = set()
    for step in steps:
        ra, rb = a.get(step, {}), b.get(step, {})
        only_before |= set(ra) - set(rb)
        only_after |= set(rb) - set(ra)
        for key in set(ra) & set(rb):
            x, y = ra[key], rb[key]
            if not isinstance(x, (int, float)) or not isinstance(y, (int, float)):
                diff = 0.0 if x == y else math.inf
                rel = diff
            elif math.isnan(x) and math.isnan(y):
                diff = rel = 0.0
            else:
                diff = abs(x - y)
                rel = diff / max(abs(x), abs(y), 1e-12) if diff else 0.0
            w = worst.setdefault(key, {"abs": 0.0, "rel": 0.0, "step": step})
            if rel > w["rel"]:
                w.update(abs=diff, rel=rel, step=step)
    wall = sorted(k for k in worst if is_wall_clock(k))
    checked = {k: v for k, v in worst.items() if not is_wall_clock(k)}
    limit = 0.0 if exact else rtol
    differing = {k: v for k, v in sorted(checked.items()) if v["rel"] > limit}
    bit_identical = sum(1 for v in checked.values() if v["rel"] == 0.0)
    return {
        "before": str(before), "after": str(after), "steps": steps,
        "steps_in_one_only": missing_steps,
        "metrics_compared": len(checked), "bit_identical": bit_identical,
        "rtol": limit, "differing": differing,
        "max_rel_diff": max((v["rel"] for v in checked.values()), default=0.0),
        "only_before": sorted(only_before - set(WALL_CLOCK_PREFIXES)),
        "only_after": sorted(only_after),
        "wall_clock_keys_ignored": wall,
        "identical": not differing and not missing_steps and not only_before,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run the default job's first steps from a checkout")
    r.add_argument("--checkout", type=Path, default=Path("."))
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--steps", type=int, default=5)
    r.add_argument("--python", default=sys.executable)
    r.add_argument("overrides", nargs="*", help="extra Hydra overrides, the same on both sides")
    c = sub.add_parser("compare", help="compare two run folders' metrics.jsonl")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    c.add_argument("--rtol", type=float, default=1e-6)
    c.add_argument("--exact", action="store_true")
    c.add_argument("--json", type=Path, help="write the comparison here")
    args = ap.parse_args()
    if args.cmd == "run":
        sys.exit(run(args.checkout, args.out, args.steps, args.overrides, args.python))
    result = compare(args.before, args.after, args.rtol, args.exact)
    print(f"{result['metrics_compared']} metrics over steps {result['steps']}: "
          f"{result['bit_identical']} bit-identical, max relative difference {result['max_rel_diff']:.3g}; "
          f"{len(result['wall_clock_keys_ignored'])} wall-clock keys ignored")
    for key, v in result["differing"].items():
        print(f"  DIFFERS {key}: |d| {v['abs']:.3g} (rel {v['rel']:.3g}) at step {v['step']}")
    for what in ("only_before", "only_after", "steps_in_one_only"):
        if result[what]:
            print(f"  {what}: {result[what]}")
    print("IDENTICAL" if result["identical"] else "NOT IDENTICAL")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    sys.exit(0 if result["identical"] else 1)


if __name__ == "__main__":
    main()
