"""ragen2/controller/loop.py: ``train_step`` over its real components (rollouts and the queue of
batches ahead, watch, filter, collation) with stand-in actors, and the training batch it hands
the learner."""

from __future__ import annotations

import pytest

from ragen2.rollout.trajectory import Trajectory


# ------------------------------------------------- train_step's schedule with stand-in actors
class _Pool:
    """Stand-in worker pool: records launches and collections; every episode is stamped with the
    version the call expected, rewards 0/1 alternating so every group has spread."""

    def __init__(self, events, n=2):
        self.events, self.actors = events, [object()] * n

    def start(self, method, specs, seeds, versions, *rest):
        self.events.append(("launch", versions[0]))
        return specs, versions[0]

    def finish(self, pending):
        specs, version = pending
        self.events.append(("collect", version))
        trajs = []
        for i, s in enumerate(specs):
            t = Trajectory(env_seed=s.env_seed, group_id=s.group_id, policy_version=version,
                           env_name=s.env)
            t.append([3, 4], 1, [-0.1, -0.2])
            t.turn_ends, t.turn_rewards = [1], [float(i % 2)]
            trajs.append(t)
        return trajs, {"worker_restarts": 0.0, "wall_s": 0.0}

    def gather(self, method, specs, *args):
        return self.finish(self.start(method, specs, *args))


class _Learners:
    def __init__(self, events):
        self.events = events

    def update(self, batch, step):
        from ragen2.run_state import UpdateOutcome, UpdateResult

        versions = sorted(set(batch.policy_version.tolist()))
        self.events.append(("update", step, versions))
        return UpdateResult({"actor/optimizer_steps": 1.0, "actor/nonfinite_skipped": 0.0},
                            UpdateOutcome(1, 0))


def _stand_in_controller(tmp_path, monkeypatch, k):
    """A Controller with stand-in workers, learners and weight push (no Ray, no model):
    train_step runs its real rollouts (schedule and queue), watch, filter and collation."""
    from types import SimpleNamespace

    import ray

    from ragen2.controller import Controller
    from ragen2.controller.problems import Problems
    from ragen2.controller.rollouts import RolloutSource
    from ragen2.controller.watch import Watch
    from ragen2.controller.weights import Weights
    from ragen2.filtering.pipeline import FilterPipeline
    from ragen2.train import load_config

    monkeypatch.setattr(ray, "put", lambda x: x)
    cfg = load_config([f"trainer.max_staleness={k}", "trainer.total_steps=5", "monitor=none",
                       "trainer.save_rollouts_every=0", "rollout.env_groups=2",
                       "rollout.group_size=2"])
    ctl = object.__new__(Controller)  # no actors: nothing of __init__ runs
    events: list = []
    pool = _Pool(events)
    ctl.actors = SimpleNamespace(pool=pool, workers=pool.actors, gather=pool.gather,
                                 sleep_engines=lambda: None, learners=_Learners(events))
    ctl.cfg, ctl.run_dir, ctl.eos_text = cfg, tmp_path, None
    ctl.problems = Problems(cfg)
    ctl.filter = FilterPipeline(cfg.filter, cfg.seed, [e.share for e in ctl.problems.train_envs])
    ctl.rollouts = RolloutSource(cfg, ctl.problems, ctl.filter, ctl.actors)
    ctl.watch = Watch(cfg, ctl.problems, ctl.actors, tmp_path, None, None, None)
    ctl.weights = weights = object.__new__(Weights)
    weights.version, weights.behind = 0, False

    def push():
        events.append(("push", weights.version))
        return {}

    weights.push = push
    return ctl, events


@pytest.mark.parametrize("k", [0, 1, 2])
def test_train_step_launches_during_the_update_and_pushes_after_collecting(tmp_path, monkeypatch, k):
    from ragen2.rollout.schedule import behaviour_version

    ctl, events = _stand_in_controller(tmp_path, monkeypatch, k)
    rows = [ctl.train_step(step).metrics for step in range(1, 6)]
    updates = [e for e in events if e[0] == "update"]
    # step t trained on version max(0, t - 1 - k), the learner then holding t - 1
    assert [(e[1], e[2]) for e in updates] == [(t, [behaviour_version(t, k)]) for t in range(1, 6)]
    if k == 0:  # the on-policy loop: collect, update, push; no async metric at all
        assert events[:4] == [("launch", 0), ("collect", 0), ("update", 1, [0]), ("push", 1)]
        assert not any(key.startswith("async/") or key == "timing/overlap_s" for r in rows for key in r)
        return
    # every later step: the next batch launched before the update, collected after it, then the push
    update3 = ("update", 3, [behaviour_version(3, k)])
    step3 = events[events.index(update3) - 1:events.index(("push", 3)) + 1]
    assert step3 == [("launch", 2), update3, ("collect", 2), ("push", 3)]  # step 3 + k's batch
    assert events[:2] == [("launch", 0), ("collect", 0)]  # step 1: its own batch, generated now
    assert [r["async/staleness_max"] for r in rows] == [float(min(t - 1, k)) for t in range(1, 6)]
    assert all(r["async/stale_refused"] == 0 for r in rows)
    assert rows[-1]["async/queued"] == 0 and "timing/overlap_s" in rows[0]
    assert not ctl.weights.behind


def test_a_stale_queued_batch_is_refused_and_regenerated(tmp_path, monkeypatch):
    ctl, events = _stand_in_controller(tmp_path, monkeypatch, 1)
    ctl.train_step(1)  # queues step 2's batch, generated by version 0
    ctl.rollouts.queue.max_staleness = 0  # as if resumed with trainer.max_staleness=0 semantics
    ctl.weights.version = 2  # ... and a learner two versions on
    m = ctl.train_step(2).metrics
    assert m["async/stale_refused"] == 4  # its 4 episodes, never trained on
    assert ("update", 2, [2]) in events  # the step's batch generated by the current policy


def test_the_training_batch_holds_the_kept_groups_and_the_filters_weights():
    """3 groups of 2 episodes, groups 0 and 2 kept: 4 rows, weights 1 (not tiered), the loss
    scaled by the kept share 2/3 (``filter.loss_scale=linear``)."""
    from dataclasses import replace

    from ragen2.config import FilterConfig
    from ragen2.controller.loop import training_batch
    from ragen2.filtering.pipeline import FilterPipeline, Selection

    trajs = []
    for g in range(3):
        for i in range(2):
            t = Trajectory(env_seed=g, group_id=g, policy_version=0)
            t.append([10 + g, 20 + i], 1, [-0.5, -0.25])
            t.turn_ends, t.turn_rewards = [1], [float(i)]
            trajs.append(t)
    pipeline = FilterPipeline(replace(FilterConfig(), loss_scale="linear"), 0, [1.0])
    batch = training_batch(pipeline, trajs, Selection({0, 2}, {}), None)
    assert batch.group_ids.tolist() == [0, 0, 2, 2]
    assert batch.input_ids.tolist() == [[10, 20], [10, 21], [12, 20], [12, 21]]
    assert batch.rewards.tolist() == [0.0, 1.0, 0.0, 1.0]
    assert batch.sample_weights.tolist() == [1.0] * 4 and batch.regulariser_weights is None
    assert batch.loss_scale == pytest.approx(2 / 3)
