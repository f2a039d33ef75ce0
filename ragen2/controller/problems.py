"""Which problems each kind of episode draws: the RL groups and the warm start's demonstrations
from the training part of each env's problem split, the held-out evaluation and the probe panels'
prompts from its held-out part (:mod:`ragen2.rollout.split`)."""

from __future__ import annotations

from functools import cached_property
from typing import Any, Callable

from ragen2.config import Config
from ragen2.rollout.envs import EnvEntry, assign, eval_entries, train_entries
from ragen2.rollout.runner import EpisodeSpec
from ragen2.rollout.split import HELDOUT, TRAIN, ProblemSplit
from ragen2 import seeding


class Problems:
    """The training envs (``train_envs``), the evaluation envs (``eval_envs``) and their split."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.train_envs, self.eval_envs = train_entries(cfg.env), eval_entries(cfg.env)

    @cached_property
    def split(self) -> ProblemSplit:
        """Which problems are trained on and which held out (:mod:`ragen2.rollout.split`)."""
        from ragen2.rollout.envs import all_entries

        return ProblemSplit(all_entries(self.cfg.env), self.cfg.env.heldout_fraction)

    def episode_specs(self, entries: list[EnvEntry], groups: int, group_size: int,
                      seed_of: Callable[[int], int],
                      temperature_of: Callable[[int], float] | None = None) -> list[EpisodeSpec]:
        """``groups`` groups split between ``entries`` by share; group g uses seed ``seed_of(g)``
        resolved into the training part of its env's problem split."""
        names = assign(groups, entries)
        temp = temperature_of or (lambda g: 1.0)
        seeds = [self.split.resolve(names[g], seed_of(g), TRAIN) for g in range(groups)]
        return [EpisodeSpec(seeds[g], g, names[g], temp(g))
                for g in range(groups) for _ in range(group_size)]

    def eval_specs(self, episodes: int) -> list[Any]:
        """``episodes`` held-out evaluation episodes over the evaluation envs."""
        return self.split.eval_specs(self.eval_envs, episodes)

    def panel_seed(self, name: str, index: int) -> int:
        """Panel seed ``index`` of env ``name``, resolved into its held-out problems."""
        return self.split.resolve(name, seeding.panel_seed(index), HELDOUT)
