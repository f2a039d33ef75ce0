"""Group filtering between rollout and update, chosen by ``filter.name`` from GROUP_FILTERS.

A filter takes the per-group reward arrays and returns the group ids to keep.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

from ragen2.registry import Registry

GroupFilter = Callable[[Mapping[int, Sequence[float]]], list[int]]
GROUP_FILTERS: Registry = Registry("group filter")


@GROUP_FILTERS.register("none")
def keep_all(group_rewards: Mapping[int, Sequence[float]], **_: object) -> list[int]:
    """Keep every group."""
    return sorted(group_rewards)
