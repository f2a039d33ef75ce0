"""Teacher-forced scoring of many continuations under one shared context, reusing its KV cache.

The MI collapse monitor asks for log p(z_s | x_j) for every reasoning sample z_s under every
prompt x_j. Prompts are long and reasoning is short, so each prompt is run once and its KV cache is
repeated over a batch of continuations: the cost per (z, x) pair is the continuation's tokens, not
the prompt's. :func:`score_batched` on the CPU, for Llama and Qwen2 models, lets the continuations
attend to the cache without copies of it (:mod:`ragen2.learner.cascade`).
"""

from __future__ import annotations

import copy
from typing import Sequence

import torch

from ragen2.algos import logprobs_from_logits
from ragen2.config import SCORE_TOKENS_CPU
from ragen2.learner import cascade

#: continuation rows of one forward of :func:`score_batched` at most: each holds its own copy of
#: its context's KV cache (:func:`score_continuations` holds one a row of an item, at most the
#: monitor's 64 continuations a context)
SLICE_ROWS = 64

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
    ctx_len = torch.tensor([ctx.shape[1]])
    ctx_mask = torch.ones(1, ctx.shape[1], dtype=torch.bool)
    for start in range(0, b, rows):
        part = continuations[start:start + rows]
        sums.append(_score_rows(model, cache, part, torch.zeros(len(part), dtype=torch.long),
                                first[None], ctx_len, ctx_mask, temperature, device, False))
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


def score_batched(model: torch.nn.Module,
                  items: Sequence[tuple[Sequence[int], Sequence[Sequence[int]]]], *,
                  token_budget: int, temperature: float = 1.0,
                  device: torch.device | str = "cpu") -> list[tuple[torch.Tensor, torch.Tensor]]:
    """:func:`score_continuations` for many items (context, continuations) at once: the contexts
    run several to a forward, the continuations of several contexts share a forward.

    Contexts are packed, shortest first, into forwards of at most ``token_budget`` padded tokens
    (at least one context), padded on the right: under causal attention a real token never sees
    the padding after it, so no mask is needed there. Each context's last real position scores
    its continuations' first tokens. The continuations of a packed batch, in item order, then go
    in row slices of at most ``token_budget`` padded tokens and :data:`SLICE_ROWS` rows, each row
    on a copy of its context's KV cache (``Cache.batch_select_indices``), with the context's
    padding masked and the positions continuing from its real length; on the CPU, for the models
    :func:`ragen2.learner.cascade.applies` to, each context's rows read its cache at once, without
    the copies. The forwards are not collective-safe: every rank must hold the FSDP parameters
    gathered (:func:`ragen2.learner.fsdp.gathered`), since ranks run different numbers of them.

    Args:
        items: I pairs of a context (Lp_i >= 1 ids) and B_i continuations (lists of ids, possibly
            empty: they score 0).
        token_budget: padded tokens per forward, contexts and continuation slices alike (>= 1).
    Returns:
        per item, logp_sum (B_i,) float32 and num_tokens (B_i,) long: equal, to float error, to
        :func:`score_continuations` on the item alone.
    """
    if token_budget < 1:
        raise ValueError(f"token_budget={token_budget}; allowed: >= 1")
    if any(len(ctx) == 0 for ctx, _ in items):
        raise ValueError("score_batched needs a non-empty context in every item")
    out: list[tuple[torch.Tensor, torch.Tensor] | None] = [None] * len(items)
    order = sorted(range(len(items)), key=lambda i: len(items[i][0]))
    for batch in _packs(order, lambda i: len(items[i][0]), token_budget):
        for i, res in zip(batch, _score_pack(model, [items[i] for i in batch], token_budget,
                                             temperature, device)):
            out[i] = res
    return out  # type: ignore[return-value]


def _packs(order: Sequence[int], size, budget: int, most: int = 0) -> list[list[int]]:
    """``order`` cut into consecutive runs whose count x largest ``size`` stays within ``budget``
    and whose count within ``most`` (0: any), at least one each. Example: sizes 3, 3, 4, 9,
    budget 10 -> [[a, b], [c], [d]] (a third row would make 3 x 4 = 12 > 10)."""
    packs: list[list[int]] = []
    cur: list[int] = []
    widest = 0
    for i in order:
        w = max(widest, max(1, size(i)))
        if cur and ((len(cur) + 1) * w > budget or len(cur) == most):
            packs.append(cur)
            cur, w = [], max(1, size(i))
        cur.append(i)
        widest = w
    if cur:
        packs.append(cur)
    return packs


