"""The loop's typed state: trainer_state.json round-trips, the dict-based loop's checkpoints still
load and resume, and the loop decides from typed outcomes (the controller's actors are fakes)."""

from __future__ import annotations

import json

import pytest

import ragen2.controller.loop as controller
from ragen2.controller import TrainingStopped
from ragen2.learner import checkpoint
from ragen2.learner.group import sft_outcome, update_outcome
from ragen2.run_state import (CollapseCheck, Health, PanelVerdict, RunState, StepResult,
                              UpdateOutcome)
from tests.test_reliability import _cfg, _steps, fake_controller

#: a trainer_state.json as the dict-based loop (before RunState) wrote it at step 4
OLD_STATE = {
    "step": 4, "policy_version": 4, "eval_before": 0.25, "eval_last": 0.5,
    "skipped_in_row": 1, "skipped_total": 2, "nonfinite_in_row": 1,
    "early_stop": {"start_spread": 0.4, "low_spread_steps": 1, "low_evals": 0},
    "controller": {"filter": {"tiered": None}, "monitor": None, "alert": {"below": [], "evals": []},
                   "rollbacks": 0, "probe_floor": None, "panel": {"step": 4, "healthy": True},
                   "health": {"entropy_ref": 1.5, "train_success": [0.25, 0.5], "label": "healthy",
                              "collapse": {"collapse/mi": 0.3}, "panel_turns": {}}},
}

#: what OLD_STATE's health is written back as by Health: the same keys and values, and the
#: grounding reference (added for the diagnosis's grounding criterion) None: never measured
WRITTEN = json.loads(json.dumps(OLD_STATE))
WRITTEN["controller"]["health"]["grounding_ref"] = None


def test_run_state_reads_the_old_keys_and_writes_them_back():
    state = RunState.from_dict(json.loads(json.dumps(OLD_STATE)))
    assert (state.step, state.policy_version, state.eval_before, state.eval_last) == (4, 4, 0.25, 0.5)
    assert (state.skipped_in_row, state.skipped_total, state.nonfinite_in_row) == (1, 2, 1)
    assert state.early_stop == {"start_spread": 0.4, "low_spread_steps": 1, "low_evals": 0}
    assert state.to_dict() == OLD_STATE  # the same keys and values: the same file


def test_run_state_round_trips_through_a_checkpoint(tmp_path):
    state = RunState(step=7, policy_version=9, eval_before=0.1, eval_last=0.75, skipped_in_row=0,
                     skipped_total=3, nonfinite_in_row=2, early_stop={"low_evals": 1},
                     controller={"rollbacks": 1})
    tmp = checkpoint.begin(tmp_path, 7)
    checkpoint.commit(tmp, 7, state.to_dict())
    assert RunState.from_dict(checkpoint.read_state(checkpoint.latest(tmp_path))) == state


def test_an_early_checkpoint_without_the_later_keys_loads_with_defaults():
    # step 0 (on_collapse=rollback): no early_stop, eval_last or nonfinite_in_row yet
    old = {"step": 0, "policy_version": 0, "eval_before": 0.2, "skipped_in_row": 0,
           "skipped_total": 0, "controller": {"health": {"entropy_ref": None, "train_success": [],
                                                         "collapse": {}, "label": None}}}
    state = RunState.from_dict(old)
    assert state.eval_last is None and state.early_stop is None and state.nonfinite_in_row == 0
    assert set(state.to_dict()) == set(old) | {"nonfinite_in_row"}  # None keys stay out
    health = Health.from_dict(old["controller"]["health"])  # older than panel_turns
    assert health == Health() and health.panel_turns == {}
    assert RunState.from_dict({"step": 3, "policy_version": 3, "unknown_key": 1}).step == 3


def test_health_and_the_panel_verdict_round_trip():
    h = Health.from_dict(OLD_STATE["controller"]["health"])
    assert h.entropy_ref == 1.5 and h.train_success == [0.25, 0.5] and h.label == "healthy"
    assert h.to_dict() == WRITTEN["controller"]["health"]
    assert Health.from_dict(h.to_dict() | {"grounding_ref": 0.9}).grounding_ref == 0.9
    v = PanelVerdict.from_dict({"step": 4, "healthy": True})
    assert v == PanelVerdict(4, True) and v.to_dict() == {"step": 4, "healthy": True}
    assert PanelVerdict.from_dict(None) is None


def test_collapse_check_metrics_come_from_its_fields():
    assert CollapseCheck().metrics() == {}  # no measurement of the instrument: nothing logged
    assert CollapseCheck(measured=True).metrics() == {"collapse/alert": 0.0}
    assert CollapseCheck(True, "why", stop_reason="collapse alert: why").metrics() == {
        "collapse/alert": 1.0}
    assert CollapseCheck(True, "why", rolled_back=True, rollbacks=1).metrics() == {
        "collapse/alert": 1.0, "collapse/rollback": 1.0, "collapse/rollbacks": 1.0}
    assert CollapseCheck(True, "why", rollbacks=0).metrics() == {
        "collapse/alert": 1.0, "collapse/rollbacks": 0.0}


def test_the_learner_adapters_read_the_update_metrics_once():
    out = update_outcome({"actor/optimizer_steps": 2.0, "actor/nonfinite_skipped": 1.0,
                                     "actor/loss": 0.3})
    assert out == UpdateOutcome(optimizer_steps=2, nonfinite_skipped=1)
    assert sft_outcome({"warm_start/nonfinite_skipped": 1.0}) == UpdateOutcome(0, 1)
    assert sft_outcome({"warm_start/nonfinite_skipped": 0.0}) == UpdateOutcome(1, 0)
    assert StepResult({}).trained is False and StepResult({}, UpdateOutcome(0, 2)).trained


