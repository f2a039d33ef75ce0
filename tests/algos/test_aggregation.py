import pytest
import torch

from ragen2.algos.aggregation import LOSS_AGG_MODES, aggregate_loss

# Row 0: tokens 1, 2 count (3 is masked); row 1: token 4 counts; row 2: fully masked (has NaN/inf).
LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0], [9.0, float("inf"), float("nan")]])
MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])


def test_token_mean():
    # (1 + 2 + 4) / 3 tokens = 2.3333
    assert aggregate_loss(LOSS, MASK, "token-mean").item() == pytest.approx(7 / 3)


def test_seq_mean_token_mean():
    # row0 mean (1+2)/2 = 1.5, row1 4/1 = 4, row2 ignored (no tokens) -> (1.5 + 4) / 2 rows = 2.75
    assert aggregate_loss(LOSS, MASK, "seq-mean-token-mean").item() == pytest.approx(2.75)


def test_seq_mean_token_sum():
    # row sums 3 and 4 over 2 rows -> 3.5
    assert aggregate_loss(LOSS, MASK, "seq-mean-token-sum").item() == pytest.approx(3.5)


def test_seq_mean_token_sum_norm():
    # Dr.GRPO: row sums 3 and 4, each / the constant 10 (not / their lengths 2 and 1) = 0.3, 0.4;
    # mean over the 2 rows with tokens -> 0.35
    out = aggregate_loss(LOSS, MASK, "seq-mean-token-sum-norm", norm_tokens=10)
    assert out.item() == pytest.approx(0.35)
    # the constant, not the padded width (3): a wider padding leaves the value unchanged
    wide = torch.cat([LOSS, torch.full((3, 5), 7.0)], dim=1)
    wide_mask = torch.cat([MASK, torch.zeros(3, 5)], dim=1)
    assert aggregate_loss(wide, wide_mask, "seq-mean-token-sum-norm",
                          norm_tokens=10).item() == pytest.approx(0.35)
    # with the global sequence count: (0.3 + 0.4) / 5 = 0.14
    assert aggregate_loss(LOSS, MASK, "seq-mean-token-sum-norm", norm_tokens=10,
                          num_seqs=5).item() == pytest.approx(0.14)


def test_seq_mean_token_sum_norm_gradient_is_length_independent():
    # every counted token gets d/dL = 1 / (C * N_seq) = 1 / (4 * 2), whatever its row's length
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]], requires_grad=True)
    aggregate_loss(loss, MASK[:2], "seq-mean-token-sum-norm", norm_tokens=4).backward()
    assert torch.allclose(loss.grad, torch.tensor([[0.125, 0.125, 0.0], [0.125, 0.0, 0.0]]))


@pytest.mark.parametrize("norm", [None, 0, -3.0, float("inf"), float("nan"), True])
def test_seq_mean_token_sum_norm_needs_a_positive_constant(norm):
    with pytest.raises(ValueError, match="norm_tokens"):
        aggregate_loss(LOSS, MASK, "seq-mean-token-sum-norm", norm_tokens=norm)


def test_explicit_denominators():
    # 7 / 10 tokens; (1.5 + 4) / 5 seqs = 1.1; (3 + 4) / 5 = 1.4
    assert aggregate_loss(LOSS, MASK, "token-mean", num_tokens=10).item() == pytest.approx(0.7)
    assert aggregate_loss(LOSS, MASK, "seq-mean-token-mean", num_seqs=5).item() == pytest.approx(1.1)
    assert aggregate_loss(LOSS, MASK, "seq-mean-token-sum", num_seqs=5).item() == pytest.approx(1.4)


@pytest.mark.parametrize("mode,full", [
    ("token-mean", 7 / 3), ("seq-mean-token-mean", 2.75), ("seq-mean-token-sum", 3.5),
    ("seq-mean-token-sum-norm", 0.35)])
def test_micro_batches_sum_to_full_batch(mode, full):
    # Split rows {0} and {1, 2}; with the global counts (3 tokens, 2 seqs) the pieces add up.
    kw = {"num_tokens": 3, "num_seqs": 2, "norm_tokens": 10}
    parts = aggregate_loss(LOSS[:1], MASK[:1], mode, **kw) + aggregate_loss(LOSS[1:], MASK[1:], mode, **kw)
    assert parts.item() == pytest.approx(full)


def test_local_denominators_do_not_sum_to_full_batch():
    # Without global counts: token-mean 1.5 + 4.0 = 5.5 != 2.3333 (why the globals exist).
    parts = aggregate_loss(LOSS[:1], MASK[:1], "token-mean") + aggregate_loss(LOSS[1:], MASK[1:], "token-mean")
    assert parts.item() == pytest.approx(5.5)


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_all_masked_is_zero_not_nan(mode):
    out = aggregate_loss(torch.ones(2, 3), torch.zeros(2, 3), mode, norm_tokens=8)
    assert out.item() == 0.0


def test_unknown_mode():
    allowed = "token-mean.*seq-mean-token-mean.*seq-mean-token-sum.*seq-mean-token-sum-norm"
    with pytest.raises(ValueError, match=allowed):
        aggregate_loss(LOSS, MASK, "sum")


def test_gradient_only_on_masked_tokens():
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]], requires_grad=True)
    aggregate_loss(loss, MASK[:2], "token-mean").backward()
    # d/dL = mask / 3 tokens
    assert torch.allclose(loss.grad, torch.tensor([[1 / 3, 1 / 3, 0.0], [1 / 3, 0.0, 0.0]]))
