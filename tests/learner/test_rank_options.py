"""Learner memory/speed options never change an update; LoRA trains adapters and exports merged weights."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ragen2.batch import TrainingBatch
from ragen2.learner.forward import micro_batches
from ragen2.learner.fsdp import full_tensor
from ragen2.learner.rank import LearnerRank
from tests.learner.test_rank import _batch, _rank, _run

PROBE = [5, 17, 40, 3, 99, 12, 8, 230, 41, 41, 7, 300, 2, 64, 9, 10]


def _update_counting_recompute(path: str, *overrides: str) -> tuple[dict, int]:
    """Update metrics and how many times layer 0's attention ran (forward + any recompute)."""
    r = _rank(path, *overrides)
    calls = [0]
    r.model.model.layers[0].self_attn.register_forward_hook(
        lambda *_: calls.__setitem__(0, calls[0] + 1))
    batch = _batch()
    batch["token_rewards"] = (batch["loss_mask"] * np.linspace(-1, 1, 20)).astype(np.float32)
    try:
        return r.update(batch, step=1), calls[0]
    finally:
        r.shutdown()


def test_activation_checkpointing_recomputes_without_changing_the_update(tiny_model_path):
    ppo = ("algorithm.micro_batch_size=4", "algorithm.adv_estimator=gae")  # policy and critic
    base, n_base = _update_counting_recompute(tiny_model_path, *ppo)
    ac, n_ac = _update_counting_recompute(tiny_model_path, *ppo, "learner.activation_checkpointing=true")
    assert n_ac > n_base  # the backward pass re-ran the blocks: checkpointing is really on
    for key in ("actor/loss", "actor/grad_norm", "critic/vf_loss", "critic/grad_norm"):
        assert ac[key] == pytest.approx(base[key], rel=1e-5, abs=1e-7), key
    assert base["critic/grad_norm"] > 0


def test_lora_dropout_acts_in_gradient_passes_only(tiny_model_path):
    pytest.importorskip("peft")
    out = {}
    for p, ac in [(0.0, "false"), (0.5, "false"), (0.5, "true")]:
        r = _rank(tiny_model_path, *LORA, f"learner.lora.dropout={p}",
                  f"learner.activation_checkpointing={ac}")
        try:
            torch.manual_seed(0)  # the dropout masks
            out[p, ac] = r.update(_batch(), step=1)
            assert not any(m.training for m in r.model.modules())  # back in eval mode
        finally:
            r.shutdown()
    # old logprobs (hence the gap) are computed without dropout; B = 0 at the start, so the
    # outputs agree, but the adapters' gradients see the dropped-out inputs
    plain, drop, drop_ac = out[0.0, "false"], out[0.5, "false"], out[0.5, "true"]
    assert drop["actor/logprob_gap"] == pytest.approx(plain["actor/logprob_gap"], rel=1e-6)
    assert drop["actor/grad_norm"] != pytest.approx(plain["actor/grad_norm"], rel=1e-3)
    # the backward's recomputation replays the same dropout masks
    assert drop_ac["actor/grad_norm"] == pytest.approx(drop["actor/grad_norm"], rel=1e-5)


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean"])
def test_token_budget_micro_batches_do_not_change_the_update(tiny_model_path, agg):
    extra = [f"algorithm.loss_agg_mode={agg}", "algorithm.ppo_mini_batches=2"]
    m_rows, w_rows = _run(tiny_model_path, "algorithm.micro_batch_size=8", *extra)
    m_tok, w_tok = _run(tiny_model_path, "learner.micro_batch_tokens=40", *extra)
    assert m_tok["actor/loss"] == pytest.approx(m_rows["actor/loss"], rel=1e-5, abs=1e-7)
    assert m_tok["actor/grad_norm"] == pytest.approx(m_rows["actor/grad_norm"], rel=1e-5)
    for k in w_rows:
        np.testing.assert_allclose(w_tok[k], w_rows[k], atol=1e-5, err_msg=k)


