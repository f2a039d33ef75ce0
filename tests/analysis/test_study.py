"""The study analysis (ragen2.analysis.study) on hand-made runs, numbers worked out by hand."""

from __future__ import annotations

import gzip
import json
import math

import pytest

from ragen2.analysis import study

RUN_A = {  # evaluation at 0 and 2; monitor at 1 and 2
    0: {"eval/success": 0.1},
    1: {"collapse/mi": 0.5, "collapse/token_entropy": 1.0, "timing/step_s": 2.0,
        "filter/kept_ratio": 1.0, "rollout/success": 0.2},
    2: {"eval/success": 0.3, "collapse/mi": 0.7, "collapse/token_entropy": 0.9,
        "collapse/mi_null": 0.05, "collapse/reasoning_tokens_mean": 12.5, "timing/step_s": 4.0, "filter/kept_ratio": 0.5, "rollout/success": 0.4},
}


def test_run_summary_by_hand():
    row = study.run_summary("none", 0, RUN_A)
    assert row["initial_success"] == 0.1 and row["final_success"] == 0.3
    assert row["final_mi"] == 0.7 and row["final_token_entropy"] == 0.9
    assert row["mean_step_s"] == pytest.approx(3.0)
    assert row["mean_kept_ratio"] == pytest.approx(0.75)
    assert row["final_retrieval_acc"] is None and row["steps"] == 2
    assert row["final_mi_null"] == 0.05 and row["final_reasoning_tokens"] == 12.5
    # the summary's final evaluation wins over the metrics file
    assert study.run_summary("none", 0, RUN_A, {"eval_after": 0.35})["final_success"] == 0.35


def test_paired_only_where_both_exist():
    assert study.paired(RUN_A, "mi", "success") == [(0.7, 0.3)]
    assert study.paired(RUN_A, "mi", "train_success") == [(0.5, 0.2), (0.7, 0.4)]
    nan_run = {1: {"collapse/mi": math.nan, "eval/success": 0.5}}
    assert study.paired(nan_run, "mi", "success") == []


def test_spearman_by_hand():
    # ranks x 1 2 3 4, y 2 1 4 3: sum d^2 = 4, rho = 1 - 6 * 4 / (4 * 15) = 0.6
    assert study.spearman([(1, 2), (2, 1), (3, 4), (4, 3)])["rho"] == pytest.approx(0.6)
    # ties: x ranks 1, 2.5, 2.5, 4 against 1..4 -> 4.5 / sqrt(4.5 * 5) = 0.948683
    r = study.spearman([(1, 1), (2, 2), (2, 3), (3, 4)])
    assert r["rho"] == pytest.approx(0.948683, abs=1e-6) and r["n"] == 4
    assert study.spearman([(1, 1), (2, 2)])["rho"] is None  # too few points
    assert study.spearman([(1, 5), (2, 5), (3, 5)])["rho"] is None  # constant side


def _run(points):
    """A run with (mi, entropy, success) at steps 1, 2, ...: monitor and evaluation together."""
    return {i + 1: {"collapse/mi": m, "collapse/token_entropy": e, "eval/success": s}
            for i, (m, e, s) in enumerate(points)}


