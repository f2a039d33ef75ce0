"""ragen2/controller/evaluation.py: the held-out evaluation during training, with stand-in workers
whose episodes are known: what it asks of them, its success and its files."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import pytest

from ragen2 import seeding
from ragen2.config import Config
from ragen2.controller.evaluation import Evaluator
from ragen2.rollout.trajectory import Trajectory


class _Actors:
    def __init__(self, successes: list[bool]) -> None:
        self.successes, self.workers, self.calls = successes, [object(), object()], []

    def gather(self, method, specs, *args):  # noqa: ANN001
        self.calls.append((method, specs, args))
        out = []
        for i, ok in enumerate(self.successes):
            t = Trajectory(env_seed=100 + i, group_id=i, policy_version=args[1][0], env_name="e")
            t.turn_ends, t.turn_rewards, t.success = [0], [float(ok)], ok
            t.append([1], 1)
            out.append(t)
        return out, {}


def test_an_evaluation_by_hand(tmp_path):
    cfg = Config()
    cfg = replace(cfg, trainer=replace(cfg.trainer, eval_episodes=4, log_samples=2))
    problems = SimpleNamespace(eval_specs=lambda n: [f"spec{i}" for i in range(n)],
                               eval_envs=[SimpleNamespace(name="e")])
    actors = _Actors([True, False, True, True])
    ev = Evaluator(cfg, problems, actors, tmp_path).evaluate(step=5, version=3)
    assert ev.success == 0.75 and ev.metrics["eval/success"] == 0.75
    assert ev.metrics["eval/reward_mean"] == 0.75 and "timing/eval_s" in ev.metrics
    assert not any(k.startswith("eval/e/") for k in ev.metrics)  # one env: no per-env split
    (method, specs, args), = actors.calls
    assert method == "rollout" and specs == ["spec0", "spec1", "spec2", "spec3"]
    assert args == ([seeding.eval_sampling_seed(0), seeding.eval_sampling_seed(1)], [3, 3],
                    [True, True])  # the evaluation seeds, the policy's version, evaluation mode
    samples = (tmp_path / "samples" / "eval_step_000005.jsonl").read_text().splitlines()
    assert [json.loads(r)["env_seed"] for r in samples] == [100, 103]  # 2 spread over the 4
    outcomes = (tmp_path / "evaluations" / "step_000005.jsonl").read_text().splitlines()
    assert len(outcomes) == 4


def test_too_many_env_errors_stop_the_evaluation(tmp_path):
    from ragen2.controller.episodes import EnvFailureError

    cfg = Config()
    cfg = replace(cfg, trainer=replace(cfg.trainer, eval_episodes=2),
                  rollout=replace(cfg.rollout, max_env_error_frac=0.0))
    actors = _Actors([True, True])
    real_gather = actors.gather

    def failing(*a):  # noqa: ANN002
        trajs, stats = real_gather(*a)
        trajs[1].env_error = "ValueError: boom"
        return trajs, stats

    actors.gather = failing
    problems = SimpleNamespace(eval_specs=lambda n: ["s"] * n, eval_envs=[None])
    with pytest.raises(EnvFailureError, match="evaluation at step 2: 1 of 2 episodes"):
        Evaluator(cfg, problems, actors, tmp_path).evaluate(step=2, version=0)
