"""The controller's filter step: plain selection, tiered history, prompts, weights, state."""

from __future__ import annotations

import numpy as np
import pytest

from ragen2.filtering.pipeline import FilterPipeline
from ragen2.rollout.trajectory import Trajectory
from ragen2.train import load_config


def traj(group, reward, think="I go left"):
    t = Trajectory(env_seed=100 + group, group_id=group, policy_version=0)
    t.turn_rewards, t.turn_ends, t.first_think = [reward], [0], think
    t.append([1, 2, 3], 1, [-0.5, -0.5, -0.5])
    return t


# group rewards: g0 (1, 0) std 0.5; g1 (1, 1) std 0; g2 (2, 0) std 1; g3 (0, 0.5) std 0.25
BATCH = [traj(0, 1), traj(0, 0), traj(1, 1), traj(1, 1), traj(2, 2), traj(2, 0), traj(3, 0), traj(3, 0.5)]


def pipeline(*overrides):
    return FilterPipeline(load_config(list(overrides)).filter, seed=0)


def test_no_filter_keeps_everything():
    sel = pipeline().select(BATCH, step=1)
    kept, m = sel.kept, sel.metrics
    assert kept == {0, 1, 2, 3} and m["filter/kept_ratio"] == 1.0
    assert m["filter/zero_std_groups"] == 1 and m["rollout/in_group_reward_std"] == pytest.approx(1.75 / 4)
    assert sel.reward_spread == m["rollout/in_group_reward_std"]  # the early stop's input
    empty = pipeline().select([], step=1)
    assert empty.kept == set() and empty.reward_spread is None


def test_top_p_keeps_the_highest_spread_groups():
    # stds sorted: g2 1.0, g0 0.5, g3 0.25, g1 0 (dropped: include_zero false); total 1.75.
    # p = 0.5 -> 0.875: g2 alone (1.0) reaches it. p = 0.9 -> 1.575: g2 + g0 = 1.5 < 1.575, + g3.
    sel = pipeline("filter=top_p", "filter.value=0.5").select(BATCH, step=1)
    kept, m = sel.kept, sel.metrics
    assert kept == {2} and m["filter/kept_ratio"] == 0.25
    kept = pipeline("filter=top_p", "filter.value=0.9").select(BATCH, step=1).kept
    assert kept == {0, 2, 3}


def test_loss_scale_modes():
    assert pipeline("filter=top_p", "filter.loss_scale=linear").loss_scale(0.25) == 0.25
    assert pipeline("filter=top_p", "filter.loss_scale=sqrt").loss_scale(0.25) == 0.5
    assert pipeline("filter=top_p").loss_scale(0.25) == 1.0


def test_plain_modes_leave_tiered_off():
    p = pipeline("filter=top_p")
    assert p.prompts(1, [4]) is None
    assert p.sample_weights(BATCH, None).tolist() == [1.0] * len(BATCH)


def test_tiered_history_weights_prompts_and_resume():
    p = pipeline("filter=tiered", "filter.tiered.pool_size=8", "rollout.env_groups=4")
    keys, temps = p.prompts(1, [4])
    assert len(set(keys)) == 4 and all(0 <= k < 8 for k in keys) and temps == [1.0] * 4
    group_keys = dict(enumerate(keys))
    # groups 0 and 2 reason about their input; 1 and 3 share one template sentence
    batch = [traj(0, 1, "box at 3 4"), traj(0, 0, "box at 3 4"), traj(1, 1, "let me think step by step"),
             traj(1, 1, "let me think step by step"), traj(2, 2, "goal near 1 1"), traj(2, 0, "goal near 1 1"),
             traj(3, 0, "let me think step by step"), traj(3, 0.5, "let me think step by step")]
    m = p.select(batch, step=1, group_keys=group_keys).metrics
    assert {"snr/mean", "snr/std", "snr/frac_high", "snr/frac_low"} <= set(m)
    # SNR = signal / (signal + tau): g2 signal 1, tau 0 -> 1 (high); g1 signal 0, tau 1 -> 0 (low)
    assert p.tiered.grade(keys[2]) == "high" and p.tiered.grade(keys[1]) == "low"
    w = p.sample_weights(batch, group_keys)
    assert w[4] == 1.5 and w[2] == 0.5
    # template-like prompts (tau = 1 >= 0.8) are sampled hotter next time
    assert p.tiered.temperature_multipliers([keys[1]]).tolist() == [1.3]
    state = p.state_dict()
    q = pipeline("filter=tiered", "filter.tiered.pool_size=8", "rollout.env_groups=4")
    q.load_state_dict(state)
    assert q.prompts(2, [4]) == p.prompts(2, [4])


def test_tiered_pool_keys_stay_with_one_env_of_a_mix():
    """env.mix with shares 3:1 and a pool of 8: keys 0-5 are env 0's prompts, 6-7 env 1's, at
    every step (positions 0-2 of a step are env 0's groups, position 3 env 1's). Before, the
    step's keys came back sorted and were dealt to the env slots by position, so a key's σ/τ
    history mixed both envs."""
    from ragen2.filtering.pipeline import pool_blocks

    cfg = load_config(["filter=tiered", "filter.tiered.pool_size=8", "rollout.env_groups=4"]).filter
    p = FilterPipeline(cfg, seed=0, shares=[3.0, 1.0])
    assert [b.tolist() for b in pool_blocks(8, [3.0, 1.0])] == [[0, 1, 2, 3, 4, 5], [6, 7]]
    seen_env1 = set()
    for step in range(1, 30):
        keys, _ = p.prompts(step, [3, 1])
        assert len(keys) == 4 and all(k < 6 for k in keys[:3]) and keys[3] in (6, 7), keys
        seen_env1.add(keys[3])
    assert seen_env1 == {6, 7}
    with pytest.raises(ValueError, match="2 training envs"):
        p.prompts(1, [4])



def test_a_tiered_pool_too_small_for_an_env_of_the_mix_is_refused():
    """Largest-remainder splits are not monotone (the Alabama paradox): a pool of 4 split 1:3:3
    gives env 0 no prompt at all, while 3 groups split 1:3:3 give it one."""
    from ragen2.config import ConfigError

    mix = ["env=mixed", "env.mix.sokoban.share=1", "env.mix.frozenlake.share=3",
           "env.mix.math.share=3", "filter=tiered", "rollout.env_groups=3"]
    with pytest.raises(ConfigError, match=r"block per env.mix entry \(\[0, 2, 2\]"):
        load_config([*mix, "filter.tiered.pool_size=4"])
    assert load_config([*mix, "filter.tiered.pool_size=7"]).filter.tiered.pool_size == 7
