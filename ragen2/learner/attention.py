"""``sdpa_fp32_backward``: SDPA whose backward runs in float32 on the CPU.

On the CPU, PyTorch's flash-attention kernel is fast in bfloat16 going forward, but its bfloat16
*backward* is slower than its float32 one at the short rows and small heads of multi-turn RL,
several times so at ~100 tokens (``benchmarks/attention_backward.py``; the figures are on
``docs/results/step-account.md``). This attention runs the forward exactly as ``sdpa`` does (the
same kernel on the same bfloat16 inputs: bit-identical outputs, so logprobs, entropies and every
no-grad pass are unchanged) and the backward in float32 on float32 copies of the saved inputs, the
forward's output and its log-sum-exp, casting the gradients back to the inputs' dtype. The
gradients are closer to exact than the bfloat16 backward's, not further.

It applies where a reduced-precision attention on the CPU records a gradient; everywhere else
(float32, CUDA, no grad, dropout, a paged cache or a position bias) it is transformers' ``sdpa``.

Registered with transformers' attention and mask interfaces when this module is imported, which
:func:`ragen2.learner.fsdp.check_attn_implementation` does before any model is built.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

NAME = "sdpa_fp32_backward"
_ATEN = torch.ops.aten


class _FlashFp32Backward(torch.autograd.Function):
    """CPU flash attention: the forward in the inputs' dtype, the backward in float32."""

    @staticmethod
    def forward(ctx: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                mask: torch.Tensor | None, is_causal: bool, scale: float | None) -> torch.Tensor:
        out, lse = _ATEN._scaled_dot_product_flash_attention_for_cpu(
            query, key, value, 0.0, is_causal, attn_mask=mask, scale=scale)
        ctx.save_for_backward(query, key, value, out, lse, mask)
        ctx.is_causal, ctx.scale = is_causal, scale
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        query, key, value, out, lse, mask = ctx.saved_tensors
        grads = _ATEN._scaled_dot_product_flash_attention_for_cpu_backward(
            grad_out.float(), query.float(), key.float(), value.float(), out.float(), lse, 0.0,
            ctx.is_causal, attn_mask=None if mask is None else mask.float(), scale=ctx.scale)
        return (*(g.to(t.dtype) for g, t in zip(grads, (query, key, value))), None, None, None)


def flash_fp32_backward(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                        mask: torch.Tensor | None = None, is_causal: bool = False,
                        scale: float | None = None) -> torch.Tensor:
    """Attention of ``query`` (B, H, T, D) over ``key``, ``value`` (B, H_kv, S, D), H a multiple
    of H_kv (grouped-query attention): (B, H, T, D), as ``F.scaled_dot_product_attention(...,
    enable_gqa=True)`` gives it on the CPU, with a float32 backward. ``mask`` is boolean (True:
    attend) or additive, broadcastable to (B, H, T, S)."""
    if mask is not None and mask.dtype == torch.bool:  # as SDPA turns it into an additive mask
        mask = torch.zeros(mask.shape, dtype=query.dtype).masked_fill_(~mask, float("-inf"))
    return _FlashFp32Backward.apply(query, key, value, mask, is_causal, scale)


def _applies(qkv: tuple[torch.Tensor, ...], dropout: float, kwargs: dict[str, Any]) -> bool:
    query = qkv[0]
    return (query.device.type == "cpu" and query.dtype in (torch.bfloat16, torch.float16)
            and torch.is_grad_enabled() and any(t.requires_grad for t in qkv) and not dropout
            and kwargs.get("position_bias") is None and kwargs.get("cache") is None
            and not kwargs.get("output_attentions", False))


def sdpa_fp32_backward_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                                 value: torch.Tensor, attention_mask: torch.Tensor | None,
                                 dropout: float = 0.0, scaling: float | None = None,
                                 is_causal: bool | None = None, **kwargs: Any,
                                 ) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: ``query`` (B, H, T, D), ``key`` and ``value``
    (B, H_kv, S, D), ``attention_mask`` as ``sdpa`` gets it (None, or (B, 1, T, S)); the output
    (B, T, H, D). The causal rule is ``sdpa``'s: causal without a mask, for more than one query."""
    if not _applies((query, key, value), dropout, kwargs):  # e.g. LoRA on v alone: a gradient
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, is_causal=is_causal, **kwargs)
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    t = query.shape[2]
    causal = bool(causal and attention_mask is None and t > 1)
    if causal and key.shape[2] > t:  # sdpa's causal alignment is upper-left: keep the first t
        key, value = key[:, :, :t], value[:, :, :t]
    out = flash_fp32_backward(query, key, value, attention_mask, causal, scaling)
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(NAME, sdpa_fp32_backward_attention)
AttentionMaskInterface.register(NAME, sdpa_mask)
