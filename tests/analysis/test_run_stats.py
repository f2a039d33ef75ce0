"""Statistics over runs (ragen2.analysis.run_stats): bootstrap intervals by hand and against an
explicit reference loop."""

from __future__ import annotations

import numpy as np
import pytest

from ragen2.analysis.run_stats import (arm_difference, bootstrap_interval, paired_difference,
                                      summarise_over_runs, verdict)


def _reference(values, statistic, resamples, level, seed):
    """The percentile bootstrap written out: one resample at a time, the same generator draws."""
    rng = np.random.default_rng(seed)
    x = np.asarray(values, dtype=float)
    idx = rng.integers(0, len(x), size=(resamples, len(x)))
    stats = sorted(float(getattr(np, statistic)(x[row])) for row in idx)
    # numpy's linear quantile at q: position q * (B - 1) between the sorted draws
    def q(p):
        pos = p * (resamples - 1)
        lo = int(np.floor(pos))
        return stats[lo] + (pos - lo) * (stats[min(lo + 1, resamples - 1)] - stats[lo])
    return q((1 - level) / 2), q((1 + level) / 2)


def test_bootstrap_interval_matches_the_reference_loop():
    values = [0.8, -0.5, -1.0, 0.3, 0.1]
    for statistic in ("median", "mean"):
        got = bootstrap_interval(values, statistic, resamples=500, level=0.9, seed=3)
        assert got == pytest.approx(_reference(values, statistic, 500, 0.9, 3), abs=1e-12)


def test_bootstrap_interval_by_hand():
    # all runs agree: every resample has the same median
    assert bootstrap_interval([0.4, 0.4, 0.4]) == (0.4, 0.4)
    # two runs 0 and 1: resample medians 0, 0.5, 1 with probability 1/4, 1/2, 1/4, so over 4000
    # draws the 2.5% and 97.5% quantiles are the extremes
    assert bootstrap_interval([0.0, 1.0], resamples=4000) == (0.0, 1.0)
    # below 2 runs there is no interval; None and nan are undefined per-run values, dropped
    assert bootstrap_interval([0.3]) == (None, None)
    assert bootstrap_interval([0.3, None, float("nan")]) == (None, None)


def test_summarise_over_runs_by_hand():
    s = summarise_over_runs([0.8, -0.5, None, -1.0], resamples=300, seed=1)
    assert s["median"] == pytest.approx(-0.5) and s["mean"] == pytest.approx(-0.7 / 3)
    assert (s["runs"], s["runs_total"]) == (3, 4)
    assert (s["lo"], s["hi"]) == pytest.approx(_reference([0.8, -0.5, -1.0], "median", 300, 0.95, 1))
    assert summarise_over_runs([None, None]) == {"median": None, "mean": None, "lo": None,
                                                 "hi": None, "runs": 0, "runs_total": 2}


def test_arm_difference_by_hand_and_against_the_reference():
    a, b = [0.5, 0.7, 0.6], [0.2, 0.4]
    d = arm_difference(a, b, resamples=1000, seed=5)
    assert d["diff"] == pytest.approx(0.6 - 0.3) and (d["a"], d["b"]) == pytest.approx((0.6, 0.3))
    # reference: the same generator draws a's resamples, then b's
    rng = np.random.default_rng(5)
    ia = rng.integers(0, 3, size=(1000, 3))
    ib = rng.integers(0, 2, size=(1000, 2))
    diffs = np.asarray(a)[ia].mean(axis=1) - np.asarray(b)[ib].mean(axis=1)
    assert (d["lo"], d["hi"]) == pytest.approx(tuple(np.quantile(diffs, [0.025, 0.975])))
    # a resample's difference lies between min(a) - max(b) and max(a) - min(b)
    assert 0.1 - 1e-12 <= d["lo"] <= d["diff"] <= d["hi"] <= 0.5 + 1e-12
    med = arm_difference([1.0, 2.0, 9.0], [0.0, 0.0], statistic="median")
    assert med["diff"] == 2.0 and med["statistic"] == "median"
    one = arm_difference([1.0], [0.0, 1.0])
    assert one["diff"] == pytest.approx(0.5) and one["lo"] is None and one["hi"] is None
    assert arm_difference([], [1.0])["diff"] is None


@pytest.mark.parametrize("kwargs, match", [({"statistic": "mode"}, "statistic 'mode' is invalid"),
                                           ({"resamples": 1}, "resamples"),
                                           ({"level": 1.0}, "level")])
def test_bad_settings_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        bootstrap_interval([1.0, 2.0], **kwargs)
    with pytest.raises(ValueError, match="values must be numbers"):
        bootstrap_interval([1.0, "x"])


def test_paired_difference_by_hand_and_against_the_reference():
    # seed 2 only in b, seed 3's a is None: dropped; d = [1 - 2, 3 - 2.5, 0.2 - 0.7]
    a = {0: 1.0, 1: 3.0, 3: None, 4: 0.2}
    b = {0: 2.0, 1: 2.5, 2: 9.0, 3: 1.0, 4: 0.7}
    d = paired_difference(a, b, resamples=800, seed=2)
    assert d["per_seed"] == pytest.approx({0: -1.0, 1: 0.5, 4: -0.5})
    assert d["diff"] == pytest.approx(-1.0 / 3) and d["n"] == 3
    assert (d["n_below"], d["n_above"]) == (2, 1)
    assert (d["lo"], d["hi"]) == pytest.approx(_reference([-1.0, 0.5, -0.5], "mean", 800, 0.95, 2))
    # three seeds all below 0: every resample mean is below 0, so the interval is too
    assert paired_difference({0: 0.1, 1: 0.2, 2: 0.3}, {0: 0.5, 1: 0.5, 2: 0.5})["hi"] < 0
    one = paired_difference({0: 1.0}, {0: 0.0, 1: 5.0})
    assert one["diff"] == 1.0 and one["lo"] is None
    assert paired_difference({0: 1.0}, {1: 1.0})["diff"] is None


@pytest.mark.parametrize("lo, hi, direction, expected", [
    (-0.3, -0.1, "negative", "supported"), (-0.3, -0.1, "positive", "contradicted"),
    (0.1, 0.3, "positive", "supported"), (0.1, 0.3, "negative", "contradicted"),
    (-0.1, 0.2, "negative", "not shown"), (0.0, 0.2, "positive", "not shown"),
    (None, None, "positive", "no data")])
def test_verdict_reads_the_interval(lo, hi, direction, expected):
    assert verdict(lo, hi, direction) == expected


def test_verdict_refuses_an_unknown_direction():
    with pytest.raises(ValueError, match="direction must be"):
        verdict(0.1, 0.2, "up")
