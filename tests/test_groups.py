"""ragen2.groups: the one group reward σ_g, against hand-worked numbers."""

from __future__ import annotations

import numpy as np
import pytest

from ragen2.groups import group_index, group_mean, group_std


def test_group_std_is_the_population_std_per_group_in_sorted_id_order():
    # group 7: [0, 1] -> σ 0.5; group 2: [3] -> 0; group 5: [1, 1, 4] -> mean 2, σ sqrt(2)
    rewards = [0.0, 3.0, 1.0, 1.0, 1.0, 4.0]
    groups = [7, 2, 7, 5, 5, 5]
    inv, counts = group_index(groups)
    assert inv.tolist() == [2, 0, 2, 1, 1, 1] and counts.tolist() == [1, 3, 2]
    assert group_mean(np.asarray(rewards), groups).tolist() == [3.0, 2.0, 0.5]
    std = group_std(rewards, groups)
    assert std.dtype == np.float64
    assert std.tolist() == pytest.approx([0.0, np.sqrt(2.0), 0.5])


def test_group_std_has_no_cancellation_and_accepts_string_ids():
    big = 1e9
    std = group_std([big, big + 1, big + 2], ["a", "a", "a"])
    assert std.tolist() == pytest.approx([np.sqrt(2 / 3)], rel=1e-9)
    assert group_std([], []).shape == (0,)
