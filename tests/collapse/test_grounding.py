"""Grounding through the stack: the runner records the env's verdict per turn, the monitor and the
panels aggregate it with intervals over prompts and the minimum-sample rule."""

from __future__ import annotations

import numpy as np
import pytest

from ragen2.collapse.grounding import (GroundingSamples, batch_grounding, grounding_interval,
                                       grounding_metrics, grounding_samples)
from ragen2.collapse.panel import PanelPrompt, ProbePanel
from ragen2.collapse.panel_turns import TurnPanel, TurnPanelPrompt
from ragen2.collapse.withhold import scope_of, withhold
from ragen2.engines.base import Generation, SamplingParams
from ragen2.glossary import describe
from ragen2.rollout.chat import ChatRenderer
from ragen2.rollout.envs import env_factory
from ragen2.rollout.runner import EngineTurnPolicy, EpisodeSpec, run_episodes
from ragen2.rollout.trajectory import Trajectory
from tests.text_env_stub import PlainTextEnv


def traj(group: int, grounding: list | None, env_error: str | None = None) -> Trajectory:
    t = Trajectory(env_seed=group, group_id=group, policy_version=0)
    t.grounding, t.env_error = grounding, env_error
    return t


# ----------------------------------------------------------------------------- the runner
class Scripted:
    """One fixed response per turn for every episode."""

    policy_version = 0

    def __init__(self, tokenizer, responses):
        self.tok, self.responses = tokenizer, responses

    def act(self, episodes, turn):
        ids = list(self.tok.encode(self.responses[turn], add_special_tokens=False))
        return [Generation(ids, [0.0] * len(ids), "stop", 0, self.responses[turn]) for _ in episodes]


def _run(tokenizer, make, responses, n=1):
    return run_episodes([EpisodeSpec(5, 0) for _ in range(n)], lambda name: make(),
                        ChatRenderer(tokenizer), Scripted(tokenizer, responses),
                        max_turns=len(responses), format_penalty=-0.1, max_context_tokens=4096,
                        max_new_tokens=64)


def test_the_runner_records_the_envs_verdict_per_turn_before_the_action(tiny_tokenizer):
    lake = env_factory("ragen2/FrozenLake-v0", {"size": 4, "hole_prob": 0.0})  # start row 1, col 1
    responses = ["<think>I am at row 1, column 1.</think><answer>Right</answer>",  # true, then moves
                 "<think>I am at row 1, column 1.</think><answer>Down</answer>",  # stale: false
                 "<think>no position here</think> and no answer tag",  # format error, nothing stated
                 "<think>I am at row 2, column 2.</think><answer>Down</answer>"]  # true
    (t,) = _run(tiny_tokenizer, lake, responses)
    assert t.env_error is None and t.num_turns == 4
    assert t.grounding == [1.0, 0.0, None, 1.0]
    assert len(t.grounding) == len(t.think_spans)


_Plain = PlainTextEnv  # a text env without a ground hook; subclasses add one


class _Raises(_Plain):
    def ground(self, reasoning):
        raise ValueError("cannot read this")


class _OutOfRange(_Plain):
    def ground(self, reasoning):
        return 2.0


class _OptedOut(_Plain):
    ground = None


def test_an_env_without_the_hook_records_no_grounding(tiny_tokenizer):
    for make in (_Plain, _OptedOut):
        (t,) = _run(tiny_tokenizer, make, ["<think>a</think><answer>x</answer>"] * 2)
        assert t.grounding is None and t.env_error is None and t.num_turns == 2


@pytest.mark.parametrize("make,message", [
    (_Raises, "ValueError in ground(): cannot read this"),
    (_OutOfRange, "ValueError in ground(): _OutOfRange.ground() returned 2.0; it must return None")])
def test_a_failing_hook_fails_the_episode_like_an_env_error(tiny_tokenizer, make, message):
    (t,) = _run(tiny_tokenizer, make, ["<think>a</think><answer>x</answer>"] * 3)
    assert t.env_error.startswith(message)
    assert t.num_turns == 1 and len(t.observations) == 1  # the action was never sent


# ----------------------------------------------------------------------------- aggregation
def test_samples_of_the_first_turn_the_later_turns_and_one_turn():
    trajs = [traj(0, [1.0, 0.0, 0.5]), traj(0, [None, 1.0]), traj(1, [0.0]),
             traj(1, [1.0, 1.0], env_error="boom"), traj(2, None)]
    first = grounding_samples(trajs, "first")
    assert first.scores.tolist() == [1.0, 0.0] and first.prompts.tolist() == [0, 1]
    assert first.turns == 3  # the None turn counts, the failed episode and the hook-less env not
    later = grounding_samples(trajs, "later")
    assert later.scores.tolist() == [0.0, 0.5, 1.0] and later.turns == 3
    assert grounding_samples(trajs, 2).scores.tolist() == [0.5]
    assert grounding_samples([traj(0, None)], "first") is None  # no env grounds: nothing to log
    with pytest.raises(ValueError, match="turn index"):
        grounding_samples(trajs, "middle")


