"""The scorer's shared-context ("cascade") attention on the CPU: the attention a row would get
over a copy of its context's cache, from two attentions merged by log-sum-exp; the scores the
generic forward gives, in fp32 and bf16, for Llama and Qwen2, plain and inside a bf16 FSDP2 rank;
and the generic forward wherever the cascade does not reproduce the model."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from ragen2.learner import cascade


def _naive(q, k, v, ctx_k, ctx_v, owner, ctx_len, scale):
    """Row by row: softmax over cat(the context's real keys, the row's own keys), causal on
    the row's part, in float64."""
    out = torch.empty(q.shape, dtype=torch.float64)
    g = q.shape[1] // k.shape[1]
    t = q.shape[2]
    for r in range(q.shape[0]):
        i, n = int(owner[r]), int(ctx_len[owner[r]])
        keys = torch.cat([ctx_k[i, :, :n], k[r]], dim=1).double().repeat_interleave(g, 0)
        vals = torch.cat([ctx_v[i, :, :n], v[r]], dim=1).double().repeat_interleave(g, 0)
        s = q[r].double() @ keys.transpose(1, 2) * scale  # (H, T, n + T)
        future = torch.arange(t)[None, :] > torch.arange(t)[:, None]  # own key after the query
        s[:, :, n:] = s[:, :, n:].masked_fill(future, float("-inf"))
        out[r] = torch.softmax(s, -1) @ vals
    return out


def test_cascade_attention_is_attention_over_the_context_then_the_row():
    """Two contexts of real lengths 5 and 9 (padding after them filled with large values that
    must not be read), five rows in mixed order, grouped-query heads (4 query heads, 2 key/value
    heads): equal to a float64 row-by-row softmax attention."""
    gen = torch.Generator().manual_seed(0)
    rows, heads, hkv, t, d, length = 5, 4, 2, 3, 8, 11
    q = torch.randn(rows, heads, t, d, generator=gen)
    k, v = (torch.randn(rows, hkv, t, d, generator=gen) for _ in range(2))
    ctx_k, ctx_v = (torch.randn(2, hkv, length, d, generator=gen) for _ in range(2))
    ctx_len = torch.tensor([5, 9])
    ctx_k[0, :, 5:], ctx_v[0, :, 5:] = 50.0, 1e3  # padding: read, it would dominate
    owner = torch.tensor([1, 0, 1, 1, 0])
    got = cascade.cascade_attention(q, k, v, ctx_k, ctx_v, owner, ctx_len, d ** -0.5)
    assert got.shape == q.shape and got.dtype == q.dtype
    want = _naive(q, k, v, ctx_k, ctx_v, owner, ctx_len, d ** -0.5)
    torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=1e-5)


def _model(kind: str, dtype: torch.dtype, **extra):
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    config, model = {"llama": (LlamaConfig, LlamaForCausalLM),
                     "qwen2": (Qwen2Config, Qwen2ForCausalLM)}[kind]
    torch.manual_seed(0)
    cfg = config(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                 **extra)
    return sharpened(model(cfg).eval().to(dtype))


