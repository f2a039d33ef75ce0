"""The minimum sample of every MI and retrieval value (``monitor.min_samples``).

Every MI measurement (the batch's first turn ``collapse/``, its later turns ``collapse/turns/``
and ``collapse/turn_uniform/``, the probe panels ``collapse/panel/`` and
``collapse/panel/turns/``, the action MI ``collapse/action/`` and ``collapse/panel/action/``,
and the grounded fraction beside four of them, ``<scope>grounding/``: :mod:`ragen2.collapse.grounding`;
the contrast among inputs that differ in one coordinate, ``collapse/turns/contrast/<c>/`` and
``collapse/panel/turns/contrast/<c>/``: :mod:`ragen2.collapse.contrast`)
logs its sample count at ``<scope>n_samples`` (the parsable reasoning samples it had; for the
action MI the answers in groups of 2+) and its prompts at ``<scope>n_prompts`` (the action MI:
``n_groups``). With fewer than ``monitor.min_samples`` samples, or fewer than 2 prompts, the
measurement logs those counts and **no value**: the MI, its companions (``h_cond``,
``h_marginal``, ``mi_z`` and its EMA, ``mi_token_mean``, ``marginal_std``), retrieval and its
chance level, the permutation null and floor, the bootstrap interval, ``healthy``, the bounds
(``log_n``, ``mi_bound``, ``log_k``), the grounded fraction and its interval (``frac``,
``frac_lo``, ``frac_hi``), the contrast's ``acc@1`` (with ``_lo`` / ``_hi``) and ``chance@1``
are all absent (:func:`is_value`), and nothing is scored. Kept beside
the counts: ``token_entropy``, ``reasoning_frac``, ``reasoning_tokens_mean``,
``answer_tokens_mean``, ``turn``, ``checkable_frac`` (descriptions of the batch, not estimates).

Readers treat an absent value as "no measurement", never as 0: the collapse alert counts it as a
measurement that shows no input dependence (``alert.py``, as a panel without reasoning), the
diagnosis reports template collapse as "not assessed" (``diagnosis.py``), the EMA of ``mi_z``
skips it, the rollback verdict keeps the previous one. The analysis applies the same rule to the
rows it reads (:func:`withhold`, called by ``ragen2.analysis.rollouts.load_metrics`` with the
run's ``monitor.min_samples``), so runs logged before the rule are read as if it had been on.

Why 16 by default. An MI or retrieval value averages one term per sample, so its precision is
set by the sample count S:

* retrieval@1 is a share of S hits: its binomial standard error is at most 1 / (2 sqrt S), 0.125
  at S = 16 (an interval of about +-0.25), 0.29 at S = 3 (about +-0.57, wider than the distance
  between chance and a perfect score on the default batch);
* the permutation floor (the null's 95th percentile) needs enough distinct pairings: S samples
  have at most S! of them, 6 at S = 3, and then the floor equals the estimate itself (the
  collapse study's ``top_p_ent`` panels at 3 samples logged exactly that);
* the MI's bound is log of the prompts that had reasoning, at most log S: at S = 3 it is
  log 3 = 1.10, below the 1.65 nats a healthy later-turn panel measured at step 0 in the study,
  so a small sample cannot even show the level it is compared with;
* on the default job, 16 is one sample per group of the batch (16 groups x 4 = 64 first-turn
  samples) and an eighth of the panel (32 x 4 = 128): a measurement below it means at least 75%
  of the batch (88% of the panel) wrote no parsable reasoning, and the value would describe the
  few survivors, not the policy. The study's two ``top_p_ent`` values it withholds (0.56 and
  -0.13 nats) came from 3 and 5 samples out of 128.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ragen2.config import MonitorConfig

__all__ = ["MIN_SAMPLES", "SCOPES", "count_key", "is_value", "scope_of", "withhold",
           "withheld_scopes"]

#: the default of ``monitor.min_samples``
MIN_SAMPLES: int = MonitorConfig.min_samples

#: every measurement's metric prefix; its count is ``prefix + "n_samples"`` (longest first, so
#: a key finds its own scope before an enclosing one)
SCOPES = ("collapse/panel/turns/grounding/", "collapse/panel/grounding/",
          "collapse/turns/grounding/", "collapse/panel/turns/", "collapse/panel/action/",
          "collapse/turn_uniform/", "collapse/grounding/", "collapse/panel/", "collapse/action/",
          "collapse/turns/", "collapse/")

#: the fields of a measurement that are estimated from its samples (withheld below the minimum)
_VALUE = re.compile(r"mi|mi_.+|h_cond.*|h_marginal|marginal_std|retrieval_.+|log_n|log_k|healthy"
                    r"|frac|frac_lo|frac_hi|acc@\d+|acc@\d+_lo|acc@\d+_hi|chance@\d+")

#: the contrast's scopes, one per coordinate (:mod:`ragen2.collapse.contrast`):
#: ``collapse/turns/contrast/<c>/`` and ``collapse/panel/turns/contrast/<c>/``
_CONTRAST = re.compile(r"(collapse/(?:panel/)?turns/contrast/[A-Za-z0-9_]+/)([^/]+)")


def is_value(field: str) -> bool:
    """Is ``field`` (a key without its scope prefix: ``mi``, ``retrieval_acc@1``, ...) a value
    estimated from the samples, withheld below ``monitor.min_samples``? Counts, token entropy,
    reasoning lengths and the controls (``alert``, ``diagnosis``, ...) are not."""
    return _VALUE.fullmatch(field) is not None


def scope_of(key: str) -> str | None:
    """The scope prefix of a measured value's key (``collapse/panel/turns/mi`` ->
    ``collapse/panel/turns/``), None for any other key (``collapse/alert``, ``rollout/success``)."""
    m = _CONTRAST.fullmatch(key)
    if m:
        return m.group(1) if is_value(m.group(2)) else None
    for p in SCOPES:
        if key.startswith(p) and "/" not in key[len(p):]:
            return p if is_value(key[len(p):]) else None
    return None


def count_key(key: str) -> str | None:
    """The sample-count key logged beside a measured value (``collapse/turns/retrieval_acc@1`` ->
    ``collapse/turns/n_samples``), None when ``key`` is no measured value."""
    p = scope_of(key)
    return None if p is None else p + "n_samples"


def _check_min(min_samples: int) -> int:
    if isinstance(min_samples, bool) or not isinstance(min_samples, int) or min_samples < 2:
        raise ValueError(f"min_samples must be an integer >= 2, got {min_samples!r}")
    return min_samples


def withheld_scopes(row: Mapping[str, Any], min_samples: int) -> list[str]:
    """The scopes of ``row`` (a metrics row) whose logged ``n_samples`` is under ``min_samples``
    (a scope without a logged count is not judged: it is kept as logged)."""
    _check_min(min_samples)
    contrast = [m.group(1) for k in row if (m := _CONTRAST.fullmatch(k)) and m.group(2) == "n_samples"]
    out = []
    for p in (*SCOPES, *contrast):
        n = row.get(p + "n_samples")
        if isinstance(n, (int, float)) and not isinstance(n, bool) and n < min_samples:
            out.append(p)
    return out


def withhold(row: Mapping[str, Any], min_samples: int) -> dict[str, Any]:
    """``row`` without the values (:func:`is_value`) of every scope whose ``n_samples`` is under
    ``min_samples``; counts and every other key stay. A new dict; ``row`` is not changed."""
    gone = set(withheld_scopes(row, min_samples))
    if not gone:
        return dict(row)
    return {k: v for k, v in row.items() if scope_of(k) not in gone}
