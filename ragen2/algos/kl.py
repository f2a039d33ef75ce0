"""Per-token KL estimators between the policy and a reference policy, in a registry
(``algorithm.kl_estimator``: a built-in or a name a plugin module registers)."""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from ragen2.registry import Registry

#: (logprobs (B, T), ref_logprobs (B, T)) -> (B, T) per-token penalty, unmasked
KLEstimator = Callable[[Tensor, Tensor], Tensor]

KL_PENALTIES: Registry[KLEstimator] = Registry("KL estimator", ordered=True)

# exp(20) ~ 4.9e8: large but finite in fp32; keeps k3 from overflowing to inf.
_K3_LOG_RATIO_CLAMP = 20.0


@KL_PENALTIES.register("k1")
def k1(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """log pi - log pi_ref: unbiased, high variance, can be < 0."""
    return logprobs - ref_logprobs


@KL_PENALTIES.register("k2")
def k2(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """0.5 * (log pi - log pi_ref)^2: biased, low variance, >= 0."""
    return 0.5 * (logprobs - ref_logprobs).square()


@KL_PENALTIES.register("k3")
def k3(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """exp(r) - r - 1 with r = log pi_ref - log pi: unbiased, low variance, >= 0. r is clamped to
    [-20, 20] before exponentiating so a wildly off-policy token gives a large finite penalty
    instead of inf/NaN."""
    log_ratio = (ref_logprobs - logprobs).clamp(-_K3_LOG_RATIO_CLAMP, _K3_LOG_RATIO_CLAMP)
    return torch.exp(log_ratio) - log_ratio - 1.0


#: the built-in estimators' names, in their documented order (:data:`KL_PENALTIES` holds these
#: and any a plugin registers: check names against the registry, not this tuple)
KL_ESTIMATORS = tuple(KL_PENALTIES.names())


def kl_penalty(logprobs: Tensor, ref_logprobs: Tensor, estimator: str = "k3") -> Tensor:
    """Elementwise estimate of KL(pi || pi_ref) from tokens sampled from pi.

    Args:
        logprobs: (B, T) log pi(token).
        ref_logprobs: (B, T) log pi_ref(token).
        estimator: a name in ``KL_PENALTIES`` (Schulman, "Approximating KL Divergence", 2020):
            - "k1": log pi - log pi_ref                         (unbiased, high variance, can be < 0)
            - "k2": 0.5 * (log pi - log pi_ref)^2               (biased, low variance, >= 0)
            - "k3": exp(r) - r - 1 with r = log pi_ref - log pi (unbiased, low variance, >= 0)
              r is clamped to [-20, 20] before exponentiating so a wildly off-policy token gives a
              large finite penalty instead of inf/NaN.

    Returns:
        (B, T) per-token penalty (not masked; the caller masks/aggregates).
    Raises:
        ValueError: unknown estimator.
    """
    if estimator not in KL_PENALTIES:
        raise ValueError(f"unknown KL estimator {estimator!r}; allowed: "
                         f"{', '.join(KL_PENALTIES.names())}")
    return KL_PENALTIES.get(estimator)(logprobs, ref_logprobs)
