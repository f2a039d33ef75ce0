"""The jobs of a sweep grouped into arms by their override values, summarised with ``study``.

Jobs whose overrides give the same values to the ``group_by`` keys form an arm (a job that does
not override a key has the value "(default)" there); the other overrides (the seeds, typically)
tell the arm's jobs apart. An arm's label is ``key=value`` per group-by key, space-separated.
From there everything is ``ragen2.analysis.study`` over ``{(arm, job name): metrics}``: the per
job rows (``run_summary``), per arm mean / std / min / max over its jobs (``arm_table``), the
curves per arm and the per-job Spearman correlations summarised over jobs (``correlations``).

Override syntax: ``key=value`` with an optional leading ``+``, ``++`` or ``~`` (add, force,
delete), which is not part of the key; ``~key`` alone deletes the key (value "(deleted)").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ragen2.analysis import study
from ragen2.analysis.rollouts import load_metrics, load_summary

__all__ = ["ARM_KEYS", "CORRELATION_TITLES", "DEFAULT", "SEED_KEYS", "arm_of", "default_group_by",
           "group_jobs", "jobs_per_arm", "override_values", "parse_group_by", "stat_text",
           "summarise", "swept_keys"]

DEFAULT = "(default)"
SEED_KEYS = ("seed",)  # never an arm key by default: the runs of an arm differ by them
#: the per-job numbers (``study.run_summary``) aggregated per arm, and their titles
ARM_KEYS = {"final_success": "final success", "final_mi": "final MI",
            "final_retrieval_acc": "final retrieval@1",
            "final_panel_turns_grounded": "final later-turn grounding (panel)",
            "final_token_entropy": "final token entropy",
            "mean_kept_ratio": "mean kept ratio", "mean_reward_spread": "mean reward spread",
            "mean_step_s": "mean step s"}
#: the correlations the sweep pages show first (all of ``study.CORRELATIONS`` follow)
CORRELATION_TITLES = {"mi_vs_success": "MI vs held-out success",
                      "panel_turns_grounded_vs_success":
                          "later-turn grounding (panel) vs held-out success",
                      "entropy_vs_success": "token entropy vs held-out success"}


def override_values(overrides: list[str]) -> dict[str, str]:
    """``{"filter.value": "0.5"}`` from ``["filter.value=0.5"]`` (see the module docstring)."""
    out = {}
    for o in overrides:
        key, eq, value = o.partition("=")
        deleted = key.startswith("~")
        key = key.lstrip("+~").strip()
        if key:
            out[key] = value.strip() if eq else ("(deleted)" if deleted else "")
    return out


def swept_keys(overrides: list[list[str]]) -> list[str]:
    """Keys whose value is not the same in every job (missing counts as a value), in first-seen order."""
    values = [override_values(o) for o in overrides]
    keys = list(dict.fromkeys(k for v in values for k in v))
    return [k for k in keys if len({v.get(k, DEFAULT) for v in values}) > 1]


def default_group_by(overrides: list[list[str]]) -> list[str]:
    """The swept keys but :data:`SEED_KEYS`."""
    return [k for k in swept_keys(overrides) if k not in SEED_KEYS]


def parse_group_by(text: str) -> list[str]:
    """``"a,b"`` -> ``["a", "b"]``; ValueError for an empty key."""
    keys = [k.strip() for k in text.split(",")]
    if not all(keys):
        raise ValueError(f"--group-by {text!r}: expected KEY[,KEY...] with no empty key")
    return keys


def arm_of(overrides: list[str], group_by: list[str]) -> str:
    """The arm label of one job; "all jobs" when ``group_by`` is empty."""
    values = override_values(overrides)
    return " ".join(f"{k}={values.get(k, DEFAULT)}" for k in group_by) or "all jobs"


def group_jobs(rows: list[dict[str, Any]], group_by: list[str]) -> dict[tuple[str, str], Path]:
    """``{(arm, job): job dir}`` from ``sweep_report.job_row`` rows, in row order.

    Raises:
        ValueError: a group-by key that no job overrides (names the keys they do override).
    """
    known = list(dict.fromkeys(k for r in rows for k in override_values(r["overrides"])))
    unknown = [k for k in group_by if k not in known]
    if unknown:
        raise ValueError(f"--group-by {','.join(unknown)}: no job overrides "
                         f"{'it' if len(unknown) == 1 else 'them'}; the jobs override: "
                         f"{', '.join(known) or 'nothing'}")
    return {(arm_of(r["overrides"], group_by), r["job"]): Path(r["dir"]) for r in rows}


def summarise(runs: dict[tuple[str, str], Path]) -> dict[str, Any]:
    """Everything the sweep pages show about the arms.

    Jobs without a readable metrics.jsonl are left out (listed under "skipped" with the reason).
    Returns ``{"metrics": {(arm, job): metrics}, "jobs": [run_summary rows], "arms":
    arm_table over :data:`ARM_KEYS`, "correlations": study.correlations, "skipped": [...]}``.
    """
    metrics, summaries, skipped = {}, {}, []
    for key, path in runs.items():
        try:
            metrics[key] = load_metrics(path)
            summaries[key] = load_summary(path)
        except (FileNotFoundError, ValueError) as e:
            skipped.append({"arm": key[0], "job": key[1], "reason": str(e)})
    jobs = [study.run_summary(arm, job, metrics[(arm, job)], summaries[(arm, job)])
            for arm, job in metrics]
    return {"metrics": metrics, "jobs": jobs,
            "arms": study.arm_table(jobs, tuple(ARM_KEYS)),
            "correlations": study.correlations(metrics), "skipped": skipped}


def jobs_per_arm(runs: dict[tuple[str, str], Path]) -> dict[str, int]:
    """The number of jobs of each arm, in arm order."""
    out: dict[str, int] = {}
    for arm, _ in runs:
        out[arm] = out.get(arm, 0) + 1
    return out


def stat_text(stats: dict[str, float] | None, jobs: int, decimals: int = 3) -> str:
    """``"0.450 ± 0.071 (0.400–0.500)"``; ``", n=2"`` inside the brackets when fewer of the arm's
    ``jobs`` have the number; "—" for none."""
    if not stats:
        return "—"
    d = decimals
    n = f", n={stats['n']}" if stats["n"] < jobs else ""
    return (f"{stats['mean']:.{d}f} ± {stats['std']:.{d}f} "
            f"({stats['min']:.{d}f}–{stats['max']:.{d}f}{n})")
