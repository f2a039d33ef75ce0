import json
import math

import numpy as np
import pytest

from ragen2.filtering import TieredSNR, prompt_rng, template_score

EPS = 1e-6


# ------------------------------------------------------------------ template score
def test_identical_template_across_groups_is_one():
    t = "Let me think step by step about the problem."
    assert template_score({0: [t, t], 1: [t], 2: [t.upper()]}) == {0: 1.0, 1: 1.0, 2: 1.0}


def test_disjoint_reasoning_is_zero():
    out = template_score({0: ["the box is left of the goal"], 1: ["push right twice then down"]})
    assert out == {0: 0.0, 1: 0.0}


def test_partial_overlap_by_hand():
    # A 3-grams: {i move left, move left to, left to reach, to reach the, reach the goal}  (5)
    # B 3-grams: {i move left, move left to, left to push, to push the, push the box}     (5)
    # shared across groups: {i move left, move left to} -> 2/5 each. Case and punctuation ignored.
    # C "left" has < 3 words -> unigram {left}, found among A's and B's words -> 1.0
    out = template_score({"A": "I move LEFT, to reach the goal.", "B": ["i move left to push the box"],
                          "C": ["left"]})
    assert out == pytest.approx({"A": 0.4, "B": 0.4, "C": 1.0})


def test_template_mean_over_texts_empty_and_single_group():
    # X text 1: 3-grams {a b c, b c d}; "a b c" is in Y -> 1/2. X text 2 empty -> 1.0. Mean 0.75.
    # Y: {a b c} occurs in X -> 1.0
    assert template_score({"X": ["a b c d", ""], "Y": ["a b c"]}) == {"X": 0.75, "Y": 1.0}
    assert template_score({0: [None], 1: []}) == {0: 1.0, 1: 1.0}
    assert template_score({0: ["only one group here"]}) == {0: 0.0}  # nothing else to share with
    # the same text twice inside ONE group is not cross-prompt duplication
    assert template_score({0: ["go up now", "go up now"], 1: ["push box"]}) == {0: 0.0, 1: 0.0}


# ------------------------------------------------------------------ SNR by hand
def two_steps() -> TieredSNR:
    """Step 1: prompt 3 (sigma .5, tau .2), 5 (0, .9), 6 (.25, .25); step 2: 3 (.25, .6), 6 (1, 0)."""
    t = TieredSNR(pool_size=8, ema=0.7, low_threshold=0.5, high_threshold=0.7)
    t.update(1, [3, 5, 6], [0.5, 0.0, 0.25], [0.2, 0.9, 0.25])
    return t


def test_snr_first_step_by_hand():
    t = two_steps()
    # S = 0.5. signal: 3 -> 1, 5 -> 0, 6 -> 0.5
    assert t.snr(3) == pytest.approx(1 / (1 + 0.2 + EPS), rel=1e-12)     # 0.83333 -> high
    assert t.snr(5) == 0.0                                                # no signal -> low
    assert t.snr(6) == pytest.approx(0.5 / (0.5 + 0.25 + EPS), rel=1e-12)  # 0.66667 -> medium
    assert [t.grade(k) for k in (3, 5, 6, 0)] == ["high", "low", "medium", "medium"]
    assert t.snr(0) is None  # unseen
    m = t.metrics()
    assert m["snr/mean"] == pytest.approx((0.833333 + 0 + 0.666666) / 3, abs=1e-5)
    assert m["snr/frac_high"] == m["snr/frac_low"] == m["snr/frac_medium"] == pytest.approx(1 / 3)
    assert m["snr/signal_mean"] == pytest.approx((1 + 0 + 0.5) / 3)
    assert m["snr/noise_mean"] == pytest.approx((0.2 + 0.9 + 0.25) / 3)
    assert m["snr/signal_scale"] == 0.5 and m["snr/seen_prompts"] == 3.0
    assert (m["snr/threshold_low"], m["snr/threshold_high"]) == (0.5, 0.7)


