"""The policy's state on a rank: its weights (export, save, load), the warm start's hand-over to
the KL reference, and checkpoints (sharded: :mod:`ragen2.learner.sharded`; the older full-state
format is still read here)."""

from __future__ import annotations

import os
import random
from typing import Any, Iterator

import numpy as np
import torch

from ragen2.atomic import atomic_write
from ragen2.learner.fsdp import full_state_dict, load_full_state_dict
from ragen2.learner.rank_state import RankState
from ragen2.learner.weights import load_full_weights, named_full_weights


def save_policy(rank: RankState, path: str) -> None:
    """Write the full policy weights to ``path`` atomically (collective; rank 0 writes)."""
    sd = full_state_dict(rank.model)
    if rank.rank == 0:
        with atomic_write(path, "wb") as f:
            torch.save(sd, f)


def load_policy(rank: RankState, path: str) -> None:
    """Load what :func:`save_policy` wrote (every rank reads the file)."""
    state = torch.load(path, weights_only=True)
    saved_lora = any(".lora_A." in k for k in state)
    if saved_lora != rank.lora:
        kinds = {True: "a LoRA policy", False: "a full fine-tuning policy"}
        raise KeyError(f"{path} holds {kinds[saved_lora]} but this learner trains "
                       f"{kinds[rank.lora]} (learner.lora.rank={rank.cfg.learner.lora.rank}): "
                       "a warm-start cache must be keyed by learner.lora")
    load_full_state_dict(rank.model, state)


def finish_warm_start(rank: RankState) -> None:
    """Drop the SFT optimizer; the frozen KL reference becomes the warm-started policy.

    With LoRA the reference (a plain model) takes the merged weights (collective).
    """
    rank.sft_optim = None
    if rank.ref is None:
        return
    if rank.lora:
        load_full_weights(rank.ref, named_weights(rank))
        return
    with torch.no_grad():  # identical sharding: copy local shards, no communication
        for ref_p, p in zip(rank.ref.parameters(), rank.model.parameters()):
            ref_p.copy_(p)


def named_weights(rank: RankState, device: str | torch.device = "cpu", dtype: str | None = None,
                  names: list[str] | None = None) -> Iterator[tuple[str, torch.Tensor]]:
    """(HF name, full unsharded tensor) for every policy weight, one parameter at a time.

    Collective: every rank must exhaust it (same order everywhere); each rank receives every
    full tensor. Names and shapes are the base model's (tied weights once); a LoRA policy is
    merged, ``W + (alpha / rank) * B @ A``. ``dtype`` (e.g. "bfloat16"; None = fp32 master).
    ``names``: only these (the same list on every rank).
    """
    from ragen2.models.loading import resolve_dtype

    dt = resolve_dtype(dtype) if dtype is not None else None
    return named_full_weights(rank.model, device=device, dtype=dt, names=names)


def policy_weights(rank: RankState) -> dict[str, np.ndarray] | None:
    """Full fp32 weights as numpy (rank 0; collective). Shipped to rollout workers."""
    out = {}
    # only rank 0 keeps the weights: the others leave theirs where the gather put them
    for name, t in named_weights(rank, device="cpu" if rank.rank == 0 else rank.device):
        if rank.rank == 0:
            out[name] = t.float().numpy().copy()  # never a view of the live weights
    return out if rank.rank == 0 else None


def load(rank: RankState, directory: str) -> int:
    """Restore a checkpoint (collective): sharded (any world size) or the full-state-dict
    format written before; returns the policy version."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

    from ragen2.learner.sharded import is_sharded, load_sharded

    if is_sharded(directory):
        return load_sharded(rank, directory)

    targets = {"policy": (rank.model, rank.optim), "critic": (rank.critic, rank.critic_optim)}
    for name, (model, optim) in targets.items():
        if model is None:
            continue
        payload = torch.load(os.path.join(directory, f"{name}.pt"), weights_only=False)
        partial = name == "policy" and rank.lora
        if name == "policy":
            check_policy_keys(rank, payload["model"], directory)
        set_state_dict(model, optim, model_state_dict=payload["model"],
                       optim_state_dict=payload["optim"],
                       options=StateDictOptions(full_state_dict=True, strict=not partial))
    if rank.ref is not None:
        payload = torch.load(os.path.join(directory, "ref.pt"), weights_only=False)
        load_full_state_dict(rank.ref, payload["model"])
    rng_path = os.path.join(directory, f"rng_rank{rank.rank}.pt")
    if os.path.exists(rng_path):
        rng = torch.load(rng_path, weights_only=False)
        torch.set_rng_state(rng["torch"])
        np.random.set_state(rng["numpy"])
        random.setstate(rng["python"])
        rank.version = int(rng["version"])
    else:
        raise FileNotFoundError(f"{rng_path} missing: the checkpoint was written with a "
                                "different cluster.learner_world_size")
    return rank.version


def check_policy_keys(rank: RankState, state: dict[str, Any], directory: str) -> None:
    """A LoRA checkpoint holds exactly this policy's adapters; a full one holds no adapters."""
    if not rank.lora:
        if any(".lora_A." in k for k in state):
            raise KeyError(f"{directory}/policy.pt holds LoRA adapters but this learner does "
                           "full fine-tuning: resume with the run's learner.lora settings")
        return
    want = {n for n, p in rank.model.named_parameters() if p.requires_grad}
    if set(state) != want:
        extra, missing = sorted(set(state) - want), sorted(want - set(state))
        raise KeyError(f"{directory}/policy.pt does not match this LoRA policy "
                       f"(learner.lora changed, or a full fine-tuning checkpoint?): "
                       f"missing={missing[:3]} unexpected={extra[:3]}")
