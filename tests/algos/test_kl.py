import pytest
import torch

from ragen2.algos.kl import KL_ESTIMATORS, kl_penalty

LP = torch.tensor([[-1.0, -2.0, -1.5]])
REF = torch.tensor([[-2.0, -1.0, -1.5]])  # lp - ref = [1, -1, 0]


def test_k1():
    assert torch.allclose(kl_penalty(LP, REF, "k1"), torch.tensor([[1.0, -1.0, 0.0]]))


def test_k2():
    # 0.5 * [1, 1, 0]
    assert torch.allclose(kl_penalty(LP, REF, "k2"), torch.tensor([[0.5, 0.5, 0.0]]))


def test_k3_default():
    # r = ref - lp = [-1, 1, 0]: e^-1 + 1 - 1 = 0.367879; e - 1 - 1 = 0.718282; 1 - 0 - 1 = 0
    out = kl_penalty(LP, REF)
    assert torch.allclose(out, torch.tensor([[0.367879, 0.718282, 0.0]]), atol=1e-5)


def test_k3_clamped_and_finite():
    lp = torch.tensor([0.0, -100.0])
    ref = torch.tensor([-100.0, 0.0])
    out = kl_penalty(lp, ref, "k3")
    # r = -100 -> -20: e^-20 + 20 - 1 ~= 19 ; r = 100 -> 20: e^20 - 21 = 485165174.4
    assert out[0].item() == pytest.approx(19.0, abs=1e-6)
    assert out[1].item() == pytest.approx(485165174.4, rel=1e-5)
    assert torch.isfinite(out).all()


def test_unknown_estimator():
    assert KL_ESTIMATORS == ("k1", "k2", "k3")
    with pytest.raises(ValueError, match="k1, k2, k3"):
        kl_penalty(LP, REF, "k4")
