"""The controller reads the chosen instrument: the alert, the diagnosis and the rollback verdict
take the later-turn panel where ``later_turns`` is chosen (no Ray: the methods on a bare object)."""

from __future__ import annotations

import pytest

from ragen2.collapse.alert import CollapseAlert
from ragen2.controller import Controller
from ragen2.train import load_config

FIRST = {"collapse/panel/n_prompts": 32.0, "collapse/panel/mi_lo": 0.001,
         "collapse/panel/mi_floor": 0.004, "collapse/panel/healthy": 0.0}


def _ctl(instrument: str) -> Controller:
    ctl = Controller.__new__(Controller)  # the wiring only: no workers, no learner
    ctl.cfg = load_config([])
    ctl.instrument = instrument
    ctl.alert = CollapseAlert(2, 0.0)
    ctl.rollbacks = 0
    ctl.health = {"entropy_ref": 1.0, "train_success": [0.5], "label": None, "panel_turns": {},
                  "collapse": {"collapse/mi": 0.001, "collapse/mi_null": 0.001,
                               "collapse/log_n": 2.77, "collapse/mi_bound": 2.77,
                               "collapse/token_entropy": 0.95}}
    return ctl


def _turns(mi_lo: float) -> dict[str, float]:
    return {"collapse/panel/turns/n_prompts": 32.0, "collapse/panel/turns/mi_lo": mi_lo,
            "collapse/panel/turns/mi_floor": 0.05}


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
        m = {**FIRST, **_turns(0.6)}
        ctl.check_collapse(step, m)
        fired.append(m["collapse/alert"])
    assert (fired[-1] == 1.0) is fires and fired[:2] == [0.0, 0.0]


def test_later_turn_alert_fires_when_the_later_turns_collapse():
    ctl = _ctl("later_turns")
    ctl.record_eval(0, 0.2)
    ctl.check_collapse(0, {**FIRST, **_turns(0.01)})
    ctl.record_eval(5, 0.2)
    m = {**FIRST, **_turns(0.02)}
    ctl.check_collapse(5, m)
    assert m["collapse/alert"] == 1.0


def test_the_diagnosis_reads_the_instrument():
    first, later = _ctl("first_turn"), _ctl("later_turns")
    # first turn: MI 0.001 - null 0.001 < 0.1 x 2.77 with entropy 0.95 >= 0.8 x 1.0
    assert first.diagnose(0.4)["collapse/diagnosis"] == 1.0  # template collapse
    later.health["panel_turns"] = {"collapse/panel/turns/mi": 1.2,
                                   "collapse/panel/turns/mi_null": 0.02,
                                   "collapse/panel/turns/log_n": 3.47,
                                   "collapse/panel/turns/mi_bound": 3.47}
    assert later.diagnose(0.4)["collapse/diagnosis"] == 0.0  # 1.18 >= 0.347: healthy
    later.health["panel_turns"]["collapse/panel/turns/mi"] = 0.1
    later.health["label"] = None
    assert later.diagnose(0.4)["collapse/diagnosis"] == 1.0
    none = _ctl("later_turns")  # no later-turn measurement yet: MI not assessed
    assert none.diagnose(0.4)["collapse/diagnosis"] == 0.0
