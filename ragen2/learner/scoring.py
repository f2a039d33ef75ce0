"""Teacher-forced scoring of many continuations under one shared context, reusing its KV cache.

The MI collapse monitor asks for log p(z_s | x_j) for every reasoning sample z_s under every
prompt x_j. Prompts are long and reasoning is short, so each prompt is run once and its KV cache is
repeated over a batch of continuations: the cost per (z, x) pair is the continuation's tokens, not
the prompt's.
"""

from __future__ import annotations

import copy
from typing import Sequence

import torch

from ragen2.algos import logprobs_from_logits
from ragen2.config import SCORE_TOKENS_CPU

#: share of the device's memory the free-memory budget leaves untouched (the forward's smaller
#: transients, the allocator's fragmentation, what the estimate does not count)
SCORE_MARGIN = 0.10


def slice_budget(score_tokens: int | None, width: int, rows: int, *, per_token: int,
                 per_row: int, free: int | None, total: int = 0, reserve: int = 0,
                 margin: float = SCORE_MARGIN) -> int:
    """The scorer's ``token_budget`` (padded continuation tokens per forward, 0 = every row at
    once) for one item: ``rows`` continuations, the longest ``width`` tokens.

    ``score_tokens`` (``monitor.score_tokens``) set: that budget, on every device. Null: off CUDA
    (``free`` None) :data:`~ragen2.config.SCORE_TOKENS_CPU` (2048); on a GPU, sized to its
    free memory: the room is ``free - reserve - margin x total`` (``free``: what
    ``torch.cuda.mem_get_info`` reports plus what this process's allocator holds unused;
    ``reserve``: what an engine beside it may still allocate,
    :func:`ragen2.cluster.memory.scorer_reserve_bytes`). Every row at once when ``rows x (width x
    per_token + per_row)`` fits in it (0: unsliced), else as many rows a slice as fit, at least
    one (``width`` tokens each). ``per_token`` and ``per_row`` (its copy of the context's cache):
    :meth:`ragen2.cluster.shapes.ModelShape.scorer_bytes_per_token` and ``_per_row``.

    Example: rows 64, width 400, 60 kB a token, 4 MB a row (28 MB): 1.8 GB holds them all (0);
    1 GB holds 35 rows a slice (14,000 tokens).
    """
    if score_tokens:
        return int(score_tokens)
    if free is None:
        return SCORE_TOKENS_CPU
    width, rows = max(1, width), max(1, rows)
    room = free - reserve - margin * total
    per_slice_row = width * per_token + per_row
    if room >= rows * per_slice_row:
        return 0
    return max(1, int(room // max(1, per_slice_row))) * width


def device_memory(device: torch.device | str) -> tuple[int, int] | None:
    """(free, total) bytes of a CUDA device for this process: ``torch.cuda.mem_get_info``'s free
    memory plus what this process's caching allocator holds unused (it can reuse that); None off
    CUDA."""
    device = torch.device(device)
    if device.type != "cuda":
        return None
    free, total = torch.cuda.mem_get_info(device)
    return free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device), total


def forward_count(lengths: Sequence[int], token_budget: int = 0) -> int:
    """The forwards :func:`score_continuations` runs for continuations of these ``lengths``: one
    for the context, plus one per row slice whose longest continuation has >= 2 tokens (a
    continuation's first token is scored from the context's last position); 0 without any.

    Example: lengths [3, 1, 5, 0], budget 10 -> width 5, 2 rows a slice: slices [3, 1] and
    [5, 0] -> 1 + 2 = 3; budget 0 (one slice) -> 2; lengths [1, 0] -> 1.
    """
    b = len(lengths)
    if b == 0:
        return 0
    width = max(1, max(lengths))
    rows = b if token_budget <= 0 else max(1, min(b, token_budget // width))
    return 1 + sum(1 for s in range(0, b, rows) if max(lengths[s:s + rows]) > 1)


def score_continuations(model: torch.nn.Module, context: Sequence[int],
                        continuations: Sequence[Sequence[int]], *, temperature: float = 1.0,
                        device: torch.device | str = "cpu", token_budget: int = 0,
                        forwards: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed log p(continuation | context) and token counts, one forward of the context.

    The continuations are scored in row slices of at most ``token_budget`` padded tokens (at
    least one row; 0 = all rows at once), each slice on its own copy of the context's KV cache,
    so the logits held at once are ``(rows, width, V)`` with ``rows x width <= token_budget``,
    never ``(B, width, V)``: at a 151,936-token vocabulary, 64 continuations x 400 tokens would be
    ~16 GB per fp32 copy of the logits. Peak: ``token_budget x V x (b + 8)`` bytes (the logits in
    the model's dtype ``b``, their fp32 upcast and its log-softmax), measured on the CPU by
    ``benchmarks/scorer_memory.py``.

    Args:
        context: (Lp,) token ids, Lp >= 1.
        continuations: B lists of token ids (may differ in length; empty ones score 0).
        token_budget: padded continuation tokens per forward (``monitor.score_tokens``).
        forwards: run at least this many forwards, padding with one-token forwards whose output
            is discarded (0: just :func:`forward_count`). Under FSDP every forward is collective,
            so ranks scoring different work must run the same number of them.
    Returns:
        logp_sum (B,) float32 and num_tokens (B,) long. Equal (to float error) to scoring each
        ``context + continuation`` as one sequence with :func:`logprobs_from_logits`.
    """
    if len(context) == 0:
        raise ValueError("score_continuations needs a non-empty context")
    b = len(continuations)
    lengths = torch.tensor([len(c) for c in continuations], dtype=torch.long)
    planned = forward_count(lengths.tolist(), token_budget)
    if forwards and forwards < planned:
        raise ValueError(f"forwards={forwards} is below the {planned} forwards these "
                         "continuations need; allowed: 0 or >= that")
    if b == 0:
        _pad_forwards(model, context, forwards, device)
        return torch.zeros(0), lengths
    width = max(1, int(lengths.max()))
    rows = b if token_budget <= 0 else max(1, min(b, token_budget // width))
    ctx = torch.as_tensor(list(context), dtype=torch.long, device=device)[None]

    out = model(input_ids=ctx, use_cache=True)
    # the context's last position predicts every continuation's first token: (V,) log-probs
    first = logprobs_all(out.logits[0, -1], temperature)
    cache = out.past_key_values
    del out
    sums = []
    for start in range(0, b, rows):
        part = continuations[start:start + rows]
        n = lengths[start:start + rows]
        last = start + rows >= b
        sums.append(_score_slice(model, cache if last else copy.deepcopy(cache), ctx.shape[1],
                                 part, n, first, temperature, device))
    _pad_forwards(model, context, forwards - planned, device)
    return torch.cat(sums), lengths


def _pad_forwards(model: torch.nn.Module, context: Sequence[int], n: int,
                  device: torch.device | str) -> None:
    """``n`` forwards of the context's first token (results discarded): a rank's share of the
    collectives when it has less to score than another."""
    ids = torch.as_tensor(list(context)[:1], dtype=torch.long, device=device)[None]
    for _ in range(max(0, n)):
        model(input_ids=ids, use_cache=False)


def logprobs_all(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """log_softmax(logits / T) over the last axis, in fp32."""
    z = logits.float()
    return torch.log_softmax(z / temperature if temperature != 1.0 else z, dim=-1)


def _score_slice(model: torch.nn.Module, cache, ctx_len: int, part: Sequence[Sequence[int]],
                 lengths: torch.Tensor, first: torch.Tensor, temperature: float,
                 device: torch.device | str) -> torch.Tensor:
    """Summed logprobs (r,) of one slice of continuations on its copy of the context cache."""
    r, width = len(part), max(1, int(lengths.max()))
    ids = torch.zeros(r, width, dtype=torch.long)
    for i, c in enumerate(part):
        ids[i, :len(c)] = torch.as_tensor(list(c), dtype=torch.long)
    ids = ids.to(device)
    mask = (torch.arange(width)[None] < lengths[:, None]).to(device)
    cache.batch_repeat_interleave(r)
    attn = torch.cat([torch.ones(r, ctx_len, dtype=torch.long, device=device), mask.long()], dim=1)
    total = first[ids[:, 0]] * mask[:, 0]
    if width > 1:
        logits = model(input_ids=ids[:, :-1], attention_mask=attn[:, :-1], past_key_values=cache,
                       use_cache=False).logits
        # continuation position t >= 1 is predicted by position t - 1
        lp = logprobs_from_logits(logits, ids[:, 1:], temperature) * mask[:, 1:]
        total = total + lp.sum(1)
    return total.float().cpu()