def test_token_budget_is_respected(tiny_model_path):
    r = _rank(tiny_model_path, "learner.micro_batch_tokens=40")
    try:
        batch = _batch()
        lengths = batch["attention_mask"].sum(1)
        micros = micro_batches(r.state, TrainingBatch.of(batch), np.arange(6))
    finally:
        r.shutdown()
    assert sorted(i for m in micros for i in m.index) == list(range(6)) and all(
        m.real.all() for m in micros)
    assert len(micros) > 1
    for m in micros:
        assert len(m.index) * lengths[m.index].max() <= 40 or len(m.index) == 1


def test_eager_and_sdpa_attention_give_the_same_logprobs(tiny_model_path):
    out = {}
    for impl in ("eager", "sdpa"):
        r = _rank(tiny_model_path, f"learner.attn_implementation={impl}")
        try:
            assert r.model.config._attn_implementation == impl
            out[impl] = r.logprobs(PROBE)
        finally:
            r.shutdown()
    assert len(out["eager"]) == len(PROBE) - 1
    np.testing.assert_allclose(out["eager"], out["sdpa"], atol=1e-5)


def test_flash_attention_without_the_package_names_it(monkeypatch):
    import importlib.util

    from ragen2.learner.fsdp import check_attn_implementation

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "flash_attn" else real(name, *a))
    with pytest.raises(ImportError, match=r"flash_attn.*ragen2\[gpu\]"):
        check_attn_implementation("flash_attention_2")
    check_attn_implementation("sdpa")


def test_ragens_own_attention_is_registered_before_a_model_is_built():
    """In a fresh process (a learner rank) nothing has imported ragen2.learner.attention yet."""
    import subprocess
    import sys

    code = ("from transformers import AttentionInterface\n"
            "from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS as M\n"
            "from ragen2.learner.fsdp import check_attn_implementation\n"
            "n = 'sdpa_fp32_backward'\n"
            "before = n in AttentionInterface._global_mapping\n"
            "check_attn_implementation(n)\n"
            "print(before, n in AttentionInterface._global_mapping, n in M)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True", "True"]


def test_logprobs_and_run(tiny_model_path):
    from ragen2.algos import logprobs_from_logits
    from ragen2.models.loading import load_causal_lm

    r = _rank(tiny_model_path, "engine.temperature=0.7")  # logprobs() ignores the temperature
    try:
        got = r.logprobs(PROBE)
        assert r.run(lambda rank, x, y=0: (rank.rank, x + y), 2, y=3) == (0, 5)
    finally:
        r.shutdown()
    ids = torch.tensor([PROBE])
    with torch.no_grad():
        want = logprobs_from_logits(load_causal_lm(tiny_model_path)(input_ids=ids).logits[:, :-1],
                                    ids[:, 1:])[0]
    np.testing.assert_allclose(got, want.numpy(), atol=1e-5)
    with pytest.raises(ValueError, match="at least 2"):
        LearnerRank.logprobs(r, [1])


def test_score_with_lora_and_checkpointing(tiny_model_path):
    pytest.importorskip("peft")
    contexts, conts, columns = [list(range(5, 30))], [[7, 8, 9], [10] * 4], np.array([[0], [0]])
    got = {}
    for extra in [(), (*LORA, "learner.activation_checkpointing=true")]:
        r = _rank(tiny_model_path, *extra)
        try:
            got[extra] = r.score(contexts, conts, columns)
        finally:
            r.shutdown()
    plain, lora = got.values()  # B = 0 at the start: the LoRA policy is the base model
    assert [x[:2] for x in plain] == [x[:2] for x in lora]
    np.testing.assert_allclose([x[2] for x in plain], [x[2] for x in lora], atol=1e-5)


# ------------------------------------------------------------------------------------ LoRA
LORA = ("learner.lora.rank=4", "learner.lora.alpha=8")


def _sharded_state(r: LearnerRank) -> dict[str, torch.Tensor]:
    from ragen2.learner.fsdp import full_state_dict

    return full_state_dict(r.model)


