"""Advantage estimators: group-relative (GRPO) and multi-turn-aware GAE, and their registry.

The maths are plain functions:
    grpo_advantages(rewards (N,), group_ids (N,), *, norm_by_std=True, eps=1e-6) -> (N,)
    gae_advantages(token_rewards (B,T), values (B,T), mask (B,T), *, gamma=1.0, lam=1.0,
                   whiten=False) -> (advantages (B,T), returns (B,T))

``ADVANTAGE_ESTIMATORS`` maps ``algorithm.adv_estimator`` to an :class:`AdvantageEstimator`: one
call signature for every estimator, ``assign(AdvantageInputs, algorithm) -> (advantages (B, T),
returns (B, T) or None)``, and whether it needs a critic. The learner dispatches through it
(:func:`ragen2.algos.objective.assign_credit`), so a new estimator is one registration, from any
module, and ``algorithm.adv_estimator=<name>``:

    ADVANTAGE_ESTIMATORS.register("mine")(AdvantageEstimator(my_assign))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch
from torch import Tensor

from ragen2.registry import Registry


@dataclass(frozen=True)
class AdvantageInputs:
    """What an estimator sees of one micro-batch: B of the batch's N rows, T token columns.

    rewards:       (N,) float64 episode returns of EVERY row of the batch (group statistics need
                   the whole group, which a micro-batch may cut).
    group_ids:     (N,) int64 group (prompt) of every row.
    rows:          (B,) int64 this micro-batch's rows, indices into N.
    token_rewards: (B, T) float32: each turn's reward on the turn's last generated token.
    mask:          (B, T) loss mask: 1 on generated tokens (the decision points).
    values:        (B, T) float32 critic values (estimators with ``needs_critic``), else None.
    """

    rewards: Tensor
    group_ids: Tensor
    rows: Tensor
    token_rewards: Tensor
    mask: Tensor
    values: Optional[Tensor] = None


#: ``assign(inputs, algorithm)`` -> ((B, T) advantages, zero off the mask; (B, T) returns or None).
#: ``algorithm`` is the ``algorithm`` config section (its hyper-parameters: gamma, lam, ...).
AssignFn = Callable[[AdvantageInputs, Any], "tuple[Tensor, Optional[Tensor]]"]


@dataclass(frozen=True)
class AdvantageEstimator:
    """A registered estimator: its credit assignment and whether the learner trains a critic for
    it (then ``inputs.values`` is set and the returned returns train the critic)."""

    assign: AssignFn
    needs_critic: bool = False


ADVANTAGE_ESTIMATORS: Registry[AdvantageEstimator] = Registry("advantage estimator")


def masked_whiten(x: Tensor, mask: Tensor, eps: float = 1e-8) -> Tensor:
    """Normalise x to zero mean / unit std over the masked entries.

    mean = sum(x*m)/sum(m);  var = sum((x-mean)^2 * m) / max(sum(m) - 1, 1)  (unbiased);
    out = (x - mean) / sqrt(var + eps), set to 0 where mask == 0.

    Args:
        x, mask: same shape (e.g. (B, T)); mask is 1.0 on entries that count.
    Returns:
        tensor shaped like x.
    """
    mask = mask.to(x.dtype)
    n = mask.sum()
    mean = (x * mask).sum() / n.clamp(min=1.0)
    var = ((x - mean).square() * mask).sum() / (n - 1.0).clamp(min=1.0)
    return (x - mean) * torch.rsqrt(var + eps) * mask


def grpo_advantages(
    rewards: Tensor, group_ids: Tensor, *, norm_by_std: bool = True, eps: float = 1e-6
) -> Tensor:
    """Group-relative advantages (GRPO): each reward minus its group's mean, optionally / std.

    A_i = R_i - mean_{g(i)};  if norm_by_std: A_i = (R_i - mean_g) / (std_g + eps).

    Choices: std_g is the UNBIASED sample std (divide by n_g - 1, as ``torch.std`` does). A group
    of size 1 has R - mean = 0, and its std is taken as 0 (not NaN), so its advantage is exactly 0.
    A group with identical rewards also gets 0 (0 / eps).

    Args:
        rewards: (N,) float, one scalar per trajectory.
        group_ids: (N,) long, arbitrary (not necessarily contiguous) ids; equal id = same group
            (e.g. same prompt / env seed).
    Returns:
        (N,) advantages, same dtype as rewards.
    """
    _, inv = torch.unique(group_ids, return_inverse=True)
    num_groups = int(inv.max().item()) + 1 if inv.numel() else 0
    counts = torch.zeros(num_groups, dtype=rewards.dtype, device=rewards.device)
    counts.index_add_(0, inv, torch.ones_like(rewards))
    sums = torch.zeros_like(counts).index_add_(0, inv, rewards)
    centered = rewards - (sums / counts)[inv]
    if not norm_by_std:
        return centered
    sq = torch.zeros_like(counts).index_add_(0, inv, centered.square())
    std = torch.sqrt(sq / (counts - 1.0).clamp(min=1.0))
    return centered / (std[inv] + eps)


def gae_advantages(
    token_rewards: Tensor,
    values: Tensor,
    mask: Tensor,
    *,
    gamma: float = 1.0,
    lam: float = 1.0,
    whiten: bool = False,
) -> tuple[Tensor, Tensor]:
    """Generalised Advantage Estimation over multi-turn token sequences.

    Only positions with mask == 1 (generated tokens) are decision points. Positions with
    mask == 0 (prompt / environment-observation tokens, padding) are skipped: the "next state" of a
    decision point is the next position with mask == 1 in the same row, so value and advantage
    carry across observation gaps, and gamma/lam are applied per decision point, not per raw
    position. After the last decision point of a row the value is 0 (episode end).

    For decision points t, with t' the next decision point (V(t') = 0, A(t') = 0 if none):
        delta_t = r_t + gamma * V(t') - V(t)
        A_t     = delta_t + gamma * lam * A(t')
        Ret_t   = A_t + V(t)
    A and Ret are 0 where mask == 0.

    Rewards must sit on masked (mask == 1) positions; the learner puts each turn's reward on the
    last generated token of that turn. Rewards on mask == 0 positions are ignored.

    Args:
        token_rewards, values, mask: (B, T); mask is float/bool 1 on generated tokens.
        whiten: if True, advantages are passed through ``masked_whiten`` AFTER returns are computed
            (returns always use the raw advantages).
    Returns:
        (advantages, returns), both (B, T).
    """
    m = mask.to(values.dtype)
    B, T = values.shape
    next_value = values.new_zeros(B)
    next_adv = values.new_zeros(B)
    adv = torch.zeros_like(values)
    for t in reversed(range(T)):
        active = m[:, t] > 0
        delta = token_rewards[:, t] + gamma * next_value - values[:, t]
        a_t = delta + gamma * lam * next_adv
        adv[:, t] = torch.where(active, a_t, torch.zeros_like(a_t))
        next_value = torch.where(active, values[:, t], next_value)
        next_adv = torch.where(active, a_t, next_adv)
    returns = (adv + values) * m
    if whiten:
        adv = masked_whiten(adv, m)
    return adv, returns


def _assign_grpo(x: AdvantageInputs, algorithm: Any) -> tuple[Tensor, None]:
    """GRPO: each row's group-relative advantage on every one of its generated tokens."""
    seq = grpo_advantages(x.rewards, x.group_ids, norm_by_std=algorithm.norm_adv_by_std).float()
    return seq[x.rows].to(x.mask.device).unsqueeze(1) * x.mask, None


def _assign_gae(x: AdvantageInputs, algorithm: Any) -> tuple[Tensor, Tensor]:
    """GAE over the decision points, from the critic's values."""
    if x.values is None:
        raise ValueError("the gae estimator needs critic values (AdvantageInputs.values)")
    return gae_advantages(x.token_rewards, x.values, x.mask, gamma=algorithm.gamma,
                          lam=algorithm.lam)


ADVANTAGE_ESTIMATORS.add("grpo", AdvantageEstimator(_assign_grpo))
ADVANTAGE_ESTIMATORS.add("gae", AdvantageEstimator(_assign_gae, needs_critic=True))
