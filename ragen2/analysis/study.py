"""A study over arms x seeds: per-run summaries, rank correlations of collapse metrics with success,
curves with seed bands, and reasoning examples.

Input: ``{(arm, seed): run_dir}``, each a ragen2 run directory (``metrics.jsonl``, ``summary.json``,
``rollouts/``); ``seed`` is any label that tells an arm's runs apart (a seed, a job name). Used by
``benchmarks/collapse_study``, and on any Hydra multirun folder through ``ragen2.analysis.arms``
(``ragen2-sweep-report --group-by``, ``ragen2-report MULTIRUN_DIR``).

The unit of replication is the run (:mod:`ragen2.analysis.run_stats`). A correlation is Spearman's
rho (average ranks for ties) computed **per run**, over that run's steps where both metrics were
logged -- held-out success exists at evaluation steps, the collapse metrics at monitor steps, so
held-out pairs come from steps that are both (set ``trainer.eval_every`` to a multiple of
``monitor.every``; a run with fewer than 3 such steps has no rho) -- and summarised over runs:
the median rho with a seeded 95% bootstrap interval over runs (:func:`correlations`). Points of
several runs are never pooled into one test. Arm differences (final success, success gain, final
MI, ...) are differences of arm means over seeds with a bootstrap interval over the runs
(:func:`arm_differences`).

MI curves show the estimate's bound (log of the distinct prompts, ``*mi_bound``) and its floor
(the permutation null's 95th percentile, ``*mi_floor``) on a y-range that holds all three.

Every MI and retrieval value obeys ``monitor.min_samples`` (:mod:`ragen2.collapse.withhold`):
:func:`load_study` reads rows with :func:`ragen2.analysis.rollouts.load_metrics`, which drops a
value measured from fewer samples (runs logged before the rule included), so a series simply has
no point there; :func:`withheld` lists those steps with their logged sample counts.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Hashable
from pathlib import Path
from typing import Any

from ragen2.analysis.rollouts import (final_value, load_metrics, load_rollouts, load_summary,
                                     no_value_steps)

__all__ = ["ARM_DIFF_KEYS", "CORRELATIONS", "SERIES", "arm_differences", "arm_table", "band",
           "correlations", "curves_figure", "load_study", "load_summaries", "merge_runs",
           "mi_ylim", "paired", "per_run_correlations", "reasoning_examples", "run_summary",
           "scatter_figure", "series", "spearman", "withheld", "write_plots"]

#: short name -> metrics.jsonl key of the per-step series the study reports
SERIES = {
    "success": "eval/success",  # held-out, at evaluation steps
    "train_success": "rollout/success",
    "mi": "collapse/mi",
    "mi_null": "collapse/mi_null",  # the mean of the MI estimate's permutation null
    "mi_floor": "collapse/mi_floor",  # its 95th percentile: the floor
    "mi_bound": "collapse/mi_bound",  # log of the distinct prompts: the ceiling
    "panel_turns_mi": "collapse/panel/turns/mi",  # the later-turn probe panel (fixed states)
    "panel_turns_mi_floor": "collapse/panel/turns/mi_floor",
    "panel_turns_mi_bound": "collapse/panel/turns/mi_bound",
    "panel_turns_mi_lo": "collapse/panel/turns/mi_lo",  # its 95% interval over panel prompts
    "panel_turns_mi_hi": "collapse/panel/turns/mi_hi",
    "panel_turns_retrieval": "collapse/panel/turns/retrieval_acc@1",
    "panel_mi": "collapse/panel/mi",  # the first-turn probe panel
    "panel_mi_floor": "collapse/panel/mi_floor",
    "panel_mi_bound": "collapse/panel/mi_bound",
    "turns_mi": "collapse/turns/mi",  # the batch's later turns, one turn drawn per trajectory
    "turns_retrieval": "collapse/turns/retrieval_acc@1",
    "turns_retrieval_4": "collapse/turns/retrieval_acc@4",
    "turns_chance": "collapse/turns/retrieval_chance@1",
    "turns_mi_floor": "collapse/turns/mi_floor",  # its sampled-negatives null's 95th percentile
    "turns_mi_bound": "collapse/turns/mi_bound",
    "panel_turns_reasoning_tokens": "collapse/panel/turns/reasoning_tokens_mean",
    # does the reasoning state the true state (the env's ground hook; ragen2.collapse.grounding)
    "grounded": "collapse/grounding/frac",  # the batch's first turns
    "turns_grounded": "collapse/turns/grounding/frac",  # the batch's later turns
    "turns_grounded_lo": "collapse/turns/grounding/frac_lo",  # 95% interval over prompts
    "turns_grounded_hi": "collapse/turns/grounding/frac_hi",
    "panel_grounded": "collapse/panel/grounding/frac",  # the first-turn probe panel
    "panel_turns_grounded": "collapse/panel/turns/grounding/frac",  # the later-turn panel
    "panel_turns_grounded_lo": "collapse/panel/turns/grounding/frac_lo",
    "panel_turns_grounded_hi": "collapse/panel/turns/grounding/frac_hi",
    # the contrast among inputs of one map that differ in one coordinate (ragen2.collapse.contrast)
    "turns_contrast_col": "collapse/turns/contrast/col/acc@1",  # the batch's later turns
    "turns_contrast_col_chance": "collapse/turns/contrast/col/chance@1",
    "turns_contrast_row": "collapse/turns/contrast/row/acc@1",
    "panel_turns_contrast_col": "collapse/panel/turns/contrast/col/acc@1",  # the panel's sets
    "panel_turns_contrast_col_lo": "collapse/panel/turns/contrast/col/acc@1_lo",
    "panel_turns_contrast_col_hi": "collapse/panel/turns/contrast/col/acc@1_hi",
    "panel_turns_contrast_col_chance": "collapse/panel/turns/contrast/col/chance@1",
    "panel_turns_contrast_row": "collapse/panel/turns/contrast/row/acc@1",
    "action_mi": "collapse/action/mi",  # I(A; Z | X): does the answer follow the reasoning
    "retrieval_acc": "collapse/retrieval_acc@1",
    "h_cond": "collapse/h_cond",
    "token_entropy": "collapse/token_entropy",
    "reward_spread": "rollout/group_reward_std_mean",
    "kept_ratio": "filter/kept_ratio",
    "step_s": "timing/step_s",
    "reasoning_tokens": "collapse/reasoning_tokens_mean",  # first-turn <think> length
    "format_errors": "rollout/format_error_rate",
}

#: name -> (x series, y series): what is correlated with what
CORRELATIONS = {
    "mi_vs_success": ("mi", "success"),
    "panel_turns_mi_vs_success": ("panel_turns_mi", "success"),  # the later-turn probe panel
    "panel_turns_grounded_vs_success": ("panel_turns_grounded", "success"),  # the env's check
    "retrieval_vs_success": ("retrieval_acc", "success"),
    "h_cond_vs_success": ("h_cond", "success"),
    "entropy_vs_success": ("token_entropy", "success"),
    "mi_vs_train_success": ("mi", "train_success"),
    "entropy_vs_train_success": ("token_entropy", "train_success"),
}

Metrics = dict[int, dict[str, Any]]
RunKey = tuple[str, Hashable]  # (arm, seed or job name)


def load_study(run_dirs: dict[RunKey, str | Path]) -> dict[RunKey, Metrics]:
    """``{(arm, seed): metrics by step}`` read with :func:`ragen2.analysis.rollouts.load_metrics`."""
    return {key: load_metrics(path) for key, path in run_dirs.items()}


def series(metrics: Metrics, name: str) -> list[tuple[int, float]]:
    """(step, value) of one :data:`SERIES` entry, in step order (finite values only)."""
    key = SERIES[name]
    out = []
    for step in sorted(metrics):
        v = metrics[step].get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            out.append((step, float(v)))
    return out


def withheld(metrics: Metrics, name: str) -> list[tuple[int, float | None]]:
    """(step, logged sample count or None) of the steps where one :data:`SERIES` entry measured
    but has no value (:func:`ragen2.analysis.rollouts.no_value_steps`: under
    ``monitor.min_samples`` samples, or fewer than 2 prompts with reasoning). [] for a series
    that is no MI measurement (success, token entropy, ...)."""
    return no_value_steps(metrics, SERIES[name])


def run_summary(arm: str, seed: Hashable, metrics: Metrics, summary: dict[str, Any] | None = None,
                ) -> dict[str, Any]:
    """One run's row: first/last held-out success, last collapse metrics (``final_*``: the
    instrument's last measurement, None when it gave no value: too few samples or prompts, see
    :func:`withheld`), means over RL steps."""
    def last(name: str) -> float | None:
        return final_value(metrics, SERIES[name])

    def mean_rl(name: str) -> float | None:  # RL steps only (step 0 is the pre-RL evaluation)
        vals = [v for step, v in series(metrics, name) if step >= 1]
        return statistics.fmean(vals) if vals else None

    success = series(metrics, "success")
    row = {"arm": arm, "seed": seed,
           "initial_success": success[0][1] if success else None,
           "final_success": success[-1][1] if success else None,
           "final_mi": last("mi"), "final_mi_null": last("mi_null"),
           "final_mi_floor": last("mi_floor"), "final_panel_turns_mi": last("panel_turns_mi"),
           "final_retrieval_acc": last("retrieval_acc"),
           "final_turns_mi": last("turns_mi"), "final_turns_retrieval": last("turns_retrieval"),
           "final_panel_mi": last("panel_mi"), "final_action_mi": last("action_mi"),
           "final_turns_grounded": last("turns_grounded"),
           "final_panel_turns_grounded": last("panel_turns_grounded"),
           "final_turns_contrast_col": last("turns_contrast_col"),
           "final_panel_turns_contrast_col": last("panel_turns_contrast_col"),
           "final_format_errors": last("format_errors"),
           "final_reasoning_tokens": last("reasoning_tokens"),
           "final_h_cond": last("h_cond"), "final_token_entropy": last("token_entropy"),
           "mean_reward_spread": mean_rl("reward_spread"), "mean_kept_ratio": mean_rl("kept_ratio"),
           "mean_step_s": mean_rl("step_s"), "steps": max(metrics) if metrics else 0}
    if summary and isinstance(summary.get("eval_after"), (int, float)):
        row["final_success"] = float(summary["eval_after"])
    row["success_gain"] = (row["final_success"] - row["initial_success"]
                           if row["final_success"] is not None and row["initial_success"] is not None
                           else None)
    return row


def paired(metrics: Metrics, x: str, y: str) -> list[tuple[float, float]]:
    """(x, y) at every step where both series have a value."""
    ys = dict(series(metrics, y))
    return [(v, ys[step]) for step, v in series(metrics, x) if step in ys]


def _ranks(xs: list[float]) -> list[float]:
    """1-based ranks, ties sharing their average rank."""
    order = sorted(range(len(xs)), key=xs.__getitem__)
    ranks = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in order[i:j + 1]:
            ranks[k] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(points: list[tuple[float, float]]) -> dict[str, float | int | None]:
    """Spearman's rho (the Pearson correlation of the average ranks) over ``points``, with its
    two-sided p-value from ``scipy.stats.spearmanr`` (None where scipy is not installed).

    rho None when fewer than 3 points or either side is constant (rho undefined).
    """
    n = len(points)
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    if n < 3 or len(set(xs)) < 2 or len(set(ys)) < 2:
        return {"rho": None, "p": None, "n": n}
    rx, ry = _ranks(xs), _ranks(ys)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    rho = cov / math.sqrt(sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry))
    try:
        from scipy.stats import spearmanr
    except ImportError:
        p = None
    else:
        p = float(spearmanr(xs, ys).pvalue)
    return {"rho": max(-1.0, min(1.0, rho)), "p": p, "n": n}


def per_run_correlations(study: dict[RunKey, Metrics], x: str, y: str) -> list[dict[str, Any]]:
    """Spearman of series ``x`` against ``y`` within each run: ``{"arm", "seed", "rho", "n"}``
    per run, in the study's order (rho None below 3 paired steps or for a constant side)."""
    out = []
    for (arm, seed), m in study.items():
        r = spearman(paired(m, x, y))
        out.append({"arm": arm, "seed": seed, "rho": r["rho"], "n": r["n"]})
    return out


