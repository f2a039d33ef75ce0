"""ragen2/learner/state.py: the policy's weights, its files and the warm start's hand-over, on a
toy LM whose logits are one bias vector (tests/learner/toy.py)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from ragen2.learner.state import (check_policy_keys, finish_warm_start, load_policy,
                                  policy_weights, save_policy)
from tests.learner.toy import BiasLM, toy_state


def test_policy_weights_are_a_copy_on_rank_0_only():
    s = toy_state(vocab=3)
    s.model.bias.data[:] = torch.tensor([1.0, 2.0, 3.0])
    w = policy_weights(s)
    assert list(w) == ["bias"] and w["bias"].tolist() == [1.0, 2.0, 3.0]
    s.model.bias.data[:] = 0.0
    assert w["bias"].tolist() == [1.0, 2.0, 3.0]  # never a view of the live weights
    assert policy_weights(replace(s, rank=1)) is None


def test_save_and_load_policy(tmp_path):
    a, b = toy_state(vocab=3), toy_state(vocab=3)
    a.model.bias.data[:] = torch.tensor([0.5, -1.0, 2.0])
    save_policy(a, str(tmp_path / "policy.pt"))
    load_policy(b, str(tmp_path / "policy.pt"))
    assert b.model.bias.detach().tolist() == [0.5, -1.0, 2.0]
    with pytest.raises(KeyError, match="full fine-tuning policy but this learner trains a LoRA"):
        load_policy(replace(b, lora=True), str(tmp_path / "policy.pt"))


def test_finish_warm_start_moves_the_reference():
    s = toy_state(vocab=3, ref=BiasLM(3))
    s.sft_optim = torch.optim.SGD(s.trainable, lr=1.0)
    s.model.bias.data[:] = torch.tensor([1.0, 2.0, 3.0])
    finish_warm_start(s)
    assert s.sft_optim is None and s.ref.bias.tolist() == [1.0, 2.0, 3.0]
    alone = toy_state(vocab=3, sft_optim=torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1))
    finish_warm_start(alone)  # no reference: the optimiser goes, nothing else
    assert alone.sft_optim is None and alone.ref is None


def test_policy_keys_of_a_checkpoint():
    full = toy_state(vocab=3)
    check_policy_keys(full, {"bias": torch.zeros(3)}, "ckpt")
    with pytest.raises(KeyError, match="holds LoRA adapters but this learner does full"):
        check_policy_keys(full, {"layer.lora_A.default.weight": torch.zeros(1)}, "ckpt")
    lora = replace(full, lora=True)  # its trainable parameters: {"bias"}
    check_policy_keys(lora, {"bias": torch.zeros(3)}, "ckpt")
    with pytest.raises(KeyError, match=r"missing=\['bias'\] unexpected=\['other'\]"):
        check_policy_keys(lora, {"other": torch.zeros(3)}, "ckpt")
    np.testing.assert_array_equal(full.model.bias.detach().numpy(), np.zeros(3))
