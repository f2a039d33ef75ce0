"""``sdpa_fp32_backward``: the forward is SDPA's, bit for bit; the backward runs in float32 and its
gradients are at least as close to exact (float64) as the bfloat16 backward's."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from ragen2.learner.attention import NAME, flash_fp32_backward


def _qkv(b: int, t: int, dtype: torch.dtype, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    shapes = [(b, 4, t, 16), (b, 2, t, 16), (b, 2, t, 16), (b, 4, t, 16)]  # q, k, v, grad_out
    return [torch.randn(s, generator=g).to(dtype) for s in shapes]


def _grads(fn, q, k, v, gout):
    q, k, v = (x.detach().clone().requires_grad_() for x in (q, k, v))
    out = fn(q, k, v)
    out.backward(gout.to(out.dtype))
    return out.detach(), [x.grad for x in (q, k, v)]


def _bool_mask(b: int, t: int) -> torch.Tensor:
    m = torch.ones(t, t, dtype=torch.bool).tril().expand(b, 1, t, t).clone()
    m[0, 0, :, :3] = False  # three left-padded keys in row 0
    m[0, 0, :3] = False  # ... whose queries attend to nothing at all
    return m


@pytest.mark.parametrize("masked", [False, True])
def test_forward_is_sdpas_and_the_gradients_are_closer_to_exact(masked):
    q, k, v, gout = _qkv(3, 40, torch.bfloat16)
    mask = _bool_mask(3, 40) if masked else None
    kw = {"attn_mask": mask} if masked else {"is_causal": True}

    def stock(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=True, **kw)

    def ours(q, k, v):
        return flash_fp32_backward(q, k, v, mask, is_causal=not masked)

    def exact(q, k, v):
        return F.scaled_dot_product_attention(q.double(), k.double(), v.double(), enable_gqa=True,
                                              **kw)

    out_s, g_s = _grads(stock, q, k, v, gout)
    out_o, g_o = _grads(ours, q, k, v, gout)
    out_x, g_x = _grads(exact, q, k, v, gout)
    assert torch.equal(out_o, out_s)  # the same kernel on the same inputs
    errs = {"stock": 0.0, "ours": 0.0}
    for name, gs, go, gx in zip("qkv", g_s, g_o, g_x):
        assert go.dtype == torch.bfloat16 and torch.isfinite(go).all(), name
        err_o = (go.double() - gx).abs().max().item()
        err_s = (gs.double() - gx).abs().max().item()
        assert err_o <= err_s * 1.01 + 1e-6, (name, err_o, err_s)
        assert err_o < 0.05, (name, err_o)
        errs["stock"] += err_s
        errs["ours"] += err_o
    assert errs["ours"] < 0.8 * errs["stock"], errs  # (here about half)
    if masked:  # a query that attends to nothing: a zero output and no gradient, as SDPA
        assert not out_o[0, :, :3].any() and not g_o[0][0, :, :3].any()


def _model(attn: str, dtype: torch.dtype):
    import ragen2.learner.attention  # noqa: F401  (registers the name)
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    cfg._attn_implementation = attn
    return Qwen2ForCausalLM(cfg).to(dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("left_pad", [False, True])
def test_the_models_logits_equal_sdpas_and_fp32_is_untouched(dtype, left_pad):
    ids = torch.randint(3, 300, (3, 24), generator=torch.Generator().manual_seed(1))
    attn = torch.ones_like(ids)
    if left_pad:  # a mask with a hole before the first token: the masked kernel
        attn[0, :4] = 0
    runs = {}
    for name in ("sdpa", NAME):
        m = _model(name, dtype)
        out = m(input_ids=ids, attention_mask=attn, use_cache=False).logits
        out.float().square().mean().backward()
        runs[name] = (out.detach(), {n: p.grad for n, p in m.named_parameters()})
    (lo_s, g_s), (lo_o, g_o) = runs["sdpa"], runs[NAME]
    assert torch.equal(lo_o, lo_s)
    for n in g_s:
        if dtype == torch.float32:  # not a reduced dtype: transformers' sdpa itself
            assert torch.equal(g_o[n], g_s[n]), n
        else:
            torch.testing.assert_close(g_o[n].float(), g_s[n].float(), rtol=0.1,
                                       atol=0.05 * float(g_s[n].abs().max()) + 1e-6, msg=n)


def test_no_grad_passes_are_sdpas():
    ids = torch.randint(3, 300, (2, 16), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        a = _model("sdpa", torch.bfloat16)(input_ids=ids).logits
        b = _model(NAME, torch.bfloat16)(input_ids=ids).logits
    assert torch.equal(a, b)


def test_a_gradient_through_key_and_value_alone_takes_the_fp32_backward():
    """LoRA on v alone leaves q without a gradient; the backward still runs in fp32."""
    from torch import nn

    from ragen2.learner.attention import sdpa_fp32_backward_attention

    q, k, v, gout = _qkv(2, 24, torch.bfloat16)
    module = nn.Module()
    module.is_causal, module.num_key_value_groups = True, 2
    grads = {}
    for name, fn in (("ours", lambda q, k, v: flash_fp32_backward(q, k, v, is_causal=True)),
                     ("stock", lambda q, k, v: F.scaled_dot_product_attention(
                         q, k, v, is_causal=True, enable_gqa=True)),
                     ("wrapper", lambda q, k, v: sdpa_fp32_backward_attention(
                         module, q, k, v, None)[0].transpose(1, 2))):
        kk, vv = (x.detach().clone().requires_grad_() for x in (k, v))
        fn(q, kk, vv).backward(gout)
        grads[name] = kk.grad
    assert torch.equal(grads["wrapper"], grads["ours"])
    assert not torch.equal(grads["ours"], grads["stock"])
