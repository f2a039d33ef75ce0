"""Grounding: does the reasoning state the true state? An instrument fluency cannot fool.

The MI monitor asks whether the reasoning depends on its input; a reasoning can keep enough of
the input to be told apart from the others (retrieval@1 high) and still state a wrong state: in
collapse study 2 the later-turn reasoning of one run kept its row and stopped tracking its column
(the stated position was right 0.97 -> 0.29 of the time) while retrieval@1 stayed at 0.64. An env
that knows its own phrasing can check the claims directly: its optional ``ground(reasoning)``
hook (docs/reference/environments.md) returns the share of the claims the reasoning states about
the current state that are true, or None when it states nothing checkable. The rollout runner
asks it every turn, before the turn's action is applied (``Trajectory.grounding``), so the batch
measurement costs nothing; the probe panels' episodes run through the same runner.

Scopes (each beside the MI scope of the same samples):

===================================  ==========================================================
``collapse/grounding/``              the batch's first turns
``collapse/turns/grounding/``        the batch's later turns (every turn after the first)
``collapse/panel/grounding/``        the first-turn probe panel
``collapse/panel/turns/grounding/``  the later-turn panel, at its measured turn
===================================  ==========================================================

Fields: ``frac`` = the mean over checkable reasonings of their share of true claims (1.0 or 0.0
for FrozenLake's single position claim; partial for Sokoban's player and boxes); ``frac_lo`` /
``frac_hi`` its 95% percentile bootstrap interval **over prompts** (a resample draws the scope's
prompts with replacement and keeps all their checkable reasonings: samples of one prompt, and the
later turns of one episode, are not independent, the prompt is; a batch's prompt is its group);
``n_samples`` the checkable reasonings, ``n_prompts`` their prompts, ``checkable_frac`` the share
of the scope's turns whose reasoning stated something checkable (a turn without reasoning
counts as not checkable). The minimum-sample rule of every MI value holds here too
(:mod:`ragen2.collapse.withhold`): fewer than ``monitor.min_samples`` checkable reasonings, or
fewer than 2 prompts, log the counts and ``checkable_frac`` only. Nothing is logged for a scope
whose episodes' envs have no ``ground`` hook.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ragen2.collapse.withhold import MIN_SAMPLES
from ragen2.rollout.trajectory import Trajectory

__all__ = ["GroundingSamples", "batch_grounding", "grounding_interval", "grounding_metrics",
           "grounding_samples"]

#: the batch's scopes: (metric prefix, turns)
BATCH_SCOPES = (("collapse/grounding/", "first"), ("collapse/turns/grounding/", "later"))


@dataclass(frozen=True)
class GroundingSamples:
    """The checkable reasonings of one scope."""

    scores: np.ndarray  # (S,) float: each reasoning's share of true claims, in [0, 1]
    prompts: np.ndarray  # (S,) int: its prompt (group id), the bootstrap's unit
    turns: int  # the scope's turns, checkable or not


def grounding_samples(trajs: Sequence[Trajectory], turns: str | int) -> GroundingSamples | None:
    """The checkable reasonings of ``turns``: ``"first"`` (turn index 0), ``"later"`` (every
    index >= 1) or one index k (the later-turn panel's measured turn); episodes whose env raised
    are left out. None when no episode's env has a ``ground`` hook (``grounding`` is None)."""
    if turns not in ("first", "later") and (isinstance(turns, bool) or not isinstance(turns, int)
                                            or turns < 0):
        raise ValueError(f"turns must be 'first', 'later' or a turn index >= 0, got {turns!r}")
    scores, prompts, count, any_hook = [], [], 0, False
    for t in trajs:
        if t.grounding is None or t.env_error is not None:
            continue
        any_hook = True
        if turns == "first":
            chosen = t.grounding[:1]
        elif turns == "later":
            chosen = t.grounding[1:]
        else:
            chosen = t.grounding[turns:turns + 1]
        count += len(chosen)
        for g in chosen:
            if g is not None:
                scores.append(float(g))
                prompts.append(t.group_id)
    if not any_hook:
        return None
    return GroundingSamples(np.asarray(scores, dtype=np.float64),
                            np.asarray(prompts, dtype=np.int64), count)


def grounding_interval(scores: np.ndarray, prompts: np.ndarray, resamples: int,
                       rng: np.random.Generator, level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of ``scores.mean()`` over prompts: each of ``resamples``
    draws the distinct prompts with replacement (counts c_j) and takes every sample of prompt j
    c_j times, so a resample's value is sum_j c_j s_j / sum_j c_j n_j (s_j, n_j: the prompt's
    score sum and sample count); the interval is the ((1 - level) / 2, (1 + level) / 2) quantile
    pair (linear interpolation). Every prompt's samples agreeing gives a zero-width interval."""
    if isinstance(resamples, bool) or not isinstance(resamples, int) or resamples < 2:
        raise ValueError(f"resamples must be an integer >= 2, got {resamples!r}")
    if len(scores) == 0 or len(scores) != len(prompts):
        raise ValueError(f"scores and prompts need one entry per sample, got {len(scores)} and "
                         f"{len(prompts)}")
    _, index = np.unique(prompts, return_inverse=True)
    sums = np.bincount(index, weights=scores)
    counts = np.bincount(index).astype(np.float64)
    n = len(sums)
    draws = rng.integers(0, n, size=(resamples, n))
    c = np.stack([np.bincount(d, minlength=n) for d in draws]).astype(np.float64)  # (B, n)
    values = (c @ sums) / (c @ counts)
    q = (1.0 - level) / 2.0
    lo, hi = np.quantile(values, [q, 1.0 - q])
    return float(lo), float(hi)


def grounding_metrics(samples: GroundingSamples, min_samples: int = MIN_SAMPLES,
                      resamples: int = 200, seed: int = 0) -> dict[str, float]:
    """One scope's fields (without its prefix): ``n_samples``, ``n_prompts``, ``checkable_frac``
    always; ``frac``, ``frac_lo``, ``frac_hi`` from ``min_samples`` checkable reasonings of 2+
    prompts (the interval seeded by ``seed``)."""
    n, n_prompts = len(samples.scores), len(np.unique(samples.prompts))
    out = {"n_samples": float(n), "n_prompts": float(n_prompts),
           "checkable_frac": n / samples.turns if samples.turns else 0.0}
    if n < min_samples or n_prompts < 2:
        return out
    lo, hi = grounding_interval(samples.scores, samples.prompts, resamples,
                                np.random.default_rng(seed))
    out.update(frac=float(samples.scores.mean()), frac_lo=lo, frac_hi=hi)
    return out


def batch_grounding(trajs: Sequence[Trajectory], step: int, *, min_samples: int = MIN_SAMPLES,
                    resamples: int = 200, seed: int = 0) -> dict[str, float]:
    """``collapse/grounding/*`` (first turns) and ``collapse/turns/grounding/*`` (later turns) of
    a batch; {} when no episode's env grounds. The intervals are seeded by (``seed``, ``step``)."""
    out: dict[str, float] = {}
    for i, (prefix, turns) in enumerate(BATCH_SCOPES):
        samples = grounding_samples(trajs, turns)
        if samples is None:
            return {}
        m = grounding_metrics(samples, min_samples, resamples,
                              seed=int(np.random.SeedSequence([seed, step, i]).generate_state(1)[0]))
        out.update({prefix + k: v for k, v in m.items()})
    return out
