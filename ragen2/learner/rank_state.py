"""The typed state of one learner rank, which the learner's parts share.

:func:`ragen2.learner.build.build_models` makes a :class:`RankState` (who the rank is, its device,
the models and optimisers it built); the parts (:mod:`~ragen2.learner.forward`,
:mod:`~ragen2.learner.ppo`, :mod:`~ragen2.learner.sft`, :mod:`~ragen2.learner.probes`,
:mod:`~ragen2.learner.state`, :mod:`~ragen2.learner.sharded`) take it as their first argument and
update only its declared mutable fields (``version``, ``sft_optim``); the Ray actor
:class:`ragen2.learner.rank.LearnerRank` holds it. The parts import this module, never the rank:
the rank imports them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from torch import nn

from ragen2.config import Config
from ragen2.learner.settings import LearnerSettings


@dataclass(eq=False)
class RankState:
    """One learner rank once its models are built.

    Fixed for the rank's life: ``cfg``, ``model_path``, ``rank`` of ``world_size``, ``settings``
    (what it needs from sections it does not own), ``device``, the models and what
    :func:`~ragen2.learner.build.build_models` found out building them. Changing: the policy
    ``version`` (the updates applied; a checkpoint restores it) and the warm start's optimiser.
    """

    cfg: Config
    model_path: str
    rank: int
    world_size: int
    settings: LearnerSettings
    device: torch.device
    model: nn.Module  # the policy (LoRA-wrapped with learner.lora.rank > 0), placed and sharded
    trainable: list[nn.Parameter]  # what the optimiser steps (LoRA: the adapters)
    optim: torch.optim.Optimizer
    ref: Optional[nn.Module]  # the frozen KL reference (algorithm.kl_coef > 0)
    critic: Optional[nn.Module]  # the value model (an estimator that needs a critic: GAE)
    critic_optim: Optional[torch.optim.Optimizer]
    lora: bool  # the policy trains LoRA adapters
    sharded: bool  # FSDP shards the models (world_size > 1, mixed precision or CPU offload)
    logits_to_keep: bool  # the policy's forward takes ``logits_to_keep``
    lora_dropout: bool  # its adapters have dropout (on in a gradient pass only)
    sft_optim: Optional[torch.optim.Optimizer] = None  # the warm start's (finish_warm_start drops it)
    version: int = 0  # the policy version: the updates applied
