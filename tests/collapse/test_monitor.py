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

    mon = MIMonitor(every=1, min_samples=2, permutations=10)
    dep = mon.measure(trajs, scorer(True), step=1).metrics
    tmpl = MIMonitor(every=1, min_samples=2, permutations=10).measure(
        trajs, scorer(False), step=1).metrics
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


def two_turn(group, think1, think2):
    """Prompt [g, g+1]; turn 1 ``<`` think1 ``>``; observation [200 + g]; turn 2 ``<`` think2 ``>``."""
    t = Trajectory(env_seed=group, group_id=group, policy_version=0)
    t.append([group, group + 1], 0)
    t.first_prompt_len = 2
    t.observations.append(f"obs{group}")
    spans = []
    for think in (think1, think2):
        start = len(t.input_ids) + 1
        t.append([60, *think, 62], 1, [-1.0] * (len(think) + 2))
        spans.append((start, start + len(think)))
        if len(spans) == 1:
            t.append([200 + group], 0)
    t.think_span, t.think_spans, t.first_think = spans[0], spans, "x"
    return t


def _policy_scorer(input_driven_turn2):
    """log p(z | context): a turn-1 context (ends right after the prompt's ``<``) makes [50];
    a turn-2 context makes [100 + g] (input-driven) or [90] (a template), g = context[0]."""
    def score(contexts, conts, columns):
        logp = np.empty(columns.shape)
        for s, row in enumerate(columns):
            for k, j in enumerate(row):
                ctx = contexts[j]
                turn2 = len(ctx) > 3
                likely = ([100 + ctx[0]] if input_driven_turn2 else [90]) if turn2 else [50]
                logp[s, k] = -1.0 if conts[s] == likely else -6.0
        return logp, np.ones(columns.shape)
    return score


def test_a_later_turn_mi_separates_policies_the_first_turn_cannot():
    """Both policies open every episode with the same template reasoning (first-turn MI 0, as
    for any template); at turn 2 one reasons about its input, the other repeats a template."""
    driven = [two_turn(g, [50], [100 + g]) for g in range(4) for _ in range(4)]
    template = [two_turn(g, [50], [90]) for g in range(4) for _ in range(4)]
    mon = MIMonitor(every=1, min_samples=2, permutations=5, turn_negatives=0)
    a = mon.measure(driven, _policy_scorer(True), 1).metrics
    b = MIMonitor(every=1, min_samples=2, permutations=5, turn_negatives=0).measure(
        template, _policy_scorer(False), 1).metrics
    assert a["collapse/mi"] == pytest.approx(0.0) and b["collapse/mi"] == pytest.approx(0.0)
    assert a["collapse/turns/mi"] > b["collapse/turns/mi"] + 0.3
    assert a["collapse/turns/retrieval_acc@1"] > b["collapse/turns/retrieval_acc@1"]
    assert "collapse/turns/mi_null" in a  # the full matrix (turn_negatives=0): with its null


def test_later_turns_can_be_switched_off():
    trajs = [two_turn(g, [50], [100 + g]) for g in range(3) for _ in range(2)]
    got = MIMonitor(every=1, min_samples=2, permutations=5, turn_negatives=None).measure(
        trajs, _policy_scorer(True), 1)
    out = got.metrics
    assert "collapse/mi" in out and not any(k.startswith("collapse/turns/") for k in out)
    assert got.token_entropy == out["collapse/token_entropy"]  # what the diagnosis keeps
    none = MIMonitor(every=1, min_samples=2, permutations=5, action_mi=False,
                     turn_negatives=None).measure(trajs[:2], _policy_scorer(True), 1)
    # one prompt: only the counts, no value, no token entropy (the entropy reference waits)
    assert none.metrics == {"collapse/n_samples": 2.0, "collapse/n_prompts": 1.0}
    assert none.token_entropy is None


def test_turn_uniform_pairs_weigh_long_episodes_more():
    """One 2-turn and one 1-turn episode per group: trajectory-uniform takes one pair from each
    trajectory; turn-uniform draws len(trajs) pairs from the 3 pairs of each group's two."""
    from ragen2.collapse.monitor import build_turn_inputs

    short = []
    for g in range(3):
        t = two_turn(g, [50], [100 + g])
        t.think_spans = t.think_spans[:1]
        short.append(t)
    trajs = [two_turn(g, [50], [100 + g]) for g in range(3)] + short
    rng = np.random.default_rng(0)
    by_traj = build_turn_inputs(trajs, rng, "trajectory")
    by_turn = build_turn_inputs(trajs, rng, "turn")
    assert len(by_traj.continuations) == len(by_turn.continuations) == 6
    with pytest.raises(ValueError, match="trajectory, turn"):
        build_turn_inputs(trajs, rng, "episode")
    out = MIMonitor(every=1, min_samples=2, permutations=5, turn_negatives=0,
                    turn_uniform=True).measure(
        trajs, _policy_scorer(True), 1).metrics
    assert "collapse/turn_uniform/mi" in out and "collapse/turns/mi" in out


