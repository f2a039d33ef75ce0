"""The warm start's behaviour-cloning step: token-mean cross-entropy on demonstration tokens."""

from __future__ import annotations

import math

import numpy as np

from ragen2.algos import logprobs_from_logits
from ragen2.batch import TrainingBatch
from ragen2.learner.build import new_optimizer
from ragen2.learner.forward import MaskFacts, host_tensors, micro_batches, to_device, train_mode
from ragen2.learner.ppo import allreduce, optimizer_step
from ragen2.learner.rank_state import RankState


def sft_step(rank: RankState, batch: TrainingBatch, rows: np.ndarray, lr: float) -> dict[str, float]:
    """One behaviour-cloning step: token-mean cross-entropy on the rows' loss-mask tokens.

    Skipped like an RL mini-batch when the loss or gradient norm is not finite
    (``warm_start/nonfinite_skipped`` is 1.0). The optimiser is the warm start's own
    (``rank.sft_optim``, dropped by ``finish_warm_start``)."""
    if rank.sft_optim is None:
        rank.sft_optim = new_optimizer(rank.trainable, rank.cfg.algorithm, lr)
    rows = np.asarray(rows)
    mask_all = batch.loss_mask[rows]
    n_tok = float(mask_all.sum())
    loss_sum = correct = 0.0
    with train_mode(rank):
        for micro in micro_batches(rank, batch, rows):
            host = host_tensors(batch, micro, "input_ids", "attention_mask", "loss_mask")
            ids, attn, mask = (to_device(rank, t) for t in host)
            # rows padded on the right need no attention mask (MaskFacts.gapped): the loss reads
            # the same logits, and SDPA runs causal
            kwargs = {"attention_mask": attn} if MaskFacts.of(host[2], host[1]).gapped else {}
            logits = rank.model(input_ids=ids, use_cache=False, **kwargs).logits[:, :-1]
            lp = logprobs_from_logits(logits, ids[:, 1:])
            mk = mask[:, 1:].float()
            loss = -(lp * mk).sum() / max(n_tok, 1.0)
            (loss * rank.world_size).backward()
            loss_sum += loss.detach().item()
            correct += float(((logits.argmax(-1) == ids[:, 1:]).float() * mk).sum())
    norms = optimizer_step(rank, [(rank.trainable, rank.sft_optim)], loss_sum)  # None: skipped
    r = allreduce(rank, {"loss": loss_sum, "correct": correct})
    return {"warm_start/loss": r["loss"], "warm_start/token_acc": r["correct"] / max(n_tok, 1.0),
            "warm_start/grad_norm": norms[0] if norms else math.nan,
            "warm_start/nonfinite_skipped": float(norms is None)}