def sharpened(model, factor: float = 20.0):
    """``model`` with its query and key projections scaled by ``factor``: a random model's
    attention is near uniform, which hides a wrong position or a wrong key; this one's is not."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("q_proj.weight", "k_proj.weight")):
                p.mul_(factor)
    return model


def _items(seed: int = 0):
    rng = random.Random(seed)
    return [([rng.randrange(3, 97) for _ in range(rng.randint(1, 30))],
             [[rng.randrange(3, 97) for _ in range(rng.randint(0, 12))]
              for _ in range(rng.randint(1, 7))]) for _ in range(6)]


def _both(model, monkeypatch, items, budget=40):
    """score_batched by the cascade, then by the generic forward (the cascade switched off),
    and how many row slices the cascade computed."""
    import ragen2.learner.scoring as scoring

    calls = []
    real = cascade.rows_logits
    monkeypatch.setattr(cascade, "rows_logits", lambda *a: calls.append(1) or real(*a))
    with torch.no_grad():
        fast = scoring.score_batched(model, items, token_budget=budget, temperature=0.7)
        monkeypatch.setattr(cascade, "applies", lambda *a: False)
        slow = scoring.score_batched(model, items, token_budget=budget, temperature=0.7)
    monkeypatch.undo()
    return fast, slow, len(calls)


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-4), (torch.bfloat16, 0.03)])
def test_cascade_scores_what_the_generic_forward_scores(kind, dtype, tol, monkeypatch):
    """Six contexts of 1-30 tokens, 0-12-token continuations (some empty, some one token), in
    slices of 40 padded tokens: the cascade's summed logprobs equal the generic forward's to
    float rounding (fp32: 1e-4; bf16: 0.03 nats, sums of ~50)."""
    model = _model(kind, dtype)
    assert cascade.applies(model, "cpu") is False  # autograd on: the generic forward
    with torch.no_grad():
        assert cascade.applies(model, "cpu")
    items = _items()
    fast, slow, calls = _both(model, monkeypatch, items)
    assert calls > 0
    for (a, n), (b, m) in zip(fast, slow):
        assert n.tolist() == m.tolist() and a.dtype == torch.float32
        torch.testing.assert_close(a, b, atol=tol, rtol=0)
    assert max(float(b.abs().max()) for b, _ in slow if len(b)) > 10  # not vacuous


@pytest.mark.parametrize("kind,extra", [("qwen2", {"use_sliding_window": True, "sliding_window": 4,
                                                   "max_window_layers": 0}),
                                        ("llama", {"attention_dropout": 0.1})])
def test_models_the_cascade_does_not_reproduce_keep_the_generic_forward(kind, extra):
    with torch.no_grad():
        assert not cascade.applies(_model(kind, torch.float32, **extra), "cpu")
        assert not cascade.applies(_model(kind, torch.float32), "meta")  # not the CPU


def test_a_gpt2_keeps_the_generic_forward():
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(vocab_size=50, n_embd=16, n_layer=1, n_head=2)).eval()
    with torch.no_grad():
        assert not cascade.applies(model, "cpu")


def test_a_bf16_fsdp_rank_scores_by_the_cascade_what_the_generic_forward_scores(
        tiny_model_path, monkeypatch):
    """The default job's scoring: the tiny model on a learner rank in ``model.dtype=bfloat16``
    (FSDP2 mixed precision, parameters gathered for the call): the cascade runs in bf16 and
    scores what the generic forward does, to bf16 rounding."""
    from tests.learner.test_rank import _rank

    rank = _rank(tiny_model_path, "model.dtype=bfloat16")  # one rank, no training run
    sharpened(rank.state.model)  # (its sharded fp32 parameters)
    rng, vocab = np.random.default_rng(0), rank.state.model.config.vocab_size
    contexts = [rng.integers(3, vocab, n).tolist() for n in (40, 25, 60)]
    conts = [rng.integers(3, vocab, n).tolist() for n in (7, 12, 1, 9)]
    columns = np.array([[0, 1, 2]] * len(conts))
    dtypes = []
    real = cascade.rows_logits

    def recording(*args):
        logits = real(*args)
        dtypes.append(logits.dtype)
        return logits

    try:
        monkeypatch.setattr(cascade, "rows_logits", recording)
        fast = rank.score(contexts, conts, columns)
        monkeypatch.setattr(cascade, "applies", lambda *a: False)
        slow = rank.score(contexts, conts, columns)
    finally:
        rank.shutdown()
    assert dtypes and set(dtypes) == {torch.bfloat16}
    assert [(s, k, n) for s, k, _, n in fast] == [(s, k, n) for s, k, _, n in slow]
    diff = max(abs(a[2] - b[2]) for a, b in zip(fast, slow))
    assert diff < 0.05, diff
    assert max(abs(b[2]) for b in slow) > 20  # ~log(vocabulary) a token: not vacuous
