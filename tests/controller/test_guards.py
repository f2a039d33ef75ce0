"""ragen2/controller/guards.py: the stop rules for steps that train nothing, counted by hand."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ragen2.config import Config
from ragen2.controller.guards import (TrainingStopped, count_nonfinite, count_skips,
                                      preempted_message)
from ragen2.run_state import RunState, StepResult, UpdateOutcome


class _Logger:
    def __init__(self) -> None:
        self.rows: list[tuple[int, dict]] = []

    def log(self, step: int, row: dict) -> None:
        self.rows.append((step, dict(row)))


def test_count_nonfinite_counts_in_a_row_and_stops_at_the_limit():
    assert count_nonfinite(0, True, 3, "step 1", "k") == 1
    assert count_nonfinite(1, True, 3, "step 2", "k") == 2
    assert count_nonfinite(2, False, 3, "step 3", "k") == 0  # a clean update resets the count
    with pytest.raises(TrainingStopped, match=r"step 9: 3 consecutive updates skipped .*\(k; "
                                              r"trainer.max_nonfinite_steps=3\).*: lower it"):
        count_nonfinite(2, True, 3, "step 9", "k", advice="lower it")


def _cfg(max_skipped: int = 2, max_nonfinite: int = 2) -> Config:
    cfg = Config()
    return replace(cfg, trainer=replace(cfg.trainer, max_skipped_steps=max_skipped,
                                        max_nonfinite_steps=max_nonfinite))


def test_count_skips_adds_the_total_and_stops_after_the_limit():
    cfg, state, logger = _cfg(), RunState(), _Logger()
    count_skips(cfg, state, 1, StepResult({}, None), logger)  # the filter kept nothing
    row = {}
    count_skips(cfg, state, 2, StepResult(row, UpdateOutcome(1, 0)), logger)
    assert (state.skipped_in_row, state.skipped_total, row["filter/skipped_steps"]) == (0, 1, 1)
    count_skips(cfg, state, 3, StepResult({}, None), logger)
    assert logger.rows == []  # nothing stopped: the loop logs the rows itself
    with pytest.raises(TrainingStopped, match="2 consecutive steps kept no group"):
        count_skips(cfg, state, 4, StepResult({"x": 1.0}, None), logger)
    assert logger.rows == [(4, {"x": 1.0, "filter/skipped_steps": 3})]  # logged before stopping
    assert state.skipped_total == 3


def test_count_skips_stops_after_nonfinite_updates():
    cfg, state, logger = _cfg(max_nonfinite=2), RunState(), _Logger()
    count_skips(cfg, state, 1, StepResult({}, UpdateOutcome(0, 1)), logger)
    assert state.nonfinite_in_row == 1 and state.skipped_in_row == 0  # it trained (nothing)
    with pytest.raises(TrainingStopped, match="step 2: 2 consecutive updates skipped"):
        count_skips(cfg, state, 2, StepResult({"y": 2.0}, UpdateOutcome(0, 1)), logger)
    assert logger.rows == [(2, {"y": 2.0})]


def test_preempted_message_names_the_checkpoint_and_the_resume(tmp_path):
    msg = preempted_message("SIGUSR1", 7, tmp_path)
    assert msg == (f"SIGUSR1: stopped after step 7; latest checkpoint none. Resume: the same "
                   f"command with hydra.run.dir={tmp_path} trainer.resume=true")
