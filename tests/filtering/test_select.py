import math
from dataclasses import dataclass, field

import numpy as np
import pytest
import torch

from ragen2.filtering import (
    GroupBatch,
    filter_metrics,
    group_scores,
    loss_scale,
    select_groups,
)

# Five groups; sum = 1.0. Descending (stable) order: idx1 0.4, idx3 0.3, idx4 0.2, idx0 0.1, idx2 0.0
#   cumulative: 0.4, 0.7, 0.9, 1.0, 1.0
S = [0.1, 0.4, 0.0, 0.3, 0.2]


def kept(*args, **kw) -> list[int]:
    out = select_groups(*args, **kw)
    assert out.dtype == torch.long
    return out.tolist()


# ------------------------------------------------------------------ top_p (linear)
@pytest.mark.parametrize("p, expected", [
    (0.01, [1]),           # target 0.01: the first group already reaches it
    (0.4, [1]),            # 0.4 >= 0.4
    (0.5, [1, 3]),         # 0.4 < 0.5 <= 0.7
    (0.7, [1, 3]),         # 0.4 + 0.3 reaches 0.7 exactly (>=, not >)
    (0.71, [1, 3, 4]),     # 0.7 < 0.71 <= 0.9
    (0.95, [0, 1, 3, 4]),  # 0.9 < 0.95 <= 1.0
    (1.0, [0, 1, 2, 3, 4]),  # p = 1: no filtering, the zero group stays
    (0.0, []),
])
def test_top_p_linear(p, expected):
    assert kept(S, "top_p", p) == expected


def test_top_p_float_tolerance():
    # sum = 1.0 in float64, but 0.7 + 0.1 = 0.7999999999999999 < 0.8 * 1.0; it must still count as
    # reaching p = 0.8 (keep 2 groups, not 3)
    assert kept([0.7, 0.1, 0.05, 0.05, 0.05, 0.05], "top_p", 0.8) == [0, 1]


def test_ties_stay_stable_on_large_inputs():
    # torch's default (unstable) sort scrambles equal keys on inputs this large
    assert kept([1.0, 0.0] * 3000, "top_k_abs", 3) == [0, 2, 4]
    assert kept([0.5] * 5000, "top_p", 0.001) == [0, 1, 2, 3, 4]  # target 2.5: five groups


def test_top_p_include_zero_false_drops_zero_groups():
    assert kept(S, "top_p", 1.0, include_zero=False) == [0, 1, 3, 4]
    assert kept(S, "top_p", 0.5, include_zero=False) == [1, 3]
    # 1e-9 is "zero" (<= 1e-8); 2e-8 is not
    assert kept([1e-9, 2e-8, 0.0], "top_p", 1.0, include_zero=False) == [1]


def test_top_p_ties_are_stable_by_index():
    # total 0.6, target 0.5 * 0.6 = 0.3: cumulative 0.2, 0.4 -> two groups, the lower indices
    assert kept([0.2, 0.2, 0.2], "top_p", 0.5) == [0, 1]
    # total 1.0, target 0.5: cumulative 0.3, 0.6 -> [1, 2] (group 3 ties but comes later)
    assert kept([0.1, 0.3, 0.3, 0.3], "top_p", 0.5) == [1, 2]


def test_top_p_all_zero_scores_keep_all_eligible():
    assert kept([0.0, 0.0, 0.0], "top_p", 0.5) == [0, 1, 2]
    assert kept([0.0, 0.0, 0.0], "top_p", 0.5, include_zero=False) == []


def test_top_p_negative_scores_rejected_with_alternative():
    with pytest.raises(ValueError, match=r"top_p needs non-negative scores.*top_k.*top_p_softmax"):
        select_groups([0.5, -0.1], "top_p", 0.5)


