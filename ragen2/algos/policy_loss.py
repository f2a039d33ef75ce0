"""PPO policy loss (clip-higher + dual clip) and clipped value loss.

Registry: ``POLICY_LOSSES.get("ppo_clip")`` is ``ppo_clip_loss`` itself (same signature).
Metrics are detached scalars averaged over the LOCAL mask (they are for logging only).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ragen2.algos.aggregation import aggregate_loss
from ragen2.algos.kl import kl_penalty
from ragen2.registry import Registry

POLICY_LOSSES: Registry = Registry("policy loss")


def _masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    keep = mask > 0
    return (torch.where(keep, x, torch.zeros_like(x)).sum() / keep.sum().clamp(min=1)).detach()


@POLICY_LOSSES.register("ppo_clip")
def ppo_clip_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip_c: float | None = None,
    agg_mode: str = "token-mean",
    num_tokens: int | float | Tensor | None = None,
    num_seqs: int | float | Tensor | None = None,
    norm_tokens: float | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO clipped surrogate loss with separate low/high clip ("clip-higher") and dual clip.

    All inputs (B, T). With ratio = exp(logprobs - old_logprobs):
        L = max(-A * ratio, -A * clip(ratio, 1 - clip_low, 1 + clip_high))
    Dual clip (Ye et al. 2020, "Mastering Complex Control in MOBA Games"), when dual_clip_c is set
    (must be > 1): for tokens with A < 0, L = min(L, -A * dual_clip_c), bounding the loss when the
    ratio explodes on a negative-advantage token. Clipped / dual-bound tokens get zero gradient.
    L is reduced with ``aggregate_loss(L, mask, agg_mode, num_tokens=..., num_seqs=...,
    norm_tokens=...)`` (``norm_tokens``: the constant of "seq-mean-token-sum-norm").

    Metrics (detached, mean over masked tokens):
        clipfrac:      share where the clipped term was strictly larger (the active one).
        clipfrac_dual: share where A < 0 and the dual-clip bound was the active one.
        approx_kl:     k3 estimate of KL(pi_old || pi) = ratio - 1 - log(ratio) (tokens were sampled
                       from pi_old), i.e. ``kl_penalty(old_logprobs, logprobs, "k3")`` (log-ratio clamped to
                       [-20, 20]); >= 0.
        ratio_mean:    mean ratio.
    Returns:
        (scalar loss, metrics).
    """
    if dual_clip_c is not None and dual_clip_c <= 1.0:
        raise ValueError(f"dual_clip_c must be > 1, got {dual_clip_c}")
    # Zero the log-ratio off the mask so padding garbage (e.g. -inf logprobs) cannot give inf/NaN
    # values or gradients.
    log_ratio = torch.where(mask > 0, logprobs - old_logprobs, torch.zeros_like(logprobs))
    ratio = torch.exp(log_ratio)
    pg_unclipped = -advantages * ratio
    pg_clipped = -advantages * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    loss_mat = torch.maximum(pg_unclipped, pg_clipped)
    clip_active = pg_clipped > pg_unclipped
    dual_active = torch.zeros_like(clip_active)
    if dual_clip_c is not None:
        pg_dual = -advantages * dual_clip_c
        negative = advantages < 0
        dual_active = negative & (loss_mat > pg_dual)
        loss_mat = torch.where(negative, torch.minimum(loss_mat, pg_dual), loss_mat)
    loss = aggregate_loss(loss_mat, mask, agg_mode, num_tokens=num_tokens, num_seqs=num_seqs,
                          norm_tokens=norm_tokens)
    metrics = {
        "clipfrac": _masked_mean(clip_active.to(logprobs.dtype), mask),
        "clipfrac_dual": _masked_mean(dual_active.to(logprobs.dtype), mask),
        "approx_kl": _masked_mean(kl_penalty(old_logprobs, logprobs, "k3"), mask),
        "ratio_mean": _masked_mean(ratio, mask),
    }
    return loss, metrics


def value_loss(
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    mask: Tensor,
    *,
    clip_range: float | None = None,
    agg_mode: str = "token-mean",
    num_tokens: int | float | Tensor | None = None,
    num_seqs: int | float | Tensor | None = None,
    norm_tokens: float | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Critic loss, optionally PPO-style clipped around the rollout-time values.

    All inputs (B, T). Without clip_range: L = 0.5 * (v - R)^2. With clip_range c:
        v_c = clip(v, old - c, old + c);  L = 0.5 * max((v - R)^2, (v_c - R)^2)
    Reduced with ``aggregate_loss``. Metric "vf_clipfrac": share of masked tokens where the clipped
    term was strictly larger (0 when clip_range is None).
    """
    unclipped = (values - returns).square()
    if clip_range is None:
        loss_mat = 0.5 * unclipped
        clip_active = torch.zeros_like(unclipped)
    else:
        v_clipped = torch.clamp(values, old_values - clip_range, old_values + clip_range)
        clipped = (v_clipped - returns).square()
        loss_mat = 0.5 * torch.maximum(unclipped, clipped)
        clip_active = (clipped > unclipped).to(values.dtype)
    loss = aggregate_loss(loss_mat, mask, agg_mode, num_tokens=num_tokens, num_seqs=num_seqs,
                          norm_tokens=norm_tokens)
    return loss, {"vf_clipfrac": _masked_mean(clip_active, mask)}
