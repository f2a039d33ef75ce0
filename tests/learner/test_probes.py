"""ragen2/learner/probes.py: measurements that read the policy without training it, by hand on a
toy LM whose logits are one bias vector (tests/learner/toy.py), uniform over V = 4 tokens."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from ragen2.config import Config
from ragen2.learner.probes import grad_snr, logprobs
from tests.learner.toy import batch_of, toy_state


def test_logprobs_of_the_policy():
    s = toy_state(vocab=4)
    assert logprobs(s, [1, 2, 3]) == pytest.approx([-math.log(4)] * 2)
    assert logprobs(replace(s, rank=1), [1, 2, 3]) is None  # rank 0 answers
    s.model.bias.data[:] = 0.1 * torch.arange(4.0)  # log p(t) = 0.1 t - log sum_j e^(0.1 j)
    z = math.log(sum(math.exp(0.1 * j) for j in range(4)))
    assert logprobs(s, [0, 3, 2]) == pytest.approx([0.3 - z, 0.2 - z], abs=1e-6)
    with pytest.raises(ValueError, match="at least 2"):
        logprobs(s, [1])


def test_grad_snr_measures_and_steps_nothing():
    cfg = Config()
    cfg = replace(cfg, algorithm=replace(cfg.algorithm, entropy_coef=0.5),
                  learner=replace(cfg.learner, shared_prefix=False))
    s = toy_state(vocab=4, cfg=cfg)
    batch = batch_of([[1, 2, 3], [2, 3, 1], [3, 1, 2]], [[0, 1, 1], [0, 1, 1], [0, 1, 1]],
                     rewards=np.array([1.0, 0.0, 1.0], np.float32), group_ids=np.array([0, 0, 1]))
    out = grad_snr(s, batch, np.array([0, 0, -1]))  # row 2 is not measured
    assert sorted(out) == ["grad_snr/b0/entropy_norm", "grad_snr/b0/entropy_norm_raw",
                           "grad_snr/b0/task_norm"]  # no reference model: no KL term
    # the entropy is at its maximum when the logits are equal: its gradient is zero
    assert out["grad_snr/b0/entropy_norm_raw"] == pytest.approx(0.0, abs=1e-7)
    assert out["grad_snr/b0/entropy_norm"] == 0.5 * out["grad_snr/b0/entropy_norm_raw"]
    assert out["grad_snr/b0/task_norm"] > 0  # rewards 1 and 0 in group 0: a policy gradient
    assert all(p.grad is None for p in s.trainable) and not s.optim.state
    assert s.model.bias.detach().abs().sum() == 0
