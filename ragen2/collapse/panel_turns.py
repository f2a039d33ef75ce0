"""The probe panel's later turns: MI at fixed mid-episode states, under ``collapse/panel/turns/*``.

Why: the first-turn panel (:mod:`ragen2.collapse.panel`) scores the reasoning of an episode's
first turn. On a layout whose first observation carries no information the reasoning needs (the
default FrozenLake: start and goal never move, so every map's first reasoning is "I am at row 1,
column 1 ... starts Right"), that MI is structurally ~0 whatever the policy does, and an alert or a
diagnosis built on it cannot move. The later turns can: there the state differs between episodes.

The choice: **fixed mid-episode states**, not the panel episodes' own later turns. Each panel
prompt is a held-out panel seed (``seeding.panel_seed(i)``) plus a scripted opening of
``monitor.panel_prefix_turns`` = k responses: at every scripted turn the env's expert move
(``demonstration()``), replaced with probability ``monitor.panel_prefix_random`` by a uniformly
random entry of the env's ``valid_actions`` (seeded per env seed by ``seeding.panel_prefix_seed``,
the same for every run). A seed whose opening ends the episode, or whose state after it repeats
an earlier prompt's observation, is skipped. The openings are fixed once per run; at every
measurement the rollout workers replay them verbatim
(:class:`ragen2.rollout.scripted.ScriptedPrefixPolicy`) and sample ``monitor.panel_samples``
reasonings of turn k from the current policy. So the contexts differ between prompts (different
boards, positions, histories) and stay token-identical across steps, runs and policy versions,
as the first-turn panel's do; each prompt has several samples (a real H(Z|X), bootstrap over
prompts, permutation null on the full matrix). The alternative (each panel episode's own later
turns) would give contexts that change with the policy and one sample per context.

Metrics (prefix ``collapse/panel/turns/``): the same as the first-turn panel's
(:func:`ragen2.collapse.panel.panel_metrics`: ``mi``, ``h_cond``, ``h_marginal``,
``retrieval_acc@k``, ``retrieval_chance@k``, ``mi_bound``, ``log_n``, bootstrap ``*_lo`` /
``*_hi``, ``mi_null``, ``mi_floor`` (the null's 95th percentile), ``mi_p_value``, ``healthy``)
plus ``n_prompts``, ``reasoning_frac`` (share of episodes with a turn-k reasoning),
``reasoning_tokens_mean`` and ``turn`` (= k). Samples go to ``RUN_DIR/panel/turns/step_XXXXXX.jsonl``.

Where no prompt can be built (a single-turn env, an env without a ``demonstration()`` hook, an
expert that always ends the episode, ``rollout.max_turns`` <= k), there is no later-turn panel;
:mod:`ragen2.collapse.instrument` then keeps the first-turn one for the alert and the diagnosis.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from ragen2 import seeding
from ragen2.collapse.monitor import MonitorInputs, Scorer
from ragen2.collapse.panel import PanelMeasurement, panel_estimates
from ragen2.rollout.trajectory import Trajectory

log = logging.getLogger("ragen2")

PREFIX = "collapse/panel/turns/"


@dataclass(frozen=True)
class TurnPanelPrompt:
    env: str  # the env entry's name
    seed: int
    observation: str  # the observation after the scripted opening (distinct within the panel)
    prefix: tuple[str, ...]  # the scripted responses, one per turn before the measured one


def script_opening(env: Any, seed: int, turns: int, random_prob: float
                   ) -> tuple[tuple[str, ...], str] | None:
    """Play ``turns`` scripted moves on ``env`` (a text env with a ``demonstration()`` hook)
    from ``reset(seed=seed)``: (the responses as text, the observation after them), or None when
    the opening ends the episode. Each move is the expert's, replaced with probability
    ``random_prob`` by a random ``valid_actions`` entry (``random.Random(seeding.panel_prefix_seed
    (seed))``); the reasoning text stays the expert's, as in warm-start demonstrations."""
    if turns < 1:
        raise ValueError(f"turns must be >= 1, got {turns}")
    if not 0.0 <= random_prob <= 1.0:
        raise ValueError(f"random_prob must be in [0, 1], got {random_prob}")
    rng = random.Random(seeding.panel_prefix_seed(seed))
    obs, _ = env.reset(seed=seed)
    inner = env.unwrapped
    actions = list(getattr(inner, "valid_actions", None) or [])
    responses = []
    for _ in range(turns):
        think, action = inner.demonstration()
        if actions and rng.random() < random_prob:
            action = rng.choice(actions)
        responses.append(f"<think>{think}</think><answer>{action}</answer>")
        obs, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            return None
    if not isinstance(obs, str):
        raise TypeError(f"the env returned a {type(obs).__name__} observation; text expected")
    return tuple(responses), obs


