"""What a batch of episodes says: success, reward, format and length statistics (``rollout/*``,
``eval/*``, ``warm_start/demo/*``), and the budget of episodes whose env raised."""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Sequence

import numpy as np

from ragen2.filtering.scores import reward_std
from ragen2.filtering.select import ZERO_EPS
from ragen2.rollout.schedule import Rollouts
from ragen2.rollout.trajectory import Trajectory

log = logging.getLogger("ragen2")


class EnvFailureError(RuntimeError):
    """More episodes of a step failed inside the env than ``rollout.max_env_error_frac`` allows."""


def group_rewards(trajs: Sequence[Trajectory]) -> dict[int, list[float]]:
    """Episode rewards per group id (the input of group filters)."""
    groups: dict[int, list[float]] = defaultdict(list)
    for t in trajs:
        groups[t.group_id].append(t.reward)
    return groups


def rollout_metrics(trajs: Sequence[Trajectory], prefix: str,
                    per_env: bool = False) -> dict[str, float]:
    """Success, reward, format and length statistics; with ``per_env`` also under ``prefix/<env>``.

    An episode whose env raised counts as a failure (``env_errors`` counts them).
    """
    out = episode_stats(trajs, prefix)
    if per_env:
        by_env: dict[str, list[Trajectory]] = defaultdict(list)
        for t in trajs:
            by_env[t.env_name].append(t)
        for name, part in sorted(by_env.items()):
            out.update(episode_stats(part, f"{prefix}/{name}"))
    return out


def batch_metrics(batch: Rollouts, per_env: bool) -> dict[str, float]:
    """A training step's ``rollout/*``: its episodes' statistics and the workers' restarts."""
    out = rollout_metrics(batch.trajs, "rollout", per_env=per_env)
    out["rollout/worker_restarts"] = batch.stats["worker_restarts"]
    return out


def success_rate(trajs: Sequence[Trajectory]) -> float:
    """The share of episodes that succeeded (``<prefix>/success``)."""
    return float(np.mean([t.success for t in trajs]))


def episode_stats(trajs: Sequence[Trajectory], prefix: str) -> dict[str, float]:
    """One set of episodes' statistics under ``prefix/`` (no per-env split)."""
    r = np.array([t.reward for t in trajs])
    stds = reward_std(group_rewards(trajs)).numpy()  # σ_g, the filter's and the SNR grades' own
    turns = np.array([t.num_turns for t in trajs])
    return {
        f"{prefix}/success": success_rate(trajs),
        f"{prefix}/reward_mean": float(r.mean()),
        f"{prefix}/reward_std": float(r.std()),
        f"{prefix}/env_return_mean": float(np.mean([t.env_return for t in trajs])),
        f"{prefix}/group_reward_std_mean": float(stds.mean()),
        f"{prefix}/zero_std_group_frac": float((stds <= ZERO_EPS).mean()),
        f"{prefix}/num_turns_mean": float(turns.mean()),
        f"{prefix}/format_error_rate": float(sum(t.num_format_errors for t in trajs) / max(turns.sum(), 1)),
        f"{prefix}/invalid_action_rate": float(sum(t.num_invalid_actions for t in trajs) / max(turns.sum(), 1)),
        f"{prefix}/truncated_frac": float(np.mean([t.truncated for t in trajs])),
        f"{prefix}/response_tokens_mean": float(sum(t.num_generated for t in trajs) / max(turns.sum(), 1)),
        f"{prefix}/sequence_tokens_mean": float(np.mean([len(t.input_ids) for t in trajs])),
        f"{prefix}/env_errors": float(sum(t.env_error is not None for t in trajs)),
    }


def check_env_errors(trajs: Sequence[Trajectory], max_frac: float, where: str) -> None:
    """Raise :class:`EnvFailureError` when the share of episodes whose env raised is too high;
    below it, log each failed episode's reason (the run log keeps what the samples may not)."""
    failed = [t for t in trajs if t.env_error is not None]
    if failed and len(failed) > max_frac * len(trajs):
        first = failed[0]
        raise EnvFailureError(
            f"{where}: {len(failed)} of {len(trajs)} episodes failed inside the env (more than "
            f"rollout.max_env_error_frac={max_frac}); first: env {first.env_name!r} seed "
            f"{first.env_seed}: {first.env_error}")
    for t in failed[:5]:
        log.warning("%s: an episode failed inside the env (left out of the update): env %r seed "
                    "%d: %s", where, t.env_name, t.env_seed, t.env_error)
    if len(failed) > 5:
        log.warning("%s: %d more episodes failed inside the env", where, len(failed) - 5)