def test_lora_update_trains_adapters_and_exports_merged_weights(tiny_model_path):
    pytest.importorskip("peft")
    from ragen2.models.loading import load_causal_lm

    base_model = load_causal_lm(tiny_model_path)
    base = base_model.state_dict()
    r = _rank(tiny_model_path, *LORA, "algorithm.kl_coef=0.1")
    try:
        trainable = {n for n, p in r.model.named_parameters() if p.requires_grad}
        assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
        assert {id(p) for g in r.state.optim.param_groups for p in g["params"]} == {
            id(p) for p in r.model.parameters() if p.requires_grad}
        assert dict(r.named_weights()).keys() == {n for n, _ in base_model.named_parameters()}
        m = r.update(_batch(), step=1)
        assert m["actor/grad_norm"] > 0
        merged = dict(r.named_weights())
        sd = _sharded_state(r)
        ref = {k: v.clone() for k, v in r.state.ref.state_dict().items()}  # the plain base model
        got = r.logprobs(PROBE)
    finally:
        r.shutdown()
    # names and shapes are the base model's; the engine loads them as it loads plain weights
    assert {k: tuple(v.shape) for k, v in merged.items()} == {
        k: tuple(base[k].shape) for k in merged}
    pre = "base_model.model."
    for name, w in merged.items():
        frozen = sd.get(f"{pre}{name}", sd.get(f"{pre}{name.replace('.weight', '.base_layer.weight')}"))
        frozen = frozen if frozen is not None else sd[f"{pre}{name.rsplit('.', 1)[0]}.base_layer.bias"]
        torch.testing.assert_close(frozen, base[name], rtol=0, atol=0, msg=name)  # base untouched
        layer = name.rsplit(".", 1)[0]
        if f"{pre}{layer}.lora_A.default.weight" in sd and name.endswith(".weight"):
            a, b = sd[f"{pre}{layer}.lora_A.default.weight"], sd[f"{pre}{layer}.lora_B.default.weight"]
            torch.testing.assert_close(w, base[name] + 2.0 * b @ a, msg=name)  # alpha / r = 2
            assert not torch.equal(w, base[name]), name  # the adapters reach the engine
        else:
            torch.testing.assert_close(w, base[name], rtol=0, atol=0, msg=name)
    for k, v in ref.items():  # the KL reference stays the base model
        torch.testing.assert_close(full_tensor(v), base[k])
    # an engine loading the merged weights computes what the LoRA policy computes
    missing, unexpected = base_model.load_state_dict(merged, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}
    ids = torch.tensor([PROBE])
    from ragen2.algos import logprobs_from_logits

    with torch.no_grad():
        engine = logprobs_from_logits(base_model(input_ids=ids).logits[:, :-1], ids[:, 1:])[0]
    np.testing.assert_allclose(got, engine.numpy(), atol=1e-5)


def _batch_v(version: int) -> dict[str, np.ndarray]:
    return {**_batch(), "policy_version": np.full(6, version, np.int64)}


def test_lora_checkpoint_resumes_exactly(tiny_model_path, tmp_path):
    pytest.importorskip("peft")
    a = _rank(tiny_model_path, *LORA)
    try:
        a.update(_batch_v(0), step=1)
        a.save(str(tmp_path))
        m_a = a.update(_batch_v(1), step=2)
        w_a = a.policy_weights()
    finally:
        a.shutdown()
    from ragen2.learner.sharded import read_model_state

    saved = read_model_state(tmp_path)
    assert saved and all(".lora_A." in k or ".lora_B." in k for k in saved)  # adapters only
    b = _rank(tiny_model_path, *LORA)
    try:
        assert b.load(str(tmp_path)) == 1
        m_b = b.update(_batch_v(1), step=2)
        w_b = b.policy_weights()
    finally:
        b.shutdown()
    assert m_b["actor/loss"] == m_a["actor/loss"] and m_b["actor/grad_norm"] == m_a["actor/grad_norm"]
    for k in w_a:
        np.testing.assert_array_equal(w_a[k], w_b[k], err_msg=k)
    c = _rank(tiny_model_path)  # a full fine-tuning learner refuses the adapter-only checkpoint
    try:
        with pytest.raises(KeyError, match="learner.lora"):
            c.load(str(tmp_path))
    finally:
        c.shutdown()


