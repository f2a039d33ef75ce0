"""The token-level record of one multi-turn episode, and collation into a learner batch."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ragen2.batch import TrainingBatch


@dataclass
class Trajectory:
    """One episode as a single token sequence.

    ``input_ids`` = prompt ids, then per turn the engine's generated ids followed (unless the
    episode ended) by the observation ids. ``loss_mask[t] = 1`` exactly on generated ids;
    ``logprobs[t]`` is the engine's logprob of ``input_ids[t]`` there (0 elsewhere).
    ``turn_ends[k]`` is the index of the last generated id of turn k and ``turn_rewards[k]`` its
    reward (env reward plus format penalty).
    """

    env_seed: int
    group_id: int
    policy_version: int
    env_name: str = "env"
    temperature_scale: float = 1.0  # sampled at engine.temperature x this (logprobs match it)
    input_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turn_ends: list[int] = field(default_factory=list)
    turn_rewards: list[float] = field(default_factory=list)
    env_return: float = 0.0
    success: bool = False
    terminated: bool = False
    truncated: bool = False
    num_format_errors: int = 0
    num_invalid_actions: int = 0
    first_think: str | None = None
    first_prompt_len: int = 0
    #: ``[a, b)`` in ``input_ids``: the first turn's reasoning as the engine sampled it (after the
    #: tokens that complete ``<think>``, before the one where ``</think>`` starts); None without one
    think_span: tuple[int, int] | None = None
    #: the same span for every turn (``think_spans[0] == think_span``): the MI monitor's later turns
    think_spans: list[tuple[int, int] | None] = field(default_factory=list)
    #: per turn, the env's verdict on that turn's reasoning (its optional ``ground(reasoning)``,
    #: against the state before the turn's action): the share of the stated claims that are true,
    #: None where the turn had no reasoning or it stated nothing checkable; None (no list) when the
    #: env has no ``ground`` (docs/reference/environments.md)
    grounding: list[float | None] | None = None
    #: per turn, the state the turn's reasoning is about (the env's optional
    #: ``state_coordinates()``, before the turn's action, e.g. ``{"row": 2, "col": 3}``): the MI
    #: monitor's contrast among inputs that differ in one coordinate (ragen2.collapse.contrast);
    #: None (no list) when the env has no such hook
    coordinates: list[dict[str, int | str] | None] | None = None
    responses: list[str] = field(default_factory=list)
    observations: list[str] = field(default_factory=list)
    env_error: str | None = None  # what the env raised; the episode is then excluded from training

    def as_text_record(self) -> dict:
        """A readable summary (observations and responses as text) for sample logs."""
        return {"env": self.env_name, "env_seed": self.env_seed, "group_id": self.group_id,
                "reward": self.reward, "success": self.success, "env_error": self.env_error,
                "turn_rewards": self.turn_rewards,
                "observations": self.observations, "responses": self.responses}

    def append(self, ids: Sequence[int], mask: int, logprobs: Sequence[float] | None = None) -> None:
        self.input_ids.extend(int(i) for i in ids)
        self.loss_mask.extend([mask] * len(ids))
        self.logprobs.extend(logprobs if logprobs is not None else [0.0] * len(ids))

    @property
    def reward(self) -> float:
        """Episode return used for training: env rewards plus format penalties."""
        return float(sum(self.turn_rewards))

    @property
    def num_turns(self) -> int:
        return len(self.turn_ends)

    @property
    def num_generated(self) -> int:
        return int(sum(self.loss_mask))


def collate(trajs: Sequence[Trajectory], pad_id: int = 0) -> TrainingBatch:
    """Right-pad trajectories into a learner batch of numpy arrays (cheap in Ray's object store).

    Returns input_ids/attention_mask/loss_mask (N, L) int64, logprobs/token_rewards (N, L)
    float32 (token_rewards holds each turn's reward at its last generated id), rewards and
    temperature_scales (N,) float32, group_ids/policy_version (N,) int64; no filter weights
    (:class:`ragen2.batch.TrainingBatch`).
    """
    if not trajs:
        raise ValueError("cannot collate an empty list of trajectories")
    n, width = len(trajs), max(len(t.input_ids) for t in trajs)
    ids = np.full((n, width), pad_id, dtype=np.int64)
    attn = np.zeros((n, width), dtype=np.int64)
    mask = np.zeros((n, width), dtype=np.int64)
    lps = np.zeros((n, width), dtype=np.float32)
    tok_r = np.zeros((n, width), dtype=np.float32)
    for i, t in enumerate(trajs):
        k = len(t.input_ids)
        ids[i, :k], attn[i, :k], mask[i, :k], lps[i, :k] = t.input_ids, 1, t.loss_mask, t.logprobs
        for end, r in zip(t.turn_ends, t.turn_rewards):
            tok_r[i, end] += r
    return TrainingBatch(
        input_ids=ids, attention_mask=attn, loss_mask=mask, logprobs=lps, token_rewards=tok_r,
        rewards=np.array([t.reward for t in trajs], dtype=np.float32),
        group_ids=np.array([t.group_id for t in trajs], dtype=np.int64),
        temperature_scales=np.array([t.temperature_scale for t in trajs], dtype=np.float32),
        policy_version=np.array([t.policy_version for t in trajs], dtype=np.int64),
    )
