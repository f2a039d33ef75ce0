"""SNR-gated regularisers: the KL and entropy terms weighted by each sample's group reward spread.

The seed's "gradient conflict" remedy taken literally: a group whose rewards do not differ has no
task gradient, so its KL and entropy gradients are all it contributes; gating them by the group's
reward spread σ_g keeps the regularisers where the task signal is.

    none       w_i = 1
    threshold  w_i = 1 if σ_g(i) > threshold else 0
    scaled     w_i = σ_g(i) / max_g σ_g     (0 for every sample when no group has spread)

σ_g is the population std of the group's returns (the filter's σ_g, ``filtering.scores``). The
gates sit in a registry (``algorithm.regulariser_gate``): a plugin module may register its own.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from ragen2.registry import Registry

#: (rewards (N,), group ids (N,), threshold) -> (N,) float32 weights
RegulariserGate = Callable[[Tensor, Tensor, float], Tensor]

#: ``algorithm.regulariser_gate``: none, threshold, scaled, then any a plugin module registers
REGULARISER_GATES: Registry[RegulariserGate] = Registry("regulariser gate", ordered=True)


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
    return REGULARISER_GATES.get(gate)(rewards, group_ids, threshold)


@REGULARISER_GATES.register("none")
def no_gate(rewards: Tensor, group_ids: Tensor, threshold: float) -> Tensor:
    """w_i = 1."""
    return torch.ones(len(torch.as_tensor(rewards).reshape(-1)), dtype=torch.float32)


@REGULARISER_GATES.register("threshold")
def threshold_gate(rewards: Tensor, group_ids: Tensor, threshold: float) -> Tensor:
    """w_i = 1 if σ_g(i) > threshold else 0."""
    return (group_spread(rewards, group_ids) > threshold).to(torch.float32)


@REGULARISER_GATES.register("scaled")
def scaled_gate(rewards: Tensor, group_ids: Tensor, threshold: float) -> Tensor:
    """w_i = σ_g(i) / max_g σ_g (0 for every sample when no group has spread)."""
    n = len(torch.as_tensor(rewards).reshape(-1))
    sigma = group_spread(rewards, group_ids)
    top = float(sigma.max()) if n else 0.0
    return (sigma / top).to(torch.float32) if top > 0 else torch.zeros(n, dtype=torch.float32)
