"""Building the learner's models and optimisers and placing them on a rank's device.

The policy (optionally LoRA-wrapped), the frozen KL reference (``algorithm.kl_coef > 0``) and the
critic (an estimator that ``needs_critic``, e.g. GAE) are loaded in fp32 (master weights) and
sharded with FSDP2. Sharded learners (``world_size > 1``, mixed precision or CPU offload) build every
model on the meta device and fill it from rank 0, the only rank that reads the checkpoint
(:func:`place`). :func:`build_models` returns what it built as the rank's typed state
(:class:`~ragen2.learner.rank_state.RankState`).
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Optional

import torch
from torch import nn

from ragen2.algos.objective import needs_critic
from ragen2.config import AlgorithmConfig, Config
from ragen2.learner.forward import accepts_logits_to_keep
from ragen2.learner.fsdp import (SourceState, check_attn_implementation, empty_value_model,
                                 load_value_model, materialise_sharded, shard_model, source_state)
from ragen2.learner.lora import has_adapter_dropout, wrap_lora
from ragen2.learner.rank_state import RankState
from ragen2.learner.settings import LearnerSettings
from ragen2.models.loading import meta_init


def load_lm(cfg: Config, model_path: str) -> nn.Module:
    """The HF causal LM in fp32 (master weights) with ``learner.attn_implementation``, on CPU."""
    from ragen2.models.loading import load_causal_lm

    return load_causal_lm(model_path, dtype="float32",
                          trust_remote_code=cfg.model.trust_remote_code,
                          attn_implementation=cfg.learner.attn_implementation)


def empty_lm(cfg: Config, model_path: str) -> nn.Module:
    """:func:`load_lm`'s module on the meta device (filled by :func:`place`)."""
    from ragen2.models.loading import empty_causal_lm

    return empty_causal_lm(model_path, dtype="float32",
                           trust_remote_code=cfg.model.trust_remote_code,
                           attn_implementation=cfg.learner.attn_implementation)


def mixed_precision(cfg: Config) -> str | None:
    """FSDP's compute dtype (``model.dtype``), None for fp32."""
    return cfg.model.dtype if cfg.model.dtype != "float32" else None


def place(model: nn.Module, source: SourceState | None, *, cfg: Config, device: torch.device,
          sharded: bool, meta: bool, activation_checkpointing: bool = False) -> nn.Module:
    """Put a model on the rank's ``device``, sharded when the learner shards.

    A meta-device ``model`` (``meta``: a sharded learner that builds on the meta device) is sharded
    and filled from rank 0's ``source`` (:func:`ragen2.learner.fsdp.materialise_sharded`,
    collective); a real one (one rank, fp32, no offload: ``sharded=False``; or
    ``LearnerRank.meta_init=False``) is moved to the device and sharded in place, as it was loaded
    on every rank.
    """
    lc = cfg.learner
    mp = mixed_precision(cfg)
    if meta:
        return materialise_sharded(model, source, device, mixed_precision=mp,
                                   activation_checkpointing=activation_checkpointing,
                                   cpu_offload=lc.cpu_offload)
    if not lc.cpu_offload:  # with CPU offload FSDP moves each block to the GPU as it shards it
        model = model.to(device)
    return shard_model(model, shard=sharded, mixed_precision=mp, cpu_offload=lc.cpu_offload,
                       activation_checkpointing=activation_checkpointing)


def new_optimizer(params: list[nn.Parameter], algorithm: AlgorithmConfig,
                  lr: float) -> torch.optim.Optimizer:
    """AdamW over the policy's trainable parameters ``params`` (LoRA: the adapters)."""
    # foreach: one multi-tensor kernel per Adam op instead of one op per parameter (the
    # default on CUDA, not on CPU); with FSDP2's DTensor parameters, each per-parameter op also
    # pays DTensor dispatch (measured: 2-3% of a tiny model's CPU update)
    return torch.optim.AdamW(params, lr=lr, weight_decay=algorithm.weight_decay, foreach=True)


def build_models(cfg: Config, model_path: str, rank: int, world_size: int,
                 settings: LearnerSettings, device: torch.device, *,
                 meta_init_sharded: bool = True) -> RankState:
    """Load and place the policy, reference and critic on ``device`` and create their optimisers:
    the rank's :class:`~ragen2.learner.rank_state.RankState` (policy version 0).

    ``meta_init_sharded``: a sharded learner builds every model on the meta device and fills it
    from rank 0, the only rank that reads the checkpoint (``LearnerRank.meta_init``)."""
    lc = cfg.learner
    check_attn_implementation(lc.attn_implementation)
    lora = lc.lora.rank > 0
    sharded = world_size > 1 or mixed_precision(cfg) is not None or lc.cpu_offload
    meta = sharded and meta_init_sharded
    where = dict(cfg=cfg, device=device, sharded=sharded, meta=meta)
    # rank 0's real copy of the checkpoint, the source every meta-initialised rank fills from
    src = load_lm(cfg, model_path) if not meta or rank == 0 else None
    base_src = source_state(src) if meta and src is not None else None
    base = empty_lm(cfg, model_path) if meta else src
    logits_to_keep = accepts_logits_to_keep(base)
    policy, policy_src = base, base_src
    if lora:
        with meta_init() if meta else nullcontext():
            policy = wrap_lora(base, lc.lora)
        if base_src is not None:  # rank 0: the adapters' values (fixed seed) come from here
            policy_src = source_state(wrap_lora(src, lc.lora))
    model = place(policy, policy_src, **where, activation_checkpointing=lc.activation_checkpointing)
    trainable = [p for p in model.parameters() if p.requires_grad]  # LoRA: adapters
    lora_dropout = has_adapter_dropout(model)
    ref: Optional[nn.Module] = None
    if cfg.algorithm.kl_coef > 0:  # always a plain model (no adapters): the base at first
        ref = place(empty_lm(cfg, model_path) if meta else load_lm(cfg, model_path), base_src,
                    **where)
        ref.requires_grad_(False)
    del src, base, policy, base_src, policy_src  # rank 0's host copy goes before the critic's
    critic: Optional[nn.Module] = None
    critic_optim: Optional[torch.optim.Optimizer] = None
    if needs_critic(cfg.algorithm):
        kwargs = dict(dtype="float32", trust_remote_code=cfg.model.trust_remote_code,
                      attn_implementation=lc.attn_implementation)
        if meta:
            real = load_value_model(model_path, **kwargs) if rank == 0 else None
            empty = empty_value_model(model_path, **kwargs, draw_head_init=real is None)
            critic = place(empty, source_state(real) if real is not None else None, **where,
                           activation_checkpointing=lc.activation_checkpointing)
            del real
        else:
            critic = place(load_value_model(model_path, **kwargs), None, **where,
                           activation_checkpointing=lc.activation_checkpointing)
        critic_optim = torch.optim.AdamW(critic.parameters(), lr=cfg.algorithm.critic_lr)
    optim = new_optimizer(trainable, cfg.algorithm, cfg.algorithm.lr)
    return RankState(cfg=cfg, model_path=model_path, rank=rank, world_size=world_size,
                     settings=settings, device=device, model=model, trainable=trainable,
                     optim=optim, ref=ref, critic=critic, critic_optim=critic_optim, lora=lora,
                     sharded=sharded, logits_to_keep=logits_to_keep, lora_dropout=lora_dropout)
