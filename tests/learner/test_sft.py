"""ragen2/learner/sft.py: the warm start's behaviour-cloning step, worked out by hand on a toy LM
whose logits are one bias vector (tests/learner/toy.py): uniform at first over V = 4 tokens."""

from __future__ import annotations

import math

import numpy as np
import pytest

import ragen2.learner.sft as sft
from ragen2.learner.sft import sft_step, sft_steps
from tests.learner.toy import batch_of, toy_state

# one row; the trained labels (ids[1:] under the loss mask) are 0, 1, 1, 3
BATCH = batch_of([[2, 0, 1, 1, 3]], [[0, 1, 1, 1, 1]])


def test_one_step_by_hand():
    s = toy_state(vocab=4)
    m = sft_step(s, BATCH, np.array([0]), lr=0.1)
    # uniform logits: every label has log-probability -log 4, so the token-mean loss is log 4
    assert m["warm_start/loss"] == pytest.approx(math.log(4), abs=1e-6)
    assert m["warm_start/token_acc"] == 0.25  # argmax of equal logits is token 0: one label of 4
    # d loss / d bias = 1/4 - histogram(labels) / 4 = [0, -1/4, 1/4, 0]: norm sqrt(2) / 4
    assert m["warm_start/grad_norm"] == pytest.approx(math.sqrt(2) / 4, abs=1e-6)
    assert m["warm_start/nonfinite_skipped"] == 0.0
    # Adam's first step moves each weight by lr against the sign of its gradient (0 stays 0)
    np.testing.assert_allclose(s.model.bias.detach().numpy(), [0, 0.1, -0.1, 0], atol=1e-6)
    assert s.sft_optim.param_groups[0]["lr"] == 0.1  # the warm start's own optimiser ...
    assert not s.optim.state  # ... the RL one untouched


def test_a_nonfinite_loss_skips_the_step():
    s = toy_state(vocab=4)
    s.model.bias.data[:] = float("nan")
    m = sft_step(s, BATCH, np.array([0]), lr=0.1)
    assert m["warm_start/nonfinite_skipped"] == 1.0 and math.isnan(m["warm_start/grad_norm"])
    assert not s.sft_optim.state  # never stepped


def test_steps_run_in_order_and_stop_after_a_skipped_one(monkeypatch):
    """A chunk of steps equals the same steps one call each, and ends with its first skipped step
    (the controller counts skips in a row before any more run)."""
    one_by_one, chunk = toy_state(vocab=4), toy_state(vocab=4)
    singles = [sft_step(one_by_one, BATCH, np.array([0]), lr=0.1) for _ in range(3)]
    assert sft_steps(chunk, BATCH, [np.array([0])] * 3, lr=0.1) == singles
    assert chunk.model.bias.tolist() == one_by_one.model.bias.tolist()

    real, calls = sft.logprobs_from_logits, []

    def second_is_nan(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs) * (float("nan") if len(calls) == 2 else 1.0)

    monkeypatch.setattr(sft, "logprobs_from_logits", second_is_nan)
    m = sft_steps(toy_state(vocab=4), BATCH, [np.array([0])] * 3, lr=0.1)
    assert [x["warm_start/nonfinite_skipped"] for x in m] == [0.0, 1.0] and len(calls) == 2
