"""What the learner needs from config sections it does not own, resolved once.

The learner reads its own sections (``algorithm``, ``learner``, ``model``, ``cluster``,
``monitor.score_tokens``) and this record; it never reads ``engine``, ``rollout`` or ``filter``.
The controller resolves it when it composes the run (:func:`ragen2.controller.actors.learner_settings`);
the filter's per-sample decisions travel in the batch (:class:`ragen2.batch.TrainingBatch`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class LearnerSettings:
    """temperature: the engines' sampling temperature, at which logprobs are taken (1.0 for a
    greedy engine, temperature 0). norm_tokens: Dr.GRPO's constant of
    ``seq-mean-token-sum-norm`` (``algorithm.loss_agg_norm_tokens``, else the longest response a
    trajectory holds, ``engine.max_new_tokens x rollout.max_turns``); None where unknown.
    max_staleness: ``trainer.max_staleness``, the versions a batch may lag the learner by (0: a
    batch must be the learner's own version; >= 1: the decoupled objective corrects for it).
    score_reserve_bytes: what an engine beside a rank on its GPU may still allocate while the
    rank scores, kept free when the MI scorer sizes its slices to the free memory
    (:func:`ragen2.cluster.memory.scorer_reserve_bytes`)."""

    temperature: float = 1.0
    norm_tokens: Optional[float] = None
    max_staleness: int = 0
    score_reserve_bytes: int = 0
