"""Two FSDP2 ranks (gloo): models built on the meta device and filled from rank 0 equal the former
path (every rank loads the checkpoint, then shards) -- policy, LoRA policy, reference and critic.

``_worker`` runs both paths for every scenario in the learner tests' one shared spawn
(tests/learner/two_ranks.py: the torch + transformers import is paid once).
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch

from tests.learner.test_rank import _batch
from tests.learner.pinned import pinned

IDS = [[5, 17, 40, 3, 99, 12, 8, 230, 41, 41, 7, 300], [2, 64, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18]]
BASE = ("cluster.learner_world_size=2", "algorithm.lr=1e-3", "algorithm.micro_batch_size=2",
        "algorithm.kl_coef=0.1")
SCENARIOS = {"ppo": ("algorithm.adv_estimator=gae",)}  # policy, reference and critic
if importlib.util.find_spec("peft") is not None:  # the `lora` extra
    SCENARIOS["lora"] = ("learner.lora.rank=4", "learner.lora.alpha=8", "learner.lora.dropout=0.1")


def _lm(model: torch.nn.Module) -> torch.nn.Module:
    """The HF causal LM inside a (possibly peft-wrapped) policy."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def _snapshot(r, batch) -> dict:
    """What must not depend on the initialisation path: outputs before and after one update."""
    from ragen2.learner.fsdp import full_state_dict

    ids = torch.tensor(IDS)
    out = {}
    with torch.no_grad():
        out["logits"] = r.model(input_ids=ids, use_cache=False).logits.clone()
        out["ref_logits"] = r.state.ref(input_ids=ids, use_cache=False).logits.clone()
    lm = _lm(r.model)
    out["tied"] = lm.lm_head.weight is lm.get_input_embeddings().weight
    out["params"] = [n for n, _ in r.model.named_parameters()]
    out["trainable"] = len(r.state.trainable)
    out["buffers"] = {n: b.clone() for n, b in r.model.named_buffers()}
    out["ref_buffers"] = {n: b.clone() for n, b in r.state.ref.named_buffers()}
    out["rng"] = torch.get_rng_state()
    out["metrics"] = r.update(batch, step=1)
    out["weights"] = {k: v.clone() for k, v in r.named_weights()}
    out["ref_state"] = full_state_dict(r.state.ref)
    if r.state.critic is not None:
        out["critic_state"] = full_state_dict(r.state.critic)
    with torch.no_grad():
        out["logits_after"] = r.model(input_ids=ids, use_cache=False).logits.clone()
        if r.state.critic is not None:  # the value head starts at zero: values only after the update
            out["values_after"] = r.state.critic(ids, torch.ones_like(ids)).clone()
    return out


def _worker(rank: int, path: str, rdv, out_dir: str) -> None:
    torch.set_num_threads(1)
    from ragen2.learner.rank import LearnerRank
    from ragen2.controller import learner_settings
    from ragen2.train import load_config

    result = {}
    default = LearnerRank.meta_init
    try:
        for name, extra in SCENARIOS.items():
            for meta in (False, True):
                LearnerRank.meta_init = meta
                torch.manual_seed(1234)  # both paths start from the same RNG state
                cfg = load_config(pinned(*BASE, *extra))
                r = LearnerRank(cfg, path, rank, 2, threads=1, settings=learner_settings(cfg))
                rdv.setup(r)
                try:
                    batch = _batch()  # token rewards: the critic has something to learn
                    batch["token_rewards"] = (batch["loss_mask"] * np.linspace(-1, 1, 20)).astype(np.float32)
                    result[name, meta] = _snapshot(r, batch)
                finally:
                    r.shutdown()
    finally:  # the other jobs of the shared spawn build as the code does by default
        LearnerRank.meta_init = default
    torch.save(result, f"{out_dir}/rank{rank}.pt")


def _close(a: torch.Tensor, b: torch.Tensor, what: str) -> None:
    torch.testing.assert_close(a, b, rtol=0, atol=1e-6, msg=lambda m: f"{what}: {m}")


def test_meta_init_equals_loading_on_every_rank(two_rank_results):
    """2 scenarios x 2 paths x 2 ranks, in the shared two-rank spawn."""
    ranks = list(two_rank_results["meta_init"])
    for name in SCENARIOS:
        for rank, res in enumerate(ranks):
            old, new = res[name, False], res[name, True]
            where = f"{name} rank {rank}"
            assert new["tied"] and old["tied"], where  # the output head is the embedding again
            assert new["params"] == old["params"] and new["trainable"] == old["trainable"], where
            assert torch.equal(new["rng"], old["rng"]), where  # setup draws nothing from the RNG
            # rotary inv_freq (a non-persistent buffer) equals what rank 0 loaded
            assert new["buffers"].keys() == old["buffers"].keys() and new["buffers"], where
            for k, v in old["buffers"].items():
                _close(new["buffers"][k], v, f"{where} buffer {k}")
                _close(new["buffers"][k], ranks[0][name, True]["buffers"][k], f"{where} {k} vs rank 0")
            for k, v in old["ref_buffers"].items():
                _close(new["ref_buffers"][k], v, f"{where} ref buffer {k}")
            for key in ("logits", "ref_logits", "logits_after", "values_after"):
                if key in old:
                    _close(new[key], old[key], f"{where} {key}")
            for key in ("actor/loss", "actor/grad_norm", "actor/kl_loss", "critic/vf_loss",
                        "critic/grad_norm"):
                if key in old["metrics"]:
                    assert new["metrics"][key] == pytest.approx(old["metrics"][key], rel=1e-6,
                                                                abs=1e-6), f"{where} {key}"
            for part in ("weights", "ref_state", "critic_state"):
                if part not in old:
                    continue
                assert new[part].keys() == old[part].keys(), f"{where} {part}"
                for k, v in old[part].items():
                    _close(new[part][k], v, f"{where} {part} {k}")
        # both ranks compute the same logits (each sees its own rows of a batch in training)
        _close(ranks[1][name, True]["logits"], ranks[0][name, True]["logits"], f"{name} rank 1 vs 0")
    ppo = ranks[0]["ppo", True]
    assert ppo["metrics"]["critic/grad_norm"] > 0 and "actor/kl_loss" in ppo["metrics"]
    assert not np.allclose(ppo["logits_after"].numpy(), ppo["logits"].numpy())  # the step moved
    assert ppo["values_after"][:, 1:].abs().min() > 0