def test_interval_over_prompts_by_hand():
    rng = np.random.default_rng(0)
    # every prompt agrees: nothing varies between resamples
    assert grounding_interval(np.ones(6), np.array([0, 0, 1, 1, 2, 2]), 200, rng) == (1.0, 1.0)
    # prompt A right twice, prompt B wrong twice: resamples AA = 1, AB = 0.5, BB = 0, each of AA
    # and BB a quarter of the draws, so the 2.5% and 97.5% quantiles are 0 and 1
    assert grounding_interval(np.array([1.0, 1.0, 0.0, 0.0]), np.array([0, 0, 1, 1]), 400,
                              rng) == (0.0, 1.0)
    # the prompt is the unit: A's 3 samples weigh 3 (AB = 3/4), not one
    lo, hi = grounding_interval(np.array([1.0, 1.0, 1.0, 0.0]), np.array([0, 0, 0, 1]), 400, rng)
    assert (lo, hi) == (0.0, 1.0)
    with pytest.raises(ValueError, match="resamples"):
        grounding_interval(np.ones(2), np.array([0, 1]), 1, rng)


def test_metrics_hand_computed_and_withheld_below_the_minimum():
    # 4 prompts x 4 samples; one sample states nothing checkable: 15 checkable of 16 turns
    scores = [[1, 1, 1, 1], [1, 0, 1, 0], [0, 0, 0, 0], [1, 1, 0.5, None]]
    trajs = [traj(g, [s]) for g, row in enumerate(scores) for s in row]
    samples = grounding_samples(trajs, "first")
    m = grounding_metrics(samples, min_samples=15, resamples=200, seed=1)
    assert m["frac"] == pytest.approx(8.5 / 15)
    assert m["n_samples"] == 15 and m["n_prompts"] == 4 and m["checkable_frac"] == 15 / 16
    assert 0.0 <= m["frac_lo"] <= m["frac"] <= m["frac_hi"] <= 1.0 and m["frac_lo"] < m["frac_hi"]
    assert m == grounding_metrics(samples, min_samples=15, resamples=200, seed=1)  # seeded
    # one sample short of monitor.min_samples: the counts only
    assert grounding_metrics(samples, min_samples=16) == {"n_samples": 15.0, "n_prompts": 4.0,
                                                          "checkable_frac": 15 / 16}
    # enough samples, one prompt: no interval over prompts, no value
    one = GroundingSamples(np.ones(20), np.zeros(20, dtype=np.int64), 20)
    assert "frac" not in grounding_metrics(one, min_samples=16)


def test_batch_grounding_scopes_and_the_analysis_withholds_the_same_way():
    trajs = [traj(g, [1.0, 1.0 if g % 2 else 0.0, None]) for g in range(8) for _ in range(2)]
    m = batch_grounding(trajs, step=3, min_samples=16, resamples=100, seed=0)
    assert m["collapse/grounding/frac"] == 1.0 and m["collapse/grounding/frac_lo"] == 1.0
    assert m["collapse/turns/grounding/frac"] == 0.5  # 16 checkable of 32 later turns
    assert m["collapse/turns/grounding/checkable_frac"] == 0.5
    assert m == batch_grounding(trajs, step=3, min_samples=16, resamples=100, seed=0)
    assert batch_grounding([traj(0, None)], step=3) == {}
    for key in m:  # each key has a glossary entry, and its own scope for the minimum-sample rule
        assert describe(key) is not None, key
    assert scope_of("collapse/turns/grounding/frac") == "collapse/turns/grounding/"
    assert scope_of("collapse/panel/turns/grounding/frac_hi") == "collapse/panel/turns/grounding/"
    assert scope_of("collapse/grounding/checkable_frac") is None  # a description, kept
    row = withhold(m, 17)  # the analysis re-reads a run under a larger minimum
    assert "collapse/grounding/frac" not in row and row["collapse/grounding/n_samples"] == 16
    assert "collapse/turns/grounding/frac" not in row and "collapse/grounding/checkable_frac" in row


def _no_scorer(*args):  # pragma: no cover - the measurements below never score
    raise AssertionError("nothing to score without reasoning spans")


def test_the_panels_log_grounding_even_where_the_mi_has_too_few_samples():
    prompts = [PanelPrompt("env", s, f"obs{s}") for s in range(4)]
    panel = ProbePanel(prompts, samples=4, bootstrap=50, permutations=10, seed=0, action_mi=False,
                       min_samples=16)
    trajs = [traj(g, [1.0 if k < 3 else 0.0]) for g in range(4) for k in range(4)]
    m = panel.measure(trajs, _no_scorer, step=5).metrics
    assert m["collapse/panel/n_samples"] == 0.0 and "collapse/panel/mi" not in m
    assert m["collapse/panel/grounding/frac"] == 0.75 and m["collapse/panel/grounding/n_samples"] == 16
    assert panel.records(trajs, 5)[0]["grounding"] == [1.0, 1.0, 1.0, 0.0]

    opening = ("<think>I am at row 1, column 1.</think><answer>Right</answer>",)
    turn_panel = TurnPanel([TurnPanelPrompt("env", s, f"obs{s}", opening) for s in range(4)],
                           samples=4, bootstrap=50, permutations=10, seed=0, min_samples=16)
    # the scripted opening's verdicts (index 0) are not the measured turn's (index 1)
    later = [traj(g, [1.0, 0.0 if g == 0 else 1.0]) for g in range(4) for _ in range(4)]
    m = turn_panel.measure(later, _no_scorer, step=5).metrics
    assert m["collapse/panel/turns/grounding/frac"] == 0.75
    assert m["collapse/panel/turns/grounding/frac_lo"] < 0.75 < 1.0 == m["collapse/panel/turns/grounding/frac_hi"]
    m = turn_panel.measure(later[:12], _no_scorer, step=5).metrics  # 12 < 16: the counts only
    assert "collapse/panel/turns/grounding/frac" not in m
    assert m["collapse/panel/turns/grounding/n_samples"] == 12
