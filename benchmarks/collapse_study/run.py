"""The collapse study: RAGEN-2's central claims in miniature on the CPU (tiny model, FrozenLake).

Arms (the same steps and rollouts per step in every arm; filtering trains on fewer of them):

* ``none``: GRPO, no filtering;
* ``top_p``: top-p SNR filtering on group reward spread (p = 0.9, zero-spread groups dropped);
* ``tiered``: tiered SNR filtering (priority pool, low/high weights, hotter sampling of
  low-spread prompts);
* ``reg`` (optional, ``--arms reg``): no filtering with a strong entropy bonus and KL term, the
  regulariser-heavy baseline.

Every run is ``ragen2-train`` from the default job's cached warm start, for ``--seeds`` seeds:
held-out success every ``eval_every`` steps on ``eval_episodes`` held-out seeds, the MI monitor
every 5 steps (so every evaluation step has both), each step's batch saved. Then
:mod:`ragen2.analysis.study` writes ``results.json`` (per-run rows, per-arm means, Spearman
correlations per run summarised over runs, arm differences against ``none`` with bootstrap
intervals over seeds, a headline), ``curves.png``, ``scatter.png`` and ``examples.md`` to ``--out``.

Usage::

    python benchmarks/collapse_study/run.py                 # 3 arms x 3 seeds x 40 steps (38 min)
    python benchmarks/collapse_study/run.py --quick         # 3 arms x 1 seed x 2 steps (smoke test)
    python benchmarks/collapse_study/run.py --analyze-only  # redo the analysis of existing runs
    python benchmarks/collapse_study/run.py --arms reg      # add an arm; earlier arms' runs are kept
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ARMS = {"none": ["filter=none"], "top_p": ["filter=top_p"], "tiered": ["filter=tiered"],
        # optional: strong input-agnostic regularisers (an entropy bonus and a KL pull to the warm
        # start) that dominate the gradient when most groups have no reward spread
        "reg": ["filter=none", "algorithm.entropy_coef=0.05", "algorithm.kl_coef=0.1"]}
DEFAULT_ARMS = ["none", "top_p", "tiered"]
#: the task every arm trains on: overrides added to every run (``--variant``)
VARIANTS = {
    "default": [],  # the default job (at STUDY_BASE): FrozenLake 4x4, fixed start and goal
    # start and goal drawn per seed and stated in the prompt, and a warm start long enough for the
    # tiny model to copy them into its reasoning: first-turn MI starts at its bound log N
    "random_start": ["env.kwargs.random_start_goal=true", "trainer.warm_start.episodes=2048",
                     "trainer.warm_start.epochs=2", "trainer.warm_start.batch_size=16",
                     "trainer.warm_start.lr=3e-3", "trainer.warm_start.random_action_prob=0"],
}
FULL = {"steps": 40, "eval_every": 10, "eval_episodes": 128, "monitor_every": 5, "seeds": [0, 1, 2]}
# the CI smoke test of this script: every arm and the whole analysis, at the smallest budget that
# still has a warm-started policy and a probe panel to measure
QUICK = {"steps": 2, "eval_every": 1, "eval_episodes": 8, "monitor_every": 1, "seeds": [0],
         "extra": ["trainer.warm_start.episodes=64", "monitor.panel_size=4",
                   "monitor.panel_samples=2"]}


#: the default job's batch and warm start as they were when the committed results were measured
#: (issue 14 then made the default 16 groups and 3 warm-start epochs): the study stays reproducible
STUDY_BASE = ["rollout.env_groups=8", "trainer.warm_start.epochs=1"]


def overrides(arm: str, seed: int, s: dict) -> list[str]:
    return [*STUDY_BASE, *VARIANTS[s["variant"]], *ARMS[arm], f"seed={seed}",
            f"trainer.total_steps={s['steps']}",
            f"trainer.eval_every={s['eval_every']}", f"trainer.eval_episodes={s['eval_episodes']}",
            f"monitor.every={s['monitor_every']}", "trainer.save_every=0",
            "trainer.save_rollouts_every=1", "trainer.loggers=[jsonl]", *s.get("extra", [])]


def run_one(arm: str, seed: int, s: dict, run_dir: Path) -> dict:
    """``ragen2-train`` in a subprocess (its own Ray session); returns wall time and exit code."""
    cmd = [str(Path(sys.executable).with_name("ragen2-train")), *overrides(arm, seed, s),
           f"hydra.run.dir={run_dir}"]
    t0 = time.perf_counter()
    with open(run_dir.parent / f"{run_dir.name}.log", "w") as log:
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, check=False).returncode
    wall = time.perf_counter() - t0
    print(f"  {arm} seed {seed}: exit {rc}, {wall:.0f} s", flush=True)
    return {"arm": arm, "seed": seed, "returncode": rc, "wall_s": wall, "overrides": overrides(arm, seed, s)}


def fmt(v: float | None, digits: int = 3) -> str:
    return "n/a" if v is None else f"{v:.{digits}f}"


def headline(table: dict, corr: dict, metrics: dict, corr_default: dict | None = None) -> str:
    from ragen2.analysis.study import series

    def rho(c: dict) -> str:  # the median of the per-run rhos, its bootstrap interval over runs
        if c["rho"] is None:
            return "n/a"
        ci = "" if c["lo"] is None else f" [{c['lo']:+.2f}, {c['hi']:+.2f}]"
        return f"{c['rho']:+.2f}{ci} (median over {c['runs']} runs)"

    def both(cs: dict) -> str:
        return f"MI {rho(cs['mi_vs_success'])}, token entropy {rho(cs['entropy_vs_success'])}"

    if corr_default:
        parts = [f"per-run Spearman vs held-out success, {'/'.join(DEFAULT_ARMS)} runs: "
                 f"{both(corr_default)}",
                 f"all runs: {both(corr)}"]
    else:
        parts = [f"per-run Spearman vs held-out success: {both(corr)}"]
    mi = [abs(v) for m in metrics.values() for _, v in series(m, "mi")]
    bound = [row["collapse/log_n"] for m in metrics.values() for row in m.values()
             if isinstance(row.get("collapse/log_n"), (int, float))]
    if mi:
        parts.append(f"largest |MI| at any monitor step of any run: {max(mi):.4f} nats"
                     + (f" (bound log N = {max(bound):.2f})" if bound else ""))
    finals = ", ".join(f"{arm} {fmt(t.get('final_success', {}).get('mean'))}"
                       for arm, t in table.items())
    parts.append(f"final held-out success (mean over seeds): {finals}")
    steps = {arm: t.get("mean_step_s", {}).get("mean") for arm, t in table.items()}
    if steps.get("none"):
        parts.append("step time vs none: " + ", ".join(
            f"{arm} {v / steps['none']:.2f}" for arm, v in steps.items() if arm != "none" and v))
    return "; ".join(parts)


def analyze(out: Path, runs: list[dict], settings: dict) -> dict:
    from ragen2.analysis import study

    dirs = {(r["arm"], r["seed"]): out / "runs" / f"{r['arm']}_s{r['seed']}" for r in runs
            if r["returncode"] == 0}
    metrics = study.load_study(dirs)
    summaries = study.load_summaries(dirs)
    order = list(settings.get("arms", {}))
    rows = []
    for r in sorted(runs, key=lambda r: (order.index(r["arm"]) if r["arm"] in order else len(order),
                                         r["seed"])):
        key = (r["arm"], r["seed"])
        row = {**r}
        if key in metrics:
            row.update(study.run_summary(*key, metrics[key], summaries[key]))
        rows.append(row)
    corr = study.correlations(metrics)
    by_arm = {arm: study.correlations({k: m for k, m in metrics.items() if k[0] == arm})
              for arm in dict.fromkeys(a for a, _ in metrics)}
    default = {k: m for k, m in metrics.items() if k[0] in DEFAULT_ARMS}
    corr_default = study.correlations(default) if default and len(default) < len(metrics) else None
    table = study.arm_table([r for r in rows if r["returncode"] == 0])
    # arm minus none, mean over seeds, with a bootstrap interval over the runs (seeds)
    diffs = study.arm_differences([r for r in rows if r["returncode"] == 0 and "arm" in r], "none")
    plots = study.write_plots(metrics, corr, out) if metrics else []
    result = {"settings": settings, "machine": {"python": platform.python_version(),
                                                "cpus": os.cpu_count()},
              "runs": rows, "arms": table, "spearman": corr,
              **({"spearman_default_arms": corr_default} if corr_default else {}),
              "spearman_by_arm": by_arm, "arm_differences_vs_none": diffs,
              "headline": headline(table, corr, metrics, corr_default),
              "plots": [p.name for p in plots]}
    (out / "results.json").write_text(json.dumps(result, indent=1, default=str))
    write_examples(out, rows, dirs)
    print(result["headline"], flush=True)
    return result


def write_examples(out: Path, rows: list[dict], dirs: dict) -> None:
    """First-turn reasoning at the first and the last saved step of the runs with the lowest and
    the highest final MI (with its permutation floor: at this scale the two may not differ)."""
    from ragen2.analysis.study import reasoning_examples

    scored = [r for r in rows if r.get("final_mi") is not None]
    if not scored:  # said, not left out: a reader of the folder sees why there are no examples
        (out / "examples.md").write_text("# Reasoning examples\n\nNo run logged a first-turn MI "
                                         "(no monitor step with first-turn reasoning).\n")
        return
    lines = ["# Reasoning examples", "",
             ("First-turn `<think>` text at the first and the last saved step, distinct prompts "
              "(env seeds)."), ""]
    low, high = min(scored, key=lambda r: r["final_mi"]), max(scored, key=lambda r: r["final_mi"])
    for title, r in (("lowest final MI", low), ("highest final MI", high)):
        floor = r.get("final_mi_null")
        lines += [(f"## {title}: {r['arm']} seed {r['seed']} (MI {r['final_mi']:.4f} nats, "
                   f"permutation floor {fmt(floor, 4)}; held-out success "
                   f"{fmt(r.get('initial_success'))} -> {fmt(r.get('final_success'))})"), ""]
        for which in ("first", "last"):
            for ex in reasoning_examples(dirs[(r["arm"], r["seed"])], step=which):
                prompt = (ex["prompt"] or "").strip().replace("\n", " / ")
                lines += [f"- step {ex['step']}, env seed {ex['env_seed']}, reward {ex['reward']:.2f}",
                          f"  - observation: `{prompt[:160]}`",
                          f"  - reasoning: `{ex['reasoning'][:300]}`"]
        lines.append("")
    (out / "examples.md").write_text("\n".join(lines))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="3 arms x 1 seed x 2 steps (CI smoke test)")
    ap.add_argument("--out", type=Path, default=None,
                    help="output directory (default: benchmarks/collapse_study/results[_quick])")
    ap.add_argument("--seeds", type=int, nargs="+", default=None)
    ap.add_argument("--arms", nargs="+", choices=sorted(ARMS), default=DEFAULT_ARMS)
    ap.add_argument("--variant", choices=sorted(VARIANTS), default="default",
                    help="the task: the default job, or random_start (results_random_start/)")
    ap.add_argument("--analyze-only", action="store_true", help="reuse the runs in --out")
    args = ap.parse_args()
    s = {**(QUICK if args.quick else FULL), "variant": args.variant}
    if args.seeds:
        s["seeds"] = args.seeds
    suffix = ("_quick" if args.quick else "") + ("" if args.variant == "default" else f"_{args.variant}")
    out = args.out or HERE / f"results{suffix}"
    (out / "runs").mkdir(parents=True, exist_ok=True)
    previous = json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else {}
    if args.analyze_only:
        if not previous:
            ap.error(f"--analyze-only: no {out / 'results.json'} to reanalyse")
        runs, settings = previous["runs"], previous["settings"]
    else:
        settings = {**s, "arms": {a: ARMS[a] for a in args.arms}, "quick": args.quick,
                    "env": f"ragen2/FrozenLake-v0, {args.variant}: {VARIANTS[args.variant] or 'default job'}"}
        t0 = time.perf_counter()
        runs = [run_one(arm, seed, s, out / "runs" / f"{arm}_s{seed}")
                for seed in s["seeds"] for arm in args.arms]
        settings["total_wall_s"] = time.perf_counter() - t0
        from ragen2.analysis.study import merge_runs

        runs, settings = merge_runs(previous, runs, settings)
    analyze(out, runs, settings)
    failed = [f"{r['arm']} seed {r['seed']}" for r in runs if r["returncode"] != 0]
    if failed:
        print(f"failed runs: {', '.join(failed)} (logs in {out / 'runs'})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
