"""The filter step of the training loop: score groups, select them, and (tiered mode) weight them.

:class:`FilterPipeline` wraps the pure pieces of this package for the controller: it scores the
groups of a rollout batch (``filter.metric``), keeps them with :func:`select_groups`, and in tiered
mode folds every group into the :class:`TieredSNR` history (reward spread and template score of its
first-turn reasoning), draws the next step's prompts and temperature multipliers from the pool and
gives each kept sample its loss weight. Its state is JSON, saved with every checkpoint.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Sequence

import numpy as np
import torch

from ragen2.filtering.scores import GroupBatch, group_scores, reward_std
from ragen2.filtering.select import (GROUP_SELECTORS, ZERO_EPS, filter_metrics, loss_scale,
                                     mean_reward_spread, select_groups)
from ragen2.filtering.snr import TieredSNR, prompt_rng, template_score

log = logging.getLogger("ragen2")


@dataclasses.dataclass(frozen=True)
class Selection:
    """The filter's choice for one batch."""

    #: the group ids kept for the update (empty: nothing to train on this step)
    kept: set[int]
    #: ``filter/*`` (+ ``snr/*``) and ``rollout/in_group_reward_std``, for logging
    metrics: dict[str, float]
    #: the batch's mean in-group reward spread σ̄ (the early stop's input); None for no episodes
    reward_spread: float | None = None


def pool_blocks(pool_size: int, shares: Sequence[float]) -> list[np.ndarray]:
    """The tiered pool's keys of each training env: contiguous blocks sized by the env shares
    (largest remainder, as the step's groups are split). Key k is env e's prompt for good."""
    from ragen2.rollout.envs import allocate

    sizes = allocate(pool_size, shares)
    edges = np.cumsum([0, *sizes])
    return [np.arange(edges[i], edges[i + 1]) for i in range(len(sizes))]