def correlations(study: dict[RunKey, Metrics], resamples: int = 2000, seed: int = 0
                 ) -> dict[str, dict[str, Any]]:
    """Every :data:`CORRELATIONS` entry, per run and summarised over runs:
    ``{"rho": median of the per-run rhos, "lo", "hi": 95% bootstrap interval of that median over
    runs (None below 2 runs with a rho), "runs": runs with a rho, "n": paired steps over all runs,
    "per_run": per_run_correlations(...)}``; rho None when no run has one."""
    from ragen2.analysis.run_stats import summarise_over_runs

    out = {}
    for name, (x, y) in CORRELATIONS.items():
        runs = per_run_correlations(study, x, y)
        s = summarise_over_runs([r["rho"] for r in runs], resamples=resamples, seed=seed)
        out[name] = {"rho": s["median"], "lo": s["lo"], "hi": s["hi"], "runs": s["runs"],
                     "n": sum(r["n"] for r in runs), "per_run": runs}
    return out


#: the run-row keys :func:`arm_differences` compares between arms
ARM_DIFF_KEYS = ("final_success", "success_gain", "final_mi", "final_retrieval_acc",
                 "final_panel_turns_mi")


def arm_differences(rows: list[dict[str, Any]], baseline: str, keys: tuple[str, ...] = ARM_DIFF_KEYS,
                    statistic: str = "mean", resamples: int = 2000, seed: int = 0
                    ) -> dict[str, dict[str, dict[str, Any]]]:
    """Per arm other than ``baseline`` and per key: ``run_stats.arm_difference`` of the arm's
    runs (seeds) against the baseline's, ``{"diff", "a", "b", "lo", "hi", "n_a", "n_b",
    "statistic"}``; {} when no row belongs to ``baseline``."""
    from ragen2.analysis.run_stats import arm_difference

    arms = list(dict.fromkeys(r["arm"] for r in rows))
    if baseline not in arms:
        return {}
    base = [r for r in rows if r["arm"] == baseline]
    return {arm: {k: arm_difference([r.get(k) for r in rows if r["arm"] == arm],
                                    [r.get(k) for r in base], statistic=statistic,
                                    resamples=resamples, seed=seed)
                  for k in keys}
            for arm in arms if arm != baseline}