def test_correlations_are_per_run_then_summarised_over_runs():
    from scipy.stats import spearmanr

    runs = {("none", 0): _run([(0.1, 1.0, 0.1), (0.2, 0.9, 0.2), (0.3, 0.8, 0.4), (0.4, 0.7, 0.3)]),
            ("none", 1): _run([(0.5, 1.0, 0.9), (0.6, 1.1, 0.1), (0.7, 1.2, 0.5)]),
            ("top_p", 0): _run([(0.9, 1.0, 0.2), (0.8, 1.0, 0.3), (0.7, 1.0, 0.4)]),
            ("top_p", 1): {1: {"collapse/mi": 0.5, "eval/success": 0.2}}}  # one point: no rho
    corr = study.correlations(runs)
    c = corr["mi_vs_success"]
    # per run, by hand: run 0 ranks x 1 2 3 4, y 1 2 4 3 -> 1 - 6 * 2 / 60 = 0.8;
    # run 1: x 1 2 3, y 3 1 2 -> 1 - 6 * 6 / 24 = -0.5; run 2: x 3 2 1, y 1 2 3 -> -1
    assert [r["rho"] for r in c["per_run"][:3]] == pytest.approx([0.8, -0.5, -1.0])
    assert c["per_run"][3] == {"arm": "top_p", "seed": 1, "rho": None, "n": 1}
    for r, (key, m) in zip(c["per_run"][:3], list(runs.items())[:3]):
        pts = study.paired(m, "mi", "success")
        assert (r["arm"], r["seed"]) == key
        assert r["rho"] == pytest.approx(spearmanr(*zip(*pts)).statistic)
    # the median over the 3 runs with a rho; the points are counted, never pooled
    assert c["rho"] == pytest.approx(-0.5) and c["runs"] == 3 and c["n"] == 4 + 3 + 3 + 1
    assert c["lo"] <= c["rho"] <= c["hi"] and -1.0 <= c["lo"] and c["hi"] <= 0.8
    assert study.correlations(runs) == corr  # seeded: the same interval again
    # entropy: run 0 ranks x 4 3 2 1 vs y 1 2 4 3, sum d^2 = 9 + 1 + 4 + 4 = 18 -> -0.8;
    # run 1 x 1 2 3 vs y 3 1 2 -> -0.5; run 2 constant entropy: no rho -> median -0.65
    e = corr["entropy_vs_success"]
    assert e["rho"] == pytest.approx(-0.65) and e["runs"] == 2
    assert corr["retrieval_vs_success"]["rho"] is None and corr["retrieval_vs_success"]["runs"] == 0
    assert corr["retrieval_vs_success"]["lo"] is None


def test_arm_differences_over_seeds_by_hand():
    rows = [{"arm": "none", "final_success": 0.2, "initial_success": 0.1, "final_mi": 0.5},
            {"arm": "none", "final_success": 0.4, "initial_success": 0.1, "final_mi": None},
            {"arm": "top_p", "final_success": 0.5, "initial_success": 0.1, "final_mi": 0.9},
            {"arm": "top_p", "final_success": 0.7, "initial_success": 0.1, "final_mi": 0.7}]
    for r in rows:
        r["success_gain"] = r["final_success"] - r["initial_success"]
    d = study.arm_differences(rows, "none", keys=("final_success", "success_gain", "final_mi"))
    assert list(d) == ["top_p"]
    fs = d["top_p"]["final_success"]
    assert fs["diff"] == pytest.approx(0.6 - 0.3) and (fs["n_a"], fs["n_b"]) == (2, 2)
    # every resample of top_p has a mean in [0.5, 0.7], of none in [0.2, 0.4]
    assert 0.1 - 1e-12 <= fs["lo"] <= fs["diff"] <= fs["hi"] <= 0.5 + 1e-12
    assert d["top_p"]["success_gain"]["diff"] == pytest.approx(0.3)
    mi = d["top_p"]["final_mi"]  # none has one final MI: a difference, no interval
    assert mi["diff"] == pytest.approx(0.8 - 0.5) and mi["lo"] is None and mi["n_b"] == 1
    assert study.arm_differences(rows, "tiered") == {}
    assert study.run_summary("none", 0, RUN_A)["success_gain"] == pytest.approx(0.2)


def test_arm_table_mean_and_spread():
    rows = [{"arm": "none", "final_success": 0.2}, {"arm": "none", "final_success": 0.4},
            {"arm": "top_p", "final_success": 0.5}]
    t = study.arm_table(rows, keys=("final_success",))
    assert t["none"]["final_success"]["mean"] == pytest.approx(0.3)
    assert t["none"]["final_success"]["std"] == pytest.approx(0.141421, abs=1e-6)
    assert t["top_p"]["final_success"] == {"mean": 0.5, "std": 0.0, "min": 0.5, "max": 0.5, "n": 1}


