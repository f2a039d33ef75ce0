"""The sweep page of ``ragen2-report MULTIRUN_DIR``: arms, their curves, correlations, job links.

Jobs are ``sweep_report.find_jobs`` (``MULTIRUN_DIR/0``, ``/1``, ... with ``.hydra/overrides.yaml``
and ``metrics.jsonl``); they are grouped into arms by ``ragen2.analysis.arms`` (``--group-by``
keys, by default every swept key but ``seed``). The page: per arm mean ± std (min–max) over its
jobs of ``arms.ARM_KEYS``; the arms' curves overlaid (mean line, min–max band) and the scatter of
MI / token entropy against held-out success; the Spearman correlations per job, summarised over
jobs (``study.correlations``); one row per job linking its own run page, which is written to
``JOB/report.html`` unless ``job_reports=False``. The HTML is ``templates/sweep.html.j2``,
autoescaped.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ragen2.analysis import arms, study
from ragen2.analysis.html import fmt, macro, png_bytes, png_img, render
from ragen2.analysis.report_run import is_run_dir, run_report
from ragen2.analysis.sweep_report import job_row

__all__ = ["sweep_report"]


def _arms_table(summary, n_jobs: dict[str, int]) -> dict[str, Any]:
    rows = [[arm, str(n)] + [arms.stat_text(summary["arms"].get(arm, {}).get(k), n,
                                            2 if k == "mean_step_s" else 3)
                             for k in arms.ARM_KEYS]
            for arm, n in n_jobs.items()]
    return {"headers": ["arm", "jobs", *arms.ARM_KEYS.values()], "rows": rows,
            "numeric": [False] + [True] * (len(arms.ARM_KEYS) + 1)}


def _correlations_rows(corr) -> list[list[Any]]:
    names = list(arms.CORRELATION_TITLES) + [n for n in study.CORRELATIONS
                                             if n not in arms.CORRELATION_TITLES]
    code = macro("code")
    rows = []
    for name in names:
        x, y = study.CORRELATIONS[name]
        c = corr[name]
        ci = "—" if c["lo"] is None else f"{fmt(c['lo'])} – {fmt(c['hi'])}"
        rows.append([arms.CORRELATION_TITLES.get(name, name), code(study.SERIES[x]),
                     code(study.SERIES[y]), fmt(c["rho"]), ci, str(c["runs"]), str(c["n"])])
    return rows


def _job_reports(rows, out: Path, notes: list[str], **kw) -> dict[str, str]:
    """Write every job's run page; {job: link relative to the sweep page}."""
    links = {}
    for r in rows:
        job_dir = Path(r["dir"])
        if not is_run_dir(job_dir):
            continue
        try:
            (job_dir / "report.html").write_text(run_report(job_dir, **kw), encoding="utf-8")
        except (OSError, ValueError) as e:
            notes.append(f"job {r['job']}: no report: {e}")
            continue
        links[r["job"]] = Path(os.path.relpath(job_dir / "report.html", out.parent)).as_posix()
    return links


def sweep_report(sweep: Path, jobs: list[Path], out: Path, *, group_by: str | None = None,
                 job_reports: bool = True, **run_kw) -> str:
    """The HTML page of a sweep (``out``: where it will be written, for the job links).

    ``run_kw`` go to ``run_report`` (ngram, prompts, samples).
    Raises:
        ValueError: a bad ``group_by`` (an empty key, or one that no job overrides).
    """
    rows = [job_row(j, sweep) for j in jobs]
    notes = [f"job {r['job']}: {e}" for r in rows for e in r["errors"]]
    if group_by is not None:
        keys, how = arms.parse_group_by(group_by), "given"
    else:
        keys, how = arms.default_group_by([r["overrides"] for r in rows]), "every swept key but seed"
    runs = arms.group_jobs(rows, keys)
    summary = arms.summarise(runs)
    notes += [f"job {s['job']} left out of the arms: {s['reason']}" for s in summary["skipped"]]
    n_jobs = arms.jobs_per_arm(runs)
    links = _job_reports(rows, out, notes, **run_kw) if job_reports else {}

    context: dict[str, Any] = {"curves_img": None, "scatter_img": None, "correlations": []}
    if summary["metrics"]:
        context.update(
            curves_img=png_img(png_bytes(study.curves_figure(summary["metrics"]), dpi=70),
                               "curves per arm"),
            correlations=_correlations_rows(summary["correlations"]),
            scatter_img=png_img(png_bytes(study.scatter_figure(summary["metrics"],
                                                               summary["correlations"])),
                                "MI and entropy against success"))
    arm_of = {job: arm for arm, job in runs}
    link = macro("link")
    jobs_rows = [[link(links[r["job"]], r["job"]) if r["job"] in links else r["job"],
                  arm_of[r["job"]], r["overrides_text"], fmt(r["final_success"]),
                  fmt(r["final_mi"]), fmt(r["mean_kept_ratio"]), fmt(r["steps"])] for r in rows]
    return render("sweep.html.j2", title=f"ragen2 sweep report: {sweep.name}", sweep=sweep,
                  n_jobs=len(rows), n_arms=len(n_jobs), keys=keys, how=how,
                  arms=_arms_table(summary, n_jobs), jobs=jobs_rows, notes=notes, **context)
