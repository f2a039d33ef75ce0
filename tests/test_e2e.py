"""End-to-end runs through Ray + FSDP2 on the tiny model (tier 2, `make test-e2e`)."""

from __future__ import annotations

import json

import pytest

from ragen2.train import load_config, train
from tests.runs import ONE_RANK, rows, small

pytestmark = pytest.mark.e2e


def test_ppo_with_critic_and_kl_to_reference(hf_ppo_mixed):
    """algorithm=ppo (tests/conftest.py's shared ``hf_ppo_mixed`` run): the critic and the KL term train, and the checkpoint holds all three models. (That a
    learner loaded from such a checkpoint makes the same next update:
    tests/learner/test_rank_options.py::test_ppo_checkpoint_with_critic_and_reference_resumes_exactly.)"""
    r = rows(hf_ppo_mixed)
    for step in range(1, 5):
        assert r[step]["critic/vf_loss"] >= 0 and "actor/kl_loss" in r[step]
        assert r[step]["actor/logprob_gap"] < 1e-3
        assert r[step]["actor/policy_version"] == step
    ckpt = hf_ppo_mixed / "checkpoints" / "step_000004"
    assert {"policy", "critic", "ref", "trainer_state.json"} <= {p.name for p in ckpt.iterdir()}


def test_mixed_envs_train_with_per_env_metrics(hf_ppo_mixed):
    """A mix of envs in one run (tests/conftest.py's shared ``hf_ppo_mixed``), evaluated on envs
    never trained on, with per-env metrics."""
    r = rows(hf_ppo_mixed)
    for step in range(1, 5):
        for name in ("sokoban", "frozenlake", "math"):
            assert f"rollout/{name}/success" in r[step] and f"rollout/{name}/env_errors" in r[step]
        assert 0 <= r[step]["rollout/success"] <= 1 and r[step]["rollout/env_errors"] == 0
    # groups by share: 2 Sokoban, 1 FrozenLake, 1 Math; evaluated before RL and at the end
    for step in (0, 4):
        assert {"eval/frozenlake6/success", "eval/math3/success", "eval/success"} <= set(r[step])
        assert not any(k.startswith("eval/sokoban") for k in r[step])
    samples = [json.loads(x) for x in (hf_ppo_mixed / "samples" / "eval_step_000004.jsonl").read_text().splitlines()]
    assert {s["env"] for s in samples} == {"frozenlake6", "math3"}


def test_env_errors_are_counted_then_stop_the_run(ray_session, tiny_model_path, tmp_path):
    """Own run: a user env raising in reset(): failed episodes are counted and training goes on,
    until the failure budget is exceeded."""
    from ragen2.controller import EnvFailureError

    base = [ONE_RANK, "env.id=tests.flaky_env:Flaky-v0", "trainer.warm_start.enabled=false",
            "rollout.env_groups=4", "rollout.group_size=2", "trainer.total_steps=1"]
    # odd seeds fail: 4 of the 8 eval seeds (2^31 + i), 1 of the 4 groups of step 1 (seeds from
    # ragen2.seeding with seed=0): 2 of 8 episodes; a budget of 0.8 lets the run finish
    train(load_config(small(tiny_model_path, *base, "rollout.max_env_error_frac=0.8")), tmp_path / "ok")
    r = rows(tmp_path / "ok")
    assert r[0]["eval/env_errors"] == 4 and r[1]["eval/env_errors"] == 4
    assert r[1]["rollout/env_errors"] == 2 and "actor/loss" in r[1]
    samples = (tmp_path / "ok" / "samples" / "eval_step_000000.jsonl").read_text()
    assert "flaky env failed on seed" in samples
    # the default budget (0.25) is exceeded by the first evaluation: the run stops, saying why
    with pytest.raises(EnvFailureError, match="evaluation at step 0: 4 of 8 episodes failed inside "
                                              "the env.*flaky env failed on seed"):
        train(load_config(small(tiny_model_path, *base)), tmp_path / "stop")
