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

Contrast sets (``monitor.panel_contrast``, :func:`contrast_siblings`): where the env reports state
coordinates, the first such panel prompts each get sibling states on the same seed, reached by
another scripted opening of the same length and differing from it in one coordinate; they are
sampled with the panel, scored only within their set and logged as ``contrast/<c>/*``
(:mod:`ragen2.collapse.contrast`); the panel's other metrics and records leave them out.

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
from ragen2.collapse.contrast import measure_contrast, state_key
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
    #: the state's coordinates (the env's ``state_coordinates()``, sorted items) where the
    #: contrast needs them (a contrast set's prompts), else None
    coordinates: tuple[tuple[str, Any], ...] | None = None
    #: a contrast sibling: the index of the panel prompt whose set it belongs to; None for the
    #: panel's own prompts
    base: int | None = None


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


#: sibling states per coordinate a contrast set's panel prompt gets at most
SIBLINGS = 2
#: scripted openings tried per contrast set at most (all of them when fewer: |actions|^turns)
MAX_OPENINGS = 1024


def reachable_openings(env: Any, seed: int, turns: int, limit: int = MAX_OPENINGS
                       ) -> list[tuple[tuple[str, ...], str, dict[str, Any]]]:
    """The states ``turns`` scripted moves reach from ``reset(seed=seed)`` without ending the
    episode: (responses, observation, coordinates), one per distinct observation, the first
    opening that reaches it. Openings are every sequence of ``valid_actions`` (in
    ``itertools.product`` order), or ``limit`` random ones (seeded by the env seed) when there are
    more; each response is the expert's reasoning at that state with the sequence's move, as
    :func:`script_opening` writes them. [] without ``valid_actions`` or coordinates."""
    import itertools

    from ragen2.rollout.runner import read_coordinates

    inner = env.unwrapped
    actions = list(getattr(inner, "valid_actions", None) or [])
    if not actions:
        return []
    if len(actions) ** turns <= limit:
        sequences: Any = itertools.product(actions, repeat=turns)
    else:
        rng = random.Random(seeding.panel_prefix_seed(seed) + 1)
        sequences = [tuple(rng.choice(actions) for _ in range(turns)) for _ in range(limit)]
    out, seen = [], set()
    for seq in sequences:
        env.reset(seed=seed)
        responses, ended = [], False
        for action in seq:
            think, _ = inner.demonstration()
            responses.append(f"<think>{think}</think><answer>{action}</answer>")
            obs, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                ended = True
                break
        if ended or not isinstance(obs, str) or obs in seen:
            continue
        coords = read_coordinates(env)
        if coords is None:
            continue
        seen.add(obs)
        out.append((tuple(responses), obs, coords))
    return out


def contrast_siblings(prompts: Sequence[TurnPanelPrompt], env_of: Callable[[str], Any],
                      turns: int, random_prob: float, sets: int, per_coordinate: int = SIBLINGS
                      ) -> tuple[list[TurnPanelPrompt], list[TurnPanelPrompt]]:
    """The later-turn panel's contrast sets (:mod:`ragen2.collapse.contrast`).

    In panel order, each prompt whose env (``env_of(env name)``) has a ``state_coordinates``
    hook replays its opening, reads its coordinates, and looks among the states another opening
    of the same length reaches on the same seed (:func:`reachable_openings`) for, per coordinate
    c, up to ``per_coordinate`` siblings with distinct values of c that equal it on every other
    coordinate (and whose observation no panel prompt has); a prompt with at least one sibling
    is a set, until ``sets`` sets are made. A prompt whose env raises is skipped (logged).

    Returns (the prompts, those of a set with their ``coordinates``; the siblings, each with its
    coordinates and ``base`` = its panel prompt's index, in set order)."""
    from dataclasses import replace

    from ragen2.rollout.runner import coordinates_hook, read_coordinates

    taken = {p.observation for p in prompts}
    out, siblings, made = list(prompts), [], 0
    for i, p in enumerate(prompts):
        if made >= sets:
            break
        try:
            env = env_of(p.env)
            if coordinates_hook(env) is None:
                continue
            opening = script_opening(env, p.seed, turns, random_prob)
            if opening is None or opening[1] != p.observation:
                continue  # not the panel's state (an env that is not deterministic per seed)
            base = read_coordinates(env)
            states = reachable_openings(env, p.seed, turns) if base is not None else []
        except Exception as e:  # noqa: BLE001 — a failing env loses its contrast set only
            if getattr(e, "stops_run", False):  # an env server that stays down
                raise  # stops the run (ragen2.rollout.runner.stops_run)
            log.info("later-turn panel contrast: env %r seed %d skipped (%s: %s)", p.env, p.seed,
                     type(e).__name__, e)
            continue
        found = []
        for name in sorted(base or {}):
            values: set[Any] = set()
            for responses, obs, coords in states:
                if (obs in taken or coords.keys() != base.keys() or coords[name] in values
                        or [n for n in base if coords[n] != base[n]] != [name]):
                    continue
                values.add(coords[name])
                taken.add(obs)
                found.append(TurnPanelPrompt(p.env, p.seed, obs, responses,
                                             tuple(sorted(coords.items())), base=i))
                if len(values) >= per_coordinate:
                    break
        if found:
            out[i] = replace(p, coordinates=tuple(sorted(base.items())))
            siblings += found
            made += 1
    return out, siblings


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
                if getattr(e, "stops_run", False):  # an env server that stays down
                    raise  # stops the run (ragen2.rollout.runner.stops_run)
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
                 permutations: int, seed: int, *, min_samples: int = MIN_SAMPLES,
                 siblings: Sequence[TurnPanelPrompt] = ()) -> None:
        """``siblings``: the contrast sets' sibling states (:func:`contrast_siblings`), sampled
        with the panel (group ids after its prompts') and scored only within their sets, so the
        panel's own metrics do not change with them."""
        if len(prompts) < 2:
            raise ValueError(f"the later-turn panel needs >= 2 distinct prompts, got {len(prompts)}")
        if isinstance(min_samples, bool) or not isinstance(min_samples, int) or min_samples < 2:
            raise ValueError(f"min_samples must be an integer >= 2, got {min_samples!r}")
        self.min_samples = min_samples
        turns = {len(p.prefix) for p in [*prompts, *siblings]}
        if len(turns) != 1:
            raise ValueError(f"every later-turn panel prompt needs the same opening length, got {turns}")
        self.prompts, self.samples, self.turn = list(prompts), samples, turns.pop()
        self.siblings = list(siblings)
        for q in self.siblings:
            if q.base is None or not 0 <= q.base < len(self.prompts) or q.coordinates is None:
                raise ValueError(f"a contrast sibling needs coordinates and the index of its panel "
                                 f"prompt (0 <= base < {len(self.prompts)}), got {q}")
        self.bootstrap, self.permutations, self.seed = bootstrap, permutations, seed

    def specs(self) -> list[Any]:
        """``samples`` episodes per prompt, group id = the prompt's index; run them with
        ``max_turns = turn + 1`` and :meth:`prefixes`."""
        from ragen2.rollout.runner import EpisodeSpec

        return [EpisodeSpec(p.seed, i, p.env, 1.0)
                for i, p in enumerate(self.prompts + self.siblings) for _ in range(self.samples)]

    def prefixes(self) -> dict[int, list[str]]:
        """{group id: the scripted responses} for ``RolloutWorker.rollout(prefixes=...)``."""
        return {i: list(p.prefix) for i, p in enumerate(self.prompts + self.siblings)}

    def measure(self, trajs: Sequence[Trajectory], scorer: Scorer, step: int) -> PanelMeasurement:
        """One measurement, ``collapse/panel/turns/*`` its metrics (only the counts, the
        reasoning share and the turn when fewer than 2 prompts or ``min_samples`` samples
        produced a turn-k reasoning). The contrast sets' siblings (group ids from
        ``len(prompts)`` on) count only in ``contrast/<c>/*``."""
        everyone, trajs = trajs, [t for t in trajs if t.group_id < len(self.prompts)]
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
        if self.siblings:  # the contrast among states that differ in one coordinate
            out.update(self._contrast(everyone, scorer, seed + 3))
        if len(inputs.contexts) < 2 or n_samples < self.min_samples:
            return PanelMeasurement(out)
        columns = np.tile(np.arange(len(inputs.contexts)), (len(inputs.owner), 1))
        logp, _ = scorer(inputs.contexts, inputs.continuations, columns)
        m, mi_lo, mi_floor = panel_estimates(logp, inputs.owner, inputs.prompt_keys,
                                             self.bootstrap, self.permutations, seed)
        out.update({PREFIX + k: v for k, v in m.items()})
        out[PREFIX + "reasoning_tokens_mean"] = float(np.mean([len(c) for c in inputs.continuations]))
        return PanelMeasurement(out, mi_lo, mi_floor)

    def _contrast(self, trajs: Sequence[Trajectory], scorer: Scorer, seed: int
                  ) -> dict[str, float]:
        """``contrast/<c>/*`` of the contrast sets: every turn-k reasoning of a set's prompt or
        sibling scored under the set's states (:func:`ragen2.collapse.contrast.measure_contrast`)."""
        everyone = self.prompts + self.siblings
        ok = [t for t in trajs if t.env_error is None and t.group_id < len(everyone)
              and (t.group_id >= len(self.prompts) or everyone[t.group_id].coordinates is not None)]
        inputs = build_turn_panel_inputs(ok, self.turn, [p.observation for p in everyone],
                                         min_prompts=0)
        index = {p.observation: i for i, p in enumerate(everyone)}
        chosen = [everyone[index[k]] for k in inputs.prompt_keys]
        states = [state_key((p.env, str(p.seed)), dict(p.coordinates)) for p in chosen]
        names = sorted({n for q in self.siblings for n, _ in q.coordinates})
        return measure_contrast(inputs.contexts, inputs.continuations, inputs.owner, states,
                                scorer, PREFIX, min_samples=self.min_samples,
                                resamples=self.bootstrap, seed=seed, names=names)

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