def test_snr_second_step_ema_and_rescaled_signal():
    t = two_steps()
    t.update(2, [3, 6], [0.25, 1.0], [0.6, 0.0])
    # S rises to 1.0, so prompt 3's signal halves although its own data barely changed:
    # sigma_3 = .7*.5 + .3*.25 = .425, tau_3 = .7*.2 + .3*.6 = .32 -> .425 / (.425 + .32) = 0.57047
    assert t.snr(3) == pytest.approx(0.425 / (0.425 + 0.32 + EPS), rel=1e-12)
    assert t.snr(3) == pytest.approx(0.570469, abs=1e-6)
    # sigma_6 = .7*.25 + .3*1 = .475, tau_6 = .7*.25 + 0 = .175 -> .475 / .65 = 0.73077
    assert t.snr(6) == pytest.approx(0.475 / (0.475 + 0.175 + EPS), rel=1e-12)
    assert t.snr(6) == pytest.approx(0.730768, abs=1e-6)
    assert t.snr(5) == 0.0
    assert [t.grade(k) for k in (3, 5, 6)] == ["medium", "low", "high"]


def test_threshold_reestimation():
    # S = 1 (prompt 0). SNRs (sigma, tau): (1, 0) ~1.0, (1, 1) ~0.5, (.5, .5) ~0.5, (0, .5) 0,
    # (.25, .75) 0.25, (.75, .25) 0.75. Sorted ~[0, .25, .5, .5, .75, 1].
    # numpy linear quantiles: q(1/3) at position 5/3 -> .25 + (2/3)*.25 = 0.41667;
    #                          q(2/3) at position 10/3 -> .5 + (1/3)*.25 = 0.58333.
    sig, tau = [1, 1, 0.5, 0, 0.25, 0.75], [0, 1, 0.5, 0.5, 0.75, 0.25]
    t = TieredSNR(pool_size=10, reestimate_every=2)
    t.update(1, range(6), sig, tau)
    assert t.grade(1) == "low"  # 1 / (2 + 1e-6) = 0.4999998 < 0.5
    assert (t.low_threshold, t.high_threshold) == (0.5, 0.7)  # 1 update: not yet
    t.update(2, range(6), sig, tau)  # same values: the EMAs do not move
    assert t.low_threshold == pytest.approx(0.41667, abs=1e-5)
    assert t.high_threshold == pytest.approx(0.58333, abs=1e-5)
    assert [t.grade(k) for k in range(6)] == ["high", "medium", "medium", "low", "low", "high"]
    assert t.metrics()["snr/threshold_low"] == t.low_threshold


def test_reestimation_needs_six_prompts_and_clips():
    t = TieredSNR(pool_size=10, reestimate_every=1)
    t.update(1, range(5), [1, 0, 0, 0, 0], [0, 0, 0, 0, 0])
    assert (t.low_threshold, t.high_threshold) == (0.5, 0.7)  # 5 prompts: unchanged
    t.update(2, [5], [0.0], [1.0])  # 6th prompt; SNRs [~1, 0, 0, 0, 0, 0] -> quantiles 0, 0
    assert (t.low_threshold, t.high_threshold) == (0.05, 0.05)  # clipped to [0.05, 0.95]


# ------------------------------------------------------------------ sampling
def graded_pool() -> TieredSNR:
    t = TieredSNR(pool_size=3)
    t.update(0, [0, 1], [1.0, 0.0], [0.0, 1.0])  # 0: SNR ~1 high; 1: 0 low; 2: unseen medium
    assert [t.grade(k) for k in range(3)] == ["high", "low", "medium"]
    return t


def test_sampling_is_deterministic_and_distinct():
    t = TieredSNR(pool_size=50)
    a = t.sample_prompts(10, prompt_rng(seed=1, step=4))
    assert a == t.sample_prompts(10, prompt_rng(seed=1, step=4))
    assert a != t.sample_prompts(10, prompt_rng(seed=1, step=5))
    assert a != t.sample_prompts(10, prompt_rng(seed=2, step=4))
    assert len(set(a)) == 10 and a == sorted(a) and all(0 <= k < 50 for k in a)
    assert t.sample_prompts(50, prompt_rng(0, 0)) == list(range(50))
    assert t.sample_prompts(0, prompt_rng(0, 0)) == []


