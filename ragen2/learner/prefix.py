"""Shared-prefix forward: the prompt a group's rollouts share is run once per micro-batch.

GRPO samples ``group_size`` responses to the same prompt, so the rows of a group begin with the
same tokens: the system prompt and the first observation, often most of a single-turn row.
Forwarding every row in full computes those tokens' hidden states once per row. Here each distinct
prefix is forwarded once (with autograd), its key/value cache is indexed out to the rows that share
it, and only the rows' own tokens (the *suffixes*) are forwarded on top. Causal attention makes
the result the same function of the weights: logprobs and gradients equal the full forward's to
float rounding (``tests/learner/test_prefix.py``); the prefix's gradient collects the sum over its
rows through the index.

A row's prefix is everything before the position that predicts its first trained token
(``loss_mask``), so every logit the loss reads comes from the suffix pass. Rows are grouped by the
exact prefix tokens (not by ``group_ids``): different prompts are never mixed up.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Callable

import torch
from torch import Tensor
from transformers.cache_utils import Cache, DynamicLayer


@dataclass
class PrefixPlan:
    """How one micro-batch of B right-padded rows splits into G shared prefixes and B suffixes."""

    group: Tensor  # (B,) long: the prefix of each row
    prefix_ids: Tensor  # (G, P) right-padded
    prefix_attn: Tensor  # (G, P)
    suffix_ids: Tensor  # (B, S) right-padded: ids[b, offset[b]:length[b]]
    suffix_attn: Tensor  # (B, S)
    offset: Tensor  # (B,) long: the prefix length of each row (suffix b starts at this position)

    def to(self, move: Callable[[Tensor], Tensor]) -> PrefixPlan:
        """The plan with ``move`` applied to every tensor (e.g. from the host to a device)."""
        return PrefixPlan(*(move(getattr(self, f.name)) for f in fields(self)))


def plan_shared_prefix(ids: Tensor, attn: Tensor, mask: Tensor, min_saving: float = 0.2,
                       ) -> PrefixPlan | None:
    """Group rows by their prefix; None when that saves less than ``min_saving`` of the tokens.

    Args:
        ids, attn, mask: (B, T) right-padded token ids, attention mask and loss mask.
        min_saving: the fraction of padded tokens (``B x T`` for the full forward, ``G x P + B x S``
            shared) the split must save to be used (the two-pass forward has a fixed cost too);
            ``-inf`` forces a plan whenever one is possible.
    Returns:
        the plan, or None (a row trained from position 1 has no prefix; or too little is shared).
    """
    b, t = ids.shape
    lengths = attn.sum(1)
    trained = mask[:, 1:].bool() & attn[:, 1:].bool()
    has = trained.any(1)
    first = torch.where(has, trained.float().argmax(1) + 1, lengths - 1)  # rows with no loss: 1 token
    offset = (first - 1).clamp(min=0)
    if int(offset.min()) == 0:  # a row trained from position 1 has no prefix to share
        return None
    rows, offsets = ids.cpu().numpy(), offset.tolist()  # one device-to-host copy
    keys: dict[bytes, int] = {}
    group = [keys.setdefault(rows[i, :offsets[i]].tobytes(), len(keys)) for i in range(b)]
    n_groups = len(keys)
    suffix_len = lengths - offset
    p, s = int(offset.max()), int(suffix_len.max())
    if n_groups * p + b * s > (1 - min_saving) * b * t:
        return None
    g = torch.tensor(group, device=ids.device)
    first_row: dict[int, int] = {}
    for i, k in enumerate(group):
        first_row.setdefault(k, i)
    leader = torch.tensor([first_row[k] for k in range(n_groups)], device=ids.device)
    cols = torch.arange(p, device=ids.device)
    prefix_attn = (cols[None] < offset[leader][:, None]).to(attn.dtype)
    prefix_ids = ids[leader, :p] * prefix_attn
    scols = torch.arange(s, device=ids.device)
    suffix_attn = (scols[None] < suffix_len[:, None]).to(attn.dtype)
    src = (offset[:, None] + scols[None]).clamp(max=t - 1)
    suffix_ids = ids.gather(1, src) * suffix_attn
    return PrefixPlan(g, prefix_ids, prefix_attn, suffix_ids, suffix_attn, offset)


class _RecordLayer(DynamicLayer):
    """The prefix pass's cache layer: holds the keys/values of its one call, replacing (not
    appending to) what it held, so that activation checkpointing's recomputation in the backward
    sees the same shapes as the forward."""

    def update(self, key_states: Tensor, value_states: Tensor, *args: object,
               **kwargs: object) -> tuple[Tensor, Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        self.keys, self.values = key_states, value_states
        return key_states, value_states


class _FrozenLayer(DynamicLayer):
    """The suffix pass's cache layer: the rows' prefix keys/values, read but never extended
    (``update`` returns prefix + new without storing: recomputation-safe, as above)."""

    def __init__(self, keys: Tensor, values: Tensor) -> None:
        super().__init__()
        self.lazy_initialization(keys, values)
        self.keys, self.values = keys, values

    def update(self, key_states: Tensor, value_states: Tensor, *args: object,
               **kwargs: object) -> tuple[Tensor, Tensor]:
        return (torch.cat([self.keys, key_states], dim=-2),
                torch.cat([self.values, value_states], dim=-2))


def shared_prefix_logits(model: torch.nn.Module, plan: PrefixPlan, logits_to_keep: bool) -> Tensor:
    """Logits (B, S - 1, V) of the suffix positions 0 .. S - 2 of every row.

    Column j of row b predicts ``ids[b, offset[b] + 1 + j]``. ``model`` is an HF causal LM (the
    root module, so FSDP's hooks run); ``logits_to_keep``: whether its forward takes that argument
    (the prefix pass needs no logits). Under FSDP2 with autograd, call it inside
    :func:`ragen2.learner.fsdp.gathered`: the backward reaches the prefix pass's layers through
    the cache, past the hooks that would gather their parameters again.
    """
    kwargs = {"logits_to_keep": 1} if logits_to_keep else {}
    past = Cache(layer_class_to_replicate=_RecordLayer)
    model(input_ids=plan.prefix_ids, attention_mask=plan.prefix_attn, past_key_values=past,
          use_cache=True, **kwargs)
    cache = Cache(layers=[_FrozenLayer(layer.keys.index_select(0, plan.group),
                                       layer.values.index_select(0, plan.group))
                          for layer in past.layers])
    s = plan.suffix_ids.shape[1]
    attn = torch.cat([plan.prefix_attn.index_select(0, plan.group), plan.suffix_attn], dim=1)
    positions = plan.offset[:, None] + torch.arange(s, device=plan.offset.device)[None]
    out = model(input_ids=plan.suffix_ids, attention_mask=attn, position_ids=positions,
                past_key_values=cache, use_cache=False)
    return out.logits[:, :-1]


def to_positions(x: Tensor, offset: Tensor, width: int) -> Tensor:
    """Place suffix values at their row positions.

    Args:
        x: (B, S') where column j of row b belongs to position ``offset[b] + 1 + j``.
        offset: (B,) long.
        width: T, the full row width.
    Returns:
        (B, T): ``x`` at those positions, 0 elsewhere (differentiable in ``x``).
    """
    cols = torch.arange(width, device=x.device)[None] - offset[:, None] - 1  # (B, T)
    valid = (cols >= 0) & (cols < x.shape[1])
    got = x.gather(1, cols.clamp(0, max(x.shape[1] - 1, 0)))
    return torch.where(valid, got, torch.zeros_like(got))