def choose_turn_panel(envs: Sequence[tuple[str, int]],
                      play: Callable[[str, int], tuple[tuple[str, ...], str] | None],
                      tries_per_prompt: int = 8, give_up_after: int = 8) -> list[TurnPanelPrompt]:
    """The later-turn panel: for each ``(env name, count)``, the first ``count`` panel seeds
    (``seeding.panel_seed(0)``, ``(1)``, ... per env) whose scripted opening ``play(env, seed)``
    keeps the episode going and reaches an observation no earlier prompt has. A seed on which
    ``play`` raises is skipped; an env that cannot give ``count`` prompts within
    ``tries_per_prompt * count`` seeds gives what it has, and one whose first ``give_up_after``
    seeds gave none is given up (a single-answer env, whose every opening ends the episode, costs
    that many env episodes at start-up, not ``tries_per_prompt * count``; logged at info level)."""
    chosen: list[TurnPanelPrompt] = []
    seen: set[str] = set()
    for env, count in envs:
        found, index, ended, first_error = 0, 0, 0, None
        while (found < count and index < tries_per_prompt * count
               and (found or index < give_up_after)):
            seed = seeding.panel_seed(index)
            index += 1
            try:
                opening = play(env, seed)
            except Exception as e:  # noqa: BLE001 — no hook, a failing env: that seed is lost
                first_error = first_error or f"seed {seed}: {type(e).__name__}: {e}"
                continue
            if opening is None:
                ended += 1
                continue
            prefix, obs = opening
            if obs in seen:
                continue
            seen.add(obs)
            chosen.append(TurnPanelPrompt(env, seed, obs, prefix))
            found += 1
        if found < count:
            log.info("later-turn probe panel: env %r gave %d of %d prompts among %d seeds (%d "
                     "openings ended the episode%s)", env, found, count, index, ended,
                     f"; first failure: {first_error}" if first_error else "")
    return chosen


def build_turn_panel_inputs(trajs: Sequence[Trajectory], turn: int,
                            prompt_keys: Sequence[str]) -> MonitorInputs | None:
    """Contexts and continuations of turn ``turn`` (0-based); None below 2 prompts.

    Group id = the panel prompt's index (``prompt_keys[group id]`` its key). A sample is an
    episode that reached turn ``turn`` with a reasoning there; its continuation is that reasoning
    as sampled (``think_spans[turn]``, tags excluded), a prompt's context its first sample's ids
    in front of it (the replayed opening, identical for every sample of the prompt).
    """
    groups: dict[int, int] = {}
    contexts, keys, conts, owner = [], [], [], []
    for t in trajs:
        if t.env_error is not None or len(t.think_spans) <= turn or t.think_spans[turn] is None:
            continue
        a, b = t.think_spans[turn]
        if t.group_id not in groups:
            groups[t.group_id] = len(contexts)
            contexts.append(list(t.input_ids[:a]))
            keys.append(prompt_keys[t.group_id])
        conts.append(list(t.input_ids[a:b]))
        owner.append(groups[t.group_id])
    if len(contexts) < 2:
        return None
    return MonitorInputs(contexts, keys, conts, np.asarray(owner, dtype=np.int64))