#: the run-row keys :func:`arm_table` summarises by default
ARM_KEYS = ("initial_success", "final_success", "final_mi", "final_retrieval_acc",
            "final_turns_grounded", "final_panel_turns_grounded", "final_token_entropy", "final_reasoning_tokens", "mean_kept_ratio", "mean_step_s")


def arm_table(rows: list[dict[str, Any]], keys: tuple[str, ...] = ARM_KEYS
              ) -> dict[str, dict[str, dict[str, float]]]:
    """Per arm and key: mean, sample std (0 for one seed), min, max over the arm's seeds."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for arm in dict.fromkeys(r["arm"] for r in rows):
        out[arm] = {}
        for k in keys:
            vals = [r[k] for r in rows if r["arm"] == arm and r.get(k) is not None]
            if vals:
                out[arm][k] = {"mean": statistics.fmean(vals),
                               "std": statistics.stdev(vals) if len(vals) > 1 else 0.0,
                               "min": min(vals), "max": max(vals), "n": len(vals)}
    return out


def band(study: dict[RunKey, Metrics], arm: str, name: str
         ) -> tuple[list[int], list[float], list[float], list[float]]:
    """Steps, mean, min, max over the arm's seeds (steps every seed logged)."""
    per_seed = [dict(series(m, name)) for (a, _), m in study.items() if a == arm]
    steps = sorted(set.intersection(*(set(s) for s in per_seed))) if per_seed else []
    vals = [[s[t] for s in per_seed] for t in steps]
    return steps, [statistics.fmean(v) for v in vals], [min(v) for v in vals], [max(v) for v in vals]


