"""ragen2/controller/warm_start.py: the warm start's cache key, its two short paths (no env to
clone, the cached warm start) and its behaviour-cloning loop, over stand-in learners."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

import ragen2.rollout.envs as envs
from ragen2.config import Config
from ragen2.controller.guards import TrainingStopped
from ragen2.controller.warm_start import STEPS_PER_CALL, WarmStart, sft_plan, warm_start_key
from ragen2.learner.group import sft_outcome
from ragen2.rollout.envs import EnvEntry
from ragen2.run_state import UpdateResult

ENVS = [EnvEntry("frozenlake", "ragen2/FrozenLake-v0")]


def test_the_key_follows_what_the_warm_started_weights_depend_on():
    cfg = Config()
    key = warm_start_key(cfg, "model", ENVS)
    assert len(key) == 16 and int(key, 16) >= 0
    assert warm_start_key(replace(cfg, seed=9), "model", ENVS) == key  # not the run's seed
    ws = cfg.trainer.warm_start
    changed = [replace(cfg, trainer=replace(cfg.trainer, warm_start=replace(ws, lr=ws.lr / 2))),
               replace(cfg, learner=replace(cfg.learner, lora=replace(cfg.learner.lora, rank=4))),
               replace(cfg, env=replace(cfg.env, heldout_fraction=0.5)),
               # float rounding: another attention backward, another micro-batch partition
               replace(cfg, learner=replace(cfg.learner, attn_implementation="sdpa_fp32_backward")),
               replace(cfg, learner=replace(cfg.learner, micro_batch_tokens=4096)),
               replace(cfg, learner=replace(cfg.learner, reduce_once=True)),  # one sum's order
               # the demonstrations are split over the workers, each noising with its own seed
               replace(cfg, rollout=replace(cfg.rollout, num_workers=2))]
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


def test_the_plan_is_the_step_by_step_loops():
    """Each epoch a permutation of the rows from the warm start's own generator, cut into sorted
    batches (the last one short): the rows the loop of one call per step sent, in its order."""
    rng, want = np.random.default_rng(5), []
    for _ in range(3):
        perm = rng.permutation(21)
        want += [np.sort(perm[i * 8:(i + 1) * 8]) for i in range(-(-21 // 8))]
    got = sft_plan(21, epochs=3, batch_size=8, seed=5)
    assert len(got) == len(want) == 9 and all(np.array_equal(a, b) for a, b in zip(got, want))
    assert [len(rows) for rows in got[:3]] == [8, 8, 5]


class _SFTRanks:
    """Stand-in learner ranks: ``sft_steps`` runs a chunk of steps like the ranks do, the steps
    numbered in ``nonfinite`` skipped and a chunk ended after a skipped step."""

    def __init__(self, nonfinite: set[int] = frozenset()) -> None:
        self.nonfinite, self.steps, self.calls = nonfinite, [], 0

    def sft_steps(self, batch_ref, steps, lr) -> list[UpdateResult]:
        self.calls += 1
        out = []
        for rows in steps:
            self.steps.append(rows)
            k = len(self.steps)
            m = {"warm_start/loss": float(k), "warm_start/token_acc": 0.5, "warm_start/grad_norm": 1.0,
                 "warm_start/nonfinite_skipped": float(k in self.nonfinite)}
            out.append(UpdateResult(m, sft_outcome(m)))
            if k in self.nonfinite:
                break
        return out


def _clone(ranks: _SFTRanks) -> dict[str, float]:
    """The default warm start's behaviour cloning (512 rows, batches of 8, 3 epochs: 192 steps)."""
    ws = WarmStart(Config(), "model", SimpleNamespace(train_envs=ENVS),
                   SimpleNamespace(learners=ranks))
    return ws.clone("batch ref", 512)


def test_the_learner_runs_the_steps_in_chunks():
    """192 steps in 12 calls, every step's rows as planned, the last step's metrics returned."""
    ranks = _SFTRanks()
    m = _clone(ranks)
    assert STEPS_PER_CALL == 16 and ranks.calls == 12
    plan = sft_plan(512, 3, 8, 0)
    assert len(ranks.steps) == 192 and all(np.array_equal(a, b) for a, b in zip(ranks.steps, plan))
    assert m == {"warm_start/loss": 192.0, "warm_start/token_acc": 0.5,
                 "warm_start/grad_norm": 1.0, "warm_start/nonfinite_skipped": 0}


def test_a_skipped_step_ends_its_chunk_and_is_counted_before_any_more_run():
    ranks = _SFTRanks({5})  # a chunk of 5 steps, then 187 steps in 12 chunks
    assert _clone(ranks)["warm_start/nonfinite_skipped"] == 1
    assert ranks.calls == 13 and len(ranks.steps) == 192
    ranks = _SFTRanks({5, 6, 7})  # trainer.max_nonfinite_steps=3 in a row
    with pytest.raises(TrainingStopped, match="warm-start step 7: 3 consecutive"):
        _clone(ranks)
    assert len(ranks.steps) == 7  # no step ran past the one that stopped the warm start
