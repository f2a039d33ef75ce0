"""Sweeps grouped into arms: ragen2-sweep-report --group-by and ragen2-report MULTIRUN_DIR.

Hydra multirun layout: jobs 0..5, filter.value 0.5 (jobs 0-2) and 0.9 (jobs 3-5) x seed 0, 1, 2.
Per job (JOBS below): eval/success 0.1 at step 0 and S at step 2, collapse/mi 0.5 at step 1 and
M at step 2, token entropy E at step 2, kept ratios K1, K2 at steps 1, 2. By hand:

    arm 0.5  final success 0.2 0.4 0.6   mean 0.4  sample std 0.2        min 0.2 max 0.6
             final MI      0.1 0.3 0.2   mean 0.2  std 0.1               min 0.1 max 0.3
             entropy       1.0 0.8 0.9   mean 0.9  std 0.1
             kept (mean of K1, K2) 0.75 0.5 1.0   mean 0.75  std 0.25    min 0.5 max 1.0
    arm 0.9  final success 0.5 0.5 0.8   mean 0.6  std sqrt(0.06 / 2) = 0.173205
             final MI      0.9 0.7 0.8   mean 0.8  std 0.1
Correlations are per job (each job has one step with both MI and success: no rho) and summarised
over jobs, so the study reports none here. The six (step-2) points, pooled by hand, check
``study.spearman`` itself (MI and success both exist at step 2 only):
    MI ranks x 1 3 2 6 4 5; success ranks y 1 2 5 3.5 3.5 6 (two 0.5 share 3.5); both mean 3.5;
    sum dx dy = 6.25 + 0.75 - 2.25 + 0 + 0 + 3.75 = 8.5; sum dx^2 = 17.5, sum dy^2 = 17
    -> rho = 8.5 / sqrt(17.5 * 17) = 0.492805
    entropy ranks 6 4 5 2 3 1 -> sum dx dy = -6.25 - 0.75 + 2.25 + 0 + 0 - 6.25 = -11
    -> rho = -11 / sqrt(297.5) = -0.637749
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from scipy.stats import spearmanr

from ragen2.analysis import arms, study
from ragen2.analysis.report import main as report_main
from ragen2.analysis.sweep_report import find_jobs, job_row
from ragen2.analysis.sweep_report import main as sweep_main

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# job: (filter.value, seed, S, M, E, K1, K2)
JOBS = [("0.5", 0, 0.2, 0.1, 1.0, 1.0, 0.5), ("0.5", 1, 0.4, 0.3, 0.8, 0.5, 0.5),
        ("0.5", 2, 0.6, 0.2, 0.9, 1.0, 1.0), ("0.9", 0, 0.5, 0.9, 0.5, 1.0, 1.0),
        ("0.9", 1, 0.5, 0.7, 0.6, 1.0, 1.0), ("0.9", 2, 0.8, 0.8, 0.4, 1.0, 1.0)]
RHO_MI, RHO_ENTROPY = 8.5 / (17.5 * 17) ** 0.5, -11 / (17.5 * 17) ** 0.5


def make_sweep(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "multirun.yaml").write_text("hydra: {}\n")
    for i, (value, seed, s, m, e, k1, k2) in enumerate(JOBS):
        job = root / str(i)
        (job / ".hydra").mkdir(parents=True)
        (job / ".hydra" / "overrides.yaml").write_text(f"- filter.value={value}\n- seed={seed}\n")
        rows = [{"step": 0, "eval/success": 0.1},
                {"step": 1, "collapse/mi": 0.5, "filter/kept_ratio": k1},
                {"step": 2, "eval/success": s, "collapse/mi": m, "collapse/token_entropy": e,
                 "filter/kept_ratio": k2}]
        (job / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


@pytest.fixture
def sweep(tmp_path) -> Path:
    return make_sweep(tmp_path / "multirun")


def test_override_values_and_swept_keys():
    assert arms.override_values(["+a=1", "++b=x=y", "~c", "~d=3", "e", " f = 2 "]) == {
        "a": "1", "b": "x=y", "c": "(deleted)", "d": "3", "e": "", "f": "2"}
    jobs = [["filter.value=0.5", "seed=0", "x=1"], ["filter.value=0.9", "seed=1", "x=1"],
            ["seed=2", "x=1"]]
    assert arms.swept_keys(jobs) == ["filter.value", "seed"]  # x is the same everywhere
    assert arms.default_group_by(jobs) == ["filter.value"]
    assert arms.arm_of(jobs[2], ["filter.value", "x"]) == "filter.value=(default) x=1"
    assert arms.arm_of(jobs[0], []) == "all jobs"
    with pytest.raises(ValueError, match="no empty key"):
        arms.parse_group_by("a,,b")


def test_arms_by_hand(sweep):
    runs = arms.group_jobs([job_row(j) for j in find_jobs(sweep)], ["filter.value"])
    assert list(runs) == [("filter.value=0.5", "0"), ("filter.value=0.5", "1"), ("filter.value=0.5", "2"),
                          ("filter.value=0.9", "3"), ("filter.value=0.9", "4"), ("filter.value=0.9", "5")]
    s = arms.summarise(runs)
    a, b = s["arms"]["filter.value=0.5"], s["arms"]["filter.value=0.9"]
    assert a["final_success"] == pytest.approx({"mean": 0.4, "std": 0.2, "min": 0.2, "max": 0.6, "n": 3})
    assert a["final_mi"] == pytest.approx({"mean": 0.2, "std": 0.1, "min": 0.1, "max": 0.3, "n": 3})
    assert a["final_token_entropy"] == pytest.approx(
        {"mean": 0.9, "std": 0.1, "min": 0.8, "max": 1.0, "n": 3})
    assert a["mean_kept_ratio"] == pytest.approx({"mean": 0.75, "std": 0.25, "min": 0.5, "max": 1.0, "n": 3})
    assert b["final_success"] == pytest.approx({"mean": 0.6, "std": 0.173205, "min": 0.5, "max": 0.8, "n": 3},
                                               abs=1e-6)
    assert b["final_mi"] == pytest.approx({"mean": 0.8, "std": 0.1, "min": 0.7, "max": 0.9, "n": 3})
    assert "final_retrieval_acc" not in a  # never logged
    c = s["correlations"]
    # one paired step per job: no per-job rho, so no summary over jobs (points never pooled)
    assert c["mi_vs_success"]["rho"] is None and c["mi_vs_success"]["n"] == 6
    assert c["mi_vs_success"]["runs"] == 0 and len(c["mi_vs_success"]["per_run"]) == 6
    # study.spearman on the pooled points by hand; the reference implementation agrees
    mi = [m for *_, m, _, _, _ in JOBS]
    succ = [x for _, _, x, *_ in JOBS]
    ent = [e for *_, e, _, _ in JOBS]
    pooled = study.spearman(list(zip(mi, succ)))
    ref = spearmanr(mi, succ)
    assert pooled["rho"] == pytest.approx(RHO_MI) == pytest.approx(ref.statistic)
    assert pooled["p"] == pytest.approx(ref.pvalue)
    assert study.spearman(list(zip(ent, succ)))["rho"] == pytest.approx(RHO_ENTROPY)
    # the curve band of an arm: mean and min..max over its jobs at every step
    steps, mean, lo, hi = study.band(s["metrics"], "filter.value=0.5", "mi")
    assert steps == [1, 2] and mean == pytest.approx([0.5, 0.2]) and lo == [0.5, 0.1] and hi == [0.5, 0.3]


def test_spearman_without_scipy_still_gives_rho(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_scipy(name, *args, **kwargs):
        if name.startswith("scipy"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_scipy)
    r = study.spearman([(1, 2), (2, 1), (3, 4), (4, 3)])
    assert r == {"rho": pytest.approx(0.6), "p": None, "n": 4}


def test_sweep_report_group_by(sweep, capsys):
    assert sweep_main([str(sweep), "--group-by", "filter.value"]) == 0
    out = capsys.readouterr().out
    assert ("| filter.value=0.5 | 3 | 0.400 ± 0.200 (0.200–0.600) | 0.200 ± 0.100 (0.100–0.300) | — | — "
            "| 0.900 ± 0.100 (0.800–1.000) | 0.750 ± 0.250 (0.500–1.000) | — | — |") in out
    assert "| filter.value=0.9 | 3 | 0.600 ± 0.173 (0.500–0.800) | 0.800 ± 0.100 (0.700–0.900) |" in out
    assert "| mi_vs_success | collapse/mi | eval/success | — | — | 0 | 6 |" in out
    assert "| entropy_vs_success | collapse/token_entropy | eval/success | — | — | 0 | 6 |" in out
    md = (sweep / "sweep_report.md").read_text()
    assert "## Arms (grouped by filter.value)" in md and "0.400 ± 0.200" in md
    doc = json.loads((sweep / "sweep_report.json").read_text())
    assert doc["group_by"] == ["filter.value"] and doc["arm_of_job"]["4"] == "filter.value=0.9"
    assert doc["arms"]["filter.value=0.9"]["final_mi"]["mean"] == pytest.approx(0.8)
    assert doc["correlations"]["mi_vs_success"]["rho"] is None
    for name in ("sweep_curves.png", "sweep_scatter.png", "sweep_report.png"):
        assert (sweep / name).read_bytes()[:8] == PNG_MAGIC, name


def test_sweep_report_without_group_by_is_unchanged(sweep, capsys):
    assert sweep_main([str(sweep)]) == 0
    assert "## Arms" not in capsys.readouterr().out
    assert not (sweep / "sweep_curves.png").exists()
    assert "arms" not in json.loads((sweep / "sweep_report.json").read_text())


def test_a_group_by_key_no_job_overrides_exits_2(sweep, capsys):
    with pytest.raises(SystemExit) as e:
        sweep_main([str(sweep), "--group-by", "filter.valu"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err == ("ragen2-sweep-report: error: --group-by filter.valu: no job overrides it; "
                   "the jobs override: filter.value, seed\n")
    with pytest.raises(SystemExit) as e:
        report_main([str(sweep), "--group-by", "a,b"])
    assert e.value.code == 2 and "--group-by a,b: no job overrides them" in capsys.readouterr().err


def test_report_sweep_page(sweep, capsys):
    assert report_main([str(sweep)]) == 0  # default group-by: filter.value (seed is not an arm)
    html = (sweep / "report.html").read_text()
    assert "grouped by <code>filter.value</code> (every swept key but seed)" in html
    assert '<table id="arms">' in html and "0.400 ± 0.200 (0.200–0.600)" in html
    assert "median per-run Spearman rho" in html and "are never pooled" in html
    assert ('<td class="num">—</td><td class="num">—</td><td class="num">0</td>'
            '<td class="num">6</td>') in html
    assert 'id="fig-sweep-curves"' in html and 'id="fig-sweep-scatter"' in html
    for i in range(6):  # each job has its own page, linked relative to the sweep page
        assert f'<a href="{i}/report.html">{i}</a>' in html
        assert (sweep / str(i) / "report.html").read_text().startswith("<!DOCTYPE html>")
    # elsewhere, without job pages: links gone, grouping by seed gives one arm per seed
    out = sweep.parent / "pages" / "sweep.html"
    assert report_main([str(sweep), "--out", str(out), "--group-by", "seed", "--no-job-reports"]) == 0
    html = out.read_text()
    assert "<td>seed=0</td><td class=\"num\">2</td>" in html and "<a href=" not in html
