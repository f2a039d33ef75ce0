"""LoRA adapters (peft) on the policy: wrapping before sharding, and switching adapter dropout.

Only the adapter matrices train; the base weights stay frozen at the loaded (or warm-started
reference) values. The engines never see adapters: :mod:`ragen2.learner.weights` exports merged
full weights under the base model's names.

The learner keeps its models in eval mode (no dropout in old/ref logprobs); ``lora.dropout`` acts
only inside :func:`adapter_dropout` (the gradient passes of an update or a warm-start step).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch
from torch import nn

from ragen2.config import LoraConfig

INIT_SEED = 0  # the adapters' init, like the base weights, does not depend on the run's seed


def wrap_lora(model: nn.Module, cfg: LoraConfig) -> nn.Module:
    """Wrap an HF causal LM in a peft ``PeftModel`` with one LoRA adapter; only adapters train.

    ``W x`` becomes ``W x + (alpha / rank) * B (A dropout(x))`` on ``cfg.target_modules``; B starts at
    zero, so the wrapped model computes exactly what the base model does. A's random init comes
    from a fixed seed (a forked RNG): identical on every FSDP rank, in every run and on resume,
    so runs differing only in ``seed`` start from the same policy, as without LoRA.
    """
    try:
        from peft import LoraConfig as PeftLoraConfig
        from peft import get_peft_model
    except ImportError as e:
        raise ImportError("learner.lora.rank > 0 needs the peft package, which is not installed: "
                          "pip install 'ragen2[lora]' (peft>=0.17)") from e
    peft_cfg = PeftLoraConfig(r=cfg.rank, lora_alpha=cfg.alpha, lora_dropout=cfg.dropout,
                              target_modules=list(cfg.target_modules), bias="none")
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(INIT_SEED)
            wrapped = get_peft_model(model, peft_cfg)
    except ValueError as e:  # e.g. "Target modules {...} not found in the base model"
        raise ValueError(f"learner.lora.target_modules={list(cfg.target_modules)} do not fit "
                         f"{type(model).__name__}: {e}") from e
    if not any(p.requires_grad for p in wrapped.parameters()):
        raise ValueError(f"learner.lora.target_modules={list(cfg.target_modules)} matched no "
                         f"trainable layer of {type(model).__name__}")
    return wrapped.eval()  # peft creates its modules in train mode: dropout would act everywhere


def is_peft_model(model: nn.Module) -> bool:
    return hasattr(model, "peft_config")


def _dropouts(model: nn.Module) -> list[nn.Module]:
    return [m for name, m in model.named_modules()
            if ".lora_dropout." in f".{name}." and isinstance(m, nn.Dropout)]


@contextmanager
def adapter_dropout(model: nn.Module) -> Iterator[None]:
    """Run LoRA's dropout modules in train mode inside the block (no-op without dropout)."""
    drops = _dropouts(model)
    for m in drops:
        m.train()
    try:
        yield
    finally:
        for m in drops:
            m.eval()


def has_adapter_dropout(model: nn.Module) -> bool:
    return any(m.p > 0 for m in _dropouts(model))