class TurnPanel:
    """Samples, scores and records the later-turn panel (stateless, like ``ProbePanel``)."""

    def __init__(self, prompts: Sequence[TurnPanelPrompt], samples: int, bootstrap: int,
                 permutations: int, seed: int) -> None:
        if len(prompts) < 2:
            raise ValueError(f"the later-turn panel needs >= 2 distinct prompts, got {len(prompts)}")
        turns = {len(p.prefix) for p in prompts}
        if len(turns) != 1:
            raise ValueError(f"every later-turn panel prompt needs the same opening length, got {turns}")
        self.prompts, self.samples, self.turn = list(prompts), samples, turns.pop()
        self.bootstrap, self.permutations, self.seed = bootstrap, permutations, seed

    def specs(self) -> list[Any]:
        """``samples`` episodes per prompt, group id = the prompt's index; run them with
        ``max_turns = turn + 1`` and :meth:`prefixes`."""
        from ragen2.rollout.runner import EpisodeSpec

        return [EpisodeSpec(p.seed, i, p.env, 1.0)
                for i, p in enumerate(self.prompts) for _ in range(self.samples)]

    def prefixes(self) -> dict[int, list[str]]:
        """{group id: the scripted responses} for ``RolloutWorker.rollout(prefixes=...)``."""
        return {i: list(p.prefix) for i, p in enumerate(self.prompts)}

    def measure(self, trajs: Sequence[Trajectory], scorer: Scorer, step: int) -> PanelMeasurement:
        """One measurement, ``collapse/panel/turns/*`` its metrics (``n_prompts`` 0 when fewer
        than 2 prompts produced a turn-k reasoning)."""
        inputs = build_turn_panel_inputs(trajs, self.turn, [p.observation for p in self.prompts])
        out = {PREFIX + "turn": float(self.turn),
               PREFIX + "reasoning_frac": (0.0 if inputs is None else len(inputs.owner))
               / max(len(trajs), 1)}
        if inputs is None:
            return PanelMeasurement({**out, PREFIX + "n_prompts": 0.0})
        columns = np.tile(np.arange(len(inputs.contexts)), (len(inputs.owner), 1))
        logp, _ = scorer(inputs.contexts, inputs.continuations, columns)
        seed = seeding.panel_bootstrap_seed(self.seed, step) + 2  # +0, +1: the first-turn panel
        m, mi_lo, mi_floor = panel_estimates(logp, inputs.owner, inputs.prompt_keys,
                                             self.bootstrap, self.permutations, seed)
        out.update({PREFIX + k: v for k, v in m.items()})
        out[PREFIX + "reasoning_tokens_mean"] = float(np.mean([len(c) for c in inputs.continuations]))
        return PanelMeasurement(out, mi_lo, mi_floor)

    def records(self, trajs: Sequence[Trajectory], step: int, eos_text: str | None = None
                ) -> list[dict[str, Any]]:
        """One record per prompt: the opening, and its samples' turn-k reasoning and answers."""
        from ragen2.rollout.archive import MAX_TEXT
        from ragen2.rollout.parsing import leading_think, parse_response

        by_prompt: dict[int, list[Trajectory]] = {}
        for t in trajs:
            by_prompt.setdefault(t.group_id, []).append(t)
        k, out = self.turn, []
        for i, p in enumerate(self.prompts):
            replies = [t.responses[k] if len(t.responses) > k else "" for t in by_prompt.get(i, [])]
            parsed = [parse_response(r, eos_text) for r in replies]
            out.append({"step": step, "key": p.seed, "env": p.env, "turn": k,
                        "prompt": p.observation[:MAX_TEXT], "opening": list(p.prefix),
                        "reasoning": [((q.think if q.format_ok else leading_think(r)) or "")[:MAX_TEXT]
                                      for q, r in zip(parsed, replies)],
                        "answers": [(q.answer or "")[:MAX_TEXT] for q in parsed]})
        return out
