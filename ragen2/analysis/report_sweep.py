"""The sweep page of ``ragen2-report MULTIRUN_DIR``: arms, their curves, correlations, job links.

Jobs are ``sweep_report.find_jobs`` (``MULTIRUN_DIR/0``, ``/1``, ... with ``.hydra/overrides.yaml``
and ``metrics.jsonl``); they are grouped into arms by ``ragen2.analysis.arms`` (``--group-by``
keys, by default every swept key but ``seed``). The page: per arm mean ± std (min–max) over its
jobs of ``arms.ARM_KEYS``; the arms' curves overlaid (mean line, min–max band) and the scatter of
MI / token entropy against held-out success; the Spearman correlations per job, summarised over
jobs (``study.correlations``); one row per job linking its own run page, which is written to
``JOB/report.html`` unless ``job_reports=False``.
"""

from __future__ import annotations

import os
from pathlib import Path

from ragen2.analysis import arms, study
from ragen2.analysis.html import esc, fmt, page, png_bytes, png_img, table
from ragen2.analysis.report_run import is_run_dir, run_report
from ragen2.analysis.sweep_report import job_row

__all__ = ["sweep_report"]


def _arms_table(summary, n_jobs: dict[str, int]) -> str:
    rows = [[esc(arm), str(n)] + [esc(arms.stat_text(summary["arms"].get(arm, {}).get(k), n,
                                                     2 if k == "mean_step_s" else 3))
                                  for k in arms.ARM_KEYS]
            for arm, n in n_jobs.items()]
    return table(["arm", "jobs", *arms.ARM_KEYS.values()], rows, id="arms",
                 numeric=[False] + [True] * (len(arms.ARM_KEYS) + 1))


def _correlations_table(corr) -> str:
    names = list(arms.CORRELATION_TITLES) + [n for n in study.CORRELATIONS
                                             if n not in arms.CORRELATION_TITLES]
    rows = []
    for name in names:
        x, y = study.CORRELATIONS[name]
        c = corr[name]
        ci = "—" if c["lo"] is None else f"{fmt(c['lo'])} – {fmt(c['hi'])}"
        rows.append([esc(arms.CORRELATION_TITLES.get(name, name)),
                     f"<code>{esc(study.SERIES[x])}</code>", f"<code>{esc(study.SERIES[y])}</code>",
                     fmt(c["rho"]), esc(ci), str(c["runs"]), str(c["n"])])
    return table(["correlation", "x", "y", "median per-run Spearman rho", "95% interval over runs",
                  "runs", "points"], rows, id="correlations",
                 numeric=[False, False, False, True, True, True, True])


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

    body = [f"<h1>ragen2 sweep report</h1><p>sweep: <code>{esc(sweep)}</code>; {len(rows)} jobs, "
            f"{len(n_jobs)} arms, grouped by "
            + (" ".join(f"<code>{esc(k)}</code>" for k in keys) or "nothing (no swept key)")
            + f" ({how}).</p>",
            "<h2>Arms</h2><p>Per arm: mean ± std (min–max) over its jobs.</p>"
            + _arms_table(summary, n_jobs)]
    if summary["metrics"]:
        body.append("<h2>Curves per arm</h2><figure class=\"wide\" id=\"fig-sweep-curves\">"
                    + png_img(png_bytes(study.curves_figure(summary["metrics"]), dpi=70),
                              "curves per arm") + "</figure>")
        body.append("<h2>Correlations</h2><p>Spearman's rho within each job, over its steps where "
                    "both were logged; the median over jobs with a 95% bootstrap interval over "
                    "jobs (points of several jobs are never pooled).</p>"
                    + _correlations_table(summary["correlations"])
                    + "<figure id=\"fig-sweep-scatter\">"
                    + png_img(png_bytes(study.scatter_figure(summary["metrics"], summary["correlations"])),
                              "MI and entropy against success") + "</figure>")
    else:
        body.append('<p class="missing">no job has a readable metrics.jsonl: no curves, no '
                    "correlations</p>")
    arm_of = {job: arm for arm, job in runs}
    job_cells = [[f'<a href="{esc(links[r["job"]])}">{esc(r["job"])}</a>' if r["job"] in links
                  else esc(r["job"]), esc(arm_of[r["job"]]), esc(r["overrides_text"]),
                  fmt(r["final_success"]), fmt(r["final_mi"]), fmt(r["mean_kept_ratio"]),
                  fmt(r["steps"])] for r in rows]
    body.append("<h2>Jobs</h2>" + table(["job", "arm", "overrides", "final success", "final MI",
                                         "mean kept ratio", "steps"], job_cells, id="jobs",
                                        numeric=[False] * 3 + [True] * 4))
    if notes:
        body.append('<h2>Notes</h2><ul class="notes">'
                    + "".join(f"<li>{esc(n)}</li>" for n in notes) + "</ul>")
    return page(f"ragen2 sweep report: {sweep.name}", "\n".join(body))
