"""Per-token KL estimators between the policy and a reference policy."""

from __future__ import annotations

import torch
from torch import Tensor

KL_ESTIMATORS = ("k1", "k2", "k3")

# exp(20) ~ 4.9e8: large but finite in fp32; keeps k3 from overflowing to inf.
_K3_LOG_RATIO_CLAMP = 20.0


def kl_penalty(logprobs: Tensor, ref_logprobs: Tensor, estimator: str = "k3") -> Tensor:
    """Elementwise estimate of KL(pi || pi_ref) from tokens sampled from pi.

    Args:
        logprobs: (B, T) log pi(token).
        ref_logprobs: (B, T) log pi_ref(token).
        estimator: one of ``KL_ESTIMATORS`` (Schulman, "Approximating KL Divergence", 2020):
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
    if estimator == "k1":
        return logprobs - ref_logprobs
    if estimator == "k2":
        return 0.5 * (logprobs - ref_logprobs).square()
    if estimator == "k3":
        log_ratio = (ref_logprobs - logprobs).clamp(-_K3_LOG_RATIO_CLAMP, _K3_LOG_RATIO_CLAMP)
        return torch.exp(log_ratio) - log_ratio - 1.0
    raise ValueError(f"unknown KL estimator {estimator!r}; allowed: {', '.join(KL_ESTIMATORS)}")
