"""SNR-gated regularisers: the KL and entropy terms weighted by each sample's group reward spread.

The seed's "gradient conflict" remedy taken literally: a group whose rewards do not differ has no
task gradient, so its KL and entropy gradients are all it contributes; gating them by the group's
reward spread σ_g keeps the regularisers where the task signal is.

    none       w_i = 1
    threshold  w_i = 1 if σ_g(i) > threshold else 0
    scaled     w_i = σ_g(i) / max_g σ_g     (0 for every sample when no group has spread)

σ_g is the population std of the group's returns (the filter's σ_g, ``filtering.scores``).
"""

from __future__ import annotations

import torch
from torch import Tensor

REGULARISER_GATES = ("none", "threshold", "scaled")


def group_spread(rewards: Tensor, group_ids: Tensor) -> Tensor:
    """(N,) rewards and group ids -> (N,) float64 σ of each sample's group (population std)."""
    r = torch.as_tensor(rewards, dtype=torch.float64).reshape(-1)
    _, inv = torch.unique(torch.as_tensor(group_ids).reshape(-1), return_inverse=True)
    g = int(inv.max()) + 1 if len(inv) else 0
    counts = torch.zeros(g, dtype=torch.float64).index_add_(0, inv, torch.ones_like(r))
    mean = torch.zeros(g, dtype=torch.float64).index_add_(0, inv, r) / counts
    dev = r - mean[inv]
    var = torch.zeros(g, dtype=torch.float64).index_add_(0, inv, dev * dev) / counts
    return var.sqrt()[inv]


def regulariser_weights(rewards: Tensor, group_ids: Tensor, gate: str = "none",
                        threshold: float = 0.0) -> Tensor:
    """(N,) float32 weight of each sample's KL and entropy terms (see the module docstring)."""
    if gate not in REGULARISER_GATES:
        raise ValueError(f"gate {gate!r} is invalid; allowed: {', '.join(REGULARISER_GATES)}")
    n = len(torch.as_tensor(rewards).reshape(-1))
    if gate == "none":
        return torch.ones(n, dtype=torch.float32)
    sigma = group_spread(rewards, group_ids)
    if gate == "threshold":
        return (sigma > threshold).to(torch.float32)
    top = float(sigma.max()) if n else 0.0
    return (sigma / top).to(torch.float32) if top > 0 else torch.zeros(n, dtype=torch.float32)
