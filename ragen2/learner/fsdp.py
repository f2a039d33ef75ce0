"""FSDP2 plumbing: sharding an HF model, full (unsharded) state dicts, and the critic model."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn


def shard_model(model: nn.Module, *, shard: bool = True, mixed_precision: str | None = None,
                activation_checkpointing: bool = False, cpu_offload: bool = False) -> nn.Module:
    """``fully_shard`` every transformer block (HF ``_no_split_modules``), then the root.

    ``shard=False`` (one rank, full precision, no offload) leaves the module as it is, apart from
    activation checkpointing: FSDP on one rank shards nothing and only adds its hooks and DTensor
    dispatch (5% of a tiny model's CPU update, ``benchmarks/learner_overhead.py``). The rest of the
    learner treats plain tensors and DTensors alike (:func:`full_tensor`, DCP state dicts).

    ``mixed_precision="bfloat16"`` computes in bf16 with fp32 master weights and fp32 gradient
    reduction (GPU); ``None`` keeps fp32 (CPU). ``activation_checkpointing`` recomputes each block's
    activations in the backward pass (torch's composable, non-reentrant ``checkpoint``: parameter
    names and numbers are unchanged, and it works whether the model is in train or eval mode).
    ``cpu_offload`` keeps sharded parameters, gradients and optimiser state on the CPU (FSDP2
    ``CPUOffloadPolicy``; CUDA only).
    """
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    if not shard and (mixed_precision or cpu_offload):
        raise ValueError("shard_model: mixed precision and CPU offload are FSDP policies; they "
                         f"need shard=True (got mixed_precision={mixed_precision!r}, "
                         f"cpu_offload={cpu_offload})")
    kwargs: dict[str, Any] = {}
    if mixed_precision:
        dt = getattr(torch, mixed_precision)
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=dt, reduce_dtype=torch.float32)
    if cpu_offload:
        kwargs["offload_policy"] = CPUOffloadPolicy()
    blocks = transformer_blocks(model)
    if activation_checkpointing:
        from torch.distributed._composable import checkpoint

        if not blocks:
            raise ValueError(f"activation checkpointing: {type(model).__name__} names no "
                             "transformer block class (_no_split_modules)")
        for m in blocks:
            checkpoint(m)
    if not shard:
        return model
    for m in blocks:
        fully_shard(m, **kwargs)
    fully_shard(model, **kwargs)
    return model


@contextmanager
def gathered(model: nn.Module) -> Iterator[None]:
    """Keep an FSDP2 model's parameters gathered from here to the end of the block (a forward and
    its backward), then shard them again; a module without FSDP: nothing to do.

    FSDP2 gathers a module's parameters again for the backward in a hook on the module's output.
    A backward that reaches a module past its output -- the shared-prefix forward's key/value
    cache (:mod:`ragen2.learner.prefix`) -- would find them freed. Every rank must enter it for
    the same micro-batches. Costs the full parameters' memory for the block, saves the backward's
    all-gathers.
    """
    from torch.distributed.fsdp import FSDPModule

    mods = [m for m in model.modules() if isinstance(m, FSDPModule)]
    for m in mods:
        m.set_reshard_after_forward(False, recurse=False)
        m.set_reshard_after_backward(False, recurse=False)
    try:
        yield
    finally:
        for m in mods:  # FSDP2's defaults: the root keeps its parameters after forward
            m.set_reshard_after_forward(m is not model, recurse=False)
            m.set_reshard_after_backward(True, recurse=False)
            m.reshard()


def transformer_blocks(model: nn.Module) -> list[nn.Module]:
    """The modules whose class is in an HF ``_no_split_modules`` list (the decoder layers)."""
    names: set[str] = set()
    for m in model.modules():  # the root may be a wrapper (critic, peft): ask every sub-model
        names |= set(getattr(m, "_no_split_modules", None) or [])
    return [m for m in model.modules() if type(m).__name__ in names and m is not model]


def full_tensor(t: torch.Tensor) -> torch.Tensor:
    """The full tensor behind a DTensor shard (collective), or ``t`` itself if it is not sharded.

    A CPU-offloaded shard moves to the mesh's device first (NCCL gathers CUDA tensors only).
    """
    from torch.distributed.tensor import DTensor

    if not isinstance(t, DTensor):
        return t
    if t.device.type != t.device_mesh.device_type:
        t = t.to(t.device_mesh.device_type)
    return t.full_tensor()


def check_attn_implementation(name: str) -> None:
    """Fail early, naming the package and the extra, when an attention kernel is not installed."""
    import importlib.util

    if name == "flash_attention_2" and importlib.util.find_spec("flash_attn") is None:
        raise ImportError("learner.attn_implementation=flash_attention_2 needs the flash_attn "
                          "package, which is not installed: pip install 'ragen2[gpu]' on a CUDA "
                          "machine (or use learner.attn_implementation=sdpa)")


def full_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """Gather the full fp32 state dict on CPU (collective: every rank must call; rank 0 gets it)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return get_model_state_dict(model, options=opts)


def load_full_state_dict(model: nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Load a full state dict into a sharded model (every rank passes the same full dict)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    set_model_state_dict(model, state, options=StateDictOptions(full_state_dict=True))


class ValueModel(nn.Module):
    """The PPO critic: the policy's transformer backbone plus a zero-initialised scalar head.

    ``forward(input_ids, attention_mask) -> values`` (B, T) where ``values[:, t]`` estimates the
    return from the state *before* token t (read from the hidden state at t - 1; 0 at t = 0).
    """

    def __init__(self, backbone: nn.Module, hidden_size: int) -> None:
        super().__init__()
        self.backbone = backbone
        self.value_head = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.value_head.weight)
        nn.init.zeros_(self.value_head.bias)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        h = self.backbone(input_ids=input_ids, attention_mask=attention_mask,
                          use_cache=False).last_hidden_state
        v = self.value_head(h).squeeze(-1).float()
        return torch.cat([torch.zeros_like(v[:, :1]), v[:, :-1]], dim=1)


def load_value_model(model_path: str, *, dtype: str, trust_remote_code: bool,
                     attn_implementation: str | None = None) -> ValueModel:
    from transformers import AutoModel

    kwargs = {"attn_implementation": attn_implementation} if attn_implementation else {}
    backbone = AutoModel.from_pretrained(model_path, dtype=getattr(torch, dtype),
                                         trust_remote_code=trust_remote_code, **kwargs)
    return ValueModel(backbone, backbone.config.hidden_size)
