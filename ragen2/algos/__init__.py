"""RL algorithm math: pure tensor functions (advantages, losses, KL, log-probs) and the objective
that composes them (:mod:`ragen2.algos.objective`). The registries (advantage estimators, policy
losses, KL estimators, aggregation modes, regulariser gates) are what a plugin module adds to."""

from ragen2.algos.advantages import (ADVANTAGE_ESTIMATORS, AdvantageEstimator, AdvantageInputs,
                                     gae_advantages, grpo_advantages, masked_whiten)
from ragen2.algos.aggregation import LOSS_AGG_MODES, aggregate_loss
from ragen2.algos.gating import REGULARISER_GATES
from ragen2.algos.kl import KL_ESTIMATORS, KL_PENALTIES, kl_penalty
from ragen2.algos.logits import entropy_from_logits, logprobs_and_entropy, logprobs_from_logits
from ragen2.algos.policy_loss import POLICY_LOSSES, ppo_clip_loss, value_loss
from ragen2.algos.objective import LossInputs, LossOutputs, assign_credit, compute_loss

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "AdvantageEstimator",
    "AdvantageInputs",
    "LossInputs",
    "LossOutputs",
    "assign_credit",
    "compute_loss",
    "KL_ESTIMATORS",
    "KL_PENALTIES",
    "LOSS_AGG_MODES",
    "POLICY_LOSSES",
    "REGULARISER_GATES",
    "aggregate_loss",
    "entropy_from_logits",
    "gae_advantages",
    "grpo_advantages",
    "kl_penalty",
    "logprobs_and_entropy",
    "logprobs_from_logits",
    "masked_whiten",
    "ppo_clip_loss",
    "value_loss",
]
