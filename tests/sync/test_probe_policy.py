"""The post-sync checks' rules without engines: the probe's floor policy (hand-worked numbers) and
the exact checksums (hand-computed bits, stand-in engines and learner ranks)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from ragen2.config import Config
from ragen2.sync import ProbePolicy, WeightSyncError


# ------------------------------------------------------------------------------ probe policy
def test_bf16_gap_with_identical_weights_is_the_floor_not_a_failure():
    """verl-omni #637 measured a mean 6.4e-2 nats between HF+FSDP2 and vLLM in bf16 on the same
    weights: with the defaults the first probe takes it as the floor (the former fixed 3e-2
    tolerance stopped the run here), and a later sync fails only above 4 x 0.064 = 0.256."""
    c = Config()
    policy = ProbePolicy(c.sync.tolerance("bfloat16"), c.sync.probe_floor_multiple)
    m = policy.check([(0.05, 0.4), (0.064, 0.9)], version=0)  # two engines: the worst counts
    assert m["sync/probe_floor"] == pytest.approx(0.064) and policy.floor == pytest.approx(0.064)
    assert m["sync/probe_threshold"] == pytest.approx(0.256)
    assert m["sync/probe_logprob_gap"] == 0.064 and m["sync/probe_logprob_gap_max"] == 0.9
    assert policy.check([(0.25, 1.0)], version=1)["sync/probe_logprob_gap"] == 0.25
    with pytest.raises(WeightSyncError, match=r"policy version 2.*0\.26.*allowed 0\.256.*floor 0\.064"):
        policy.check([(0.01, 0.1), (0.26, 1.0)], version=2)
    assert policy.floor == pytest.approx(0.064)  # later probes never move the floor


def test_the_absolute_minimum_holds_below_a_tiny_floor():
    policy = ProbePolicy(tolerance=1e-3, multiple=4.0)  # fp32: the floor is float noise
    policy.check([(2e-7, 1e-6)], version=0)
    assert policy.threshold() == 1e-3  # max(4 x 2e-7, 1e-3)
    policy.check([(9e-4, 5e-3)], version=1)
    with pytest.raises(WeightSyncError):
        policy.check([(1.1e-3, 5e-3)], version=2)


def test_a_floor_above_its_cap_means_the_engine_computes_something_else():
    """A stale tied output head gave 0.85 nats on identical weights: more than 4 x 0.1 (bf16)."""
    policy = ProbePolicy(tolerance=0.1, multiple=4.0)
    with pytest.raises(WeightSyncError, match="floor measured with identical weights may be at "
                                              "most sync.probe_floor_multiple=4"):
        policy.check([(0.85, 3.0)], version=0)
    assert policy.floor is None
    with pytest.raises(WeightSyncError):
        ProbePolicy(0.1, 4.0).check([(math.nan, math.nan)], version=0)


def test_probe_floor_multiple_must_be_at_least_one():
    from ragen2.train import load_config

    with pytest.raises(ValueError, match="sync.probe_floor_multiple"):
        load_config(["sync.probe_floor_multiple=0.5"])


# ------------------------------------------------------------------------------ checksums
def test_checksum_of_hand_computed_bits():
    from ragen2.sync.checksum import tensor_checksum

    # bf16 1.0 = 0x3F80 = 16256, -2.0 = 0xC000 = -16384 as int16; position weights 1, 2
    assert tensor_checksum(torch.tensor([1.0, -2.0], dtype=torch.bfloat16)) == 16256 - 2 * 16384
    x = torch.randn(1000)
    y = x.clone()
    y[500] = torch.nextafter(y[500], torch.tensor(math.inf))  # one ulp: one bit
    assert tensor_checksum(x) != tensor_checksum(y)
    assert tensor_checksum(x.reshape(10, 100)) == tensor_checksum(x)
    assert tensor_checksum(x.flip(0)) != tensor_checksum(x)  # positions count
    assert tensor_checksum(torch.zeros(0)) == 0


def test_checksum_names_pick_norms_and_the_last_row_parallel_projections():
    from ragen2.sync.checksum import checksum_names

    names = ["model.embed_tokens.weight"]
    for i in range(4):
        names += [f"model.layers.{i}.input_layernorm.weight",
                  f"model.layers.{i}.self_attn.q_proj.weight",
                  f"model.layers.{i}.self_attn.o_proj.weight",
                  f"model.layers.{i}.mlp.down_proj.weight",
                  f"model.layers.{i}.post_attention_layernorm.weight"]
    names.append("model.norm.weight")
    assert checksum_names(names) == [
        "model.norm.weight", "model.layers.0.input_layernorm.weight",
        "model.layers.0.post_attention_layernorm.weight", "model.layers.3.input_layernorm.weight",
        "model.layers.3.post_attention_layernorm.weight", "model.layers.3.self_attn.o_proj.weight",
        "model.layers.3.mlp.down_proj.weight"]


def _learner_weights() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {"model.layers.0.input_layernorm.weight": 1 + 0.1 * torch.randn(8, generator=g),
            "model.layers.0.self_attn.o_proj.weight": torch.randn(8, 6, generator=g),
            "model.norm.weight": 1 + 0.1 * torch.randn(8, generator=g)}


class _Rank:
    def __init__(self, weights):
        self.rank, self.weights = 0, weights

    def named_weights(self, device="cpu", dtype=None, names=None):
        return [(k, v) for k, v in self.weights.items() if names is None or k in names]


def test_a_stale_engine_is_caught_whatever_the_numerics():
    """The learner moved each weight by one ulp (far below any probe's noise) and the engine
    kept the old ones: every checked tensor is named. After the engine loads the new weights,
    nothing differs."""
    from ragen2.sync.checksum import engine_reports, learner_mismatches

    old = _learner_weights()
    new = {k: torch.nextafter(v, torch.tensor(math.inf)) for k, v in old.items()}
    model = SimpleNamespace(state_dict=lambda: engine_state)
    worker = SimpleNamespace(engine=SimpleNamespace(model=model))
    engine_state = {k: v.clone() for k, v in old.items()}
    names = list(new)
    bad = learner_mismatches(_Rank(new), [engine_reports(worker, names)])
    assert len(bad) == 3 and all(b.startswith("worker 0 process 0: model.") for b in bad)
    engine_state = {k: v.clone() for k, v in new.items()}
    assert learner_mismatches(_Rank(new), [engine_reports(worker, names)]) == []
