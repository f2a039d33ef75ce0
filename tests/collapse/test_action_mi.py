"""I(A; Z | X): the estimator against hand-computed values, its input checks, and the glue from
trajectories (token-exact contexts and actions) through a scorer into ``collapse/action/*``."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ragen2.collapse.action_mi import (
    build_action_inputs,
    conditional_mutual_information,
    group_layout,
    score_actions,
)
from ragen2.collapse.monitor import MIMonitor
from ragen2.rollout.trajectory import Trajectory

cmi = conditional_mutual_information
NEG = -50.0


def follow_matrix(group, keys=None):
    """logp[s, c] = 0 when member c's reasoning is s's own (or identical to it), else NEG."""
    members, _, _ = group_layout(torch.tensor(group))
    keys = list(range(len(group))) if keys is None else keys
    lp = torch.full(members.shape, NEG, dtype=torch.float64)
    for s, row in enumerate(members.tolist()):
        for c, m in enumerate(row):
            if m < 0:
                lp[s, c] = math.nan  # padding: ignored
            elif keys[m] == keys[s]:
                lp[s, c] = 0.0
    return lp


def test_group_layout_members_in_index_order():
    members, own, size = group_layout(torch.tensor([5, 3, 5, 3, 3, 9]))
    assert members.tolist() == [[0, 2, -1], [1, 3, 4], [0, 2, -1], [1, 3, 4], [1, 3, 4],
                                [5, -1, -1]]
    assert own.tolist() == [0, 0, 1, 1, 2, 0] and size.tolist() == [2, 3, 2, 3, 3, 1]
    assert group_layout(np.array([1, 1]))[0].tolist() == [[0, 1], [0, 1]]


def test_answers_that_follow_their_reasoning_score_log_k_per_sample():
    """Groups of 2 and 3 (and one sample alone, excluded): pmi_s = -log((1 + (K-1) e^NEG) / K)."""
    group = [0, 0, 1, 1, 1, 2]
    m = cmi(follow_matrix(group), torch.tensor(group), num_permutations=0)
    pmi = lambda k: math.log(k) - math.log1p((k - 1) * math.exp(NEG))
    assert m["mi"] == pytest.approx((2 * pmi(2) + 3 * pmi(3)) / 5, abs=1e-12)
    assert m["mi_bound"] == m["log_k"] == pytest.approx((2 * math.log(2) + 3 * math.log(3)) / 5)
    assert m["h_cond"] == 0.0 and m["h_marginal"] == pytest.approx(m["mi"])
    assert m["n_samples"] == 5 and m["n_groups"] == 2 and m["n_excluded"] == 1
    assert m["retrieval_acc@1"] == 1.0
    assert m["retrieval_chance@1"] == pytest.approx((2 / 2 + 3 / 3) / 5)
    assert "mi_null" not in m


def test_a_hand_worked_two_by_two():
    # s0: matched -1, marginal log((e^-1 + e^-3) / 2); s1: both columns -2, pmi 0
    m = cmi(torch.tensor([[-1.0, -3.0], [-2.0, -2.0]]), torch.tensor([7, 7]), num_permutations=0)
    marg0 = math.log((math.exp(-1) + math.exp(-3)) / 2)
    assert m["mi"] == pytest.approx((-1 - marg0) / 2, abs=1e-12)
    assert m["h_cond"] == pytest.approx(1.5)
    assert m["h_marginal"] == pytest.approx(-(marg0 - 2) / 2)
    assert m["retrieval_acc@1"] == pytest.approx((1 + 0.5) / 2)  # s1's row is a tie: 1/2


def test_answers_that_ignore_their_reasoning_score_zero_and_p_value_one():
    group = torch.tensor([0, 0, 0, 1, 1, 1, 1])
    lp = torch.tensor([[-2.0, -2.0, -2.0, 0.0]] * 3 + [[-0.5, -0.5, -0.5, -0.5]] * 4,
                      dtype=torch.float64)  # column 3 of group 0 is padding
    m = cmi(lp, group, num_permutations=30, generator=torch.Generator().manual_seed(1))
    assert m["mi"] == 0.0 and m["mi_null"] == 0.0 and m["mi_null_std"] == 0.0
    assert m["mi_floor"] == 0.0  # every shuffle gives 0: its 95th percentile too
    assert m["p_value"] == 1.0 and m["num_permutations"] == 30
    assert m["h_cond"] == pytest.approx((3 * 2 + 4 * 0.5) / 7)
    assert m["retrieval_acc@1"] == pytest.approx(m["retrieval_chance@1"]) == pytest.approx(
        (3 / 3 + 4 / 4) / 7)


def test_identical_reasonings_tighten_the_bound_and_merge_for_retrieval():
    """One group of 4 whose reasonings are A, A, B, C: an answer following its reasoning exactly
    cannot tell the two A's apart, so it scores log(4/2) for them and log 4 for B and C."""
    keys = ["A", "A", "B", "C"]
    group = [0, 0, 0, 0]
    m = cmi(follow_matrix(group, keys), torch.tensor(group), reasoning_keys=keys, num_permutations=0)
    bound = (2 * math.log(2) + 2 * math.log(4)) / 4
    assert m["mi_bound"] == pytest.approx(bound) and m["log_k"] == pytest.approx(math.log(4))
    assert m["mi"] == pytest.approx(bound, abs=1e-12)
    assert m["retrieval_acc@1"] == 1.0  # the two A's are one candidate, not a tie
    assert m["retrieval_chance@1"] == pytest.approx(1 / 3)
    # without the keys the A rows tie between their two columns
    m = cmi(follow_matrix(group, keys), torch.tensor(group), num_permutations=0, ks=(1, 2))
    assert m["retrieval_acc@1"] == pytest.approx((0.5 + 0.5 + 1 + 1) / 4)
    assert m["retrieval_acc@2"] == 1.0 and m["retrieval_chance@2"] == 0.5


