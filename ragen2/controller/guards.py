"""The run's stop rules for steps that train nothing: updates skipped whole for a non-finite loss
or gradient (``trainer.max_nonfinite_steps``) and steps whose filter kept no group
(``trainer.max_skipped_steps``), counted in the run state."""

from __future__ import annotations

from pathlib import Path

from ragen2.config import Config
from ragen2.learner import checkpoint
from ragen2.metrics import MetricsLogger
from ragen2.run_state import RunState, StepResult


class TrainingStopped(RuntimeError):
    """Too many consecutive steps had no group left after filtering."""


NONFINITE_ADVICE = ("lower algorithm.lr, set a smaller algorithm.grad_clip, check the env's rewards "
                    "for nan/inf (rollout/reward_mean), or train in model.dtype=float32")


def count_nonfinite(in_row: int, skipped: bool, limit: int, where: str, key: str,
                    advice: str = NONFINITE_ADVICE) -> int:
    """Consecutive updates skipped whole for a non-finite loss or gradient norm, this one included.

    ``skipped``: this update applied no optimiser step (``key`` counts the skipped ones). Raises
    :class:`TrainingStopped` when the count reaches ``limit`` (``trainer.max_nonfinite_steps``).
    """
    in_row = in_row + 1 if skipped else 0
    if in_row >= limit:
        raise TrainingStopped(
            f"{where}: {in_row} consecutive updates skipped for a non-finite (nan/inf) loss or "
            f"gradient norm ({key}; trainer.max_nonfinite_steps={limit}), weights and optimizer "
            f"left as they were and not checkpointed: {advice}")
    return in_row


def count_skips(cfg: Config, state: RunState, step: int, result: StepResult,
                logger: MetricsLogger) -> None:
    """Count the step's update that applied no optimiser step (nan/inf) and the step whose filter
    kept no group; :class:`TrainingStopped` (the step logged first) when either happened too many
    times in a row. Adds ``filter/skipped_steps`` to the step's metrics."""
    tr, m = cfg.trainer, result.metrics
    if result.update is not None:  # the learner skips a mini-batch whose loss or gradient is nan/inf
        try:
            state.nonfinite_in_row = count_nonfinite(
                state.nonfinite_in_row, result.update.optimizer_steps == 0,
                tr.max_nonfinite_steps, f"step {step}", "actor/nonfinite_skipped")
        except TrainingStopped:
            logger.log(step, m)
            raise
    state.skipped_in_row = 0 if result.trained else state.skipped_in_row + 1
    state.skipped_total += 0 if result.trained else 1
    m["filter/skipped_steps"] = state.skipped_total
    if state.skipped_in_row >= tr.max_skipped_steps:
        logger.log(step, m)
        raise TrainingStopped(
            f"{state.skipped_in_row} consecutive steps kept no group after filtering "
            f"(filter.strategy={cfg.filter.strategy}, filter.value={cfg.filter.value}, "
            f"trainer.max_skipped_steps={tr.max_skipped_steps}): loosen the filter "
            "(a higher filter.value, filter.include_zero=true) or raise rollout.group_size")


def preempted_message(signal_name: str, step: int, run_dir: Path) -> str:
    """What a run stopped by a signal (SIGUSR1 / SIGTERM) says, with the resume command."""
    ckpt = checkpoint.latest(run_dir)
    return (f"{signal_name}: stopped after step {step}; latest checkpoint "
            f"{ckpt.name if ckpt else 'none'}. Resume: the same command with "
            f"hydra.run.dir={run_dir} trainer.resume=true")
