"""HF engine: sampled ids/logprobs agree with a teacher-forced forward pass; stops; seeding."""

from __future__ import annotations

import torch

from ragen2.engines.base import SamplingParams


def _prompts(tok):
    texts = ["<|im_start|>user\nP _ _\n_ O G<|im_end|>\n<|im_start|>assistant\n",
             "<|im_start|>user\nYou are at row 1, column 3.<|im_end|>\n<|im_start|>assistant\n<think>",
             "<|im_start|>assistant\n"]
    return [tok.encode(t, add_special_tokens=False) for t in texts]


def test_logprobs_match_teacher_forcing(hf_engine):
    tok = hf_engine.tokenizer
    prompts = _prompts(tok)
    params = SamplingParams(temperature=0.7, max_new_tokens=12, stop=(), seed=3)
    gens = hf_engine.generate(prompts, params)
    for p, g in zip(prompts, gens):
        assert len(g.token_ids) == len(g.logprobs) >= 1
        ids = torch.tensor([p + g.token_ids])
        with torch.no_grad():
            logits = hf_engine.model(input_ids=ids).logits[0, len(p) - 1:-1] / 0.7
        ref = torch.log_softmax(logits, -1).gather(-1, torch.tensor(g.token_ids)[:, None])[:, 0]
        assert torch.allclose(torch.tensor(g.logprobs), ref, atol=1e-4), (g.logprobs, ref)


def test_same_seed_same_samples_and_different_seed_differs(hf_engine):
    prompts = _prompts(hf_engine.tokenizer)
    a = hf_engine.generate(prompts, SamplingParams(max_new_tokens=16, stop=(), seed=1))
    b = hf_engine.generate(prompts, SamplingParams(max_new_tokens=16, stop=(), seed=1))
    c = hf_engine.generate(prompts, SamplingParams(max_new_tokens=16, stop=(), seed=2))
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    assert [g.token_ids for g in a] != [g.token_ids for g in c]


def test_greedy_and_length_cap(hf_engine):
    prompts = _prompts(hf_engine.tokenizer)
    g1 = hf_engine.generate(prompts, SamplingParams(temperature=0, max_new_tokens=5, stop=()))
    g2 = hf_engine.generate(prompts, SamplingParams(temperature=0, max_new_tokens=5, stop=(), seed=9))
    assert [g.token_ids for g in g1] == [g.token_ids for g in g2]
    assert all(len(g.token_ids) <= 5 for g in g1)
    assert all(g.finish_reason in ("length", "eos") for g in g1)


def test_stops_at_stop_string(hf_engine):
    """Weights are set so the model can only emit '</answer>': generation must end right there."""
    tok = hf_engine.tokenizer
    stop_id = tok.convert_tokens_to_ids("</answer>")
    bias = torch.full((hf_engine.model.config.vocab_size,), -1e4)
    bias[stop_id] = 0
    hook = hf_engine.model.lm_head.register_forward_hook(lambda m, i, o: o + bias)
    try:
        gens = hf_engine.generate(_prompts(tok), SamplingParams(max_new_tokens=8, seed=0))
    finally:
        hook.remove()
    for g in gens:
        assert g.token_ids == [stop_id] and g.finish_reason == "stop"
        assert g.text == "</answer>"


def test_load_weights_sets_version_and_changes_output(hf_engine):
    import numpy as np

    sd = {k: v.detach().numpy().copy() for k, v in hf_engine.model.state_dict().items()}
    before = hf_engine.generate(_prompts(hf_engine.tokenizer), SamplingParams(temperature=0, stop=(), max_new_tokens=4))
    noisy = {k: (v + np.random.default_rng(0).normal(0, 0.5, v.shape)).astype(np.float32) for k, v in sd.items()}
    try:
        hf_engine.load_weights(noisy, version=5)
        assert hf_engine.policy_version == 5
        after = hf_engine.generate(_prompts(hf_engine.tokenizer), SamplingParams(temperature=0, stop=(), max_new_tokens=4))
        assert [g.logprobs for g in before] != [g.logprobs for g in after]
    finally:
        hf_engine.load_weights(sd, version=0)


