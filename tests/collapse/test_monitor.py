"""The MI monitor's glue: contexts/continuations from trajectories and metrics from a scorer."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ragen2.collapse.monitor import MIMonitor, build_inputs, token_entropy
from ragen2.rollout.trajectory import Trajectory


def traj(group, think, obs):
    """Prompt ids [g, g+1], then a sampled turn: ``<`` (60), the reasoning, ``>`` (62)."""
    t = Trajectory(env_seed=group, group_id=group, policy_version=0)
    t.append([group, group + 1], 0)
    t.first_prompt_len = 2
    t.observations.append(obs)
    t.first_think = think
    body = [ord(c) for c in think or ""]
    t.append([60, *body, 62], 1, [-1.0 if i % 2 == 0 else -3.0 for i in range(len(body) + 2)])
    t.think_span = (3, 3 + len(body)) if think else None
    return t


def test_build_inputs_one_context_per_group():
    trajs = [traj(0, "ab", "x"), traj(0, "c", "x"), traj(1, "d", "y"), traj(2, None, "z")]
    inp = build_inputs(trajs)
    assert inp.contexts == [[0, 1, 60], [1, 2, 60]]  # group 2 has no reasoning: left out
    assert inp.continuations == [[97, 98], [99], [100]] and inp.owner.tolist() == [0, 0, 1]
    assert inp.prompt_keys == ["x", "y"]
    assert build_inputs(trajs[:2]) is None  # one prompt: nothing to compare


def test_continuations_are_the_sampled_ids_not_a_retokenisation():
    """A sample whose reasoning the engine produced in pieces no tokenizer would choose."""
    t = traj(0, "ab", "x")
    t.input_ids[3:5] = [900, 901]  # the same text, other ids
    inp = build_inputs([t, traj(1, "c", "y")])
    assert inp.continuations[0] == [900, 901]


def test_measure_separates_input_dependent_from_template_reasoning():
    trajs = [traj(g, f"r{g}", f"obs{g}") for g in range(4) for _ in range(2)]

    def scorer(dependent):
        def score(contexts, conts, columns):
            owner = np.repeat(np.arange(4), 2)
            logp = np.where(columns == owner[:, None], -1.0, -1.0 - 5.0 * dependent)
            return logp, np.full(columns.shape, 2)
        return score

    mon = MIMonitor(every=1, permutations=10)
    dep = mon.measure(trajs, scorer(True), step=1)
    tmpl = MIMonitor(every=1, permutations=10).measure(trajs, scorer(False), step=1)
    # dependent: matched -1, marginal logsumexp(-1, -6, -6, -6) - log 4
    marginal = math.log(math.exp(-1) + 3 * math.exp(-6)) - math.log(4)
    assert dep["collapse/mi"] == pytest.approx(-1 - marginal)
    assert dep["collapse/retrieval_acc@1"] == 1.0 and dep["collapse/mi_null"] < dep["collapse/mi"]
    assert tmpl["collapse/mi"] == pytest.approx(0.0) and tmpl["collapse/retrieval_acc@1"] == 0.25
    # retrieval at k = 1, 2, 4, 8 with its chance level each (4 distinct prompts: min(k, 4) / 4);
    # the template's all-equal rows score exactly chance, the input-driven policy 1 at every k
    for k, chance in ((1, .25), (2, .5), (4, 1.0), (8, 1.0)):
        assert tmpl[f"collapse/retrieval_chance@{k}"] == dep[f"collapse/retrieval_chance@{k}"] == chance
        assert tmpl[f"collapse/retrieval_acc@{k}"] == pytest.approx(chance)
        assert dep[f"collapse/retrieval_acc@{k}"] == 1.0
    # MI per sequence (summed logprobs) and per token (their mean over the reasoning's 2 tokens)
    assert dep["collapse/mi_token_mean"] == pytest.approx(-0.5 - (math.log(
        math.exp(-0.5) + 3 * math.exp(-3.0)) - math.log(4)))
    assert dep["collapse/token_entropy"] == pytest.approx(2.0)  # -(-1 - 3 - 1 - 3) / 4 tokens


def test_cadence_and_token_entropy():
    mon = MIMonitor(every=5)
    assert [s for s in range(1, 12) if mon.due(s)] == [1, 5, 10]
    assert not MIMonitor(every=0).due(1)
    assert math.isnan(token_entropy([]))
