"""The later-turn probe panel inside a training run: FrozenLake (start and goal never move), so
``monitor.alert_instrument=auto`` reads the later turns; the scripted openings reach the workers
and every measurement writes ``collapse/panel/turns/*`` and ``panel/turns/step_*.jsonl``."""

from __future__ import annotations

import json
import math

import pytest

from tests.runs import ONE_RANK, rows, small

pytestmark = pytest.mark.e2e


def test_later_turn_panel_measures_fixed_mid_episode_states(ray_session, tiny_model_path,
                                                             tmp_path):
    """Own run: the shared runs turn the probe panel off (tests.runs.SMALL: it costs 20x a step
    there), and this one needs both panels on at every step, on FrozenLake (about 25 s)."""
    from ragen2.train import load_config, train

    run = tmp_path / "run"
    cfg = load_config(small(tiny_model_path, ONE_RANK, "engine=hf", "trainer.total_steps=1",
                            "monitor.every=1", "monitor.panel_size=6", "monitor.panel_samples=2",
                            "monitor.panel_bootstrap=20", "monitor.panel_permutations=20",
                            "monitor.min_samples=4",  # 6 x 2 = 12 samples: under the default
                            # both panels (auto, the default, leaves the first-turn one off here)
                            "monitor.first_turn_panel=always"))
    train(cfg, run)
    assert "collapse alert and diagnosis read the later turns MI" in (run / "train.log").read_text()
    r = rows(run)
    for step in (0, 1):
        assert r[step]["collapse/panel/turns/turn"] == 2.0  # 2 scripted turns, then the policy's
        assert "collapse/panel/n_prompts" in r[step]  # the first-turn panel, asked for, is kept
        assert r[step]["timing/panel_turns_s"] > 0
        p, n = "collapse/panel/turns/", r[step]["collapse/panel/turns/n_prompts"]
        if n >= 2 and r[step][p + "n_samples"] >= 4:  # monitor.min_samples
            assert r[step][p + "mi_bound"] == pytest.approx(math.log(n))
            assert p + "mi_floor" in r[step]
        else:  # too few samples: the counts, no value
            assert p + "mi" not in r[step] and p + "mi_floor" not in r[step]
    records = [json.loads(line) for line in
               (run / "panel" / "turns" / "step_000000.jsonl").read_text().splitlines()]
    assert len(records) == 6 and all(len(rec["opening"]) == 2 for rec in records)
    assert len({rec["prompt"] for rec in records}) == 6  # distinct mid-episode states
    later = [json.loads(line) for line in
             (run / "panel" / "turns" / "step_000001.jsonl").read_text().splitlines()]
    assert [rec["opening"] for rec in later] == [rec["opening"] for rec in records]  # fixed
