import math

import pytest
import torch

from ragen2.algos.logits import entropy_from_logits, logprobs_and_entropy, logprobs_from_logits

# Position 0: logits [0, ln 3] -> probs [1/4, 3/4]. Position 1: uniform over 2 -> [1/2, 1/2].
LOGITS = torch.tensor([[[0.0, math.log(3.0)], [5.0, 5.0]]])  # (B=1, T=2, V=2)


def test_logprobs_gather():
    labels = torch.tensor([[1, 0]])
    out = logprobs_from_logits(LOGITS, labels)
    # ln 0.75 = -0.287682 ; ln 0.5 = -0.693147
    assert out.shape == (1, 2)
    assert torch.allclose(out, torch.tensor([[-0.287682, -0.693147]]), atol=1e-5)
    out0 = logprobs_from_logits(LOGITS, torch.tensor([[0, 1]]))
    # ln 0.25 = -1.386294
    assert out0[0, 0].item() == pytest.approx(-1.386294, abs=1e-5)


def test_logprobs_temperature():
    # T=2: logits [0, ln3/2] -> probs [1/(1+sqrt3), sqrt3/(1+sqrt3)] = [0.366025, 0.633975]
    out = logprobs_from_logits(LOGITS, torch.tensor([[0, 0]]), temperature=2.0)
    assert out[0, 0].item() == pytest.approx(-1.005053, abs=1e-5)  # ln 0.366025


def test_entropy():
    out = entropy_from_logits(LOGITS)
    # -(0.25 ln 0.25 + 0.75 ln 0.75) = 0.346574 + 0.215762 = 0.562335 ; uniform-2: ln 2 = 0.693147
    assert torch.allclose(out, torch.tensor([[0.562335, 0.693147]]), atol=1e-5)


def test_entropy_temperature():
    # -(0.366025 * -1.005053 + 0.633975 * -0.455746) = 0.367875 + 0.288931 = 0.656806
    out = entropy_from_logits(LOGITS, temperature=2.0)
    assert out[0, 0].item() == pytest.approx(0.656806, abs=1e-5)


def test_entropy_with_neg_inf_logit_is_finite():
    # [0, 0, -inf] -> uniform over 2 live tokens: ln 2
    out = entropy_from_logits(torch.tensor([[[0.0, 0.0, float("-inf")]]]))
    assert out.item() == pytest.approx(0.693147, abs=1e-5)


def test_bf16_upcast_and_bad_temperature():
    out = logprobs_from_logits(LOGITS.bfloat16(), torch.tensor([[1, 0]]))
    assert out.dtype == torch.float32
    with pytest.raises(ValueError):
        entropy_from_logits(LOGITS, temperature=0.0)


def test_logprobs_and_entropy_one_log_softmax_masked():
    # the fused function gives the two separate ones; masked-out positions get entropy 0
    labels = torch.tensor([[1, 0]])
    lp, ent = logprobs_and_entropy(LOGITS, labels, temperature=2.0)
    assert torch.allclose(lp, logprobs_from_logits(LOGITS, labels, 2.0))
    assert torch.allclose(ent, entropy_from_logits(LOGITS, 2.0))
    _, ent = logprobs_and_entropy(LOGITS, labels, entropy_mask=torch.tensor([[0, 1]]))
    assert ent[0].tolist() == pytest.approx([0.0, 0.693147], abs=1e-5)  # ln 2 at position 1 only


def test_logprobs_and_entropy_grad_only_when_asked():
    logits = LOGITS.clone().requires_grad_(True)
    mask = torch.tensor([[1, 1]])
    lp, ent = logprobs_and_entropy(logits, torch.tensor([[1, 0]]), entropy_mask=mask,
                                   entropy_grad=False)
    assert lp.requires_grad and not ent.requires_grad
    _, ent = logprobs_and_entropy(logits, torch.tensor([[1, 0]]), entropy_mask=mask)
    ent.sum().backward()
    # dH/dz for p = softmax(z): -p * (log p + H). Position 0: p = [1/4, 3/4], H = 0.562335
    # -> [-0.25 * (-1.386294 + 0.562335), -0.75 * (-0.287682 + 0.562335)] = [0.205990, -0.205990]
    assert logits.grad[0, 0].tolist() == pytest.approx([0.205990, -0.205990], abs=1e-5)
    assert logits.grad[0, 1].tolist() == pytest.approx([0.0, 0.0], abs=1e-6)  # uniform: a maximum


def test_a_known_entropy_count_selects_the_same_tokens_bit_for_bit():
    """``entropy_tokens`` (the learner knows the count on the host: no device read) gives the
    same values and gradients as the boolean selection; a wrong count fails."""
    torch.manual_seed(0)
    logits = torch.randn(3, 5, 11)
    labels = torch.randint(0, 11, (3, 5))
    mask = torch.tensor([[0, 1, 1, 0, 1], [0, 0, 0, 0, 0], [1, 1, 0, 1, 1]])
    out = []
    for count in (None, 7):
        z = logits.clone().requires_grad_(True)
        lp, ent = logprobs_and_entropy(z, labels, 0.8, entropy_mask=mask, entropy_tokens=count)
        (lp.sum() + (ent * torch.arange(15.0).reshape(3, 5)).sum()).backward()
        out.append((lp, ent, z.grad))
    for a, b in zip(*out):
        assert torch.equal(a, b)
    with pytest.raises(RuntimeError, match="entropy_tokens"):
        logprobs_and_entropy(logits, labels, entropy_mask=mask, entropy_tokens=6)
