import pytest
import torch

from ragen2.algos.advantages import ADVANTAGE_ESTIMATORS, gae_advantages, grpo_advantages, masked_whiten

# Groups (non-contiguous ids, interleaved):
#   id 7:  rewards [1, 0, 0, 1] -> mean 0.5, unbiased var (4 * 0.25) / 3 = 1/3, std 0.57735
#          -> A = +-0.5 / 0.57735 = +-0.866025
#   id 3:  rewards [2, 4]       -> mean 3, unbiased var (1 + 1) / 1 = 2, std 1.414214 -> A = -+0.707107
#   id 10: reward  [5]          -> singleton -> 0
REWARDS = torch.tensor([1.0, 2.0, 0.0, 5.0, 0.0, 4.0, 1.0])
GROUPS = torch.tensor([7, 3, 7, 10, 7, 3, 7])


def test_grpo_normalised():
    out = grpo_advantages(REWARDS, GROUPS)
    expected = torch.tensor([0.866025, -0.707107, -0.866025, 0.0, -0.866025, 0.707107, 0.866025])
    assert torch.allclose(out, expected, atol=1e-4)


def test_grpo_mean_only():
    out = grpo_advantages(REWARDS, GROUPS, norm_by_std=False)
    assert torch.allclose(out, torch.tensor([0.5, -1.0, -0.5, 0.0, -0.5, 1.0, 0.5]))


def test_grpo_degenerate_groups_are_zero():
    # singleton group and a group with identical rewards (std 0 -> 0 / eps) -> exactly 0, no NaN
    out = grpo_advantages(torch.tensor([3.0, 1.0, 1.0]), torch.tensor([0, 1, 1]))
    assert torch.equal(out, torch.zeros(3))


def test_masked_whiten():
    # masked x = [1, 2, 3]: mean 2, unbiased var (1 + 0 + 1) / 2 = 1 -> [-1, 0, 1]; masked-out -> 0
    out = masked_whiten(torch.tensor([1.0, 2.0, 3.0, 100.0]), torch.tensor([1.0, 1.0, 1.0, 0.0]))
    assert torch.allclose(out, torch.tensor([-1.0, 0.0, 1.0, 0.0]), atol=1e-6)


# GAE, gamma = 0.9, lam = 0.8 (gamma * lam = 0.72).
# Row 0: [prompt, gen, gen(r=1), obs, gen(r=2), pad]; values on unmasked slots are junk to ignore.
#   t=4: delta = 2 + 0.9*0 - 1.5 = 0.5                 A = 0.5
#   t=2: next state is t=4 (skips obs at t=3):
#        delta = 1 + 0.9*1.5 - 1.0 = 1.35              A = 1.35 + 0.72*0.5  = 1.71
#   t=1: delta = 0 + 0.9*1.0 - 0.5 = 0.4               A = 0.4  + 0.72*1.71 = 1.6312
#   returns = A + V: [_, 2.1312, 2.71, _, 2.0, _]
# Row 1: [gen, gen, gen(r=1), pad, pad, pad]
#   t=2: delta = 1 - 0.6 = 0.4                         A = 0.4
#   t=1: delta = 0.9*0.6 - 0.4 = 0.14                  A = 0.14 + 0.72*0.4   = 0.428
#   t=0: delta = 0.9*0.4 - 0.2 = 0.16                  A = 0.16 + 0.72*0.428 = 0.46816
#   returns: [0.66816, 0.828, 1.0]
MASK = torch.tensor([[0.0, 1.0, 1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]])
TOKEN_REWARDS = torch.tensor([[0.0, 0.0, 1.0, 0.0, 2.0, 0.0], [0.0, 0.0, 1.0, 0.0, 0.0, 0.0]])
VALUES = torch.tensor([[9.0, 0.5, 1.0, 7.0, 1.5, 3.0], [0.2, 0.4, 0.6, 5.0, 5.0, 5.0]])


def test_gae_with_observation_gap():
    adv, ret = gae_advantages(TOKEN_REWARDS, VALUES, MASK, gamma=0.9, lam=0.8)
    exp_adv = torch.tensor([[0.0, 1.6312, 1.71, 0.0, 0.5, 0.0], [0.46816, 0.428, 0.4, 0.0, 0.0, 0.0]])
    exp_ret = torch.tensor([[0.0, 2.1312, 2.71, 0.0, 2.0, 0.0], [0.66816, 0.828, 1.0, 0.0, 0.0, 0.0]])
    assert torch.allclose(adv, exp_adv, atol=1e-5)
    assert torch.allclose(ret, exp_ret, atol=1e-5)


def test_gae_gamma_lam_one_zero_values_is_reward_to_go():
    # V = 0, gamma = lam = 1: A_t = sum of future rewards on decision points -> row 0: [_, 3, 3, _, 2, _]
    adv, ret = gae_advantages(TOKEN_REWARDS, torch.zeros(2, 6), MASK)
    exp = torch.tensor([[0.0, 3.0, 3.0, 0.0, 2.0, 0.0], [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]])
    assert torch.allclose(adv, exp) and torch.allclose(ret, exp)


def test_gae_whiten_keeps_raw_returns():
    adv, ret = gae_advantages(TOKEN_REWARDS, torch.zeros(2, 6), MASK, whiten=True)
    # masked raw A = [3, 3, 2, 1, 1, 1]: mean 11/6, unbiased var = (2*(7/6)^2 + (1/6)^2 + 3*(5/6)^2)/5
    #   = (98/36 + 1/36 + 75/36) / 5 = 174/180 = 0.96667, std 0.98319 -> A(3) = (7/6)/0.98319 = 1.18660
    assert adv[0, 1].item() == pytest.approx(1.18660, abs=1e-4)
    assert adv[0, 0].item() == 0.0 and ret[0, 1].item() == pytest.approx(3.0)


def test_registry():
    assert ADVANTAGE_ESTIMATORS.names() == ["gae", "grpo"]
    assert not ADVANTAGE_ESTIMATORS.get("grpo").needs_critic
    assert ADVANTAGE_ESTIMATORS.get("gae").needs_critic
    with pytest.raises(KeyError, match="gae, grpo"):
        ADVANTAGE_ESTIMATORS.get("rloo")
