"""ragen2/learner/build.py: what building a rank's models gives (its typed state), and the
optimiser and precision it chooses, by hand."""

from __future__ import annotations

from dataclasses import replace

import torch

from ragen2.config import Config
from ragen2.learner.build import mixed_precision, new_optimizer
from tests.learner.test_rank import _rank


def test_mixed_precision_follows_the_model_dtype():
    cfg = Config()
    assert mixed_precision(cfg) is None  # float32: no FSDP precision policy
    assert mixed_precision(replace(cfg, model=replace(cfg.model, dtype="bfloat16"))) == "bfloat16"


def test_new_optimizer_is_adamw_over_the_given_parameters():
    cfg = Config()
    w = [torch.nn.Parameter(torch.zeros(2))]
    opt = new_optimizer(w, replace(cfg.algorithm, weight_decay=0.1), lr=0.25)
    assert isinstance(opt, torch.optim.AdamW)
    group = opt.param_groups[0]
    assert group["params"] == w and group["lr"] == 0.25 and group["weight_decay"] == 0.1
    assert group["foreach"] is True


def test_build_models_gives_the_ranks_state(tiny_model_path):
    r = _rank(tiny_model_path)  # GRPO, no KL, fp32 on one rank
    try:
        s = r.state
        assert (s.rank, s.world_size, s.version, s.device.type) == (0, 1, 0, "cpu")
        assert not s.sharded and not s.lora and not s.lora_dropout  # fp32 on one rank: not sharded
        assert s.ref is None and s.critic is None and s.critic_optim is None and s.sft_optim is None
        assert s.trainable == list(s.model.parameters())  # full fine-tuning: every weight
        assert s.optim.param_groups[0]["params"] == s.trainable
        assert s.optim.param_groups[0]["lr"] == r.cfg.algorithm.lr
        assert s.logits_to_keep  # a transformers causal LM takes logits_to_keep
    finally:
        r.shutdown()
    r = _rank(tiny_model_path, "algorithm=ppo", "algorithm.kl_coef=0.05")
    try:
        s = r.state
        assert s.ref is not None and not any(p.requires_grad for p in s.ref.parameters())
        assert s.critic is not None and s.critic_optim.param_groups[0]["lr"] == r.cfg.algorithm.critic_lr
        for a, b in zip(s.ref.parameters(), s.model.parameters()):  # the reference starts as the policy
            assert torch.equal(a, b)
    finally:
        r.shutdown()
