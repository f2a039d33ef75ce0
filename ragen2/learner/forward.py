"""The learner's forward pass and its micro-batching: which rows a rank runs, and their logprobs.

Every rank receives the whole batch (numpy, zero-copy from the object store) and works on its rows
of each mini-batch, cut into micro-batches of ``algorithm.micro_batch_size`` rows or of at most
``learner.micro_batch_tokens`` padded tokens; ranks always run the same number of forward/backward
passes (short ranks get all-masked dummy rows) because FSDP's collectives must match. The forward
computes logits from the first trained position on only, or shares the rows' common prompts
(``learner.shared_prefix``, :mod:`ragen2.learner.prefix`).

Functions here take the rank's state (:class:`~ragen2.learner.rank_state.RankState`) for its device,
world, models and settings.
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from ragen2.algos import logprobs_and_entropy, logprobs_from_logits
from ragen2.batch import TrainingBatch
from ragen2.learner.fsdp import gathered
from ragen2.learner.lora import adapter_dropout
from ragen2.learner.microbatch import plan_token_micro_batches
from ragen2.learner.prefix import PrefixPlan, plan_shared_prefix, shared_prefix_logits, to_positions
from ragen2.learner.rank_state import RankState


@dataclass
class Rows:
    """This rank's rows of one mini-batch, padded to the same count on every rank."""

    index: np.ndarray  # row ids into the full batch
    real: np.ndarray  # False for dummy rows (loss mask zeroed)


def first_trained_position(mask: torch.Tensor) -> int:
    """The first column t >= 1 of ``mask`` (B, T) where any row is set; T - 1 if none is.

    Column 0 is never trained (no token predicts it), and a micro-batch of dummy rows still needs
    one position for a (zero) loss.
    """
    cols = torch.nonzero(mask[:, 1:].any(0)).flatten()
    return 1 + int(cols[0]) if cols.numel() else mask.shape[1] - 1


def accepts_logits_to_keep(model: torch.nn.Module) -> bool:
    """Whether an HF causal LM's ``forward`` takes ``logits_to_keep`` (transformers >= 4.50 models
    do; a remote-code model may not, and then its logits are sliced after the LM head)."""
    import inspect

    return "logits_to_keep" in inspect.signature(type(model).forward).parameters


