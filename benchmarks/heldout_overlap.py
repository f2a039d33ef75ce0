"""Were the held-out problems of a run held out? Recomputed from a run's committed files.

Before issue 43, held-out evaluation used env seeds >= 2**31 and training seeds < 2**31, but a
problem is a function of its seed, so a small problem space puts the same problem on both sides.
For each run directory this script regenerates every held-out episode's problem from its env seed
(``evaluations/step_*.jsonl``, the env with the run's own ``env.kwargs``), reads every training
prompt the run saw (``rollouts/step_*.jsonl.gz``), and splits the held-out episodes into those
whose problem was never a training prompt and those that were. Per part (and per kind of problem
for one-digit Math: ``a+b``, ``a-b>=0``, ``a-b<0``) it reports success before and after RL and the
gain with a paired 95% interval over episodes (as ``smollm2_learning.py`` does for all of them).

Usage::

    python benchmarks/heldout_overlap.py benchmarks/results/smollm2_runs/seed1 \
        benchmarks/results/smollm2_runs/seed2

Writes ``benchmarks/results/heldout_overlap.json`` (``--out`` for another file).
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import RESULTS, machine  # noqa: E402  (benchmarks/common.py)

RESAMPLES = 10_000
_PROBLEM = re.compile(r"What is (\d+) ([+-]) (\d+)\?")


def kind(prompt: str) -> str:
    """``a+b``, ``a-b>=0`` or ``a-b<0`` for a one-digit Math prompt, ``other`` otherwise."""
    m = _PROBLEM.search(prompt)
    if not m:
        return "other"
    a, op, b = int(m.group(1)), m.group(2), int(m.group(3))
    if op == "+":
        return "a+b"
    return "a-b>=0" if a - b >= 0 else "a-b<0"


def problem(prompt: str) -> str:
    """The problem line of a prompt (its first line: the instructions after it are shared)."""
    return prompt.splitlines()[0].strip()


def run_config(run: Path) -> tuple[str, dict[str, Any]]:
    """The env id and kwargs the run trained with (its resolved Hydra config)."""
    import yaml

    cfg = yaml.safe_load((run / ".hydra" / "config.yaml").read_text())
    return cfg["env"]["id"], dict(cfg["env"].get("kwargs") or {})


def eval_prompts(run: Path, keys: list[tuple[str, int]]) -> dict[tuple[str, int], str]:
    import gymnasium as gym
    import ragen2_envs  # noqa: F401  (registers the envs)

    env_id, kwargs = run_config(run)
    env = gym.make(env_id, **kwargs)
    return {k: env.reset(seed=k[1])[0] for k in keys}


def training_prompts(run: Path) -> set[str]:
    seen: set[str] = set()
    for f in sorted((run / "rollouts").glob("step_*.jsonl.gz")):
        with gzip.open(f, "rt") as fh:
            for line in fh:
                seen.add(problem(json.loads(line)["prompt"]))
    return seen


def paired(before: dict[tuple[str, int], float], after: dict[tuple[str, int], float],
           keys: list[tuple[str, int]]) -> dict[str, Any]:
    from ragen2.analysis.run_stats import paired_difference

    if not keys:
        return {"episodes": 0}
    d = paired_difference({k: after[k] for k in keys}, {k: before[k] for k in keys}, "mean",
                          RESAMPLES, seed=0)
    n = d["n"]
    return {"episodes": n, "before": sum(before[k] for k in keys) / n,
            "after": sum(after[k] for k in keys) / n, "gain": d["diff"], "gain_lo": d["lo"],
            "gain_hi": d["hi"]}


def analyse(run: Path) -> dict[str, Any]:
    from ragen2.rollout.archive import load_outcomes

    evals = sorted((run / "evaluations").glob("step_*.jsonl"))
    before, after = load_outcomes(evals[0]), load_outcomes(evals[-1])
    seeds = sorted(s for s in before if s in after)
    prompts = eval_prompts(run, seeds)
    trained = training_prompts(run)
    never = [s for s in seeds if problem(prompts[s]) not in trained]
    seen = [s for s in seeds if problem(prompts[s]) in trained]
    kinds = sorted({kind(p) for p in prompts.values()})
    return {
        "run": str(run.relative_to(HERE.parent)) if run.is_relative_to(HERE.parent) else str(run),
        "steps": [int(evals[0].stem.split("_")[1]), int(evals[-1].stem.split("_")[1])],
        "held_out_episodes": len(seeds),
        "held_out_distinct_problems": len({problem(prompts[s]) for s in seeds}),
        "distinct_never_trained": len({problem(prompts[s]) for s in never}),
        "distinct_trained_on": len({problem(prompts[s]) for s in seen}),
        "training_distinct_problems": len(trained),
        "all": paired(before, after, seeds),
        "never_trained": paired(before, after, never),
        "trained_on": paired(before, after, seen),
        "by_kind": {k: {"all": paired(before, after, [s for s in seeds if kind(prompts[s]) == k]),
                        "never_trained": paired(before, after,
                                                [s for s in never if kind(prompts[s]) == k])}
                    for k in kinds},
    }


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", help="run directories")
    ap.add_argument("--out", default=str(RESULTS / "heldout_overlap.json"), help="the JSON to write")
    args = ap.parse_args()
    runs = [Path(a).resolve() for a in args.runs]
    doc = {"benchmark": "heldout_overlap", "machine": machine(), "resamples": RESAMPLES,
           "runs": [analyse(r) for r in runs]}
    out = Path(args.out)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    for r in doc["runs"]:
        print(f"{r['run']}: {r['held_out_episodes']} episodes, {r['held_out_distinct_problems']} "
              f"distinct problems, {r['distinct_trained_on']} of them trained on")
        for part in ("all", "never_trained", "trained_on"):
            p = r[part]
            if p["episodes"]:
                print(f"  {part}: {p['episodes']} episodes {p['before']:.3f} -> {p['after']:.3f} "
                      f"gain {p['gain']:+.3f} [{p['gain_lo']:+.3f}, {p['gain_hi']:+.3f}]")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