# ------------------------------------------------------------ decisions in the loop (fakes)
def test_steps_that_keep_no_group_stop_the_run(tmp_path, monkeypatch):
    fake = fake_controller({})

    def nothing_kept(self, step):
        fake.trained.append(step)
        return StepResult({"filter/kept_ratio": 0.0}, None, reward_spread=0.0)

    monkeypatch.setattr(fake, "train_step", nothing_kept)
    monkeypatch.setattr(controller, "Controller", fake)
    fake.trained = []
    with pytest.raises(TrainingStopped, match="3 consecutive steps kept no group"):
        controller.run(_cfg("trainer.total_steps=6", "trainer.max_skipped_steps=3"), tmp_path, "x")
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert fake.trained == [1, 2, 3] and [r["filter/skipped_steps"] for r in rows[1:]] == [1, 2, 3]


def test_a_rollback_writes_a_checkpoint_at_once(tmp_path, monkeypatch):
    fake = fake_controller({})
    monkeypatch.setattr(fake, "panel_due", lambda self, step: False)
    monkeypatch.setattr(fake, "check_collapse", lambda self, step, measured: CollapseCheck(
        True, "why", rolled_back=step == 3, rollbacks=int(step >= 3)))
    monkeypatch.setattr(controller, "Controller", fake)
    fake.trained = []
    controller.run(_cfg("trainer.total_steps=5", "trainer.save_every=0"), tmp_path, "x")
    assert _steps(tmp_path) == ["latest.json", "step_000003", "step_000005"]
    rows = {r["step"]: r for r in map(json.loads, (tmp_path / "metrics.jsonl").read_text().splitlines())}
    assert rows[3]["collapse/rollback"] == 1.0 and "collapse/rollback" not in rows[4]
    assert rows[5]["collapse/rollbacks"] == 1.0


def test_a_checkpoint_of_the_dict_based_loop_resumes(tmp_path, monkeypatch):
    """The old trainer_state.json of step 4: the run goes on at step 5 with its counters."""
    fake = fake_controller({})
    loaded = []
    monkeypatch.setattr(fake, "load_state_dict", lambda self, s: loaded.append(s))
    monkeypatch.setattr(controller, "Controller", fake)
    fake.trained = []
    d = checkpoint.checkpoint_root(tmp_path) / "step_000004"
    d.mkdir(parents=True)
    (d / "policy.pt").write_text("4")  # the fake learner's checkpoint: its version
    (d / checkpoint.STATE_FILE).write_text(json.dumps(OLD_STATE))
    summary = controller.run(_cfg("trainer.total_steps=6", "trainer.resume=true"), tmp_path, "x")
    assert fake.trained == [5, 6] and loaded == [OLD_STATE["controller"]]
    assert summary["eval_before"] == 0.25 and summary["eval_after"] == 0.5  # the fake's evaluation
    state = checkpoint.read_state(checkpoint.latest(tmp_path))
    assert state["step"] == 6 and state["policy_version"] == 6 and state["skipped_total"] == 2
    assert state["skipped_in_row"] == 0 and state["nonfinite_in_row"] == 0


def test_the_batches_generated_ahead_ride_in_the_checkpoint_and_resume(tmp_path, monkeypatch):
    """trainer.max_staleness=2: the fake steps queue their batches as the real one does (step s
    generates those of launch_steps with the engines' version). Killed after the checkpoint of
    step 2, the resumed run trains steps 3 and 4 on the very batches the checkpoint holds,
    generated by versions 0 and 1 (the weights of neither are kept)."""
    from ragen2.rollout.schedule import QUEUE_FILE, Rollouts, launch_steps
    from ragen2.rollout.trajectory import Trajectory

    fake = fake_controller({})
    used: dict[int, tuple[int, list[int]]] = {}

    def step_ahead(self, step):
        if step == 3 and not self.cfg.trainer.resume:
            raise KeyboardInterrupt  # killed after step 2's checkpoint
        fake.trained.append(step)
        ready = self.queue.pop(step, self.version)
        if ready is not None:
            used[step] = (ready.version, ready.trajs[0].input_ids)
        for t in launch_steps(step, 2, self.cfg.trainer.total_steps, self.queue):
            traj = Trajectory(env_seed=t, group_id=0, policy_version=self.version)
            traj.append([t, 100 + self.version], 1, [-0.5, -0.25])
            self.queue.put(Rollouts(t, self.version, [traj]))
        self.version += 1
        return StepResult({}, UpdateOutcome(1, 0))

    monkeypatch.setattr(fake, "train_step", step_ahead)
    monkeypatch.setattr(fake, "state_dict", lambda self: {"rollout_queue": self.queue.state_dict()})
    monkeypatch.setattr(controller, "Controller", fake)
    fake.trained = []
    args = ("trainer.total_steps=4", "trainer.save_every=2", "trainer.max_staleness=2")
    with pytest.raises(KeyboardInterrupt):
        controller.run(_cfg(*args), tmp_path, "x")
    ckpt = checkpoint.latest(tmp_path)
    assert ckpt.name == "step_000002" and (ckpt / QUEUE_FILE).exists()
    state = checkpoint.read_state(ckpt)
    assert state["controller"]["rollout_queue"] == {"steps": [3, 4], "versions": [0, 1]}
    assert used == {2: (0, [2, 100])}  # step 2 trained on version 0's batch (step 1 on its own)
    controller.run(_cfg(*args, "trainer.resume=true"), tmp_path, "x")
    assert fake.trained == [1, 2, 3, 4]
    assert used[3] == (0, [3, 100]) and used[4] == (1, [4, 101])
    assert not (checkpoint.latest(tmp_path) / QUEUE_FILE).exists()  # nothing left to queue
