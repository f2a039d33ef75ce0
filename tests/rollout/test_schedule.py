"""Bounded staleness's schedule (ragen2.rollout.schedule): which version generates each step's
batch, which batches a step launches, the queue that holds them (and refuses stale ones), its
checkpoint file, and the async/ metrics. No model, no Ray."""

from __future__ import annotations

import pytest

from ragen2.rollout.schedule import (QUEUE_FILE, RolloutQueue, Rollouts, StaleRolloutsError,
                                     behaviour_version, launch_steps, overlap_seconds,
                                     staleness_metrics)
from ragen2.rollout.trajectory import Trajectory


def _traj(version: int, group: int = 0) -> Trajectory:
    t = Trajectory(env_seed=group, group_id=group, policy_version=version)
    t.append([5, 6], 1, [-0.5, -1.5])
    t.turn_ends, t.turn_rewards = [1], [1.0]
    return t


def _batch(step: int, version: int, n: int = 2) -> Rollouts:
    return Rollouts(step, version, [_traj(version, g) for g in range(n)], {"env_s": 1.0},
                    {0: 3, 1: 4})


def test_behaviour_version_by_hand():
    assert [behaviour_version(t, 0) for t in range(1, 6)] == [0, 1, 2, 3, 4]  # on-policy: t - 1
    assert [behaviour_version(t, 1) for t in range(1, 6)] == [0, 0, 1, 2, 3]
    assert [behaviour_version(t, 3) for t in range(1, 7)] == [0, 0, 0, 0, 1, 2]


@pytest.mark.parametrize("k", [0, 1, 2, 3])
def test_the_loop_trains_each_step_on_its_assigned_version(k):
    """Replay the controller's schedule: at step s the engines hold version s - 1; the step's
    batch is the queued one (or generated now), then the engines generate launch_steps(...)."""
    total, queued, used, launches = 9, {}, {}, {}
    for s in range(1, total + 1):
        engines = s - 1  # one update (and push) per step
        used[s] = queued.pop(s) if s in queued else engines
        launches[s] = launch_steps(s, k, total, queued)
        for t in launches[s]:
            queued[t] = engines
        assert s - 1 - used[s] <= k  # the learner holds s - 1 when it trains step s
    assert used == {t: behaviour_version(t, k) for t in range(1, total + 1)}
    assert not queued  # nothing is generated past the last step
    if k:  # the first step launches k batches, every later one (until the end) exactly one
        assert launches[1] == list(range(2, k + 2))
        assert all(launches[s] == [s + k] for s in range(2, total - k + 1))
    else:
        assert all(v == [] for v in launches.values())


def test_the_queue_refuses_a_batch_older_than_the_bound():
    q = RolloutQueue(max_staleness=1)
    q.put(_batch(3, version=1))
    q.put(_batch(4, version=1))
    with pytest.raises(ValueError, match="queued already"):
        q.put(_batch(4, version=1))
    assert q.pop(2, learner_version=2) is None  # nothing queued for step 2
    assert q.pop(3, learner_version=2).version == 1  # staleness 1: allowed
    with pytest.raises(StaleRolloutsError, match=r"version\(s\) \[1\].*holds 3.*allows 2..3") as e:
        q.pop(4, learner_version=3)  # staleness 2 > 1
    assert len(e.value.rollouts.trajs) == 2 and len(q) == 0  # dropped, never handed out


def test_a_trajectory_of_another_version_is_refused_too():
    q = RolloutQueue(max_staleness=2)
    r = _batch(5, version=3)
    r.trajs[1].policy_version = 0  # one stale trajectory in an otherwise fresh batch
    q.put(r)
    with pytest.raises(StaleRolloutsError, match=r"\[0, 3\]"):
        q.pop(5, learner_version=4)
    q.put(_batch(6, version=5))  # newer than the learner (a rollback went back): refused
    with pytest.raises(StaleRolloutsError):
        q.pop(6, learner_version=4)


def test_the_queue_round_trips_through_a_checkpoint_directory(tmp_path):
    q = RolloutQueue(max_staleness=2)
    q.save(tmp_path)
    assert not (tmp_path / QUEUE_FILE).exists()  # nothing queued: no file
    q.put(_batch(8, version=6))
    q.put(_batch(7, version=5))
    state = q.state_dict()
    assert state == {"steps": [7, 8], "versions": [5, 6]}
    q.save(tmp_path)
    back = RolloutQueue(max_staleness=2)
    back.load(tmp_path, state)
    assert back.steps() == [7, 8]
    r = back.pop(7, learner_version=6)
    assert [t.input_ids for t in r.trajs] == [[5, 6], [5, 6]]
    assert r.trajs[0].logprobs == [-0.5, -1.5] and r.group_keys == {0: 3, 1: 4}
    with pytest.raises(ValueError, match="controller state lists"):
        RolloutQueue(2).load(tmp_path, {"steps": [8, 9], "versions": [6, 7]})
    with pytest.raises(FileNotFoundError, match="steps \\[3\\]"):
        RolloutQueue(2).load(tmp_path / "elsewhere", {"steps": [3], "versions": [1]})
    empty = RolloutQueue(2)
    empty.load(tmp_path / "elsewhere", None)  # a checkpoint of k = 0: nothing queued
    assert len(empty) == 0


def test_clear_and_drop_through():
    q = RolloutQueue(max_staleness=3)
    for s in (4, 5, 6):
        q.put(_batch(s, version=2))
    q.drop_through(4)
    assert q.steps() == [5, 6]
    assert [r.step for r in q.clear()] == [5, 6] and len(q) == 0


def test_staleness_metrics_by_hand():
    trajs = [_traj(4), _traj(3), _traj(3), _traj(2)]
    m = staleness_metrics(trajs, learner_version=4)
    assert m == {"async/staleness_mean": pytest.approx((0 + 1 + 1 + 2) / 4),
                 "async/staleness_max": 2.0}
    assert staleness_metrics([], 4)["async/staleness_max"] == 0.0


def test_overlap_seconds_by_hand():
    assert overlap_seconds(10.0, 14.0, launch=9.5, generation_s=3.0) == pytest.approx(2.5)
    assert overlap_seconds(10.0, 14.0, launch=10.0, generation_s=9.0) == pytest.approx(4.0)
    assert overlap_seconds(10.0, 14.0, launch=5.0, generation_s=2.0) == 0.0  # done before
