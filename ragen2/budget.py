"""Settings that cannot act within the run's budget: one check, warned about at start-up.

A cadence or a patience longer than the run is not an error (the config is valid, a longer run
would use it), but on the run at hand it silently does nothing: tiered SNR thresholds re-estimated
every 100 updates on a 40-step job never move, an alert that needs 3 panel measurements below the
floor and a held-out evaluation after the first of them cannot fire on a run that makes 2.
:func:`budget_warnings` lists every such setting of a typed :class:`ragen2.config.Config`, each
message naming the key, its value, the run's budget and what to set; the trainer logs them
(logger ``ragen2``, level WARNING) before any work starts (:func:`warn_budget`).

The budget: ``trainer.total_steps`` = T RL steps, one update each (the tiered SNR history folds
in one update per step); the probe panel measures at step 0 and at every multiple of
``monitor.every``; held-out evaluations run before RL, at every multiple of
``trainer.eval_every`` and at the end, and only the periodic ones (and step 0) count for the
collapse alert (:mod:`ragen2.collapse.alert`).
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("ragen2")

__all__ = ["alert_can_fire", "budget_warnings", "warn_budget"]


def _multiples(every: int, total: int) -> list[int]:
    """Steps 1..total that are multiples of ``every`` (none when every <= 0)."""
    return list(range(every, total + 1, every)) if every > 0 else []


def alert_can_fire(panel_steps: list[int], eval_steps: list[int], patience: int) -> bool:
    """Whether some window of ``patience`` consecutive panel measurements has a recorded
    held-out evaluation after its first step and at or before its last (the alert's condition to
    judge a stall; :class:`ragen2.collapse.alert.CollapseAlert`). Steps ascending."""
    for j in range(patience - 1, len(panel_steps)):
        first, last = panel_steps[j - patience + 1], panel_steps[j]
        if any(first < s <= last for s in eval_steps):
            return True
    return False


def budget_warnings(cfg: Any) -> list[str]:
    """One message per setting of ``cfg`` (a :class:`ragen2.config.Config`) that cannot act
    within ``trainer.total_steps``; [] when every one can."""
    tr, m, t = cfg.trainer, cfg.monitor, cfg.filter.tiered
    total = tr.total_steps
    run = f"this run makes {total} RL steps (trainer.total_steps={total})"
    out: list[str] = []
    if t.enabled and t.reestimate_every >= total:
        out.append(f"filter.tiered.reestimate_every={t.reestimate_every} >= the {total} updates "
                   f"this run makes (trainer.total_steps={total}): the SNR grade thresholds never "
                   "move from "
                   f"{t.low_threshold:g} / {t.high_threshold:g}; set filter.tiered."
                   f"reestimate_every to at most {max(1, total // 4)} (several re-estimates per run)")
    monitor_on = m.name == "mi"
    if monitor_on and m.every > total:
        out.append(f"monitor.every={m.every} > trainer.total_steps={total}: the MI monitor "
                   "measures at step 1 only and the probe panel at step 0 only; set "
                   f"monitor.every to at most {max(1, total // 4)}")
    if tr.eval_every > total:
        out.append(f"trainer.eval_every={tr.eval_every} > trainer.total_steps={total}: held-out "
                   "success is measured only before and after RL (one diagnosis, and the collapse "
                   "alert, which waits for a periodic evaluation, cannot fire); set "
                   f"trainer.eval_every to at most {max(1, total // 2)}")
    panel_on = monitor_on and m.panel_size > 0
    if panel_on:
        panel_steps = [0, *_multiples(m.every, total)]
        eval_steps = [0, *_multiples(tr.eval_every, total)]
        if not alert_can_fire(panel_steps, eval_steps, m.alert_patience):
            fits = [k for k in range(2, len(panel_steps) + 1)
                    if alert_can_fire(panel_steps, eval_steps, k)]
            fix = (f"set monitor.alert_patience to at most {fits[-1]}" if fits else
                   "set monitor.every and trainer.eval_every so that evaluations fall between "
                   "panel measurements")
            out.append(
                f"monitor.alert_patience={m.alert_patience}: {run} with {len(panel_steps)} probe "
                f"panel measurements (steps {_steps(panel_steps)}, monitor.every={m.every}) and "
                f"periodic held-out evaluations at steps {_steps(eval_steps)} "
                f"(trainer.eval_every={tr.eval_every}); the collapse alert needs "
                f"{m.alert_patience} measurements in a row below the floor with an evaluation "
                "after the first of them, so it cannot fire (monitor.on_collapse="
                f"{m.on_collapse} never acts): {fix}")
    if tr.save_every > total:
        out.append(f"trainer.save_every={tr.save_every} > trainer.total_steps={total}: only the "
                   "final checkpoint is written (a collapse rollback has no earlier one to go "
                   f"back to); set trainer.save_every to at most {max(1, total // 2)}, or 0 to "
                   "say 'only at the end'")
    if tr.save_rollouts_every > total:
        out.append(f"trainer.save_rollouts_every={tr.save_rollouts_every} > trainer.total_steps="
                   f"{total}: no rollout batch is saved (ragen2-analyze has nothing to read); set "
                   "it to at most the number of steps, or 0 for off")
    if monitor_on and m.grad_snr_every > total:
        out.append(f"monitor.grad_snr_every={m.grad_snr_every} > trainer.total_steps={total}: the "
                   "gradient-SNR diagnostic never runs; set it to at most the number of steps, "
                   "or 0 for off")
    if cfg.algorithm.lr_warmup_steps > total:
        out.append(f"algorithm.lr_warmup_steps={cfg.algorithm.lr_warmup_steps} > trainer."
                   f"total_steps={total}: the learning rate never reaches algorithm.lr="
                   f"{cfg.algorithm.lr:g}; set algorithm.lr_warmup_steps to at most {total}")
    es = tr.early_stop
    if es.spread_frac > 0 and es.spread_patience + 1 > total:
        out.append(f"trainer.early_stop.spread_patience={es.spread_patience}: {run}, and the "
                   "spread stop needs the first step plus that many low-spread steps, so it "
                   f"cannot stop the run; set it to at most {max(1, total - 1)}")
    n_evals = len(set(_multiples(tr.eval_every, total)) | {total})
    if es.eval_floor > 0 and es.eval_patience > n_evals:
        out.append(f"trainer.early_stop.eval_patience={es.eval_patience} > the {n_evals} held-out "
                   f"evaluations after RL starts (trainer.eval_every={tr.eval_every}, "
                   f"trainer.total_steps={total}): the success-floor stop cannot act; set it to at "
                   f"most {n_evals} or evaluate more often")
    return out


def _steps(steps: list[int]) -> str:
    return ", ".join(map(str, steps)) if len(steps) <= 8 else \
        f"{', '.join(map(str, steps[:4]))}, ..., {steps[-1]}"


def warn_budget(cfg: Any) -> list[str]:
    """Log every :func:`budget_warnings` message (logger ``ragen2``, WARNING); returns them."""
    warnings = budget_warnings(cfg)
    for w in warnings:
        log.warning("setting without effect in this run: %s", w)
    return warnings
