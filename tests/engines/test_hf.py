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
