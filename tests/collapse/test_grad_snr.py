"""Gradient-SNR buckets (hand-computed) and one σ_g for the filter, the metrics and the buckets."""

from __future__ import annotations

import numpy as np
import pytest

from ragen2.collapse.grad_snr import spread_buckets


@pytest.mark.parametrize("stds, n, expected", [
    # the example: quantile edges put these in [1,1,1,1,1,2,2,2]; bucket 0 was never used
    ([0, 0, 0, 0, 0, .5, .4, .3], 3, [0, 0, 0, 0, 0, 3, 2, 1]),
    # >= 2/3 of the groups without spread: the groups with signal still spread over the buckets
    ([0, 0, 0, 0, .2, .1], 2, [0, 0, 0, 0, 2, 1]),
    # no zero group: equal-count rank buckets 1..3, two groups each
    ([.6, .1, .5, .2, .4, .3], 3, [3, 1, 3, 1, 2, 2]),
    # ties share a bucket (rank = number of strictly smaller spreads)
    ([.3, .3, .3, .7], 2, [1, 1, 1, 2]),
    # fewer groups with signal than buckets: the rest stay empty
    ([0, .4], 3, [0, 1]),
    ([0, 0], 3, [0, 0]),
    ([1e-9, 2e-8], 2, [0, 1]),  # the filter's zero threshold (ZERO_EPS = 1e-8)
])
def test_spread_buckets_by_hand(stds, n, expected):
    assert spread_buckets(np.array(stds), n).tolist() == expected


def test_spread_buckets_refuses_zero_buckets():
    with pytest.raises(ValueError, match="n_buckets"):
        spread_buckets(np.array([0.1]), 0)


class _T:
    def __init__(self, group_id, reward):
        self.group_id, self.reward = group_id, reward
        self.num_turns, self.num_format_errors, self.num_invalid_actions = 1, 0, 0
        self.success, self.env_return, self.truncated = False, reward, False
        self.num_generated, self.input_ids, self.env_error = 1, [0], None


def test_metrics_filter_and_buckets_see_the_same_zero_spread_groups():
    """Group 1's returns [0, 2e-8] have σ = 1e-8, exactly the threshold: the metrics counted it
    as having spread (σ < 1e-8 was zero there), the filter as having none (σ <= 1e-8)."""
    from ragen2.controller import rollout_metrics
    from ragen2.filtering.scores import GroupBatch, reward_std
    from ragen2.filtering.select import filter_metrics

    trajs = [_T(0, 0.0), _T(0, 1.0), _T(1, 0.0), _T(1, 2e-8), _T(2, 1.0), _T(2, 1.0)]
    m = rollout_metrics(trajs, "rollout")
    stds = reward_std(GroupBatch.from_arrays([t.group_id for t in trajs], [t.reward for t in trajs]))
    f = filter_metrics(stds, stds, np.arange(3))
    assert m["rollout/zero_std_group_frac"] * 3 == f["filter/zero_std_groups"] == 2
    assert (spread_buckets(stds.numpy(), 3) == 0).sum() == 2
    assert m["rollout/group_reward_std_mean"] == pytest.approx(f["rollout/in_group_reward_std"])