# ------------------------------------------------------------------ top_p_softmax
def test_top_p_softmax_temperature_1():
    # probs = [e^1, e^2, e^0] / (e^1 + e^2 + 1) = [0.24473, 0.66524, 0.09003]
    z = math.exp(1) + math.exp(2) + 1
    probs = [math.exp(1) / z, math.exp(2) / z, 1 / z]
    assert probs[1] == pytest.approx(0.66524, abs=1e-5) and probs[0] == pytest.approx(0.24473, abs=1e-5)
    scores = torch.tensor([1.0, 2.0, 0.0])
    assert kept(scores, "top_p_softmax", 0.6) == [1]       # 0.665 >= 0.6
    assert kept(scores, "top_p_softmax", 0.8) == [0, 1]    # 0.665 < 0.8 <= 0.910
    assert kept(scores, "top_p_softmax", 0.95) == [0, 1, 2]
    assert kept(scores, "top_p_softmax", 1.0) == [0, 1, 2]
    assert kept(scores, "top_p_softmax", 0.0) == []
    assert kept(scores, "top_p_softmax", 1e-6) == [1]


def test_top_p_softmax_temperature_2():
    # scores / 2 = [0.5, 1, 0]: probs [1.64872, 2.71828, 1] / 5.36700 = [0.30719, 0.50648, 0.18632]
    z = math.exp(0.5) + math.exp(1) + 1
    assert math.exp(1) / z == pytest.approx(0.50648, abs=1e-5)
    scores = [1.0, 2.0, 0.0]
    assert kept(scores, "top_p_softmax", 0.6, temperature=2.0) == [0, 1]
    assert kept(scores, "top_p_softmax", 0.5, temperature=2.0) == [1]   # 0.50648 >= 0.5
    assert kept(scores, "top_p_softmax", 0.51, temperature=2.0) == [0, 1]
    assert kept(scores, "top_p_softmax", 0.51, temperature=1.0) == [1]  # 0.665 at T=1


def test_top_p_softmax_accepts_negative_scores_and_excludes_zero():
    # [-1, -2, -3]: probs [0.66524, 0.24473, 0.09003] (same ratios as above)
    assert kept([-1.0, -2.0, -3.0], "top_p_softmax", 0.5) == [0]
    # include_zero=False: 0.0 and negatives are "zero" by score; eligible = [2]
    assert kept([0.0, -1.0, 0.3], "top_p_softmax", 1.0, include_zero=False) == [2]


# ------------------------------------------------------------------ top_k / top_k_abs / min_p
@pytest.mark.parametrize("f, expected", [
    (0.5, [1, 3, 4]),    # ceil(2.5) = 3
    (0.2, [1]),          # ceil(1.0) = 1
    (0.21, [1, 3]),      # ceil(1.05) = 2
    (1.0, [0, 1, 2, 3, 4]),
    (0.0, []),
])
def test_top_k_fraction(f, expected):
    assert kept(S, "top_k", f) == expected


def test_top_k_fraction_float_slack_and_ties():
    # 0.28 * 25 = 7.000000000000001 in floating point: must keep 7, not 8
    assert 0.28 * 25 > 7
    assert len(kept(list(range(25)), "top_k", 0.28)) == 7
    # ties: [0.1, 0.3, 0.3, 0.1], ceil(0.75 * 4) = 3 -> 1, 2 then 0 (before 3)
    assert kept([0.1, 0.3, 0.3, 0.1], "top_k", 0.75) == [0, 1, 2]
    assert kept(S, "top_k", 0.5, include_zero=False) == [1, 3]  # ceil(0.5 * 4) = 2


@pytest.mark.parametrize("c, expected", [(2, [1, 3]), (10, [0, 1, 2, 3, 4]), (0, []), (3.0, [1, 3, 4])])
def test_top_k_abs(c, expected):
    assert kept(S, "top_k_abs", c) == expected


def test_top_k_abs_ties_and_signed_scores():
    assert kept([0.2, 0.2, 0.2], "top_k_abs", 1) == [0]
    assert kept([-0.5, 0.5, -0.1], "top_k_abs", 2) == [1, 2]


@pytest.mark.parametrize("p, expected", [
    (0.5, [1, 3, 4]),           # max 0.4 -> keep scores >= 0.2
    (0.75, [1, 3]),             # >= 0.3 (0.75 * 0.4 = 0.30000000000000004: needs the tolerance)
    (1.0, [1]),
    (0.0, [0, 1, 2, 3, 4]),     # >= 0: every group
])
def test_min_p(p, expected):
    assert kept(S, "min_p", p) == expected


