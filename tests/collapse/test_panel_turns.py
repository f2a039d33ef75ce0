"""The later-turn probe panel (fixed mid-episode states), the scripted-opening policy, and the
instrument the collapse alert and the diagnosis read."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ragen2 import seeding
from ragen2.collapse.instrument import (alert_measurement, diagnosis_inputs,
                                        resolve_instrument)
from ragen2.collapse.panel import PanelMeasurement, panel_metrics
from ragen2.collapse.panel_turns import (PREFIX, TurnPanel, TurnPanelPrompt,
                                         build_turn_panel_inputs, choose_turn_panel,
                                         script_opening)
from ragen2.rollout.envs import env_factory
from ragen2.rollout.trajectory import Trajectory

FROZENLAKE = env_factory("ragen2/FrozenLake-v0", {})


def test_script_opening_replays_the_expert_by_hand():
    """random_prob 0: the expert's BFS moves; the observation is the board after them."""
    env = FROZENLAKE()
    seed = seeding.panel_seed(0)
    opening = script_opening(env, seed, 2, 0.0)
    ref = FROZENLAKE()
    ref.reset(seed=seed)
    texts = []
    for _ in range(2):
        think, action = ref.unwrapped.demonstration()
        texts.append(f"<think>{think}</think><answer>{action}</answer>")
        obs, *_ = ref.step(action)
    assert opening == (tuple(texts), obs)
    assert "I am at row 1, column 1." in texts[0]  # the default layout starts top-left


def test_script_opening_random_moves_are_seeded_per_env_seed():
    env = FROZENLAKE()
    seeds = [seeding.panel_seed(i) for i in range(40)]
    a = [script_opening(env, s, 2, 0.5) for s in seeds]
    assert a == [script_opening(FROZENLAKE(), s, 2, 0.5) for s in seeds]  # same for every run
    expert = [script_opening(env, s, 2, 0.0) for s in seeds]
    assert a != expert  # some moves were random


def test_script_opening_none_when_the_episode_ends_and_bad_arguments():
    from tests.reasoning_env import EchoWord

    assert script_opening(EchoWord(), 3, 1, 0.0) is None  # one answer ends it
    with pytest.raises(ValueError, match="turns"):
        script_opening(FROZENLAKE(), 1, 0, 0.0)
    with pytest.raises(ValueError, match="random_prob"):
        script_opening(FROZENLAKE(), 1, 1, 1.5)


def test_frozenlake_first_reasoning_is_shared_but_mid_episode_states_differ():
    """Why the later-turn panel exists: on the default layout the expert's first reasoning names
    the same cells on every map; after a 2-turn opening the positions differ."""
    env = FROZENLAKE()
    first, mid = set(), set()
    for i in range(32):
        env.reset(seed=seeding.panel_seed(i))
        first.add(env.unwrapped.demonstration()[0].split(" The shortest")[0])
        opening = script_opening(env, seeding.panel_seed(i), 2, 0.5)
        if opening is not None:
            mid.add(env.unwrapped.demonstration()[0].split(" The shortest")[0])
    assert first == {"I am at row 1, column 1. The goal is at row 4, column 4."}
    assert len(mid) >= 3


def test_choose_turn_panel_skips_ended_repeated_and_failing_seeds():
    base = seeding.panel_seed(0)
    outcomes = {0: (("a",), "obs A"), 1: None, 2: (("b",), "obs A"), 3: "raise",
                4: (("c",), "obs C"), 5: (("d",), "obs D")}

    def play(env, seed):
        o = outcomes[seed - base]
        if o == "raise":
            raise RuntimeError("boom")
        return o

    got = choose_turn_panel([("fl", 3)], play)
    assert got == [TurnPanelPrompt("fl", base, "obs A", ("a",)),
                   TurnPanelPrompt("fl", base + 4, "obs C", ("c",)),
                   TurnPanelPrompt("fl", base + 5, "obs D", ("d",))]
    calls = []
    assert choose_turn_panel([("fl", 32)], lambda e, s: calls.append(s)) == []  # single-turn env
    assert len(calls) == 8  # given up after 8 seeds, not 8 x 32


def _traj(group, ids, spans, err=None):
    t = Trajectory(env_seed=group, group_id=group, policy_version=0)
    t.input_ids, t.think_spans, t.env_error = list(ids), list(spans), err
    return t


