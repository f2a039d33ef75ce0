"""ragen2/rollout/archive.py: which samples a log keeps."""

from __future__ import annotations

from ragen2.rollout.archive import spread


def test_spread_covers_the_whole_list():
    items = list(range(10))
    assert spread(items, 3) == [0, 4, 9]  # linspace 0, 4.5, 9 rounded half to even
    assert spread(items, 20) == items and spread(items, 0) == [] and spread([], 3) == []