def test_the_permutation_floor_shuffles_within_groups_only():
    """Groups of 2 and 3 (+ padding): a shuffle across groups would claim a padding column
    (-inf); within a group of 2 a permutation is the identity or the swap."""
    group = [0, 0, 1, 1, 1]
    lp = follow_matrix(group)
    m = cmi(lp, torch.tensor(group), num_permutations=4000,
            generator=torch.Generator().manual_seed(0))
    assert math.isfinite(m["mi_null"]) and m["mi_null"] < m["mi"] - 5
    # only the identity on both groups reaches mi: probability 1/2 x 1/6 per draw
    assert (m["p_value"] * 4001 - 1) / 4000 == pytest.approx(1 / 12, abs=0.02)
    # one group of 2: the null is mi (identity) or mi - |NEG| (swap, both samples claim the other)
    m = cmi(lp[:2, :2], torch.tensor([0, 0]), num_permutations=400,
            generator=torch.Generator().manual_seed(3))
    q = (m["p_value"] * 401 - 1) / 400  # share of identity draws
    assert 0.35 < q < 0.65
    assert m["mi_null"] == pytest.approx(m["mi"] + (1 - q) * NEG, abs=1e-9)


def test_reproducible_with_a_generator():
    lp = torch.randn(12, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    group = torch.arange(12) // 4
    a = cmi(lp, group, generator=torch.Generator().manual_seed(5))
    b = cmi(lp, group, generator=torch.Generator().manual_seed(5))
    assert a == b


@pytest.mark.parametrize("logp, group, kwargs, match", [
    (torch.zeros(4), [0, 0, 1, 1], {}, "2-D"),
    (torch.zeros(4, 2, dtype=torch.long), [0, 0, 1, 1], {}, "floating-point"),
    (torch.zeros(3, 2), [0, 0, 1, 1], {}, "3 rows but group names 4"),
    (torch.zeros(3, 2), [0, 0, 0], {}, "largest group has 3"),
    (torch.zeros(2, 2), [[0, 0]], {}, "1-D"),
    (torch.zeros(2, 2), [0.0, 0.0], {}, "integer group ids"),
    (torch.zeros(2, 2), [0, 1], {}, "no group has 2 or more"),
    (torch.tensor([[0.0, math.nan], [0.0, 0.0]]), [0, 0], {}, "NaN at"),
    (torch.tensor([[0.0, math.inf], [0.0, 0.0]]), [0, 0], {}, r"\+inf"),
    (torch.tensor([[-math.inf, 0.0], [0.0, 0.0]]), [0, 0], {}, "own column of sample"),
    (torch.tensor([[0.0, -math.inf], [0.0, 0.0]]), [0, 0], {}, "num_permutations=0"),
    (torch.zeros(2, 2), [0, 0], {"reasoning_keys": ["a"]}, "reasoning_keys has 1"),
    (torch.zeros(2, 2), [0, 0], {"reasoning_keys": [[1], [2]]}, "not hashable"),
    (torch.zeros(2, 2), [0, 0], {"ks": (0,)}, "integer >= 1"),
    (torch.zeros(2, 2), [0, 0], {"ks": ()}, "at least one k"),
    (torch.zeros(2, 2), [0, 0], {"num_permutations": -1}, "num_permutations"),
    (torch.zeros(2, 2), [0, 0], {"num_permutations": True}, "num_permutations"),
])
def test_bad_input_is_refused(logp, group, kwargs, match):
    with pytest.raises(ValueError, match=match):
        cmi(logp, group, **kwargs)


def test_what_is_allowed():
    # NaN in padding, -inf off the own column without a floor, a sample alone (row of NaN)
    lp = torch.tensor([[0.0, -math.inf], [0.0, 0.0], [math.nan, math.nan]])
    m = cmi(lp, [0, 0, 1], num_permutations=0)
    assert m["n_samples"] == 2 and m["n_excluded"] == 1 and math.isfinite(m["mi"])
    # logp wider than the largest group: extra columns ignored
    assert cmi(torch.zeros(2, 5), [0, 0])["mi"] == 0.0


# ------------------------------------------------------------------------------ trajectories
THINK, CLOSE = 60, 61  # "<think>" and the token where "</think>" starts


def traj(group, reasoning, answer, prompt=None, obs_after=None):
    """Prompt ids (default [g, g+1]), then turn 1: ``<think>``, the reasoning, ``</think>`` and
    the answer ids; optionally an observation and a second turn."""
    t = Trajectory(env_seed=group, group_id=group, policy_version=0)
    prompt = [group, group + 1] if prompt is None else prompt
    t.append(prompt, 0)
    t.first_prompt_len = len(prompt)
    a = len(t.input_ids) + 1
    t.append([THINK, *reasoning, CLOSE, *answer], 1, [-0.5] * (len(reasoning) + 2 + len(answer)))
    t.turn_ends.append(len(t.input_ids) - 1)
    t.think_span = (a, a + len(reasoning))
    t.think_spans = [t.think_span]
    if obs_after is not None:  # a later turn: none of it belongs to the first action
        t.append(obs_after, 0)
        t.append([THINK, 99, CLOSE, 98], 1)
        t.turn_ends.append(len(t.input_ids) - 1)
    return t


def test_build_action_inputs_is_token_exact():
    trajs = [traj(0, [100], [200], obs_after=[300, 301]), traj(0, [101, 102], [201]),
             traj(0, [100], [202]),  # the same reasoning as the first: one context
             traj(1, [103], [203]), traj(1, [104], [204]),
             traj(2, [105], [205]),  # alone in its group: nothing to compare
             traj(3, [106], [206]), traj(3, [107], [207])]
    trajs[6].env_error = "boom"  # dropped, which leaves group 3 with one sample
    broken = traj(1, [108], [208])
    broken.think_span = None  # no closed reasoning
    inp = build_action_inputs(trajs + [broken])
    assert inp.contexts == [[0, 1, THINK, 100], [0, 1, THINK, 101, 102], [1, 2, THINK, 103],
                            [1, 2, THINK, 104]]
    # from the token where </think> starts to the end of the first turn, the ids as sampled
    assert inp.continuations == [[CLOSE, 200], [CLOSE, 201], [CLOSE, 202], [CLOSE, 203],
                                 [CLOSE, 204]]
    assert inp.group.tolist() == [0, 0, 0, 1, 1] and inp.context.tolist() == [0, 1, 0, 2, 3]
    assert build_action_inputs(trajs[5:]) is None


def test_samples_share_x_when_their_ids_before_the_reasoning_match():
    """X is the token prefix, not the group id: a group whose prompts differ splits."""
    trajs = [traj(0, [100], [200]), traj(0, [101], [201], prompt=[9, 9]), traj(0, [102], [202])]
    inp = build_action_inputs(trajs)
    assert inp.group.tolist() == [0, 0] and inp.continuations == [[CLOSE, 200], [CLOSE, 202]]


def test_large_groups_are_split_into_even_smaller_ones():
    trajs = [traj(0, [100 + i], [200 + i]) for i in range(9)] + [traj(1, [120], [220]),
                                                                  traj(1, [121], [221])]
    assert build_action_inputs(trajs).group.tolist() == [0] * 9 + [1, 1]
    assert build_action_inputs(trajs, 0).group.tolist() == [0] * 9 + [1, 1]
    split = build_action_inputs(trajs, 8)
    assert split.group.tolist() == [0] * 5 + [1] * 4 + [2, 2]  # 9 -> 5 + 4; 2 stays whole
    assert split.continuations == build_action_inputs(trajs).continuations  # every sample kept
    sizes = np.bincount(build_action_inputs([traj(0, [100 + i], [1]) for i in range(64)], 8).group)
    assert sizes.tolist() == [8] * 8
    for bad in (1, -1, 2.0, True):
        with pytest.raises(ValueError, match="max_group"):
            build_action_inputs(trajs, bad)
    # the monitor's default splits at 8: log 5 and log 4 bounds instead of log 9
    out = MIMonitor(every=1, min_samples=2, permutations=5).measure(
        trajs, _follow_scorer(), step=1).metrics
    assert out["collapse/action/log_k"] == pytest.approx(
        (5 * math.log(5) + 4 * math.log(4) + 2 * math.log(2)) / 11)
    whole = MIMonitor(every=1, min_samples=2, permutations=5, action_max_group=None).measure(
        trajs, _follow_scorer(), step=1).metrics
    assert whole["collapse/action/log_k"] == pytest.approx((9 * math.log(9) + 2 * math.log(2)) / 11)


def _follow_scorer(calls=None):
    """log p(action | context): 0 when the answer id is the reasoning's last id + 100, else -20."""
    def score(contexts, conts, columns):
        if calls is not None:
            calls.append(np.array(columns))
        logp = np.empty(columns.shape)
        for s, row in enumerate(columns):
            for k, j in enumerate(row):
                logp[s, k] = 0.0 if conts[s][-1] == contexts[j][-1] + 100 else -20.0
        return logp, np.full(columns.shape, len(conts[0]))
    return score


def test_score_actions_scores_each_distinct_reasoning_once():
    trajs = [traj(0, [100], [200]), traj(0, [101], [201]), traj(0, [100], [200]),
             traj(1, [102], [202]), traj(1, [103], [203])]
    inp = build_action_inputs(trajs)
    calls = []
    logp = score_actions(inp, _follow_scorer(calls))
    # group 0 has two distinct contexts (0, 1); group 1 two (2, 3)
    assert calls[0].tolist() == [[0, 1], [0, 1], [0, 1], [2, 3], [2, 3]]
    expect = np.array([[0, -20, 0], [-20, 0, -20], [0, -20, 0],
                       [0, -20, np.nan], [-20, 0, np.nan]], dtype=float)
    np.testing.assert_array_equal(logp, expect)
    # a group of 3 with one distinct reasoning next to one with 2: padded with its first context
    trajs = [traj(0, [100], [200])] * 3 + [traj(1, [102], [202]), traj(1, [103], [203])]
    calls = []
    score_actions(build_action_inputs(trajs), _follow_scorer(calls))
    assert calls[0].tolist() == [[0, 0], [0, 0], [0, 0], [1, 2], [1, 2]]


def test_monitor_reports_collapse_action_metrics():
    """4 prompts x 4 samples with 4 distinct reasonings each; the follow policy's answers restate
    their reasoning, the decorating one's answers do not depend on it (a constant scorer)."""
    trajs = [traj(g, [100 + 4 * g + i], [200 + 4 * g + i]) for g in range(4) for i in range(4)]

    def blind(contexts, conts, columns):
        return np.full(columns.shape, -1.0), np.ones(columns.shape)

    dep = MIMonitor(every=1, min_samples=2, permutations=10).measure(
        trajs, _follow_scorer(), step=1).metrics
    dec = MIMonitor(every=1, min_samples=2, permutations=10).measure(trajs, blind, step=1).metrics
    pmi = math.log(4) - math.log1p(3 * math.exp(-20))
    assert dep["collapse/action/mi"] == pytest.approx(pmi)
    assert dep["collapse/action/mi_bound"] == pytest.approx(math.log(4))
    assert dep["collapse/action/mi_null"] < 0 < dep["collapse/action/mi"]
    assert dep["collapse/action/mi_p_value"] == pytest.approx(1 / 11)
    assert dep["collapse/action/retrieval_acc@1"] == 1.0
    assert dep["collapse/action/retrieval_chance@1"] == 0.25
    assert dep["collapse/action/n_samples"] == 16
    assert dep["collapse/action/answer_tokens_mean"] == 2.0
    assert dec["collapse/action/mi"] == 0.0 and dec["collapse/action/mi_p_value"] == 1.0
    assert dec["collapse/action/retrieval_acc@1"] == 0.25
    # the prompt-side metrics are computed as before, untouched by the action scoring
    off = MIMonitor(every=1, min_samples=2, permutations=10, action_mi=False).measure(
        trajs, _follow_scorer(), 1).metrics
    assert not any(k.startswith("collapse/action/") for k in off)
    assert {k: v for k, v in dep.items() if not k.startswith("collapse/action/")} == off
    # one prompt only: no prompt-side MI, but the answers can still be compared
    one = MIMonitor(every=1, min_samples=2, permutations=10).measure(
        trajs[:4], _follow_scorer(), 1).metrics
    assert "collapse/mi" not in one and one["collapse/action/mi"] == pytest.approx(pmi)
