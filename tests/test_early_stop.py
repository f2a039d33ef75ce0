"""Early stops (ragen2.early_stop), hand-worked sequences; each is off by default."""

from __future__ import annotations

from ragen2.early_stop import EarlyStop
from ragen2.train import load_config


def test_off_by_default():
    cfg = load_config([]).trainer.early_stop
    stop = EarlyStop(**vars(cfg))
    assert all(stop.step(0.0) is None for _ in range(50))
    assert all(stop.evaluation(0.0) is None for _ in range(50))


def test_reward_spread_below_a_fraction_of_its_start_for_k_steps():
    stop = EarlyStop(spread_frac=0.25, spread_patience=3)
    # first step sets the reference 0.4 (bar 0.1); a recovery resets the count
    seq = [0.4, 0.09, 0.05, 0.2, 0.08, 0.099]
    assert [stop.step(x) for x in seq] == [None] * 6
    reason = stop.step(0.0)  # the third low step in a row
    assert reason and "below 0.25 x its first-step value 0.4" in reason and "3 steps" in reason


def test_held_out_success_below_a_floor_for_k_evaluations():
    stop = EarlyStop(eval_floor=0.1, eval_patience=2)
    assert stop.evaluation(0.05) is None
    assert stop.evaluation(0.2) is None  # reset
    assert stop.evaluation(0.0) is None
    assert "below 0.1 for 2 evaluations" in stop.evaluation(0.09)


def test_state_round_trip_continues_the_count():
    a = EarlyStop(spread_frac=0.5, spread_patience=3)
    for x in (1.0, 0.1, 0.1):
        a.step(x)
    b = EarlyStop(spread_frac=0.5, spread_patience=3)
    b.load_state_dict(a.state_dict())
    assert b.step(0.1) is not None and a.step(0.1) is not None

