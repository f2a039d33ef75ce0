"""The decoupled objective of bounded staleness (ragen2.algos.off_policy) by hand: a batch whose
behaviour, proximal and current policies differ by known amounts. No model, no FSDP, no Ray."""

import math
from dataclasses import replace

import pytest
import torch

from ragen2.algos.objective import LossInputs, compute_loss, policy_term
from ragen2.algos.off_policy import behaviour_weights
from ragen2.config import AlgorithmConfig

LN = math.log
# B = 2 rows, T = 3 tokens; row 1's last token is off the mask (its garbage never counts).
# pi_prox / pi_behav per token: [[1.5, 0.5, 4.0], [1.0, 2.5, .]]
PROX = torch.tensor([[LN(0.3), LN(0.2), LN(0.8)], [LN(0.5), LN(0.5), 0.0]])
BEHAV = torch.tensor([[LN(0.2), LN(0.4), LN(0.2)], [LN(0.5), LN(0.2), -math.inf]])
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])


def test_weights_are_the_truncated_ratio_on_the_mask():
    w = behaviour_weights(PROX, BEHAV, MASK, cap=2.0)
    expected = torch.tensor([[1.5, 0.5, 2.0], [1.0, 2.0, 0.0]])  # 4.0 and 2.5 truncated at 2
    torch.testing.assert_close(w.weights, expected)
    assert w.tokens == 5 and w.truncated == 2
    assert float(w.total) == pytest.approx(1.5 + 0.5 + 2.0 + 1.0 + 2.0)
    assert float(w.raw_total) == pytest.approx(1.5 + 0.5 + 4.0 + 1.0 + 2.5)
    assert float(w.maximum) == pytest.approx(4.0)  # before truncation
    uncapped = behaviour_weights(PROX, BEHAV, MASK, cap=None)
    assert uncapped.truncated == 0 and uncapped.weights[0, 2].item() == pytest.approx(4.0)
    assert torch.isfinite(uncapped.weights).all()  # the -inf off the mask gave no inf/NaN
    empty = behaviour_weights(PROX, BEHAV, torch.zeros_like(MASK), cap=2.0)
    assert empty.tokens == 0 and float(empty.maximum) == 0.0 and float(empty.total) == 0.0


def test_identical_policies_give_weight_one():
    w = behaviour_weights(PROX, PROX, MASK, cap=2.0)
    torch.testing.assert_close(w.weights, MASK.float())
    assert w.truncated == 0 and float(w.maximum) == pytest.approx(1.0)


def test_decoupled_loss_by_hand():
    """pi_theta / pi_prox = [[1.5, 1, 1], [0.5, 1.1, .]]; A = [[1, -1, 2], [-1, 1, .]];
    clip 0.2 / 0.28, no dual clip; token-mean over 5 tokens."""
    theta = PROX + torch.log(torch.tensor([[1.5, 1.0, 1.0], [0.5, 1.1, 1.0]]))
    adv = torch.tensor([[1.0, -1.0, 2.0], [-1.0, 1.0, 7.0]])
    alg = replace(AlgorithmConfig(), clip_ratio_low=0.2, clip_ratio_high=0.28, dual_clip_c=None,
                  loss_agg_mode="token-mean")
    w = behaviour_weights(PROX, BEHAV, MASK, cap=2.0)
    x = LossInputs(theta, PROX, adv, MASK, num_tokens=5.0, behaviour_weights=w.weights)
    loss, metrics = policy_term(x, alg)  # the learner's path: the weights scale the advantages
    # per token w * max(-A r, -A clip(r)):
    #   (0,0) A=1,  r=1.5 -> clip 1.28: max(-1.5, -1.28) = -1.28; x w 1.5 = -1.92
    #   (0,1) A=-1, r=1:  1;            x w 0.5 =  0.5
    #   (0,2) A=2,  r=1: -2;            x w 2.0 = -4.0
    #   (1,0) A=-1, r=0.5 -> clip 0.8: max(0.5, 0.8) = 0.8; x w 1.0 = 0.8
    #   (1,1) A=1,  r=1.1: -1.1;        x w 2.0 = -2.2
    assert loss.item() == pytest.approx((-1.92 + 0.5 - 4.0 + 0.8 - 2.2) / 5, rel=1e-5)
    assert metrics["clipfrac"].item() == pytest.approx(2 / 5)  # (0,0) and (1,0)
    assert w.truncated == 2
    # without the correction (on-policy PPO against pi_prox) the loss differs
    plain = (-1.28 + 1.0 - 2.0 + 0.8 - 1.1) / 5
    assert loss.item() != pytest.approx(plain)
    assert policy_term(replace(x, behaviour_weights=None), alg)[0].item() == pytest.approx(plain)


def test_the_composed_loss_applies_the_weights_to_the_policy_term_only():
    alg = replace(AlgorithmConfig(), entropy_coef=0.1, kl_coef=0.5, kl_estimator="k1",
                  dual_clip_c=None)
    adv = torch.tensor([[1.0, -1.0, 2.0], [-1.0, 1.0, 0.0]])
    ent = torch.full((2, 3), 0.5)
    ref = PROX - 0.3  # k1 KL 0.3 per token
    w = behaviour_weights(PROX, BEHAV, MASK, cap=2.0).weights
    x = LossInputs(PROX, PROX, adv, MASK, entropy=ent, ref_logprobs=ref, num_tokens=5.0,
                   num_seqs=2.0)
    on = compute_loss(x, alg)
    off = compute_loss(replace(x, behaviour_weights=w), alg)
    # ratio 1: policy term = token-mean of -A * w = -(1.5 - 0.5 + 4.0 - 1.0 + 2.0) / 5
    assert off.policy_loss.item() == pytest.approx(-6.0 / 5)
    assert on.policy_loss.item() == pytest.approx(-(1 - 1 + 2 - 1 + 1) / 5)
    assert off.entropy.item() == pytest.approx(on.entropy.item())
    assert off.kl.item() == pytest.approx(on.kl.item())
    assert (off.loss - off.policy_loss).item() == pytest.approx((on.loss - on.policy_loss).item())


def test_weights_carry_no_gradient():
    prox = PROX.clone().requires_grad_(True)
    w = behaviour_weights(prox, BEHAV, MASK, cap=None)
    assert not w.weights.requires_grad
