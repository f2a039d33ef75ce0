"""ragen2/controller/panels.py: when the probe panels are measured and what one measurement asks
of the workers and writes, with a stand-in panel."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

from ragen2 import seeding
from ragen2.config import Config
from ragen2.controller.panels import Panels, make_panels


def _cfg(**monitor) -> Config:
    cfg = Config()
    return replace(cfg, seed=3, monitor=replace(cfg.monitor, **monitor))


def test_no_panel_when_it_is_off():
    problems = SimpleNamespace(train_envs=[])  # never read: nothing is made
    assert make_panels(_cfg(panel_size=0), problems) == (None, None)
    assert make_panels(_cfg(name="none"), problems) == (None, None)


def _panels(every: int, first: object = None, turns: object = None, actors=None, run_dir=None):
    p = Panels.__new__(Panels)  # the panels themselves stand in
    p.cfg, p.actors, p.run_dir, p.eos_text = _cfg(every=every), actors, run_dir, None
    p.first, p.turns = first, turns
    return p


def test_a_panel_is_due_at_step_0_and_every_few_steps():
    p = _panels(every=5, first=object())
    assert [s for s in range(12) if p.due(s)] == [0, 5, 10]
    assert [s for s in range(12) if _panels(every=0, turns=object()).due(s)] == [0]
    assert not any(_panels(every=5).due(s) for s in range(12))  # no panel at all


def test_a_first_turn_measurement(tmp_path):
    calls = []
    first = SimpleNamespace(
        specs=lambda: ["p0", "p1"],
        measure=lambda trajs, score, step: SimpleNamespace(metrics={"collapse/panel/mi": 0.25}),
        records=lambda trajs, step, eos: [{"step": step, "n": len(trajs)}])
    actors = SimpleNamespace(workers=[0, 1], learners=SimpleNamespace(score=None),
                             gather=lambda *a: (calls.append(a), (["t0", "t1"], {}))[1])
    measured, later, m = _panels(5, first, actors=actors, run_dir=tmp_path).measure(10, version=4)
    assert later is None and measured.metrics == {"collapse/panel/mi": 0.25}
    assert m["collapse/panel/mi"] == 0.25 and "timing/panel_s" in m
    assert calls == [("rollout", ["p0", "p1"],
                      [seeding.panel_sampling_seed(3, 10, 0), seeding.panel_sampling_seed(3, 10, 1)],
                      [4, 4], [False, False], [1, 1])]  # first turns only, the sampling mode
    rows = (tmp_path / "panel" / "step_000010.jsonl").read_text().splitlines()
    assert [json.loads(r) for r in rows] == [{"step": 10, "n": 2}]


def test_the_first_turn_panel_setting():
    from ragen2.controller.panels import keep_first_turn_panel as keep

    assert keep("always", True, "auto") and keep("always", False, "first_turn")
    assert not keep("never", False, "auto")
    assert not keep("auto", True, "auto") and not keep("auto", True, "later_turns")
    assert keep("auto", False, "auto")  # no later-turn panel: the first turn is all there is
    assert keep("auto", True, "first_turn")  # the alert reads it
    import pytest
    with pytest.raises(ValueError, match="allowed: always, never, auto"):
        keep("off", True, "auto")


def test_auto_drops_the_first_turn_panel_on_frozenlake_only():
    """FrozenLake (the default job) has a later-turn panel, so auto keeps that one alone; the
    single-turn EchoWord test env has none, so auto keeps its first-turn panel."""
    from ragen2.controller.problems import Problems
    from ragen2.train import load_config

    cfg = load_config(["monitor.first_turn_panel=auto"])
    first, turns = make_panels(cfg, Problems(cfg))
    assert first is None and turns is not None
    cfg = load_config(["monitor.first_turn_panel=always"])
    first, turns = make_panels(cfg, Problems(cfg))
    assert first is not None and turns is not None
    cfg = load_config(["monitor.first_turn_panel=auto", "env.id=tests.reasoning_env:EchoWord-v0"])
    first, turns = make_panels(cfg, Problems(cfg))
    assert first is not None and turns is None


def test_bad_first_turn_panel_settings_name_the_key():
    import pytest

    from ragen2.config import ConfigError
    from ragen2.train import load_config

    for overrides in (["monitor.first_turn_panel=maybe"],
                      ["monitor.first_turn_panel=never", "monitor.alert_instrument=first_turn"]):
        with pytest.raises(ConfigError) as e:
            load_config(overrides)
        assert e.value.key == "monitor.first_turn_panel"
