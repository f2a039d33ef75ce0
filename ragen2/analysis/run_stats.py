"""Statistics whose unit of replication is the run: summaries over runs, arm differences over seeds.

Points of one run (its monitor steps) are not independent of each other, and runs differ in
level: pooling (run, step) points of many runs into one correlation with a p-value counts each run
many times over (pseudo-replication) and mixes the between-run spread into a within-run question.
So (SPEC "Statistics"):

* a correlation is computed **per run** (Spearman over that run's steps,
  :func:`ragen2.analysis.study.spearman`) and summarised **over runs**: the median of the per-run
  rhos, and a 95% percentile-bootstrap interval of that median, resampling runs
  (:func:`summarise_over_runs`);
* an **arm difference** (final MI, final success, gain, ...) is the difference of the two arms'
  means (or medians) over their runs (seeds), with a 95% percentile-bootstrap interval that
  resamples each arm's runs independently (:func:`arm_difference`);
* a **paired difference** is the same where the arms share their seeds (the same warm start and
  RL seed in both): one difference per seed, its mean with an interval that resamples seeds
  (:func:`paired_difference`), and a pre-registered reading of that interval (:func:`verdict`).

Percentile bootstrap: ``resamples`` draws of n values with replacement (numpy
``default_rng(seed).integers``), the statistic of each, the (1 - level)/2 and (1 + level)/2
quantiles (numpy's linear interpolation). Seeded: the same inputs give the same interval. With
fewer than 2 runs (per arm) there is no interval (None): one run says nothing about the spread.
Pure functions over plain sequences of floats; no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["STATISTICS", "VERDICTS", "arm_difference", "bootstrap_interval", "paired_difference",
           "summarise_over_runs", "verdict"]

#: name -> the statistic of a 1-D sample (and of each bootstrap resample, row-wise)
STATISTICS = {"mean": np.mean, "median": np.median}


def _values(values: Sequence[float | None], what: str) -> np.ndarray:
    """The finite, non-None values as float64 (others dropped: an undefined per-run statistic)."""
    out = []
    for v in values:
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)):
            raise ValueError(f"{what} must be numbers or None, got {type(v).__name__} {v!r}")
        if math.isfinite(float(v)):
            out.append(float(v))
    return np.asarray(out, dtype=np.float64)


def _check(statistic: str, resamples: int, level: float) -> None:
    if statistic not in STATISTICS:
        raise ValueError(f"statistic {statistic!r} is invalid; allowed: {', '.join(STATISTICS)}")
    if isinstance(resamples, bool) or not isinstance(resamples, int) or resamples < 2:
        raise ValueError(f"resamples must be an integer >= 2, got {resamples!r}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level!r}")


def _resampled(x: np.ndarray, statistic: str, resamples: int, rng: np.random.Generator
               ) -> np.ndarray:
    """(resamples,) the statistic of ``resamples`` with-replacement draws of ``len(x)`` values."""
    idx = rng.integers(0, len(x), size=(resamples, len(x)))
    return STATISTICS[statistic](x[idx], axis=1)


def _interval(draws: np.ndarray, level: float) -> tuple[float, float]:
    lo, hi = np.quantile(draws, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def bootstrap_interval(values: Sequence[float | None], statistic: str = "median",
                       resamples: int = 2000, level: float = 0.95, seed: int = 0
                       ) -> tuple[float | None, float | None]:
    """Percentile-bootstrap interval of ``statistic`` over ``values`` (one per run; None and
    non-finite entries dropped); (None, None) below 2 values."""
    _check(statistic, resamples, level)
    x = _values(values, "values")
    if len(x) < 2:
        return None, None
    return _interval(_resampled(x, statistic, resamples, np.random.default_rng(seed)), level)


def summarise_over_runs(values: Sequence[float | None], resamples: int = 2000,
                        level: float = 0.95, seed: int = 0) -> dict[str, float | int | None]:
    """A per-run statistic (e.g. each run's Spearman rho) over runs: ``median``, ``mean``, the
    bootstrap interval of the median ``lo`` / ``hi``, ``runs`` (values that were defined) and
    ``runs_total`` (all given, None's included)."""
    x = _values(values, "values")
    lo, hi = bootstrap_interval(x.tolist(), "median", resamples, level, seed)
    return {"median": float(np.median(x)) if len(x) else None,
            "mean": float(np.mean(x)) if len(x) else None,
            "lo": lo, "hi": hi, "runs": int(len(x)), "runs_total": len(values)}


def arm_difference(a: Sequence[float | None], b: Sequence[float | None], statistic: str = "mean",
                   resamples: int = 2000, level: float = 0.95, seed: int = 0
                   ) -> dict[str, Any]:
    """``statistic(a) - statistic(b)`` over the two arms' runs (one value per seed), with a
    percentile-bootstrap interval resampling each arm's runs independently (the same generator,
    ``a`` first). ``diff`` None when an arm has no value; ``lo`` / ``hi`` None when an arm has
    fewer than 2."""
    _check(statistic, resamples, level)
    xa, xb = _values(a, "a"), _values(b, "b")
    stat = STATISTICS[statistic]
    out: dict[str, Any] = {
        "diff": float(stat(xa) - stat(xb)) if len(xa) and len(xb) else None,
        "a": float(stat(xa)) if len(xa) else None, "b": float(stat(xb)) if len(xb) else None,
        "lo": None, "hi": None, "n_a": int(len(xa)), "n_b": int(len(xb)), "statistic": statistic}
    if len(xa) >= 2 and len(xb) >= 2:
        rng = np.random.default_rng(seed)
        da = _resampled(xa, statistic, resamples, rng)
        db = _resampled(xb, statistic, resamples, rng)
        out["lo"], out["hi"] = _interval(da - db, level)
    return out


def paired_difference(a: dict[Any, float | None], b: dict[Any, float | None],
                      statistic: str = "mean", resamples: int = 2000, level: float = 0.95,
                      seed: int = 0) -> dict[str, Any]:
    """Arms that share their seeds: ``d_s = a[s] - b[s]`` for every seed ``s`` both define (a
    None or non-finite value on either side drops that seed), ``diff = statistic(d)`` with a
    percentile-bootstrap interval resampling seeds, ``per_seed`` {seed: d_s} and the signs
    (``n_below`` / ``n_above`` zero). ``diff`` None without a common seed; ``lo`` / ``hi`` None
    below 2.

    Example: a = {0: 1.0, 1: 3.0}, b = {0: 2.0, 1: 2.5, 2: 9.0} -> d = [-1.0, 0.5] (seed 2 is
    not shared), diff = -0.25.
    """
    _check(statistic, resamples, level)
    common = [s for s in a if s in b]
    pairs = {s: (a[s], b[s]) for s in common}
    d: dict[Any, float] = {}
    for s, (x, y) in pairs.items():
        xs, ys = _values([x], "a"), _values([y], "b")
        if len(xs) and len(ys):
            d[s] = float(xs[0] - ys[0])
    x = np.asarray(list(d.values()), dtype=np.float64)
    lo, hi = bootstrap_interval(x.tolist(), statistic, resamples, level, seed)
    return {"diff": float(STATISTICS[statistic](x)) if len(x) else None, "lo": lo, "hi": hi,
            "per_seed": d, "n": int(len(x)), "n_below": int((x < 0).sum()),
            "n_above": int((x > 0).sum()), "statistic": statistic}


#: the readings :func:`verdict` gives an interval
VERDICTS = ("supported", "contradicted", "not shown", "no data")


def verdict(lo: float | None, hi: float | None, direction: str) -> str:
    """A pre-registered reading of an effect's interval: ``supported`` when it lies entirely on
    the predicted side of 0 (``direction`` "negative": hi < 0; "positive": lo > 0),
    ``contradicted`` when entirely on the other side, ``not shown`` when it holds 0, ``no data``
    without an interval."""
    if direction not in ("negative", "positive"):
        raise ValueError(f"direction must be 'negative' or 'positive', got {direction!r}")
    if lo is None or hi is None:
        return "no data"
    below, above = hi < 0, lo > 0
    if (direction == "negative" and below) or (direction == "positive" and above):
        return "supported"
    if below or above:
        return "contradicted"
    return "not shown"
