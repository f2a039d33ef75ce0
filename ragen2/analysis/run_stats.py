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
  resamples each arm's runs independently (:func:`arm_difference`).

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

__all__ = ["STATISTICS", "arm_difference", "bootstrap_interval", "summarise_over_runs"]

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
