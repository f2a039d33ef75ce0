"""ragen2-sweep-report: job discovery, per-job numbers (hand-computed), table, JSON, chart, errors.

Fake sweep (Hydra multirun layout):
    0_filter.value=0.5   overrides ["filter.value=0.5"]; summary eval_after 0.45 (beats the last
                         eval/success 0.4); collapse/mi 0.8, 0.6 -> final 0.6;
                         kept (0.5 + 0.75) / 2 = 0.625; step s (2 + 4) / 2 = 3.00; 2 steps
    1_filter.value=0.9   overrides ["filter.value=0.9"]; no summary -> last eval/success 0.7;
                         no MI; kept at RL steps (0.25 + 0.5 + 0.5) / 3 = 0.41666 (the step-0
                         value 0.0 is not an RL step); step s (1 + 1.5 + 2) / 3 = 1.50; 3 steps
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragen2.analysis.sweep_report import find_jobs, main

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

JOB0 = [
    {"step": 0, "eval/success": 0.2},
    {"step": 1, "filter/kept_ratio": 0.5, "timing/step_s": 2.0, "collapse/mi": 0.8},
    {"step": 2, "filter/kept_ratio": 0.75, "timing/step_s": 4.0, "collapse/mi": 0.6, "eval/success": 0.4},
]
JOB1 = [
    {"step": 0, "eval/success": 0.1, "filter/kept_ratio": 0.0},
    {"step": 1, "filter/kept_ratio": 0.25, "timing/step_s": 1.0},
    {"step": 2, "filter/kept_ratio": 0.5, "timing/step_s": 1.5},
    {"step": 3, "filter/kept_ratio": 0.5, "timing/step_s": 2.0, "eval/success": 0.7},
]
ROW0 = "| 0 | filter.value=0.5 | 0.450 | 0.600 | 0.625 | 3.00 | 2 |"
ROW1 = "| 1 | filter.value=0.9 | 0.700 | — | 0.417 | 1.50 | 3 |"


def make_job(sweep: Path, name: str, rows: list[dict] | None, overrides: list[str] | None = None,
             summary: dict | None = None) -> Path:
    job = sweep / name
    job.mkdir(parents=True)
    if rows is not None:
        (job / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if overrides is not None:
        (job / ".hydra").mkdir()
        (job / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    if summary is not None:
        (job / "summary.json").write_text(json.dumps(summary))
    return job


@pytest.fixture
def sweep(tmp_path) -> Path:
    s = tmp_path / "multirun"
    s.mkdir()
    (s / "multirun.yaml").write_text("hydra: {}\n")
    make_job(s, "1_filter.value=0.9", JOB1, ["filter.value=0.9"])
    make_job(s, "0_filter.value=0.5", JOB0, ["filter.value=0.5"],
             {"eval_before": 0.2, "eval_after": 0.45, "steps": 2, "seed": 0, "wall_s": 6.5})
    (s / "logs").mkdir()  # not a job: no metrics.jsonl, no overrides
    return s


def test_table_json_and_chart(sweep, capsys):
    assert main([str(sweep)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == ("| job | overrides | final success | final MI | mean kept ratio "
                        "| mean step s | steps |")
    assert lines[2:4] == [ROW0, ROW1]  # sorted by job number; "logs" is not a job
    md = (sweep / "sweep_report.md").read_text()
    assert ROW0 in md and ROW1 in md

    data = json.loads((sweep / "sweep_report.json").read_text())
    j0, j1 = data["jobs"]
    assert j0["overrides"] == ["filter.value=0.5"] and j0["overrides_source"] == ".hydra/overrides.yaml"
    assert j0["final_success"] == 0.45 and j0["final_success_source"] == "summary.json eval_after"
    assert j0["final_mi"] == 0.6 and j0["mean_kept_ratio"] == pytest.approx(0.625)
    assert j0["mean_step_s"] == pytest.approx(3.0) and j0["steps"] == 2 and j0["finished"]
    assert j1["final_success"] == 0.7 and j1["final_success_source"] == "eval/success at step 3"
    assert j1["final_mi"] is None and j1["mean_kept_ratio"] == pytest.approx(1.25 / 3)
    assert j1["mean_step_s"] == pytest.approx(1.5) and j1["steps"] == 3 and not j1["finished"]

    png = (sweep / "sweep_report.png").read_bytes()
    assert png[:8] == PNG_MAGIC and len(png) > 1000


def test_out_option_sorting_and_dir_name_fallback(sweep, tmp_path, capsys):
    make_job(sweep, "10_seed=3", [{"step": 0}, {"step": 1, "timing/step_s": 5.0}])
    make_job(sweep, "2_seed=1", None, ["seed=1", "filter.value=0.7"])  # launched, no metrics yet
    out = tmp_path / "report"
    assert main([str(sweep), "--out", str(out)]) == 0
    assert not (sweep / "sweep_report.md").exists()
    rows = [ln for ln in (out / "sweep_report.md").read_text().splitlines() if ln.startswith("| ")][1:]
    assert [r.split(" | ")[0] for r in rows] == ["| 0", "| 1", "| 2", "| 10"]  # numeric order
    assert rows[2] == "| 2 | seed=1 filter.value=0.7 | — | — | — | — | — |"
    assert rows[3] == "| 10 | seed=3 | — | — | — | 5.00 | 1 |"
    jobs = json.loads((out / "sweep_report.json").read_text())["jobs"]
    assert jobs[3]["overrides_source"] == "directory name"
    assert (out / "sweep_report.png").read_bytes()[:8] == PNG_MAGIC


def test_corrupt_job_keeps_its_row_and_warns(sweep, capsys):
    with open(sweep / "1_filter.value=0.9" / "metrics.jsonl", "a") as f:
        f.write('{truncated\n{"step": 9}\n')
    assert main([str(sweep)]) == 0
    cap = capsys.readouterr()
    assert "| 1 | filter.value=0.9 | — | — | — | — | — |" in cap.out
    assert "warning: job 1:" in cap.err and "metrics.jsonl:5: not valid JSON" in cap.err


def test_find_jobs_ignores_plain_dirs(sweep):
    assert [p.name for p in find_jobs(sweep)] == ["0_filter.value=0.5", "1_filter.value=0.9"]


def test_jobs_nested_by_a_slash_in_a_value_are_found_and_named_by_their_path(tmp_path, capsys):
    """A sweep run before ragen2.train.job_dirname: Hydra made ``model.path=/shared/m/a`` folders
    (job 0 finished, job 1 launched only); a job's own subfolders are not jobs."""
    s = tmp_path / "multirun"
    make_job(s, "0_model.path=/shared/m/a", JOB0, ["model.path=/shared/m/a"],
             {"eval_after": 0.45, "steps": 2})
    (s / "0_model.path=" / "shared" / "m" / "a" / "checkpoints" / "step_000002").mkdir(parents=True)
    make_job(s, "1_model.path=/shared/m/b:2", None, ["model.path=/shared/m/b:2"])
    make_job(s, "10_seed=1", JOB1)  # a flat one beside them, named by its folder only
    assert [p.relative_to(s).as_posix() for p in find_jobs(s)] == [
        "0_model.path=/shared/m/a", "1_model.path=/shared/m/b:2", "10_seed=1"]
    assert main([str(s)]) == 0
    rows = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("| ")][1:]
    assert rows == ["| 0 | model.path=/shared/m/a | 0.450 | 0.600 | 0.625 | 3.00 | 2 |",
                    "| 1 | model.path=/shared/m/b:2 | — | — | — | — | — |",
                    "| 10 | seed=1 | 0.700 | — | 0.417 | 1.50 | 3 |"]


def test_empty_sweep_exits_2(tmp_path, capsys):
    (tmp_path / "logs").mkdir()
    with pytest.raises(SystemExit) as e:
        main([str(tmp_path)])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("ragen2-sweep-report: error: ") and "has no job directories" in err
    assert not (tmp_path / "sweep_report.md").exists()


def test_missing_sweep_exits_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main([str(tmp_path / "nope")])
    assert e.value.code == 2
    assert "does not exist" in capsys.readouterr().err
