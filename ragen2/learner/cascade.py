"""The scorer's continuation forward on the CPU without copies of its contexts' KV caches.

:func:`ragen2.learner.scoring.score_batched` scores many short continuations under a few long
contexts. The generic forward gives every continuation row its own copy of its context's cached
keys and values, appends the row's to them and repeats them per query head: on the CPU about a
third of the MI panel's scoring moved keys and values (``benchmarks/scorer_cascade.py``).

The cascade computes the same attention without those copies. Per decoder layer, the queries of
all the rows of one context attend over that context's cached keys at once (one attention, no
mask, the keys cut to the context's real length), each row attends causally over its own keys,
and the two partial attentions are merged by their log-sum-exps: softmax over the union of the
keys, to float rounding. The decoder layers are run by hand with the model's own modules, so the
path is taken only for the architectures whose layers it reproduces (:func:`applies`); any other
model, and every device but the CPU, keeps the generic forward.
"""

from __future__ import annotations

import torch
from torch import nn

#: the model types whose decoder layers :func:`rows_logits` reproduces: pre-norm, rotary
#: embeddings, grouped-query attention with no q/k norm, a residual MLP
ARCHITECTURES = ("llama", "qwen2")


def base_model(model: nn.Module) -> nn.Module:
    """The causal LM inside ``model`` (a PEFT wrapper's base model; FSDP2 keeps the class)."""
    get = getattr(model, "get_base_model", None)
    return get() if callable(get) else model


def applies(model: nn.Module, device: torch.device | str) -> bool:
    """Whether :func:`rows_logits` computes ``model``'s forward: on the CPU, without autograd,
    for a Llama or Qwen2 causal LM with full attention, no attention dropout and the
    transformers module layout (``model.layers``, ``self_attn.q_proj`` ...)."""
    if torch.device(device).type != "cpu" or torch.is_grad_enabled():
        return False
    lm = base_model(model)
    cfg = getattr(lm, "config", None)
    inner = getattr(lm, "model", None)
    if cfg is None or inner is None or getattr(cfg, "model_type", None) not in ARCHITECTURES:
        return False
    if getattr(cfg, "use_sliding_window", False) or getattr(cfg, "attention_dropout", 0.0):
        return False
    if any(t != "full_attention" for t in (getattr(cfg, "layer_types", None) or [])):
        return False
    layers = getattr(inner, "layers", None)
    return (layers is not None and hasattr(lm, "lm_head") and hasattr(inner, "rotary_emb")
            and all(hasattr(layer.self_attn, "q_proj") and not hasattr(layer.self_attn, "q_norm")
                    for layer in layers))


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding of ``x`` (R, H, T, D) at ``cos``, ``sin`` (R, T, D): the half-split
    rotation Llama and Qwen2 use."""
    half = x.shape[-1] // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos[:, None] + rot * sin[:, None]


def cascade_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ctx_k: torch.Tensor,
                      ctx_v: torch.Tensor, owner: torch.Tensor, ctx_len: torch.Tensor,
                      scale: float) -> torch.Tensor:
    """Softmax attention of row r's queries over context ``owner[r]``'s cached keys, then
    causally over the row's own keys, computed as two attentions merged by log-sum-exp.

    Args:
        q: (R, H, T, D) the rows' queries (rotary applied).
        k, v: (R, Hkv, T, D) the rows' own keys and values; H a multiple of Hkv (query head
            ``j * H/Hkv + i`` reads key/value head ``j``).
        ctx_k, ctx_v: (I, Hkv, L, D) the contexts' cached keys and values, context i's first
            ``ctx_len[i]`` positions real (the rest padding, never read).
        owner: (R,) long, each row's context. ctx_len: (I,) long, >= 1.
        scale: the softmax scale.
    Returns:
        (R, H, T, D) in ``q``'s dtype: what attention over ``cat(context keys, own keys)``
        with the context's padding masked and a causal mask on the row's part gives.
    """
    flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    rows, heads, t, d = q.shape
    hkv = k.shape[1]
    g = heads // hkv
    # each row over its own keys, causally (the output's log-sum-exp for the merge)
    own, own_lse = flash(q, k.repeat_interleave(g, 1), v.repeat_interleave(g, 1), 0.0, True,
                         scale=scale)
    ctx, ctx_lse = torch.empty_like(own), torch.empty_like(own_lse)
    # each context's rows at once: the query heads of one key/value head stacked along the
    # query axis, so the context's keys are read once for all its rows
    for i in owner.unique().tolist():
        sel = (owner == i).nonzero().squeeze(1)
        n, length = len(sel), int(ctx_len[i])
        qi = q[sel].view(n, hkv, g, t, d).permute(1, 0, 2, 3, 4).reshape(1, hkv, n * g * t, d)
        oi, li = flash(qi, ctx_k[i:i + 1, :, :length], ctx_v[i:i + 1, :, :length], 0.0, False,
                       scale=scale)
        ctx[sel] = oi.view(hkv, n, g, t, d).permute(1, 0, 2, 3, 4).reshape(n, heads, t, d)
        ctx_lse[sel] = li.view(hkv, n, g, t).permute(1, 0, 2, 3).reshape(n, heads, t)
    lse = torch.logaddexp(ctx_lse, own_lse)
    out = (ctx.float() * (ctx_lse - lse).exp()[..., None]
           + own.float() * (own_lse - lse).exp()[..., None])
    return out.to(q.dtype)


def rows_logits(model: nn.Module, cache, ids: torch.Tensor, owner: torch.Tensor,
                ctx_len: torch.Tensor) -> torch.Tensor:
    """Logits (R, T, V) of continuation rows ``ids`` (R, T), row r following context
    ``owner[r]`` of the KV ``cache`` (I contexts, right-padded, real lengths ``ctx_len`` (I,)) at
    positions ``ctx_len[owner[r]] + t``: the model's forward with each row on its context's
    cache (to float rounding), without copying the cache (:func:`cascade_attention`). The
    ``cache`` is left as it was. Only where :func:`applies`."""
    lm = base_model(model)
    inner = lm.model
    pos = ctx_len[owner][:, None] + torch.arange(ids.shape[1])[None]
    hs = inner.embed_tokens(ids)
    cos, sin = inner.rotary_emb(hs, pos)
    for li, layer in enumerate(inner.layers):
        at = layer.self_attn
        x = layer.input_layernorm(hs)
        r, t, _ = x.shape
        q, k, v = (proj(x).view(r, t, -1, at.head_dim).transpose(1, 2)
                   for proj in (at.q_proj, at.k_proj, at.v_proj))
        o = cascade_attention(_rotate(q, cos, sin), _rotate(k, cos, sin), v,
                              cache.layers[li].keys, cache.layers[li].values, owner, ctx_len,
                              at.scaling)
        hs = hs + at.o_proj(o.transpose(1, 2).reshape(r, t, -1))
        hs = hs + layer.mlp(layer.post_attention_layernorm(hs))
    return lm.lm_head(inner.norm(hs))
