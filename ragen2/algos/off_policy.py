"""The off-policy correction of bounded staleness (``trainer.max_staleness`` >= 1): pure tensors.

With k >= 1 a batch was sampled by a behaviour policy pi_behav up to k versions older than the
learner's. ragen2 follows the *decoupled* PPO objective of AReaL (Fu et al. 2025, "AReaL: A
Large-Scale Asynchronous Reinforcement Learning System for Language Reasoning", arXiv:2505.24298,
Eq. 5), itself from Hilton, Cobbe & Schulman 2022 ("Batch size-invariance for policy
optimization"), which separates the two roles PPO's old policy plays:

* the *proximal* policy pi_prox, the trust region's centre: the learner's own logprobs at its
  current version, recomputed before the update (the ``old`` logprobs the on-policy loop already
  takes, so no extra forward);
* the *behaviour* policy pi_behav, which sampled the tokens: the engine's recorded per-token
  logprobs (``Trajectory.logprobs``).

Per token, with r = pi_theta / pi_prox and the importance weight w = min(pi_prox / pi_behav, cap)::

    L = w * max(-A r, -A clip(r, 1 - eps_low, 1 + eps_high))      (w detached)

Why this and not a plain PPO ratio against pi_behav with truncated weights: the clip then bounds
each update's step from the learner's current policy, whatever the batch's age, so k does not
widen the trust region; the behaviour gap is corrected by w alone. The cap truncates (as
IMPALA's rho-bar and verl's TIS do) rather than masks: AReaL zeroes a token whose weight exceeds
its cap, which drops exactly the tokens the policy moved most on; truncation keeps their
(biased, bounded) gradient. Since w >= 0 multiplies the whole per-token loss, it can be applied
as a factor on the advantages (PPO's loss, dual clip included, is positively homogeneous in A):
the learner passes ``LossInputs.behaviour_weights`` and :func:`ragen2.algos.objective.policy_term`
scales the advantages. At k = 0 none of this runs (``behaviour_weights`` is None).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor


@dataclass
class BehaviourWeights:
    """The truncated importance weights of one micro-batch and their sums for the metrics.

    weights:   (B, T) float32 min(pi_prox / pi_behav, cap) on the mask, 0 off it; no autograd.
    The sums are 0-dim tensors on the weights' device (the learner adds them up there and reads
    them once per update):
    total:     float32 sum of the weights over the mask (before truncation: ``raw_total``).
    maximum:   float32, the largest weight over the mask before truncation (0 on an empty mask).
    truncated: int64, tokens of the mask whose weight was above the cap (and so truncated).
    tokens:    int64, tokens of the mask.
    """

    weights: Tensor
    total: Tensor
    raw_total: Tensor
    maximum: Tensor
    truncated: Tensor
    tokens: Tensor


def behaviour_weights(prox_logprobs: Tensor, behav_logprobs: Tensor, mask: Tensor,
                      cap: Optional[float]) -> BehaviourWeights:
    """The decoupled objective's importance weights w = min(exp(prox - behav), cap).

    prox_logprobs:  (B, T) log pi_prox (the learner's logprobs before the update).
    behav_logprobs: (B, T) log pi_behav (the engine's recorded logprobs).
    mask:           (B, T) loss mask, 1 on the trained tokens.
    cap:            the truncation (``algorithm.tis_cap``, > 1), or None for none.
    Off the mask the log-ratio is zeroed first (padding cannot give inf) and the weight is 0.
    """
    keep = mask > 0
    log_w = torch.where(keep, (prox_logprobs - behav_logprobs).detach().float(),
                        torch.zeros_like(prox_logprobs, dtype=torch.float32))
    raw = torch.where(keep, torch.exp(log_w), torch.zeros_like(log_w))
    weights = raw if cap is None else torch.clamp(raw, max=cap)
    truncated = keep.new_zeros((), dtype=torch.int64) if cap is None else (raw > cap).sum()
    # raw is >= 0 on the mask and 0 off it: its maximum is the mask's (0 on an empty mask)
    maximum = raw.max() if raw.numel() else raw.new_zeros(())
    return BehaviourWeights(weights=weights, total=weights.sum(), raw_total=raw.sum(),
                            maximum=maximum, truncated=truncated, tokens=keep.sum())


__all__ = ["BehaviourWeights", "behaviour_weights"]
