"""The multi-turn episode loop: observation -> chat tokens -> policy -> parse -> env.step.

All active episodes advance one turn together, so each turn is one batched ``generate`` call.
What the environment receives: the stripped content of ``<answer>``. A response that does not
parse (see :func:`ragen2.rollout.parsing.parse_response`) is **not** sent to the environment: the
turn gets ``format_penalty``, the env state is unchanged, and the next observation is the current
one prefixed with a one-line note. An action the env reports as invalid
(``info["action_is_valid"] is False``) also gets ``format_penalty`` on top of the env's reward.
An env with the optional ``ground(reasoning)`` hook is asked, every turn and before the turn's
action is applied, whether the reasoning states its true state (``Trajectory.grounding``); a hook
that raises or returns anything but None or a share in [0, 1] fails the episode like an env error.
One with the optional ``state_coordinates()`` hook is asked, likewise, for the coordinates of the
state each turn's reasoning is about (``Trajectory.coordinates``: the MI monitor's contrast).
Both are asked in the turn's env phase, beside the step (concurrently with the other episodes'
env calls). An env whose ``ground_with_step(reasoning)`` returns True grounds the reasoning
together with the turn's first step, on the state before it, and ``ground`` then answers from
that step (``ragen2/Remote-v0``: one request a turn instead of two).
"""

from __future__ import annotations

import random
import re
import time
from concurrent.futures import Executor
from dataclasses import dataclass, field
from numbers import Real
from typing import Any, Callable, Mapping, Protocol, Sequence

import gymnasium as gym

from ragen2 import seeding
from ragen2.engines.base import Generation, GenerationEngine, SamplingParams
from ragen2.rollout.chat import ChatRenderer, system_prompt
from ragen2.rollout.parsing import leading_think, parse_plain, parse_response, think_token_span
from ragen2.rollout.trajectory import Trajectory

FORMAT_ERROR_NOTE = ("Your reply could not be parsed. Reply exactly as "
                     "<think>...</think><answer>...</answer>.")


@dataclass(frozen=True)
class EpisodeSpec:
    """Which episode to run: the env seed (shared by a group), its group and env name."""

    env_seed: int
    group_id: int
    env: str = "env"  # the env's name (an entry of env.mix, or the single env's name)
    temperature_scale: float = 1.0  # sampling temperature multiplier (tiered SNR perturbation)


@dataclass
class EpisodeState:
    env: gym.Env
    traj: Trajectory
    observation: str = ""
    done: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


class TurnPolicy(Protocol):
    """Produces one response (token ids + logprobs) for each active episode."""

    policy_version: int

    def act(self, episodes: Sequence[EpisodeState], turn: int) -> list[Generation]: ...


def env_instructions(env: gym.Env, info: dict[str, Any]) -> str:
    """Task instructions from the env attribute ``instructions`` or the reset info field."""
    return str(getattr(env.unwrapped, "instructions", None) or info.get("instructions") or "")


class EngineTurnPolicy:
    """Samples responses from a generation engine; the sampling seed changes every turn."""

    def __init__(self, engine: GenerationEngine, params: SamplingParams) -> None:
        self.engine, self.params = engine, params

    @property
    def policy_version(self) -> int:
        return self.engine.policy_version

    def act(self, episodes: Sequence[EpisodeState], turn: int) -> list[Generation]:
        """One batched generate per distinct temperature scale (usually exactly one)."""
        from dataclasses import replace

        out: list[Generation | None] = [None] * len(episodes)
        for scale in sorted({e.traj.temperature_scale for e in episodes}):
            idx = [i for i, e in enumerate(episodes) if e.traj.temperature_scale == scale]
            params = replace(self.params, seed=seeding.turn_seed(self.params.seed, turn, scale),
                             temperature=self.params.temperature * scale)
            for i, g in zip(idx, self.engine.generate([episodes[i].traj.input_ids for i in idx], params)):
                out[i] = g
        return out  # type: ignore[return-value]