def test_min_p_zero_and_negative():
    assert kept(S, "min_p", 0.0, include_zero=False) == [0, 1, 3, 4]
    assert kept([0.0, 0.0], "min_p", 0.5) == [0, 1]   # all-zero: threshold 0 keeps all
    with pytest.raises(ValueError, match="min_p needs non-negative scores"):
        select_groups([0.2, -0.2], "min_p", 0.5)


def test_zero_groups_mask_for_non_std_scores():
    # reward_mean scores; groups flagged by reward std (third group has sigma = 0)
    assert kept([0.5, -0.2, 0.9], "top_k", 1.0, include_zero=False,
                zero_groups=[False, False, True]) == [0, 1]


@pytest.mark.parametrize("strategy, value", [("top_p", 0.5), ("top_p_softmax", 0.5), ("top_k", 0.5),
                                             ("top_k_abs", 3), ("min_p", 0.5)])
def test_empty_scores_give_empty_result(strategy, value):
    assert kept([], strategy, value) == []
    assert kept(torch.zeros(0), strategy, value, include_zero=False) == []
    # nothing eligible at all
    assert kept([0.0, 0.0], strategy, value, include_zero=False) == []


def test_accepts_list_numpy_and_tensor():
    assert kept(np.array(S), "top_p", 0.5) == kept(torch.tensor(S), "top_p", 0.5) == [1, 3]


# ------------------------------------------------------------------ invalid inputs
def test_unknown_strategy_lists_allowed():
    with pytest.raises(ValueError, match=r"unknown group selection strategy 'top_q'; allowed: "
                                         r"min_p, top_k, top_k_abs, top_p, top_p_softmax"):
        select_groups(S, "top_q", 0.5)


@pytest.mark.parametrize("strategy, value, msg", [
    ("top_p", 1.5, r"top_p value 1.5 is out of range; allowed: a fraction in \[0, 1\]"),
    ("top_p", -0.1, r"top_p value -0.1 is out of range"),
    ("top_p_softmax", 2, r"top_p_softmax value 2 is out of range"),
    ("top_k", 1.01, r"top_k value 1.01 is out of range; allowed: a fraction in \[0, 1\]"),
    ("min_p", -1, r"min_p value -1 is out of range"),
    ("top_p", float("nan"), r"top_p value is NaN"),
    ("top_k", "0.5", r"top_k value must be a number, got '0.5'"),
    ("top_k_abs", -1, r"top_k_abs value -1 is not a group count; allowed: an integer >= 0"),
    ("top_k_abs", 2.5, r"top_k_abs value 2.5 is not a group count"),
    ("top_k_abs", float("inf"), r"top_k_abs value inf is not a group count"),
    ("top_k_abs", True, r"top_k_abs value must be a number, got True"),
    ("top_k_abs", float("nan"), r"top_k_abs value is NaN"),
])
def test_invalid_values(strategy, value, msg):
    with pytest.raises(ValueError, match=msg):
        select_groups(S, strategy, value)


def test_invalid_value_rejected_even_for_empty_scores():
    with pytest.raises(ValueError, match="out of range"):
        select_groups([], "top_p", 2.0)


@pytest.mark.parametrize("t", [0, -1.0, float("inf"), float("nan")])
def test_invalid_temperature(t):
    with pytest.raises(ValueError, match=r"temperature .* is invalid; allowed: a finite number > 0"):
        select_groups(S, "top_p_softmax", 0.5, temperature=t)


def test_invalid_scores():
    with pytest.raises(ValueError, match=r"scores must be 1-D \(one per group\), got shape \(2, 2\)"):
        select_groups([[0.1, 0.2], [0.3, 0.4]], "top_k", 0.5)
    with pytest.raises(ValueError, match=r"scores must be finite; got NaN or inf at group indices \[1\]"):
        select_groups([0.1, float("nan")], "top_k", 0.5)
    with pytest.raises(ValueError, match=r"zero_groups has shape \(2,\); it must match scores \(3,\)"):
        select_groups([0.1, 0.2, 0.3], "top_k", 0.5, include_zero=False, zero_groups=[True, False])


