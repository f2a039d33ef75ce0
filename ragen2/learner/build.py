"""Building the learner's models and optimisers and placing them on a rank's device.

The policy (optionally LoRA-wrapped), the frozen KL reference (``algorithm.kl_coef > 0``) and the
critic (an estimator that ``needs_critic``, e.g. GAE) are loaded in fp32 (master weights) and
sharded with FSDP2. Sharded learners (``world_size > 1``, mixed precision or CPU offload) build every
model on the meta device and fill it from rank 0, the only rank that reads the checkpoint
(:func:`place`).
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import TYPE_CHECKING

import torch

from ragen2.algos.objective import needs_critic
from ragen2.learner.forward import accepts_logits_to_keep
from ragen2.learner.fsdp import (SourceState, check_attn_implementation, empty_value_model,
                                 load_value_model, materialise_sharded, meta_init, shard_model,
                                 source_state)
from ragen2.learner.lora import has_adapter_dropout, wrap_lora

if TYPE_CHECKING:
    from ragen2.learner.rank import LearnerRank


def load_lm(rank: LearnerRank) -> torch.nn.Module:
    """The HF causal LM in fp32 (master weights) with ``learner.attn_implementation``, on CPU."""
    from ragen2.models.loading import load_causal_lm

    return load_causal_lm(rank.model_path, dtype="float32",
                          trust_remote_code=rank.cfg.model.trust_remote_code,
                          attn_implementation=rank.cfg.learner.attn_implementation)


def empty_lm(rank: LearnerRank) -> torch.nn.Module:
    """:func:`load_lm`'s module on the meta device (filled by :func:`place`)."""
    from ragen2.models.loading import empty_causal_lm

    return empty_causal_lm(rank.model_path, dtype="float32",
                           trust_remote_code=rank.cfg.model.trust_remote_code,
                           attn_implementation=rank.cfg.learner.attn_implementation)


def mixed_precision(rank: LearnerRank) -> str | None:
    """FSDP's compute dtype (``model.dtype``), None for fp32."""
    return rank.cfg.model.dtype if rank.cfg.model.dtype != "float32" else None


def place(rank: LearnerRank, model: torch.nn.Module, source: SourceState | None,
          activation_checkpointing: bool = False) -> torch.nn.Module:
    """Put a model on this rank's device, sharded when the learner shards.

    A meta-device ``model`` (``rank.meta_init``, sharded learners) is sharded and filled from
    rank 0's ``source`` (:func:`ragen2.learner.fsdp.materialise_sharded`, collective); a real
    one (one rank, fp32, no offload: ``shard=False``; or ``meta_init=False``) is moved to the
    device and sharded in place, as it was loaded on every rank.
    """
    lc = rank.cfg.learner
    mp = mixed_precision(rank)
    if rank.sharded and rank.meta_init:
        return materialise_sharded(model, source, rank.device, mixed_precision=mp,
                                   activation_checkpointing=activation_checkpointing,
                                   cpu_offload=lc.cpu_offload)
    if not lc.cpu_offload:  # with CPU offload FSDP moves each block to the GPU as it shards it
        model = model.to(rank.device)
    return shard_model(model, shard=rank.sharded, mixed_precision=mp, cpu_offload=lc.cpu_offload,
                       activation_checkpointing=activation_checkpointing)


def new_optimizer(rank: LearnerRank, lr: float) -> torch.optim.Optimizer:
    """AdamW over the policy's trainable parameters (LoRA: the adapters)."""
    # foreach: one multi-tensor kernel per Adam op instead of one op per parameter (the
    # default on CUDA, not on CPU); with FSDP2's DTensor parameters, each per-parameter op also
    # pays DTensor dispatch (measured: 2-3% of a tiny model's CPU update)
    return torch.optim.AdamW(rank.trainable, lr=lr, weight_decay=rank.cfg.algorithm.weight_decay,
                             foreach=True)


def build_models(rank: LearnerRank) -> None:
    """Load and place the policy, reference and critic, and create their optimisers, on ``rank``
    (sets ``model``, ``trainable``, ``ref``, ``critic``, ``optim``, ``critic_optim``, ...)."""
    cfg, model_path = rank.cfg, rank.model_path
    lc = cfg.learner
    check_attn_implementation(lc.attn_implementation)
    rank.lora = lc.lora.rank > 0
    rank.sharded = rank.world_size > 1 or mixed_precision(rank) is not None or lc.cpu_offload
    meta = rank.sharded and rank.meta_init
    # rank 0's real copy of the checkpoint, the source every meta-initialised rank fills from
    src = load_lm(rank) if not meta or rank.rank == 0 else None
    base_src = source_state(src) if meta and src is not None else None
    base = empty_lm(rank) if meta else src
    rank.logits_to_keep = accepts_logits_to_keep(base)
    policy, policy_src = base, base_src
    if rank.lora:
        with meta_init() if meta else nullcontext():
            policy = wrap_lora(base, lc.lora)
        if base_src is not None:  # rank 0: the adapters' values (fixed seed) come from here
            policy_src = source_state(wrap_lora(src, lc.lora))
    rank.model = place(rank, policy, policy_src, lc.activation_checkpointing)
    rank.trainable = [p for p in rank.model.parameters() if p.requires_grad]  # LoRA: adapters
    rank.lora_dropout = has_adapter_dropout(rank.model)
    rank.ref = None
    if cfg.algorithm.kl_coef > 0:  # always a plain model (no adapters): the base at first
        rank.ref = place(rank, empty_lm(rank) if meta else load_lm(rank), base_src)
        rank.ref.requires_grad_(False)
    del src, base, policy, base_src, policy_src  # rank 0's host copy goes before the critic's
    rank.critic = rank.critic_optim = None
    if needs_critic(cfg.algorithm):
        kwargs = dict(dtype="float32", trust_remote_code=cfg.model.trust_remote_code,
                      attn_implementation=lc.attn_implementation)
        if meta:
            real = load_value_model(model_path, **kwargs) if rank.rank == 0 else None
            empty = empty_value_model(model_path, **kwargs, draw_head_init=real is None)
            critic = place(rank, empty, source_state(real) if real is not None else None,
                           lc.activation_checkpointing)
            del real
        else:
            critic = place(rank, load_value_model(model_path, **kwargs), None,
                           lc.activation_checkpointing)
        rank.critic = critic
        rank.critic_optim = torch.optim.AdamW(rank.critic.parameters(), lr=cfg.algorithm.critic_lr)
    rank.optim = new_optimizer(rank, cfg.algorithm.lr)
    rank.sft_optim = None
