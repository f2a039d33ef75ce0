"""Per-group filter scores: one number per prompt group, chosen by name from ``GROUP_SCORES``.

The input is a :class:`GroupBatch`: four flat per-episode arrays (group id, episode return,
summed negative sampled logprob over generated tokens, generated token count). It is built from
trajectories in one pass (:meth:`GroupBatch.from_trajectories`) or from the controller's
``{group_id: [returns]}`` mapping (:meth:`GroupBatch.from_group_rewards`, reward scores only).
Every score returns a float64 tensor of shape (G,) ordered by sorted group id
(``batch.groups``), so index ``i`` of a score and of :func:`select_groups`' output both mean the
group ``batch.groups[i]``.

Scores
------
* ``reward_std`` (default): population std (ddof=0) of the group's episode returns, σ_g. The task
  gradient of a group scales with it; the KL/entropy gradients do not (SPEC §1).
* ``reward_variance``: σ_g², RAGEN-2's filter metric (same order as σ_g, so the same groups
  under ``top_k``; a different mass under ``top_p`` and ``top_p_softmax``).
* ``reward_mean``: mean episode return (may be negative: use ``top_k`` or ``top_p_softmax``).
* ``entropy``: mean over the group's episodes of ``-Σ_t logprob_t / n_generated``, the per-token
  negative logprob of the tokens the engine sampled. Since the tokens were drawn from the policy,
  ``E[-log p(token)]`` is the per-token entropy, so this is an unbiased Monte-Carlo estimate that
  costs nothing beyond the engine's logprobs.
* ``response_length``: mean generated tokens per episode.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ragen2.groups import group_index, group_mean, group_std
from ragen2.registry import Registry

GroupScore = Callable[["GroupBatch"], Tensor]
GROUP_SCORES: Registry[GroupScore] = Registry("group score")


@dataclass(frozen=True)
class GroupBatch:
    """Per-episode arrays, all of shape (N,); ``nll_sum``/``num_generated`` may be None.

    group_ids: int64 group id of each episode.
    returns: float64 episode return.
    nll_sum: float64 ``-Σ logprob`` over the episode's generated tokens (needed by ``entropy``).
    num_generated: float64 generated token count (needed by ``entropy``/``response_length``).
    """

    group_ids: np.ndarray
    returns: np.ndarray
    nll_sum: np.ndarray | None = None
    num_generated: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = len(self.group_ids)
        for name in ("returns", "nll_sum", "num_generated"):
            arr = getattr(self, name)
            if arr is not None and len(arr) != n:
                raise ValueError(f"GroupBatch.{name} has {len(arr)} entries but group_ids has {n}; "
                                 "every array holds one entry per episode")
        if not np.all(np.isfinite(self.returns)):
            raise ValueError("GroupBatch.returns must be finite (got NaN or inf)")

    @classmethod
    def from_arrays(cls, group_ids: Any, returns: Any, nll_sum: Any = None,
                    num_generated: Any = None) -> GroupBatch:
        """Coerce lists/arrays/tensors to the dtypes above."""
        as_f = (lambda a: None if a is None else np.asarray(a, dtype=np.float64).reshape(-1))
        return cls(np.asarray(group_ids, dtype=np.int64).reshape(-1), as_f(returns), as_f(nll_sum),
                   as_f(num_generated))

    @classmethod
    def from_trajectories(cls, trajs: Sequence[Any]) -> GroupBatch:
        """From objects with ``.group_id``, ``.reward``, ``.logprobs``, ``.loss_mask``,
        ``.num_generated`` (``logprobs`` is 0 off generated positions; the mask makes sure)."""
        nll = [-float(np.dot(t.logprobs, t.loss_mask)) for t in trajs]
        return cls.from_arrays([t.group_id for t in trajs], [t.reward for t in trajs], nll,
                               [t.num_generated for t in trajs])

    @classmethod
    def from_group_rewards(cls, group_rewards: Mapping[int, Sequence[float]]) -> GroupBatch:
        """From ``{group_id: [episode returns]}`` (enough for ``reward_std``/``reward_mean``)."""
        ids = [g for g, rs in group_rewards.items() for _ in rs]
        return cls.from_arrays(ids, [r for rs in group_rewards.values() for r in rs])

    @property
    def groups(self) -> list[int]:
        """Sorted distinct group ids: the order of every score tensor."""
        return [int(g) for g in np.unique(self.group_ids)]

    def _group_index(self) -> tuple[np.ndarray, np.ndarray]:
        """(inverse (N,) position of each episode's group, counts (G,))."""
        return group_index(self.group_ids)

    def group_mean(self, values: np.ndarray) -> np.ndarray:
        """(N,) per-episode values -> (G,) per-group means."""
        return group_mean(values, self.group_ids)

    def require(self, field: str, score: str) -> np.ndarray:
        arr = getattr(self, field)
        if arr is None:
            raise ValueError(f"group score {score!r} needs per-episode {field}; build the input "
                             "with GroupBatch.from_trajectories (from_group_rewards has returns only)")
        return arr


def _as_batch(data: GroupBatch | Mapping[int, Sequence[float]]) -> GroupBatch:
    return data if isinstance(data, GroupBatch) else GroupBatch.from_group_rewards(data)


def reward_std(data: GroupBatch | Mapping[int, Sequence[float]]) -> Tensor:
    """(G,) population std (ddof=0) of each group's returns (:func:`ragen2.groups.group_std`);
    a single-episode group has 0."""
    b = _as_batch(data)
    return torch.from_numpy(group_std(b.returns, b.group_ids))


def reward_variance(data: GroupBatch | Mapping[int, Sequence[float]]) -> Tensor:
    """(G,) population variance σ_g² of each group's returns (RAGEN-2's ``reward_variance``)."""
    return reward_std(data) ** 2


def reward_mean(data: GroupBatch | Mapping[int, Sequence[float]]) -> Tensor:
    """(G,) mean return per group."""
    b = _as_batch(data)
    return torch.from_numpy(b.group_mean(b.returns))


def entropy(data: GroupBatch) -> Tensor:
    """(G,) mean over episodes of nll_sum / num_generated (an episode with 0 tokens counts 0)."""
    b = _as_batch(data)
    nll, n = b.require("nll_sum", "entropy"), b.require("num_generated", "entropy")
    return torch.from_numpy(b.group_mean(nll / np.maximum(n, 1.0)))


def response_length(data: GroupBatch) -> Tensor:
    """(G,) mean generated tokens per episode."""
    b = _as_batch(data)
    return torch.from_numpy(b.group_mean(b.require("num_generated", "response_length")))


for _name, _fn in (("reward_std", reward_std), ("reward_variance", reward_variance),
                   ("reward_mean", reward_mean),
                   ("entropy", entropy), ("response_length", response_length)):
    GROUP_SCORES.add(_name, _fn)


def group_scores(data: GroupBatch | Mapping[int, Sequence[float]], name: str = "reward_std") -> Tensor:
    """Score every group with ``GROUP_SCORES[name]``: (G,) float64, ordered by sorted group id."""
    if name not in GROUP_SCORES:
        raise ValueError(f"unknown group score {name!r}; allowed: {', '.join(GROUP_SCORES.names())}")
    return GROUP_SCORES.get(name)(_as_batch(data))
