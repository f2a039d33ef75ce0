"""The permutation floor of the sampled-negatives MI estimate (``permutation_null_subsampled``):
hand-computed draws, the two extremes, its calibration under no input dependence, and its checks."""

from __future__ import annotations

import math

import pytest
import torch

from ragen2.collapse import (choose_negatives, mutual_information_subsampled,
                             permutation_null_subsampled)


def L(rows):
    """Matrix of log-likelihoods from a matrix of likelihoods p(z_s | x_c)."""
    return torch.tensor([[math.log(v) for v in r] for r in rows], dtype=torch.float64)


# ------------------------------------------------------------------ hand-computed 3 x 2
# Likelihoods in the columns as given (column 0 the owner); row 2's owner (prompt 2) sorts after
# its negative (prompt 0), so the estimator's column reordering is exercised too.
#   row 0: p = (.6, .2)  marginal log .4   pmi if column 0 / 1 is the owner: log 1.5 / log .5
#   row 1: p = (.1, .5)  marginal log .3   pmi: log(1/3) / log(5/3)
#   row 2: p = (.4, .4)  marginal log .4   pmi: 0 / 0 (the draw in row 2 changes nothing)
# mi'(c0, c1, c2) = (pmi_0[c0] + pmi_1[c1] + 0) / 3:
#   (0, 0, *) = (0.405465 - 1.098612) / 3 = -0.231049   (the observed pairing: mi)
#   (0, 1, *) = (0.405465 + 0.510826) / 3 =  0.305430
#   (1, 0, *) = (-0.693147 - 1.098612) / 3 = -0.597253
#   (1, 1, *) = (-0.693147 + 0.510826) / 3 = -0.060774
HAND_ROWS = [[0.6, 0.2], [0.1, 0.5], [0.4, 0.4]]
HAND_COLS = torch.tensor([[0, 1], [1, 2], [2, 0]])
PMI = [(math.log(1.5), math.log(0.5)), (math.log(1 / 3), math.log(5 / 3)), (0.0, 0.0)]


def hand_value(draw):
    return sum(PMI[s][c] for s, c in enumerate(draw)) / 3


def test_hand_computed_3x2_draws():
    logp = L(HAND_ROWS)
    # the documented draw: torch.randint(K, (P, S)) from the generator; seed 0 gives these 8
    draws = [[0, 1, 1], [0, 1, 1], [1, 1, 1], [1, 1, 0], [0, 1, 0], [0, 0, 0], [0, 1, 0], [1, 1, 0]]
    assert torch.randint(2, (8, 3), generator=torch.Generator().manual_seed(0)).tolist() == draws
    # -> null values 0.305430 x 4, -0.060774 x 3, -0.231049 x 1 (the observed pairing, redrawn)
    null = [hand_value(d) for d in draws]
    assert sorted(round(v, 6) for v in null) == [-0.231049] + [-0.060774] * 3 + [0.30543] * 4
    r = permutation_null_subsampled(logp, HAND_COLS, num_permutations=8,
                                    generator=torch.Generator().manual_seed(0))
    assert r["mi"] == pytest.approx(math.log(0.5) / 3, abs=1e-15)  # -0.231049
    # mi_null = (4 * 0.305430 - 3 * 0.060774 - 0.231049) / 8 = 0.101044
    assert r["mi_null"] == pytest.approx(sum(null) / 8, abs=1e-15)
    assert r["mi_null"] == pytest.approx(0.101044, abs=1e-6)
    mean = sum(null) / 8
    assert r["mi_null_std"] == pytest.approx(math.sqrt(sum((v - mean) ** 2 for v in null) / 8),
                                             abs=1e-15)
    # q95: position 0.95 * 7 = 6.65 between the 7th and 8th smallest, both 0.305430
    assert r["mi_null_q95"] == pytest.approx(0.305430, abs=1e-6)
    # every draw is >= the observed (the (0, 0, 0) draw equals it exactly): p = 9 / 9
    assert r["p_value"] == 1.0 and r["num_permutations"] == 8.0
    # one draw: seed 0's first, (0, 1, 1) -> 0.305430 is the whole null
    one = permutation_null_subsampled(logp, HAND_COLS, num_permutations=1,
                                      generator=torch.Generator().manual_seed(0))
    assert one["mi_null"] == one["mi_null_q95"] == pytest.approx(hand_value([0, 1, 1]), abs=1e-15)
    assert one["mi_null_std"] == 0.0 and one["p_value"] == 1.0


def test_observed_is_the_estimators_mi_bit_for_bit():
    g = torch.Generator().manual_seed(4)
    for S, N, negatives in ((3, 3, 1), (17, 9, 4), (40, 12, 7), (8, 5, 4)):
        owner = torch.randint(N, (S,), generator=g)
        cols = choose_negatives(owner, N, negatives, generator=g)
        sub = (-30 * torch.rand(S, N, generator=g, dtype=torch.float64)).gather(1, cols)
        r = permutation_null_subsampled(sub, cols, num_permutations=5, generator=g)
        assert r["mi"] == mutual_information_subsampled(sub, cols)["mi"]
        assert r["mi"] == mutual_information_subsampled(sub, cols, prompt_keys=list("a" * N))["mi"]


# ------------------------------------------------------------------ the two extremes
def test_input_blind_rows_give_null_equal_to_observed_and_p_one():
    g = torch.Generator().manual_seed(1)
    owner = torch.arange(24) % 6
    cols = choose_negatives(owner, 6, 3, generator=g)
    # each row's K scores equal (the policy ignores the prompt), rows differ
    sub = torch.linspace(-40, -3, 24, dtype=torch.float64)[:, None].expand(24, 4).contiguous()
    r = permutation_null_subsampled(sub, cols, num_permutations=30, generator=g)
    assert r["mi"] == pytest.approx(0.0, abs=1e-12)
    assert r["mi_null"] == r["mi"] and r["mi_null_q95"] == r["mi"]  # every draw: the same values
    assert r["mi_null_std"] == pytest.approx(0.0, abs=1e-15)
    assert r["p_value"] == 1.0


