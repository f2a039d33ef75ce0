"""benchmarks/remote_env.py: the run order, the per-step medians and the ratios, on hand-made
metrics files and runs (nothing is trained or served here; speed is measured there, never
asserted)."""

from __future__ import annotations

import json

import pytest

from tests.scripts import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("remote_env.py", "remote_env")


def test_the_arms_alternate_a_b_b_a(bench):
    assert bench.arm_order(1) == ["local", "remote"]
    assert bench.arm_order(2) == ["local", "remote", "remote", "local"]
    assert bench.arm_order(3)[4:] == ["local", "remote"]


def test_step_medians_read_the_rl_steps_of_a_metrics_file(bench, tmp_path):
    rows = [{"step": 0, "timing/warm_start_s": 200.0, "timing/eval_s": 8.0},
            *({"step": i, "timing/step_s": s, "timing/env_s": 0.1 * i,
               "timing/rollout_s": 4.0, "timing/generate_s": 3.5,
               "rollout/num_turns_mean": 5.0} for i, s in enumerate([15.0, 14.0, 30.0], 1)),
            {"step": 3, "timing/eval_s": 9.0, "timing/monitor_s": 2.5}]
    (tmp_path / "metrics.jsonl").write_text(
        "\n".join(json.dumps(r) for r in rows) + '\n{"step": 4, "timing/st')  # a torn last line
    m = bench.step_medians(bench.read_rows(tmp_path))
    assert m == {"steps": 3, "step_s": 15.0, "rollout_s": 4.0, "generate_s": 3.5,
                 "env_s": pytest.approx(0.2), "num_turns_mean": 5.0,
                 "warm_start_s": 200.0, "eval_s": 17.0, "monitor_s": 2.5}
    assert bench.read_rows(tmp_path / "missing") == []


def test_requests_per_step_request(bench):
    folded = {"POST /reset": 64, "POST /step": 300, "POST /hook/demonstration": 40}
    assert bench.requests_per_step_request(folded) == 1.0
    first = {"POST /step": 300, "POST /hook/ground": 310}  # format errors: ground, no step
    assert bench.requests_per_step_request(first) == pytest.approx(610 / 300)
    assert bench.requests_per_step_request({"GET /metadata": 1}) is None


def run(bench, arm, rnd, wall, step, env_s, rc=0, counts=None):
    counts = counts or {}
    return {"arm": arm, "round": rnd, "returncode": rc, "wall_s": wall, "foreign_cores": 0.1,
            "before": 0.1, "after": 0.5, "gain": 0.4,
            "steps": {"steps": 40, "step_s": step, "env_s": env_s, "rollout_s": 4.0},
            "requests_per_step_request":
                bench.requests_per_step_request(counts) if counts else None}


def test_summarize_medians_ratios_and_pairs(bench):
    one = {"POST /step": 100}
    runs = [run(bench, "local", 0, 1000.0, 15.0, 0.02),
            run(bench, "remote", 0, 1100.0, 16.0, 0.5, counts=one),
            run(bench, "remote", 1, 1050.0, 15.5, 0.4, counts=one),
            run(bench, "local", 1, 1000.0, 15.0, 0.02),
            run(bench, "remote", 2, 9999.0, 99.0, 9.0, rc=1)]  # a failed run: left out
    s = bench.summarize(runs)
    assert s["runs"] == 5 and s["failed"] == 1
    assert s["local"]["n"] == 2 and s["remote"]["n"] == 2
    assert s["wall_ratio"] == pytest.approx(1075.0 / 1000.0)
    assert s["step_ratio"] == pytest.approx(15.75 / 15.0)
    assert s["step_overhead_s"] == pytest.approx(0.75)
    assert s["env_s_per_step"] == {"local": pytest.approx(0.02), "remote": pytest.approx(0.45)}
    assert s["pair_wall_ratios"] == pytest.approx([1.1, 1.05])
    assert s["requests_per_step_request"] == 1.0
    assert s["local"]["gain"] == pytest.approx(0.4)


def test_summarize_without_a_finished_remote_run(bench):
    s = bench.summarize([run(bench, "local", 0, 1000.0, 15.0, 0.02)])
    assert s["wall_ratio"] is None and s["step_overhead_s"] is None
    assert s["pair_wall_ratios"] == [] and s["requests_per_step_request"] is None