def test_plots_and_examples(tmp_path):
    runs = {("none", 0): RUN_A, ("none", 1): RUN_A, ("top_p", 0): RUN_A}
    paths = study.write_plots(runs, study.correlations(runs), tmp_path)
    assert [p.name for p in paths] == ["curves.png", "scatter.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in paths)

    (tmp_path / "rollouts").mkdir()
    eps = [{"group_id": g, "env_seed": 10 + g // 2, "reasoning": f"think {g}", "reward": 1.0,
            "prompt": "grid"} for g in range(4)]
    with gzip.open(tmp_path / "rollouts" / "step_000003.jsonl.gz", "wt") as f:
        f.write("\n".join(json.dumps(e) for e in eps))
    ex = study.reasoning_examples(tmp_path)
    assert [(e["step"], e["env_seed"], e["reasoning"]) for e in ex] == [(3, 10, "think 0"), (3, 11, "think 2")]


def test_merge_runs_keeps_other_arms_and_replaces_reruns():
    base = {"steps": 40, "eval_every": 10, "eval_episodes": 128, "monitor_every": 5, "quick": False}
    previous = {"settings": {**base, "arms": {"none": ["filter=none"]}, "seeds": [0, 1],
                             "total_wall_s": 100.0},
                "runs": [{"arm": "none", "seed": 0, "returncode": 0, "wall_s": 50.0, "overrides": [],
                          "final_success": 0.2},
                         {"arm": "none", "seed": 1, "returncode": 1, "wall_s": 50.0, "overrides": []}]}
    now = [{"arm": "none", "seed": 1, "returncode": 0, "wall_s": 60.0, "overrides": []},
           {"arm": "reg", "seed": 1, "returncode": 0, "wall_s": 70.0, "overrides": []}]
    settings = {**base, "arms": {"reg": ["x=1"]}, "seeds": [1], "total_wall_s": 130.0}
    runs, merged = study.merge_runs(previous, now, settings)
    # seed 0 of "none" is kept (bookkeeping only), seed 1 of "none" is replaced by the rerun
    assert runs == [{"arm": "none", "seed": 0, "returncode": 0, "wall_s": 50.0, "overrides": []},
                    *now]
    assert merged["arms"] == {"none": ["filter=none"], "reg": ["x=1"]}
    # the replaced run's 50 s no longer count: 50 (kept) + 60 + 70
    assert merged["seeds"] == [0, 1] and merged["total_wall_s"] == 180.0
    # a different study (other step count) is not merged into
    other = {**settings, "steps": 2}
    assert study.merge_runs(previous, now, other) == (now, other)
    variant = {**settings, "variant": "random_start"}  # another task is another study
    assert study.merge_runs(previous, now, variant) == (now, variant)
    assert study.merge_runs({}, now, settings) == (now, settings)


def test_reasoning_examples_first_last_and_bad_step(tmp_path):
    (tmp_path / "rollouts").mkdir()
    for step in (1, 5):
        eps = [{"group_id": 0, "env_seed": step, "reasoning": f"at {step}", "reward": 0.0, "prompt": "g"}]
        with gzip.open(tmp_path / "rollouts" / f"step_{step:06d}.jsonl.gz", "wt") as f:
            f.write(json.dumps(eps[0]))
    assert [e["reasoning"] for e in study.reasoning_examples(tmp_path, step="first")] == ["at 1"]
    assert [e["reasoning"] for e in study.reasoning_examples(tmp_path, step=5)] == ["at 5"]
    with pytest.raises(ValueError, match="'middle' is invalid"):
        study.reasoning_examples(tmp_path, step="middle")
