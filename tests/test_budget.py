"""Settings that cannot act within the run's budget: the start-up warnings, the tiered defaults
that grade within the default job, and the per-step grade shares."""

from __future__ import annotations

import logging

import pytest

from ragen2.budget import alert_can_fire, budget_warnings, warn_budget
from ragen2.filtering import TieredSNR
from ragen2.train import load_config


def test_the_default_job_and_the_tiered_preset_warn_about_nothing():
    assert budget_warnings(load_config([])) == []
    tiered = load_config(["filter=tiered"])
    assert tiered.filter.tiered.enabled and tiered.filter.tiered.reestimate_every == 5
    assert budget_warnings(tiered) == []


@pytest.mark.parametrize("overrides, key, budget", [
    (["filter=tiered", "filter.tiered.reestimate_every=100"], "filter.tiered.reestimate_every=100",
     "the 40 updates"),
    (["filter=tiered", "filter.tiered.reestimate_every=40"], "filter.tiered.reestimate_every=40",
     "trainer.total_steps=40"),
    (["monitor.every=50", "monitor.panel_size=0"], "monitor.every=50", "trainer.total_steps=40"),
    (["trainer.eval_every=60"], "trainer.eval_every=60", "trainer.total_steps=40"),
    (["monitor.alert_patience=10"], "monitor.alert_patience=10", "9 probe panel measurements"),
    (["trainer.save_every=41"], "trainer.save_every=41", "trainer.total_steps=40"),
    (["trainer.save_rollouts_every=50"], "trainer.save_rollouts_every=50", "total_steps=40"),
    (["monitor.grad_snr_every=45"], "monitor.grad_snr_every=45", "total_steps=40"),
    (["algorithm.lr_warmup_steps=80"], "algorithm.lr_warmup_steps=80", "total_steps=40"),
    (["trainer.early_stop.spread_frac=0.5", "trainer.early_stop.spread_patience=40"],
     "trainer.early_stop.spread_patience=40", "40 RL steps"),
    (["trainer.early_stop.eval_floor=0.1", "trainer.early_stop.eval_patience=3"],
     "trainer.early_stop.eval_patience=3", "the 2 held-out evaluations"),
])
def test_each_setting_that_cannot_act_is_named_with_the_budget(overrides, key, budget):
    warnings = budget_warnings(load_config(overrides))
    # a cadence past the run also starves the collapse alert: that is its own warning
    assert all(w.startswith("monitor.alert_patience=3") for w in warnings[1:]), warnings
    assert warnings[0].startswith(key) and budget in warnings[0] and "set" in warnings[0]


def test_a_short_run_collects_every_warning_and_logs_them(caplog):
    cfg = load_config(["filter=tiered", "trainer.total_steps=4", "monitor.every=5",
                       "trainer.eval_every=5", "trainer.save_every=5"])
    with caplog.at_level(logging.WARNING, logger="ragen2"):
        got = warn_budget(cfg)
    keys = [w.split("=")[0] for w in got]
    assert keys == ["filter.tiered.reestimate_every", "monitor.every", "trainer.eval_every",
                    "monitor.alert_patience", "trainer.save_every"]
    assert "set filter.tiered.reestimate_every to at most 1" in got[0]
    assert [r.name for r in caplog.records] == ["ragen2"] * 5
    assert all(r.levelno == logging.WARNING for r in caplog.records)


def test_alert_can_fire_by_hand():
    # the default job: panel 0, 5, ..., 40; evaluations 0, 20, 40: window (10, 15, 20) has 20
    panel = list(range(0, 41, 5))
    assert alert_can_fire(panel, [0, 20, 40], 3)
    assert not alert_can_fire(panel, [0], 3)  # no periodic evaluation at all
    assert not alert_can_fire(panel, [0, 20, 40], 10)  # 9 measurements only
    assert alert_can_fire([0, 5], [0, 5], 2) and not alert_can_fire([0, 5], [0], 2)
    assert alert_can_fire([0, 10, 20], [0, 5], 2)  # 5 lies in (0, 10]
    # patience 1: the window's first measurement is its last, no evaluation can follow it
    assert not alert_can_fire(panel, [0, 20, 40], 1)
    # monitor.every past the run: one panel measurement (step 0), never 3 in a row
    assert budget_warnings(load_config(["monitor.every=50"]))[1].startswith("monitor.alert_patience=3")
    assert "set monitor.alert_patience to at most 9" in \
        budget_warnings(load_config(["monitor.alert_patience=10"]))[0]


def test_batch_grade_shares_by_hand():
    """Prompts 3 (SNR .833, high), 5 (0, low), 6 (.667, medium): a batch of 3, 5, 5, 6."""
    t = TieredSNR(pool_size=8, ema=0.7, low_threshold=0.5, high_threshold=0.7)
    t.update(1, [3, 5, 6], [0.5, 0.0, 0.25], [0.2, 0.9, 0.25])
    assert t.batch_grade_shares([3, 5, 5, 6]) == {"snr/batch_frac_low": 0.5,
                                                  "snr/batch_frac_medium": 0.25,
                                                  "snr/batch_frac_high": 0.25}
    assert t.batch_grade_shares([0, 1]) == {"snr/batch_frac_low": 0.0,  # unseen: medium
                                            "snr/batch_frac_medium": 1.0,
                                            "snr/batch_frac_high": 0.0}


def test_tiered_defaults_reestimate_several_times_in_the_default_job():
    """40 steps of 16 prompts from the 64-pool: the thresholds move 8 times."""
    import numpy as np

    from ragen2.filtering import prompt_rng

    cfg = load_config(["filter=tiered"]).filter.tiered
    t = TieredSNR(cfg.pool_size, ema=cfg.ema, reestimate_every=cfg.reestimate_every)
    rng = np.random.default_rng(0)
    moves = 0
    for step in range(1, 41):
        keys = t.sample_prompts(16, prompt_rng(0, step))
        before = (t.low_threshold, t.high_threshold)
        t.update(step, keys, rng.uniform(0, 0.5, 16).tolist(), rng.uniform(0.6, 1.0, 16).tolist())
        moves += (t.low_threshold, t.high_threshold) != before
    assert moves == 8
    assert 0.2 < t.metrics()["snr/frac_low"] < 0.5  # graded, not all low
