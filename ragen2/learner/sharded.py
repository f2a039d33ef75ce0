"""Learner checkpoints as ``torch.distributed.checkpoint`` (DCP) shards, resumable on any world size.

Every rank writes its own shards of each model and optimiser in parallel (no gather to rank 0, no
full copy in any rank's memory), into one DCP directory per part of a checkpoint directory:

* ``policy/``: the policy's weights and AdamW state (LoRA: the adapters and their state only; the
  frozen base is the loaded model and never changes);
* ``critic/``: the critic's weights and state (``algorithm.adv_estimator=gae``);
* ``ref/``: the KL reference's weights (``algorithm.kl_coef > 0``; a warm start moves it);
* ``rng_rank{r}.pt``: each rank's torch / numpy / Python RNG states and the policy version.

DCP stores every tensor with its global shape and each shard's offsets, so a checkpoint written by
W ranks loads on W' ranks: each rank reads the pieces of its own shard (``tests/learner``: 2 ranks
-> 1). With the same world size a resume continues the exact same run (the same shards, the same
RNG states); with another, the weights and optimiser state are the same but reductions are summed
in another order, and a rank without an RNG file of its own starts from rank 0's.

``policy.pt`` / ``critic.pt`` / ``ref.pt`` (full state dicts, the format before) still load
(:func:`ragen2.learner.state.load`); :func:`read_model_state` reads a policy in either
format without a process group (``ragen2 export``).
"""

from __future__ import annotations

import logging
import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ragen2.learner.rank_state import RankState

log = logging.getLogger(__name__)


def _parts(rank: RankState) -> dict[str, tuple[Any, Any]]:
    """{part: (model, optimiser or None)} of this learner (absent models left out)."""
    parts = {"policy": (rank.model, rank.optim)}
    if rank.critic is not None:
        parts["critic"] = (rank.critic, rank.critic_optim)
    if rank.ref is not None:
        parts["ref"] = (rank.ref, None)
    return parts


def _state(rank: RankState, name: str, model: Any, optim: Any) -> dict[str, Any]:
    """The sharded state dict DCP writes or fills for one part (tensors are local shards)."""
    from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                         get_state_dict)

    if optim is None:
        return {"model": get_model_state_dict(model)}
    lora = name == "policy" and rank.lora
    opts = StateDictOptions(ignore_frozen_params=lora)
    model_sd, optim_sd = get_state_dict(model, optim, options=opts)
    if lora:  # ignore_frozen_params keeps a frozen tied weight's second name: drop it
        adapters = {n for n, p in model.named_parameters() if p.requires_grad}
        model_sd = {k: v for k, v in model_sd.items() if k in adapters}
    return {"model": model_sd, "optim": optim_sd}


def save_sharded(rank: RankState, directory: str) -> None:
    """Write this rank's shards of every part into ``directory`` (collective), and its RNG."""
    import torch.distributed.checkpoint as dcp

    for name, (model, optim) in _parts(rank).items():
        dcp.save(_state(rank, name, model, optim), checkpoint_id=os.path.join(directory, name))
    rng = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(),
           "python": random.getstate(), "version": rank.version}
    torch.save(rng, os.path.join(directory, f"rng_rank{rank.rank}.pt"))


def is_sharded(directory: str | Path) -> bool:
    """Whether ``directory`` holds a DCP checkpoint (else the full-state-dict format)."""
    return (Path(directory) / "policy" / ".metadata").is_file()


def load_sharded(rank: RankState, directory: str) -> int:
    """Fill every part from ``directory`` (collective; any world size), restore the RNG states;
    returns the policy version."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (StateDictOptions, set_model_state_dict,
                                                         set_state_dict)

    for name, (model, optim) in _parts(rank).items():
        path = os.path.join(directory, name)
        if not os.path.isdir(path):
            raise FileNotFoundError(f"{path} missing: the checkpoint was written by a learner "
                                    f"without a {name} model (algorithm settings changed?)")
        state = _state(rank, name, model, optim)
        if name == "policy":
            _check_policy_keys(rank, path, set(state["model"]))
        dcp.load(state, checkpoint_id=path)
        if optim is None:
            set_model_state_dict(model, state["model"])
        else:
            partial = name == "policy" and rank.lora
            set_state_dict(model, optim, model_state_dict=state["model"],
                           optim_state_dict=state["optim"],
                           options=StateDictOptions(strict=not partial))
    return _load_rng(rank, directory)


def _check_policy_keys(rank: RankState, path: str, want: set[str]) -> None:
    """A LoRA checkpoint holds exactly this policy's adapters; a full one holds no adapters."""
    import torch.distributed.checkpoint as dcp

    saved = {k.removeprefix("model.") for k in dcp.FileSystemReader(path).read_metadata()
             .state_dict_metadata if k.startswith("model.")}
    if not rank.lora:
        if any(".lora_A." in k for k in saved):
            raise KeyError(f"{path} holds LoRA adapters but this learner does full fine-tuning: "
                           "resume with the run's learner.lora settings")
        return
    if saved != want:
        extra, missing = sorted(saved - want), sorted(want - saved)
        raise KeyError(f"{path} does not match this LoRA policy (learner.lora changed, or a full "
                       f"fine-tuning checkpoint?): missing={missing[:3]} unexpected={extra[:3]}")


def _load_rng(rank: RankState, directory: str) -> int:
    path = os.path.join(directory, f"rng_rank{rank.rank}.pt")
    if not os.path.exists(path):  # written by fewer ranks: start from rank 0's states
        log.warning("%s missing (the checkpoint was written by fewer learner ranks): rank %d "
                    "takes rank 0's RNG states", path, rank.rank)
        path = os.path.join(directory, "rng_rank0.pt")
    rng = torch.load(path, weights_only=False)
    torch.set_rng_state(rng["torch"])
    np.random.set_state(rng["numpy"])
    random.setstate(rng["python"])
    rank.version = int(rng["version"])
    return rank.version


def read_model_state(directory: str | Path, part: str = "policy") -> dict[str, torch.Tensor]:
    """A part's full model state dict read on one process, no process group (either format)."""
    directory = Path(directory)
    if not (directory / part / ".metadata").is_file():
        return torch.load(directory / f"{part}.pt", map_location="cpu", weights_only=False)["model"]
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.default_planner import _EmptyStateDictLoadPlanner
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

    state: dict[str, Any] = {}
    _load_state_dict(state, storage_reader=FileSystemReader(str(directory / part)),
                     planner=_EmptyStateDictLoadPlanner(keys={"model"}), no_dist=True)
    return state["model"]