def test_sampling_ratio_high_to_low_is_seven():
    # single draws: P(high) : P(medium) : P(low) = 7 : sqrt 7 : 1 (sum 10.646)
    # expected counts out of 20000: 13151, 4970, 1879; std of the high/low ratio ~0.17
    t = graded_pool()
    rng = np.random.default_rng(1234)
    counts = np.zeros(3)
    for _ in range(20000):
        counts[t.sample_prompts(1, rng)[0]] += 1
    assert counts[0] / counts[1] == pytest.approx(7.0, abs=0.6)
    assert counts[2] / counts[1] == pytest.approx(math.sqrt(7), abs=0.25)


def test_priority_ratio_one_is_uniform():
    t = TieredSNR(pool_size=3, priority_ratio=1.0)
    t.update(0, [0, 1], [1.0, 0.0], [0.0, 1.0])
    rng = np.random.default_rng(0)
    counts = np.bincount([t.sample_prompts(1, rng)[0] for _ in range(6000)], minlength=3)
    assert np.all(np.abs(counts - 2000) < 150)  # std ~37


# ------------------------------------------------------------------ weights and perturbation
def test_loss_weights_by_grade():
    t = two_steps()  # grades: 3 high, 5 low, 6 medium, 0 unseen (medium)
    assert t.loss_weights([3, 5, 6, 0, 3]).tolist() == [1.5, 0.5, 1.0, 1.0, 1.5]
    t2 = TieredSNR(8, low_weight=0.25, high_weight=2.0)
    t2.update(1, [3, 5, 6], [0.5, 0.0, 0.25], [0.2, 0.9, 0.25])
    assert t2.loss_weights([3, 5, 6]).tolist() == [2.0, 0.25, 1.0]
    assert t.loss_weights([]).shape == (0,)


def test_temperature_multipliers():
    t = two_steps()  # tau: 3 -> .2, 5 -> .9 (>= .8: perturbed), 6 -> .25, 0 unseen
    assert t.temperature_multipliers([3, 5, 6, 0]).tolist() == [1.0, 1.3, 1.0, 1.0]
    t.update(2, [5], [0.0], [0.0])  # tau_5 = .7*.9 = .63 < .8: back to normal
    assert t.temperature_multipliers([5]).tolist() == [1.0]
    t3 = TieredSNR(4, perturb_threshold=0.5, perturb_temperature=1.5)
    t3.update(0, [0, 1], [0.0, 0.0], [0.5, 0.49])  # exactly at the threshold counts
    assert t3.temperature_multipliers([0, 1]).tolist() == [1.5, 1.0]


# ------------------------------------------------------------------ diversity warning
def test_diversity_warning():
    t = TieredSNR(pool_size=10)
    t.update(1, range(3), [1, 1, 1], [0, 0, 0])
    assert t.diversity_warning() is None  # only 3 prompts seen
    t.update(2, [3], [1.0], [0.0])
    msg = t.diversity_warning()  # 4 prompts, all SNR ~1: std 0
    assert msg is not None and "SNR std across 4 prompts is 0.000 < 0.3" in msg
    d = TieredSNR(pool_size=10)
    d.update(1, range(4), [1, 0, 1, 0], [0, 1, 0, 1])  # SNRs ~[1, 0, 1, 0]: std 0.5
    assert d.diversity_warning() is None
    assert d.metrics()["snr/std"] == pytest.approx(0.5, abs=1e-5)


# ------------------------------------------------------------------ checkpointing
def run_steps(t: TieredSNR, steps: range) -> list:
    out = []
    for s in steps:
        rng = np.random.default_rng(s)
        keys = t.sample_prompts(4, prompt_rng(7, s))
        t.update(s, keys, rng.uniform(0, 1, 4), rng.uniform(0, 1, 4))
        out.append((keys, t.metrics(), t.loss_weights(range(12)).tolist(),
                    t.temperature_multipliers(range(12)).tolist()))
    return out


