"""Would a shared-context ("cascade") attention pay for the MI scorer? A probe for issue 44's next
cut, not a setting: ragen2's scorer is unchanged.

The later-turn probe panel is the largest instrument of the default job: every sampled reasoning
scored under every panel prompt (32 contexts of ~430 tokens x ~127 continuations of ~31). Today's
scorer (:mod:`ragen2.learner.scoring`) gives each continuation row its own copy of its context's
KV cache (``batch_select_indices``), appends the row's keys to it (the cache's ``cat``),
repeats the grouped keys and values per query head (``repeat_kv``) and runs SDPA with a padding
mask: profiled on a panel call dumped from a real job (2026-12-07), about a third of the call
copies keys and values.

The cascade computes the same attention without the copies. Per decoder layer, for each context,
the queries of all its rows attend over the context's cached keys and values at once (the query
heads of one key/value head stacked along the query axis, no mask, the keys cut to the context's
real length), and each row attends causally over its own keys; the two are merged by their
log-sum-exps (``torch.ops.aten._scaled_dot_product_flash_attention_for_cpu`` returns both). The
layers are forwarded by hand with the model's own modules (Llama / Qwen2 names): the probe runs
only such models, which is one of the things a landed version would have to check.

One process, one thread (what a learner rank gets), the default job's model in the dtype
``model.dtype=auto`` picks, random token ids shaped like the panel call; the scorer and the
cascade alternate, each the median of ``repeats`` calls of ``score_batched`` at the CPU's token
budget (``monitor.score_tokens`` null). Reported: the medians, cascade / today, and the largest
difference of the summed logprobs (float rounding only if both compute the same function).

Usage::

    python benchmarks/scorer_cascade.py            # ~1 min on 2 cores
    python benchmarks/scorer_cascade.py --quick

Writes ``benchmarks/results/scorer_cascade[.quick].json``. Run nothing else meanwhile.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import common  # noqa: E402

FULL = {"contexts": 32, "ctx_len": [400, 470], "continuations": 127, "cont_len": [20, 40],
        "repeats": 3}
QUICK = {"contexts": 8, "ctx_len": [200, 260], "continuations": 32, "cont_len": [10, 20],
         "repeats": 1}


def cascade_attention(q: Any, k: Any, v: Any, kc: Any, vc: Any, owner: Any, ctx_len: Any,
                      scale: float) -> Any:
    """Row r's queries ``q`` (R, H, T, D) over context ``owner[r]``'s cached ``kc``, ``vc``
    (I, H_kv, L, D; its first ``ctx_len`` positions real) and, causally, over its own ``k``, ``v``
    (R, H_kv, T, D): (R, H, T, D), merged by log-sum-exp."""
    import torch

    flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    _, h, t, d = q.shape
    hkv = k.shape[1]
    g = h // hkv  # query head j * g + i reads key/value head j (transformers' repeat_kv)
    o2, l2 = flash(q, k.repeat_interleave(g, 1), v.repeat_interleave(g, 1), 0.0, True, scale=scale)
    o1, l1 = torch.empty_like(o2), torch.empty_like(l2)
    for i in owner.unique().tolist():
        rows = (owner == i).nonzero().squeeze(1)
        n, length = len(rows), int(ctx_len[i])
        qi = q[rows].view(n, hkv, g, t, d).permute(1, 0, 2, 3, 4).reshape(1, hkv, n * g * t, d)
        oi, li = flash(qi, kc[i:i + 1, :, :length], vc[i:i + 1, :, :length], 0.0, False,
                       scale=scale)
        o1[rows] = oi.view(hkv, n, g, t, d).permute(1, 0, 2, 3, 4).reshape(n, h, t, d)
        l1[rows] = li.view(hkv, n, g, t).permute(1, 0, 2, 3).reshape(n, h, t)
    lse = torch.logaddexp(l1, l2)
    out = o1.float() * (l1 - lse).exp()[..., None] + o2.float() * (l2 - lse).exp()[..., None]
    return out.to(q.dtype)


def cascade_score_rows(model: Any, cache: Any, part: Any, owner: Any, first: Any, ctx_len: Any,
                       ctx_mask: Any, temperature: float, device: Any) -> Any:
    """``ragen2.learner.scoring._score_rows`` by the cascade (same arguments and result)."""
    import torch
    from transformers.models.qwen2.modeling_qwen2 import apply_rotary_pos_emb

    from ragen2.algos import logprobs_from_logits
    from ragen2.learner.scoring import _right_padded

    ids, lengths = _right_padded(part)
    width = ids.shape[1]
    mask = torch.arange(width)[None] < lengths[:, None]
    total = first[owner, ids[:, 0]] * mask[:, 0]
    if width > 1:
        inner = model.model
        pos = ctx_len[owner][:, None] + torch.arange(width - 1)[None]
        hs = inner.embed_tokens(ids[:, :-1])
        cos, sin = inner.rotary_emb(hs, pos)
        for li, layer in enumerate(inner.layers):
            at = layer.self_attn
            x = layer.input_layernorm(hs)
            b, t, _ = x.shape
            q, k, v = (proj(x).view(b, t, -1, at.head_dim).transpose(1, 2)
                       for proj in (at.q_proj, at.k_proj, at.v_proj))
            q, k = apply_rotary_pos_emb(q, k, cos, sin)
            o = cascade_attention(q, k, v, cache.layers[li].keys, cache.layers[li].values, owner,
                                  ctx_len, at.scaling)
            hs = hs + at.o_proj(o.transpose(1, 2).reshape(b, t, -1))
            hs = hs + layer.mlp(layer.post_attention_layernorm(hs))
        logits = model.lm_head(inner.norm(hs))
        total = total + (logprobs_from_logits(logits, ids[:, 1:], temperature) * mask[:, 1:]).sum(1)
    return total.float().cpu()


def panel_items(rng: np.random.Generator, s: dict, vocab: int,
                ) -> list[tuple[list[int], list[list[int]]]]:
    """Every continuation under every context, as the later-turn panel scores them."""
    conts = [rng.integers(3, vocab, rng.integers(*s["cont_len"], endpoint=True)).tolist()
             for _ in range(s["continuations"])]
    return [(rng.integers(3, vocab, rng.integers(*s["ctx_len"], endpoint=True)).tolist(), conts)
            for _ in range(s["contexts"])]


def main() -> None:
    args = common.parse_args(__doc__)
    s = QUICK if args.quick else FULL
    import torch

    import ragen2.learner.scoring as scoring
    from ragen2.config import SCORE_TOKENS_CPU

    model, dtype, _ = common.rank_model()
    model.eval()
    items = panel_items(np.random.default_rng(0), s, model.config.vocab_size)
    today = scoring._score_rows
    sides = {"today": today, "cascade": cascade_score_rows}
    times: dict[str, list[float]] = {k: [] for k in sides}
    sums: dict[str, Any] = {}
    try:
        with torch.no_grad():
            for _ in range(s["repeats"] + 1):  # the first round warms up, untimed
                for name, rows_fn in sides.items():
                    scoring._score_rows = rows_fn
                    t0 = time.perf_counter()
                    out = scoring.score_batched(model, items, token_budget=SCORE_TOKENS_CPU)
                    times[name].append(time.perf_counter() - t0)
                    sums[name] = torch.cat([lp for lp, _ in out])
    finally:
        scoring._score_rows = today
    tokens = torch.cat([n for _, n in out]).clamp(min=1)
    diff = (sums["cascade"] - sums["today"]).abs()
    med = {k: common.median(v[1:]) for k, v in times.items()}
    settings = {**s, "dtype": dtype, "threads": 1, "token_budget": SCORE_TOKENS_CPU,
                "commit": common.git_commit()}
    results = {"today_s": med["today"], "cascade_s": med["cascade"], "times": times,
               "pairs": int(len(diff)), "max_abs_logp_diff": float(diff.max()),
               "max_abs_logp_diff_per_token": float((diff / tokens).max()),
               "mean_abs_logp": float(sums["today"].abs().mean())}
    common.write_result("scorer_cascade", args, settings, results,
                        {"cascade_over_today": med["cascade"] / med["today"]},
                        {"cascade_over_today": "lower"})


if __name__ == "__main__":
    main()