def rank_rows(rank: RankState, mb: np.ndarray) -> Rows:
    """This rank's contiguous share of mini-batch ``mb`` (a group's rows stay together where
    they can), padded with dummy rows to the same count on every rank."""
    per_rank = -(-len(mb) // rank.world_size)
    mine = mb[rank.rank * per_rank:(rank.rank + 1) * per_rank]
    pad = per_rank - len(mine)
    index = np.concatenate([mine, np.full(pad, mb[0], dtype=mb.dtype)])
    return Rows(index, np.arange(per_rank) < len(mine))


def host_tensors(batch: TrainingBatch, rows: Rows, *fields: str) -> list[torch.Tensor]:
    """The batch's (N, L) ``fields`` at ``rows`` as CPU tensors: right padding trimmed to the
    longest row, the loss mask of dummy rows zeroed."""
    width = int(batch.attention_mask[rows.index].sum(1).max())
    out = []
    for name in fields:
        t = torch.from_numpy(np.ascontiguousarray(getattr(batch, name)[rows.index, :width]))
        if name == "loss_mask":
            t = t * torch.from_numpy(rows.real).unsqueeze(1).to(t.dtype)
        out.append(t)
    return out


def to_device(rank: RankState, t: torch.Tensor) -> torch.Tensor:
    """A host tensor on the rank's device. On CUDA through pinned memory and without blocking:
    a blocking copy from pageable memory synchronises the stream, which would drain the queued
    forward and backward passes once per micro-batch."""
    if rank.device.type != "cuda":
        return t.to(rank.device)
    return t.pin_memory().to(rank.device, non_blocking=True)


def tensors(rank: RankState, batch: TrainingBatch, rows: Rows, *fields: str) -> list[torch.Tensor]:
    """:func:`host_tensors` on the rank's device."""
    return [to_device(rank, t) for t in host_tensors(batch, rows, *fields)]


@dataclass(frozen=True)
class MaskFacts:
    """What a forward needs to know about a micro-batch's masks, read on the host (from the
    batch's arrays), so that the device is never asked for it mid-update (a read of a device
    value waits for every queued kernel).

    first:   the first trained column (:func:`first_trained_position`).
    trained: the (row, column) pairs with t >= 1 where the loss mask and the attention mask are
             both set: the tokens whose entropy the forward computes.
    gapped:  whether a row's attention mask has a hole (a 0 before a 1). Only then does the model
             get the attention mask. Rows padded on the right need none: under causal attention a
             real token never attends to a later (padding) one, so its logits are the same, and
             the padding positions' outputs reach no loss (they are masked). Without a mask, HF's
             SDPA attention runs causal, which skips the blocks above the diagonal (about half of
             the attention of the long multi-turn rows) and builds no (B, 1, T, T) mask; an
             all-ones mask would also be read back from the device to be skipped.
    """

    first: int
    trained: int
    gapped: bool

    @classmethod
    def of(cls, mask: torch.Tensor, attn: torch.Tensor) -> MaskFacts:
        """From the (B, T) host loss mask and attention mask."""
        trained = int(((mask[:, 1:] != 0) & (attn[:, 1:] != 0)).sum())
        real = attn != 0
        # a hole: a real token after a padding one (right padding: each row non-increasing)
        gapped = bool((real[:, 1:] & ~real[:, :-1]).any())
        return cls(first_trained_position(mask), trained, gapped)


def scales(batch: TrainingBatch, rows: Rows) -> torch.Tensor | None:
    """(B,) temperature factors of the rows, or None (all 1)."""
    if batch.temperature_scales is None:
        return None
    return torch.from_numpy(np.asarray(batch.temperature_scales, np.float32)[rows.index])


def micro_batches(rank: RankState, batch: TrainingBatch, mb: np.ndarray) -> list[Rows]:
    """This rank's micro-batches of mini-batch ``mb`` (row ids); the same count on every rank.

    ``learner.micro_batch_tokens > 0``: at most that many padded tokens each
    (:func:`plan_token_micro_batches`); otherwise ``algorithm.micro_batch_size`` rows each.
    """
    budget = rank.cfg.learner.micro_batch_tokens
    if budget <= 0:
        rows, m = rank_rows(rank, mb), rank.cfg.algorithm.micro_batch_size
        return [Rows(rows.index[i:i + m], rows.real[i:i + m]) for i in range(0, len(rows.index), m)]
    lengths = batch.attention_mask[mb].sum(1).tolist()
    groups = plan_token_micro_batches(lengths, rank.world_size, budget)[rank.rank]
    dummy = mb[[int(np.argmin(lengths))]]  # the shortest row, loss mask zeroed
    return [Rows(mb[g], np.ones(len(g), bool)) if g else Rows(dummy, np.zeros(1, bool))
            for g in groups]


def forward(rank: RankState, model: torch.nn.Module, ids: torch.Tensor, attn: torch.Tensor,
            mask: torch.Tensor, row_scales: torch.Tensor | None = None, *, entropy: bool = False,
            entropy_grad: bool = False, plan: PrefixPlan | None = None,
            facts: MaskFacts | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-token logprobs (B, T) of ``ids[:, t]`` given ``ids[:, :t]``, and with ``entropy``
    the entropy (B, T) at the tokens of ``mask`` (else None).

    ``mask`` (B, T) marks the tokens a loss reads; only their logprobs are guaranteed: a row
    reads 0 before its first trained token, whose prompt logits are never computed (over a
    long prompt and a large vocabulary the LM head and the log-softmax are a large share of an
    update). With a ``plan`` (:func:`prefix_plan`) the rows' common prompts are forwarded
    once (:mod:`ragen2.learner.prefix`); with autograd, inside :func:`holding` or
    :func:`between_steps`. ``row_scales`` (B,) multiplies the sampling temperature per row
    (rows sampled hotter). ``entropy_grad``: whether the entropy is part of a loss (else a
    metric, computed without autograd).
    ``facts``: the masks' :class:`MaskFacts`, read on the host (else read from the device).
    """
    temperature = rank.settings.temperature
    b, t = ids.shape
    if plan is not None:
        logits = shared_prefix_logits(model, plan, rank.logits_to_keep)
        labels, valid, offset = plan.suffix_ids[:, 1:], plan.suffix_attn[:, 1:], plan.offset
    else:  # one forward, logits from the first trained position on
        first = facts.first if facts is not None else first_trained_position(mask)
        keep = t - first + 1  # logits at positions first-1 .. T-1 (the last is unused)
        kwargs = {"logits_to_keep": keep} if rank.logits_to_keep else {}
        if facts is None or facts.gapped:  # (right padding: the same causal attention)
            kwargs["attention_mask"] = attn
        logits = model(input_ids=ids, use_cache=False, **kwargs).logits
        logits = logits[:, -keep:-1]
        labels, valid = ids[:, first:], attn[:, first:]
        offset = torch.full((b,), first - 1, dtype=torch.long, device=ids.device)
    if row_scales is not None and bool((row_scales != 1).any()):  # (host tensor)
        logits = logits / to_device(rank, row_scales).to(logits.dtype)[:, None, None]
    if not entropy:
        lp = logprobs_from_logits(logits, labels, temperature)
        return to_positions(lp, offset, t), None
    cols = offset[:, None] + 1 + torch.arange(labels.shape[1], device=ids.device)[None]
    emask = mask.gather(1, cols.clamp(max=t - 1)) * valid  # the loss mask, in label columns
    # emask's set entries are the trained tokens of the rows (MaskFacts.trained): the columns
    # before the first trained one are unmasked, those past a row's length are not valid
    lp, ent = logprobs_and_entropy(logits, labels, temperature, entropy_mask=emask,
                                   entropy_grad=entropy_grad,
                                   entropy_tokens=None if facts is None else facts.trained)
    return to_positions(lp, offset, t), to_positions(ent, offset, t)


def prefix_plan(rank: RankState, ids: torch.Tensor, attn: torch.Tensor, mask: torch.Tensor,
                ) -> PrefixPlan | None:
    """The shared-prefix plan of a micro-batch (``learner.shared_prefix``), or None.

    Collective with FSDP: every rank must run the same forward passes (they gather
    parameters), so the ranks share prefixes together -- when any rank saves by it and every
    rank can (a rank with nothing to share then runs one prefix per row). Planned on the host:
    pass the micro-batch's host tensors (:func:`host_tensors`) and the device is not asked.
    """
    if not rank.cfg.learner.shared_prefix:
        return None
    ids, attn, mask = ids.cpu(), attn.cpu(), mask.cpu()  # planned on the host (no-ops for
    plan = plan_shared_prefix(ids, attn, mask)  # host tensors), the plan then sent to the device
    if rank.world_size > 1:
        forced = plan or plan_shared_prefix(ids, attn, mask, min_saving=-math.inf)
        flags = torch.tensor([float(plan is not None), float(forced is None)], device=rank.device)
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        want, cannot = flags.tolist()
        plan = forced if want and not cannot else None
    return None if plan is None else plan.to(lambda t: to_device(rank, t))


def holding(rank: RankState, plan: PrefixPlan | None) -> Any:
    """Context of a micro-batch's forward + backward: FSDP keeps the parameters gathered when
    the forward shares prefixes (:func:`ragen2.learner.fsdp.gathered`)."""
    return gathered(rank.model) if plan is not None else nullcontext()


def between_steps(rank: RankState) -> Any:
    """Context of the forwards and backwards between two optimiser steps (an update's no-grad
    passes, one of its mini-batches, a warm-start step): with ``learner.shared_prefix`` FSDP
    keeps the parameters gathered for the whole block (:func:`ragen2.learner.fsdp.gathered`),
    one all-gather a layer instead of one per forward and another per backward. The gathered
    values are the same bits, so every logprob and gradient is too; the memory is what a
    shared-prefix micro-batch holds anyway (:mod:`ragen2.cluster.memory`). Without it, FSDP
    gathers layer by layer as usual. The optimiser step must come after the block: it moves
    the shards, and leaving the block drops the gathered copies."""
    return gathered(rank.model) if rank.cfg.learner.shared_prefix else nullcontext()


def train_mode(rank: RankState) -> Any:
    """Context of a gradient pass of the policy: LoRA's adapter dropout on (if any)."""
    return adapter_dropout(rank.model) if rank.lora_dropout else nullcontext()
