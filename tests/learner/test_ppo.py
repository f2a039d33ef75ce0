"""ragen2/learner/ppo.py: the update of one rank, worked out by hand: the optimiser step and its
non-finite skip on one parameter, the device sums, the staleness refusal, and a whole update of a
toy LM whose logits are one bias vector (tests/learner/toy.py), uniform over V = 4 tokens."""

from __future__ import annotations

import math
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from ragen2.config import Config
from ragen2.learner.ppo import BatchSums, StaleBatchError, allreduce, optimizer_step, update
from ragen2.learner.settings import LearnerSettings
from tests.learner.toy import batch_of, toy_state

ONE_RANK = SimpleNamespace(world_size=1, device=torch.device("cpu"), cfg=Config())


def _sgd_pair(grad: list[float]) -> tuple[torch.nn.Parameter, list]:
    w = torch.nn.Parameter(torch.zeros(len(grad)))
    w.grad = torch.tensor(grad)
    return w, [([w], torch.optim.SGD([w], lr=1.0))]


def test_optimizer_step_clips_to_the_global_norm():
    w, pairs = _sgd_pair([3.0, 4.0])  # norm 5, algorithm.grad_clip = 1: the gradient / 5
    assert optimizer_step(ONE_RANK, pairs, 2.0) == [5.0]
    assert w.detach().tolist() == pytest.approx([-0.6, -0.8]) and w.grad is None


@pytest.mark.parametrize("loss, grad", [(float("nan"), [3.0, 4.0]), (1.0, [float("inf"), 0.0])])
def test_a_nonfinite_loss_or_norm_steps_nothing(loss, grad):
    w, pairs = _sgd_pair(grad)
    assert optimizer_step(ONE_RANK, pairs, loss) is None
    assert w.detach().tolist() == [0.0, 0.0] and w.grad is None  # dropped, never applied


def test_sums_and_allreduce_on_one_rank():
    assert allreduce(ONE_RANK, {"b": 2.0, "a": 0.5}) == {"a": 0.5, "b": 2.0}
    sums = BatchSums.zeros(torch.device("cpu"))
    sums.add_gap(torch.tensor([[-1.0, -2.0, -3.0]]), torch.tensor([[-1.5, -2.0, 0.0]]),
                 torch.tensor([[1.0, 1.0, 0.0]]))  # |gap| 0.5 and 0 on the 2 trained tokens
    assert float(sums.gap_sum) == 0.5 and float(sums.tokens) == 2.0
    assert sums.gap_sum.dtype == torch.float64


def test_a_batch_of_another_version_is_refused():
    s = toy_state(vocab=4, version=3)
    old = batch_of([[1, 2]], [[0, 1]], policy_version=np.array([2]))
    with pytest.raises(StaleBatchError, match=r"version\(s\) \[2\], learner holds version 3"):
        update(s, old, step=1)
    s = replace(s, settings=LearnerSettings(max_staleness=1))
    older = batch_of([[1, 2]], [[0, 1]], policy_version=np.array([1]))
    with pytest.raises(StaleBatchError, match=r"max_staleness=1 allows versions 2..3"):
        update(s, older, step=1)
    assert s.version == 3


def test_an_update_by_hand():
    """Every group's rewards are equal: advantages 0, so no policy gradient and no weight moves;
    the engine's logprobs (0) sit log 4 above the uniform policy's; its entropy is log 4."""
    cfg = Config()
    cfg = replace(cfg, algorithm=replace(cfg.algorithm, lr=0.1),
                  learner=replace(cfg.learner, shared_prefix=False))
    s = toy_state(vocab=4, cfg=cfg)
    batch = batch_of([[1, 2, 3, 0], [2, 3, 0, 1], [3, 0, 1, 2], [0, 1, 2, 3]],
                     [[0, 1, 1, 0], [0, 0, 1, 1], [0, 1, 1, 1], [0, 1, 0, 1]],
                     rewards=np.ones(4, np.float32), group_ids=np.array([0, 0, 1, 1]))
    m = update(s, batch, step=1)
    assert m["actor/logprob_gap"] == pytest.approx(math.log(4), abs=1e-6)
    assert m["actor/entropy"] == pytest.approx(math.log(4), abs=1e-6)
    assert m["actor/loss"] == 0.0 and m["actor/grad_norm"] == 0.0
    assert m["actor/lr"] == pytest.approx(0.1 / 3)  # warm-up: (version + 1) / lr_warmup_steps
    assert m["actor/optimizer_steps"] == 1.0 and m["actor/nonfinite_skipped"] == 0.0
    assert m["actor/policy_version"] == 1.0 and s.version == 1
    assert s.model.bias.detach().abs().sum() == 0
