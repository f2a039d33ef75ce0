"""ragen2/controller/watch.py: the run health, the collapse alert and what it does (stop, roll
back), and the watch's checkpoint state; the monitor and the panels off."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

from ragen2.config import Config
from ragen2.controller.watch import Watch
from ragen2.rollout.trajectory import Trajectory
from ragen2.run_state import CollapseCheck, PanelVerdict

BELOW = SimpleNamespace(mi_lo=0.0, mi_floor=0.1, healthy=False)  # at or under the floor
EVIDENCE = ("panel MI lower bound at or under the permutation floor for 1 measurements in a row "
            "(step 3: +0.000 <= +0.100); held-out success 0.500 (step 5): no gain above "
            "0.500 + 0")


def _watch(tmp_path, on_collapse: str = "warn", max_rollbacks: int = 2, healthy=None):
    cfg = Config()
    cfg = replace(cfg, monitor=replace(cfg.monitor, name="none", alert_patience=1,
                                       on_collapse=on_collapse, max_rollbacks=max_rollbacks))
    restored = []
    w = Watch(cfg, SimpleNamespace(train_envs=[]), None, tmp_path, None,
              restore=lambda path: (restored.append(path), f"rolled back to {path.name}")[1],
              healthy_checkpoint=lambda: healthy)
    w.record_eval(0, 0.5)
    w.record_eval(5, 0.5)  # no gain since step 0: a measurement under the floor alerts
    return w, restored


def test_a_batch_joins_the_run_health(tmp_path):
    w, _ = _watch(tmp_path)
    for ok in (True, False, True, True, False, False):
        t = Trajectory(env_seed=0, group_id=0, policy_version=0)
        t.success = ok
        assert w.on_batch(1, [t, t]) == {}  # the monitor is off: no metric
    assert w.health.train_success == [0.0, 1.0, 1.0, 0.0, 0.0]  # the last 5 steps


def test_no_measurement_no_alert_and_a_warning_alert(tmp_path):
    w, restored = _watch(tmp_path)
    assert w.check_collapse(2, None) == CollapseCheck()
    assert w.check_collapse(3, BELOW) == CollapseCheck(True, EVIDENCE, rollbacks=0)
    assert restored == []


def test_a_stopping_alert(tmp_path):
    w, _ = _watch(tmp_path, on_collapse="stop")
    check = w.check_collapse(3, BELOW)
    assert check.stop_reason == f"collapse alert: {EVIDENCE}" and not check.rolled_back


def test_a_rollback_and_the_last_one_allowed(tmp_path):
    target = Path("checkpoints/step_000002")
    w, restored = _watch(tmp_path, on_collapse="rollback", max_rollbacks=1, healthy=target)
    check = w.check_collapse(3, BELOW)
    assert check == CollapseCheck(True, EVIDENCE, rolled_back=True, rollbacks=1)
    assert restored == [target] and w.verdict == PanelVerdict(3, True)  # healthy weights again
    w.record_eval(7, 0.5)
    again = w.check_collapse(6, BELOW)
    assert again.alert is not None and not again.rolled_back and restored == [target]


def test_the_watch_state_survives_a_checkpoint(tmp_path):
    w, _ = _watch(tmp_path, on_collapse="rollback", healthy=Path("c/step_000002"))
    w.check_collapse(3, BELOW)
    w.health.train_success = [0.25]
    state = w.state_dict()
    assert state["rollbacks"] == 1 and state["monitor"] is None
    assert state["panel"] == PanelVerdict(3, True).to_dict()
    fresh, _ = _watch(tmp_path / "other")
    fresh.load_state_dict(state)
    assert fresh.state_dict() == state