class DemonstrationPolicy:
    """Scripted expert for warm-start data: the env's ``demonstration()`` hook, made imperfect.

    With probability ``random_action_prob`` the expert action is replaced by a uniformly random
    entry of the env's ``valid_actions`` (the reasoning text is kept), so the cloned policy leaves
    room for RL to improve. Responses are tokenised text (they are not model samples).
    """

    policy_version = 0

    def __init__(self, tokenizer: Any, random_action_prob: float, seed: int) -> None:
        self.tokenizer = tokenizer
        self.random_action_prob = random_action_prob
        self.rng = random.Random(seed)

    def act(self, episodes: Sequence[EpisodeState], turn: int) -> list[Generation]:
        out = []
        for ep in episodes:
            env = ep.env.unwrapped
            if not hasattr(env, "demonstration"):
                raise TypeError(f"{type(env).__name__} has no demonstration() hook; disable "
                                "trainer.warm_start or add one (see "
                                "docs/tutorials/add-an-environment.md)")
            think, action = env.demonstration()
            actions = list(getattr(env, "valid_actions", []) or [])
            if actions and self.rng.random() < self.random_action_prob:
                action = self.rng.choice(actions)
            text = f"<think>{think}</think><answer>{action}</answer>"
            ids = list(self.tokenizer.encode(text, add_special_tokens=False))
            out.append(Generation(ids, [0.0] * len(ids), "stop", 0, text))
        return out


def run_episodes(
    specs: Sequence[EpisodeSpec],
    make_env: Callable[[str], gym.Env],
    renderer: ChatRenderer,
    policy: TurnPolicy,
    *,
    max_turns: int,
    format_penalty: float | Mapping[str, float],
    max_context_tokens: int,
    max_new_tokens: int,
    envs: dict[str, list[gym.Env]] | None = None,
    executor: Executor | None = None,
    stats: dict[str, float] | None = None,
    actions_per_turn: int = 1,
    action_sep: str = "||",
    response_format: str = "tags",
) -> list[Trajectory]:
    """Run one episode per spec to the end and return their trajectories (in spec order).

    ``format_penalty`` is one value or one per env name. ``make_env(name)`` builds the env a spec names; ``envs`` optionally holds a pool of instances
    per name to reuse (grown as needed). With an ``executor``, the env calls of one turn run
    concurrently (each episode owns its env), so one slow ``step`` does not serialise the batch.
    An env that raises (or breaks the text contract) ends that episode with ``env_error`` set; the
    instance is dropped from the pool. An exception with ``stops_run`` (:func:`stops_run`) is
    raised instead: the run stops. ``stats`` receives ``env_s`` and ``generate_s``: wall
    seconds spent in env calls and in the policy. ``actions_per_turn > 1``: an answer may hold up
    to that many actions separated by ``action_sep`` (RAGEN's ``Right || Up``), stepped in order.
    ``response_format="plain"`` (``rollout.response_format``): no format is asked for, the whole
    reply is the action and its ids are the reasoning span.
    """
    pools = envs if envs is not None else {}
    timing = {"env_s": 0.0, "generate_s": 0.0}

    def penalty(ep: EpisodeState) -> float:  # one value, or one per env name
        if isinstance(format_penalty, Mapping):
            return float(format_penalty[ep.traj.env_name])
        return float(format_penalty)

    eos_text = renderer.tokenizer.decode([renderer.eos_token_id]) if renderer.eos_token_id is not None else None
    taken: dict[str, int] = {}
    episodes = []
    for spec in specs:
        pool = pools.setdefault(spec.env, [])
        k = taken.get(spec.env, 0)
        taken[spec.env] = k + 1
        if len(pool) <= k:
            pool.append(make_env(spec.env))
        traj = Trajectory(spec.env_seed, spec.group_id, policy.policy_version, env_name=spec.env,
                          temperature_scale=spec.temperature_scale)
        if grounding_hook(pool[k]) is not None:
            traj.grounding = []
        if coordinates_hook(pool[k]) is not None:
            traj.coordinates = []
        episodes.append(EpisodeState(pool[k], traj))

    def reset(ep: EpisodeState) -> None:
        obs, info = ep.env.reset(seed=ep.traj.env_seed)
        ep.observation, ep.extra["instructions"] = _as_text(obs), env_instructions(ep.env, info)

    t0 = time.perf_counter()
    _each(executor, reset, episodes)
    timing["env_s"] += time.perf_counter() - t0
    for ep in episodes:  # tokenising stays on this thread (HF tokenizers are not thread-safe)
        if ep.traj.env_error is None:
            prompt = renderer.initial_prompt(
                system_prompt(ep.extra.pop("instructions"), actions_per_turn, action_sep,
                              response_format),
                ep.observation)
            if len(prompt) + max_new_tokens > max_context_tokens:
                raise ValueError(
                    f"env {ep.traj.env_name!r} (seed {ep.traj.env_seed}): the first prompt is "
                    f"{len(prompt)} tokens, which with engine.max_new_tokens={max_new_tokens} "
                    f"exceeds rollout.max_context_tokens={max_context_tokens}: raise "
                    "rollout.max_context_tokens (and engine.max_model_len with it) or shorten "
                    "the env's instructions / observation")
            ep.traj.append(prompt, 0)
            ep.traj.first_prompt_len = len(prompt)
            ep.traj.observations.append(ep.observation)

    for turn in range(max_turns):
        active = [e for e in episodes if not e.done]
        if not active:
            break
        t0 = time.perf_counter()
        gens = policy.act(active, turn)
        timing["generate_s"] += time.perf_counter() - t0
        turns = [(ep, *_record_turn(ep, gen, renderer, eos_text, penalty(ep), response_format))
                 for ep, gen in zip(active, gens)]
        t0 = time.perf_counter()
        _each(executor,
              lambda turn: _env_turn(*turn, penalty(turn[0]), actions_per_turn, action_sep),
              [t for t in turns if t[2] is not None or t[0].traj.grounding is not None
               or t[0].traj.coordinates is not None])
        timing["env_s"] += time.perf_counter() - t0
        for ep, gen in zip(active, gens):
            if ep.done:
                continue
            if turn == max_turns - 1:
                ep.done, ep.traj.truncated = True, True
                continue
            # the next turn's context is everything so far, the observation and its generation
            suffix = renderer.observation_suffix(ep.observation, gen.finish_reason == "eos")
            if len(ep.traj.input_ids) + len(suffix) + max_new_tokens > max_context_tokens:
                ep.done, ep.traj.truncated = True, True
            else:
                ep.traj.append(suffix, 0)

    for spec, ep in zip(specs, episodes):  # a failed env is not reused: it may be mid-episode
        if ep.traj.env_error is not None:
            pool = pools[spec.env]
            pool[pool.index(ep.env)] = make_env(spec.env)
    if stats is not None:
        for k, v in timing.items():
            stats[k] = stats.get(k, 0.0) + v
    return [e.traj for e in episodes]


