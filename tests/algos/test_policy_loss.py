import math

import pytest
import torch

from ragen2.algos.policy_loss import POLICY_LOSSES, ppo_clip_loss, value_loss

# Tokens (old logprob -1 everywhere, logprob = -1 + ln ratio); clip_low 0.2, clip_high 0.28
#   tok0: ratio 1.5, A=+1: max(-1.5, -1.28) = -1.28   (clipped term active)
#   tok1: ratio 0.5, A=-1: max( 0.5,  0.8 ) =  0.8    (clipped term active)
#   tok2: ratio 1.0, A=+2: max(-2,   -2   ) = -2      (unclipped)
#   tok3: ratio 1.1, A=+1: max(-1.1, -1.1 ) = -1.1    (unclipped)
#   tok4: masked out, garbage logprob -inf
# token-mean = (-1.28 + 0.8 - 2 - 1.1) / 4 = -0.895 ; clipfrac 2/4 ; ratio_mean 4.1/4 = 1.025
# approx_kl (k3 = r - 1 - ln r): 0.094535, 0.193147, 0, 0.004690 -> mean 0.073093
RATIOS = [1.5, 0.5, 1.0, 1.1]
OLD = torch.full((1, 5), -1.0)
ADV = torch.tensor([[1.0, -1.0, 2.0, 1.0, 5.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0, 1.0, 0.0]])


def _logprobs(ratios, tail=float("-inf")):
    return torch.tensor([[-1.0 + math.log(r) for r in ratios] + [tail]], requires_grad=True)


def test_ppo_clip_higher_values_and_metrics():
    lp = _logprobs(RATIOS)
    loss, m = ppo_clip_loss(lp, OLD, ADV, MASK, clip_low=0.2, clip_high=0.28)
    assert loss.item() == pytest.approx(-0.895, abs=1e-5)
    assert m["clipfrac"].item() == pytest.approx(0.5)
    assert m["clipfrac_dual"].item() == 0.0
    assert m["ratio_mean"].item() == pytest.approx(1.025, abs=1e-5)
    assert m["approx_kl"].item() == pytest.approx(0.073093, abs=1e-5)
    assert all(not v.requires_grad for v in m.values())


def test_ppo_gradients_zero_where_clipped():
    lp = _logprobs(RATIOS)
    loss, _ = ppo_clip_loss(lp, OLD, ADV, MASK, clip_low=0.2, clip_high=0.28)
    loss.backward()
    # unclipped: d(-A*ratio)/dlp = -A*ratio, / 4 tokens -> tok2: -2*1/4 = -0.5 ; tok3: -1.1/4 = -0.275
    assert torch.allclose(lp.grad, torch.tensor([[0.0, 0.0, -0.5, -0.275, 0.0]]), atol=1e-6)


def test_ppo_symmetric_default_clip_differs():
    # clip_high 0.2: tok0 -> max(-1.5, -1.2) = -1.2 -> (-1.2 + 0.8 - 2 - 1.1) / 4 = -0.875
    loss, _ = ppo_clip_loss(_logprobs(RATIOS), OLD, ADV, MASK)
    assert loss.item() == pytest.approx(-0.875, abs=1e-5)


def test_dual_clip():
    # c = 3, clip 0.2/0.2:
    #   ratio 5, A=-1: min(max(5, 1.2), 3) = 3      (dual bound active, zero grad)
    #   ratio 2, A=-1: min(max(2, 1.2), 3) = 2      (unclipped, grad -A*ratio = 2)
    #   ratio 5, A=+1: max(-5, -1.2) = -1.2         (A > 0: no dual clip, clipped, zero grad)
    # token-mean = (3 + 2 - 1.2) / 3 = 1.266667 ; clipfrac 1/3 ; clipfrac_dual 1/3
    lp = torch.tensor([[math.log(5.0), math.log(2.0), math.log(5.0)]], requires_grad=True)
    old, adv, mask = torch.zeros(1, 3), torch.tensor([[-1.0, -1.0, 1.0]]), torch.ones(1, 3)
    loss, m = ppo_clip_loss(lp, old, adv, mask, dual_clip_c=3.0)
    assert loss.item() == pytest.approx(3.8 / 3, abs=1e-5)
    assert m["clipfrac_dual"].item() == pytest.approx(1 / 3)
    assert m["clipfrac"].item() == pytest.approx(1 / 3)
    loss.backward()
    assert torch.allclose(lp.grad, torch.tensor([[0.0, 2.0 / 3, 0.0]]), atol=1e-6)


def test_dual_clip_c_must_exceed_one():
    with pytest.raises(ValueError, match="dual_clip_c"):
        ppo_clip_loss(OLD, OLD, ADV, MASK, dual_clip_c=1.0)


def test_ppo_agg_mode_passthrough():
    # two rows: row0 loss [-1.28, 0.8] (tok0, tok1 above), row1 [-2] -> seq-mean-token-sum
    #   = ((-1.28 + 0.8) + (-2)) / 2 = -1.24
    lp = torch.tensor([[-1.0 + math.log(1.5), -1.0 + math.log(0.5)], [-1.0, 0.0]])
    adv = torch.tensor([[1.0, -1.0], [2.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    loss, _ = ppo_clip_loss(lp, torch.full((2, 2), -1.0), adv, mask, clip_high=0.28, agg_mode="seq-mean-token-sum")
    assert loss.item() == pytest.approx(-1.24, abs=1e-5)


def test_value_loss():
    # tok0: v=1, old=0.5, R=1, c=0.2: (1-1)^2 = 0 ; clip(1, 0.3, 0.7) = 0.7 -> 0.09 -> 0.5*0.09 = 0.045 (clipped)
    # tok1: v=2, old=2, R=3: 1 and 1 -> 0.5 ; tok2: v=0, old=0, R=1 -> 0.5 ; tok3 masked
    # token-mean = (0.045 + 0.5 + 0.5) / 3 = 0.348333 ; vf_clipfrac = 1/3
    v = torch.tensor([[1.0, 2.0, 0.0, 50.0]])
    old = torch.tensor([[0.5, 2.0, 0.0, 0.0]])
    ret = torch.tensor([[1.0, 3.0, 1.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    loss, m = value_loss(v, old, ret, mask, clip_range=0.2)
    assert loss.item() == pytest.approx(1.045 / 3, abs=1e-6)
    assert m["vf_clipfrac"].item() == pytest.approx(1 / 3)
    # unclipped: (0 + 0.5 + 0.5) / 3
    loss, m = value_loss(v, old, ret, mask)
    assert loss.item() == pytest.approx(1 / 3, abs=1e-6)
    assert m["vf_clipfrac"].item() == 0.0


def test_registry():
    assert POLICY_LOSSES.names() == ["ppo_clip"]
    assert POLICY_LOSSES.get("ppo_clip") is ppo_clip_loss
