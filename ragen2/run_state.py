"""The training loop's typed state, and the typed outcomes its decisions read.

:class:`RunState` is what a checkpoint's ``trainer_state.json`` holds and a resumed run starts
from; :class:`Health` and :class:`PanelVerdict` are the controller's own saved state (under its
``controller`` key). The outcomes (:class:`UpdateOutcome`, :class:`UpdateResult`, :class:`StepResult`,
:class:`Evaluation`, :class:`CollapseCheck`) carry what a step decided or measured: the loop
decides from their fields, and the metrics it logs are made from them, never read back.

The JSON keys are the ones the dict-based loop wrote, so older checkpoints resume (keys it wrote
only later, such as ``nonfinite_in_row``, take their defaults). This module imports nothing from
ragen2.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Health:
    """The run diagnosis's inputs (:mod:`ragen2.collapse.diagnosis`), kept between evaluations."""

    #: the batch monitor's token entropy at its first measurement: the policy's when RL starts
    entropy_ref: float | None = None
    #: rollout success of the last (up to) 5 RL steps
    train_success: list[float] = field(default_factory=list)
    #: the batch monitor's newest ``collapse/*`` measurement (the first-turn instrument's MI)
    collapse: dict[str, float] = field(default_factory=dict)
    #: the diagnosis label last printed (a new one is logged when it changes)
    label: str | None = None
    #: the later-turn panel's newest ``collapse/panel/turns/*`` measurement
    panel_turns: dict[str, float] = field(default_factory=dict)
    #: the later-turn panel's grounding at its first measured value (step 0: before RL)
    grounding_ref: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Health:
        """From :meth:`to_dict`'s JSON; a checkpoint older than ``panel_turns`` gets ``{}``, one
        older than ``grounding_ref`` None."""
        return cls(entropy_ref=d.get("entropy_ref"), train_success=list(d.get("train_success", [])),
                   collapse=dict(d.get("collapse") or {}), label=d.get("label"),
                   panel_turns=dict(d.get("panel_turns") or {}),
                   grounding_ref=d.get("grounding_ref"))


@dataclass(frozen=True)
class PanelVerdict:
    """Whether the panel measured the policy of ``step`` healthy (its MI interval cleared the
    floor); a checkpoint written at that step is a collapse rollback target."""

    step: int
    healthy: bool

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, "healthy": self.healthy}

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> PanelVerdict | None:
        return None if d is None else cls(int(d["step"]), bool(d["healthy"]))


@dataclass
class RunState:
    """The training loop's counters: ``trainer_state.json`` of each checkpoint."""

    #: the RL step the checkpoint was written after (0: before RL)
    step: int = 0
    #: the learner's policy version then (a resume checks the loaded learner against it)
    policy_version: int = 0
    #: held-out success before RL
    eval_before: float | None = None
    #: the newest held-out success after RL started (None before the first such evaluation)
    eval_last: float | None = None
    #: consecutive steps whose filter kept no group (``trainer.max_skipped_steps`` stops the run)
    skipped_in_row: int = 0
    #: steps whose filter kept no group, over the run (``filter/skipped_steps``)
    skipped_total: int = 0
    #: consecutive updates that applied no optimiser step (``trainer.max_nonfinite_steps``)
    nonfinite_in_row: int = 0
    #: :meth:`ragen2.early_stop.EarlyStop.state_dict` (None before the loop starts)
    early_stop: dict[str, Any] | None = None
    #: :meth:`ragen2.controller.loop.Controller.state_dict` (filter, monitor, health, alert, ...)
    controller: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON object; keys left None are left out, as the dict-based loop left them."""
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunState:
        """From ``trainer_state.json``, this version's or an older one's (missing keys take
        their defaults; keys this version does not know are ignored)."""
        return cls(step=int(d.get("step", 0)), policy_version=int(d.get("policy_version", 0)),
                   eval_before=_opt_float(d.get("eval_before")),
                   eval_last=_opt_float(d.get("eval_last")),
                   skipped_in_row=int(d.get("skipped_in_row", 0)),
                   skipped_total=int(d.get("skipped_total", 0)),
                   nonfinite_in_row=int(d.get("nonfinite_in_row", 0)),
                   early_stop=d.get("early_stop"), controller=d.get("controller"))


def _opt_float(v: Any) -> float | None:
    return None if v is None else float(v)


@dataclass(frozen=True)
class UpdateOutcome:
    """What one learner update did, as the loop decides on it."""

    #: optimiser steps applied (0: every mini-batch met a nan/inf loss or gradient norm)
    optimizer_steps: int
    #: mini-batches skipped whole for a nan/inf loss or gradient norm (a step with any is not
    #: checkpointed)
    nonfinite_skipped: int


@dataclass(frozen=True)
class UpdateResult:
    """What the learner returns for one update (or one warm-start step): the metrics to log, and
    its outcome, which is what the loop decides on (:class:`ragen2.learner.group.LearnerGroup`)."""

    metrics: dict[str, float]
    outcome: UpdateOutcome


@dataclass
class StepResult:
    """One RL step (:meth:`ragen2.controller.loop.Controller.train_step`)."""

    #: everything to log for the step (rollout/, filter/, actor/, sync/, timing/, ...)
    metrics: dict[str, float]
    #: the learner's update; None when the filter kept no group (nothing was trained)
    update: UpdateOutcome | None = None
    #: the batch's mean in-group reward spread (the early stop's input); None without episodes
    reward_spread: float | None = None

    @property
    def trained(self) -> bool:
        return self.update is not None


@dataclass(frozen=True)
class Evaluation:
    """A held-out evaluation: its success rate and its ``eval/*`` metrics."""

    success: float
    metrics: dict[str, float]


@dataclass(frozen=True)
class CollapseCheck:
    """The collapse alert's reading of one step (:meth:`ragen2.controller.watch.Watch.check_collapse`)."""

    #: the alert's instrument measured at this step (else nothing below happened)
    measured: bool = False
    #: the alert's evidence when it fired
    alert: str | None = None
    #: why the run stops (``monitor.on_collapse=stop``)
    stop_reason: str | None = None
    #: the learner went back to a healthy checkpoint (``monitor.on_collapse=rollback``)
    rolled_back: bool = False
    #: the run's rollback count, reported after an alert that did not stop the run
    rollbacks: int | None = None

    def metrics(self) -> dict[str, float]:
        """``collapse/alert`` (at a measurement), ``collapse/rollback`` (1 when rolled back) and
        ``collapse/rollbacks``."""
        out: dict[str, float] = {}
        if self.measured:
            out["collapse/alert"] = float(self.alert is not None)
        if self.rolled_back:
            out["collapse/rollback"] = 1.0
        if self.rollbacks is not None:
            out["collapse/rollbacks"] = float(self.rollbacks)
        return out