def _each(executor: Executor | None, fn: Callable[[Any], None], items: list[Any]) -> None:
    """``fn`` on every item (concurrently with an executor); exceptions end that episode only."""
    def guarded(item: Any) -> None:
        try:
            fn(item)
        except Exception as e:  # noqa: BLE001  (env code is the user's: any failure is recorded)
            if stops_run(e):
                raise
            ep = item[0] if isinstance(item, tuple) else item
            ep.done = True
            ep.traj.env_error = f"{type(e).__name__}: {e}"[:500]

    if executor is None or len(items) < 2:
        for item in items:
            guarded(item)
    else:
        list(executor.map(guarded, items))


def _record_turn(ep: EpisodeState, gen: Generation, renderer: ChatRenderer, eos_text: str | None,
                 format_penalty: float,
                 response_format: str = "tags") -> tuple[str | None, str | None]:
    """Record one generated turn; (its reasoning or None, the answer to send to the env or None
    if it did not parse)."""
    traj = ep.traj
    traj.append(gen.token_ids, 1, gen.logprobs)
    traj.turn_ends.append(len(traj.input_ids) - 1)
    text = gen.text or renderer.tokenizer.decode(gen.token_ids, skip_special_tokens=False)
    # what the generation prompt already opened (a "<think>\n" of R1-style templates) is read in
    # front of it: the parser and the saved response see the whole reply, the ids stay as sampled
    text = renderer.response_prefix + text
    traj.responses.append(text)
    plain = response_format == "plain"
    parsed = parse_plain(text, eos_text) if plain else parse_response(text, eos_text)
    think = parsed.think if parsed.format_ok or plain else leading_think(text)
    span = None
    if plain and think is not None:  # the whole reply but its EOS
        ids = gen.token_ids
        n = len(ids) - (1 if ids and ids[-1] == renderer.eos_token_id else 0)
        start = len(traj.input_ids) - len(ids)
        span = (start, start + n) if n > 0 else None
    elif think is not None:  # the reasoning's sampled ids, for the MI monitor
        ids, tok = gen.token_ids, renderer.tokenizer
        local = think_token_span(lambda k: tok.decode(ids[:k], skip_special_tokens=False),
                                 len(ids), renderer.response_prefix)
        start = len(traj.input_ids) - len(ids)
        span = None if local is None else (start + local[0], start + local[1])
    traj.think_spans.append(span)
    if traj.num_turns == 1:
        traj.first_think, traj.think_span = think, span
    if parsed.format_ok:
        traj.turn_rewards.append(0.0)  # set by _env_step
        return think, parsed.answer
    traj.num_format_errors += 1
    traj.turn_rewards.append(format_penalty)
    ep.observation = f"{FORMAT_ERROR_NOTE}\n{_strip_note(ep.observation)}"
    traj.observations.append(ep.observation)
    return think, None