def test_build_turn_panel_inputs_reads_turn_k():
    # turn 0 at [1, 3), turn 1 at [5, 7): the context is everything in front of turn 1's reasoning
    trajs = [_traj(0, [9, 1, 2, 8, 7, 3, 4, 6], [(1, 3), (5, 7)]),
             _traj(0, [9, 1, 2, 8, 7, 5, 5, 6], [(1, 3), (5, 7)]),
             _traj(1, [9, 1, 1, 8, 6, 2, 6], [(1, 3), (5, 6)]),
             _traj(1, [9, 1, 1], [(1, 3)]),  # never reached turn 1
             _traj(2, [9, 1, 1, 8, 6, 2], [(1, 3), None]),  # no reasoning at turn 1
             _traj(3, [9, 1, 1, 8, 6, 2], [(1, 3), (5, 6)], err="boom")]
    got = build_turn_panel_inputs(trajs, 1, ["A", "B", "C", "D"])
    assert got.contexts == [[9, 1, 2, 8, 7], [9, 1, 1, 8, 6]]
    assert got.continuations == [[3, 4], [5, 5], [2]]
    assert got.owner.tolist() == [0, 0, 1] and got.prompt_keys == ["A", "B"]
    assert build_turn_panel_inputs(trajs[:2], 1, ["A"]) is None  # one prompt: nothing to measure


def test_turn_panel_measure_is_panel_metrics_of_the_scored_matrix():
    prompts = [TurnPanelPrompt("fl", 10 + i, f"obs {i}", ("x", "y")) for i in range(3)]
    panel = TurnPanel(prompts, samples=2, bootstrap=50, permutations=40, seed=7, min_samples=6)
    assert panel.turn == 2 and len(panel.specs()) == 6 and panel.prefixes()[1] == ["x", "y"]
    trajs = [_traj(g, [g, 0, 0, 0, 1, 2], [(1, 2), (2, 3), (4, 6)]) for g in (0, 0, 1, 1, 2, 2)]
    logp = np.array([[-1.0, -3, -4], [-1.5, -3, -3], [-4, -1, -2], [-3, -1, -3],
                     [-5, -5, -1], [-4, -4, -2]])
    calls = []

    def scorer(contexts, conts, columns):
        calls.append((contexts, conts, columns))
        return logp, np.full(logp.shape, 2)

    got = panel.measure(trajs, scorer, step=5)
    m = got.metrics
    contexts, conts, columns = calls[0]
    assert contexts == [[0, 0, 0, 0], [1, 0, 0, 0], [2, 0, 0, 0]] and conts == [[1, 2]] * 6
    assert columns.tolist() == [[0, 1, 2]] * 6
    ref = panel_metrics(logp, np.array([0, 0, 1, 1, 2, 2]), ["obs 0", "obs 1", "obs 2"], 50, 40,
                        seeding.panel_bootstrap_seed(7, 5) + 2)
    assert {k[len(PREFIX):]: v for k, v in m.items()
            if k[len(PREFIX):] in ref} == pytest.approx(ref, nan_ok=True)
    # the MI by hand: matched - log mean_j exp(row), averaged
    marg = np.log(np.exp(logp).mean(axis=1))
    own = logp[np.arange(6), [0, 0, 1, 1, 2, 2]]
    assert m[PREFIX + "mi"] == pytest.approx(float(np.mean(own - marg)), abs=1e-12)
    assert m[PREFIX + "mi_bound"] == pytest.approx(math.log(3))
    assert m[PREFIX + "healthy"] == float(m[PREFIX + "mi_lo"] > m[PREFIX + "mi_floor"])
    assert (got.mi_lo, got.mi_floor) == (m[PREFIX + "mi_lo"], m[PREFIX + "mi_floor"])
    assert got.healthy is bool(m[PREFIX + "healthy"])
    assert m[PREFIX + "turn"] == 2.0 and m[PREFIX + "reasoning_frac"] == 1.0
    assert m[PREFIX + "reasoning_tokens_mean"] == 2.0
    none = panel.measure(trajs[:2], scorer, step=5)  # one prompt: its counts, no value
    assert none.metrics[PREFIX + "n_prompts"] == 1.0 and none.metrics[PREFIX + "n_samples"] == 2.0
    assert PREFIX + "mi" not in none.metrics
    assert none.mi_lo is None and none.healthy is None


def test_turn_panel_refuses_too_few_or_uneven_prompts():
    p = TurnPanelPrompt("fl", 1, "o", ("x",))
    with pytest.raises(ValueError, match=">= 2"):
        TurnPanel([p], 2, 10, 10, 0)
    with pytest.raises(ValueError, match="same opening length"):
        TurnPanel([p, TurnPanelPrompt("fl", 2, "o2", ("x", "y"))], 2, 10, 10, 0)


def test_resolve_instrument():
    assert resolve_instrument("auto", True) == "later_turns"
    assert resolve_instrument("auto", False) == "first_turn"
    assert resolve_instrument("first_turn", True) == "first_turn"
    assert resolve_instrument("later_turns", True) == "later_turns"
    with pytest.raises(ValueError, match="no later-turn probe panel"):
        resolve_instrument("later_turns", False)
    with pytest.raises(ValueError, match="allowed: auto, first_turn, later_turns"):
        resolve_instrument("turns", True)


