"""A learner rank's state around a toy causal LM whose numbers can be worked out by hand: its
logits are one learned bias vector (zeros at first), so at the start every token has probability
1 / V at every position, and the gradient of a token-mean cross-entropy with respect to the bias
is ``1/V - (the labels' histogram) / (the count of labels)``. No process group, no real model."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import torch
from torch import nn

from ragen2.batch import TrainingBatch
from ragen2.config import Config
from ragen2.learner.build import new_optimizer
from ragen2.learner.rank_state import RankState
from ragen2.learner.settings import LearnerSettings


class BiasLM(nn.Module):
    """``logits[b, t] = bias`` for every row and position (an HF causal LM's call signature)."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(vocab))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                use_cache: bool = False, **_: object) -> SimpleNamespace:
        return SimpleNamespace(logits=self.bias * torch.ones(*input_ids.shape, 1))


def toy_state(vocab: int = 4, cfg: Config | None = None, **changes: object) -> RankState:
    """One unsharded rank (rank 0 of 1, CPU) training a :class:`BiasLM` with AdamW."""
    cfg = cfg or Config()
    model = BiasLM(vocab)
    trainable = list(model.parameters())
    state = RankState(cfg=cfg, model_path="toy", rank=0, world_size=1, settings=LearnerSettings(),
                      device=torch.device("cpu"), model=model, trainable=trainable,
                      optim=new_optimizer(trainable, cfg.algorithm, cfg.algorithm.lr), ref=None,
                      critic=None, critic_optim=None, lora=False, sharded=False,
                      logits_to_keep=False, lora_dropout=False)
    return replace(state, **changes)


def batch_of(ids: list[list[int]], mask: list[list[int]], **fields: object) -> TrainingBatch:
    """A batch of equal-length rows (attention everywhere), zeros elsewhere."""
    ids_a, mask_a = np.array(ids, np.int64), np.array(mask, np.int64)
    n, length = ids_a.shape
    out = dict(input_ids=ids_a, attention_mask=np.ones((n, length), np.int64), loss_mask=mask_a,
               logprobs=np.zeros((n, length), np.float32),
               token_rewards=np.zeros((n, length), np.float32), rewards=np.zeros(n, np.float32),
               group_ids=np.arange(n), policy_version=np.zeros(n, np.int64))
    out.update(fields)
    return TrainingBatch(**out)