def _env_turn(ep: EpisodeState, think: str | None, answer: str | None, format_penalty: float,
              actions_per_turn: int = 1, action_sep: str = "||") -> None:
    """The turn's env calls (may run on a worker thread): the instruments on the state the
    reasoning is about, then the answer's step(s) when it parsed."""
    traj = ep.traj
    if traj.coordinates is not None:  # the state this turn's reasoning is about
        traj.coordinates.append(_ask_hook(ep, "state_coordinates",
                                          lambda: read_coordinates(ep.env)))
    if traj.grounding is None:
        if answer is not None and not ep.done:
            _env_step(ep, answer, format_penalty, actions_per_turn, action_sep)
        return
    if think is not None and answer is not None and not ep.done and ground_with_step(ep.env, think):
        stepped = False  # the verdict travels with the step: a failed step has none
        try:
            _env_step(ep, answer, format_penalty, actions_per_turn, action_sep)
            stepped = True
        finally:
            traj.grounding.append(_ask_hook(ep, "ground", lambda: ground_reasoning(ep.env, think))
                                  if stepped else None)
        return
    # the env's verdict, before the action changes its state
    traj.grounding.append(_ask_hook(ep, "ground", lambda: None if think is None
                                    else ground_reasoning(ep.env, think)))
    if answer is not None and not ep.done:
        _env_step(ep, answer, format_penalty, actions_per_turn, action_sep)


def _ask_hook(ep: EpisodeState, name: str, ask: Callable[[], Any]) -> Any:
    """``ask()`` (an optional env hook, ``name``); a failure ends the episode as an env error
    (the first one kept) and gives None, unless it stops the run (:func:`stops_run`)."""
    try:
        return ask()
    except Exception as e:  # noqa: BLE001  (env code is the user's: the episode fails)
        if stops_run(e):
            raise
        ep.done = True
        ep.traj.env_error = ep.traj.env_error or f"{type(e).__name__} in {name}(): {e}"[:500]
        return None


def stops_run(e: BaseException) -> bool:
    """An env exception that stops the run instead of failing its episode: one whose class sets
    ``stops_run = True`` (``ragen2_envs.remote.EnvServerDown``: the env server stays down)."""
    return bool(getattr(e, "stops_run", False))


def grounding_hook(env: gym.Env) -> Callable[[str], Any] | None:
    """The env's optional ``ground(reasoning)`` (on the unwrapped env), None when it has none or
    sets ``ground = None`` to opt out."""
    hook = getattr(env.unwrapped, "ground", None)
    return hook if callable(hook) else None


