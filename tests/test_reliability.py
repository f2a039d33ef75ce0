"""Failure handling without actors: nan/inf updates stop the run, a failed checkpoint write leaves the
previous one, a bad run directory is refused before training. The controller's actors are fakes."""

from __future__ import annotations

import errno
import json
import os
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import ragen2.controller.loop as controller
from ragen2.controller import TrainingStopped, count_nonfinite
from ragen2.controller.checkpoints import Checkpoints
from ragen2.controller.rollouts import RolloutSource
from ragen2.learner import checkpoint
from ragen2.run_state import CollapseCheck, Evaluation, RunState, StepResult, UpdateOutcome
from ragen2.train import RunDirError, check_run_dir, load_config

ENOSPC = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _raise(exc: BaseException):
    raise exc


# ----------------------------------------------------------- nan/inf updates
def test_count_nonfinite_stops_at_k_in_a_row():
    n = 0
    for skipped in (True, True, False, True, True):  # a clean update resets the count
        n = count_nonfinite(n, skipped, 3, "step 9", "actor/nonfinite_skipped")
    assert n == 2
    with pytest.raises(TrainingStopped, match=r"step 12: 3 consecutive updates skipped .*nan/inf.*"
                                              r"actor/nonfinite_skipped; trainer.max_nonfinite_steps=3"
                                              r".*lower algorithm.lr.*grad_clip.*rewards"):
        count_nonfinite(n, True, 3, "step 12", "actor/nonfinite_skipped")
    assert count_nonfinite(0, True, 2, "s", "k") == 1


def test_max_nonfinite_steps_is_validated():
    from ragen2.config import ConfigError

    assert load_config([]).trainer.max_nonfinite_steps == 3
    with pytest.raises(ConfigError, match="trainer.max_nonfinite_steps"):
        load_config(["trainer.max_nonfinite_steps=0"])


class FakeLearners:
    """Writes a checkpoint file holding the version; ``fail`` raises on ``save`` into that step."""

    def __init__(self, ctl, fail: dict[int, BaseException]) -> None:
        self.ctl, self.fail = ctl, fail

    def save(self, directory: str) -> None:
        d = Path(directory)
        (d / "policy.pt").write_text(json.dumps(self.ctl.version))
        step = int(d.name[5:11])
        if step in self.fail:
            raise self.fail[step]

    def load(self, directory: str) -> int:
        return json.loads((Path(directory) / "policy.pt").read_text())


def fake_controller(skipped_by_step: dict[int, int], fail: dict[int, BaseException] | None = None):
    """A Controller whose steps report ``skipped_by_step[step]`` of 2 optimizer steps skipped. It
    stands in for its own watch, weights, evaluator and warm start; its checkpoints go through
    the real path (:class:`Checkpoints`, the real queue of batches ahead)."""

    class Fake:
        save = controller.Controller.save  # the real checkpoint path
        trained: list[int] = []

        def __init__(self, cfg, run_dir, model_path):
            self.cfg, self.run_dir, self.version = cfg, Path(run_dir), 0
            self.watch = self.weights = self.evaluator = self.warm_start = self
            learners = FakeLearners(self, fail or {})
            self.actors = SimpleNamespace(learners=learners)
            self.rollouts = RolloutSource(cfg, None, None, None)
            self.queue = self.rollouts.queue
            self.checkpoints = Checkpoints(cfg, self.run_dir, learners, self.rollouts)

        def run(self):  # the warm start
            return {}

        def push(self):
            return {}

        def evaluate(self, step, version):
            return Evaluation(0.5, {"eval/success": 0.5})

        def diagnose(self, success):
            return {}

        def panel_due(self, step):
            return False

        def record_eval(self, step, success):
            pass

        def check_collapse(self, step, measured):
            return CollapseCheck()

        def train_step(self, step):
            Fake.trained.append(step)
            skipped = skipped_by_step.get(step, 0)
            self.version += 1  # a skipped update still counts as a version (same weights)
            return StepResult({"actor/nonfinite_skipped": float(skipped),
                               "actor/optimizer_steps": float(2 - skipped)},
                              UpdateOutcome(optimizer_steps=2 - skipped, nonfinite_skipped=skipped))

        def state_dict(self):
            return {}

        def load_state_dict(self, state):
            pass

        def shutdown(self):
            pass

    return Fake


def _cfg(*extra: str):
    return load_config(["trainer.loggers=[jsonl]", "trainer.warm_start.enabled=false",
                        "trainer.eval_every=0", *extra])


def _steps(run_dir: Path) -> list[str]:
    return sorted(p.name for p in (run_dir / "checkpoints").iterdir())


