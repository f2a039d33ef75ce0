"""The objective (ragen2.algos.objective) by hand: credit assignment through the registry, the
regulariser weights, the composed loss and its terms. No model, no FSDP, no Ray."""

from dataclasses import replace

import pytest
import torch

from ragen2.algos.advantages import AdvantageInputs
from ragen2.algos.objective import (LossInputs, ValueInputs, assign_credit,
                                    combined_regulariser_weights, compute_loss, entropy_term,
                                    kl_term, needs_critic, policy_term, snr_gate, value_term)
from ragen2.config import AlgorithmConfig

ALG = replace(AlgorithmConfig(), entropy_coef=0.1, kl_coef=0.5, kl_estimator="k1")


def _inputs(**kw) -> LossInputs:
    """B = 2 rows, T = 2 tokens; the last token of row 1 is off the mask (its 9 and 5 never count).

    ratio 1 everywhere (logprobs = old = 0); advantages [[1, 1], [-4, .]]; entropy
    [[0.5, 1.0], [1.5, .]]; reference logprobs -0.3 on the mask (k1 KL = 0.3 per token).
    """
    base = dict(logprobs=torch.zeros(2, 2), old_logprobs=torch.zeros(2, 2),
                advantages=torch.tensor([[1.0, 1.0], [-4.0, 0.0]]),
                mask=torch.tensor([[1, 1], [1, 0]]),
                entropy=torch.tensor([[0.5, 1.0], [1.5, 9.0]]),
                ref_logprobs=torch.tensor([[-0.3, -0.3], [-0.3, 5.0]]),
                agg_mode="token-mean", num_tokens=3.0, num_seqs=2.0)
    return LossInputs(**{**base, **kw})


def test_the_composed_loss_by_hand():
    out = compute_loss(_inputs(), ALG)
    # policy: token-mean of -A * 1 = (-1 - 1 + 4) / 3; the dual clip (3) is not active at ratio 1
    assert out.policy_loss.item() == pytest.approx(2 / 3)
    assert out.entropy.item() == pytest.approx((0.5 + 1.0 + 1.5) / 3)  # 1.0
    assert out.kl.item() == pytest.approx(0.3)
    # 2/3 - 0.1 * 1.0 + 0.5 * 0.3
    assert out.loss.item() == pytest.approx(2 / 3 - 0.1 + 0.15)
    assert out.policy_metrics["clipfrac"].item() == 0.0
    assert out.policy_metrics["ratio_mean"].item() == pytest.approx(1.0)


def test_regulariser_weights_weight_the_entropy_and_kl_terms_only():
    x = _inputs(regulariser_weights=torch.tensor([[0.5], [1.0]]))
    out = compute_loss(x, ALG)
    # weighted entropy (0.25 + 0.5 + 1.5) / 3 = 0.75; weighted KL (0.15 + 0.15 + 0.3) / 3 = 0.2
    assert entropy_term(x).item() == pytest.approx(0.75)
    assert kl_term(x, ALG).item() == pytest.approx(0.2)
    assert out.loss.item() == pytest.approx(2 / 3 - 0.1 * 0.75 + 0.5 * 0.2)
    # the logged terms stay unweighted
    assert out.entropy.item() == pytest.approx(1.0) and out.kl.item() == pytest.approx(0.3)


def test_terms_switch_off_with_their_inputs_and_coefficients():
    out = compute_loss(_inputs(ref_logprobs=None), replace(ALG, entropy_coef=0.0))
    assert out.kl is None and out.loss.item() == pytest.approx(2 / 3)
    assert out.entropy.item() == pytest.approx(1.0)  # still measured
    with pytest.raises(ValueError, match="entropy"):
        compute_loss(_inputs(entropy=None), ALG)


def test_dr_grpo_aggregation_uses_the_constant():
    """seq-mean-token-sum-norm: row sums (-2, 4) / C = 4, summed over rows / 2 sequences."""
    x = _inputs(agg_mode="seq-mean-token-sum-norm", norm_tokens=4.0, ref_logprobs=None)
    pg, _ = policy_term(x, ALG)
    assert pg.item() == pytest.approx((-2 / 4 + 4 / 4) / 2)


