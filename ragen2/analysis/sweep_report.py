"""``ragen2-sweep-report SWEEP_DIR``: one table row per job of a Hydra multirun sweep.

A job directory is any directory below SWEEP_DIR holding ``metrics.jsonl`` or
``.hydra/overrides.yaml``, at any depth (a ``/`` in an override value nested the job folders of
sweeps run before ``ragen2.train.job_dirname``); its path is not relied on, except for sorting: by
the leading job number of its first folder, then by path. Per job:
    overrides        .hydra/overrides.yaml, else the path below SWEEP_DIR without its "N_" prefix
    final success    summary.json eval_after, else the last eval/success in metrics.jsonl
    final MI         collapse/mi at its last measurement (— when that one had too few samples)
    mean kept ratio  mean filter/kept_ratio over RL steps (step >= 1)
    mean step s      mean timing/step_s over RL steps
    steps            the last step in metrics.jsonl (else summary.json "steps")
Writes ``sweep_report.md`` (the markdown table, also printed), ``sweep_report.json`` and
``sweep_report.png`` (bars of final success per job, and of final MI when any job has it).
A job with a corrupt file keeps its row ("—" where unreadable) and gets a warning on stderr.

``--group-by KEY[,KEY...]`` (swept override keys, e.g. ``filter.value``; ``ragen2.analysis.arms``):
jobs with the same values of those keys form an arm; per arm, mean ± std (min–max) over its jobs
(the seeds) of final success, final MI, final retrieval@1, final token entropy, mean kept ratio,
mean reward spread and mean step time; the Spearman correlations of ``ragen2.analysis.study``
(MI vs held-out success, token entropy vs held-out success, ...) within each job, summarised by
the median over jobs with a bootstrap interval over jobs.
Added to sweep_report.md / .json and printed; ``sweep_curves.png`` overlays the arms' curves
(mean line, min–max band) and ``sweep_scatter.png`` shows the correlated points.
A missing or job-less SWEEP_DIR, or a group-by key no job overrides: one line on stderr and
exit status 2.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import sys
from pathlib import Path
from typing import Any

from ragen2.analysis import arms as arms_mod
from ragen2.analysis import study
from ragen2.analysis.command import Command
from ragen2.analysis.rollouts import (
    final_value,
    load_metrics,
    load_overrides,
    load_summary,
    metric_series,
)

__all__ = ["COLUMNS", "arms_markdown", "correlations_markdown", "find_jobs", "job_row", "main",
           "markdown_table", "write_chart"]

PROG = "ragen2-sweep-report"
CMD = Command(PROG)
_JOB_NUM = re.compile(r"^(\d+)(?:_|$)")
# (column title, row key, decimals; None = integer / text)
COLUMNS = (("job", "job", None), ("overrides", "overrides_text", None),
           ("final success", "final_success", 3), ("final MI", "final_mi", 3),
           ("mean kept ratio", "mean_kept_ratio", 3), ("mean step s", "mean_step_s", 2),
           ("steps", "steps", None))
MISSING = "—"


def _sort_key(name: str) -> tuple[float, str]:
    m = _JOB_NUM.match(name)
    return (int(m.group(1)) if m else math.inf, name)


def _is_job(path: Path) -> bool:
    return (path / "metrics.jsonl").is_file() or (path / ".hydra" / "overrides.yaml").is_file()


def find_jobs(sweep_dir: str | Path) -> list[Path]:
    """The job directories below ``sweep_dir`` at any depth (not below a job directory), sorted
    by job number then path."""
    root = Path(sweep_dir)
    jobs = []
    for here, subdirs, _ in os.walk(root):
        if Path(here) != root and _is_job(Path(here)):
            jobs.append(Path(here))
            subdirs.clear()  # a job's checkpoints, samples, ... are not jobs
    return sorted(jobs, key=lambda p: _sort_key(p.relative_to(root).as_posix()))


def _mean(series: list[tuple[int, float]]) -> float | None:
    return statistics.fmean(v for _, v in series) if series else None


def _final_success(metrics, summary) -> tuple[float | None, str | None]:
    after = (summary or {}).get("eval_after")
    if isinstance(after, (int, float)) and not isinstance(after, bool) and math.isfinite(after):
        return float(after), "summary.json eval_after"
    ev = metric_series(metrics, "eval/success")
    return (ev[-1][1], f"eval/success at step {ev[-1][0]}") if ev else (None, None)


def job_row(job_dir: str | Path, sweep_dir: str | Path | None = None) -> dict[str, Any]:
    """The report row of one job, named by its path below ``sweep_dir`` (else its folder name);
    unreadable files are listed under "errors", not raised."""
    job = Path(job_dir)
    name = job.relative_to(sweep_dir).as_posix() if sweep_dir is not None else job.name
    errors: list[str] = []
    m = _JOB_NUM.match(name)
    try:
        overrides, source = load_overrides(job), ".hydra/overrides.yaml"
    except ValueError as e:
        overrides, source = None, None
        errors.append(str(e))
    if overrides is None:
        rest = name[m.end():] if m else name
        overrides, source = ([rest] if rest else []), "directory name"
    try:
        metrics = load_metrics(job)
    except FileNotFoundError:
        metrics = {}
    except ValueError as e:
        metrics = {}
        errors.append(str(e))
    try:
        summary = load_summary(job)
    except ValueError as e:
        summary = None
        errors.append(str(e))
    success, success_src = _final_success(metrics, summary)
    steps = max(metrics) if metrics else (summary or {}).get("steps")
    return {
        "job": m.group(1) if m else name,
        "dir": str(job),
        "overrides": overrides,
        "overrides_source": source,
        "overrides_text": " ".join(overrides),
        "final_success": success,
        "final_success_source": success_src,
        "final_mi": final_value(metrics, "collapse/mi"),  # None: its last measurement had none
        "mean_kept_ratio": _mean(metric_series(metrics, "filter/kept_ratio", min_step=1)),
        "mean_step_s": _mean(metric_series(metrics, "timing/step_s", min_step=1)),
        "steps": steps if isinstance(steps, int) and not isinstance(steps, bool) else None,
        "finished": summary is not None,
        "errors": errors,
    }


def _cell(v: Any, decimals: int | None) -> str:
    if v is None or v == "":
        return MISSING
    text = f"{v:.{decimals}f}" if decimals is not None else str(v)
    return text.replace("|", "\\|")


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """One markdown row per job; missing values as "—"."""
    head = "| " + " | ".join(title for title, _, _ in COLUMNS) + " |"
    rule = "|" + "|".join("---" if d is None and k != "steps" else "---:" for _, k, d in COLUMNS) + "|"
    body = ["| " + " | ".join(_cell(r[k], d) for _, k, d in COLUMNS) + " |" for r in rows]
    return "\n".join([head, rule, *body])


def arms_markdown(summary: dict[str, Any], jobs: dict[str, int]) -> str:
    """One markdown row per arm: its job count and mean ± std (min–max) of ``arms.ARM_KEYS``."""
    keys = arms_mod.ARM_KEYS
    head = "| arm | jobs | " + " | ".join(keys.values()) + " |"
    rule = "|---|---:|" + "---:|" * len(keys)
    body = [f"| {_cell(arm, None)} | {n} | "
            + " | ".join(arms_mod.stat_text(summary["arms"].get(arm, {}).get(k), n,
                                            2 if k == "mean_step_s" else 3) for k in keys) + " |"
            for arm, n in jobs.items()]
    return "\n".join([head, rule, *body])


def correlations_markdown(corr: dict[str, dict[str, Any]]) -> str:
    """One markdown row per correlation of ``study.CORRELATIONS``: the median per-run rho, its
    95% bootstrap interval over runs, the runs with a rho and the paired steps of all runs."""
    lines = ["| correlation | x | y | median per-run Spearman rho | 95% interval over runs | runs "
             "| points |", "|---|---|---|---:|---:|---:|---:|"]
    for name, (x, y) in study.CORRELATIONS.items():
        c = corr[name]
        ci = "—" if c["lo"] is None else f"{c['lo']:.3f} – {c['hi']:.3f}"
        lines.append(f"| {name} | {study.SERIES[x]} | {study.SERIES[y]} | {_cell(c['rho'], 3)} "
                     f"| {ci} | {c['runs']} | {c['n']} |")
    return "\n".join(lines)


def write_chart(rows: list[dict[str, Any]], path: str | Path) -> None:
    """Bars of final success per job (and of final MI when any job has it) into a PNG."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    panels = [("final_success", "final held-out success")]
    if any(r["final_mi"] is not None for r in rows):
        panels.append(("final_mi", "final MI (collapse/mi, nats)"))
    labels = [f"{r['job']}\n{r['overrides_text'][:28]}" for r in rows]
    fig = Figure(figsize=(max(5.0, 1.1 * len(rows) + 2), 3.6 * len(panels)), layout="constrained")
    for i, (key, title) in enumerate(panels):
        ax = fig.add_subplot(len(panels), 1, i + 1)
        vals = [math.nan if r[key] is None else r[key] for r in rows]
        bars = ax.bar(range(len(rows)), vals, color=f"C{i}")
        ax.bar_label(bars, labels=["" if math.isnan(v) else f"{v:.3f}" for v in vals],
                     fontsize="small")
        for x, v in enumerate(vals):
            if math.isnan(v):  # no bar: mark the job as missing
                ax.text(x, 0, MISSING, ha="center", va="bottom", fontsize="small")
        ax.set_xticks(range(len(rows)), labels, fontsize="small")
        ax.set_title(title)
        if key == "final_success":
            ax.set_ylim(0, 1.1)
        ax.grid(axis="y", alpha=0.3)
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=100)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Summary table of a ragen2 Hydra multirun sweep.")
    p.add_argument("sweep_dir", type=Path, help="the sweep directory (one subdirectory per job)")
    p.add_argument("--out", type=Path, default=None, help="output folder (default SWEEP_DIR)")
    p.add_argument("--group-by", default=None, metavar="KEY[,KEY...]",
                   help="override keys whose values form an arm (e.g. filter.value): adds the "
                        "per-arm table, the correlations and sweep_curves.png")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    sweep = args.sweep_dir
    if not sweep.is_dir():
        CMD.fail(f"sweep directory {sweep} does not exist")
    jobs = find_jobs(sweep)
    if not jobs:
        CMD.fail(f"{sweep} has no job directories (directories below it with metrics.jsonl or "
                 ".hydra/overrides.yaml)")
    rows = [job_row(j, sweep) for j in jobs]
    for r in rows:
        for err in r["errors"]:
            CMD.warn(f"job {r['job']}: {err}")
    table = markdown_table(rows)
    doc: dict[str, Any] = {"sweep_dir": str(sweep), "jobs": rows}
    text = table
    if args.group_by is not None:
        with CMD.bad_input_exits_2():
            group_by = arms_mod.parse_group_by(args.group_by)
            runs = arms_mod.group_jobs(rows, group_by)
        summary = arms_mod.summarise(runs)
        for skip in summary["skipped"]:
            CMD.warn(f"job {skip['job']} left out of the arms: {skip['reason']}")
        n_jobs = arms_mod.jobs_per_arm(runs)
        text += (f"\n\n## Arms (grouped by {', '.join(group_by)})\n\n"
                 + arms_markdown(summary, n_jobs)
                 + "\n\n## Correlations (Spearman, points of all jobs)\n\n"
                 + correlations_markdown(summary["correlations"]))
        doc.update(group_by=group_by, arms=summary["arms"], correlations=summary["correlations"],
                   arm_of_job={job: arm for arm, job in runs})
    out = args.out if args.out is not None else sweep
    with CMD.bad_input_exits_2():
        out.mkdir(parents=True, exist_ok=True)
        (out / "sweep_report.md").write_text(f"# Sweep {sweep}\n\n{text}\n")
        (out / "sweep_report.json").write_text(
            json.dumps(doc, indent=1, allow_nan=False) + "\n")
        write_chart(rows, out / "sweep_report.png")
        extra = ""
        if args.group_by is not None and summary["metrics"]:
            study.write_plots(summary["metrics"], summary["correlations"], out,
                              names=("sweep_curves.png", "sweep_scatter.png"))
            extra = ", sweep_curves.png, sweep_scatter.png"
    print(text)
    print(f"\nwrote {out / 'sweep_report.md'}, sweep_report.json and sweep_report.png{extra} in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
