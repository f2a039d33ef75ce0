"""ragen2/rollout/worker.py: the engine's half of the post-sync probe and the sampling settings,
with a stand-in engine (the actor with a real engine: tests/test_e2e_engines.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ragen2.config import Config
from ragen2.engines.base import Generation, SamplingParams
from ragen2.rollout.worker import RolloutWorker, greedy_continuation, sampling_params
from ragen2.sync import WeightSyncError


class _Engine:
    def __init__(self, top: list[dict[int, float]] | None) -> None:
        self.top, self.asked = top, []

    def generate(self, prompts, params):  # noqa: ANN001
        self.asked.append((prompts, params))
        return [Generation([7, 8], [-0.1, -0.2], "length", top_logprobs=self.top)]


def test_the_probe_continues_greedily_with_the_top_logprobs():
    engine = _Engine([{7: -0.1, 3: -2.0}, {8: -0.2, 1: -1.5}])
    assert greedy_continuation(engine, (5, 6), 2, 2) == ([7, 8], engine.top)
    assert engine.asked == [([[5, 6]], SamplingParams(temperature=0.0, max_new_tokens=2, stop=(),
                                                     top_logprobs=2))]
    worker = RolloutWorker.__new__(RolloutWorker)  # the actor's method, on the stand-in engine
    worker.engine = engine
    assert worker.probe_continuation([5, 6], 2, 2) == ([7, 8], engine.top)
    with pytest.raises(WeightSyncError, match="_Engine returned no top logprobs"):
        greedy_continuation(_Engine(None), [5, 6], 2, 2)


def test_sampling_params_of_training_and_evaluation():
    cfg = Config()
    cfg = replace(cfg, engine=replace(cfg.engine, temperature=0.8, eval_temperature=0.0))
    train, held_out = sampling_params(cfg, 3), sampling_params(cfg, 3, evaluation=True)
    assert (train.temperature, held_out.temperature, train.seed) == (0.8, 0.0, 3)
    assert train.max_new_tokens == cfg.engine.max_new_tokens and train.stop == tuple(cfg.engine.stop)
