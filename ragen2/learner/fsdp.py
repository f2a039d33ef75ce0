"""FSDP2 plumbing: sharding an HF model, full (unsharded) state dicts, and the critic model.

**Initialisation on the meta device** (:func:`materialise_sharded`, used by every sharded learner
model: policy, LoRA policy, reference, critic). Only rank 0 reads the checkpoint into host memory
(:func:`source_state`); every rank (rank 0 included) builds the model's skeleton on the meta device
(:func:`ragen2.models.loading.meta_init`: no memory, no initialisation kernels, no draw from the global RNG), shards it,
and receives each full tensor in turn from rank 0 (``set_model_state_dict(...,
broadcast_from_rank0=True)``), keeping only its shard. Host memory: one full model on rank 0 (the
policy's copy also fills the reference), none on the others; device memory: the shards plus one
full tensor in flight. Two things a state dict does not carry are restored by hand: tied weights
(``lm_head.weight`` is ``embed_tokens.weight``; loading assigns each key its own tensor, so the
ties are re-made) and non-persistent buffers (RoPE's ``inv_freq``: broadcast from rank 0's copy).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ragen2.models.loading import meta_init


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


def reduce_after(models: list[nn.Module], micro: int, micros: int, once: bool) -> None:
    """Before micro-batch ``micro`` (0-based) of ``micros`` backwards into one optimiser step:
    with ``once`` (``learner.reduce_once``), FSDP2 reduce-scatters the gradients only in the last
    one's backward, the earlier ones accumulating unsharded (in fp32, FSDP2's reduce dtype);
    otherwise in every backward. Every rank runs the same micro-batches, so all agree. Models
    without FSDP: nothing to do."""
    from torch.distributed.fsdp import FSDPModule

    if not once:
        return
    for m in models:
        if isinstance(m, FSDPModule):
            m.set_requires_gradient_sync(micro == micros - 1)


@contextmanager
def gathered(model: nn.Module, now: bool = False) -> Iterator[None]:
    """Keep an FSDP2 model's parameters gathered from here to the end of the block (a forward and
    its backward), then shard them again; a module without FSDP: nothing to do.

    FSDP2 gathers a module's parameters again for the backward in a hook on the module's output.
    A backward that reaches a module past its output -- the shared-prefix forward's key/value
    cache (:mod:`ragen2.learner.prefix`) -- would find them freed. Every rank must enter it for
    the same micro-batches. Costs the full parameters' memory for the block, saves the backward's
    all-gathers.

    ``now``: gather them on entry (collective) rather than in the first forward, so that the
    ranks may then run different numbers of forwards, none of them collective (the scorer's).
    """
    from torch.distributed.fsdp import FSDPModule

    mods = [m for m in model.modules() if isinstance(m, FSDPModule)]
    for m in mods:
        m.set_reshard_after_forward(False, recurse=False)
        m.set_reshard_after_backward(False, recurse=False)
    try:
        if now:
            for m in mods:
                m.unshard()
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
    """Make ``learner.attn_implementation`` usable in this process before any model is built:
    ragen2's own (``sdpa_fp32_backward``) registered with transformers, or fail early, naming the
    package and the extra, when an attention kernel is not installed."""
    import importlib.util

    if name == "sdpa_fp32_backward":
        import ragen2.learner.attention  # noqa: F401  (registers it)

    if name == "flash_attention_2" and importlib.util.find_spec("flash_attn") is None:
        raise ImportError("learner.attn_implementation=flash_attention_2 needs the flash_attn "
                          "package, which is not installed: pip install 'ragen2[gpu]' on a CUDA "
                          "machine (or use learner.attn_implementation=sdpa)")


def full_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """Gather the full fp32 state dict on CPU (collective: every rank must call; rank 0 gets it)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return get_model_state_dict(model, options=opts)


@dataclass
class SourceState:
    """Rank 0's values of a model built on the meta device: its state dict and the non-persistent
    buffers (by fully qualified name) a state dict leaves out."""

    state: dict[str, torch.Tensor]
    buffers: dict[str, torch.Tensor]


def _nonpersistent_buffers(model: nn.Module) -> Iterator[tuple[nn.Module, str, str]]:
    """(module, buffer name, fully qualified name) of every non-persistent buffer, in a fixed order."""
    for prefix, mod in model.named_modules():
        for name in sorted(mod._non_persistent_buffers_set):
            if mod._buffers.get(name) is not None:
                yield mod, name, f"{prefix}.{name}" if prefix else name


def source_state(model: nn.Module) -> SourceState:
    """What rank 0 broadcasts to fill a meta-initialised copy of ``model`` (views, no copies)."""
    return SourceState(model.state_dict(),
                       {fqn: mod._buffers[name] for mod, name, fqn in _nonpersistent_buffers(model)})


def _tied_groups(model: nn.Module) -> list[list[tuple[nn.Module, str]]]:
    """(module, attribute) pairs sharing one parameter object, groups of two or more, in module
    order (the first pair is the owner FSDP2 tracks)."""
    owners: dict[int, list[tuple[nn.Module, str]]] = {}
    for mod in model.modules():
        for name, p in mod._parameters.items():
            if p is not None:
                owners.setdefault(id(p), []).append((mod, name))
    return [g for g in owners.values() if len(g) > 1]


def materialise_sharded(model: nn.Module, source: SourceState | None, device: torch.device, *,
                        mixed_precision: str | None = None, activation_checkpointing: bool = False,
                        cpu_offload: bool = False) -> nn.Module:
    """Shard ``model`` (built under :func:`~ragen2.models.loading.meta_init` on every rank) and fill it from rank 0.

    Collective: every rank calls it for the same models in the same order; rank 0 passes the
    :class:`SourceState` of a real copy (e.g. loaded with ``from_pretrained``), the others None.
    Each full tensor travels from rank 0 once and every rank keeps its shard, on ``device`` (on the
    CPU with ``cpu_offload``). The result equals ``shard_model`` of the real copy moved to
    ``device``: same values, tied weights tied, non-persistent buffers equal to rank 0's.
    """
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    rank0 = dist.get_rank() == 0
    if rank0 and source is None:
        raise ValueError("materialise_sharded: rank 0 must pass the source state")
    ties = _tied_groups(model)
    model = shard_model(model, shard=True, mixed_precision=mixed_precision, cpu_offload=cpu_offload,
                        activation_checkpointing=activation_checkpointing)
    opts = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True, cpu_offload=cpu_offload)
    # a copy: loading adds the local entries to the dict it is given (the source is reused)
    set_model_state_dict(model, dict(source.state) if rank0 else {}, options=opts)
    for group in ties:  # loading assigned each name its own tensor: one parameter again
        owner, name = group[0]
        for mod, attr in group[1:]:
            mod._parameters[attr] = owner._parameters[name]
    sources = {t.untyped_storage().data_ptr() for t in source.state.values()} if rank0 else set()
    for mod, name, fqn in _nonpersistent_buffers(model):
        buf = mod._buffers[name]
        if rank0:
            t = source.buffers[fqn].detach().to(device, copy=True)
        else:
            t = torch.empty(buf.shape, dtype=buf.dtype, device=device)
        dist.broadcast(t, src=0)
        mod._buffers[name] = t
    for mod in model.modules():  # persistent buffers: on the device (not offloaded), and on
        for name, buf in list(mod._buffers.items()):  # rank 0 never the source's own tensor
            if buf is None or buf.is_meta:  # not loaded: reported below
                continue
            if buf.device != device:
                mod._buffers[name] = buf.to(device)
            elif rank0 and buf.untyped_storage().data_ptr() in sources:
                mod._buffers[name] = buf.clone()
    meta = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta]
    if meta:
        raise RuntimeError(f"meta-device initialisation left {len(meta)} tensors unloaded "
                           f"(not in rank 0's state dict?): {meta[:5]}")
    return model


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


def empty_value_model(model_path: str, *, dtype: str, trust_remote_code: bool,
                      attn_implementation: str | None = None,
                      draw_head_init: bool = False) -> ValueModel:
    """:func:`load_value_model`'s module on the meta device: config only, no weights read.

    ``draw_head_init``: draw from the CPU RNG what :func:`load_value_model` draws (the head's
    default ``nn.Linear`` init, then zeroed), for a rank that does not also load the real model:
    the RNG stream after the learner's set-up is then the same on every path.
    """
    from transformers import AutoConfig, AutoModel

    config = AutoConfig.from_pretrained(model_path, trust_remote_code=trust_remote_code)
    kwargs = {"attn_implementation": attn_implementation} if attn_implementation else {}
    with meta_init():
        backbone = AutoModel.from_config(config, dtype=getattr(torch, dtype),
                                         trust_remote_code=trust_remote_code, **kwargs).eval()
        model = ValueModel(backbone, backbone.config.hidden_size)  # eval as from_pretrained's
    if draw_head_init:
        nn.Linear(backbone.config.hidden_size, 1)
    return model
