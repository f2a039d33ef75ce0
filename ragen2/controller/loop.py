"""The training loop: warm start, then per step rollouts -> watch -> filter -> update -> push.

:class:`Controller` composes the run's components, each owning one job and its own checkpoint
state: the actors (:mod:`.actors`), the problems each kind of episode draws (:mod:`.problems`),
the steps' batches and the queue of batches generated ahead (:mod:`.rollouts`), the policy the
engines hold (:mod:`.weights`), the watch (:mod:`.watch`: monitor, panels, alert, rollback,
diagnosis), the warm start (:mod:`.warm_start`), the evaluation (:mod:`.evaluation`) and the
checkpoints (:mod:`.checkpoints`). It owns no model: everything a step needs is derived from
(seed, step) so a resumed run continues exactly. :func:`run` drives the steps.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from ragen2.batch import TrainingBatch
from ragen2.config import Config
from ragen2.controller.actors import Actors
from ragen2.controller.checkpoints import Checkpoints
from ragen2.controller.episodes import batch_metrics
from ragen2.controller.evaluation import Evaluator
from ragen2.controller.guards import count_skips, preempted_message
from ragen2.controller.problems import Problems
from ragen2.controller.rollouts import RolloutSource
from ragen2.controller.warm_start import WarmStart
from ragen2.controller.watch import Watch
from ragen2.controller.weights import Weights
from ragen2.early_stop import EarlyStop
from ragen2.filtering.pipeline import FilterPipeline, Selection
from ragen2.learner import checkpoint
from ragen2.metrics import MetricsLogger
from ragen2.preempt import StopSignal
from ragen2.rollout.archive import save_rollouts
from ragen2.rollout.trajectory import Trajectory, collate
from ragen2.run_state import RunState, StepResult

log = logging.getLogger("ragen2")


class Controller:
    def __init__(self, cfg: Config, run_dir: Path, model_path: str) -> None:
        from ragen2.models.loading import load_tokenizer

        self.cfg, self.run_dir = cfg, Path(run_dir)
        self.actors = Actors(cfg, model_path)
        tokenizer = load_tokenizer(model_path, trust_remote_code=cfg.model.trust_remote_code)
        eos = tokenizer.eos_token_id
        self.eos_text = tokenizer.decode([eos]) if eos is not None else None
        self.weights = Weights(cfg, self.actors, len(tokenizer))
        self.actors.on_restart = self.weights.resync
        self.problems = Problems(cfg)
        self.filter = FilterPipeline(cfg.filter, cfg.seed, [e.share for e in self.problems.train_envs])
        self.rollouts = RolloutSource(cfg, self.problems, self.filter, self.actors)
        self.checkpoints = Checkpoints(cfg, self.run_dir, self.actors.learners, self.rollouts)
        self.watch = Watch(cfg, self.problems, self.actors, self.run_dir, self.eos_text,
                           self.restore, self.checkpoints.healthy)
        self.warm_start = WarmStart(cfg, model_path, self.problems, self.actors)
        self.evaluator = Evaluator(cfg, self.problems, self.actors, self.run_dir)

    def train_step(self, step: int) -> StepResult:
        """One RL step: rollouts, watch, filter, update, push. Its ``update`` is None when the
        filter kept no group (nothing was trained)."""
        import ray

        t0 = time.perf_counter()
        batch, ahead = self.rollouts.next(step, self.weights.version)  # k >= 1: the next ones start
        t_roll = time.perf_counter() - t0
        per_env = len(self.problems.train_envs) > 1
        metrics = batch_metrics(batch, per_env) | self.watch.on_batch(step, batch.trajs)
        trajs = [t for t in batch.trajs if t.env_error is None]  # counted above, never trained on
        selection = self.filter.select(trajs, step, batch.group_keys)
        metrics |= selection.metrics
        self.save_rollouts(step, trajs, selection)
        metrics |= ahead.metrics | self.rollouts.staleness(trajs, self.weights.version)
        if not any(t.group_id in selection.kept for t in trajs):
            metrics |= self.rollouts.finish(ahead, None)[0]  # the engines hold the learner's version
            return StepResult(metrics, None, selection.reward_spread)
        metrics |= self.watch.grad_snr(step, trajs)
        training = training_batch(self.filter, trajs, selection, batch.group_keys)
        t1 = time.perf_counter()
        self.actors.sleep_engines()
        with self.weights.updating():  # the learner moves on; the engines keep the old weights
            result = self.actors.learners.update(ray.put(training), step)
            t_upd = time.perf_counter() - t1
            ahead_metrics, wait_s = self.rollouts.finish(ahead, (t1, t1 + t_upd))
        metrics |= result.metrics | ahead_metrics | self.weights.push()
        metrics |= {"timing/rollout_s": t_roll + wait_s, "timing/env_s": batch.stats.get("env_s", 0.0),
                    "timing/generate_s": batch.stats.get("generate_s", 0.0),
                    "timing/update_s": t_upd, "timing/step_s": time.perf_counter() - t0}
        return StepResult(metrics, result.outcome, selection.reward_spread)

    def save_rollouts(self, step: int, trajs: list[Trajectory], selection: Selection) -> None:
        """The step's unfiltered batch to ``rollouts/`` where due (``trainer.save_rollouts_every``)."""
        tr = self.cfg.trainer
        if tr.save_rollouts_every and step % tr.save_rollouts_every == 0:
            save_rollouts(self.run_dir, step, trajs, selection.kept, tr.save_rollouts_max_mb,
                          self.eos_text)

    def restore(self, target: Path) -> str:
        """A collapse rollback to checkpoint ``target``: its learner (weights, optimiser,
        reference, RNG, version) pushed to the engines, the batches ahead dropped, the filter
        stronger (``FilterPipeline.strengthen``). Steps keep counting on."""
        self.weights.version = self.actors.learners.load(str(target))
        self.rollouts.drop_ahead()
        self.weights.push()
        change = self.filter.strengthen(self.cfg.monitor.rollback_filter_factor)
        return (f"rolled back to {target.name} (policy version {self.weights.version}) and "
                f"continue with a stronger filter: {change}")

    def save(self, step: int, state: RunState) -> Path:
        """The checkpoint of ``step``, with every component's state (:meth:`state_dict`)."""
        return self.checkpoints.save(step, replace(state, controller=self.state_dict()),
                                     self.weights.version)

    def state_dict(self) -> dict[str, Any]:
        """The controller state of each checkpoint (JSON): the filter's history, the watch's
        (monitor EMA, run health, panel verdict, alert, rollbacks), the probe's floor and, with
        bounded staleness, ``rollout_queue`` (whose trajectories the checkpoint holds beside)."""
        return {"filter": self.filter.state_dict(), **self.watch.state_dict(),
                **self.weights.state_dict(), **self.rollouts.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.filter.load_state_dict(state["filter"])
        self.watch.load_state_dict(state)
        self.weights.load_state_dict(state)

    def shutdown(self) -> None:
        self.actors.shutdown()


def training_batch(pipeline: FilterPipeline, trajs: list[Trajectory], selection: Selection,
                   group_keys: dict[int, int] | None) -> TrainingBatch:
    """The kept groups' episodes collated, with the filter's sample weights, regulariser
    weights and loss scale (the share of the batch's groups kept)."""
    kept = [t for t in trajs if t.group_id in selection.kept]
    n_groups = len({t.group_id for t in trajs})
    weights = pipeline.sample_weights(kept, group_keys)
    return replace(collate(kept), sample_weights=weights,
                   regulariser_weights=pipeline.regulariser_weights(weights),
                   loss_scale=pipeline.loss_scale(len(selection.kept) / max(n_groups, 1)))


def run(cfg: Config, run_dir: Path, model_path: str) -> dict[str, Any]:
    """Train according to ``cfg`` in ``run_dir``; returns the summary also written to summary.json.

    Before RL (:func:`_before_rl`), or from the newest checkpoint (:func:`_resume`), the policy is
    pushed to the engines; then every step trains (:meth:`Controller.train_step`), counts the
    steps that trained nothing (:func:`ragen2.controller.guards.count_skips`), folds in the early
    stops, measures the panel, evaluates where due (:func:`_evaluate`), feeds the collapse alert,
    logs its row and writes the checkpoint that is due (:func:`_checkpoint`). Every decision
    reads the typed state and outcomes of :mod:`ragen2.run_state`.
    """
    t_start = time.perf_counter()
    tr = cfg.trainer
    from ragen2.budget import warn_budget

    warn_budget(cfg)  # settings too slow to act within trainer.total_steps (logged, not refused)
    run_dir.mkdir(parents=True, exist_ok=True)
    ckpt = checkpoint.latest(run_dir) if tr.resume else None
    if tr.resume and ckpt is None:
        log.warning("trainer.resume=true but %s has no checkpoint: starting from scratch", run_dir)
    state = RunState.from_dict(checkpoint.read_state(ckpt)) if ckpt else RunState()
    start = state.step

    ctl = Controller(cfg, run_dir, model_path)
    logger = MetricsLogger(tr.loggers, run_dir, resume_step=start if ckpt else -1,
                           total_steps=tr.total_steps, start_step=start,
                           project=tr.wandb_project, config=asdict(cfg))
    # SIGUSR1 / SIGTERM (a SLURM time limit, preemption): finish the step, checkpoint, stop
    stop_signal = StopSignal().__enter__()
    try:
        if ckpt:
            _resume(ctl, ckpt, state)
        else:
            state = _before_rl(ctl, logger)

        save_pending = False
        stopper = EarlyStop(**asdict(tr.early_stop))
        stopper.load_state_dict(state.early_stop or {})
        stop_reason, last_step = None, start
        for step in range(start + 1, tr.total_steps + 1):
            if stop_signal.received:  # arrived before the first step: nothing new to save
                raise stop_signal.preempted(preempted_message(stop_signal.name, step - 1, run_dir))
            last_step = step
            result = ctl.train_step(step)
            m = result.metrics
            count_skips(cfg, state, step, result, logger)
            if result.reward_spread is not None:
                stop_reason = stopper.step(result.reward_spread)
            measured = None  # the alert instrument's panel measurement at this step
            if ctl.watch.panel_due(step):
                measured, panel_metrics = ctl.watch.measure_panel(step, ctl.weights.version)
                m.update(panel_metrics)
            stop_reason = _evaluate(ctl, state, stopper, step, m, stop_reason)
            collapse = ctl.watch.check_collapse(step, measured)  # may roll the learner back
            m.update(collapse.metrics())
            stop_reason = stop_reason or collapse.stop_reason
            save_pending |= collapse.rolled_back  # resume must see the rollback
            if stop_reason:
                m["trainer/early_stop"] = 1.0
            state.early_stop = stopper.state_dict()
            logger.log(step, m)
            save_pending |= (step == tr.total_steps or stop_reason is not None
                             or stop_signal.received is not None
                             or bool(tr.save_every and step % tr.save_every == 0))
            save_pending = _checkpoint(ctl, state, step, result, save_pending)
            if stop_reason:
                log.info("early stop at step %d: %s", step, stop_reason)
                break
            if stop_signal.received and step < tr.total_steps:
                raise stop_signal.preempted(preempted_message(stop_signal.name, step, run_dir))
        if save_pending:
            log.warning("no checkpoint after step %d: its update skipped optimizer steps for a "
                        "non-finite loss or gradient (latest checkpoint: %s)", last_step,
                        checkpoint.latest(run_dir))
        summary = {"eval_before": state.eval_before, "eval_after": state.eval_last,
                   "steps": last_step if stop_reason else tr.total_steps, "seed": cfg.seed,
                   "wall_s": time.perf_counter() - t_start, "early_stop": stop_reason}
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
        if summary["eval_after"] is not None:
            log.info("held-out success before RL: %.3f  after RL: %.3f  (%d episodes, seed %d)",
                     summary["eval_before"], summary["eval_after"], tr.eval_episodes, cfg.seed)
        return summary
    finally:
        stop_signal.__exit__()
        logger.close()
        ctl.shutdown()


def _resume(ctl: Controller, ckpt: Path, state: RunState) -> None:
    """Load the checkpoint's learner and controller state, then push the policy to the engines."""
    ctl.weights.version = ctl.actors.learners.load(str(ckpt))
    if ctl.weights.version != state.policy_version:
        raise RuntimeError(f"{ckpt}: learner version {ctl.weights.version} != trainer state "
                           f"{state.policy_version}")
    if state.controller is not None:
        ctl.load_state_dict(state.controller)
    ctl.rollouts.load(ckpt, state.controller)
    ctl.weights.push()
    log.info("resumed from %s (step %d)", ckpt, state.step)


def _before_rl(ctl: Controller, logger: MetricsLogger) -> RunState:
    """Step 0: the warm start, the first push, held-out success before RL and the panel (whose
    measurement makes the warm start a rollback target); returns the fresh run state."""
    cfg = ctl.cfg
    tr = cfg.trainer
    row: dict[str, float] = {}
    if tr.warm_start.enabled:
        row.update(ctl.warm_start.run())
    row.update(ctl.weights.push())
    before = ctl.evaluator.evaluate(0, ctl.weights.version)
    row.update(before.metrics)
    ctl.watch.record_eval(0, before.success)
    state = RunState(eval_before=before.success)
    log.info("held-out success before RL: %.3f (%d episodes)", before.success, tr.eval_episodes)
    if ctl.watch.panel_due(0):
        measured, panel_metrics = ctl.watch.measure_panel(0, ctl.weights.version)
        row.update(panel_metrics)
        row.update(ctl.watch.check_collapse(0, measured).metrics())
        if cfg.monitor.on_collapse == "rollback":  # the warm start: a rollback target
            ctl.save(0, state)
    logger.log(0, row)
    return state


def _evaluate(ctl: Controller, state: RunState, stopper: EarlyStop, step: int,
              m: dict[str, float], stop_reason: str | None) -> str | None:
    """The held-out evaluation where it is scheduled or the run stops early (a run that stops
    early is measured where it ended), with the diagnosis; adds both to ``m``. Returns the stop
    reason, the success floor's (``trainer.early_stop.eval_floor``) included."""
    tr = ctl.cfg.trainer
    scheduled = step == tr.total_steps or bool(tr.eval_every and step % tr.eval_every == 0)
    if not (scheduled or stop_reason):
        return stop_reason
    ev = ctl.evaluator.evaluate(step, ctl.weights.version)
    m.update(ev.metrics)
    log.info("step %d: held-out success %.3f (%d episodes)", step, ev.success, tr.eval_episodes)
    m.update(ctl.watch.diagnose(ev.success))
    if tr.eval_every and step % tr.eval_every == 0:  # the periodic ones only: an
        ctl.watch.record_eval(step, ev.success)  # end-of-segment one would break resume
    state.eval_last = ev.success
    if scheduled:
        stop_reason = stop_reason or stopper.evaluation(ev.success)
    return stop_reason


def _checkpoint(ctl: Controller, state: RunState, step: int, result: StepResult,
                pending: bool) -> bool:
    """Write the pending checkpoint after ``step``, unless its update met a nan/inf (it then
    waits for a clean step); whether one is still pending."""
    if not pending:
        return False
    if result.update is not None and result.update.nonfinite_skipped > 0:
        log.warning("step %d: checkpoint postponed, %d optimizer step(s) skipped for a "
                    "non-finite loss or gradient (latest checkpoint: %s)", step,
                    result.update.nonfinite_skipped, checkpoint.latest(ctl.run_dir))
        return True
    ctl.save(step, state)
    return False
