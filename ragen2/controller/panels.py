"""The probe panels: fixed held-out prompts on which the current policy's fresh replies are
scored by the learner at a cadence (``monitor.every``), the first-turn panel
(:mod:`ragen2.collapse.panel`) and the later-turn one at scripted mid-episode states
(:mod:`ragen2.collapse.panel_turns`). Their samples go to ``panel/`` and ``panel/turns/``."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ragen2 import seeding
from ragen2.config import Config
from ragen2.controller.problems import Problems
from ragen2.rollout.envs import EnvEntry, allocate, make_env

if TYPE_CHECKING:
    from ragen2.collapse.panel import PanelMeasurement

log = logging.getLogger("ragen2")


class _Envs:
    """The training envs by name, each made on first use, all closed on leaving the block."""

    def __init__(self, entries: list[EnvEntry]) -> None:
        self.entries, self.made = {e.name: e for e in entries}, {}

    def __call__(self, name: str) -> Any:
        if name not in self.made:
            self.made[name] = make_env(self.entries[name].id, self.entries[name].kwargs)
        return self.made[name]

    def __enter__(self) -> _Envs:
        return self

    def __exit__(self, *exc: Any) -> None:
        for env in self.made.values():
            env.close()


def keep_first_turn_panel(setting: str, later_turns: bool, alert_instrument: str) -> bool:
    """Whether the first-turn panel is measured (``monitor.first_turn_panel``): ``always``,
    ``never``, or ``auto``: unless the later-turn panel exists (``later_turns``) and the alert
    does not read the first turn (``monitor.alert_instrument`` ``first_turn``)."""
    if setting not in ("always", "never", "auto"):
        raise ValueError(f"monitor.first_turn_panel={setting!r}; allowed: always, never, auto")
    return setting == "always" or (setting == "auto" and not (later_turns
                                                         and alert_instrument != "first_turn"))


def make_panels(cfg: Config, problems: Problems) -> tuple[Any, Any]:
    """(the first-turn panel, the later-turn panel) over the training envs, split by share, on
    held-out seeds; each None when off (:func:`keep_first_turn_panel` for the first) or when the
    envs give fewer than 2 distinct prompts."""
    first, turns = _make_panels(cfg, problems)
    if first is not None and not keep_first_turn_panel(cfg.monitor.first_turn_panel,
                                                       turns is not None,
                                                       cfg.monitor.alert_instrument):
        log.info("first-turn probe panel off (monitor.first_turn_panel=%s)",
                 cfg.monitor.first_turn_panel)
        first = None
    return first, turns


def _make_panels(cfg: Config, problems: Problems) -> tuple[Any, Any]:
    """Both panels as the envs allow them."""
    from ragen2.collapse.panel import ProbePanel, choose_panel
    from ragen2.collapse.panel_turns import (TurnPanel, choose_turn_panel, contrast_siblings,
                                             script_opening)
    from ragen2.rollout.runner import _as_text

    m, entries = cfg.monitor, problems.train_envs
    if not (m.name == "mi" and m.panel_size):
        return None, None
    counts = allocate(m.panel_size, [e.share for e in entries])
    slots = [(e.name, c) for e, c in zip(entries, counts)]
    with _Envs(entries) as env_of:  # first turns: distinct first observations
        prompts = choose_panel(slots, lambda name, seed: _as_text(env_of(name).reset(seed=seed)[0]),
                               seed_of=problems.panel_seed)
    first = None
    if len(prompts) < 2:
        log.warning("probe panel off: the training envs gave %d distinct first observations",
                    len(prompts))
    else:
        first = ProbePanel(prompts, m.panel_samples, m.panel_bootstrap, m.panel_permutations,
                           cfg.seed, m.action_mi, min_samples=m.min_samples)
    k = m.panel_prefix_turns
    if not (k and cfg.rollout.max_turns > k):
        return first, None
    siblings: list[Any] = []
    with _Envs(entries) as env_of:  # later turns: the states after k scripted turns
        prompts = choose_turn_panel(
            slots, lambda name, seed: script_opening(env_of(name), seed, k, m.panel_prefix_random),
            seed_of=problems.panel_seed)
        if m.panel_contrast and len(prompts) >= 2:  # the contrast sets (collapse/contrast.py)
            prompts, siblings = contrast_siblings(prompts, env_of, k, m.panel_prefix_random,
                                                  m.panel_contrast)
            log.info("later-turn probe panel: %d contrast sets, %d sibling states",
                     len({q.base for q in siblings}), len(siblings))
    if len(prompts) < 2:
        log.info("later-turn probe panel off: the training envs gave %d mid-episode states "
                 "after %d scripted turns", len(prompts), k)
        return first, None
    return first, TurnPanel(prompts, m.panel_samples, m.panel_bootstrap, m.panel_permutations,
                            cfg.seed, min_samples=m.min_samples, siblings=siblings)


class Panels:
    """``first`` and ``turns`` (either None when off), measured where :meth:`due`."""

    def __init__(self, cfg: Config, problems: Problems, actors: Any, run_dir: Path,
                 eos_text: str | None) -> None:
        self.cfg, self.actors, self.run_dir, self.eos_text = cfg, actors, run_dir, eos_text
        self.first, self.turns = make_panels(cfg, problems)

    def due(self, step: int) -> bool:
        every = self.cfg.monitor.every
        return ((self.first is not None or self.turns is not None)
                and (step == 0 or (every > 0 and step % every == 0)))

    def measure(self, step: int, version: int
                ) -> tuple[PanelMeasurement | None, PanelMeasurement | None, dict[str, float]]:
        """(the first-turn measurement, the later-turn one, the metrics).

        ``collapse/panel/*``: fresh first turns of the current policy (version ``version``) on
        the panel, scored by the learner; the samples go to ``panel/step_XXXXXX.jsonl``.
        ``collapse/panel/turns/*``: the same at the later-turn panel's fixed mid-episode states
        (``panel/turns/``)."""
        from ragen2.collapse.panel import write_records

        n, seed, score = len(self.actors.workers), self.cfg.seed, self.actors.learners.score
        m: dict[str, float] = {}
        first = later = None
        if self.first is not None:
            t0 = time.perf_counter()
            trajs, _ = self.actors.gather(
                "rollout", self.first.specs(),
                [seeding.panel_sampling_seed(seed, step, i) for i in range(n)],
                [version] * n, [False] * n, [1] * n)
            first = self.first.measure(trajs, score, step)
            m.update(first.metrics)
            write_records(self.run_dir, step, self.first.records(trajs, step, self.eos_text))
            m["timing/panel_s"] = time.perf_counter() - t0
        if self.turns is not None:
            t0 = time.perf_counter()
            tp = self.turns
            trajs, _ = self.actors.gather(
                "rollout", tp.specs(),
                [seeding.panel_turn_sampling_seed(seed, step, i) for i in range(n)],
                [version] * n, [False] * n, [tp.turn + 1] * n, [tp.prefixes()] * n)
            later = tp.measure(trajs, score, step)
            m.update(later.metrics)
            write_records(self.run_dir, step, tp.records(trajs, step, self.eos_text),
                          folder="panel/turns")
            m["timing/panel_turns_s"] = time.perf_counter() - t0
        return first, later, m
