"""The collapse alert and rollback end to end, on a policy made to collapse (tier 2).

The policy is warm-started to restate its input (EchoWord, ``reasoning=describe``: the panel MI
is near its bound), then RL with a heavy entropy bonus (1.0, lr 2e-3: the regulariser-heavy arm
taken to the extreme) drives its reasoning to noise within a few steps: the panel stops seeing any
input dependence and held-out success falls to 0. The alert must fire, the learner must come back
to the newest checkpoint the panel measured healthy, training must go on with a stronger filter,
and a run stopped right after the rollback and resumed must continue exactly as the uninterrupted
one.
"""

from __future__ import annotations

import json

import pytest

from ragen2.learner import checkpoint
from ragen2.train import load_config, resolve_model_path, train
from tests.test_monitor_validation import BASE

pytestmark = pytest.mark.e2e

COLLAPSE = [o for o in BASE if not o.startswith(("trainer.total_steps", "trainer.eval_every",
                                                 "monitor.panel_size"))] + [
    "env.kwargs.reasoning=describe", "trainer.eval_every=1", "trainer.save_every=1",
    "trainer.keep_checkpoints=1", "monitor.panel_size=12", "monitor.panel_samples=4",
    "monitor.alert_patience=2", "monitor.on_collapse=rollback", "algorithm.entropy_coef=1.0",
    "algorithm.lr=2e-3"]


def _rows(run) -> dict[int, dict]:
    rows = {}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        r = json.loads(line)
        rows[r["step"]] = r
    return rows


@pytest.fixture(scope="module")
def collapsed(ray_session, tmp_path_factory):
    """The collapsing run, 6 steps. Before each step it copies its run folder aside (what a run
    killed at that moment leaves), so the resume test starts from a copy instead of paying for a
    second run up to the rollback."""
    import shutil

    from ragen2.controller import Controller

    model = resolve_model_path(load_config(BASE + ["env.kwargs.reasoning=describe"]))
    overrides = COLLAPSE + ["model=hf", f"model.path={model}", "recipe=tiny"]
    root = tmp_path_factory.mktemp("collapse")
    run, snapshots = root / "run", root / "killed_before_step"
    step = Controller.train_step

    def copies_then_steps(self, n):
        shutil.copytree(run, snapshots / str(n))
        return step(self, n)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Controller, "train_step", copies_then_steps)
        train(load_config(overrides + ["trainer.total_steps=6"]), run)
    return overrides, run, _rows(run), snapshots


def test_the_alert_fires_and_the_learner_rolls_back_to_a_healthy_checkpoint(collapsed, capsys):
    _, run, rows, _ = collapsed
    assert rows[0]["collapse/panel/healthy"] == 1.0  # the warm start reads its input
    assert rows[0]["collapse/panel/mi_lo"] > 2.0  # (bound log 12 = 2.48)
    alerts = [s for s, r in sorted(rows.items()) if r.get("collapse/alert") == 1.0]
    assert alerts, {s: (r.get("collapse/panel/mi_lo"), r.get("eval/success")) for s, r in rows.items()}
    first = alerts[0]
    # the K = 2 measurements before it were under the floor (or had no reasoning at all) ...
    for s in (first - 1, first):
        assert rows[s].get("collapse/panel/healthy", 0.0) == 0.0
    # ... while held-out success had not moved above its best before them
    assert rows[first]["eval/success"] <= max(rows[s]["eval/success"] for s in range(first - 1))
    assert rows[first]["collapse/rollback"] == 1.0 and rows[first]["collapse/rollbacks"] == 1.0
    healthy = [s for s in range(first) if rows[s].get("collapse/panel/healthy") == 1.0]
    target = max(healthy)
    # the next update starts from the target's weights: its policy version + 1
    assert rows[first + 1]["actor/policy_version"] == rows[target].get("actor/policy_version", 0) + 1
    # filter=none became top_p 0.75 without zero-spread groups: the next step keeps fewer
    assert rows[first + 1]["filter/kept_ratio"] < 1.0
    state = checkpoint.read_state(checkpoint.latest(run))
    assert state["controller"]["filter"]["strengthened"][0] == 0.75
    assert state["controller"]["rollbacks"] == sum(r.get("collapse/rollback", 0) for r in rows.values())
    assert "collapse/rollback" not in rows[6]  # an alert at the last step does not roll back
    # keep_checkpoints=1, yet the newest healthy rollback target survives the pruning
    kept = checkpoint.complete(run)
    healthy_kept = [(checkpoint.read_state(p)["controller"]["panel"] or {}).get("healthy")
                    for p in kept]
    assert kept[-1].name == "step_000006" and any(healthy_kept) and all(healthy_kept[:-1])


def test_a_run_killed_after_its_rollback_resumes_exactly(collapsed, tmp_path):
    """Own run: the resume, from the collapsing run's folder as it was when the step after the
    rollback began (a run killed there): the remaining steps come out the same."""
    import shutil

    overrides, _, rows, snapshots = collapsed
    first = min(s for s, r in rows.items() if r.get("collapse/rollback") == 1.0)
    run = tmp_path / "resumed"
    shutil.copytree(snapshots / str(first + 1), run)
    assert checkpoint.latest(run).name == f"step_{first:06d}"  # saved after the rollback
    train(load_config(overrides + ["trainer.total_steps=6", "trainer.resume=true"]), run)
    again = _rows(run)
    for s in range(first + 1, 7):
        a, b = rows[s], again[s]
        same = {k for k in a if not k.startswith("timing/") and k in b}
        assert {k: a[k] for k in same} == {k: b[k] for k in same}, s
