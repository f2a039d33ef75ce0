"""ragen2/controller/checkpoints.py: writing, pruning and the rollback target, with stand-in
learners and rollouts that write marker files."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from ragen2.config import Config
from ragen2.controller.checkpoints import Checkpoints
from ragen2.learner import checkpoint
from ragen2.run_state import PanelVerdict, RunState


class _Writer:
    def __init__(self, name: str, fail: bool = False) -> None:
        self.name, self.fail = name, fail

    def save(self, directory) -> None:  # noqa: ANN001
        if self.fail:
            raise OSError(28, "No space left on device")
        (Path(directory) / self.name).write_text("x")


def _checkpoints(tmp_path, keep: int = 1, on_collapse: str = "rollback", fail: bool = False):
    cfg = Config()
    cfg = replace(cfg, trainer=replace(cfg.trainer, keep_checkpoints=keep),
                  monitor=replace(cfg.monitor, on_collapse=on_collapse))
    return Checkpoints(cfg, tmp_path, _Writer("learner", fail), _Writer("queue"))


def _state(healthy_at: int | None) -> RunState:
    verdict = PanelVerdict(healthy_at, True) if healthy_at is not None else None
    return RunState(controller={"panel": verdict.to_dict() if verdict else None})


def test_save_writes_every_part_and_the_run_state(tmp_path):
    c = _checkpoints(tmp_path)
    path = c.save(3, RunState(eval_before=0.5), version=2)
    assert path.name == "step_000003" and {p.name for p in path.iterdir()} >= {"learner", "queue"}
    state = RunState.from_dict(checkpoint.read_state(path))
    assert (state.step, state.policy_version, state.eval_before) == (3, 2, 0.5)
    assert checkpoint.latest(tmp_path) == path


def test_pruning_keeps_the_healthy_rollback_target(tmp_path):
    c = _checkpoints(tmp_path, keep=1)
    c.save(2, _state(healthy_at=2), version=2)  # the panel measured these weights healthy
    c.save(4, _state(healthy_at=2), version=4)  # a verdict of an earlier step: not healthy here
    c.save(6, _state(healthy_at=None), version=6)
    assert [p.name for p in checkpoint.complete(tmp_path)] == ["step_000002", "step_000006"]
    assert c.healthy().name == "step_000002"
    warn = _checkpoints(tmp_path / "warn", keep=1, on_collapse="warn")
    for step in (2, 4):
        warn.save(step, _state(healthy_at=step), version=step)
    assert [p.name for p in checkpoint.complete(tmp_path / "warn")] == ["step_000004"]


def test_a_write_error_keeps_the_previous_checkpoint(tmp_path):
    _checkpoints(tmp_path).save(1, RunState(), version=1)
    with pytest.raises(checkpoint.CheckpointWriteError,
                       match="step 2 checkpoint .* the previous checkpoint step_000001 is intact"):
        _checkpoints(tmp_path, fail=True).save(2, RunState(), version=2)
    assert [p.name for p in checkpoint.checkpoint_root(tmp_path).iterdir()
            if p.name.startswith("step_")] == ["step_000001"]  # the temporary one removed