CURVE_PANELS = (("success", "held-out success"), ("mi", "MI (nats)"),
                ("panel_mi", "MI at the first turn, fixed panel (nats)"),
                ("panel_turns_mi", "MI at later turns, fixed panel (nats)"),
                ("turns_mi", "MI at later turns, training batch (nats)"),
                ("turns_retrieval", "later-turn retrieval acc@1 (batch)"),
                ("turns_grounded", "later-turn grounded fraction (batch)"),
                ("panel_turns_grounded", "later-turn grounded fraction, fixed panel"),
                ("panel_turns_contrast_col", "later-turn contrast acc@1, column, fixed panel"),
                ("turns_contrast_col", "later-turn contrast acc@1, column (batch)"),
                ("retrieval_acc", "retrieval acc@1"), ("token_entropy", "token entropy (nats)"),
                ("action_mi", "I(A; Z | X), first turn (nats)"),
                ("reward_spread", "group reward std"), ("kept_ratio", "kept ratio"),
                ("train_success", "training success"), ("h_cond", "conditional entropy H(Z|X)"),
                ("step_s", "step time (s)"), ("reasoning_tokens", "first-turn reasoning tokens"),
                ("format_errors", "format error rate (training)"))


#: MI series -> (its floor series, its bound series); a run that logged no floor (the batch's
#: later turns before they had the sampled-negatives null) draws none
MI_PANELS = {"mi": ("mi_floor", "mi_bound"), "panel_mi": ("panel_mi_floor", "panel_mi_bound"),
             "panel_turns_mi": ("panel_turns_mi_floor", "panel_turns_mi_bound"),
             "turns_mi": ("turns_mi_floor", "turns_mi_bound")}