def test_nonfinite_updates_postpone_checkpoints_then_stop_the_run(tmp_path, monkeypatch):
    # step 2 skips 1 of 2 optimizer steps: its checkpoint waits for clean step 3; steps 4-6 skip
    # everything: three in a row stop the run at step 6, and step 4's checkpoint is never written
    monkeypatch.setattr(controller, "Controller", fake_controller({2: 1, 4: 2, 5: 2, 6: 2}))
    cfg = _cfg("trainer.total_steps=8", "trainer.save_every=2")
    with pytest.raises(TrainingStopped, match="step 6: 3 consecutive updates skipped"):
        controller.run(cfg, tmp_path, "unused")
    assert _steps(tmp_path) == ["latest.json", "step_000003"]
    assert checkpoint.read_state(checkpoint.latest(tmp_path))["policy_version"] == 3
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 4, 5, 6]  # the stopping step is logged
    assert rows[-1]["actor/nonfinite_skipped"] == 2


def test_a_full_disk_while_saving_stops_with_the_previous_checkpoint_intact(tmp_path, monkeypatch):
    monkeypatch.setattr(controller, "Controller", fake_controller({}, fail={4: ENOSPC}))
    cfg = _cfg("trainer.total_steps=6", "trainer.save_every=2")
    with pytest.raises(checkpoint.CheckpointWriteError,
                       match=r"step 4 checkpoint .*No space left on device; the previous checkpoint "
                             r"step_000002 is intact.*trainer.resume=true"):
        controller.run(cfg, tmp_path, "unused")
    assert _steps(tmp_path) == ["latest.json", "step_000002"]  # the temporary one is gone
    assert checkpoint.latest(tmp_path).name == "step_000002"
    # once there is space again, resume continues from step 3
    fake = fake_controller({})
    monkeypatch.setattr(controller, "Controller", fake)
    summary = controller.run(_cfg("trainer.total_steps=6", "trainer.save_every=2",
                                  "trainer.resume=true"), tmp_path, "unused")
    assert fake.trained == [3, 4, 5, 6] and summary["steps"] == 6
    assert checkpoint.read_state(checkpoint.latest(tmp_path))["policy_version"] == 6


@pytest.mark.parametrize("where", ["rank", "ray", "state", "pointer", "begin"])
def test_controller_save_turns_write_errors_into_a_clear_stop(tmp_path, monkeypatch, where):
    from ray.exceptions import RayTaskError

    err = {"rank": ENOSPC, "ray": RayTaskError("save", "Traceback ...", ENOSPC).as_instanceof_cause()}
    ctl = fake_controller({}, fail={4: err[where]} if where in err else {})(_cfg(), tmp_path, "x")
    ctl.version = 2
    ctl.save(2, RunState())
    ctl.version = 4
    if where == "state":  # the trainer state cannot be written
        real = checkpoint.write_json_atomic
        monkeypatch.setattr(checkpoint, "write_json_atomic", lambda p, x: (
            _raise(ENOSPC) if p.name == checkpoint.STATE_FILE else real(p, x)))
    elif where == "pointer":  # renamed into place, but latest.json cannot be replaced
        real_dump = json.dump
        monkeypatch.setattr(checkpoint.json, "dump", lambda obj, f, **k: (
            _raise(ENOSPC) if "dir" in obj else real_dump(obj, f, **k)))
    elif where == "begin":  # the checkpoints directory cannot even take a new directory
        erofs = OSError(errno.EROFS, os.strerror(errno.EROFS))
        monkeypatch.setattr(checkpoint.Path, "mkdir", lambda self, *a, **k: _raise(erofs))
    with pytest.raises(checkpoint.CheckpointWriteError, match=r"step 4 checkpoint .* failed: .*(No "
                                                             r"space|Read-only).*step_00000[24] is intact"):
        ctl.save(4, RunState())
    monkeypatch.undo()
    root = tmp_path / "checkpoints"
    assert not list(root.glob("*.tmp*")), list(root.iterdir())
    assert json.loads((root / "latest.json").read_text())["dir"] == "step_000002"
    # the pointer still names step 2; only a complete step 4 (renamed before the pointer failed) exists
    assert checkpoint.latest(tmp_path).name == "step_000002"
    assert (root / "step_000004").exists() == (where == "pointer")


def test_an_interrupt_while_saving_removes_the_temporary_checkpoint(tmp_path):
    ctl = fake_controller({}, fail={4: KeyboardInterrupt()})(_cfg(), tmp_path, "x")
    ctl.save(2, RunState())
    with pytest.raises(KeyboardInterrupt):
        ctl.save(4, RunState())
    assert _steps(tmp_path) == ["latest.json", "step_000002"]


