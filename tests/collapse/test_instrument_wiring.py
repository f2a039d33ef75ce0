"""The watch reads the chosen instrument: the alert, the diagnosis and the rollback verdict
take the later-turn panel where ``later_turns`` is chosen (no Ray: the methods on a bare object)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ragen2.collapse.alert import CollapseAlert
from ragen2.collapse.instrument import alert_measurement
from ragen2.collapse.panel import PanelMeasurement
from ragen2.controller.watch import Watch
from ragen2.run_state import Health
from ragen2.train import load_config

FIRST = PanelMeasurement({"collapse/panel/n_prompts": 32.0}, mi_lo=0.001, mi_floor=0.004)


def _ctl(instrument: str) -> Watch:
    ctl = Watch.__new__(Watch)  # the wiring only: no workers, no learner
    ctl.cfg = load_config([])
    ctl.instrument = instrument
    ctl.alert = CollapseAlert(2, 0.0)
    ctl.rollbacks = 0
    ctl.health = Health(entropy_ref=1.0, train_success=[0.5],
                        collapse={"collapse/mi": 0.001, "collapse/mi_null": 0.001,
                                  "collapse/log_n": 2.77, "collapse/mi_bound": 2.77,
                                  "collapse/token_entropy": 0.95})
    return ctl


def _turns(mi_lo: float) -> PanelMeasurement:
    return PanelMeasurement({"collapse/panel/turns/n_prompts": 32.0}, mi_lo=mi_lo, mi_floor=0.05)


@pytest.mark.parametrize("instrument, fires", [("first_turn", True), ("later_turns", False)])
def test_the_alert_reads_the_instruments_panel(instrument, fires):
    """First turn at its floor (FrozenLake's structural ~0), later turns well above theirs:
    only the first-turn instrument alerts, once success stalled over the window."""
    ctl = _ctl(instrument)
    ctl.record_eval(0, 0.2)
    fired = []
    for step in (0, 5, 10):
        if step == 10:
            ctl.record_eval(10, 0.2)  # no gain over the window
        check = ctl.check_collapse(step, alert_measurement(instrument, FIRST, _turns(0.6)))
        assert check.measured and check.stop_reason is None and not check.rolled_back
        fired.append(check.metrics()["collapse/alert"])
    assert (fired[-1] == 1.0) is fires and fired[:2] == [0.0, 0.0]


def test_later_turn_alert_fires_when_the_later_turns_collapse():
    ctl = _ctl("later_turns")
    ctl.record_eval(0, 0.2)
    ctl.check_collapse(0, alert_measurement("later_turns", FIRST, _turns(0.01)))
    ctl.record_eval(5, 0.2)
    check = ctl.check_collapse(5, alert_measurement("later_turns", FIRST, _turns(0.02)))
    assert check.alert is not None and "2 measurements in a row" in check.alert
    # on_collapse=warn (the default): logged, counted, the run goes on
    assert check.metrics() == {"collapse/alert": 1.0, "collapse/rollbacks": 0.0}


def test_no_measurement_of_the_instrument_reads_nothing():
    ctl = _ctl("later_turns")
    check = ctl.check_collapse(3, alert_measurement("later_turns", FIRST, None))
    assert check.metrics() == {} and not check.measured and ctl.alert.below == []


def test_the_diagnosis_reads_the_instrument():
    first, later = _ctl("first_turn"), _ctl("later_turns")
    # first turn: MI 0.001 - null 0.001 < 0.1 x 2.77 with entropy 0.95 >= 0.8 x 1.0
    assert first.diagnose(0.4)["collapse/diagnosis"] == 1.0  # template collapse
    later.health.panel_turns = {"collapse/panel/turns/mi": 1.2,
                                "collapse/panel/turns/mi_null": 0.02,
                                "collapse/panel/turns/log_n": 3.47,
                                "collapse/panel/turns/mi_bound": 3.47}
    assert later.diagnose(0.4)["collapse/diagnosis"] == 0.0  # 1.18 >= 0.347: healthy
    later.health.panel_turns["collapse/panel/turns/mi"] = 0.1
    later.health.label = None
    assert later.diagnose(0.4)["collapse/diagnosis"] == 1.0
    none = _ctl("later_turns")  # no later-turn measurement yet: MI not assessed
    assert none.diagnose(0.4)["collapse/diagnosis"] == 0.0


def test_the_diagnosis_reads_the_later_turn_grounding_against_its_first_measurement():
    """later_turns: the panel's first grounding becomes the reference; a later measurement with
    a healthy MI but grounding fallen 0.74 with checkable 0.98 is template collapse. first_turn
    reads no grounding (the same panel values change nothing)."""
    later = _ctl("later_turns")
    healthy_mi = {"collapse/panel/turns/mi": 1.2, "collapse/panel/turns/mi_null": 0.02,
                  "collapse/panel/turns/log_n": 3.47, "collapse/panel/turns/mi_bound": 3.47,
                  "collapse/panel/turns/grounding/checkable_frac": 0.98}
    start = PanelMeasurement({**healthy_mi, "collapse/panel/turns/grounding/frac": 0.99},
                             mi_lo=1.0, mi_floor=0.05)
    drifted = PanelMeasurement({**healthy_mi, "collapse/panel/turns/grounding/frac": 0.25},
                               mi_lo=1.0, mi_floor=0.05)
    for m in (start, drifted):  # the panels measure the later turns only
        later.panels = SimpleNamespace(measure=lambda step, version, m=m: (None, m, {}))
        later.measure_panel(0, 0)
    assert later.health.grounding_ref == 0.99  # the first measurement's, kept
    assert later.diagnose(0.4)["collapse/diagnosis"] == 1.0
    first = _ctl("first_turn")
    first.health.collapse["collapse/mi"] = 1.0  # a healthy first-turn MI
    first.health.panel_turns, first.health.grounding_ref = drifted.metrics, 0.99
    assert first.diagnose(0.4)["collapse/diagnosis"] == 0.0
