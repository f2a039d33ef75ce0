"""End-to-end runs through Ray + FSDP2 on the tiny model (slow; run in CI)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragen2.train import load_config, train

pytestmark = pytest.mark.slow

SMALL = ["trainer.warm_start.episodes=32", "trainer.warm_start.epochs=1",
         "trainer.warm_start.batch_size=16", "trainer.eval_episodes=8", "trainer.eval_every=0",
         "rollout.env_groups=2", "rollout.group_size=3", "rollout.max_turns=3",
         "trainer.loggers=[jsonl]", "cluster.learner_world_size=2", "algorithm.ppo_mini_batches=2",
         # a probe panel of the runs' size (the default, 32 prompts x 4 samples, is 20x a step here)
         "monitor.panel_size=4", "monitor.panel_samples=2"]


#: for tests whose subject is not the learner (envs, rollout workers, filters, the monitor): one
#: FSDP rank on both cores instead of two on one each. Measured on 2 cores: the monitor-validation
#: warm starts ran 1.7x faster, with no gloo all-reduce between two processes sharing the cores.
#: The two-rank learner stays the default of SMALL (the resume, PPO, LoRA and sync tests).
ONE_RANK = "cluster.learner_world_size=1"


def small(model_path: str, *extra: str) -> list[str]:
    """Tiny budgets; the model goes through `model=hf` (real HF loading of a saved directory)."""
    return ["model=hf", f"model.path={model_path}", "recipe=tiny", *SMALL, *extra]


def rows(run_dir: Path) -> dict[int, dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return {r["step"]: r for r in map(json.loads, lines)}


def without_timing(row: dict) -> dict:
    return {k: v for k, v in row.items() if not k.startswith("timing/")}


def test_four_steps_log_metrics_and_checkpoint(four_steps):
    r = rows(four_steps)
    assert sorted(r) == [0, 1, 2, 3, 4]
    for step in range(1, 5):
        assert {"rollout/success", "rollout/reward_mean", "actor/loss", "actor/logprob_gap",
                "timing/step_s"} <= set(r[step])
        # on-policy fp32 CPU data: engine (vLLM) and learner logprobs agree
        assert r[step]["actor/logprob_gap"] < 1e-3
        assert r[step]["sync/probe_logprob_gap"] < 1e-3
        assert r[step]["actor/policy_version"] == step
    assert "eval/success" in r[0] and "eval/success" in r[4]
    assert r[0]["sync/probe_logprob_gap"] < 1e-3  # the first sync, after the warm start
    latest = json.loads((four_steps / "checkpoints" / "latest.json").read_text())
    assert latest["step"] == 4
    assert not list((four_steps / "checkpoints").glob("*.tmp-*"))


def resumable_copy(run_dir: Path, dest: Path, step: int) -> Path:
    """``run_dir`` as it was when its step-``step`` checkpoint was the newest: later checkpoints
    gone, ``latest.json`` pointing at it (what a run killed right after that save leaves)."""
    import shutil

    shutil.copytree(run_dir, dest)
    for ckpt in (dest / "checkpoints").glob("step_*"):
        if int(ckpt.name[5:]) > step:
            shutil.rmtree(ckpt)
    name = f"step_{step:06d}"
    assert (dest / "checkpoints" / name).is_dir(), f"{run_dir} has no checkpoint at step {step}"
    (dest / "checkpoints" / "latest.json").write_text(json.dumps({"step": step, "dir": name}))
    return dest


def test_resume_continues_the_same_run(four_steps, ray_session, tiny_model_path, tmp_path):
    """Resume in-process from the reference run's step-2 checkpoint: steps 3 and 4 come out the
    same. (A finished run extended by a resume: tests/test_sweeps.py; the CLI after kill -9:
    tests/test_kill_resume.py.)"""
    run = resumable_copy(four_steps, tmp_path / "run", 2)
    train(load_config(small(tiny_model_path, "trainer.total_steps=4", "trainer.save_every=2",
                            "trainer.resume=true")), run)
    full, resumed = rows(four_steps), rows(run)
    assert sorted(resumed) == [0, 1, 2, 3, 4]
    # it resumed (a run started over would rewrite every row): rows up to the checkpoint are kept
    # verbatim, wall times included, and the later ones are new
    assert all(resumed[step] == full[step] for step in (0, 1, 2))
    assert resumed[3]["timing/step_s"] != full[3]["timing/step_s"]
    for step in (3, 4):
        assert without_timing(resumed[step]) == without_timing(full[step])


def test_stale_batch_is_refused(ray_session, tiny_model_path):
    import numpy as np
    import ray

    from ragen2.learner.group import LearnerGroup

    cfg = load_config(small(tiny_model_path, ONE_RANK))
    group = LearnerGroup(cfg, tiny_model_path, threads=1)
    try:
        n, L = 2, 6
        batch = {"input_ids": np.ones((n, L), np.int64), "attention_mask": np.ones((n, L), np.int64),
                 "loss_mask": np.ones((n, L), np.int64), "logprobs": np.zeros((n, L), np.float32),
                 "token_rewards": np.zeros((n, L), np.float32), "rewards": np.array([0.0, 1.0], np.float32),
                 "group_ids": np.zeros(n, np.int64), "policy_version": np.array([0, 3])}
        with pytest.raises(ray.exceptions.RayTaskError, match="policy version"):
            group.update(ray.put(batch), 1)
    finally:
        group.shutdown()


def test_ppo_with_critic_and_kl_to_reference(ray_session, tiny_model_path, tmp_path):
    """algorithm=ppo: value model + GAE, a frozen reference for k3 KL, checkpoint of all three."""
    cfg = load_config(small(tiny_model_path, "algorithm=ppo", "algorithm.kl_coef=0.05",
                            "trainer.total_steps=2", "trainer.save_every=1"))
    train(cfg, tmp_path)
    r = rows(tmp_path)
    for step in (1, 2):
        assert r[step]["critic/vf_loss"] >= 0 and "actor/kl_loss" in r[step]
        assert r[step]["actor/logprob_gap"] < 1e-3
    ckpt = tmp_path / "checkpoints" / "step_000002"
    assert {"policy.pt", "critic.pt", "ref.pt", "trainer_state.json"} <= {p.name for p in ckpt.iterdir()}
    # resume restores policy, critic, reference and optimizers, and goes on from step 3
    train(load_config(small(tiny_model_path, "algorithm=ppo", "algorithm.kl_coef=0.05",
                            "trainer.total_steps=3", "trainer.resume=true")), tmp_path)
    r = rows(tmp_path)
    assert sorted(r) == [0, 1, 2, 3] and r[3]["actor/policy_version"] == 3


def test_mixed_envs_train_with_per_env_metrics(ray_session, tiny_model_path, tmp_path):
    """Sokoban 50% / FrozenLake 25% / Math 25% in one run, evaluated on an env never trained on."""
    cfg = load_config(small(tiny_model_path, ONE_RANK, "env=mixed", "rollout.env_groups=4",
                            "rollout.group_size=2", "trainer.total_steps=1",
                            "env.eval.frozenlake6.id=ragen2/FrozenLake-v0",
                            "env.eval.frozenlake6.kwargs.size=6", "env.eval.math3.id=ragen2/Math-v0",
                            "env.eval.math3.kwargs.difficulty=3"))
    train(cfg, tmp_path)
    r = rows(tmp_path)
    for name in ("sokoban", "frozenlake", "math"):
        assert f"rollout/{name}/success" in r[1] and f"rollout/{name}/env_errors" in r[1]
    assert 0 <= r[1]["rollout/success"] <= 1 and r[1]["rollout/env_errors"] == 0
    # groups by share: 2 Sokoban, 1 FrozenLake, 1 Math
    assert {"eval/frozenlake6/success", "eval/math3/success", "eval/success"} <= set(r[1])
    assert not any(k.startswith("eval/sokoban") for k in r[1])
    samples = [json.loads(x) for x in (tmp_path / "samples" / "eval_step_000001.jsonl").read_text().splitlines()]
    assert {s["env"] for s in samples} == {"frozenlake6", "math3"}


def test_env_errors_are_counted_then_stop_the_run(ray_session, tiny_model_path, tmp_path):
    """A user env raising in reset(): failed episodes are counted and training goes on, until the
    failure budget is exceeded."""
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