# ------------------------------------------------------------------ scores from trajectories
@dataclass
class FakeTraj:
    group_id: int
    reward: float
    logprobs: list = field(default_factory=list)
    loss_mask: list = field(default_factory=list)

    @property
    def num_generated(self) -> int:
        return int(sum(self.loss_mask))


# group 7: rewards [1, 0] -> mean 0.5, std 0.5; per-token nll 3/2 = 1.5 and 2/2 = 1.0 -> 1.25; length 2
# group 2: rewards [1, 1, 1] -> mean 1, std 0; nll/token 0.2, 0.3, 1.0 -> 0.5; lengths 1, 2, 3 -> 2
# group 5: rewards [0, 3] -> mean 1.5, std 1.5; nll/token 2.0 (the -9 sits on a masked position
#          and must be ignored), 1.0 -> 1.5; lengths 1, 4 -> 2.5
TRAJS = [
    FakeTraj(7, 1.0, [0.0, -1.0, -2.0, 0.0], [0, 1, 1, 0]),
    FakeTraj(2, 1.0, [-0.2], [1]),
    FakeTraj(5, 0.0, [-2.0, -9.0], [1, 0]),
    FakeTraj(7, 0.0, [0.0, -0.5, 0.0, -1.5], [0, 1, 0, 1]),
    FakeTraj(2, 1.0, [-0.4, -0.2], [1, 1]),
    FakeTraj(5, 3.0, [-1.0] * 4, [1] * 4),
    FakeTraj(2, 1.0, [-1.0] * 3, [1] * 3),
]


@pytest.mark.parametrize("name, expected", [
    ("reward_std", [0.0, 1.5, 0.5]),
    ("reward_variance", [0.0, 2.25, 0.25]),
    ("reward_mean", [1.0, 1.5, 0.5]),
    ("entropy", [0.5, 1.5, 1.25]),
    ("response_length", [2.0, 2.5, 2.0]),
])
def test_group_scores_from_trajectories(name, expected):
    batch = GroupBatch.from_trajectories(TRAJS)
    assert batch.groups == [2, 5, 7]
    out = group_scores(batch, name)
    assert out.shape == (3,)
    assert out.tolist() == pytest.approx(expected, abs=1e-12)


def test_group_scores_from_reward_mapping():
    rewards = {7: [1.0, 0.0], 2: [1.0, 1.0, 1.0], 5: [0.0, 3.0]}
    assert group_scores(rewards).tolist() == pytest.approx([0.0, 1.5, 0.5])  # default reward_std
    assert group_scores(rewards, "reward_mean").tolist() == pytest.approx([1.0, 1.5, 0.5])
    with pytest.raises(ValueError, match="'entropy' needs per-episode nll_sum.*from_trajectories"):
        group_scores(rewards, "entropy")
    with pytest.raises(ValueError, match="unknown group score 'std'; allowed: entropy, "
                                         "response_length, reward_mean, reward_std"):
        group_scores(rewards, "std")
    assert group_scores({}).tolist() == []


def test_group_batch_rejects_mismatched_arrays():
    with pytest.raises(ValueError, match="GroupBatch.returns has 1 entries but group_ids has 2"):
        GroupBatch.from_arrays([0, 1], [1.0])
    with pytest.raises(ValueError, match="returns must be finite"):
        GroupBatch.from_arrays([0], [float("nan")])


def test_scores_then_select_end_to_end():
    batch = GroupBatch.from_trajectories(TRAJS)
    std = group_scores(batch)
    # sigma = [0, 1.5, 0.5] (groups 2, 5, 7); p = 0.6 -> target 1.2: 1.5 alone reaches it
    idx = select_groups(std, "top_p", 0.6)
    assert [batch.groups[i] for i in idx] == [5]
    assert [batch.groups[i] for i in select_groups(std, "top_p", 1.0, include_zero=False)] == [5, 7]