def _right_padded(seqs: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """(n, width) long ids, each sequence padded with 0 on the right (width >= 1), and the (n,)
    lengths."""
    lengths = torch.tensor([len(x) for x in seqs], dtype=torch.long)
    ids = torch.zeros(len(seqs), max([1, *lengths.tolist()]), dtype=torch.long)
    for i, x in enumerate(seqs):
        ids[i, :len(x)] = torch.as_tensor(list(x), dtype=torch.long)
    return ids, lengths


def _score_pack(model: torch.nn.Module,
                items: Sequence[tuple[Sequence[int], Sequence[Sequence[int]]]], token_budget: int,
                temperature: float,
                device: torch.device | str) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """:func:`score_batched` for one pack of contexts (one forward of them)."""
    ctx, ctx_len = _right_padded([c for c, _ in items])
    out = model(input_ids=ctx.to(device), use_cache=True)
    # each context's last real position predicts its continuations' first tokens: (I, V)
    last = (torch.arange(len(items)).to(device), (ctx_len - 1).to(device))
    first = logprobs_all(out.logits[last], temperature)
    cache = out.past_key_values
    del out
    rows = [(b, c) for b, (_, conts) in enumerate(items) for c in conts]
    lengths = torch.tensor([len(c) for _, c in rows], dtype=torch.long)
    owner = torch.tensor([b for b, _ in rows], dtype=torch.long)
    ctx_mask = torch.arange(ctx.shape[1])[None] < ctx_len[:, None]  # (I, Lmax)
    totals = []
    shared = cascade.applies(model, device)
    for part in _packs(range(len(rows)), lambda r: len(rows[r][1]), token_budget, SLICE_ROWS):
        s, e = part[0], part[-1] + 1
        totals.append(_score_rows(model, cache, [rows[r][1] for r in part], owner[s:e], first,
                                  ctx_len, ctx_mask, temperature, device, shared))
    total = torch.cat(totals) if totals else torch.zeros(0)
    res, at = [], 0
    for _, conts in items:
        res.append((total[at:at + len(conts)], lengths[at:at + len(conts)]))
        at += len(conts)
    return res


def _rows_cache(cache, owner: torch.Tensor):
    """A cache of the rows, row k holding a copy of context ``owner[k]``'s keys and values;
    ``cache`` stays as it was. Its layers are copied shallowly (sharing the contexts' tensors)
    and each indexes its own: what a deep copy of every context's cache, then the same index,
    gave, without copying the contexts first."""
    rows = copy.copy(cache)
    rows.layers = [copy.copy(layer) for layer in cache.layers]
    rows.batch_select_indices(owner)
    return rows


def _score_rows(model: torch.nn.Module, cache, part: Sequence[Sequence[int]],
                owner: torch.Tensor, first: torch.Tensor, ctx_len: torch.Tensor,
                ctx_mask: torch.Tensor, temperature: float, device: torch.device | str,
                shared: bool) -> torch.Tensor:
    """Summed logprobs (r,) of one slice of continuations, row k under context ``owner[k]``:
    ``first`` (I, V) its first token's log-probs, ``cache`` the I contexts' KV cache (each row
    gets a copy of its context's, ``cache`` is left as it was), ``ctx_len`` (I,) and
    ``ctx_mask`` (I, Lmax) their real lengths and positions. ``shared``: the rows attend to
    their contexts' cache without copies of it (:mod:`ragen2.learner.cascade`, where
    :func:`~ragen2.learner.cascade.applies`; the same logprobs to float rounding), else through
    the model's forward."""
    ids, lengths = _right_padded(part)
    width = ids.shape[1]
    mask = torch.arange(width)[None] < lengths[:, None]
    ids, mask_d, owner_d = ids.to(device), mask.to(device), owner.to(device)
    total = first[owner_d, ids[:, 0]] * mask_d[:, 0]
    if width > 1:
        if shared:  # no copy of the contexts' caches (CPU)
            logits = cascade.rows_logits(model, cache, ids[:, :-1], owner, ctx_len)
        else:
            rows_cache = _rows_cache(cache, owner_d)  # (r, ...): row k's context
            attn = torch.cat([ctx_mask[owner], mask[:, :-1]], dim=1).long().to(device)
            pos = (ctx_len[owner][:, None] + torch.arange(width - 1)[None]).to(device)
            logits = model(input_ids=ids[:, :-1], attention_mask=attn, position_ids=pos,
                           past_key_values=rows_cache, use_cache=False).logits
        # continuation position t >= 1 is predicted by position t - 1
        lp = logprobs_from_logits(logits, ids[:, 1:], temperature) * mask_d[:, 1:]
        total = total + lp.sum(1)
    return total.float().cpu()
