"""Reduce a per-token loss matrix to a scalar.

All modes take ``loss_mat`` and ``mask`` of shape (B, T) (mask is 1.0 on tokens that count, i.e.
generated tokens, and 0.0 on prompt/observation/padding tokens) and return a 0-dim tensor.

Global denominators (``num_tokens`` / ``num_seqs``)
---------------------------------------------------
When one logical batch is split into micro-batches (gradient accumulation) and across
data-parallel ranks, pass the token count / sequence count of the *whole* batch (summed over all
micro-batches and ranks). Every mode is then a plain sum over tokens/rows divided by a constant,
so summing the per-micro-batch losses (and all-reducing gradients with SUM) gives exactly the
full-batch value. With the local defaults, averaging micro-batch losses would instead weight
short micro-batches too heavily.

Dr.GRPO's constant normaliser (``norm_tokens``)
-----------------------------------------------
"seq-mean-token-sum-norm" divides each sequence's token sum by one constant ``norm_tokens`` (the
longest response a trajectory can have, e.g. ``engine.max_new_tokens x rollout.max_turns``), not
by that sequence's own length, so a long response is not down-weighted per token (Liu et al. 2025,
"Understanding R1-Zero-Like Training: A Critical Perspective"). The constant must be the same for
every micro-batch, rank and step: there is no default (the padded width of a micro-batch, which
verl falls back to, changes with the micro-batch size and so would change the maths).
"""

from __future__ import annotations

import math
import numbers
from typing import Callable

import torch
from torch import Tensor

from ragen2.registry import Registry

#: (masked loss (B, T): zero where the mask is, mask (B, T), num_tokens, num_seqs, norm_tokens)
#: -> 0-dim loss; see :func:`aggregate_loss` for the arguments
AggregationMode = Callable[..., Tensor]

#: ``algorithm.loss_agg_mode``: the four built-in modes in their documented order, then any a
#: plugin module registers
LOSS_AGG_MODES: Registry[AggregationMode] = Registry("loss aggregation mode", ordered=True)


def _denominator(value: int | float | Tensor | None, default: Tensor) -> Tensor:
    """The denominator to use, clamped to >= 1 so an empty (all-masked) batch gives 0, not NaN.
    A number is filled in on the device (``torch.as_tensor`` of a number would copy it from the
    host, a blocking copy on CUDA)."""
    if value is None:
        denom = default
    elif isinstance(value, Tensor):
        denom = value.to(dtype=default.dtype, device=default.device)
    else:
        denom = torch.full((), value, dtype=default.dtype, device=default.device)
    return denom.clamp(min=1.0)


def _constant_norm(value: float | None) -> float:
    """The Dr.GRPO normaliser: a finite number > 0 (never derived from the batch)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not (
            math.isfinite(value) and value > 0):
        raise ValueError(f"loss aggregation mode 'seq-mean-token-sum-norm' needs norm_tokens, a "
                         f"constant > 0 (e.g. engine.max_new_tokens x rollout.max_turns); got "
                         f"{value!r}")
    return float(value)


def aggregate_loss(
    loss_mat: Tensor,
    mask: Tensor,
    mode: str,
    *,
    num_tokens: int | float | Tensor | None = None,
    num_seqs: int | float | Tensor | None = None,
    norm_tokens: float | None = None,
) -> Tensor:
    """Aggregate a (B, T) per-token loss into a scalar.

    Args:
        loss_mat: (B, T) per-token loss.
        mask: (B, T) float, 1.0 where the token counts; masked-out entries are ignored even if
            inf/NaN.
        mode: a name in ``LOSS_AGG_MODES`` (a plugin's mode gets the masked loss, zero where
            the mask is, the mask and the three keyword arguments below):
            - "token-mean":          sum_{b,t} L*m / N_tok,  N_tok defaults to sum(m).
            - "seq-mean-token-mean": sum_b [ sum_t (L*m)_b / max(sum_t m_b, 1) ] / N_seq.
            - "seq-mean-token-sum":  sum_b sum_t (L*m)_b / N_seq.
            - "seq-mean-token-sum-norm" (Dr.GRPO): sum_b [ sum_t (L*m)_b / C ] / N_seq with the
              constant C = ``norm_tokens``.
            N_seq defaults to the number of rows with at least one masked-in token.
        num_tokens: optional global token count (see module docstring); used by "token-mean".
        num_seqs: optional global sequence count; used by the three "seq-mean-*" modes.
        norm_tokens: the constant C of "seq-mean-token-sum-norm" (required there, > 0; ignored by
            the other modes).

    Denominators N_tok / N_seq are clamped to >= 1. Raises ValueError for an unknown mode or a
    missing / non-positive ``norm_tokens`` in "seq-mean-token-sum-norm".
    """
    if mode not in LOSS_AGG_MODES:
        raise ValueError(f"unknown loss aggregation mode {mode!r}; allowed: "
                         f"{', '.join(LOSS_AGG_MODES.names())}")
    mask = mask.to(loss_mat.dtype)
    # where, not multiply: an inf/NaN on a masked-out position must not leak into the sum.
    masked = torch.where(mask > 0, loss_mat, torch.zeros_like(loss_mat))
    return LOSS_AGG_MODES.get(mode)(masked, mask, num_tokens=num_tokens, num_seqs=num_seqs,
                                    norm_tokens=norm_tokens)


@LOSS_AGG_MODES.register("token-mean")
def token_mean(masked: Tensor, mask: Tensor, *, num_tokens: int | float | Tensor | None = None,
               **_: object) -> Tensor:
    """sum_{b,t} L*m / N_tok."""
    return masked.sum() / _denominator(num_tokens, mask.sum())


def _seq_mean(per_seq: Tensor, mask: Tensor, num_seqs: int | float | Tensor | None) -> Tensor:
    """sum_b per_seq_b / N_seq, N_seq defaulting to the rows with a masked-in token."""
    return per_seq.sum() / _denominator(num_seqs, (mask.sum(dim=-1) > 0).to(per_seq.dtype).sum())


@LOSS_AGG_MODES.register("seq-mean-token-mean")
def seq_mean_token_mean(masked: Tensor, mask: Tensor, *,
                        num_seqs: int | float | Tensor | None = None, **_: object) -> Tensor:
    """sum_b [ sum_t (L*m)_b / max(sum_t m_b, 1) ] / N_seq."""
    return _seq_mean(masked.sum(dim=-1) / mask.sum(dim=-1).clamp(min=1.0), mask, num_seqs)


@LOSS_AGG_MODES.register("seq-mean-token-sum")
def seq_mean_token_sum(masked: Tensor, mask: Tensor, *,
                       num_seqs: int | float | Tensor | None = None, **_: object) -> Tensor:
    """sum_b sum_t (L*m)_b / N_seq."""
    return _seq_mean(masked.sum(dim=-1), mask, num_seqs)


@LOSS_AGG_MODES.register("seq-mean-token-sum-norm")
def seq_mean_token_sum_norm(masked: Tensor, mask: Tensor, *,
                            num_seqs: int | float | Tensor | None = None,
                            norm_tokens: float | None = None, **_: object) -> Tensor:
    """Dr.GRPO: sum_b [ sum_t (L*m)_b / C ] / N_seq with the constant C = ``norm_tokens``."""
    return _seq_mean(masked.sum(dim=-1) / _constant_norm(norm_tokens), mask, num_seqs)
