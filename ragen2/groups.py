"""Per-group statistics of per-episode values; the one place the group reward σ_g is computed.

Groups come in sorted group-id order. σ_g is the population std (ddof 0) in float64, computed in
two passes (the group mean, then the mean squared deviation from it), so there is no
E[x²] − E[x]² cancellation; a one-episode group has σ_g = 0. The filter's ``reward_std`` score,
the step metrics (``rollout/group_reward_std_mean``) and ``ragen2-analyze`` all read it from here.
Pure numpy; imports nothing of ragen2.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def group_index(group_ids: Any) -> tuple[np.ndarray, np.ndarray]:
    """(N,) group ids (any sortable values) -> (inv (N,) position of each episode's group in
    sorted id order, counts (G,))."""
    _, inv, counts = np.unique(np.asarray(group_ids), return_inverse=True, return_counts=True)
    return inv.reshape(-1), counts


def group_mean(values: Any, group_ids: Any) -> np.ndarray:
    """(N,) per-episode values -> (G,) float64 per-group means."""
    inv, counts = group_index(group_ids)
    return np.bincount(inv, weights=values, minlength=len(counts)) / counts


def group_std(values: Any, group_ids: Any) -> np.ndarray:
    """(N,) per-episode values -> (G,) float64 population std (ddof 0) of each group: σ_g."""
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    inv, counts = group_index(group_ids)
    mean = np.bincount(inv, weights=v, minlength=len(counts)) / counts
    dev = v - mean[inv]
    return np.sqrt(np.bincount(inv, weights=dev * dev, minlength=len(counts)) / counts)
