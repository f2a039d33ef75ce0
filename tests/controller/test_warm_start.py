"""ragen2/controller/warm_start.py: the warm start's cache key and its two short paths (no env to
clone, the cached warm start), over stand-in learners."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import ragen2.rollout.envs as envs
from ragen2.config import Config
from ragen2.controller.warm_start import WarmStart, warm_start_key
from ragen2.rollout.envs import EnvEntry

ENVS = [EnvEntry("frozenlake", "ragen2/FrozenLake-v0")]


def test_the_key_follows_what_the_warm_started_weights_depend_on():
    cfg = Config()
    key = warm_start_key(cfg, "model", ENVS)
    assert len(key) == 16 and int(key, 16) >= 0
    assert warm_start_key(replace(cfg, seed=9), "model", ENVS) == key  # not the run's seed
    ws = cfg.trainer.warm_start
    changed = [replace(cfg, trainer=replace(cfg.trainer, warm_start=replace(ws, lr=ws.lr / 2))),
               replace(cfg, learner=replace(cfg.learner, lora=replace(cfg.learner.lora, rank=4))),
               replace(cfg, env=replace(cfg.env, heldout_fraction=0.5))]
    assert all(warm_start_key(c, "model", ENVS) != key for c in changed)
    assert warm_start_key(cfg, "other model", ENVS) != key


class _Learners:
    def __init__(self) -> None:
        self.calls: list = []

    def finish_warm_start(self) -> None:
        self.calls.append("finish")

    def load_policy(self, path: str) -> None:
        self.calls.append(("load", path))


def _warm_start(tmp_path) -> tuple[WarmStart, _Learners]:
    cfg = Config()
    cfg = replace(cfg, model=replace(cfg.model, cache_dir=str(tmp_path)))
    learners = _Learners()
    problems = SimpleNamespace(train_envs=ENVS)
    return WarmStart(cfg, "model", problems, SimpleNamespace(learners=learners)), learners


def test_without_an_expert_the_warm_start_is_skipped(tmp_path, monkeypatch):
    monkeypatch.setattr(envs, "probe_env", lambda entry: False)  # no demonstration() hook
    ws, learners = _warm_start(tmp_path)
    m = ws.run()
    assert m["warm_start/skipped"] == 1.0 and set(m) == {"warm_start/skipped", "timing/warm_start_s"}
    assert learners.calls == ["finish"]


def test_a_cached_warm_start_is_loaded(tmp_path, monkeypatch):
    monkeypatch.setattr(envs, "probe_env", lambda entry: True)
    ws, learners = _warm_start(tmp_path)
    cache = ws.cache()
    assert cache == tmp_path / "warm_start" / warm_start_key(ws.cfg, "model", ENVS)
    cache.mkdir(parents=True)
    (cache / "metrics.json").write_text(json.dumps({"warm_start/loss": 0.25}))
    m = ws.run()
    assert m["warm_start/loss"] == 0.25 and m["warm_start/cached"] == 1.0
    assert learners.calls == [("load", str(cache / "policy.pt")), "finish"]
    assert "warm_start/skipped" not in m
