"""Pre-registered hypotheses of a study, evaluated on its runs: effect size, interval, verdict.

A study (:mod:`ragen2.analysis.study`) is ``{(arm, seed): metrics by step}``. A hypothesis names
what is compared and which sign it predicts; :func:`evaluate` turns the runs into one effect per
seed (arms compared seed by seed: the same warm start and RL seed in both) or per run, summarises
it over seeds or runs with a bootstrap interval (:mod:`ragen2.analysis.run_stats`) and reads the
interval with :func:`ragen2.analysis.run_stats.verdict`. Three kinds:

* :class:`Change` -- a metric's change over the run, ``final - initial``: ``initial`` its first
  logged value (step 0 for a probe panel measured before RL, step 1 for a batch metric),
  ``final`` the mean of its last ``final_points`` logged values. With a ``baseline`` arm the
  effect is the paired difference of the changes (arm minus baseline, per seed); without one, the
  arm's own change (mean over seeds).
* :class:`Tracks` -- does ``x`` track ``y`` (held-out success) better than ``than`` does? Per run:
  Spearman rho(x, y) minus |rho(than, y)| over the steps where all three were logged (steps in
  ``steps_from`` on), summarised over runs by the median and its bootstrap interval.
* :class:`Ratio` -- ``log(mean of the arm's metric / mean of the baseline's)`` per seed over the
  steps that are not multiples of ``skip_every`` (steps that also run the monitor or an
  evaluation), mean over seeds; reported also as ``exp(diff)``.

A run or seed that gives no value is not silently left out: ``dropped`` names it and says why
(too few logged points and the step of the last one, the measurements withheld for too few
samples (``monitor.min_samples``, :mod:`ragen2.collapse.withhold`: never counted as a value), a
seed the other arm lacks), so a verdict of "no data" explains itself.

Pure over the metrics dicts; no I/O.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Hashable
from dataclasses import asdict, dataclass
from typing import Any

from ragen2.analysis.run_stats import bootstrap_interval, paired_difference, verdict
from ragen2.analysis.study import SERIES, Metrics, RunKey, series, spearman, withheld

__all__ = ["Change", "Hypothesis", "Ratio", "Tracks", "evaluate", "run_change", "run_mean"]


@dataclass(frozen=True)
class Change:
    """``metric``'s change over the run in ``arm`` (minus ``baseline``'s, seed by seed)."""

    id: str
    claim: str
    arm: str
    metric: str  # a SERIES name
    direction: str  # "negative" | "positive": the predicted sign of the effect
    baseline: str | None = None
    final_points: int = 2


@dataclass(frozen=True)
class Tracks:
    """Per run rho(x, y) - |rho(than, y)|, over runs (every arm in ``arms``, all when empty)."""

    id: str
    claim: str
    x: str
    than: str
    y: str = "success"
    direction: str = "positive"
    steps_from: int = 1  # the first step counted (1: RL steps, not the pre-RL evaluation)
    arms: tuple[str, ...] = ()


@dataclass(frozen=True)
class Ratio:
    """log(mean ``metric`` in ``arm`` / in ``baseline``) per seed, over the plain steps."""

    id: str
    claim: str
    arm: str
    baseline: str
    metric: str = "step_s"
    direction: str = "negative"
    skip_every: int = 5


Hypothesis = Change | Tracks | Ratio


def _check_series(*names: str) -> None:
    for n in names:
        if n not in SERIES:
            raise ValueError(f"unknown series {n!r}; allowed: {', '.join(sorted(SERIES))}")


def run_change(metrics: Metrics, name: str, final_points: int = 2) -> float | None:
    """The mean of the last ``final_points`` logged values minus the first; None below
    ``final_points + 1`` values."""
    s = [v for _, v in series(metrics, name)]
    if final_points < 1:
        raise ValueError(f"final_points must be >= 1, got {final_points}")
    if len(s) < final_points + 1:
        return None
    return statistics.fmean(s[-final_points:]) - s[0]


def run_mean(metrics: Metrics, name: str, skip_every: int = 0, first_step: int = 1) -> float | None:
    """The mean of a series over steps >= ``first_step`` that are not multiples of
    ``skip_every`` (0: keep every step); None when no step is left."""
    vals = [v for step, v in series(metrics, name)
            if step >= first_step and not (skip_every and step % skip_every == 0)]
    return statistics.fmean(vals) if vals else None


def _by_seed(study: dict[RunKey, Metrics], arm: str) -> dict[Hashable, Metrics]:
    return {seed: m for (a, seed), m in study.items() if a == arm}


def _tracking(m: Metrics, h: Tracks) -> tuple[float | None, str]:
    """(rho(x, y) - |rho(than, y)|, "") or (None, why there is no value)."""
    xs, ts, ys = (dict(series(m, n)) for n in (h.x, h.than, h.y))
    steps = sorted(s for s in set(xs) & set(ts) & set(ys) if s >= h.steps_from)
    rx = spearman([(xs[s], ys[s]) for s in steps])["rho"]
    rt = spearman([(ts[s], ys[s]) for s in steps])["rho"]
    if rx is None or rt is None:
        flat = [n for n, r in ((h.x, rx), (h.than, rt)) if r is None]
        return None, (f"{len(steps)} step(s) from step {h.steps_from} log {h.x}, {h.than} and {h.y}"
                      f"; rho undefined for {', '.join(flat)}")
    return rx - abs(rt), ""


def _too_few(m: Metrics, metric: str, need: int) -> str:
    s = series(m, metric)
    last = f", the last at step {s[-1][0]}" if s else ""
    gone = [("< 2 prompts" if n is None else f"n = {n:g}") + f" at step {st}"
            for st, n in withheld(m, metric)]
    held = (f" ({len(gone)} more measured without a value, too few samples or prompts: "
            f"{', '.join(gone)})" if gone else "")
    return f"{len(s)} logged value(s) of {metric}{last}{held}; the change needs {need}"


def _dropped_pairs(a: dict[Hashable, Any], b: dict[Hashable, Any], arm: str, baseline: str,
                   why_none: Any) -> dict[str, str]:
    """Why each seed of ``arm`` or ``baseline`` gives no paired value."""
    out: dict[str, str] = {}
    for name, this, other, other_name in ((arm, a, b, baseline), (baseline, b, a, arm)):
        for s, v in this.items():
            if v is None:
                out[f"{name}/{s}"] = why_none(name, s)
            elif s not in other:
                out[f"{name}/{s}"] = f"no {other_name} run of seed {s}"
    return out


def evaluate(study: dict[RunKey, Metrics], h: Hypothesis, resamples: int = 2000, seed: int = 0
             ) -> dict[str, Any]:
    """``{**the hypothesis, "effect", "lo", "hi", "n", "per_unit", "verdict", ...}``."""
    if not isinstance(h, (Change, Tracks, Ratio)):
        raise TypeError(f"not a hypothesis: {type(h).__name__}; allowed: Change, Tracks, Ratio")
    out: dict[str, Any] = {"kind": type(h).__name__, **asdict(h)}
    if isinstance(h, Change):
        _check_series(h.metric)
        a = {s: run_change(m, h.metric, h.final_points) for s, m in _by_seed(study, h.arm).items()}

        def few(arm: str, s: Hashable) -> str:
            return _too_few(study[(arm, s)], h.metric, h.final_points + 1)

        if h.baseline is None:
            vals = {s: v for s, v in a.items() if v is not None}
            lo, hi = bootstrap_interval(list(vals.values()), "mean", resamples, seed=seed)
            effect = statistics.fmean(vals.values()) if vals else None
            out.update(effect=effect, lo=lo, hi=hi, n=len(vals), per_unit=vals,
                       dropped={f"{h.arm}/{s}": few(h.arm, s) for s, v in a.items() if v is None})
        else:
            b = {s: run_change(m, h.metric, h.final_points)
                 for s, m in _by_seed(study, h.baseline).items()}
            d = paired_difference(a, b, "mean", resamples, seed=seed)
            out.update(effect=d["diff"], lo=d["lo"], hi=d["hi"], n=d["n"], per_unit=d["per_seed"],
                       n_below=d["n_below"], n_above=d["n_above"],
                       dropped=_dropped_pairs(a, b, h.arm, h.baseline, few))
    elif isinstance(h, Tracks):
        _check_series(h.x, h.than, h.y)
        per = {f"{arm}/{s}": _tracking(m, h) for (arm, s), m in study.items()
               if not h.arms or arm in h.arms}
        vals = {k: v for k, (v, _) in per.items() if v is not None}
        lo, hi = bootstrap_interval(list(vals.values()), "median", resamples, seed=seed)
        out.update(effect=statistics.median(vals.values()) if vals else None, lo=lo, hi=hi,
                   n=len(vals), per_unit=vals,
                   dropped={k: why for k, (v, why) in per.items() if v is None})
    else:  # Ratio
        _check_series(h.metric)

        def logs(arm: str) -> dict[Hashable, float | None]:
            return {s: (math.log(v) if (v := run_mean(m, h.metric, h.skip_every)) and v > 0 else None)
                    for s, m in _by_seed(study, arm).items()}

        a, b = logs(h.arm), logs(h.baseline)
        d = paired_difference(a, b, "mean", resamples, seed=seed)
        out.update(effect=d["diff"], lo=d["lo"], hi=d["hi"], n=d["n"], per_unit=d["per_seed"],
                   dropped=_dropped_pairs(a, b, h.arm, h.baseline,
                                          lambda arm, s: f"no {h.metric} on a plain step"),
                   ratio=None if d["diff"] is None else math.exp(d["diff"]),
                   ratio_lo=None if d["lo"] is None else math.exp(d["lo"]),
                   ratio_hi=None if d["hi"] is None else math.exp(d["hi"]))
    out["verdict"] = verdict(out["lo"], out["hi"], h.direction)
    return out