def test_lora_warm_start_trains_adapters_and_moves_the_reference(tiny_model_path, tmp_path):
    pytest.importorskip("peft")
    from ragen2.models.loading import load_causal_lm

    base = load_causal_lm(tiny_model_path).state_dict()
    r = _rank(tiny_model_path, *LORA, "algorithm.kl_coef=0.1")
    try:
        batch = _batch()
        m = r.sft_step(batch, np.arange(6), lr=1e-2)
        r.finish_warm_start()
        merged = dict(r.named_weights())
        ref = {k: full_tensor(v) for k, v in r.state.ref.state_dict().items()}
        r.save_policy(str(tmp_path / "policy.pt"))  # the warm-start cache
    finally:
        r.shutdown()
    cached = _rank(tiny_model_path, *LORA)
    try:
        cached.load_policy(str(tmp_path / "policy.pt"))
        for k, v in cached.named_weights():
            torch.testing.assert_close(v, merged[k], rtol=0, atol=0, msg=k)
    finally:
        cached.shutdown()
    plain = _rank(tiny_model_path)
    try:
        with pytest.raises(KeyError, match="learner.lora"):
            plain.load_policy(str(tmp_path / "policy.pt"))
    finally:
        plain.shutdown()
    assert m["warm_start/grad_norm"] > 0
    changed = [k for k in merged if not torch.equal(merged[k], base[k])]
    assert changed and all("proj" in k for k in changed)  # only adapted layers moved
    for k, v in merged.items():  # the KL reference is now the warm-started (merged) policy
        torch.testing.assert_close(ref[k], v, rtol=0, atol=0, msg=k)


PPO_KL = ("algorithm=ppo", "algorithm.kl_coef=0.05")


def _token_batch_v(version: int) -> dict[str, np.ndarray]:
    batch = _batch_v(version)  # token rewards: the critic has something to learn
    batch["token_rewards"] = (batch["loss_mask"] * np.linspace(-1, 1, 20)).astype(np.float32)
    return batch


def test_ppo_checkpoint_with_critic_and_reference_resumes_exactly(tiny_model_path, tmp_path):
    """algorithm=ppo with a KL reference: the checkpoint holds policy, critic and reference with
    their optimisers, and a learner loaded from it makes the same next update (actor and critic
    metrics, policy and critic weights) as the learner that wrote it."""
    from ragen2.learner.fsdp import full_state_dict

    a = _rank(tiny_model_path, *PPO_KL)
    try:
        assert a.state.critic is not None and a.state.ref is not None
        a.update(_token_batch_v(0), step=1)
        a.save(str(tmp_path))
        m_a = a.update(_token_batch_v(1), step=2)
        w_a, c_a = a.policy_weights(), full_state_dict(a.state.critic)
    finally:
        a.shutdown()
    assert {"policy", "critic", "ref"} <= {p.name for p in tmp_path.iterdir()}  # sharded (DCP)
    b = _rank(tiny_model_path, *PPO_KL)
    try:
        assert b.load(str(tmp_path)) == 1
        m_b = b.update(_token_batch_v(1), step=2)
        w_b, c_b = b.policy_weights(), full_state_dict(b.state.critic)
    finally:
        b.shutdown()
    for key in ("actor/loss", "actor/grad_norm", "actor/kl_loss", "critic/vf_loss"):
        assert m_b[key] == m_a[key], key
    for k in w_a:
        np.testing.assert_array_equal(w_a[k], w_b[k], err_msg=k)
    for k in c_a:
        assert torch.equal(c_a[k], c_b[k]), k