def test_state_dict_round_trip_continues_exactly():
    kw = {"pool_size": 12, "reestimate_every": 3}
    full = TieredSNR(**kw)
    run_steps(full, range(5))
    state = json.loads(json.dumps(full.state_dict()))
    resumed = TieredSNR(**kw)
    resumed.load_state_dict(state)
    assert resumed.state_dict() == full.state_dict()
    assert run_steps(resumed, range(5, 12)) == run_steps(full, range(5, 12))


def test_load_state_dict_rejects_other_pool():
    state = TieredSNR(pool_size=12).state_dict()
    with pytest.raises(ValueError, match="pool_size=12 but this instance has pool_size=5"):
        TieredSNR(pool_size=5).load_state_dict(state)


# ------------------------------------------------------------------ invalid arguments
@pytest.mark.parametrize("kw, msg", [
    ({"pool_size": 0}, r"pool_size=0 is invalid; allowed: an integer >= 1"),
    ({"pool_size": 2.5}, r"pool_size=2.5 is invalid"),
    ({"ema": 1.0}, r"ema=1.0 is invalid; allowed: a number in \[0, 1\)"),
    ({"low_threshold": 0.0}, r"low_threshold=0.0 is invalid; allowed: a number in \(0, 1\)"),
    ({"high_threshold": 1.0}, r"high_threshold=1.0 is invalid"),
    ({"low_threshold": 0.8, "high_threshold": 0.6},
     r"low_threshold=0.8 is invalid; allowed: <= high_threshold \(0.6\)"),
    ({"reestimate_every": 0}, r"reestimate_every=0 is invalid; allowed: an integer >= 1"),
    ({"priority_ratio": 0.5}, r"priority_ratio=0.5 is invalid; allowed: a number >= 1"),
    ({"low_weight": 1.5}, r"low_weight=1.5 is invalid; allowed: a number in \(0, 1\]"),
    ({"high_weight": 2.5}, r"high_weight=2.5 is invalid; allowed: a number in \[1, 2\]"),
    ({"high_weight": 0.9}, r"high_weight=0.9 is invalid"),
    ({"perturb_threshold": 0.0}, r"perturb_threshold=0.0 is invalid; allowed: a number in \(0, 1\]"),
    ({"perturb_temperature": 0.9}, r"perturb_temperature=0.9 is invalid; allowed: a number >= 1"),
    ({"ema": float("nan")}, r"ema=nan is invalid"),
])
def test_invalid_constructor_args(kw, msg):
    with pytest.raises(ValueError, match=msg):
        TieredSNR(**{"pool_size": 4, **kw})


def test_invalid_update_and_sampling_args():
    t = two_steps()  # last step 1
    with pytest.raises(ValueError, match=r"step=1 is invalid; allowed: an integer > the last updated step \(1\)"):
        t.update(1, [0], [0.1], [0.1])
    with pytest.raises(ValueError, match=r"prompt group keys must be integers in \[0, 8\)"):
        t.update(2, [8], [0.1], [0.1])
    with pytest.raises(ValueError, match="group keys repeat within step 2"):
        t.update(2, [1, 1], [0.1, 0.1], [0.1, 0.1])
    with pytest.raises(ValueError, match="got 2 keys, 1 stds, 2 template scores"):
        t.update(2, [1, 2], [0.1], [0.1, 0.1])
    with pytest.raises(ValueError, match="reward_stds must be finite and >= 0"):
        t.update(2, [1], [-0.1], [0.1])
    with pytest.raises(ValueError, match=r"template_scores must lie in \[0, 1\]"):
        t.update(2, [1], [0.1], [1.1])
    with pytest.raises(ValueError, match=r"n=9 is invalid; allowed: an integer in \[0, 8\]"):
        t.sample_prompts(9, prompt_rng(0, 0))
    with pytest.raises(ValueError, match="rng must be a numpy.random.Generator"):
        t.sample_prompts(2, np.random.RandomState(0))
    with pytest.raises(ValueError, match=r"prompt keys must be integers in \[0, 8\)"):
        t.grade(-1)
    assert t.last_step == 1  # failed updates changed nothing
    assert t.snr(3) == pytest.approx(1 / (1.2 + EPS))
