"""A synthetic run directory for the report tests: every metric the report plots, panel files and
a rollout archive.

metrics.jsonl (steps 0..4): evaluations at 0, 2, 4; the monitor at 1..4 with the fixed-panel keys
(MI, its bootstrap interval and floor; retrieval@1 and H(Z|X) with intervals), the action MI, the
filter and tiered SNR keys. Diagnosis: 0 (healthy) at step 2, 1 (template collapse) at step 4;
a collapse alert at step 3, a rollback at step 4.

Panel (steps 1 and 4, prompts p0..p3). Step 1 names the map ("map k has a hole at row k"); step 4
is a template plus the map number. Word 3-grams of step 4 and the share of prompts using them:
    1.00  let me think / me think step / think step by / step by step / by step about /
          step about map                  (every prompt; "step-by-step" is the same words)
    0.75  the goal is                     (p0, p1, p3)
    0.50  goal is near                    (p0, p1)
    0.25  the rest (about map k, goal is far, map 1 the, 1 the goal)
so with min_share 0.5 the mined list is exactly TEMPLATES, in that order (share, then alphabet).
p2's step-1 reasoning carries markup that must come out escaped.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

EVIL = "<script>alert(1)</script><img src=x onerror=alert(2)>"

STEP4 = {
    "p0": ["Let me think step by step about map 0.", "The goal is near."],
    "p1": ["Let me think step by step about map 1. The goal is near!"],
    "p2": ["let me think STEP by step about map 2"],
    "p3": ["Let me think step-by-step about map 3", "the goal is far"],
}
STEP1 = {k: [f"map {i} has a hole at row {i}" + (f" {EVIL}" if k == "p2" else "")]
         for i, k in enumerate(STEP4)}
TEMPLATES = [
    (("by", "step", "about"), 1.0), (("let", "me", "think"), 1.0), (("me", "think", "step"), 1.0),
    (("step", "about", "map"), 1.0), (("step", "by", "step"), 1.0), (("think", "step", "by"), 1.0),
    (("the", "goal", "is"), 0.75), (("goal", "is", "near"), 0.5),
]


def metrics_rows() -> list[dict]:
    rows = [{"step": 0, "eval/success": 0.1}]
    for s in range(1, 5):
        row = {
            "step": s, "rollout/success": 0.2 * s, "collapse/mi": 1.0 / s, "collapse/mi_null": 0.05,
            "collapse/panel/mi": 1.2 / s, "collapse/panel/mi_lo": 1.0 / s,
            "collapse/panel/mi_hi": 1.4 / s, "collapse/panel/mi_floor": 0.04,
            "collapse/retrieval_acc@1": 1.0 / s, "collapse/retrieval_chance@1": 0.25,
            "collapse/panel/retrieval_acc@1": 0.9 / s, "collapse/panel/retrieval_acc@1_lo": 0.8 / s,
            "collapse/panel/retrieval_acc@1_hi": 1.0 / s,
            "collapse/token_entropy": 1.0 - 0.1 * s, "collapse/panel/h_cond": 10.0 + s,
            "collapse/panel/h_cond_lo": 9.0 + s, "collapse/panel/h_cond_hi": 11.0 + s,
            "collapse/action/mi": 0.5, "collapse/action/mi_null": 0.02,
            "collapse/mi_floor": 0.08, "collapse/mi_bound": 2.77, "collapse/panel/mi_bound": 3.47,
            "collapse/action/mi_floor": 0.03, "collapse/action/mi_bound": 1.39,
            "collapse/panel/turns/mi": 0.8 / s, "collapse/panel/turns/mi_lo": 0.6 / s,
            "collapse/panel/turns/mi_hi": 1.0 / s, "collapse/panel/turns/mi_floor": 0.05,
            "collapse/panel/turns/mi_bound": 3.47,
            "collapse/grounding/frac": 1.0, "collapse/panel/grounding/frac": 1.0,
            "collapse/turns/grounding/frac": 1.0 - 0.2 * s,
            "collapse/turns/grounding/frac_lo": 0.9 - 0.2 * s,
            "collapse/turns/grounding/frac_hi": 1.0 - 0.1 * s,
            "collapse/panel/turns/grounding/frac": 0.9 - 0.1 * s,
            "collapse/panel/turns/grounding/frac_lo": 0.8 - 0.1 * s,
            "collapse/panel/turns/grounding/frac_hi": 1.0 - 0.1 * s,
            "collapse/panel/turns/contrast/col/acc@1": 1.0 - 0.1 * s,
            "collapse/panel/turns/contrast/col/acc@1_lo": 0.9 - 0.1 * s,
            "collapse/panel/turns/contrast/col/acc@1_hi": 1.0,
            "collapse/panel/turns/contrast/col/chance@1": 0.5,
            "collapse/turns/contrast/col/acc@1": 0.8,
            "rollout/group_reward_std_mean": 0.4 / s, "rollout/zero_std_group_frac": 0.1 * s,
            "filter/kept_ratio": 1.0 - 0.1 * s, "filter/zero_std_groups": float(s),
            "filter/score_mean": 0.3, "filter/skipped_steps": 0.0,
            "snr/frac_low": 0.5, "snr/frac_medium": 0.3, "snr/frac_high": 0.2, "snr/mean": 0.45,
            "snr/std": 0.1, "snr/threshold_low": 0.5, "snr/threshold_high": 0.7,
            "collapse/alert": 1.0 if s == 3 else 0.0, "collapse/rollback": 1.0 if s == 4 else 0.0,
        }
        if s in (2, 4):
            row.update({"eval/success": 0.1 * s, "collapse/diagnosis": 0.0 if s == 2 else 1.0})
        rows.append(row)
    return rows


def write_metrics(run: Path, rows: list[dict]) -> None:
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def write_panel(run: Path) -> None:
    (run / "panel").mkdir(parents=True, exist_ok=True)
    for step, texts in ((1, STEP1), (4, STEP4)):
        recs = [{"step": step, "key": k, "env": "grid", "prompt": f"the map of {k} <grid>",
                 "reasoning": r, "answers": [f"Right {k}"] * len(r)} for k, r in texts.items()]
        (run / "panel" / f"step_{step:06d}.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in recs))


def write_rollouts(run: Path) -> None:
    """Steps 1 and 4: env seeds 7 and 8, two episodes each (step 4: one template for both)."""
    (run / "rollouts").mkdir(parents=True, exist_ok=True)
    for step in (1, 4):
        eps = []
        for g, seed in enumerate((7, 8)):
            for i in range(2):
                text = (f"seed {seed} sample {i} goes down" if step == 1
                        else f"I always go right first. Seed {seed}.")
                eps.append({"step": step, "group_id": g, "env": "grid", "env_seed": seed,
                            "prompt": f"grid {seed}", "reasoning": text, "actions": ["Down", "Up"],
                            "reward": float(i), "success": bool(i), "kept": True})
        with gzip.open(run / "rollouts" / f"step_{step:06d}.jsonl.gz", "wt") as f:
            f.write("".join(json.dumps(e) + "\n" for e in eps))


def make_run(run: Path, *, panel: bool = True, rollouts: bool = True) -> Path:
    run.mkdir(parents=True, exist_ok=True)
    write_metrics(run, metrics_rows())
    (run / ".hydra").mkdir(exist_ok=True)
    (run / ".hydra" / "overrides.yaml").write_text("- filter=tiered\n- seed=3\n- monitor.every=1\n")
    (run / ".hydra" / "config.yaml").write_text("seed: 3\nfilter:\n  strategy: top_p\n")
    (run / "summary.json").write_text(json.dumps({"eval_before": 0.1, "eval_after": 0.4,
                                                  "steps": 4, "seed": 3, "reason": "<b>stop</b>"}))
    if panel:
        write_panel(run)
    if rollouts:
        write_rollouts(run)
    return run
