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
plus ``n_samples``, ``n_prompts``, ``reasoning_frac`` (share of episodes with a turn-k reasoning),
``reasoning_tokens_mean`` and ``turn`` (= k). Below ``monitor.min_samples`` turn-k reasonings or 2
prompts with one, only the counts, ``reasoning_frac`` and ``turn`` (no value, nothing scored:
:mod:`ragen2.collapse.withhold`). Where the env has a ``ground`` hook, ``grounding/*``: the share
of the turn-k reasoning's claims about the state that are true (:mod:`ragen2.collapse.grounding`;
the scripted opening is the same for every sample, so each prompt's true state is too). Samples
go to ``RUN_DIR/panel/turns/step_XXXXXX.jsonl``.

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
from ragen2.collapse.grounding import grounding_metrics, grounding_samples
from ragen2.collapse.monitor import MonitorInputs, Scorer
from ragen2.collapse.panel import PanelMeasurement, panel_estimates
from ragen2.collapse.withhold import MIN_SAMPLES
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
                      tries_per_prompt: int = 8, give_up_after: int = 8,
                      seed_of: Callable[[str, int], int] | None = None) -> list[TurnPanelPrompt]:
    """The later-turn panel: for each ``(env name, count)``, the first ``count`` panel seeds
    (``seed_of(env, 0)``, ``(env, 1)``, ... per env; by default ``seeding.panel_seed(i)``, the
    trainer's resolved into the env's held-out problems) whose scripted opening ``play(env, seed)``
    keeps the episode going and reaches an observation no earlier prompt has. A seed on which
    ``play`` raises is skipped; an env that cannot give ``count`` prompts within
    ``tries_per_prompt * count`` seeds gives what it has, and one whose first ``give_up_after``
    seeds gave none is given up (a single-answer env, whose every opening ends the episode, costs
    that many env episodes at start-up, not ``tries_per_prompt * count``; logged at info level)."""
    seed_of = seed_of or (lambda env, index: seeding.panel_seed(index))
    chosen: list[TurnPanelPrompt] = []
    seen: set[str] = set()
    for env, count in envs:
        found, index, ended, first_error = 0, 0, 0, None
        while (found < count and index < tries_per_prompt * count
               and (found or index < give_up_after)):
            seed = seed_of(env, index)
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
                            prompt_keys: Sequence[str], min_prompts: int = 2
                            ) -> MonitorInputs | None:
    """Contexts and continuations of turn ``turn`` (0-based); None below ``min_prompts`` prompts
    (2; 0: always, possibly empty).

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
    if len(contexts) < min_prompts:
        return None
    return MonitorInputs(contexts, keys, conts, np.asarray(owner, dtype=np.int64))


class TurnPanel:
    """Samples, scores and records the later-turn panel (stateless, like ``ProbePanel``)."""

    def __init__(self, prompts: Sequence[TurnPanelPrompt], samples: int, bootstrap: int,
                 permutations: int, seed: int, *, min_samples: int = MIN_SAMPLES) -> None:
        if len(prompts) < 2:
            raise ValueError(f"the later-turn panel needs >= 2 distinct prompts, got {len(prompts)}")
        if isinstance(min_samples, bool) or not isinstance(min_samples, int) or min_samples < 2:
            raise ValueError(f"min_samples must be an integer >= 2, got {min_samples!r}")
        self.min_samples = min_samples
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
        """One measurement, ``collapse/panel/turns/*`` its metrics (only the counts, the
        reasoning share and the turn when fewer than 2 prompts or ``min_samples`` samples
        produced a turn-k reasoning)."""
        inputs = build_turn_panel_inputs(trajs, self.turn, [p.observation for p in self.prompts],
                                         min_prompts=0)
        n_samples = len(inputs.owner)
        out = {PREFIX + "turn": float(self.turn),
               PREFIX + "reasoning_frac": n_samples / max(len(trajs), 1),
               PREFIX + "n_samples": float(n_samples),
               PREFIX + "n_prompts": float(len(inputs.contexts))}
        seed = seeding.panel_bootstrap_seed(self.seed, step) + 2  # +0, +1: the first-turn panel
        grounded = grounding_samples([t for t in trajs if t.env_error is None], self.turn)
        if grounded is not None:  # the envs' own check of the stated state (their ground hook)
            g = grounding_metrics(grounded, self.min_samples, self.bootstrap, seed + 2)
            out.update({PREFIX + "grounding/" + k: v for k, v in g.items()})
        if len(inputs.contexts) < 2 or n_samples < self.min_samples:
            return PanelMeasurement(out)
        columns = np.tile(np.arange(len(inputs.contexts)), (len(inputs.owner), 1))
        logp, _ = scorer(inputs.contexts, inputs.continuations, columns)
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
            ts = by_prompt.get(i, [])
            if any(t.grounding is not None for t in ts):  # the env's verdict per sample
                out[-1]["grounding"] = [t.grounding[k] if t.grounding and len(t.grounding) > k
                                        else None for t in ts]
        return out
