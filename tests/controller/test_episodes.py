"""ragen2/controller/episodes.py: what a batch of episodes says (``rollout/*``, ``eval/*``) and the
budget of episodes whose env raised, worked out by hand."""

from __future__ import annotations

import pytest

from ragen2.controller.episodes import (EnvFailureError, batch_metrics, check_env_errors,
                                        group_rewards, rollout_metrics, success_rate)
from ragen2.rollout.schedule import Rollouts
from ragen2.rollout.trajectory import Trajectory


def traj(env, group, reward, success=False, error=None):
    t = Trajectory(env_seed=group, group_id=group, policy_version=0, env_name=env)
    t.turn_rewards, t.turn_ends, t.success, t.env_error = [reward], [0], success, error
    t.append([1, 2], 1)
    return t


BATCH = [traj("a", 0, 1.0, True), traj("a", 0, 0.0), traj("b", 1, 2.0, True), traj("b", 1, 2.0, True),
         traj("b", 2, 0.0, error="ValueError: boom")]


def test_rollout_metrics_overall_and_per_env():
    m = rollout_metrics(BATCH, "rollout", per_env=True)
    assert m["rollout/success"] == pytest.approx(3 / 5)
    assert m["rollout/a/success"] == pytest.approx(0.5)
    assert m["rollout/b/success"] == pytest.approx(2 / 3)  # the failed episode counts as a failure
    assert m["rollout/b/reward_mean"] == pytest.approx(4 / 3)
    assert m["rollout/env_errors"] == 1 and m["rollout/a/env_errors"] == 0
    # group stds: a = std(1, 0) = 0.5; b group 1 = 0; b group 2 (one episode) = 0
    assert m["rollout/a/group_reward_std_mean"] == pytest.approx(0.5)
    assert m["rollout/group_reward_std_mean"] == pytest.approx(0.5 / 3)
    assert m["rollout/zero_std_group_frac"] == pytest.approx(2 / 3)
    assert not any(k.startswith("rollout/a/") for k in rollout_metrics(BATCH, "rollout"))


def test_env_error_budget():
    check_env_errors(BATCH, 0.2, "step 3")  # 1 of 5 = 0.2: within the budget
    with pytest.raises(EnvFailureError, match=r"step 3: 1 of 5 episodes failed.*env 'b' seed 2: "
                                              r"ValueError: boom"):
        check_env_errors(BATCH, 0.19, "step 3")
    with pytest.raises(EnvFailureError):
        check_env_errors(BATCH, 0.0, "step 3")
    check_env_errors(BATCH[:4], 0.0, "step 3")  # no failure at all: fine even with budget 0


def test_group_rewards_and_success():
    assert group_rewards(BATCH) == {0: [1.0, 0.0], 1: [2.0, 2.0], 2: [0.0]}
    assert success_rate(BATCH) == pytest.approx(3 / 5)


def test_a_steps_batch_metrics_carry_the_worker_restarts():
    batch = Rollouts(3, 0, BATCH[:4], {"worker_restarts": 2.0}, None)
    m = batch_metrics(batch, per_env=False)
    assert m["rollout/worker_restarts"] == 2.0 and m["rollout/success"] == 0.75
    assert m["rollout/num_turns_mean"] == 1.0 and m["rollout/response_tokens_mean"] == 2.0
    assert m["rollout/reward_mean"] == pytest.approx(5 / 4) and m["rollout/env_errors"] == 0