class FilterPipeline:
    def __init__(self, cfg: Any, seed: int, shares: Sequence[float] = (1.0,)) -> None:
        """``cfg`` is a ``FilterConfig``; ``seed`` the run seed (prompt sampling derives from it);
        ``shares`` the training envs' shares (``env.mix``), which split the tiered pool."""
        self.cfg, self.seed, self.shares = cfg, seed, list(shares)
        t = cfg.tiered
        self.tiered = TieredSNR(
            t.pool_size, ema=t.ema, low_threshold=t.low_threshold, high_threshold=t.high_threshold,
            reestimate_every=t.reestimate_every, priority_ratio=t.priority_ratio,
            low_weight=t.low_weight, high_weight=t.high_weight,
            perturb_threshold=t.perturb_threshold,
            perturb_temperature=t.perturb_temperature) if t.enabled else None
        self._warned_at = -10**9
        self.strengthened: list[float] = []  # the factors of every strengthen() so far

    def strengthen(self, factor: float) -> str:
        """Filter harder after a collapse rollback; returns what changed. The rule: groups without
        reward spread are dropped (``include_zero=false``) and the kept share shrinks by
        ``factor`` (``Strategy.stronger``: p -> p x factor for top_p / top_p_softmax / top_k,
        k -> max(1, floor(k x factor)) for top_k_abs, p -> 1 - (1 - p) x factor for min_p);
        ``strategy=none`` becomes top_p on reward_std at p = factor."""
        c = self.cfg
        if c.strategy == "none":
            new = dataclasses.replace(c, strategy="top_p", value=factor, metric="reward_std",
                                      include_zero=False)
        else:
            new = dataclasses.replace(c, value=GROUP_SELECTORS.get(c.strategy).stronger(
                float(c.value), factor), include_zero=False)
        self.cfg = new
        self.strengthened.append(float(factor))
        return (f"filter {c.strategy} value {c.value} include_zero {c.include_zero} -> "
                f"{new.strategy} value {new.value:g} include_zero false")

    # ----------------------------------------------------------- prompts (tiered mode)
    def prompts(self, step: int, counts: Sequence[int]) -> tuple[list[int], list[float]] | None:
        """Pool keys and temperature multipliers of the step's groups; None if not tiered.

        ``counts[e]`` groups come from env ``e``'s own block of the pool (:func:`pool_blocks`),
        in env order, so a pool key always names the same (env, seed) prompt.
        """
        if self.tiered is None:
            return None
        rng = prompt_rng(self.seed, step)
        blocks = pool_blocks(self.tiered.pool_size, self.shares)
        if len(blocks) != len(counts):
            raise ValueError(f"{len(counts)} group counts for {len(blocks)} training envs")
        keys = [k for block, c in zip(blocks, counts)
                for k in self.tiered.sample_prompts(c, rng, None if len(blocks) == 1 else block)]
        return keys, [float(x) for x in self.tiered.temperature_multipliers(keys)]

    # ----------------------------------------------------------------- selection
    def select(self, trajs: Sequence[Any], step: int,
               group_keys: dict[int, int] | None = None) -> Selection:
        """The kept group ids, the reward spread and the ``filter/*`` (+ ``snr/*``) metrics of
        one batch.

        ``group_keys`` maps group id -> prompt key (tiered mode: the pool entry).
        """
        if not trajs:
            return Selection(set(), {"filter/kept_ratio": 0.0})
        batch = GroupBatch.from_trajectories(trajs)
        groups = batch.groups
        stds = reward_std(batch)
        c = self.cfg
        if c.strategy == "none":
            kept_idx = torch.arange(len(groups))
            scores = stds
        else:
            scores = group_scores(batch, c.metric)
            kept_idx = select_groups(scores, c.strategy, c.value, include_zero=c.include_zero,
                                     temperature=c.temperature, zero_groups=stds <= ZERO_EPS,
                                     keep=c.keep, epsilon=c.epsilon)
        kept = {groups[i] for i in kept_idx.tolist()}
        metrics = filter_metrics(stds, scores, kept_idx)
        if self.tiered is not None and group_keys is not None:
            texts: dict[int, list[str | None]] = {g: [] for g in groups}
            for t in trajs:
                texts[t.group_id].append(t.first_think)
            tau = template_score(texts)
            self.tiered.update(step, [group_keys[g] for g in groups], [float(x) for x in stds],
                               [tau[g] for g in groups])
            metrics.update(self.tiered.metrics())
            metrics.update(self.tiered.batch_grade_shares([group_keys[g] for g in groups]))
            metrics["snr/template_score_mean"] = float(np.mean([tau[g] for g in groups]))
            warning = self.tiered.diversity_warning()
            if warning and step - self._warned_at >= 25:  # repeat at most every 25 steps
                log.warning("step %d: %s", step, warning)
                self._warned_at = step
        return Selection(kept, metrics, mean_reward_spread(stds))

    def sample_weights(self, trajs: Sequence[Any], group_keys: dict[int, int] | None) -> np.ndarray:
        """(N,) loss weight per kept sample (all 1 unless tiered)."""
        if self.tiered is None or group_keys is None:
            return np.ones(len(trajs), dtype=np.float32)
        keys = [group_keys[t.group_id] for t in trajs]
        return self.tiered.loss_weights(keys).astype(np.float32)

    def regulariser_weights(self, sample_weights: np.ndarray) -> np.ndarray | None:
        """(N,) weight of each kept sample's entropy and KL terms, from its ``sample_weights``:
        None (the same weights) with ``tiered.weight_target=loss``, ones with ``advantage``
        (the weights then reach the advantages only)."""
        if self.cfg.tiered.weight_target == "loss":
            return None
        return np.ones(len(sample_weights), dtype=np.float32)

    def loss_scale(self, kept_fraction: float) -> float:
        return loss_scale(kept_fraction, self.cfg.loss_scale) if kept_fraction > 0 else 1.0

    def state_dict(self) -> dict[str, Any]:
        return {"tiered": self.tiered.state_dict() if self.tiered is not None else None,
                "strengthened": list(self.strengthened)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.tiered is not None and state.get("tiered") is not None:
            self.tiered.load_state_dict(state["tiered"])
        if self.strengthened:
            raise RuntimeError("load_state_dict on a FilterPipeline that was already strengthened")
        for factor in state.get("strengthened", []):
            self.strengthen(factor)
