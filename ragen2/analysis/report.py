"""``ragen2-report PATH``: one self-contained HTML page about a run, or about a sweep of runs.

PATH is a run directory (``metrics.jsonl``, ``rollouts/`` or ``panel/``: the page of
``report_run.py``) or a Hydra multirun folder whose subdirectories are jobs
(``sweep_report.find_jobs``: the page of ``report_sweep.py``, which links each job's own page).
The page (default ``PATH/report.html``, ``--out``) needs no server and no network: its figures
are PNGs embedded in it, and it forbids itself any fetch, so it opens from ``file://``.

A missing PATH, one that is neither a run nor a sweep, a bad ``--group-by`` or a corrupt
metrics file: one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ragen2.analysis.command import Command, positive_int
from ragen2.analysis.report_run import is_run_dir, run_report
from ragen2.analysis.report_sweep import sweep_report
from ragen2.analysis.sweep_report import find_jobs

__all__ = ["main"]

PROG = "ragen2-report"
CMD = Command(PROG)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Self-contained HTML report of a ragen2 run "
                                "directory or of a Hydra multirun folder.")
    p.add_argument("path", type=Path, help="a run directory, or a multirun folder of jobs")
    p.add_argument("--out", type=Path, default=None, help="the HTML file (default PATH/report.html)")
    p.add_argument("--group-by", default=None, metavar="KEY[,KEY...]",
                   help="sweep: override keys whose values form an arm (default: every swept key "
                        "but seed)")
    p.add_argument("--no-job-reports", action="store_true",
                   help="sweep: do not write each job's own report.html")
    p.add_argument("--ngram", type=positive_int, default=3, help="n of the template n-grams (default 3)")
    p.add_argument("--prompts", type=positive_int, default=8, help="prompts shown (default 8)")
    p.add_argument("--samples", type=positive_int, default=3, help="samples per prompt (default 3)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    path = args.path
    if not path.is_dir():
        CMD.fail(f"{path} does not exist")
    out = args.out if args.out is not None else path / "report.html"
    with CMD.bad_input_exits_2():
        if is_run_dir(path):
            if args.group_by is not None:
                CMD.fail(f"--group-by is for a sweep folder; {path} is a run directory")
            text = run_report(path, ngram=args.ngram, prompts=args.prompts, samples=args.samples)
        elif jobs := find_jobs(path):
            text = sweep_report(path, jobs, out, group_by=args.group_by,
                                job_reports=not args.no_job_reports, ngram=args.ngram,
                                prompts=args.prompts, samples=args.samples)
        else:
            CMD.fail(f"{path} is neither a run directory (metrics.jsonl, rollouts/ or panel/) nor a "
                     "sweep (subdirectories with metrics.jsonl or .hydra/overrides.yaml)")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
