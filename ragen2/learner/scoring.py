"""Teacher-forced scoring of many continuations under one shared context, reusing its KV cache.

The MI collapse monitor asks for log p(z_s | x_j) for every reasoning sample z_s under every
prompt x_j. Prompts are long and reasoning is short, so each prompt is run once and its KV cache is
repeated over a batch of continuations: the cost per (z, x) pair is the continuation's tokens, not
the prompt's.
"""

from __future__ import annotations

from typing import Sequence

import torch

from ragen2.algos import logprobs_from_logits


def score_continuations(model: torch.nn.Module, context: Sequence[int],
                        continuations: Sequence[Sequence[int]], *, temperature: float = 1.0,
                        device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """Summed log p(continuation | context) and token counts, one forward of the context.

    Args:
        context: (Lp,) token ids, Lp >= 1.
        continuations: B lists of token ids (may differ in length; empty ones score 0).
    Returns:
        logp_sum (B,) float32 and num_tokens (B,) long. Equal (to float error) to scoring each
        ``context + continuation`` as one sequence with :func:`logprobs_from_logits`.
    """
    if len(context) == 0:
        raise ValueError("score_continuations needs a non-empty context")
    b = len(continuations)
    lengths = torch.tensor([len(c) for c in continuations], dtype=torch.long)
    if b == 0:
        return torch.zeros(0), lengths
    width = max(1, int(lengths.max()))
    ids = torch.zeros(b, width, dtype=torch.long)
    for i, c in enumerate(continuations):
        ids[i, :len(c)] = torch.as_tensor(list(c), dtype=torch.long)
    ids = ids.to(device)
    cont_mask = (torch.arange(width)[None] < lengths[:, None]).to(device)
    ctx = torch.as_tensor(list(context), dtype=torch.long, device=device)[None]

    out = model(input_ids=ctx, use_cache=True)
    cache = out.past_key_values
    cache.batch_repeat_interleave(b)
    attn = torch.cat([torch.ones(b, ctx.shape[1], dtype=torch.long, device=device),
                      cont_mask.long()], dim=1)
    cont_logits = model(input_ids=ids, attention_mask=attn, past_key_values=cache,
                        use_cache=False).logits
    # position t of the continuation is predicted by the context's last logits (t = 0) or by
    # continuation position t - 1
    logits = torch.cat([out.logits[:, -1:].expand(b, 1, -1), cont_logits[:, :-1]], dim=1)
    lp = logprobs_from_logits(logits, ids, temperature) * cont_mask
    return lp.sum(1).float().cpu(), lengths
