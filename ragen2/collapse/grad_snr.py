"""Buckets of the gradient-SNR diagnostic: prompt groups by the spread of their rewards.

A group whose rewards do not differ (σ_g = 0) has no task gradient at all, so it gets its own
bucket 0; the other groups are ranked by σ_g and split into ``n_buckets`` equal-count buckets
1..n_buckets (lowest spread in 1). Ranking, not quantile edges: with many σ = 0 groups quantile
edges collapse onto 0 and every group with signal lands in one bucket, which is the regime the
diagnostic exists for.
"""

from __future__ import annotations

import numpy as np

from ragen2.filtering.select import ZERO_EPS


def spread_buckets(stds: np.ndarray, n_buckets: int) -> np.ndarray:
    """(G,) reward spreads σ_g -> (G,) int bucket: 0 if σ_g <= ZERO_EPS, else 1..n_buckets.

    Bucket of a group with signal = 1 + ⌊rank · n_buckets / M⌋, with M the number of such groups
    and rank the number of them with a strictly smaller σ (ties share a bucket). With M <
    n_buckets some buckets stay empty. Example: σ = [0, 0, 0, 0, 0, .5, .4, .3], n_buckets = 3
    -> [0, 0, 0, 0, 0, 3, 2, 1].
    """
    if n_buckets < 1:
        raise ValueError(f"n_buckets must be >= 1, got {n_buckets}")
    s = np.asarray(stds, dtype=np.float64).reshape(-1)
    out = np.zeros(len(s), dtype=np.int64)
    signal = s > ZERO_EPS
    m = int(signal.sum())
    if m:
        vals = s[signal]
        rank = np.searchsorted(np.sort(vals), vals, side="left")
        out[signal] = 1 + rank * n_buckets // m
    return out
