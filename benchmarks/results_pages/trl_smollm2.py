"""The block of the SmolLM2 TRL comparison (issue 46, item 5): ragen2 and TRL's ``GRPOTrainer`` on
SmolLM2-135M-Instruct, one-digit Math, one sitting: step times, held-out success of both final
policies against the base model, training reward; from ``benchmarks/results/trl_grpo_smollm2.json``
(``python benchmarks/trl_grpo.py --model smollm2``): results/real-models.md. Until that file is
committed the block says so."""

from __future__ import annotations

import statistics

from .data import ROOT, f, load, signed, table

DOC = "benchmarks/results/trl_grpo_smollm2.json"
COMMAND = "`python benchmarks/trl_grpo.py --model smollm2 --steps 30`"
SIDES = (("ragen2", "ragen2"), ("trl", "TRL"))
#: training-reward means over this many steps at the start and at the end of each curve
EDGE = 5


def _reward(curve: list[dict]) -> str:
    """Mean training reward over the first and the last :data:`EDGE` steps."""
    r = [c["rollout/reward_mean"] for c in curve if c.get("rollout/reward_mean") is not None]
    if len(r) < 2 * EDGE:
        return "n/a"
    return f"{f(statistics.fmean(r[:EDGE]))} -> {f(statistics.fmean(r[-EDGE:]))}"


def _gain(g: dict) -> str:
    return f"**{signed(g['gain'])} [{signed(g['gain_lo'])}, {signed(g['gain_hi'])}]**"


def smollm2_trl() -> str:
    """Settings, one row a side, the step-time ratio and the paired difference of the two final
    policies."""
    if not (ROOT / DOC).exists():
        return (f"Not run yet: this block will be generated from `{DOC}`, written by {COMMAND} "
                "(nothing else running on the machine).")
    d = load(DOC)
    s, r, m = d["settings"]["settings"], d["results"], d["machine"]
    held = r["held_out"]
    rows = []
    for key, name in SIDES:
        g, steps = held["gain"][key], r[key]["step_s"]
        rows.append([name, f"{r['step_s_median'][key]:.1f} s", f"{sum(steps):,.0f} s",
                     f"{f(g['before'])} -> {f(g['after'])}", _gain(g),
                     f"{g['improved']} / {g['worsened']}", _reward(r[key]["curve"]),
                     f"{r[key]['process']['foreign_cores']:.2f}"])
    diff = held["trl_minus_ragen2"]
    lines = [
        f"{s['steps']} GRPO steps a side, {s['problems']} problems x {s['group_size']} replies a "
        f"step of at most {s['max_new_tokens']} new tokens, compute dtype {s['dtype']}, seed "
        f"{s['seed']}; at commit `{d['settings']['commit'][:7]}` on {m['cpu']} ({m['cpus']} "
        f"cores), TRL {m.get('trl', '?')}, one side after the other. Held-out success is "
        f"ragen2's own evaluation of each model on the same {held['gain']['ragen2']['problems']} "
        "held-out problems (never trained on), paired problem by problem against the base model; "
        "the step time is the median over steps 2 onwards.",
        "",
        table(["side", "median step", "all steps", "held-out success base -> final",
               "gain, paired 95% interval", "problems better / worse",
               f"training reward, first {EDGE} steps -> last {EDGE}",
               "other processes (cores)"], rows),
        "",
        f"TRL / ragen2 step time: **{d['ratios']['trl_over_ragen2']:.2f}**. TRL's final policy "
        f"minus ragen2's on the same held-out problems: {signed(diff['gain'])} "
        f"[{signed(diff['gain_lo'])}, {signed(diff['gain_hi'])}] (better on {diff['improved']}, "
        f"worse on {diff['worsened']} of the {diff['problems']} problems). What the two sides "
        "share and where they cannot match (the samplers, the bf16 mechanism, small numeric "
        "details) is listed in the JSON's `differs` and in `benchmarks/trl_grpo_smollm2.py`.",
    ]
    return "\n".join(lines)
