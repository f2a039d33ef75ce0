"""Does SmolLM2-135M-Instruct learn in ragen2 on the CPU? The runs of the ``smollm2_math`` preset,
summarised against issue 28's bar (item 3).

The runs are made with the documented command, one at a time on a quiet machine::

    make train ARGS="+experiment=smollm2_math seed=1"      # then seed=2, ...

and this script reads their run directories (``outputs/DATE/TIME``)::

    python benchmarks/smollm2_learning.py RUN_DIR [RUN_DIR ...]

Per run:

* **held-out success** before RL (step 0) and after (the last evaluation) on the same held-out
  problems with the same evaluation sampling seed, each with a 95% Wilson interval, and
  the **gain with a paired 95% interval**: problem by problem (``evaluations/step_*.jsonl``,
  every episode's outcome), the after-minus-before differences are bootstrapped over problems.
  The bar: gain >= 0.10 and the interval's low end > 0 (``passes``);
* the **curve**: held-out success at every evaluation, training success and the groups with a
  reward spread at every step;
* the **reasoning's input dependence** at the first and the last measurement: the batch's MI
  (``collapse/mi`` and its bound ``log N``), retrieval accuracy@1 (and chance), the probe panel's
  MI with its interval;
* the **weight sync**: the learner-vs-engine logprob gap (``actor/logprob_gap``) at every update
  and the probe's gap against its threshold at every sync (``sync/probe_logprob_gap``);
* what explains a run that does not learn (issue 28 item 5): the reward spread per step
  (``rollout/zero_std_group_frac``), gradient norms, format / invalid-answer rates, PPO KL and
  clip fraction;
* wall time (``summary.json``) and the median per-phase step times.

A run directory written before outcomes were saved per episode (no ``evaluations/``) can be given
its outcome files from ``ragen2 eval`` (``outcomes.jsonl``) as ``RUN_DIR:BEFORE:AFTER``.

Writes ``benchmarks/results/smollm2_learning.json`` and ``smollm2_learning.png`` (``--name`` for
other names).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import RESULTS, machine, median, parse_args, wilson  # noqa: E402  (benchmarks/common.py)

BAR_GAIN = 0.10  # issue 28: every run gains >= 10 points, its interval excluding 0
RESAMPLES = 10_000


def series(r: dict[int, dict[str, float]], key: str) -> dict[int, float]:
    return {s: float(m[key]) for s, m in sorted(r.items()) if key in m}


def ends(r: dict[int, dict[str, float]], key: str, *extra: str) -> dict[str, Any]:
    """The first and the last measurement of ``key`` (with ``extra`` keys of the same rows)."""
    s = series(r, key)
    if not s:
        return {}
    first, last = min(s), max(s)
    return {f"{tag}": {"step": st, key: s[st], **{e: r[st].get(e) for e in extra}}
            for tag, st in (("first", first), ("last", last))}


def paired_gain(before: Path, after: Path) -> dict[str, Any]:
    from ragen2.analysis.run_stats import paired_difference
    from ragen2.rollout.archive import load_outcomes

    b, a = load_outcomes(before), load_outcomes(after)
    d = paired_difference(a, b, "mean", RESAMPLES, seed=0)  # resamples problems
    n = d["n"]
    kb = sum(b[p] for p in a if p in b)
    ka = sum(a[p] for p in a if p in b)
    return {"problems": n, "before": kb / n, "after": ka / n, "gain": d["diff"],
            "gain_lo": d["lo"], "gain_hi": d["hi"], "before_ci": wilson(int(kb), n),
            "after_ci": wilson(int(ka), n), "improved": d["n_above"], "worsened": d["n_below"]}


def summarise(spec: str) -> dict[str, Any]:
    from ragen2.analysis.rollouts import load_metrics

    parts = spec.split(":")
    run = Path(parts[0])
    r = load_metrics(run)
    evals = series(r, "eval/success")
    first, last = min(evals), max(evals)
    if len(parts) == 3:
        before, after = Path(parts[1]), Path(parts[2])
    else:
        before = run / "evaluations" / f"step_{first:06d}.jsonl"
        after = run / "evaluations" / f"step_{last:06d}.jsonl"
    gain = paired_gain(before, after) if before.exists() and after.exists() else {
        "before": evals[first], "after": evals[last], "gain": evals[last] - evals[first],
        "gain_lo": None, "gain_hi": None, "note": "no per-episode outcomes: no paired interval"}
    gain["passes"] = bool(gain["gain"] >= BAR_GAIN and (gain["gain_lo"] or 0) > 0)
    summary = json.loads((run / "summary.json").read_text()) if (run / "summary.json").exists() else {}
    cfg = {}
    hydra = run / ".hydra" / "overrides.yaml"
    if hydra.exists():
        cfg["overrides"] = [x.strip("- \n") for x in hydra.read_text().splitlines() if x.strip()]
    seed = summary.get("seed")
    if seed is None:  # a run still going: its seed override
        seed = next((int(o.split("=", 1)[1]) for o in cfg.get("overrides", [])
                     if o.startswith("seed=")), None)
    steps = [s for s in r if s > 0]
    gaps = series(r, "actor/logprob_gap")
    probe = series(r, "sync/probe_logprob_gap")
    threshold = series(r, "sync/probe_threshold")
    phases = {k: median([r[s][k] for s in steps if k in r[s]])
              for k in ("timing/step_s", "timing/generate_s", "timing/update_s", "timing/sync_s",
                        "timing/monitor_s", "timing/eval_s") if any(k in r[s] for s in steps)}
    panel_s = series(r, "timing/panel_s")
    return {
        "run": str(run), **cfg, "seed": seed, "steps": max(steps, default=0),
        "wall_s": summary.get("wall_s"), "held_out": gain,
        "curve": {"eval_success": evals, "train_success": series(r, "rollout/success"),
                  "spread_groups_frac": {s: 1 - v for s, v in
                                         series(r, "rollout/zero_std_group_frac").items()}},
        "mi": ends(r, "collapse/mi", "collapse/log_n", "collapse/retrieval_acc@1",
                   "collapse/retrieval_chance@1", "collapse/mi_p_value"),
        "panel_mi": ends(r, "collapse/panel/mi", "collapse/panel/mi_lo", "collapse/panel/mi_hi",
                         "collapse/panel/log_n", "collapse/panel/retrieval_acc@1"),
        "sync": {"logprob_gap_max": max(gaps.values(), default=None),
                 "logprob_gap_median": median(list(gaps.values())) if gaps else None,
                 "probe_gap_max": max(probe.values(), default=None),
                 "probe_threshold": max(threshold.values(), default=None),
                 "probe_failures": sum(1 for s, v in probe.items() if v > threshold.get(s, math.inf)),
                 "syncs": len(probe)},
        "learning_signals": {k: series(r, k) for k in (
            "actor/grad_norm", "actor/ppo_kl", "actor/pg_clipfrac", "rollout/format_error_rate",
            "rollout/invalid_action_rate", "rollout/response_tokens_mean")},
        "timing_median_s": phases,
        "timing_panel_s": median(list(panel_s.values())) if panel_s else None,
    }


def plot(runs: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for i, run in enumerate(runs):
        color = f"C{i}"
        ev = {int(k): v for k, v in run["curve"]["eval_success"].items()}
        tr = {int(k): v for k, v in run["curve"]["train_success"].items()}
        ax.plot(list(tr), list(tr.values()), color=color, alpha=0.35, lw=1)
        ax.plot(list(ev), list(ev.values()), "o-", color=color, label=f"seed {run['seed']} held-out")
        n = run["held_out"].get("problems")
        if n:  # Wilson intervals at the two ends
            for st, key in ((min(ev), "before_ci"), (max(ev), "after_ci")):
                lo, hi = run["held_out"][key]
                ax.plot([st, st], [lo, hi], color=color, lw=3, alpha=0.5)
    ax.set_xlabel("RL step")
    ax.set_ylabel("success")
    ax.set_ylim(0, 1)
    n = sorted({str(run["held_out"].get("problems", "?")) for run in runs})
    ax.set_title("SmolLM2-135M-Instruct, one-digit Math (+experiment=smollm2_math)\n"
                 f"dots: {'/'.join(n)} evaluation episodes (bars: 95% Wilson); faint: training batch")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    def extra(ap) -> None:
        ap.add_argument("runs", nargs="+",
                        help="run directories (RUN_DIR or RUN_DIR:BEFORE:AFTER outcome files)")
        ap.add_argument("--name", default="smollm2_learning",
                        help="the results' file name, without .json / .png")

    args = parse_args(__doc__, extra)
    runs = [summarise(s) for s in args.runs]
    out = Path(args.out_dir)
    doc = {"benchmark": "smollm2_learning", "quick": False, "machine": machine(),
           "settings": {"bar_gain": BAR_GAIN, "resamples": RESAMPLES,
                        "command": 'make train ARGS="+experiment=smollm2_math seed=S"'},
           "results": runs,
           "all_pass": all(r["held_out"]["passes"] for r in runs)}
    (out / f"{args.name}.json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
    plot(runs, out / f"{args.name}.png")
    for r in runs:
        h = r["held_out"]
        lo = "n/a" if h["gain_lo"] is None else f"[{h['gain_lo']:+.3f}, {h['gain_hi']:+.3f}]"
        print(f"seed {r['seed']}: {h['before']:.3f} -> {h['after']:.3f}  gain {h['gain']:+.3f} "
              f"{lo}  {'PASS' if h['passes'] else 'below the bar'}  wall {r['wall_s'] or 0:.0f} s")


if __name__ == "__main__":
    main()
