"""The training batch: what the controller hands the learner for one update (typed, numpy).

Built by :func:`ragen2.rollout.trajectory.collate` from the kept trajectories; the controller adds
the filter's decision (per-sample weights and the loss scale) with ``dataclasses.replace``. Numpy
arrays travel zero-copy through Ray's object store; every learner rank receives the whole batch.
N rows (trajectories), L token columns (the longest trajectory; rows are right-padded).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping, Optional

import numpy as np


@dataclass(frozen=True)
class TrainingBatch:
    """One update's rollouts.

    input_ids:      (N, L) int64 token ids (prompt, generated ids, observations), right-padded.
    attention_mask: (N, L) int64, 1 on real tokens.
    loss_mask:      (N, L) int64, 1 on generated tokens (the trained ones).
    logprobs:       (N, L) float32 the engine's logprob of each generated token (0 elsewhere).
    token_rewards:  (N, L) float32 each turn's reward on the turn's last generated token.
    rewards:        (N,) float32 episode returns.
    group_ids:      (N,) int64 group (prompt) of each row.
    policy_version: (N,) int64 version of the policy that generated each row.
    temperature_scales: (N,) float32 factor on the sampling temperature of each row; None = 1.
    sample_weights: (N,) float32 the filter's loss weight of each sample, applied to its
                    advantages (tiered SNR filtering); None = 1.
    regulariser_weights: (N,) float32 the filter's weight of each sample's entropy and KL terms;
                    None = the same as ``sample_weights`` (``filter.tiered.weight_target=loss``;
                    ``advantage`` sends ones).
    loss_scale:     the filter's factor on the whole loss (the kept fraction; 1 = none).
    """

    input_ids: np.ndarray
    attention_mask: np.ndarray
    loss_mask: np.ndarray
    logprobs: np.ndarray
    token_rewards: np.ndarray
    rewards: np.ndarray
    group_ids: np.ndarray
    policy_version: np.ndarray
    temperature_scales: Optional[np.ndarray] = None
    sample_weights: Optional[np.ndarray] = None
    regulariser_weights: Optional[np.ndarray] = None
    loss_scale: float = 1.0

    def __len__(self) -> int:
        return len(self.rewards)

    @classmethod
    def of(cls, batch: TrainingBatch | Mapping[str, Any]) -> TrainingBatch:
        """``batch`` itself, or a mapping of the same field names made into one (scripts, tests)."""
        if isinstance(batch, cls):
            return batch
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(batch) - names)
        if unknown:
            raise KeyError(f"unknown training batch field(s) {unknown}; allowed: {sorted(names)}")
        kwargs = dict(batch)
        if "loss_scale" in kwargs:
            kwargs["loss_scale"] = float(kwargs["loss_scale"])
        return cls(**kwargs)
