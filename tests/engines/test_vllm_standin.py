"""The vLLM engine's GPU-only paths against a CPU stand-in of ``vllm.LLM`` (no vLLM needed).

The stand-in records what the engine asks of vLLM and keeps the books of a GPU: where the engine's
weights are (GPU, host copy) and whether its KV cache is allocated. It checks the colocated TP
start-up environment (an empty ``CUDA_VISIBLE_DEVICES`` is refused by vLLM's CUDA platform) and
the sleep / wake / push order of ``engine.sleep_mode`` through ``Weights.push``
(:mod:`ragen2.controller.weights`).
"""

from __future__ import annotations

import os
import sys
from types import ModuleType, SimpleNamespace

import pytest
import torch

from ragen2.config import Config


class StandInLLM:
    """``vllm.LLM`` as the engine uses it, with a GPU's books: ``copies`` of the weights held
    (on the GPU or as a host backup) and whether the KV cache is allocated; ``peak_copies`` and
    ``kv_during_reload`` are what the sleep-mode order is judged by."""

    instances: list["StandInLLM"] = []

    def __init__(self, **kwargs) -> None:
        if os.environ.get("CUDA_VISIBLE_DEVICES") == "":
            # vllm/platforms/cuda.py at start-up
            raise RuntimeError("CUDA_VISIBLE_DEVICES is set to empty string")
        self.kwargs, self.events = kwargs, []
        self.cuda_visible_devices = os.environ.get("CUDA_VISIBLE_DEVICES")
        self.llm_engine = SimpleNamespace(model_config=SimpleNamespace(
            hf_config=SimpleNamespace(tie_word_embeddings=False)))
        self.weights_gpu, self.weights_host, self.kv = True, False, True
        self.peak_copies, self.kv_during_reload = 1, False
        StandInLLM.instances.append(self)

    def _count(self) -> None:
        self.peak_copies = max(self.peak_copies, int(self.weights_gpu) + int(self.weights_host))

    def sleep(self, level: int = 1) -> None:
        self.events.append(f"sleep({level})")
        if level == 1:  # weights offloaded to host memory, KV discarded
            self.weights_host = True
            self._count()
        self.weights_gpu = self.kv = False

    def wake_up(self, tags=None) -> None:
        tags = ["kv_cache", "weights"] if tags is None else list(tags)
        self.events.append(f"wake({','.join(tags)})")
        if "weights" in tags:
            self.weights_gpu = True
            self._count()  # a level-1 backup is copied back: both exist for a moment
            self.weights_host = False
        if "kv_cache" in tags:
            self.kv = True

    def collective_rpc(self, method, args=(), kwargs=None):
        assert method == "reload_weights" and self.weights_gpu, "weights reloaded while asleep"
        self.kv_during_reload |= self.kv
        for _ in kwargs["weights_iterator"]:
            pass
        self.events.append("reload")
        return [None]

    def reset_prefix_cache(self) -> bool:
        self.events.append("reset_prefix_cache")
        return True


@pytest.fixture()
def standin_vllm(monkeypatch):
    """``import vllm`` gives the stand-in; the engine's environment writes are undone after."""
    fake = ModuleType("vllm")
    fake.LLM = StandInLLM
    envs = ModuleType("vllm.envs")
    envs.disable_envs_cache = lambda: None
    monkeypatch.setitem(sys.modules, "vllm", fake)
    monkeypatch.setitem(sys.modules, "vllm.envs", envs)
    for k in ("VLLM_ENABLE_V1_MULTIPROCESSING", "VLLM_LOGGING_LEVEL", "CUDA_VISIBLE_DEVICES",
              "VLLM_RAY_BUNDLE_INDICES"):
        monkeypatch.delenv(k, raising=False)
    import ragen2.models.loading

    monkeypatch.setattr(ragen2.models.loading, "load_tokenizer", lambda *a, **k: None)
    StandInLLM.instances.clear()
    return StandInLLM


def _engine(tp: int = 1, sleep_mode: bool = False):
    from ragen2.engines.vllm import VLLMEngine

    c = Config()
    c.engine.name, c.engine.tensor_parallel_size, c.engine.sleep_mode = "vllm", tp, sleep_mode
    return VLLMEngine("model-dir", dtype="bfloat16", device="cuda", options=c.engine)


def test_colocated_tp_engine_starts_with_an_empty_cuda_visible_devices(standin_vllm, monkeypatch):
    """The rollout worker of a colocated TP > 1 engine asks Ray for no GPU, so Ray sets its
    CUDA_VISIBLE_DEVICES to "" (its shards are Ray actors with their own GPUs): the engine
    drops the empty value before vLLM starts, and leaves a real one alone."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setenv("VLLM_RAY_BUNDLE_INDICES", "0,1")
    engine = _engine(tp=2)
    assert engine.llm.kwargs["distributed_executor_backend"] == "ray"
    assert engine.llm.cuda_visible_devices is None
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert _engine(tp=2).llm.cuda_visible_devices == "2,3"


def test_sleep_mode_never_holds_two_copies_of_the_weights(standin_vllm):
    """Weights.push after a sleeping update, with the engine on the stand-in: the
    engine sleeps at level 2 (weights discarded: no host copy of what the push overwrites), the
    learner empties its cache, the engine wakes its weights only, the push reloads them and
    resets the prefix cache, and only then the KV cache wakes. At no point does the engine hold
    two copies of its weights, and its KV cache is never allocated during the push."""
    from ragen2.controller.weights import Weights
    from ragen2.rollout.worker import RolloutWorker

    engine = _engine(sleep_mode=True)
    llm = engine.llm
    worker = RolloutWorker.__new__(RolloutWorker)
    worker.engine = engine
    weights = {"w": torch.zeros(2)}

    ctl = Weights.__new__(Weights)
    ctl.cfg = Config()
    ctl.cfg.engine.sleep_mode = True
    ctl.version, ctl.probe, ctl.checksum_names = 1, None, []
    pool = SimpleNamespace(actors=[worker], max_restarts=0,
                           call_all=lambda m, *a: [getattr(worker, m)(*a)])
    ctl.actors = SimpleNamespace(
        learners=SimpleNamespace(release_cuda_cache=lambda: llm.events.append("release_cuda_cache")),
        pool=pool, workers=pool.actors)
    ctl.sync = SimpleNamespace(push=lambda v: engine.load_weights(weights, v) or {})

    worker.sleep()  # Controller.train_step, before the update
    m = ctl.push()
    assert llm.events == ["sleep(2)", "release_cuda_cache", "wake(weights)", "reload",
                          "reset_prefix_cache", "wake(kv_cache)"]
    assert llm.peak_copies == 1 and not llm.kv_during_reload
    assert not engine.asleep and engine.policy_version == 1 and "timing/sync_s" in m
    engine.wake_up(["kv_cache"])  # awake already: nothing more asked of vLLM
    assert llm.events[-1] == "wake(kv_cache)" and len(llm.events) == 6