def test_owner_far_above_its_negatives_is_significant_and_the_floor_far_below():
    g = torch.Generator().manual_seed(2)
    owner = torch.arange(16) % 8
    cols = choose_negatives(owner, 8, 3, generator=g)  # K = 4
    sub = -1.0 - 20.0 * (torch.arange(4) > 0).double().expand(16, 4)  # owner -1, negatives -21
    sub = sub + 0.1 * torch.rand(16, 4, generator=g, dtype=torch.float64)
    r = permutation_null_subsampled(sub, cols, num_permutations=50, generator=g)
    # observed ~ log 4 (1.386); a draw keeps the owner on all 16 rows with probability 4^-16
    assert r["mi"] == pytest.approx(math.log(4), abs=1e-6)
    assert r["p_value"] == pytest.approx(1 / 51)
    # a draw keeps the owner on ~1/4 of the rows: mi' ~ log 4 - 20 * 3/4 ~ -13.6
    assert r["mi_null_q95"] < -8 < r["mi"] - 9 and r["mi_null"] < r["mi_null_q95"] + 1e-12


# ------------------------------------------------------------------ calibration under the null
def _no_dependence_trial(seed: int, offset_sd: float) -> dict[str, float]:
    """16 prompts x 4 samples, K = 8 (7 sampled negatives), P = 100. The scores do not depend on
    which prompt generated the sample: log p = sample effect + prompt offset + cell noise."""
    g = torch.Generator().manual_seed(seed)
    owner = torch.arange(64) // 4
    offset = offset_sd * torch.randn(16, generator=g, dtype=torch.float64)
    cols = choose_negatives(owner, 16, 7, generator=g)
    sub = (3 * torch.randn(64, 1, generator=g, dtype=torch.float64) + offset[cols]
           + torch.randn(64, 8, generator=g, dtype=torch.float64))
    return permutation_null_subsampled(sub, cols, num_permutations=100, generator=g)


@pytest.mark.parametrize("offset_sd", [0.0, 2.0])
def test_without_input_dependence_the_estimate_clears_the_floor_about_5_percent_of_the_time(
        offset_sd):
    """Without prompt offsets the rows are independent and each row's owner is exchangeable with
    its negatives, so the observed value is exchangeable with the 100 null draws: its rank among
    the 101 is uniform. It exceeds the floor (q95 at position 0.95 * 99 = 94.05 of the sorted
    draws) when it ranks in the top 5 (5 / 101) or, mostly, 6th (0.95 / 101): rate ~0.059; it has
    p_value <= 0.05 when it ranks in the top 5: rate 5 / 101 = 0.0495. Over 100 trials (fixed
    seeds: the counts are deterministic) the bounds 13 and 12 are each exceeded by a correct
    null with probability 0.002 and 0.001 (binomial tails, P(X > 13 | 0.059), P(X > 12 | 0.0495)).
    Offsets shared by a prompt's samples (equal counts per prompt) only widen the null."""
    trials = [_no_dependence_trial(seed, offset_sd) for seed in range(100)]
    over_floor = sum(r["mi"] > r["mi_null_q95"] for r in trials)
    significant = sum(r["p_value"] <= 0.05 for r in trials)
    assert over_floor <= 13 and significant <= 12, (over_floor, significant)
    if offset_sd == 0.0:  # not degenerate the other way: the null is not vacuously wide either
        assert over_floor >= 1


# ------------------------------------------------------------------ invalid inputs
def test_invalid_inputs():
    logp = L(HAND_ROWS)
    with pytest.raises(ValueError, match="num_permutations"):
        permutation_null_subsampled(logp, HAND_COLS, num_permutations=0)
    with pytest.raises(ValueError, match="num_permutations"):
        permutation_null_subsampled(logp, HAND_COLS, num_permutations=True)
    with pytest.raises(ValueError, match="shape of logp_sub"):
        permutation_null_subsampled(logp, HAND_COLS[:2])
    with pytest.raises(ValueError, match="more than once"):
        permutation_null_subsampled(logp, torch.tensor([[0, 1], [1, 1], [2, 0]]))
    with pytest.raises(ValueError, match="integer"):
        permutation_null_subsampled(logp, HAND_COLS.double())
    with pytest.raises(ValueError, match=">= 0"):
        permutation_null_subsampled(logp, -HAND_COLS - 1)
    with pytest.raises(ValueError, match="NaN"):
        permutation_null_subsampled(logp.clone().fill_(float("nan")), HAND_COLS)
    with pytest.raises(ValueError, match="at least 2 prompts"):
        permutation_null_subsampled(logp[:, :1], HAND_COLS[:, :1])
    neg = logp.clone()
    neg[2, 1] = float("-inf")  # a negative (prompt 0) of row 2: fine for the estimator ...
    mutual_information_subsampled(neg, HAND_COLS)
    with pytest.raises(ValueError, match="sample 2 under prompt 0"):  # ... not for the null
        permutation_null_subsampled(neg, HAND_COLS)


def test_leaves_the_global_rng_alone_when_given_a_generator():
    state = torch.get_rng_state()
    permutation_null_subsampled(L(HAND_ROWS), HAND_COLS, generator=torch.Generator().manual_seed(3))
    assert torch.equal(torch.get_rng_state(), state)
