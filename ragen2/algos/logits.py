"""Token log-probabilities and entropies from model logits."""

from __future__ import annotations

import torch
from torch import Tensor


def _scaled(logits: Tensor, temperature: float) -> Tensor:
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    # Upcast bf16/fp16 logits: log-softmax over a large vocabulary loses precision in half types.
    logits = logits.float()
    return logits / temperature if temperature != 1.0 else logits


def logprobs_from_logits(logits: Tensor, labels: Tensor, temperature: float = 1.0) -> Tensor:
    """Log-probability of each label under softmax(logits / temperature).

    Args:
        logits: (B, T, V) unnormalised scores (logits[:, t] already predicts labels[:, t]).
        labels: (B, T) long token ids.
        temperature: sampling temperature (> 0), must match the one used at rollout.

    Returns:
        (B, T) float32: log_softmax(logits / temperature)[b, t, labels[b, t]].
    """
    logp = torch.log_softmax(_scaled(logits, temperature), dim=-1)
    return torch.gather(logp, dim=-1, index=labels.long().unsqueeze(-1)).squeeze(-1)


def entropy_from_logits(logits: Tensor, temperature: float = 1.0) -> Tensor:
    """Entropy of p = softmax(z), z = logits / temperature.

    H = -sum_v p_v log p_v  (terms with p_v = 0, e.g. logits of -inf, contribute 0, not NaN).

    Args:
        logits: (B, T, V).
        temperature: > 0.

    Returns:
        (B, T) float32 entropy in nats.
    """
    logp = torch.log_softmax(_scaled(logits, temperature), dim=-1)
    p = logp.exp()
    return -torch.where(p > 0, p * logp, torch.zeros_like(p)).sum(dim=-1)
