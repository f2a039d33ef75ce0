"""SNR-gated regularisers (ragen2.algos.gating), by hand."""

import pytest
import torch

from ragen2.algos.gating import group_spread, regulariser_weights

# groups: 0 -> [1, 0] σ 0.5; 1 -> [1, 1] σ 0; 2 -> [3, 0, 0, 3]... kept simple: [2, 0] σ 1
REWARDS = torch.tensor([1.0, 0.0, 1.0, 1.0, 2.0, 0.0])
GROUPS = torch.tensor([0, 0, 1, 1, 2, 2])


def test_group_spread_is_the_population_std_of_each_samples_group():
    assert group_spread(REWARDS, GROUPS).tolist() == pytest.approx([0.5, 0.5, 0, 0, 1.0, 1.0])


@pytest.mark.parametrize("gate, threshold, expected", [
    ("none", 0.0, [1, 1, 1, 1, 1, 1]),
    ("threshold", 0.0, [1, 1, 0, 0, 1, 1]),      # only the σ = 0 group loses its regularisers
    ("threshold", 0.6, [0, 0, 0, 0, 1, 1]),
    ("scaled", 0.0, [0.5, 0.5, 0, 0, 1, 1]),     # σ / max σ
])
def test_regulariser_weights_by_hand(gate, threshold, expected):
    assert regulariser_weights(REWARDS, GROUPS, gate, threshold).tolist() == pytest.approx(expected)


def test_no_spread_anywhere_scales_to_zero_and_bad_gates_are_refused():
    assert regulariser_weights(torch.ones(4), torch.tensor([0, 0, 1, 1]), "scaled").tolist() == [0] * 4
    with pytest.raises(ValueError, match="threshold, scaled"):
        regulariser_weights(REWARDS, GROUPS, "soft")
