"""What the tests' training runs share: the small configs, and readers of a run's folder.

The runs themselves are fixtures, computed once and asserted on by many tests: ``four_steps``
(tests/conftest.py, the smoke's reference run) and the module fixtures of the tier-2 files.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

SMALL = ["trainer.warm_start.episodes=32", "trainer.warm_start.epochs=1",
         "trainer.warm_start.batch_size=16", "trainer.eval_episodes=8", "trainer.eval_every=0",
         "rollout.env_groups=2", "rollout.group_size=3", "rollout.max_turns=3",
         "trainer.loggers=[jsonl]", "cluster.learner_world_size=2", "algorithm.ppo_mini_batches=2",
         # no probe panel (the default, 32 prompts x 4 samples, costs 20x a step here): a test
         # that asserts on the panel sets its own
         "monitor.panel_size=0"]

#: for tests whose subject is not the learner (envs, rollout workers, filters, the monitor): one
#: FSDP rank on both cores instead of two on one each. Measured on 2 cores: the monitor-validation
#: warm starts ran 1.7x faster, with no gloo all-reduce between two processes sharing the cores.
#: The two-rank learner stays the default of SMALL (the resume, PPO, LoRA and sync tests).
ONE_RANK = "cluster.learner_world_size=1"


def small(model_path: str, *extra: str) -> list[str]:
    """Tiny budgets; the model goes through `model=hf` (real HF loading of a saved directory)."""
    return ["model=hf", f"model.path={model_path}", "recipe=tiny", *SMALL, *extra]


def hf_ppo_mixed(model_path: str, *extra: str) -> list[str]:
    """The shared tier-2 run's config (tests/conftest.py ``hf_ppo_mixed``, and the command line of
    tests/test_kill_resume.py): the HF engine, algorithm=ppo (value model + GAE, a frozen
    reference for k3 KL) on a mix of envs (Sokoban 50% / FrozenLake 25% / Math 25%), evaluated on
    envs never trained on, two learner ranks, 4 steps, a checkpoint every step."""
    return small(model_path, "engine=hf", "algorithm=ppo", "algorithm.kl_coef=0.05", "env=mixed",
                 "rollout.env_groups=4", "rollout.group_size=2", "trainer.total_steps=4",
                 "trainer.save_every=1", "env.eval.frozenlake6.id=ragen2/FrozenLake-v0",
                 "env.eval.frozenlake6.kwargs.size=6", "env.eval.math3.id=ragen2/Math-v0",
                 "env.eval.math3.kwargs.difficulty=3", *extra)


def rows(run_dir: Path) -> dict[int, dict]:
    """``{step: metrics row}`` of a run's metrics.jsonl."""
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return {r["step"]: r for r in map(json.loads, lines)}


def without_timing(row: dict) -> dict:
    return {k: v for k, v in row.items() if not k.startswith("timing/")}


def resumable_copy(run_dir: Path, dest: Path, step: int) -> Path:
    """``run_dir`` as it was when its step-``step`` checkpoint was the newest: later checkpoints
    gone, ``latest.json`` pointing at it (what a run killed right after that save leaves)."""
    shutil.copytree(run_dir, dest)
    for ckpt in (dest / "checkpoints").glob("step_*"):
        if int(ckpt.name[5:]) > step:
            shutil.rmtree(ckpt)
    name = f"step_{step:06d}"
    assert (dest / "checkpoints" / name).is_dir(), f"{run_dir} has no checkpoint at step {step}"
    (dest / "checkpoints" / "latest.json").write_text(json.dumps({"step": step, "dir": name}))
    return dest
