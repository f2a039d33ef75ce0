"""The RL objective as pure tensor functions: credit assignment, regulariser weights, the loss.

One micro-batch of B rows and T token columns goes in as a typed record, a loss and its metrics
come out; no model, no FSDP, no Ray. The learner (``ragen2.learner``) runs the forwards, fills
:class:`LossInputs` and backpropagates :attr:`LossOutputs.loss`; the gradient-SNR probe calls the
same terms one at a time. Every choice goes through a registry:

* credit assignment: ``algorithm.adv_estimator`` -> ``ADVANTAGE_ESTIMATORS``
  (:mod:`ragen2.algos.advantages`), :func:`assign_credit`;
* the policy term: ``algorithm.policy_loss`` -> ``POLICY_LOSSES`` (:mod:`ragen2.algos.policy_loss`);
* the regularisers: ``algorithm.kl_estimator`` (:mod:`ragen2.algos.kl`) and the SNR gate
  ``algorithm.regulariser_gate`` (:mod:`ragen2.algos.gating`).

The composed policy loss of a micro-batch (each term reduced by ``aggregate_loss`` with the
mini-batch's global counts, so micro-batch losses sum to the mini-batch's)::

    loss = policy_term - entropy_coef * entropy_term[w] + kl_coef * kl_term[w]

with ``w`` the regulariser weights (the filter's per-sample weights times the SNR gate; 1 when
None). The critic's term, ``value_coef * value_term``, is backpropagated through the critic on its
own (another model and optimiser). ``algorithm`` below is the ``algorithm`` config section
(:class:`ragen2.config.AlgorithmConfig`), read for its hyper-parameters only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

from torch import Tensor

from ragen2.algos.advantages import ADVANTAGE_ESTIMATORS, AdvantageInputs
from ragen2.algos.aggregation import aggregate_loss
from ragen2.algos.gating import regulariser_weights
from ragen2.algos.kl import kl_penalty
from ragen2.algos.policy_loss import POLICY_LOSSES, value_loss

if TYPE_CHECKING:
    from ragen2.config import AlgorithmConfig


# ------------------------------------------------------------------ credit assignment
def assign_credit(x: AdvantageInputs, algorithm: AlgorithmConfig,
                  ) -> tuple[Tensor, Optional[Tensor]]:
    """(B, T) advantages and (B, T) returns (None without a critic) of one micro-batch, by
    ``algorithm.adv_estimator`` (``ADVANTAGE_ESTIMATORS``)."""
    return ADVANTAGE_ESTIMATORS.get(algorithm.adv_estimator).assign(x, algorithm)


def needs_critic(algorithm: AlgorithmConfig) -> bool:
    """Whether ``algorithm.adv_estimator`` reads critic values (the learner then trains one)."""
    return ADVANTAGE_ESTIMATORS.get(algorithm.adv_estimator).needs_critic


def snr_gate(rewards: Tensor, group_ids: Tensor, algorithm: AlgorithmConfig) -> Optional[Tensor]:
    """(N,) float32 SNR gate of the KL and entropy terms (``algorithm.regulariser_gate``), or
    None when the gate is off. ``rewards`` (N,) episode returns, ``group_ids`` (N,)."""
    if algorithm.regulariser_gate == "none":
        return None
    return regulariser_weights(rewards, group_ids, algorithm.regulariser_gate,
                               algorithm.regulariser_gate_threshold)


def combined_regulariser_weights(filter_weights: Tensor, gate: Optional[Tensor],
                                 ) -> Optional[Tensor]:
    """(N,) weights of the KL and entropy terms: the filter's (N,) float32 regulariser weights
    times the (N,) gate; None when every weight is 1 (the terms are then aggregated once)."""
    reg = filter_weights
    if gate is not None:
        reg = reg * gate
    return None if bool((reg == 1).all()) else reg


# ------------------------------------------------------------------------------ the loss
@dataclass
class LossInputs:
    """One micro-batch of the objective. Tensors on one device; B rows, T token columns.

    logprobs:       (B, T) float32 log pi_theta of each token (with autograd).
    old_logprobs:   (B, T) float32 log pi_old (the policy that the ratio is taken against).
    advantages:     (B, T) float32, 0 off the mask, the per-sample loss weights applied.
    mask:           (B, T) loss mask (int or float), 1 on the tokens that are trained.
    entropy:        (B, T) float32 per-token entropy, or None (no entropy term nor metric).
    ref_logprobs:   (B, T) float32 log pi_ref of each token, or None (no KL term).
    regulariser_weights: (B, 1) float32 weight of each row's entropy and KL terms; None = all 1.
    agg_mode:       ``aggregate_loss`` mode of every term (``algorithm.loss_agg_mode``).
    num_tokens, num_seqs: the mini-batch's global token / sequence counts (``aggregate_loss``).
    norm_tokens:    Dr.GRPO's constant (``seq-mean-token-sum-norm``), or None.
    behaviour_weights: (B, T) float32 truncated importance weights pi_prox / pi_behav of the
                    decoupled objective (bounded staleness, :mod:`ragen2.algos.off_policy`;
                    ``old_logprobs`` is then pi_prox); None = on-policy, no correction.
    """

    logprobs: Tensor
    old_logprobs: Tensor
    advantages: Tensor
    mask: Tensor
    entropy: Optional[Tensor] = None
    ref_logprobs: Optional[Tensor] = None
    regulariser_weights: Optional[Tensor] = None
    agg_mode: str = "token-mean"
    num_tokens: Optional[float] = None
    num_seqs: Optional[float] = None
    norm_tokens: Optional[float] = None
    behaviour_weights: Optional[Tensor] = None


@dataclass
class LossOutputs:
    """The composed loss of a micro-batch and its terms (0-dim tensors).

    loss:        what the policy backpropagates (before the learner's loss scale x world size).
    policy_loss: the policy term (``POLICY_LOSSES``).
    entropy:     the unweighted aggregated entropy (a metric), None without ``entropy``.
    kl:          the unweighted aggregated KL to the reference (a metric), None without a reference.
    policy_metrics: the policy term's detached metrics (ppo_clip: clipfrac, clipfrac_dual,
                 approx_kl, ratio_mean), means over this micro-batch's mask.
    """

    loss: Tensor
    policy_loss: Tensor
    entropy: Optional[Tensor] = None
    kl: Optional[Tensor] = None
    policy_metrics: dict[str, Tensor] = field(default_factory=dict)


def _aggregate(per_token: Tensor, x: LossInputs) -> Tensor:
    return aggregate_loss(per_token, x.mask.float(), x.agg_mode, num_tokens=x.num_tokens,
                          num_seqs=x.num_seqs, norm_tokens=x.norm_tokens)


def _weighted(per_token: Tensor, x: LossInputs) -> Tensor:
    w = x.regulariser_weights
    return per_token if w is None else per_token * w


def policy_term(x: LossInputs, algorithm: AlgorithmConfig) -> tuple[Tensor, dict[str, Tensor]]:
    """The policy loss (``algorithm.policy_loss``) of the micro-batch and its metrics. With
    ``x.behaviour_weights`` (the decoupled objective) each token's loss is weighted by its
    importance weight, applied to the advantages (the policy losses are positively homogeneous
    in A)."""
    adv = x.advantages if x.behaviour_weights is None else x.advantages * x.behaviour_weights
    return POLICY_LOSSES.get(algorithm.policy_loss)(
        x.logprobs, x.old_logprobs, adv, x.mask, clip_low=algorithm.clip_ratio_low,
        clip_high=algorithm.clip_ratio_high, dual_clip_c=algorithm.dual_clip_c,
        agg_mode=x.agg_mode, num_tokens=x.num_tokens, num_seqs=x.num_seqs,
        norm_tokens=x.norm_tokens)


def entropy_term(x: LossInputs) -> Tensor:
    """The aggregated entropy, each row's tokens times its regulariser weight."""
    if x.entropy is None:
        raise ValueError("the entropy term needs LossInputs.entropy")
    return _aggregate(_weighted(x.entropy, x), x)


