"""The watch over a run: the batch's grounding and MI monitor, the probe panels, the collapse
alert and what it does (``monitor.on_collapse``: warn, stop, or roll back to a healthy
checkpoint), the gradient SNR by reward spread, and the diagnosis at each evaluation. Its
checkpoint state: the monitor's EMA, the run health, the last panel verdict, the alert, the
rollback count."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from ragen2.config import Config
from ragen2.controller.episodes import group_rewards, success_rate
from ragen2.controller.panels import Panels
from ragen2.controller.problems import Problems
from ragen2.filtering.scores import GroupBatch, reward_std
from ragen2.rollout.trajectory import Trajectory, collate
from ragen2.run_state import CollapseCheck, Health, PanelVerdict

if TYPE_CHECKING:
    from ragen2.collapse.panel import PanelMeasurement

log = logging.getLogger("ragen2")


class Watch:
    """``restore(checkpoint)`` rolls the run back to a checkpoint (its message);
    ``healthy_checkpoint()`` finds the newest one the panel measured healthy."""

    def __init__(self, cfg: Config, problems: Problems, actors: Any, run_dir: Path,
                 eos_text: str | None, restore: Callable[[Path], str],
                 healthy_checkpoint: Callable[[], Path | None]) -> None:
        from ragen2.collapse.alert import CollapseAlert
        from ragen2.collapse.instrument import resolve_instrument

        self.cfg, self.actors = cfg, actors
        self.restore, self.healthy_checkpoint = restore, healthy_checkpoint
        self.monitor = None
        m = cfg.monitor
        if m.name == "mi" and m.every > 0:
            from ragen2.collapse.monitor import MIMonitor

            self.monitor = MIMonitor(m.every, m.max_negatives, m.permutations, m.ema, cfg.seed,
                                     m.turn_negatives, m.turn_uniform, action_mi=m.action_mi,
                                     min_samples=m.min_samples)
        self.panels = Panels(cfg, problems, actors, run_dir, eos_text)
        #: what the alert and the diagnosis read: first_turn | later_turns (collapse/instrument.py)
        self.instrument = resolve_instrument(m.alert_instrument, self.panels.turns is not None)
        if m.name == "mi":
            log.info("collapse alert and diagnosis read the %s MI (monitor.alert_instrument=%s)",
                     self.instrument.replace("_", " "), m.alert_instrument)
        self.alert = CollapseAlert(m.alert_patience, m.alert_min_gain)
        self.verdict: PanelVerdict | None = None  # the last panel measurement's
        self.rollbacks = 0
        self.health = Health()

    def on_batch(self, step: int, trajs: Sequence[Trajectory]) -> dict[str, float]:
        """A step's batch, unfiltered: its success joins the run health; the episodes that ran
        give the reasoning's grounding (every step) and the batch MI (where due)."""
        self.health.train_success = (self.health.train_success + [success_rate(trajs)])[-5:]
        ran = [t for t in trajs if t.env_error is None]
        m, mon = {}, self.cfg.monitor
        if mon.name == "mi":  # every step: the envs' ground hooks cost nothing
            from ragen2.collapse.grounding import batch_grounding

            m.update(batch_grounding(ran, step, min_samples=mon.min_samples,
                                     resamples=mon.panel_bootstrap, seed=self.cfg.seed))
        if self.monitor is not None and self.monitor.due(step):
            t1 = time.perf_counter()
            collapse = self.monitor.measure(ran, self.actors.learners.score, step)
            m.update(collapse.metrics)
            m["timing/monitor_s"] = time.perf_counter() - t1
            if collapse.metrics:
                self.health.collapse = collapse.metrics
            if self.health.entropy_ref is None:  # the policy's entropy when RL starts
                self.health.entropy_ref = collapse.token_entropy
        return m

    def grad_snr(self, step: int, trajs: list[Trajectory]) -> dict[str, float]:
        """Where due (``monitor.grad_snr_every``): gradient norms of the task / entropy / KL terms
        per reward-spread bucket (bucket 0: the groups without spread; then by rank,
        :func:`ragen2.collapse.grad_snr.spread_buckets`)."""
        every = self.cfg.monitor.grad_snr_every
        if not (every and step % every == 0):
            return {}
        import ray

        from ragen2.collapse.grad_snr import spread_buckets

        batch = GroupBatch.from_group_rewards(group_rewards(trajs))
        stds = reward_std(batch).numpy()  # σ_g as the filter computes it
        buckets = spread_buckets(stds, self.cfg.monitor.grad_snr_buckets)
        bucket_of = dict(zip(batch.groups, buckets.tolist()))
        rows = np.array([bucket_of[t.group_id] for t in trajs])
        out = self.actors.learners.grad_snr(ray.put(collate(trajs)), rows)
        for b in sorted(set(rows.tolist())):
            out[f"grad_snr/b{b}/reward_std"] = float(stds[buckets == b].mean())
        return out

    def panel_due(self, step: int) -> bool:
        return self.panels.due(step)

    def measure_panel(self, step: int, version: int
                      ) -> tuple[PanelMeasurement | None, dict[str, float]]:
        """(the alert instrument's measurement, None when its panel is off; the metrics)."""
        from ragen2.collapse.instrument import alert_measurement

        first, later, m = self.panels.measure(step, version)
        if later is not None:
            self.health.panel_turns = later.metrics
            if self.health.grounding_ref is None:  # the grounding the diagnosis compares with
                self.health.grounding_ref = later.metrics.get(
                    "collapse/panel/turns/grounding/frac")
        measured = alert_measurement(self.instrument, first, later)
        if measured is not None and measured.healthy is not None:
            self.verdict = PanelVerdict(step, measured.healthy)
        return measured, m

    def record_eval(self, step: int, success: float) -> None:
        """A held-out evaluation, for the collapse alert's stall test."""
        self.alert.observe_eval(step, success)

    def check_collapse(self, step: int, measured: PanelMeasurement | None) -> CollapseCheck:
        """Feed this step's measurement of the alert's instrument (None: none at this step) to
        the alert; on an alert act as ``monitor.on_collapse`` says (``stop``: a stop reason;
        ``rollback``: the learner goes back to the newest healthy checkpoint)."""
        if measured is None:  # no panel measurement of the instrument at this step
            return CollapseCheck()
        evidence = self.alert.observe_panel(step, measured.mi_lo, measured.mi_floor)
        if evidence is None:
            return CollapseCheck(measured=True)
        mon = self.cfg.monitor
        log.warning("collapse alert at step %d: %s", step, evidence)
        if mon.on_collapse == "stop":
            return CollapseCheck(True, evidence, stop_reason=f"collapse alert: {evidence}")
        rolled_back = False
        if mon.on_collapse == "rollback":
            if step >= self.cfg.trainer.total_steps:
                log.warning("no rollback at the last step (nothing is left to train)")
            elif self.rollbacks >= mon.max_rollbacks:
                log.warning("no rollback: monitor.max_rollbacks=%d reached", mon.max_rollbacks)
            elif (target := self.healthy_checkpoint()) is None:
                log.warning("no rollback: no kept checkpoint has a healthy panel MI "
                            "(raise trainer.keep_checkpoints or save more often)")
            else:
                message = self.restore(target)
                self.rollbacks += 1
                # the weights the run continues from are the ones the panel measured healthy
                self.verdict = PanelVerdict(step, True)
                log.warning("%s", message)
                rolled_back = True
        return CollapseCheck(True, evidence, rolled_back=rolled_back, rollbacks=self.rollbacks)

    def diagnose(self, eval_success: float) -> dict[str, Any]:
        """Classify the run at an evaluation; printed when the label changes."""
        from ragen2.collapse.diagnosis import DIAGNOSIS_CODES, diagnose
        from ragen2.collapse.instrument import diagnosis_inputs, grounding_inputs

        h = self.health
        source = h.collapse if self.instrument == "first_turn" else h.panel_turns
        d = diagnose(**diagnosis_inputs(self.instrument, source),
                     **grounding_inputs(self.instrument, source, h.grounding_ref),
                     token_entropy=h.collapse.get("collapse/token_entropy"),
                     entropy_ref=h.entropy_ref,
                     train_success=float(np.mean(h.train_success)) if h.train_success else None,
                     eval_success=eval_success)
        if d.label != h.label:
            log.info("diagnosis: %s: %s", d.label, d.evidence)
            h.label = d.label
        return {"collapse/diagnosis": float(DIAGNOSIS_CODES[d.label])}

    def state_dict(self) -> dict[str, Any]:
        """``monitor``, ``health``, ``panel`` (its verdict marks a rollback target), ``alert``,
        ``rollbacks``: the keys of the controller state they always were."""
        return {"monitor": self.monitor.state_dict() if self.monitor is not None else None,
                "health": self.health.to_dict(),
                "panel": self.verdict.to_dict() if self.verdict else None,
                "alert": self.alert.state_dict(), "rollbacks": self.rollbacks}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.monitor is not None and state.get("monitor") is not None:
            self.monitor.load_state_dict(state["monitor"])
        self.health = Health.from_dict(state["health"])
        self.verdict = PanelVerdict.from_dict(state.get("panel"))
        if state.get("alert") is not None:
            self.alert.load_state_dict(state["alert"])
        self.rollbacks = int(state.get("rollbacks", 0))