def mi_ylim(values: list[float]) -> tuple[float, float]:
    """A y-range holding 0 and every value (the curve, its floor, its bound), 5% padding."""
    lo, hi = min([0.0, *values]), max([0.0, *values])
    pad = 0.05 * (hi - lo) if hi > lo else 0.05
    return lo - pad, hi + pad


def _bound_line(study: dict[RunKey, Metrics], name: str) -> tuple[list[int], list[float]]:
    """Steps and the largest bound any run logged there (the bound depends on the prompts only)."""
    per_step: dict[int, float] = {}
    for m in study.values():
        for step, v in series(m, name):
            per_step[step] = max(v, per_step.get(step, v))
    steps = sorted(per_step)
    return steps, [per_step[t] for t in steps]


def curves_figure(study: dict[RunKey, Metrics]):
    """Every :data:`CURVE_PANELS` series over steps, per arm: the mean over its runs, band =
    min..max (at the steps every run of the arm logged); a ``matplotlib.figure.Figure``. MI
    panels also draw each arm's floor (the permutation null's 95th percentile, dotted, gid
    ``floor:ARM``) and the bound log(distinct prompts) (grey dashed, gid ``bound``), on a y-range
    holding both (:func:`mi_ylim`)."""
    from matplotlib.figure import Figure

    arms = list(dict.fromkeys(a for a, _ in study))
    rows = -(-len(CURVE_PANELS) // 4)
    fig = Figure(figsize=(19, 3.7 * rows), layout="tight")
    axes = fig.subplots(rows, 4)
    for ax, (name, title) in zip(axes.flat, CURVE_PANELS):
        shown: list[float] = []
        for i, arm in enumerate(arms):
            steps, mean, lo, hi = band(study, arm, name)
            if steps:
                ax.plot(steps, mean, marker="o", ms=3, label=arm, color=f"C{i}")
                ax.fill_between(steps, lo, hi, alpha=0.2, color=f"C{i}")
                shown += lo + hi
            if MI_PANELS.get(name, (None,))[0]:  # at or under the floor: indistinguishable from chance
                steps, mean, _, _ = band(study, arm, MI_PANELS[name][0])
                if steps:
                    ax.plot(steps, mean, ls=":", color=f"C{i}", gid=f"floor:{arm}")
                    shown += mean
        if name in MI_PANELS:
            steps, bound = _bound_line(study, MI_PANELS[name][1])
            if steps:
                ax.plot(steps, bound, ls="--", color="0.5", gid="bound")
            if shown or bound:
                ax.set_ylim(*mi_ylim(shown + bound))
            title += "\n(dotted: floor, null q95; grey dashed: bound log N)"
        if not ax.get_lines():
            ax.text(0.5, 0.5, f"not logged ({SERIES[name]})", ha="center", va="center",
                    transform=ax.transAxes, fontsize="small", color="0.4")
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    for ax in axes.flat[len(CURVE_PANELS):]:
        ax.axis("off")
    axes.flat[0].legend()
    fig.suptitle("per arm: mean over seeds, band = min..max")
    return fig


def scatter_figure(study: dict[RunKey, Metrics], corr: dict[str, dict[str, Any]]):
    """MI and token entropy against held-out success, every run's points, coloured by arm, with
    the median per-run Spearman rho of ``corr`` and its interval over runs in the titles; a
    ``matplotlib.figure.Figure``."""
    from matplotlib.figure import Figure

    arms = list(dict.fromkeys(a for a, _ in study))
    fig = Figure(figsize=(11, 4.5), layout="tight")
    axes = fig.subplots(1, 2)
    for ax, (name, x, label) in zip(axes, (("mi_vs_success", "mi", "MI (nats)"),
                                           ("entropy_vs_success", "token_entropy", "token entropy (nats)"))):
        for i, arm in enumerate(arms):
            pts = [p for (a, _), m in study.items() if a == arm for p in paired(m, x, "success")]
            if pts:
                ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=18, label=arm, color=f"C{i}")
        c = corr.get(name, {})
        rho = "n/a" if c.get("rho") is None else f"{c['rho']:+.2f}"
        if c.get("lo") is not None:
            rho += f" [{c['lo']:+.2f}, {c['hi']:+.2f}]"
        ax.set_title(f"{label} vs held-out success\nmedian per-run Spearman {rho} "
                     f"over {c.get('runs', 0)} runs")
        ax.set_xlabel(label)
        ax.set_ylabel("held-out success")
        ax.grid(alpha=0.3)
    if any(ax.get_legend_handles_labels()[0] for ax in axes):
        axes[0].legend()
    return fig