def ground_with_step(env: gym.Env, reasoning: str) -> bool:
    """Whether the env grounds ``reasoning`` with its next step (its optional
    ``ground_with_step(reasoning)`` returned True): then ``ground(reasoning)``, asked after that
    step, gives the verdict on the state before it."""
    hook = getattr(env.unwrapped, "ground_with_step", None)
    return bool(hook(reasoning)) if callable(hook) else False


def ground_reasoning(env: gym.Env, reasoning: str) -> float | None:
    """``env.ground(reasoning)``, checked: None (nothing checkable) or a share in [0, 1]."""
    value = grounding_hook(env)(reasoning)  # type: ignore[misc]
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, Real) or not 0.0 <= value <= 1.0:
        raise ValueError(f"{type(env.unwrapped).__name__}.ground() returned {value!r}; it must "
                         "return None (nothing checkable) or the share of true claims, a number "
                         "in [0, 1] (docs/reference/environments.md)")
    return float(value)


_COORDINATE = re.compile(r"[A-Za-z0-9_]+")  # a coordinate's name is a metric key's segment


def coordinates_hook(env: gym.Env) -> Callable[[], Any] | None:
    """The env's optional ``state_coordinates()`` (on the unwrapped env), None when it has none
    or sets ``state_coordinates = None`` to opt out."""
    hook = getattr(env.unwrapped, "state_coordinates", None)
    return hook if callable(hook) else None


def read_coordinates(env: gym.Env) -> dict[str, int | str] | None:
    """``env.state_coordinates()``, checked: None (no state to describe) or a non-empty dict of
    str names to int or str values."""
    value = coordinates_hook(env)()  # type: ignore[misc]
    if value is None:
        return None
    if (not isinstance(value, dict) or not value
            or not all(isinstance(k, str) and _COORDINATE.fullmatch(k) for k in value)
            or not all(isinstance(v, (int, str)) and not isinstance(v, bool) for v in value.values())):
        raise ValueError(f"{type(env.unwrapped).__name__}.state_coordinates() returned {value!r}; "
                         "it must return None or a non-empty dict of names "
                         "(letters, digits, _) to int or str values (docs/reference/environments.md)")
    return dict(value)


def split_actions(answer: str, actions_per_turn: int, sep: str) -> list[str]:
    """The actions of one answer: the answer itself, or with ``actions_per_turn > 1`` its
    ``sep``-separated parts (stripped, empty ones dropped), at most ``actions_per_turn`` of them."""
    if actions_per_turn == 1:
        return [answer]
    parts = [a.strip() for a in answer.split(sep)]
    return [a for a in parts if a][:actions_per_turn] or [answer]


def _env_step(ep: EpisodeState, answer: str, format_penalty: float, actions_per_turn: int = 1,
              action_sep: str = "||") -> None:
    """Apply a parsed answer to the env (may run on a worker thread: no tokenising here).

    Each action of the answer is stepped in order until the episode ends; the turn's reward is
    their sum, plus the penalty once if any action was invalid."""
    traj = ep.traj
    total, invalid = 0.0, False
    for action in split_actions(answer, actions_per_turn, action_sep):
        obs, reward, terminated, truncated, info = ep.env.step(action)
        obs, reward = _as_text(obs), float(reward)
        traj.env_return += reward
        total += reward
        if not info.get("action_is_valid", True):
            traj.num_invalid_actions += 1
            invalid = True
        traj.success = bool(info.get("success", traj.success))
        if terminated or truncated:
            break
    traj.turn_rewards[-1] = total + (format_penalty if invalid else 0.0)
    ep.observation = obs
    traj.observations.append(ep.observation)
    if terminated or truncated:
        ep.done = True
        traj.terminated, traj.truncated = bool(terminated), bool(truncated)


def _strip_note(obs: str) -> str:
    return obs[len(FORMAT_ERROR_NOTE) + 1:] if obs.startswith(FORMAT_ERROR_NOTE + "\n") else obs


def _as_text(obs: Any) -> str:
    if not isinstance(obs, str):
        raise TypeError(f"the env returned a {type(obs).__name__} observation; ragen2 envs must "
                        "return text (see docs/tutorials/add-an-environment.md)")
    return obs
