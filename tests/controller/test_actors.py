"""ragen2/controller/actors.py: what the learner is told of other sections, and the actors'
handle over a stand-in pool (the Ray actors themselves: tests/test_smoke.py)."""

from __future__ import annotations

from dataclasses import replace

from ragen2.config import Config
from ragen2.controller.actors import Actors, learner_settings
from ragen2.learner.settings import LearnerSettings


def test_learner_settings_by_hand():
    cfg = Config()  # engine.temperature 1, 40 new tokens a turn, 8 turns, on the CPU
    assert learner_settings(cfg) == LearnerSettings(temperature=1.0, norm_tokens=320,
                                                    max_staleness=0, score_reserve_bytes=0)
    cfg = replace(cfg, engine=replace(cfg.engine, temperature=0.0),  # greedy: logprobs at 1
                  algorithm=replace(cfg.algorithm, loss_agg_norm_tokens=100),
                  trainer=replace(cfg.trainer, max_staleness=2))
    assert learner_settings(cfg) == LearnerSettings(temperature=1.0, norm_tokens=100,
                                                    max_staleness=2, score_reserve_bytes=0)
    cfg = replace(cfg, engine=replace(cfg.engine, temperature=0.7))
    assert learner_settings(cfg).temperature == 0.7


class _Pool:
    def __init__(self) -> None:
        self.actors, self.calls = ["w0", "w1"], []

    def call_all(self, method: str) -> None:
        self.calls.append(method)

    def gather(self, method, specs, *args):  # noqa: ANN001
        self.calls.append((method, list(specs), args))
        return ["traj"], {"worker_restarts": 0.0}


def _actors(sleep_mode: bool) -> Actors:
    cfg = Config()
    actors = Actors.__new__(Actors)  # no Ray: the handle over a stand-in pool
    actors.cfg, actors.pool, actors.on_restart = (
        replace(cfg, engine=replace(cfg.engine, sleep_mode=sleep_mode)), _Pool(), None)
    return actors


def test_the_handle_forwards_to_the_pool():
    a = _actors(sleep_mode=False)
    assert a.workers == ["w0", "w1"]
    assert a.gather("rollout", ["s0", "s1"], [1, 2]) == (["traj"], {"worker_restarts": 0.0})
    a.sleep_engines()  # engine.sleep_mode off: the engines keep their memory
    assert a.pool.calls == [("rollout", ["s0", "s1"], ([1, 2],))]
    b = _actors(sleep_mode=True)
    b.sleep_engines()
    assert b.pool.calls == ["sleep"]


def test_a_restarted_worker_is_brought_to_the_policy_once_the_sync_exists():
    a, seen = _actors(sleep_mode=False), []
    a._restarted(1, "new worker")  # before the sync exists: nothing to do
    a.on_restart = lambda i, w: seen.append((i, w))
    a._restarted(1, "new worker")
    assert seen == [(1, "new worker")]