# --------------------------------------------------------------- run directory
def test_run_dir_preflight_accepts_a_writable_dir(tmp_path):
    check_run_dir(tmp_path / "new" / "run")
    assert (tmp_path / "new" / "run").is_dir() and not list((tmp_path / "new" / "run").iterdir())


def test_run_dir_under_a_file_is_refused(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(RunDirError, match=r"run directory .*file/run is not writable: Not a directory"):
        check_run_dir(tmp_path / "file" / "run")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_read_only_run_dir_is_refused(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(RunDirError, match="ro/run is not writable: Permission denied"):
            check_run_dir(ro / "run")
    finally:
        ro.chmod(0o700)


def test_read_only_filesystem_is_refused(tmp_path, monkeypatch):
    import builtins

    real = builtins.open

    def ro_open(path, mode="r", *a, **k):
        if "w" in mode and ".ragen2-write-probe" in str(path):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real(path, mode, *a, **k)

    monkeypatch.setattr(builtins, "open", ro_open)
    with pytest.raises(RunDirError, match="is not writable: Read-only file system"):
        check_run_dir(tmp_path)


def test_nearly_full_disk_is_refused(tmp_path, monkeypatch):
    import ragen2.train as train_mod

    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(train_mod.shutil, "disk_usage",
                        lambda p: usage._replace(free=12 * 2**20))
    with pytest.raises(RunDirError, match=rf"run directory {tmp_path} has only 12.0 MiB free "
                                          r"\(at least 100 MiB needed"):
        check_run_dir(tmp_path)


def test_cli_refuses_a_bad_run_dir_with_status_2(tmp_path, capsys):
    """No run: refused before anything starts."""
    from ragen2.train import main

    (tmp_path / "file").write_text("x")
    with pytest.raises(SystemExit) as e:
        main([f"hydra.run.dir={tmp_path}/file/run", "trainer.total_steps=1"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "ragen2-train: error: run directory" in err and "Not a directory" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("exc, text", [
    (checkpoint.CheckpointWriteError("writing the step 4 checkpoint failed: No space"), "step 4"),
    (OSError(errno.ENOSPC, "No space left on device", "metrics.jsonl"), "Latest checkpoint: none"),
])
def test_cli_exits_1_when_the_disk_fills_during_the_run(tmp_path, monkeypatch, capsys, exc, text):
    """No run: ``train`` is replaced by a function that raises."""
    import ragen2.train as train_mod

    def fail(cfg, run_dir):
        raise exc

    monkeypatch.setattr(train_mod, "train", fail)
    monkeypatch.setattr(sys, "argv", ["ragen2-train"])
    with pytest.raises(SystemExit) as e:
        train_mod.main([f"hydra.run.dir={tmp_path}", "hydra/job_logging=none",
                        "hydra/hydra_logging=none"])
    assert e.value.code == 1
    err = capsys.readouterr().err
    assert "ragen2-train: error:" in err and text in err and "Traceback" not in err


def test_an_early_stop_ends_the_run_with_an_evaluation_and_a_checkpoint(tmp_path, monkeypatch):
    """Spread 0.4 at step 1 then 0.05 (< 0.25 x 0.4): the third low step, step 4, stops the run
    (of 10), evaluated and checkpointed there, with the count saved for a resume."""
    spreads = {1: 0.4, 2: 0.05, 3: 0.05, 4: 0.05}
    fake = fake_controller({})
    train_step = fake.train_step

    def with_spread(self, step):
        result = train_step(self, step)
        result.reward_spread = spreads.get(step, 0.05)
        return result

    monkeypatch.setattr(fake, "train_step", with_spread)
    monkeypatch.setattr(controller, "Controller", fake)
    fake.trained = []
    cfg = _cfg("trainer.total_steps=10", "trainer.save_every=0",
               "trainer.early_stop.spread_frac=0.25", "trainer.early_stop.spread_patience=3")
    summary = controller.run(cfg, tmp_path, "unused")
    assert fake.trained == [1, 2, 3, 4]
    assert summary["steps"] == 4 and "below 0.25 x its first-step value 0.4" in summary["early_stop"]
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["step"] == 4 and rows[-1]["eval/success"] == 0.5
    assert rows[-1]["trainer/early_stop"] == 1.0
    assert _steps(tmp_path) == ["latest.json", "step_000004"]
    state = checkpoint.read_state(checkpoint.latest(tmp_path))
    assert state["early_stop"] == {"start_spread": 0.4, "low_spread_steps": 3, "low_evals": 0}