def _greedy_reference(model, prompt: list[int], n: int) -> list[int]:
    """Greedy continuation from the raw logits, one forward pass per token (no generate)."""
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            ids.append(int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[len(prompt):]


def test_the_models_shipped_generation_config_is_not_applied(tiny_model_path, tmp_path):
    """A generation_config.json with a repetition penalty (Qwen2.5-Instruct ships 1.05-1.1) and
    no-repeat-ngram: the engine samples what SamplingParams say, from the raw logits."""
    import json
    import shutil

    from ragen2.engines.hf import HFEngine

    shutil.copytree(tiny_model_path, tmp_path / "m")
    (tmp_path / "m" / "generation_config.json").write_text(json.dumps(
        {"repetition_penalty": 10.0, "no_repeat_ngram_size": 1, "top_k": 1, "temperature": 0.2}))
    engine = HFEngine(str(tmp_path / "m"))
    assert engine.shipped_generation_config.repetition_penalty == 10.0  # it was read ...
    prompts = _prompts(engine.tokenizer)
    n = 12
    gens = engine.generate(prompts, SamplingParams(temperature=0, max_new_tokens=n, stop=()))
    repeats = 0
    for p, g in zip(prompts, gens):
        ref = _greedy_reference(engine.model, p, len(g.token_ids))
        assert g.token_ids == ref  # ... and not applied: the penalty would forbid any repeat
        repeats += len(ref) - len(set(ref))
    assert repeats > 0, "no greedy continuation repeats a token: the test cannot see a penalty"
    # sampled at T=0.7 (the shipped top_k=1 / temperature would make it greedy at T=0.2): the
    # logprobs are the policy's, log softmax(logits / 0.7) at the sampled ids
    params = SamplingParams(temperature=0.7, max_new_tokens=n, stop=(), seed=4)
    sampled = engine.generate(prompts, params)
    greedy_ids = [g.token_ids for g in gens]
    assert [g.token_ids for g in sampled] != greedy_ids
    for p, g in zip(prompts, sampled):
        with torch.no_grad():
            logits = engine.model(input_ids=torch.tensor([p + g.token_ids])).logits[0, len(p) - 1:-1]
        ref = torch.log_softmax(logits / 0.7, -1).gather(-1, torch.tensor(g.token_ids)[:, None])[:, 0]
        assert torch.allclose(torch.tensor(g.logprobs), ref, atol=1e-4)


def test_logprobs_are_gathered_as_generation_proceeds(hf_engine, monkeypatch):
    """No (batch, new tokens, vocabulary) stack of logits is asked of generate."""
    seen = {}
    real = hf_engine.model.generate

    def spy(*args, **kwargs):
        seen.update(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(hf_engine.model, "generate", spy)
    gens = hf_engine.generate(_prompts(hf_engine.tokenizer),
                              SamplingParams(max_new_tokens=6, stop=(), top_logprobs=3))
    assert not seen.get("output_logits") and not seen.get("output_scores")
    assert not seen.get("return_dict_in_generate")
    for g in gens:
        assert len(g.top_logprobs) == len(g.token_ids) and all(len(d) == 3 for d in g.top_logprobs)
        for lp, d in zip(g.logprobs, g.top_logprobs):
            assert max(d.values()) >= lp - 1e-6  # the sampled token is at most the likeliest


def test_top_p_mask_keeps_the_smallest_set_covering_p():
    from ragen2.engines.hf import _top_p_mask

    probs = torch.tensor([[0.15, 0.5, 0.05, 0.3]])
    logits = probs.log()
    logp = torch.log_softmax(logits, -1)
    kept = lambda p: (_top_p_mask(logits, logp, p) > float("-inf"))[0].tolist()  # noqa: E731
    assert kept(0.4) == [False, True, False, False]   # 0.5 alone covers 0.4
    assert kept(0.7) == [False, True, False, True]    # 0.5 + 0.3
    assert kept(0.9) == [True, True, False, True]     # 0.5 + 0.3 + 0.15 = 0.95
    assert kept(1.0) == [True, True, True, True]


def test_chunked_generation(hf_engine, monkeypatch):
    """engine.hf_max_batch splits a call's prompts into chunks. Greedy: the same ids (and
    logprobs) as one batch. Sampled: a call with no more prompts than the batch is one batch,
    seeded as before; a chunked call is reproducible, and chunk k (starting at prompt s) samples
    exactly what one batch of its prompts samples under request_seed(seed, s); rows past the first
    chunk sample differently from one batch (all rows of a chunk share one torch stream)."""
    from ragen2.seeding import request_seed

    prompts = _prompts(hf_engine.tokenizer) * 2  # 6 prompts
    greedy = SamplingParams(temperature=0, max_new_tokens=8, stop=())
    sampled = SamplingParams(temperature=1.0, max_new_tokens=8, stop=(), seed=5)
    assert hf_engine.max_batch_size == 256
    one_greedy, one = hf_engine.generate(prompts, greedy), hf_engine.generate(prompts, sampled)
    assert one == hf_engine._generate_batch(prompts, sampled, seed=request_seed(5, 0))
    monkeypatch.setattr(hf_engine, "max_batch_size", 4)
    chunked = hf_engine.generate(prompts, greedy)
    assert [g.token_ids for g in chunked] == [g.token_ids for g in one_greedy]
    for a, b in zip(chunked, one_greedy):
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5)
    monkeypatch.setattr(hf_engine, "max_batch_size", 6)  # = the prompts: one batch, as before
    assert hf_engine.generate(prompts, sampled) == one
    monkeypatch.setattr(hf_engine, "max_batch_size", 4)
    four = hf_engine.generate(prompts, sampled)
    assert four == hf_engine.generate(prompts, sampled)  # reproducible
    assert four == (hf_engine._generate_batch(prompts[:4], sampled, seed=request_seed(5, 0))
                    + hf_engine._generate_batch(prompts[4:], sampled, seed=request_seed(5, 4)))
    assert [g.token_ids for g in four] != [g.token_ids for g in one]


def test_the_batch_comes_from_the_engine_config(tiny_model_path):
    from ragen2.config import EngineConfig
    from ragen2.engines import ENGINES

    engine = ENGINES.get("hf")(tiny_model_path, options=EngineConfig(hf_max_batch=3))
    assert engine.max_batch_size == 3
    assert ENGINES.get("hf")(tiny_model_path, options=EngineConfig()).max_batch_size == 256
