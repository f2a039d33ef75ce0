"""Which prompt groups to train on: ``select_groups(scores, strategy, value)`` (RAGEN-2 filtering).

A strategy maps the (G,) group scores (``scores.py``; σ_g by default) to the kept group
indices. Strategies live in ``GROUP_SELECTORS``; every one first restricts itself to the
*eligible* groups: all of them with ``include_zero=True``, otherwise the groups whose score is
> 1e-8 (or, when ``zero_groups`` is given, the groups it does not flag, so that a non-σ score can
still drop the σ = 0 groups).

Orders are descending by score and stable (equal scores: lower index first). With E eligible
groups, scores s (sorted descending s_(1) >= s_(2) >= ...):

* ``top_p`` (linear), p in [0, 1]: keep the shortest prefix with Σ_{j<=k} s_(j) >= p·Σ s
  (at least one group when p > 0). p = 1 keeps every eligible group, p = 0 none, and an
  all-zero eligible set is kept whole (nothing distinguishes its groups). Scores must be >= 0.
* ``top_p_softmax``, p in [0, 1]: π = softmax(s / temperature); keep the shortest prefix with
  Σ π_(j) >= p (at least one when p > 0; p = 1 keeps all).
* ``top_k``, fraction f in [0, 1]: keep the ceil(f·E) highest.
* ``top_k_abs``, integer count c >= 0: keep the min(c, E) highest.
* ``min_p``, p in [0, 1]: keep the groups with s >= p·max(s). Scores must be >= 0.

Prefix sums and the min_p threshold are compared with a 1e-9 relative tolerance (and ceil(f·E)
with 1e-9 slack) so that binary rounding does not keep an extra group: 0.7 + 0.1
(= 0.7999999999999999) "reaches" 0.8·1.0, 0.3 passes 0.75·0.4, ceil(0.28·25) is 7.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ragen2.registry import Registry

ZERO_EPS = 1e-8  # a group with score (or σ) <= this carries no signal
_REL_TOL = 1e-9


@dataclass(frozen=True)
class Strategy:
    """keep: (E,) float64 eligible scores, value, temperature, ascending -> LongTensor positions
    into them (``ascending``: keep the smallest scores instead of the largest)."""

    keep: Callable[[Tensor, float, float, bool], Tensor]
    check_value: Callable[[str, Any], float]
    #: (value, factor in (0, 1)) -> the value that keeps about ``factor`` x as much (collapse
    #: rollback: ``FilterPipeline.strengthen``)
    stronger: Callable[[float, float], float]
    nonnegative_scores: bool = False
    has_smallest: bool = True  # min_p has no keep-smallest form


GROUP_SELECTORS: Registry[Strategy] = Registry("group selection strategy")


# ------------------------------------------------------------------ value checks
def _real(strategy: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{strategy} value must be a number, got {value!r}")
    v = float(value)
    if math.isnan(v):
        raise ValueError(f"{strategy} value is NaN; it must be a number")
    return v


def _fraction(strategy: str, value: Any) -> float:
    v = _real(strategy, value)
    if not 0.0 <= v <= 1.0:
        raise ValueError(f"{strategy} value {value!r} is out of range; allowed: a fraction in [0, 1]")
    return v


def _count(strategy: str, value: Any) -> float:
    v = _real(strategy, value)
    if not (math.isfinite(v) and v >= 0 and v == int(v)):
        raise ValueError(f"{strategy} value {value!r} is not a group count; allowed: an integer >= 0")
    return v


# ------------------------------------------------------------------ strategies
def _desc(s: Tensor, ascending: bool = False) -> Tensor:
    """Positions of s sorted by score, descending (or ascending), ties by lower position first."""
    return torch.sort(s, descending=not ascending, stable=True).indices


def _shortest_prefix(order: Tensor, mass: Tensor, target: float, total: float) -> Tensor:
    """The first k of ``order`` with k the least count whose cumulative mass reaches target (k >= 1)."""
    cum = torch.cumsum(mass[order], 0)
    k = int((cum < target - _REL_TOL * abs(total)).sum()) + 1
    return order[: min(k, len(order))]


def _all(s: Tensor) -> Tensor:
    return torch.arange(len(s))


def _none() -> Tensor:
    return torch.zeros(0, dtype=torch.long)


def top_p_linear(s: Tensor, p: float, temperature: float = 1.0, ascending: bool = False) -> Tensor:
    total = float(s.sum())
    if p >= 1.0 or total <= 0.0:
        return _all(s)
    if p <= 0.0:
        return _none()
    return _shortest_prefix(_desc(s, ascending), s, p * total, total)


def top_p_softmax(s: Tensor, p: float, temperature: float = 1.0, ascending: bool = False) -> Tensor:
    if p >= 1.0 or len(s) == 0:
        return _all(s)
    if p <= 0.0:
        return _none()
    probs = torch.softmax((-s if ascending else s) / temperature, dim=0)
    return _shortest_prefix(_desc(s, ascending), probs, p, 1.0)


def top_k_fraction(s: Tensor, f: float, temperature: float = 1.0, ascending: bool = False) -> Tensor:
    k = max(0, math.ceil(f * len(s) - 1e-9))
    return _desc(s, ascending)[:k]


def top_k_count(s: Tensor, c: float, temperature: float = 1.0, ascending: bool = False) -> Tensor:
    return _desc(s, ascending)[: int(c)]


def min_p(s: Tensor, p: float, temperature: float = 1.0, ascending: bool = False) -> Tensor:
    if len(s) == 0:
        return _none()
    top = float(s.max())
    return torch.nonzero(s >= p * top - _REL_TOL * abs(top)).reshape(-1)


def _shrink_share(v: float, f: float) -> float:  # a kept share (of mass or of groups)
    return v * f


def _shrink_count(v: float, f: float) -> float:  # a kept count, at least one group
    return float(max(1, math.floor(v * f)))


def _raise_threshold(v: float, f: float) -> float:  # a threshold relative to the best score
    return 1.0 - (1.0 - v) * f


GROUP_SELECTORS.add("top_p", Strategy(top_p_linear, _fraction, _shrink_share,
                                      nonnegative_scores=True))
GROUP_SELECTORS.add("top_p_softmax", Strategy(top_p_softmax, _fraction, _shrink_share))
GROUP_SELECTORS.add("top_k", Strategy(top_k_fraction, _fraction, _shrink_share))
GROUP_SELECTORS.add("top_k_abs", Strategy(top_k_count, _count, _shrink_count))
GROUP_SELECTORS.add("min_p", Strategy(min_p, _fraction, _raise_threshold, nonnegative_scores=True,
                                      has_smallest=False))
KEEP_MODES = ("largest", "smallest")


def _as_scores(scores: Any) -> Tensor:
    s = torch.as_tensor(np.asarray(scores, dtype=np.float64) if not isinstance(scores, Tensor)
                        else scores.detach().cpu()).to(torch.float64)
    if s.dim() != 1:
        raise ValueError(f"scores must be 1-D (one per group), got shape {tuple(s.shape)}")
    if not bool(torch.isfinite(s).all()):
        raise ValueError("scores must be finite; got NaN or inf at group indices "
                         f"{torch.nonzero(~torch.isfinite(s)).reshape(-1).tolist()}")
    return s


def select_groups(scores: Any, strategy: str, value: float, include_zero: bool = True,
                  temperature: float = 1.0, zero_groups: Any = None, keep: str = "largest",
                  epsilon: float = 0.0) -> Tensor:
    """Kept group indices (ascending LongTensor) out of ``scores`` (G,).

    Args:
        scores: (G,) float scores (tensor, list or array), e.g. ``group_scores(batch)``.
        strategy: a name in ``GROUP_SELECTORS`` (see the module docstring).
        value: p / fraction in [0, 1], or an integer count for ``top_k_abs``.
        include_zero: if False, zero-signal groups are never kept.
        temperature: softmax temperature of ``top_p_softmax`` (> 0; checked for every strategy).
        zero_groups: optional (G,) bool, True for zero-signal groups (e.g. ``reward_std <= 1e-8``);
            default ``scores <= 1e-8``.
        keep: ``largest`` (the order above) or ``smallest`` (the same rule over scores sorted
            ascending; ``top_p_softmax`` uses softmax(-s / temperature); not for ``min_p``).
        epsilon: near-ties (>= 0): an eligible group whose score is within ``epsilon`` of the
            last kept score (the kept minimum for ``largest``, maximum for ``smallest``) is kept
            too, so groups tied at the cut are not split by their index. 0 = off.

    Raises ValueError naming the bad argument and what is allowed.
    """
    if strategy not in GROUP_SELECTORS:
        raise ValueError(f"unknown group selection strategy {strategy!r}; "
                         f"allowed: {', '.join(GROUP_SELECTORS.names())}")
    strat = GROUP_SELECTORS.get(strategy)
    v = strat.check_value(strategy, value)
    if isinstance(temperature, bool) or not (isinstance(temperature, numbers.Real)
                                             and math.isfinite(temperature) and temperature > 0):
        raise ValueError(f"temperature {temperature!r} is invalid; allowed: a finite number > 0")
    s = _as_scores(scores)
    if strat.nonnegative_scores and bool((s < 0).any()):
        raise ValueError(f"{strategy} needs non-negative scores (got min {float(s.min()):g}); "
                         "for signed scores such as reward_mean use top_k, top_k_abs or top_p_softmax")
    if include_zero:
        eligible = torch.arange(len(s))
    else:
        zero = s <= ZERO_EPS if zero_groups is None else torch.as_tensor(zero_groups, dtype=torch.bool)
        if zero.shape != s.shape:
            raise ValueError(f"zero_groups has shape {tuple(zero.shape)}; it must match scores "
                             f"{tuple(s.shape)}")
        eligible = torch.nonzero(~zero).reshape(-1)
    if keep not in KEEP_MODES:
        raise ValueError(f"keep {keep!r} is invalid; allowed: {', '.join(KEEP_MODES)}")
    if keep == "smallest" and not strat.has_smallest:
        raise ValueError(f"{strategy} has no keep=smallest form; use top_p, top_p_softmax, top_k "
                         "or top_k_abs")
    if isinstance(epsilon, bool) or not (isinstance(epsilon, numbers.Real)
                                         and math.isfinite(epsilon) and epsilon >= 0):
        raise ValueError(f"epsilon {epsilon!r} is invalid; allowed: a finite number >= 0")
    es = s[eligible]
    pos = strat.keep(es, v, float(temperature), keep == "smallest")
    if epsilon > 0 and len(pos):
        if keep == "largest":
            pos = torch.nonzero(es >= float(es[pos].min()) - epsilon).reshape(-1)
        else:
            pos = torch.nonzero(es <= float(es[pos].max()) + epsilon).reshape(-1)
    kept = eligible[pos]
    return torch.sort(kept).values.to(torch.long)


# ------------------------------------------------------------------ loss rescaling
# Filtering drops groups but a mean-reduced loss over the survivors keeps the same magnitude, so a
# step on 2 surviving groups moves the policy as far as a step on 64. Scaling the loss by the kept
# fraction f ("linear") makes a dropped group count as a zero gradient in the full-batch mean:
# fewer surviving groups -> a proportionally smaller update. "sqrt" is the middle ground (shrinks
# the update, but less than linear); "none" keeps the plain mean over the survivors.
LOSS_SCALES: Registry[Callable[[float], float]] = Registry("loss scale mode")
LOSS_SCALES.add("none", lambda f: 1.0)
LOSS_SCALES.add("linear", lambda f: f)
LOSS_SCALES.add("sqrt", math.sqrt)


def loss_scale(kept_fraction: float, mode: str) -> float:
    """Multiplier for the loss given the kept fraction in (0, 1] (see LOSS_SCALES above)."""
    if mode not in LOSS_SCALES:
        raise ValueError(f"unknown loss scale mode {mode!r}; allowed: {', '.join(LOSS_SCALES.names())}")
    f = float(kept_fraction)
    if not 0.0 < f <= 1.0:
        raise ValueError(f"kept_fraction {kept_fraction!r} is out of range; allowed: (0, 1] "
                         "(a step with no kept group is skipped, not rescaled)")
    return float(LOSS_SCALES.get(mode)(f))


def mean_reward_spread(reward_std: Tensor) -> float:
    """The mean in-group reward spread σ̄ of (G,) reward stds; 0.0 when G = 0."""
    std = torch.as_tensor(reward_std, dtype=torch.float64)
    return float(std.mean()) if len(std) else 0.0


def filter_metrics(reward_std: Tensor, scores: Tensor, kept: Tensor) -> dict[str, float]:
    """Step metrics from (G,) reward stds, (G,) scores and the kept indices; 0.0 when G = 0."""
    g = len(scores)
    if len(reward_std) != g:
        raise ValueError(f"reward_std has {len(reward_std)} groups but scores has {g}")
    std = torch.as_tensor(reward_std, dtype=torch.float64)
    sc = torch.as_tensor(scores, dtype=torch.float64)
    return {
        "filter/kept_ratio": len(kept) / g if g else 0.0,
        "filter/zero_std_groups": float((std <= ZERO_EPS).sum()),
        "filter/score_mean": float(sc.mean()) if g else 0.0,
        "rollout/in_group_reward_std": mean_reward_spread(std),
    }
