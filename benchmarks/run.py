"""Run every benchmark, each in its own subprocess, and print their ratios.

Results go to ``--out-dir`` (default ``benchmarks/results``) as ``<name>.json``, or
``<name>.quick.json`` with ``--quick`` (small settings, a few minutes in all on a quiet 2-core
machine). A benchmark that fails is reported and the rest still run; the exit status is then 1.
Not part of the test suite: nothing here is asserted, ``compare.py`` checks for regressions.

Usage::

    python benchmarks/run.py [--quick] [--only NAME ...] [--out-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent

#: name -> script; the controller benchmarks come first: the first of them builds the default
#: warm start if it is not cached yet, and rollout_overhead then uses it
BENCHMARKS = {
    "filter_step_time": "filter_step_time.py",
    "scaling": "scaling.py",
    "monitor_cost": "monitor_cost.py",
    "trl": "trl_grpo.py",
    "rollout_overhead": "rollout_overhead.py",
    "learner_overhead": "learner_overhead.py",
    "sync": "sync.py",
    "weight_sync": "weight_sync.py",
    "engines": "engines.py",
    "env_throughput": "env_throughput.py",
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", nargs="+", choices=list(BENCHMARKS), metavar="NAME",
                    help=f"a subset of: {' '.join(BENCHMARKS)}")
    ap.add_argument("--out-dir", default=str(HERE / "results"))
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per benchmark")
    args = ap.parse_args()
    names = args.only or list(BENCHMARKS)
    suffix = ".quick" if args.quick else ""
    summary, failed, t_all = [], [], time.perf_counter()
    for name in names:
        print(f"=== {name}", flush=True)
        cmd = [sys.executable, str(HERE / BENCHMARKS[name]), "--out-dir", args.out_dir]
        t0 = time.perf_counter()
        try:
            rc = subprocess.run(cmd + (["--quick"] if args.quick else []), timeout=args.timeout).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
        wall = time.perf_counter() - t0
        out = Path(args.out_dir) / f"{name}{suffix}.json"
        ratios = json.loads(out.read_text())["ratios"] if rc == 0 and out.exists() else {}
        if rc != 0:
            failed.append(name)
        summary.append((name, rc, wall, ratios))
    print(f"\n{'benchmark':<18} {'status':>7} {'wall s':>7}  ratios")
    for name, rc, wall, ratios in summary:
        r = ", ".join(f"{k}={v:.3f}" for k, v in ratios.items())
        print(f"{name:<18} {'ok' if rc == 0 else str(rc):>7} {wall:7.1f}  {r}")
    print(f"total {time.perf_counter() - t_all:.1f} s" + (f"; FAILED: {' '.join(failed)}" if failed else ""))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