def test_policy_loss_is_dispatched_by_name():
    with pytest.raises(KeyError, match="ppo_clip"):
        policy_term(_inputs(), replace(ALG, policy_loss="nope"))


def test_grpo_credit_through_the_registry():
    """Rewards [1, 0 | 3, 1]: group 0 mean 0.5, unbiased std sqrt(0.5); group 1 mean 2, std
    sqrt(2); both give +-0.70711. Rows 1 and 2 of the batch, spread on their masked tokens."""
    x = AdvantageInputs(rewards=torch.tensor([1.0, 0.0, 3.0, 1.0], dtype=torch.float64),
                        group_ids=torch.tensor([0, 0, 1, 1]), rows=torch.tensor([1, 2]),
                        token_rewards=torch.zeros(2, 3), mask=torch.tensor([[1, 1, 0], [0, 1, 1]]))
    adv, ret = assign_credit(x, ALG)
    a = 0.5 / 0.5 ** 0.5
    assert ret is None and adv.dtype == torch.float32
    assert adv.flatten().tolist() == pytest.approx([-a, -a, 0.0, 0.0, a, a], abs=1e-5)
    assert not needs_critic(ALG)


def test_gae_credit_through_the_registry():
    """One row, reward 1 on the last of 3 decision points, values 0.5, gamma = lam = 1:
    delta = (0, 0, 0.5) -> A = (0.5, 0.5, 0.5), returns = A + V = 1."""
    gae = replace(ALG, adv_estimator="gae", gamma=1.0, lam=1.0)
    x = AdvantageInputs(rewards=torch.tensor([1.0], dtype=torch.float64),
                        group_ids=torch.tensor([0]), rows=torch.tensor([0]),
                        token_rewards=torch.tensor([[0.0, 0.0, 1.0]]), mask=torch.ones(1, 3),
                        values=torch.full((1, 3), 0.5))
    adv, ret = assign_credit(x, gae)
    assert adv[0].tolist() == pytest.approx([0.5, 0.5, 0.5])
    assert ret[0].tolist() == pytest.approx([1.0, 1.0, 1.0])
    assert needs_critic(gae)
    with pytest.raises(ValueError, match="critic values"):
        assign_credit(replace(x, values=None), gae)


def test_snr_gate_and_the_filter_weights_combine():
    """Rewards [1, 0 | 1, 1]: group 0 has spread 0.5, group 1 none; the threshold gate (0) keeps
    group 0's regularisers only, on top of the filter's weights."""
    rewards, groups = torch.tensor([1.0, 0.0, 1.0, 1.0]), torch.tensor([0, 0, 1, 1])
    gate = snr_gate(rewards, groups, replace(ALG, regulariser_gate="threshold"))
    assert gate.tolist() == [1.0, 1.0, 0.0, 0.0]
    assert snr_gate(rewards, groups, ALG) is None  # gate "none"
    filt = torch.tensor([0.5, 0.5, 2.0, 2.0])
    assert combined_regulariser_weights(filt, gate).tolist() == [0.5, 0.5, 0.0, 0.0]
    assert combined_regulariser_weights(torch.ones(4), None) is None  # all 1: aggregated once


def test_value_term_by_hand():
    """v = (1, -1) moved towards returns (2, -2) from the old values 0: unclipped
    0.5 (v - R)^2 = 0.5 per token; the clip (0.2) holds v at (0.2, -0.2): 0.5 * 1.8^2 = 1.62."""
    x = ValueInputs(values=torch.tensor([[1.0, -1.0]]), old_values=torch.zeros(1, 2),
                    returns=torch.tensor([[2.0, -2.0]]), mask=torch.ones(1, 2))
    assert value_term(x, replace(ALG, value_clip=None)).item() == pytest.approx(0.5)
    assert value_term(x, replace(ALG, value_clip=0.2)).item() == pytest.approx(1.62)