def test_retrieval_at_4_separates_what_retrieval_at_1_cannot():
    """8 prompts x 8 samples. Policy A's reasoning names its prompt's neighbourhood: the own
    prompt ranks first for 1 sample in 8 and second (behind the next prompt) for the other 7, so
    retrieval@1 = 1/8, exactly chance, while retrieval@4 = 1. A template policy scores every
    prompt alike: 1/8 and 4/8, both chance."""
    import torch

    from ragen2.collapse.mi import mutual_information

    n, per = 8, 8
    owner = np.repeat(np.arange(n), per)
    a = np.full((n * per, n), -6.0)
    for s, j in enumerate(owner):
        if s % per == 0:
            a[s, j] = -1.0
        else:
            a[s, (j + 1) % n], a[s, j] = -1.0, -2.0
    ma = mutual_information(torch.tensor(a), torch.tensor(owner), ks=(1, 4))
    mb = mutual_information(torch.zeros(n * per, n, dtype=torch.float64), torch.tensor(owner), ks=(1, 4))
    assert ma["retrieval_acc@1"] == pytest.approx(1 / 8) == ma["retrieval_chance@1"]
    assert mb["retrieval_acc@1"] == pytest.approx(1 / 8)
    assert ma["retrieval_acc@4"] == 1.0 and mb["retrieval_acc@4"] == pytest.approx(0.5)
    assert ma["retrieval_chance@4"] == mb["retrieval_chance@4"] == 0.5


def _noisy_policy_scorer(calls):
    """:func:`_policy_scorer` plus a deterministic per-(context, reasoning) jitter, so that any
    change in which negatives are scored changes the values; records every column plan."""
    base = _policy_scorer(True)

    def score(contexts, conts, columns):
        calls.append(np.array(columns, copy=True))
        logp, tokens = base(contexts, conts, columns)
        jitter = [[(hash((tuple(contexts[j]), tuple(conts[s]))) % 97) / 97 for j in row]
                  for s, row in enumerate(columns)]
        return logp + np.asarray(jitter), tokens
    return score


def _subsampled_monitor():
    # 8 groups (prompts) of 3: 2 sampled negatives per sample on the first turn and the later turns
    return MIMonitor(every=1, min_samples=2, permutations=20, max_negatives=2, turn_negatives=2,
                     turn_uniform=True)


SCOPES = ("collapse/", "collapse/turns/", "collapse/turn_uniform/")


def test_subsampled_plans_log_the_floor_below_the_bound():
    trajs = [two_turn(g, [50], [100 + g]) for g in range(8) for _ in range(3)]
    out = _subsampled_monitor().measure(trajs, _noisy_policy_scorer([]), 5).metrics
    for p in SCOPES:
        assert out[p + "n_prompts"] == 3.0  # the owner and 2 negatives: the subsampled estimator
        assert {p + "mi_null", p + "mi_floor", p + "mi_p_value"} <= set(out)
        assert out[p + "mi_null"] <= out[p + "mi_floor"] <= out[p + "mi_bound"]
    # the first turn is a template (every prompt scores [50] alike, up to the jitter); the later
    # turn names its prompt: far above its floor, significant at 1 / (1 + 20)
    assert out["collapse/turns/mi"] > out["collapse/turns/mi_floor"] + 1.0
    assert out["collapse/turns/mi_p_value"] == pytest.approx(1 / 21)


def test_the_subsampled_null_changes_no_other_value_and_no_draw(monkeypatch):
    """The same measurement with the new null's code path replaced by a stub that draws nothing:
    every other metric is bit-identical and every scorer call gets the same column plan (the
    later turns' negatives come from the generator the first turn's were drawn from)."""
    import ragen2.collapse.monitor as monitor_module

    trajs = [two_turn(g, [50], [100 + g]) for g in range(8) for _ in range(3)]
    calls_with: list[np.ndarray] = []
    with_null = _subsampled_monitor().measure(trajs, _noisy_policy_scorer(calls_with), 5).metrics
    monkeypatch.setattr(monitor_module, "permutation_null_subsampled",
                        lambda *a, **k: {"mi_null": 0.0, "mi_null_q95": 0.0, "p_value": 1.0})
    calls_without: list[np.ndarray] = []
    without = _subsampled_monitor().measure(trajs, _noisy_policy_scorer(calls_without), 5).metrics
    new = {p + k for p in SCOPES for k in ("mi_null", "mi_floor", "mi_p_value")}
    assert set(with_null) == set(without) and new <= set(with_null)
    assert {k: v for k, v in with_null.items() if k not in new} == \
        {k: v for k, v in without.items() if k not in new}
    assert len(calls_with) == len(calls_without) >= 3  # the first turn and the two later-turn modes
    assert all(np.array_equal(a, b) for a, b in zip(calls_with, calls_without))