def test_alert_and_diagnosis_inputs_follow_the_instrument():
    m = {"collapse/panel/n_prompts": 32.0, "collapse/panel/mi_lo": 0.001,
         "collapse/panel/mi_floor": 0.004, "collapse/panel/turns/n_prompts": 32.0,
         "collapse/panel/turns/mi_lo": 0.5, "collapse/panel/turns/mi_floor": 0.05,
         "collapse/mi": 0.002, "collapse/mi_null": 0.001, "collapse/log_n": 2.7,
         "collapse/mi_bound": 2.7, "collapse/panel/turns/mi": 0.6,
         "collapse/panel/turns/mi_null": 0.02, "collapse/panel/turns/log_n": 4.85,
         "collapse/panel/turns/mi_bound": 3.4}
    first, later = PanelMeasurement({}, 0.001, 0.004), PanelMeasurement({}, 0.5, 0.05)
    assert alert_measurement("first_turn", first, later) is first
    assert alert_measurement("later_turns", first, later) is later
    assert alert_measurement("later_turns", first, None) is None  # the later turns not measured
    assert (first.healthy, later.healthy, PanelMeasurement({}).healthy) == (False, True, None)
    with pytest.raises(ValueError, match="unresolved"):
        alert_measurement("auto", first, later)
    assert diagnosis_inputs("first_turn", m) == {"mi": 0.002, "mi_null": 0.001, "log_n": 2.7,
                                                 "mi_bound": 2.7}
    assert diagnosis_inputs("later_turns", m) == {"mi": 0.6, "mi_null": 0.02, "log_n": 4.85,
                                                  "mi_bound": 3.4}
    assert diagnosis_inputs("later_turns", {}) == dict.fromkeys(("mi", "mi_null", "log_n", "mi_bound"))


def test_scripted_prefix_policy_replays_the_opening_then_samples(tiny_tokenizer):
    """Two episodes of one prompt: turns 0-1 replayed (identical ids), turn 2 from the engine."""
    from ragen2.engines.base import Generation, SamplingParams
    from ragen2.rollout.chat import ChatRenderer
    from ragen2.rollout.runner import EngineTurnPolicy, EpisodeSpec, run_episodes
    from ragen2.rollout.scripted import ScriptedPrefixPolicy

    seed = seeding.panel_seed(0)
    opening, obs = script_opening(FROZENLAKE(), seed, 2, 0.5)

    class Engine:
        policy_version, turns = 3, []

        def generate(self, prompts, params):
            self.turns.append(len(prompts))
            ids = tiny_tokenizer.encode("<think>sampled</think><answer>Down</answer>",
                                        add_special_tokens=False)
            return [Generation(list(ids), [-0.5] * len(ids), "stop", 3) for _ in prompts]

    engine = Engine()
    policy = ScriptedPrefixPolicy(EngineTurnPolicy(engine, SamplingParams()), tiny_tokenizer,
                                  {0: list(opening)})
    assert policy.policy_version == 3
    specs = [EpisodeSpec(seed, 0, "fl"), EpisodeSpec(seed, 0, "fl")]
    trajs = run_episodes(specs, lambda name: FROZENLAKE(), ChatRenderer(tiny_tokenizer), policy,
                         max_turns=3, format_penalty=-0.1, max_context_tokens=4096,
                         max_new_tokens=64)
    assert engine.turns == [2]  # the engine saw only turn 2
    for t in trajs:
        assert t.responses[:2] == list(opening) and t.observations[2] == obs
        assert t.num_format_errors == 0 and len(t.think_spans) == 3
    a = trajs[0].think_spans[2][0]
    assert trajs[0].input_ids[:a] == trajs[1].input_ids[:a]  # one fixed context per prompt
    assert build_turn_panel_inputs(trajs, 2, [obs]) is None  # one prompt: nothing to measure


@pytest.mark.parametrize("overrides, key", [
    (["monitor.alert_instrument=turns"], "monitor.alert_instrument"),
    (["monitor.panel_prefix_random=1.5"], "monitor.panel_prefix_random"),
    (["monitor.panel_prefix_turns=-1"], "monitor.panel_prefix_turns"),
    (["monitor.alert_instrument=later_turns", "monitor.panel_prefix_turns=0"],
     "monitor.alert_instrument"),
    (["monitor.alert_instrument=later_turns", "rollout.max_turns=2"], "monitor.alert_instrument"),
])
def test_bad_later_turn_settings_name_the_key(overrides, key):
    from ragen2.config import ConfigError
    from ragen2.train import load_config

    with pytest.raises(ConfigError) as e:
        load_config(overrides)
    assert e.value.key == key


def test_later_turn_defaults():
    from ragen2.train import load_config

    m = load_config([]).monitor
    assert (m.panel_prefix_turns, m.panel_prefix_random, m.alert_instrument) == (2, 0.5, "auto")