def write_plots(study: dict[RunKey, Metrics], corr: dict[str, dict[str, Any]],
                out_dir: str | Path, names: tuple[str, str] = ("curves.png", "scatter.png")
                ) -> list[Path]:
    """``curves.png`` (:func:`curves_figure`) and ``scatter.png`` (:func:`scatter_figure`) in
    ``out_dir`` (other file ``names`` if given)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / names[0], out / names[1]]
    for fig, path in ((curves_figure(study), paths[0]), (scatter_figure(study, corr), paths[1])):
        FigureCanvasAgg(fig)
        fig.savefig(path, dpi=110)
    return paths


def reasoning_examples(run_dir: str | Path, per_run: int = 3, step: int | str = "last"
                       ) -> list[dict[str, Any]]:
    """A few saved first-turn reasonings of one run, from distinct prompts (env seeds) at ``step``
    (a step number, or ``"first"`` / ``"last"`` saved step):
    ``{"step", "env_seed", "prompt", "reasoning", "reward"}``."""
    rollouts = load_rollouts(run_dir)
    if not rollouts:
        return []
    if isinstance(step, str):
        if step not in ("first", "last"):
            raise ValueError(f"step {step!r} is invalid; allowed: a step number, 'first' or 'last'")
        step = min(rollouts) if step == "first" else max(rollouts)
    seen, out = set(), []
    for ep in rollouts.get(step, []):
        if ep["env_seed"] in seen or not ep.get("reasoning"):
            continue
        seen.add(ep["env_seed"])
        out.append({"step": step, "env_seed": ep["env_seed"], "prompt": ep.get("prompt"),
                    "reasoning": ep["reasoning"], "reward": ep["reward"]})
        if len(out) == per_run:
            break
    return out


def load_summaries(run_dirs: dict[RunKey, str | Path]) -> dict[RunKey, dict | None]:
    """``summary.json`` of every run (None where the run has none)."""
    return {key: load_summary(path) for key, path in run_dirs.items()}


#: settings that must match for runs of two invocations to belong to one study
STUDY_KEYS = ("steps", "eval_every", "eval_episodes", "monitor_every", "quick", "variant", "design")
#: what :func:`merge_runs` keeps of an earlier run (the analysis recomputes everything else)
RUN_BOOKKEEPING = ("arm", "seed", "returncode", "wall_s", "overrides", "commit", "finished",
                   "warm_start_built", "load_avg_1m_after", "foreign_cores", "foreign_cpu_s")


def merge_runs(previous: dict[str, Any], runs: list[dict[str, Any]], settings: dict[str, Any]
               ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Add this invocation's ``runs`` to an earlier ``results.json`` (``previous``) of the same study.

    Earlier runs of (arm, seed) pairs not rerun now are kept (their bookkeeping fields only; the
    analysis recomputes the rest); a pair run again is replaced. If any of :data:`STUDY_KEYS`
    differs, the earlier runs belong to another study and are dropped. Settings merge their
    ``arms`` and ``seeds``; ``total_wall_s`` becomes the summed ``wall_s`` of the merged runs (a
    replaced run's time no longer counts)."""
    old = previous.get("settings", {})
    if not previous or any(old.get(k) != settings.get(k) for k in STUDY_KEYS):
        return runs, settings
    done = {(r["arm"], r["seed"]) for r in runs}
    kept = [{k: r[k] for k in RUN_BOOKKEEPING if k in r}
            for r in previous.get("runs", []) if (r["arm"], r["seed"]) not in done]
    merged = {**settings, "arms": {**old.get("arms", {}), **settings.get("arms", {})},
              "seeds": sorted({*old.get("seeds", []), *settings.get("seeds", [])}),
              "total_wall_s": sum(r.get("wall_s", 0.0) for r in kept + runs)}
    return kept + runs, merged
