"""The warm start's behaviour-cloning steps: token-mean cross-entropy on demonstration tokens.

The controller sends the steps in chunks (:data:`ragen2.controller.warm_start.STEPS_PER_CALL`), one
Ray round trip each. The host reads the device once per step (the optimiser step's finite check
and gradient norm, which decide whether it steps) and once per chunk (every step's loss and
accuracy), never per micro-batch: float64 sums in the order the host's Python-float sums made
them, so the same bits.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import torch
import torch.distributed as dist

from ragen2.algos import logprobs_from_logits
from ragen2.batch import TrainingBatch
from ragen2.learner.build import new_optimizer
from ragen2.learner.forward import (MaskFacts, between_steps, host_tensors, micro_batches,
                                    to_device, train_mode)
from ragen2.learner.fsdp import reduce_after
from ragen2.learner.ppo import optimizer_step
from ragen2.learner.rank_state import RankState


def sft_steps(rank: RankState, batch: TrainingBatch, steps: Sequence[np.ndarray],
              lr: float) -> list[dict[str, float]]:
    """Behaviour-cloning steps, one per entry of ``steps`` (row ids of ``batch``), in order;
    each step's metrics.

    A step whose loss or gradient norm is not finite is skipped like an RL mini-batch
    (``warm_start/nonfinite_skipped`` is 1.0), and the steps stop after it: the caller counts
    skips in a row (``trainer.max_nonfinite_steps``) before it asks for more. The optimiser is
    the warm start's own (``rank.sft_optim``, dropped by ``finish_warm_start``)."""
    if rank.sft_optim is None:
        rank.sft_optim = new_optimizer(rank.trainable, rank.cfg.algorithm, lr)
    done: list[tuple[float, torch.Tensor, list[float] | None]] = []
    for rows in steps:
        done.append(_step(rank, batch, np.asarray(rows)))
        if done[-1][2] is None:  # skipped
            break
    sums = torch.stack([s for _, s, _ in done]).tolist()  # the chunk's one read of its metrics
    return [{"warm_start/loss": loss, "warm_start/token_acc": correct / max(n_tok, 1.0),
             "warm_start/grad_norm": norms[0] if norms else math.nan,
             "warm_start/nonfinite_skipped": float(norms is None)}
            for (n_tok, _, norms), (correct, loss) in zip(done, sums)]


def sft_step(rank: RankState, batch: TrainingBatch, rows: np.ndarray,
             lr: float) -> dict[str, float]:
    """One behaviour-cloning step on ``rows`` (:func:`sft_steps`)."""
    return sft_steps(rank, batch, [rows], lr)[0]


def _step(rank: RankState, batch: TrainingBatch,
          rows: np.ndarray) -> tuple[float, torch.Tensor, list[float] | None]:
    """One step: the rows' trained-token count, the (2,) float64 device tensor of their
    (correct predictions, loss) summed over the ranks, and the gradient norms (None: skipped)."""
    n_tok = float(batch.loss_mask[rows].sum())
    loss_sum = torch.zeros((), dtype=torch.float64, device=rank.device)
    correct = torch.zeros((), dtype=torch.float64, device=rank.device)
    with train_mode(rank), between_steps(rank):  # one all-gather a layer for the step
        micros = micro_batches(rank, batch, rows)
        for ui, micro in enumerate(micros):
            host = host_tensors(batch, micro, "input_ids", "attention_mask", "loss_mask")
            ids, attn, mask = (to_device(rank, t) for t in host)
            # rows padded on the right need no attention mask (MaskFacts.gapped): the loss reads
            # the same logits, and SDPA runs causal
            kwargs = {"attention_mask": attn} if MaskFacts.of(host[2], host[1]).gapped else {}
            logits = rank.model(input_ids=ids, use_cache=False, **kwargs).logits[:, :-1]
            lp = logprobs_from_logits(logits, ids[:, 1:])
            mk = mask[:, 1:].float()
            loss = -(lp * mk).sum() / max(n_tok, 1.0)
            reduce_after([rank.model], ui, len(micros), rank.cfg.learner.reduce_once)
            (loss * rank.world_size).backward()
            # float64 of a float32 value: exactly the Python float .item() gave
            loss_sum = loss_sum + loss.detach().to(torch.float64)
            hits = ((logits.argmax(-1) == ids[:, 1:]).float() * mk).sum()
            correct = correct + hits.detach().to(torch.float64)
    norms = optimizer_step(rank, [(rank.trainable, rank.sft_optim)], loss_sum)  # None: skipped
    sums = torch.stack([correct, loss_sum])  # (the order of ppo.allreduce's sorted keys)
    if rank.world_size > 1:
        dist.all_reduce(sums)
    return n_tok, sums, norms
