"""Group filtering between rollout and update (``filter.strategy``; see ``pipeline``).

The building blocks live in small modules, re-exported here:
* ``scores``: per-group scores (``GROUP_SCORES``: reward_std, reward_mean, entropy,
  response_length) over a ``GroupBatch`` of per-episode arrays.
* ``select``: ``select_groups`` (``GROUP_SELECTORS``: top_p, top_p_softmax, top_k, top_k_abs,
  min_p), ``loss_scale`` and ``filter_metrics``.
* ``snr``: tiered SNR filtering (``TieredSNR``, ``template_score``, ``prompt_rng``).
"""

from __future__ import annotations

from ragen2.filtering.scores import (
    GROUP_SCORES,
    GroupBatch,
    entropy,
    group_scores,
    response_length,
    reward_mean,
    reward_std,
)
from ragen2.filtering.select import (
    GROUP_SELECTORS,
    LOSS_SCALES,
    filter_metrics,
    loss_scale,
    select_groups,
)
from ragen2.filtering.snr import GRADES, TieredSNR, prompt_rng, template_score

__all__ = [
    "GRADES",
    "GROUP_SCORES",
    "GROUP_SELECTORS",
    "LOSS_SCALES",
    "GroupBatch",
    "TieredSNR",
    "entropy",
    "filter_metrics",
    "group_scores",
    "loss_scale",
    "prompt_rng",
    "response_length",
    "reward_mean",
    "reward_std",
    "select_groups",
    "template_score",
]
