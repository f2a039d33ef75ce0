"""Weight export: base-model names and shapes, LoRA merged exactly (checked against peft's own merge)."""

from __future__ import annotations

import copy

import pytest
import torch

from ragen2.config import LoraConfig
from ragen2.learner.weights import export_plan, merge_lora, named_full_weights

pytest.importorskip("peft")


def _base(path):
    from ragen2.models.loading import load_causal_lm

    return load_causal_lm(path, dtype="float32")


def _engine_names(model) -> set[str]:
    """What an HF engine needs: its state dict minus the second name of tied weights."""
    return {n for n, _ in model.named_parameters()} | {n for n, _ in model.named_buffers()
                                                       if n in model.state_dict()}


def test_merge_lora_by_hand():
    w = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    a = torch.tensor([[1.0, 0.0]])  # (r=1, in=2)
    b = torch.tensor([[2.0], [-1.0]])  # (out=2, r=1)
    # B @ A = [[2, 0], [-1, 0]]; scale 0.5 adds [[1, 0], [-0.5, 0]]
    torch.testing.assert_close(merge_lora(w, a, b, 0.5), torch.tensor([[2.0, 2.0], [2.5, 4.0]]))
    torch.testing.assert_close(merge_lora(w.T, a, b, 0.5, fan_in_fan_out=True),
                               torch.tensor([[2.0, 2.0], [2.5, 4.0]]).T)


def test_plain_export_is_the_state_dict_with_tied_weights_once(tiny_model_path):
    model = _base(tiny_model_path)
    out = dict(named_full_weights(model))
    assert set(out) == _engine_names(model)
    assert "lm_head.weight" not in out  # tied to model.embed_tokens.weight
    for k, v in out.items():
        torch.testing.assert_close(v, model.state_dict()[k], rtol=0, atol=0)


def test_lora_export_is_merged_under_base_names(tiny_model_path):
    base = _base(tiny_model_path)
    from ragen2.learner.lora import wrap_lora

    model = wrap_lora(copy.deepcopy(base), LoraConfig(rank=4, alpha=8.0,
                                                      target_modules=["q_proj", "down_proj"]))
    torch.manual_seed(0)
    with torch.no_grad():  # B starts at 0 (merged == base); give it values
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_()
    out = dict(named_full_weights(model, dtype=torch.float64))
    assert set(out) == _engine_names(base)
    assert {k: v.shape for k, v in out.items()} == {k: v.shape for k, v in base.state_dict().items()
                                                    if k in out}
    assert all(v.dtype == torch.float64 for v in out.values())
    # independent reference: peft's own merge of the same adapters
    merged = copy.deepcopy(model).merge_and_unload().state_dict()
    for k, v in out.items():
        torch.testing.assert_close(v.float(), merged[k], rtol=1e-6, atol=1e-6, msg=k)
    # and the formula by hand, for one layer: W + (alpha / r) * B @ A
    sd = model.state_dict()
    pre = "base_model.model.model.layers.1.mlp.down_proj"
    want = sd[f"{pre}.base_layer.weight"] + 2.0 * sd[f"{pre}.lora_B.default.weight"] @ sd[
        f"{pre}.lora_A.default.weight"]
    torch.testing.assert_close(out["model.layers.1.mlp.down_proj.weight"].float(), want)
    assert not torch.equal(out["model.layers.1.mlp.down_proj.weight"].float(),
                           base.state_dict()["model.layers.1.mlp.down_proj.weight"])
    torch.testing.assert_close(out["model.layers.1.mlp.up_proj.weight"].float(),  # not adapted
                               base.state_dict()["model.layers.1.mlp.up_proj.weight"], rtol=0, atol=0)
    lora_entries = [e for e in export_plan(model) if e.lora_a is not None]
    assert len(lora_entries) == 2 * base.config.num_hidden_layers
    assert all(e.scale == 2.0 for e in lora_entries)


def test_lora_init_does_not_depend_on_the_global_rng(tiny_model_path):
    from ragen2.learner.lora import wrap_lora

    cfg = LoraConfig(rank=2, target_modules=["v_proj"])
    torch.manual_seed(1)
    a = wrap_lora(_base(tiny_model_path), cfg).state_dict()
    torch.manual_seed(2)
    b = wrap_lora(_base(tiny_model_path), cfg).state_dict()
    after = torch.rand(1)
    torch.manual_seed(2)
    assert torch.equal(after, torch.rand(1))  # the global stream is left as it was
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0, msg=k)
    assert not any(m.training for m in wrap_lora(_base(tiny_model_path), cfg).modules())


def test_wrap_lora_names_a_bad_target(tiny_model_path):
    from ragen2.learner.lora import wrap_lora

    with pytest.raises(ValueError, match="learner.lora.target_modules"):
        wrap_lora(_base(tiny_model_path), LoraConfig(rank=2, target_modules=["no_such_proj"]))