def kl_term(x: LossInputs, algorithm: AlgorithmConfig) -> Tensor:
    """The aggregated KL(pi || pi_ref) (``algorithm.kl_estimator``), weighted like the entropy."""
    if x.ref_logprobs is None:
        raise ValueError("the KL term needs LossInputs.ref_logprobs")
    return _aggregate(_weighted(kl_penalty(x.logprobs, x.ref_logprobs, algorithm.kl_estimator), x), x)


def compute_loss(x: LossInputs, algorithm: AlgorithmConfig) -> LossOutputs:
    """The composed policy loss of one micro-batch (module docstring), with its terms.

    The entropy term enters when ``algorithm.entropy_coef > 0``, the KL term when
    ``x.ref_logprobs`` is set (its weight is ``algorithm.kl_coef``).
    """
    pg, metrics = policy_term(x, algorithm)
    loss = pg
    ent = None
    if x.entropy is not None:
        ent = _aggregate(x.entropy, x)
        if algorithm.entropy_coef > 0:
            weighted = ent if x.regulariser_weights is None else entropy_term(x)
            loss = loss - algorithm.entropy_coef * weighted
    elif algorithm.entropy_coef > 0:
        raise ValueError("algorithm.entropy_coef > 0 needs LossInputs.entropy")
    kl = None
    if x.ref_logprobs is not None:
        kl_tok = kl_penalty(x.logprobs, x.ref_logprobs, algorithm.kl_estimator)
        kl = _aggregate(kl_tok, x)
        loss = loss + algorithm.kl_coef * (kl if x.regulariser_weights is None
                                           else _aggregate(_weighted(kl_tok, x), x))
    return LossOutputs(loss=loss, policy_loss=pg, entropy=ent, kl=kl, policy_metrics=metrics)


@dataclass
class ValueInputs:
    """One micro-batch of the critic's term. All (B, T) float32 on one device.

    values: the critic's values now (with autograd); old_values: at rollout time (the clip's
    centre); returns: the estimator's returns; mask and the counts as in :class:`LossInputs`.
    """

    values: Tensor
    old_values: Tensor
    returns: Tensor
    mask: Tensor
    agg_mode: str = "token-mean"
    num_tokens: Optional[float] = None
    num_seqs: Optional[float] = None
    norm_tokens: Optional[float] = None


def value_term(x: ValueInputs, algorithm: AlgorithmConfig) -> Tensor:
    """The critic's (clipped, ``algorithm.value_clip``) value loss; it enters the composed loss
    times ``algorithm.value_coef``."""
    loss, _ = value_loss(x.values, x.old_values, x.returns, x.mask, clip_range=algorithm.value_clip,
                         agg_mode=x.agg_mode, num_tokens=x.num_tokens, num_seqs=x.num_seqs,
                         norm_tokens=x.norm_tokens)
    return loss


__all__ = [
    "LossInputs", "LossOutputs", "ValueInputs", "assign_credit", "combined_regulariser_weights",
    "compute_loss", "entropy_term", "kl_term", "needs_critic", "policy_term", "snr_gate",
    "value_term",
]
