"""The minimum sample of every MI and retrieval value (``monitor.min_samples``,
:mod:`ragen2.collapse.withhold`): below it a measurement logs its counts and no value, exactly at
it the value is there, and every reader of a missing value copes (alert, diagnosis, EMA,
analysis)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from ragen2.collapse.alert import CollapseAlert
from ragen2.collapse.diagnosis import diagnose
from ragen2.collapse.instrument import diagnosis_inputs
from ragen2.collapse.monitor import MIMonitor
from ragen2.collapse.panel import PanelPrompt, ProbePanel
from ragen2.collapse.panel_turns import TurnPanel, TurnPanelPrompt
from ragen2.collapse.withhold import (MIN_SAMPLES, count_key, is_value, scope_of, withhold,
                                      withheld_scopes)
from ragen2.config import ConfigError, MonitorConfig
from tests.collapse.test_monitor import _policy_scorer, traj, two_turn

#: 4 prompts x 4 samples; under its own prompt a sample scores -1, under another -6
DEPENDENT_MI = -1 - (math.log(math.exp(-1) + 3 * math.exp(-6)) - math.log(4))


def _batch(groups=4, per=4):
    return [traj(g, f"r{g}", f"obs{g}") for g in range(groups) for _ in range(per)]


def _scorer(calls):
    def score(contexts, conts, columns):
        calls.append(columns.shape)
        owner = np.repeat(np.arange(len(contexts)), len(conts) // len(contexts))
        return np.where(columns == owner[:, None], -1.0, -6.0), np.full(columns.shape, 2)
    return score


def _values(metrics, prefix):
    return sorted(k for k in metrics if scope_of(k) == prefix)


def test_the_default_is_16_and_the_key_is_checked():
    assert MIN_SAMPLES == MonitorConfig().min_samples == 16
    with pytest.raises(ConfigError) as e:
        MonitorConfig(min_samples=1).validate("monitor")
    assert e.value.key == "monitor.min_samples" and ">= 2" in str(e.value)
    for bad in (1, 0, 2.5, True):
        with pytest.raises(ValueError, match="min_samples"):
            MIMonitor(every=1, min_samples=bad)


def test_the_batch_monitor_withholds_below_the_minimum_and_logs_the_count():
    calls = []
    mon = MIMonitor(every=1, permutations=5, turn_negatives=None, action_mi=False, min_samples=17)
    got = mon.measure(_batch(), _scorer(calls), step=1)
    m = got.metrics
    # 16 parsable samples < 17: the counts, no MI, retrieval, h_cond, mi_z, floor or EMA ...
    assert m["collapse/n_samples"] == 16.0 and m["collapse/n_prompts"] == 4.0
    assert _values(m, "collapse/") == [] and "collapse/mi_z_ema" not in m
    assert calls == []  # ... and nothing was scored
    assert mon.mi_z_ema.value is None and mon.mi_z_ema.count == 0  # the EMA skipped it
    # the token entropy (no MI value) is still there: -(-1 - 3) / 2 per token
    assert got.token_entropy == m["collapse/token_entropy"] == pytest.approx(2.0)
    # exactly the minimum: the value, the count beside it
    mon16 = MIMonitor(every=1, permutations=5, turn_negatives=None, action_mi=False, min_samples=16)
    m = mon16.measure(_batch(), _scorer(calls), step=1).metrics
    assert m["collapse/mi"] == pytest.approx(DEPENDENT_MI)
    assert m["collapse/retrieval_acc@1"] == 1.0 and m["collapse/n_samples"] == 16.0
    assert "collapse/mi_floor" in m and "collapse/h_cond" in m
    assert m["collapse/mi_z_ema"] == m["collapse/mi_z"]  # the EMA's first value
    # a withheld measurement later leaves the EMA as it was
    ema = mon16.mi_z_ema.value
    m = mon16.measure(_batch(per=3), _scorer(calls), step=5).metrics
    assert m["collapse/n_samples"] == 12.0 and "collapse/mi_z_ema" not in m
    assert mon16.mi_z_ema.value == ema and mon16.mi_z_ema.count == 1


def test_the_later_turns_obey_the_minimum_too():
    trajs = [two_turn(g, [50], [100 + g]) for g in range(3) for _ in range(2)]  # 6 samples
    below = MIMonitor(every=1, permutations=5, turn_negatives=0, action_mi=False,
                      min_samples=7).measure(trajs, _policy_scorer(True), 1).metrics
    assert below["collapse/turns/n_samples"] == 6.0 and below["collapse/turns/n_prompts"] >= 2
    assert _values(below, "collapse/turns/") == [] and _values(below, "collapse/") == []
    at = MIMonitor(every=1, permutations=5, turn_negatives=0, action_mi=False,
                   min_samples=6).measure(trajs, _policy_scorer(True), 1).metrics
    assert at["collapse/turns/n_samples"] == 6.0 and "collapse/turns/mi" in at
    assert "collapse/turns/retrieval_acc@1" in at and "collapse/mi" in at


def test_the_action_mi_obeys_the_minimum():
    from tests.collapse.test_action_mi import _follow_scorer
    from tests.collapse.test_action_mi import traj as action_traj

    trajs = [action_traj(g, [100 + 4 * g + i], [200 + 4 * g + i])
             for g in range(4) for i in range(4)]
    below = MIMonitor(every=1, permutations=5, min_samples=17).measure(
        trajs, _follow_scorer(), 1).metrics
    assert {k: v for k, v in below.items() if k.startswith("collapse/action/")} == {
        "collapse/action/n_samples": 16.0, "collapse/action/n_groups": 4.0}
    at = MIMonitor(every=1, permutations=5, min_samples=16).measure(
        trajs, _follow_scorer(), 1).metrics
    assert at["collapse/action/mi"] == pytest.approx(math.log(4) - math.log1p(3 * math.exp(-20)))
    assert at["collapse/action/n_samples"] == 16.0


def test_the_first_turn_panel_obeys_the_minimum():
    from tests.collapse.test_panel import _panel_trajs
    from tests.collapse.test_panel import _scorer as panel_scorer

    prompts = [PanelPrompt("env", i, f"obs{i}") for i in range(4)]  # 4 prompts x 2 samples
    below = ProbePanel(prompts, 2, 20, 20, 0, min_samples=9).measure(
        _panel_trajs(), panel_scorer(True), step=5)
    m = below.metrics
    assert m["collapse/panel/n_samples"] == 8.0 and m["collapse/panel/n_prompts"] == 4.0
    assert m["collapse/panel/action/n_samples"] == 8.0
    assert _values(m, "collapse/panel/") == [] and _values(m, "collapse/panel/action/") == []
    assert below.mi_lo is None and below.mi_floor is None and below.healthy is None
    at = ProbePanel(prompts, 2, 20, 20, 0, min_samples=8).measure(
        _panel_trajs(), panel_scorer(True), step=5)
    assert at.metrics["collapse/panel/mi"] == pytest.approx(DEPENDENT_MI)
    assert at.mi_lo is not None and at.healthy is not None
    assert "collapse/panel/action/mi" in at.metrics


def test_the_later_turn_panel_obeys_the_minimum():
    from tests.collapse.test_panel_turns import _traj

    prompts = [TurnPanelPrompt("fl", 10 + i, f"obs {i}", ("x", "y")) for i in range(3)]
    trajs = [_traj(g, [g, 0, 0, 0, 1, 2], [(1, 2), (2, 3), (4, 6)]) for g in (0, 0, 1, 1, 2, 2)]
    calls = []

    def scorer(contexts, conts, columns):
        calls.append(columns.shape)
        return np.where(columns == np.repeat(np.arange(3), 2)[:, None], -1.0, -6.0), columns * 0 + 2

    below = TurnPanel(prompts, 2, 20, 20, 7, min_samples=7).measure(trajs, scorer, step=5)
    assert below.metrics == {"collapse/panel/turns/turn": 2.0,
                             "collapse/panel/turns/reasoning_frac": 1.0,
                             "collapse/panel/turns/n_samples": 6.0,
                             "collapse/panel/turns/n_prompts": 3.0}
    assert below.mi_lo is None and calls == []
    at = TurnPanel(prompts, 2, 20, 20, 7, min_samples=6).measure(trajs, scorer, step=5)
    marginal = math.log(math.exp(-1) + 2 * math.exp(-6)) - math.log(3)
    assert at.metrics["collapse/panel/turns/mi"] == pytest.approx(-1 - marginal)


def test_readers_of_a_withheld_value():
    # the alert: no value counts as "shows no input dependence", with its reason in the evidence
    a = CollapseAlert(patience=2)
    a.observe_eval(0, 0.5)
    assert a.observe_panel(5, None, None) is None
    a.observe_eval(6, 0.2)
    evidence = a.observe_panel(10, None, None)
    assert "step 5: no value (too few samples), step 10: no value (too few samples)" in evidence
    # the diagnosis: template collapse not assessed, never an MI of 0
    withheld = {"collapse/panel/turns/n_samples": 3.0, "collapse/panel/turns/n_prompts": 3.0}
    args = diagnosis_inputs("later_turns", withheld)
    assert args == {"mi": None, "mi_null": None, "log_n": None, "mi_bound": None}
    d = diagnose(**args, token_entropy=1.0, entropy_ref=1.0, train_success=0.5, eval_success=0.5)
    assert d.label == "healthy" and "template collapse not assessed (missing mi" in d.evidence


def test_the_rule_on_logged_rows():
    assert is_value("mi") and is_value("retrieval_acc@4") and is_value("mi_z_ema")
    assert is_value("h_cond_lo") and is_value("mi_floor") and is_value("healthy")
    assert not any(is_value(f) for f in ("n_samples", "n_prompts", "n_groups", "token_entropy",
                                         "reasoning_frac", "turn", "alert", "diagnosis"))
    assert scope_of("collapse/panel/turns/mi") == "collapse/panel/turns/"
    assert scope_of("collapse/panel/action/retrieval_acc@1") == "collapse/panel/action/"
    assert scope_of("collapse/alert") is None and scope_of("rollout/success") is None
    assert count_key("collapse/turns/retrieval_acc@1") == "collapse/turns/n_samples"
    assert count_key("collapse/token_entropy") is None
    row = {"step": 40, "collapse/alert": 0.0, "collapse/diagnosis": 1.0,
           "collapse/mi": 0.3, "collapse/n_samples": 16.0, "collapse/token_entropy": 0.5,
           "collapse/panel/turns/mi": 0.56, "collapse/panel/turns/mi_floor": 0.56,
           "collapse/panel/turns/healthy": 0.0, "collapse/panel/turns/n_samples": 3.0,
           "collapse/panel/turns/n_prompts": 3.0, "collapse/panel/turns/turn": 2.0,
           "collapse/panel/mi": 0.1}  # no count logged: kept as logged
    assert withheld_scopes(row, 16) == ["collapse/panel/turns/"]
    assert withhold(row, 16) == {k: v for k, v in row.items() if k not in (
        "collapse/panel/turns/mi", "collapse/panel/turns/mi_floor", "collapse/panel/turns/healthy")}
    assert withhold(row, 3) == row and withhold(row, 17).keys() == withhold(row, 16).keys() - {
        "collapse/mi"}
    with pytest.raises(ValueError, match="min_samples"):
        withhold(row, 1)


def _run(tmp_path, rows, min_samples=None):
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if min_samples is not None:
        (tmp_path / ".hydra").mkdir()
        (tmp_path / ".hydra" / "config.yaml").write_text(
            f"monitor:\n  min_samples: {min_samples}\n")
    return tmp_path


def test_the_analysis_reads_runs_under_the_rule(tmp_path):
    """A run logged before the rule (values from 3 samples) reads as if it had been on: the
    value is gone, its count stays, the final value is none (not an earlier step's), and the
    hypotheses and tables say why."""
    from ragen2.analysis.hypotheses import Change, evaluate
    from ragen2.analysis.rollouts import (final_value, load_metrics, no_value_steps,
                                          run_min_samples)
    from ragen2.analysis.study import run_summary, series, withheld

    p = "collapse/panel/turns/"
    rows = [{"step": 0, p + "mi": 1.6, p + "n_samples": 127.0, p + "n_prompts": 32.0},
            {"step": 5, p + "mi": 1.4, p + "n_samples": 27.0, p + "n_prompts": 17.0},
            {"step": 10, p + "n_prompts": 0.0},  # fewer than 2 prompts, no count (older runs)
            {"step": 40, p + "mi": 0.56, p + "n_samples": 3.0, p + "n_prompts": 3.0,
             "eval/success": 0.0}]
    run = _run(tmp_path, rows)
    assert run_min_samples(run) == 16
    m = load_metrics(run)
    assert p + "mi" not in m[40] and m[40][p + "n_samples"] == 3.0
    assert series(m, "panel_turns_mi") == [(0, 1.6), (5, 1.4)]
    assert withheld(m, "panel_turns_mi") == no_value_steps(m, p + "mi") == [(10, None), (40, 3.0)]
    assert final_value(m, p + "mi") is None
    assert run_summary("a", 0, m)["final_panel_turns_mi"] is None
    h = evaluate({("a", 0): m}, Change("H", "falls", "a", "panel_turns_mi", "negative"))
    assert h["verdict"] == "no data"
    assert h["dropped"]["a/0"] == (
        "2 logged value(s) of panel_turns_mi, the last at step 5 (2 more measured without a "
        "value, too few samples or prompts: < 2 prompts at step 10, n = 3 at step 40); the "
        "change needs 3")
    # the run's own minimum wins (3 here), and an explicit one wins over the run's
    assert load_metrics(_run(tmp_path / "own", rows, 3))[40][p + "mi"] == 0.56
    assert load_metrics(run, min_samples=2)[40][p + "mi"] == 0.56
    assert final_value(load_metrics(run, min_samples=2), p + "mi") == 0.56


def test_the_config_refuses_a_minimum_no_panel_can_reach_when_the_alert_acts():
    from ragen2.train import load_config

    assert load_config([]).monitor.min_samples == 16
    with pytest.raises(ConfigError) as e:
        load_config(["monitor.min_samples=1"])
    assert e.value.key == "monitor.min_samples"
    rollback = ["monitor.on_collapse=rollback", "monitor.panel_size=4", "monitor.panel_samples=4"]
    assert load_config(rollback).monitor.min_samples == 16  # 4 x 4 = 16: reachable
    with pytest.raises(ConfigError, match="fire on every measurement") as e:
        load_config(rollback + ["monitor.min_samples=17"])
    assert e.value.key == "monitor.min_samples"
    load_config(["monitor.panel_size=4", "monitor.min_samples=17"])  # warn: only no values


def test_ragen2_analyze_does_not_diagnose_from_an_older_value():
    from ragen2.analysis.analyze import diagnosis_inputs as run_inputs

    p = "collapse/panel/turns/"
    metrics = {5: {p + "mi": 1.4, p + "mi_null": 0.0, p + "log_n": 3.4, p + "n_samples": 100.0},
               10: {p + "n_samples": 3.0, p + "n_prompts": 3.0, "collapse/mi": 0.01,
                    "collapse/n_samples": 64.0}}
    vals, src = run_inputs(metrics, [])
    assert (vals["mi"], vals["mi_null"], vals["log_n"]) == (None, None, None)
    assert "at step 10: no value (n_samples 3, under monitor.min_samples)" in src["mi"]
    d = diagnose(**vals)
    assert "template collapse not assessed" in d.evidence
    # the first-turn instrument reads the batch monitor's newest value
    vals, src = run_inputs(metrics, [], config={"monitor": {"alert_instrument": "first_turn"}})
    assert vals["mi"] == 0.01 and src["mi"] == "collapse/mi at step 10"


def test_the_plugin_mi_of_ragen2_analyze_obeys_the_minimum():
    """8 episodes of 4 inputs, each input's reasoning its own: plug-in MI log 4 + 3/16 (Miller-
    Madow) from 8 samples; withheld at a minimum of 9, with the counts kept."""
    from ragen2.analysis.analyze import PLUGIN_VALUES, plugin_step
    from tests.analysis.test_analyze import _episodes

    at = plugin_step(1, _episodes(1, "informative"), min_samples=8)
    assert at["n_samples"] == 8 and at["mi"] == pytest.approx(math.log(4) + 3 / 16)
    assert at["mi_floor_q95"] is not None
    below = plugin_step(1, _episodes(1, "informative"), min_samples=9)
    assert all(below[k] is None for k in PLUGIN_VALUES)
    assert (below["n_samples"], below["n_episodes"], below["n_inputs"]) == (8, 8, 4)
    # null reasoning is no sample: 4 of 8 episodes write some
    assert plugin_step(1, _episodes(1, "empty_half"), min_samples=5)["mi"] is None
