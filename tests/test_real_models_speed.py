"""benchmarks/real_models_speed.py: the preset-shaped update batch and the step projection, on
hand-made inputs (no model is loaded; speed itself is measured there, never asserted here)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.scripts import load_benchmark


@pytest.fixture(scope="module")
def rms():
    return load_benchmark("real_models_speed.py", "real_models_speed")


def test_update_batch_trains_exactly_the_replies(rms):
    prompts = [[5, 6, 7]] * 2 + [[8, 9]] * 2  # 2 problems x group 2
    b = rms.update_batch(prompts, group=2, reply_tokens=4, version=3, seed=0)
    lengths = b["attention_mask"].sum(1)
    assert b["input_ids"].shape == (4, lengths.max())
    for i, p in enumerate(prompts):
        n = int(lengths[i])
        assert b["input_ids"][i, :len(p)].tolist() == p
        assert 2 <= n - len(p) <= 6  # reply length in [reply/2, 3 reply/2]
        assert b["input_ids"][i, n - 1] == 2  # ends in EOS
        assert b["loss_mask"][i].tolist() == [0] * len(p) + [1] * (n - len(p)) + [0] * (
            b["input_ids"].shape[1] - n)
    assert b["group_ids"].tolist() == [0, 0, 1, 1]
    assert b["rewards"].tolist() == [0, 1, 0, 1]  # a reward spread in every group
    assert (b["policy_version"] == 3).all()


def test_step_projection_sums_the_phases(rms):
    res = {
        "generate": {"vllm:bfloat16": {"s": 10.0}, "vllm:float32": {"s": 20.0}},
        "update": {"bfloat16": {"full": {"s": 30.0}}, "float32": {"full": {"s": 90.0}}},
        "sync": {"bfloat16": {"s": 1.0, "probe_s": 0.5}, "float32": {"s": 2.0, "probe_s": 1.0}},
        "monitor": {d: {"batch": {"s": 6.0}, "panel": {"s": 4.0}, "every": 10}
                    for d in ("bfloat16", "float32")},
    }
    steps = rms.project(res)
    assert set(steps) == {"vllm/full/bfloat16", "vllm/full/float32"}
    assert steps["vllm/full/bfloat16"] == pytest.approx(
        {"generate_s": 10.0, "update_s": 30.0, "sync_s": 1.5, "monitor_s": 1.0, "step_s": 42.5})
    assert steps["vllm/full/float32"]["step_s"] == pytest.approx(20 + 90 + 3 + 1)
    assert np.isclose(steps["vllm/full/float32"]["step_s"] / steps["vllm/full/bfloat16"]["step_s"],
                      114 / 42.5)
