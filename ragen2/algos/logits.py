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
    return _entropy(torch.log_softmax(_scaled(logits, temperature), dim=-1))


def _entropy(logp: Tensor) -> Tensor:
    """(..., V) log-probabilities -> (...) entropy; p = 0 terms count 0."""
    p = logp.exp()
    return -torch.where(p > 0, p * logp, torch.zeros_like(p)).sum(dim=-1)


def logprobs_and_entropy(logits: Tensor, labels: Tensor, temperature: float = 1.0, *,
                         entropy_mask: Tensor | None = None, entropy_grad: bool = True,
                         entropy_tokens: int | None = None) -> tuple[Tensor, Tensor]:
    """:func:`logprobs_from_logits` and :func:`entropy_from_logits` from one log-softmax.

    Args:
        logits: (B, T, V); labels: (B, T) long; temperature: > 0.
        entropy_mask: optional (B, T); the entropy is computed only where it is non-zero and is
            0 elsewhere (the loss reads it through the same mask, so this only saves work: the
            entropy is a (B, T, V) computation and response tokens are often a minority).
        entropy_grad: False computes the entropy without autograd (a metric only: no (B, T, V)
            intermediates are kept for a backward that never comes).
        entropy_tokens: the number of non-zeros of ``entropy_mask``, when the caller knows it
            (from host data): the selection's size is then not read from the device, which on
            CUDA waits for every queued kernel. Checked on the device, asynchronously.

    Returns:
        (lp, ent): (B, T) float32 each.
    """
    logp = torch.log_softmax(_scaled(logits, temperature), dim=-1)
    lp = torch.gather(logp, dim=-1, index=labels.long().unsqueeze(-1)).squeeze(-1)
    with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
        if entropy_mask is None:
            return lp, _entropy(logp)
        where = entropy_mask.to(torch.bool)
        if entropy_tokens is None:
            return lp, logp.new_zeros(where.shape).masked_scatter(where, _entropy(logp[where]))
        # the same positions in the same (row-major) order as logp[where]: the same values
        torch._assert_async(where.sum() == entropy_tokens, "entropy_tokens is not the mask's count")
        at = torch.nonzero_static(where, size=entropy_tokens).unbind(1)
        ent = logp.new_zeros(where.shape).index_put(at, _entropy(logp[at]))
    return lp, ent
