"""FSDP2 plumbing: sharding an HF model, full (unsharded) state dicts, and the critic model."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


def shard_model(model: nn.Module, *, mixed_precision: str | None = None) -> nn.Module:
    """``fully_shard`` every transformer block (HF ``_no_split_modules``), then the root.

    ``mixed_precision="bfloat16"`` computes in bf16 with fp32 master weights and fp32 gradient
    reduction (GPU); ``None`` keeps fp32 (CPU).
    """
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    kwargs: dict[str, Any] = {}
    if mixed_precision:
        dt = getattr(torch, mixed_precision)
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=dt, reduce_dtype=torch.float32)
    block_names = set(getattr(model, "_no_split_modules", None) or [])
    if not block_names:  # e.g. the critic wrapper: use its backbone's blocks
        for m in model.modules():
            block_names |= set(getattr(m, "_no_split_modules", None) or [])
    for m in list(model.modules()):
        if type(m).__name__ in block_names and m is not model:
            fully_shard(m, **kwargs)
    fully_shard(model, **kwargs)
    return model


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


def load_value_model(model_path: str, *, dtype: str, trust_remote_code: bool) -> ValueModel:
    from transformers import AutoModel

    backbone = AutoModel.from_pretrained(model_path, dtype=getattr(torch, dtype),
                                         trust_remote_code=trust_remote_code)
    return ValueModel(backbone, backbone.config.hidden_size)
