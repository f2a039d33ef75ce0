"""Offline analysis of finished (or killed) runs: template-collapse report, sweep table, HTML reports.

rollouts.py      readers of a run directory: load_metrics (last row per step wins),
                 load_rollouts (skips half-written files with a warning), load_summary,
                 load_overrides, load_hydra_config, metric_series
analyze.py       ``ragen2-analyze RUN_DIR``: per-step plug-in MI + floor, diagnosis, analysis.json
plots.py         the PNG panels of ``ragen2-analyze`` (matplotlib Agg canvas)
sweep_report.py  ``ragen2-sweep-report SWEEP_DIR``: one markdown / JSON row per Hydra job + chart;
                 ``--group-by``: per-arm table and correlations (arms.py)
arms.py          jobs of a sweep grouped into arms by override values, summarised with study.py
study.py         arms x seeds: run summaries, arm tables, per-run Spearman correlations summarised
                 over runs, arm differences, curves with bands (MI with its bound and floor)
run_stats.py     statistics over runs: bootstrap intervals over runs, arm differences over seeds
report.py        ``ragen2-report PATH``: a self-contained HTML page of a run (report_run.py) or of
                 a sweep (report_sweep.py); report_figures.py, report_samples.py, html.py

Importing this package does not import matplotlib.
"""

from ragen2.analysis.rollouts import (
    load_hydra_config,
    load_metrics,
    load_overrides,
    load_rollouts,
    load_summary,
    metric_series,
)

__all__ = [
    "load_hydra_config",
    "load_metrics",
    "load_overrides",
    "load_rollouts",
    "load_summary",
    "metric_series",
]