# ------------------------------------------------------------------ loss scale and metrics
@pytest.mark.parametrize("mode, expected", [("none", 1.0), ("linear", 0.25), ("sqrt", 0.5)])
def test_loss_scale(mode, expected):
    assert loss_scale(0.25, mode) == pytest.approx(expected)
    assert loss_scale(1.0, mode) == 1.0


def test_loss_scale_invalid():
    with pytest.raises(ValueError, match=r"unknown loss scale mode 'square'; allowed: linear, none, sqrt"):
        loss_scale(0.5, "square")
    for f in (0.0, 1.5, -0.1):
        with pytest.raises(ValueError, match=r"kept_fraction .* is out of range; allowed: \(0, 1\]"):
            loss_scale(f, "linear")


def test_filter_metrics():
    std = torch.tensor([0.0, 1.5, 0.5])
    m = filter_metrics(std, std, torch.tensor([1, 2]))
    assert m == pytest.approx({"filter/kept_ratio": 2 / 3, "filter/zero_std_groups": 1.0,
                               "filter/score_mean": 2 / 3, "rollout/in_group_reward_std": 2 / 3})
    assert filter_metrics(torch.zeros(0), torch.zeros(0), torch.zeros(0))["filter/kept_ratio"] == 0.0
    with pytest.raises(ValueError, match="reward_std has 2 groups but scores has 3"):
        filter_metrics(torch.zeros(2), std, torch.tensor([0]))


# ------------------------------------------------------------------ keep=smallest, epsilon
@pytest.mark.parametrize("strategy, value, expected", [
    # ascending (stable): idx2 0.0, idx0 0.1, idx4 0.2, idx3 0.3, idx1 0.4; cumulative 0, .1, .3, .6, 1
    ("top_p", 0.3, [0, 2, 4]),        # 0.3 of the mass is reached after the third smallest
    ("top_p", 0.31, [0, 2, 3, 4]),
    ("top_k", 0.4, [0, 2]),           # ceil(0.4 x 5) = 2 smallest
    ("top_k_abs", 3, [0, 2, 4]),
])
def test_keep_smallest(strategy, value, expected):
    assert kept(S, strategy, value, keep="smallest") == expected


def test_keep_smallest_softmax_keeps_the_low_scores_mass():
    # softmax(-s): weights e^-0.1, e^-0.4, e^0, e^-0.3, e^-0.2; the smallest score is the heaviest
    w = np.exp(-np.array(S))
    w /= w.sum()
    first = w[2]  # idx2 (score 0) alone
    assert kept(S, "top_p_softmax", first, keep="smallest") == [2]
    assert kept(S, "top_p_softmax", first + 1e-6, keep="smallest") == [0, 2]


def test_keep_smallest_is_refused_where_it_means_nothing():
    with pytest.raises(ValueError, match="min_p has no keep=smallest"):
        select_groups(S, "min_p", 0.5, keep="smallest")
    with pytest.raises(ValueError, match="keep 'middle'"):
        select_groups(S, "top_k", 0.5, keep="middle")


def test_epsilon_keeps_near_ties_at_the_cut():
    s = [0.50, 0.30, 0.295, 0.10, 0.2999]
    # top_k_abs 2 keeps 0.50, 0.30; 0.2999 and 0.295 sit within 0.01 of the cut at 0.30
    assert kept(s, "top_k_abs", 2) == [0, 1]
    assert kept(s, "top_k_abs", 2, epsilon=0.001) == [0, 1, 4]
    assert kept(s, "top_k_abs", 2, epsilon=0.01) == [0, 1, 2, 4]
    assert kept(s, "top_k_abs", 1, keep="smallest", epsilon=0.1999) == [2, 3, 4]  # <= 0.2999
    assert kept(s, "top_k_abs", 0, epsilon=1.0) == []  # nothing kept: nothing to extend
    with pytest.raises(ValueError, match="epsilon"):
        select_groups(s, "top_k_abs", 2, epsilon=-1.0)
