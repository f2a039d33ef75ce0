"""The analysis of collapse study 3, as registered (README "Study 3", Hypotheses): from the runs'
own files to ``results_v3/results.json``, ``tables.md``, ``curves.png`` and ``examples.md``.

Definitions (all from the registration):

* a panel metric's **change** in a run = mean(step 90, step 100) - step 0; it needs all three
  values (a missing one names why: not logged, or withheld under ``monitor.min_samples``);
  batch instruments (secondary, descriptive) use step 1 as "before";
* **no reasoning left**: the later-turn panel logged its counts but no grounding value (fewer
  than ``monitor.min_samples`` checkable reasonings) at both step 90 and step 100; such a run is
  left out of every grounding analysis, named; an arm with 2 or more such runs gets "no data" on
  every hypothesis that compares it (G1-G3);
* **template collapse** in a run: grounding change <= -0.20, panel ``checkable_frac`` >= 0.80 at
  step 100, held-out format errors <= 0.20 at step 100;
* a **paired effect** = mean over seeds of (arm's change - baseline's change) with a 95%
  percentile bootstrap interval over seeds (:func:`ragen2.analysis.run_stats.paired_difference`),
  read by :func:`ragen2.analysis.run_stats.verdict`;
* G4: Spearman rho over runs (with reasoning left) of the step-100 value against step-100
  held-out success, with a 95% percentile bootstrap interval over runs (:func:`rho_interval`).

Every value is read through :func:`ragen2.analysis.rollouts.load_metrics` (the minimum-sample
rule applied with each run's own ``monitor.min_samples``). Runs the registration expects but the
folder lacks, or that failed, are listed in ``missing`` with why; nothing is dropped silently.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

import numpy as np

from ragen2.analysis.run_stats import bootstrap_interval, paired_difference, verdict
from study3 import ARMS, FULL, run_order

PANEL = "collapse/panel/turns/"
GROUNDING = PANEL + "grounding/frac"
CHECKABLE = PANEL + "grounding/checkable_frac"
SUCCESS = "eval/success"
EVAL_FORMAT = "eval/format_error_rate"
BEFORE, AFTER, FINAL = 0, (90, 100), 100
#: template collapse (README "Template collapse"): the three thresholds
COLLAPSE_CHANGE, COLLAPSE_CHECKABLE, COLLAPSE_FORMAT = -0.20, 0.80, 0.20
#: G5: grounding falls by at least this while retrieval@1 falls by less than RETRIEVAL_FALL
G5_GROUNDING_FALL, G5_RETRIEVAL_FALL = 0.20, 0.10
#: secondary outcomes: name -> (metric key, the step of its "before" value)
SECONDARY = {
    "panel_contrast_col": (PANEL + "contrast/col/acc@1", 0),
    "panel_contrast_row": (PANEL + "contrast/row/acc@1", 0),
    "panel_retrieval": (PANEL + "retrieval_acc@1", 0),
    "panel_mi": (PANEL + "mi", 0),
    "batch_retrieval": ("collapse/turns/retrieval_acc@1", 1),
    "batch_grounding": ("collapse/turns/grounding/frac", 1),
    "token_entropy": ("collapse/token_entropy", 1),
    "success": (SUCCESS, 0),
    "format_errors_heldout": (EVAL_FORMAT, 0),
}
#: the warm-start screen (README "Study 3", Deviations, 2026-12-06): a seed is eligible when its
#: later-turn panel grounding at step 0 (before RL) is at least this
ELIGIBLE_GROUNDING = 0.6
WARM_TOKEN_ACC = "warm_start/token_acc"


def eligibility(row: dict[str, Any] | None) -> dict[str, Any]:
    """The screening rule on one run's step-0 row: eligible when ``GROUNDING`` has a value (read
    as :func:`value` reads it: logged, not withheld for too few samples) and is at least
    :data:`ELIGIBLE_GROUNDING`. ``{"grounding", "grounding_lo", "grounding_hi", "n_samples",
    "token_acc", "eligible", "why"}``."""
    row = row or {}
    g, missing = value({BEFORE: row} if row else {}, GROUNDING, BEFORE)
    out = {"grounding": g, "grounding_lo": row.get(GROUNDING + "_lo"),
           "grounding_hi": row.get(GROUNDING + "_hi"),
           "n_samples": row.get(PANEL + "grounding/n_samples"),
           "token_acc": row.get(WARM_TOKEN_ACC) if _num(row.get(WARM_TOKEN_ACC)) else None}
    if g is None:
        return {**out, "eligible": False, "why": f"no step-0 later-turn panel grounding: {missing}"}
    ok = g >= ELIGIBLE_GROUNDING
    return {**out, "eligible": ok, "why": f"step-0 later-turn panel grounding {g:.3f} "
            + (">=" if ok else "<") + f" {ELIGIBLE_GROUNDING}"}


#: the registered comparisons: id -> (arm, baseline or None, predicted direction, claim)
COMPARISONS = {
    "G1": ("d0", None, "negative", "drift without a bonus: in d0 the later-turn panel grounding "
           "falls (median change over runs)"),
    "G2a": ("dhigh", "d0", "negative", "dose: dhigh against d0, grounding change (the bonus "
            "speeds the drift)"),
    "G2b": ("dlow", "d0", "negative", "dose: dlow against d0, grounding change"),
    "G3a": ("dhigh_top_p", "dhigh", "positive", "the filter: dhigh_top_p against dhigh, "
            "grounding change (top-p holds grounding)"),
    "G3b": ("d0_top_p", "d0", "positive", "the filter: d0_top_p against d0, grounding change"),
}
#: G4's instruments at step 100 against held-out success: name -> (key, predicted direction or
#: None, note). Entropy is predicted "not positive": read on the negative side of 0, so
#: "supported" needs an interval below 0 and one above 0 contradicts it.
G4 = {
    "grounding": (GROUNDING, "positive", "later-turn panel grounding"),
    "panel_mi": (PANEL + "mi", "positive", "later-turn panel MI"),
    "panel_retrieval": (PANEL + "retrieval_acc@1", None, "later-turn panel retrieval@1 (no "
                        "prediction registered)"),
    "batch_retrieval": ("collapse/turns/retrieval_acc@1", None, "later-turn batch retrieval@1 "
                        "(no prediction registered)"),
    "token_entropy": ("collapse/token_entropy", "negative", "reasoning token entropy (predicted "
                      "not positive)"),
}


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def value(m: dict[int, dict[str, Any]], key: str, step: int) -> tuple[float | None, str]:
    """(the value of ``key`` at ``step``, "") or (None, why: the step or the key not logged, or
    the value withheld for too few samples with its count)."""
    from ragen2.collapse.withhold import count_key

    row = m.get(step)
    if row is None:
        return None, f"step {step} not logged"
    v = row.get(key)
    if _num(v):
        return float(v), ""
    ck = count_key(key)
    if ck is not None and _num(row.get(ck)):
        return None, (f"withheld at step {step} (n = {row[ck]:g} samples: under "
                      "monitor.min_samples, or fewer than 2 prompts)")
    return None, f"{key} not logged at step {step}"


def change(m: dict[int, dict[str, Any]], key: str, before: int = BEFORE,
           after: tuple[int, ...] = AFTER) -> tuple[float | None, str]:
    """mean(``after`` values) - the ``before`` value; (None, why) when any of them is missing."""
    got = [value(m, key, s) for s in (before, *after)]
    why = [w for v, w in got if v is None]
    if why:
        return None, "; ".join(why)
    return statistics.fmean(v for v, _ in got[1:]) - got[0][0], ""


def no_reasoning_left(m: dict[int, dict[str, Any]]) -> bool:
    """Both step 90 and step 100 measured the later-turn panel's grounding (its count logged)
    and gave no value: fewer than ``monitor.min_samples`` checkable reasonings."""
    return all(value(m, GROUNDING, s)[0] is None and "withheld" in value(m, GROUNDING, s)[1]
               for s in AFTER)


def template_collapse(m: dict[int, dict[str, Any]], g_change: float | None
                      ) -> tuple[bool | None, str]:
    """The registered definition on one run: (True/False, why) or (None, what is missing)."""
    if g_change is None:
        return None, "no grounding change"
    if g_change > COLLAPSE_CHANGE:
        return False, f"grounding change {g_change:+.3f} > {COLLAPSE_CHANGE}"
    chk, why_c = value(m, CHECKABLE, FINAL)
    fmt, why_f = value(m, EVAL_FORMAT, FINAL)
    if chk is None or fmt is None:
        return None, "; ".join(w for w in (why_c, why_f) if w)
    fails = ([f"checkable {chk:.2f} < {COLLAPSE_CHECKABLE}"] if chk < COLLAPSE_CHECKABLE else []) + \
            ([f"held-out format errors {fmt:.2f} > {COLLAPSE_FORMAT}"] if fmt > COLLAPSE_FORMAT else [])
    if fails:
        return False, "; ".join(fails)
    return True, (f"grounding {g_change:+.3f}, checkable {chk:.2f}, held-out format errors "
                  f"{fmt:.2f} at step {FINAL}")


def change_interval(panels: dict[int, dict[Any, list[float | None]]], resamples: int = 2000,
                    seed: int = 0, level: float = 0.95) -> tuple[float | None, float | None]:
    """95% percentile bootstrap interval of a run's grounding change over the panel's prompts
    (the same fixed prompts at every step: a draw resamples prompts once, for all three steps,
    and keeps all their checkable samples; ``panels``: {step: {prompt key: per-sample scores,
    None where not checkable}} at steps 0, 90, 100). (None, None) without the three steps."""
    steps = (BEFORE, *AFTER)
    if any(s not in panels for s in steps):
        return None, None
    keys = sorted(set.intersection(*(set(panels[s]) for s in steps)), key=str)
    if len(keys) < 2:
        return None, None
    sums = np.array([[sum(x for x in panels[s][k] if x is not None) for k in keys] for s in steps])
    counts = np.array([[sum(x is not None for x in panels[s][k]) for k in keys] for s in steps])
    idx = np.random.default_rng(seed).integers(0, len(keys), size=(resamples, len(keys)))
    tot, cnt = sums[:, idx].sum(axis=2), counts[:, idx].sum(axis=2)  # (3, resamples)
    ok = (cnt > 0).all(axis=0)
    if ok.sum() < 2:
        return None, None
    frac = tot[:, ok] / cnt[:, ok]
    draws = (frac[1] + frac[2]) / 2 - frac[0]
    lo, hi = np.quantile(draws, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def load_panel_grounding(run_dir: Path, steps: tuple[int, ...] = (BEFORE, *AFTER)
                         ) -> dict[int, dict[Any, list[float | None]]]:
    """{step: {prompt key: per-sample grounding}} from ``panel/turns/step_*.jsonl`` (records
    without ``grounding`` are skipped)."""
    out: dict[int, dict[Any, list[float | None]]] = {}
    for s in steps:
        path = run_dir / "panel" / "turns" / f"step_{s:06d}.jsonl"
        if not path.is_file():
            continue
        recs = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
        got = {r["key"]: [x if _num(x) else None for x in r["grounding"]] for r in recs
               if isinstance(r.get("grounding"), list)}
        if got:
            out[s] = got
    return out


def _ranks(v: np.ndarray) -> np.ndarray:
    """1-based average ranks of a 1-D array (ties share their mean rank)."""
    r = np.empty(len(v))
    r[np.argsort(v, kind="stable")] = np.arange(1, len(v) + 1)
    _, inv, counts = np.unique(v, return_inverse=True, return_counts=True)
    return (np.bincount(inv, weights=r) / counts)[inv]


def rho_interval(points: list[tuple[float, float]], resamples: int = 2000, seed: int = 0,
                 level: float = 0.95) -> dict[str, Any]:
    """Spearman rho over ``points`` (one per run) and its percentile bootstrap interval over runs
    (draws whose x or y is constant have no rho and are left out: ``undefined_draws``).
    ``{"rho", "lo", "hi", "n", "undefined_draws"}``; rho None below 3 runs or a constant side."""
    from ragen2.analysis.study import spearman

    n = len(points)
    rho = spearman(points)["rho"]
    out: dict[str, Any] = {"rho": rho, "lo": None, "hi": None, "n": n, "undefined_draws": None}
    if rho is None:
        return out
    xy = np.asarray(points, dtype=float)
    idx = np.random.default_rng(seed).integers(0, n, size=(resamples, n))
    x, y = xy[idx, 0], xy[idx, 1]
    ok = (x.max(axis=1) > x.min(axis=1)) & (y.max(axis=1) > y.min(axis=1))
    rx = np.array([_ranks(v) for v in x[ok]]).reshape(-1, n)
    ry = np.array([_ranks(v) for v in y[ok]]).reshape(-1, n)
    rx -= rx.mean(axis=1, keepdims=True)
    ry -= ry.mean(axis=1, keepdims=True)
    r = (rx * ry).sum(1) / np.sqrt((rx ** 2).sum(1) * (ry ** 2).sum(1))
    out["undefined_draws"] = int((~ok).sum())
    if len(r) >= 2:
        lo, hi = np.quantile(np.clip(r, -1, 1), [(1 - level) / 2, (1 + level) / 2])
        out["lo"], out["hi"] = float(lo), float(hi)
    return out


def _interval_text(effect: float | None, lo: float | None, hi: float | None) -> str:
    def f(v: float | None) -> str:
        return "n/a" if v is None else f"{v:+.3f}"
    return f"{f(effect)} [{f(lo)}, {f(hi)}]"


def evaluate(metrics: dict[tuple[str, int], dict[int, dict[str, Any]]],
             panels: dict[tuple[str, int], dict[int, dict[Any, list[float | None]]]] | None = None,
             missing: dict[str, str] | None = None, resamples: int = 2000) -> dict[str, Any]:
    """Per run, per arm and per hypothesis, from the finished runs' metrics (``{(arm, seed):
    {step: row}}``, read under the minimum-sample rule) and their panels' per-sample grounding.
    Pure."""
    panels = panels or {}
    runs: dict[tuple[str, int], dict[str, Any]] = {}
    for key, m in metrics.items():
        g, why = change(m, GROUNDING)
        lo, hi = change_interval(panels.get(key, {}), resamples) if g is not None else (None, None)
        tc, tc_why = template_collapse(m, g)
        runs[key] = {"arm": key[0], "seed": key[1], "grounding_change": g,
                     "grounding_change_why": why, "grounding_lo": lo, "grounding_hi": hi,
                     "reading": verdict(lo, hi, "negative"),
                     "grounding_before": value(m, GROUNDING, BEFORE)[0],
                     "grounding_after": [value(m, GROUNDING, s)[0] for s in AFTER],
                     "no_reasoning_left": no_reasoning_left(m),
                     "template_collapse": tc, "template_collapse_why": tc_why,
                     "checkable_final": value(m, CHECKABLE, FINAL)[0],
                     "format_errors_final": value(m, EVAL_FORMAT, FINAL)[0],
                     "success_before": value(m, SUCCESS, BEFORE)[0],
                     "success_final": value(m, SUCCESS, FINAL)[0],
                     "secondary": {name: dict(zip(("change", "why"), change(m, k, before)))
                                   for name, (k, before) in SECONDARY.items()},
                     "instruments": {name: [value(m, k, before)[0], value(m, k, FINAL)[0]]
                                     for name, (k, before) in SECONDARY.items()
                                     if name in INSTRUMENTS},
                     **run_time_flags(m)}
    left = {k for k, r in runs.items() if r["no_reasoning_left"]}
    arm_out = {a: sorted(s for (x, s) in left if x == a) for a in ARMS}
    no_data_arms = {a for a, s in arm_out.items() if len(s) >= 2}

    def grounding_by_seed(arm: str) -> tuple[dict[int, float | None], dict[str, str]]:
        vals, dropped = {}, {}
        for (a, s), r in runs.items():
            if a != arm:
                continue
            if (a, s) in left:
                dropped[f"{a}/{s}"] = "no reasoning left (no grounding value at steps 90 and 100)"
                vals[s] = None
            else:
                vals[s] = r["grounding_change"]
                if vals[s] is None:
                    dropped[f"{a}/{s}"] = f"no grounding change: {r['grounding_change_why']}"
        for name, why in (missing or {}).items():
            if name.rsplit("_s", 1)[0] == arm:
                dropped[f"{arm}/{name.rsplit('_s', 1)[1]}"] = f"missing run: {why}"
        return vals, dropped

    hyps = []
    for hid, (arm, base, direction, claim) in COMPARISONS.items():
        a, dropped = grounding_by_seed(arm)
        h = {"id": hid, "claim": claim, "arm": arm, "baseline": base, "direction": direction}
        blocked = sorted(x for x in (arm, base) if x in no_data_arms)
        if base is None:
            vals = {s: v for s, v in a.items() if v is not None}
            lo, hi = bootstrap_interval(list(vals.values()), "median", resamples)
            h.update(effect=statistics.median(vals.values()) if vals else None, lo=lo, hi=hi,
                     n=len(vals), per_unit=vals, statistic="median change over runs")
        else:
            b, dropped_b = grounding_by_seed(base)
            dropped.update(dropped_b)
            for s in set(a) ^ set(b):
                if (a.get(s) if s in a else b.get(s)) is not None:
                    dropped.setdefault(f"{arm if s in a else base}/{s}",
                                       f"no {base if s in a else arm} run of seed {s}")
            d = paired_difference(a, b, "mean", resamples)
            h.update(effect=d["diff"], lo=d["lo"], hi=d["hi"], n=d["n"], per_unit=d["per_seed"],
                     n_below=d["n_below"], n_above=d["n_above"],
                     statistic="mean over seeds of the paired difference of changes")
        h["dropped"] = dropped
        if blocked:
            h["verdict"] = "no data"
            h["why_no_data"] = (f"arm(s) {', '.join(blocked)} have 2 or more runs with no "
                                f"reasoning left ({'; '.join(f'{x}: seeds {arm_out[x]}' for x in blocked)})")
        else:
            h["verdict"] = verdict(h["lo"], h["hi"], direction)
        hyps.append(h)

    with_reasoning = {k: m for k, m in metrics.items() if k not in left}
    g4 = []
    for name, (key, direction, label) in G4.items():
        pts, used, dropped = [], [], {f"{a}/{s}": "no reasoning left" for a, s in left}
        for k, m in with_reasoning.items():
            x, wx = value(m, key, FINAL)
            y, wy = value(m, SUCCESS, FINAL)
            if x is None or y is None:
                dropped[f"{k[0]}/{k[1]}"] = "; ".join(w for w in (wx, wy) if w)
            else:
                pts.append((x, y))
                used.append(f"{k[0]}/{k[1]}")
        r = rho_interval(pts, resamples)
        g4.append({"id": f"G4 {name}", "claim": f"{label} at step {FINAL} against held-out "
                   f"success at step {FINAL}, Spearman over runs", "metric": key,
                   "direction": direction, "effect": r["rho"], "lo": r["lo"], "hi": r["hi"],
                   "n": r["n"], "undefined_draws": r["undefined_draws"], "runs": used,
                   "points": pts, "dropped": dropped,
                   "verdict": verdict(r["lo"], r["hi"], direction) if direction
                   else "no verdict (no prediction)"})
    pairs, flagged, dropped5 = [], [], {f"{a}/{s}": "no reasoning left" for a, s in left}
    for k, r in runs.items():
        if k in left:
            continue
        g, ret = r["grounding_change"], r["secondary"]["panel_retrieval"]["change"]
        if g is None or ret is None:
            dropped5[f"{k[0]}/{k[1]}"] = "; ".join(
                w for w in (r["grounding_change_why"], r["secondary"]["panel_retrieval"]["why"]) if w)
            continue
        pairs.append((g, ret))
        if g <= -G5_GROUNDING_FALL and ret > -G5_RETRIEVAL_FALL:
            flagged.append(f"{k[0]}/{k[1]}")
    r5 = rho_interval(pairs, resamples)
    g5 = {"id": "G5", "claim": "over runs, the panel grounding change against the panel "
          "retrieval@1 change (exploratory)", "effect": r5["rho"], "lo": r5["lo"], "hi": r5["hi"],
          "n": r5["n"], "points": pairs, "dropped": dropped5, "retrieval_missed": flagged,
          "verdict": "no verdict (exploratory)"}
    return {"runs": runs, "no_reasoning_left": arm_out, "no_data_arms": sorted(no_data_arms),
            "hypotheses": hyps, "g4": g4, "g5": g5, "secondary": secondary_effects(runs, resamples),
            "collapse_by_arm": collapse_by_arm(runs),
            "filter_over_doses": filter_over_doses(runs, left, resamples)}


#: the secondary instruments whose values before RL and at step 100 each run records (set beside
#: the grounding in the answers' table of the template-collapse runs)
INSTRUMENTS = ("panel_mi", "panel_contrast_col", "panel_contrast_row", "panel_retrieval",
               "token_entropy")
#: the run-time instruments' template-collapse flags (``ragen2.collapse``): the diagnosis code of
#: template collapse (``DIAGNOSIS_CODES["template_collapse"]``) and the alert
DIAGNOSIS, TEMPLATE_CODE, ALERT = "collapse/diagnosis", 1, "collapse/alert"


def run_time_flags(m: dict[int, dict[str, Any]]) -> dict[str, list[int]]:
    """The steps at which the run's own instruments flagged template collapse: the MI diagnosis
    (``collapse/diagnosis`` = template collapse) and the collapse alert (``collapse/alert`` > 0).
    Descriptive (README Deviations 2026-12-06): set beside the grounding rule, they say whether
    the framework's MI instruments caught what the env-checked grounding shows."""
    def steps(key: str, hit) -> list[int]:
        return sorted(s for s, row in m.items() if _num(row.get(key)) and hit(row[key]))
    return {"diagnosis_steps": steps(DIAGNOSIS, lambda v: int(v) == TEMPLATE_CODE),
            "alert_steps": steps(ALERT, lambda v: v > 0)}


def collapse_by_arm(runs: dict[tuple[str, int], dict[str, Any]]) -> dict[str, dict[str, list[int]]]:
    """Per arm, the seeds whose run shows template collapse by the registered rule (``yes``), does
    not (``no``), or cannot be assessed (``n/a``: no grounding change). Descriptive."""
    out = {a: {"yes": [], "no": [], "n/a": []} for a in ARMS}
    for (arm, seed), r in sorted(runs.items(), key=lambda kv: kv[0][1]):
        out[arm][{True: "yes", False: "no", None: "n/a"}[r["template_collapse"]]].append(seed)
    return out


def filter_over_doses(runs: dict[tuple[str, int], dict[str, Any]], left: set[tuple[str, int]],
                      resamples: int = 2000) -> dict[str, Any]:
    """Exploratory, not registered (README Deviations 2026-12-06, after 18 of the 24 runs): the
    top-p filter's effect on the grounding change over all three doses. Each (dose, seed) pair
    gives d = change(dose_top_p, seed) - change(dose, seed) (both runs with a change and reasoning
    left); a seed's effect is the mean of its pairs' d, and the effect is the mean over seeds with
    a 95% percentile bootstrap interval resampling seeds (the arms of a seed share its warm start,
    so the seed, not the pair, is the unit).

    Example: seed 3 pairs d = -0.4, -0.7 and seed 4 pairs d = +0.1 -> per seed -0.55, +0.1,
    effect -0.225."""
    pairs: dict[str, float] = {}
    per_seed: dict[int, list[float]] = {}
    for (arm, seed), r in runs.items():
        dose, filt = ARMS[arm]
        if filt != "none":
            continue
        t = runs.get((f"{dose}_top_p", seed))
        if t is None or {(arm, seed), (f"{dose}_top_p", seed)} & left:
            continue
        if r["grounding_change"] is None or t["grounding_change"] is None:
            continue
        d = t["grounding_change"] - r["grounding_change"]
        pairs[f"{dose}/{seed}"] = d
        per_seed.setdefault(seed, []).append(d)
    means = {s: statistics.fmean(v) for s, v in sorted(per_seed.items())}
    lo, hi = bootstrap_interval(list(means.values()), "mean", resamples)
    return {"effect": statistics.fmean(means.values()) if means else None, "lo": lo, "hi": hi,
            "per_seed": means, "pairs": pairs, "n_seeds": len(means), "n_pairs": len(pairs),
            "n_below": sum(d < 0 for d in pairs.values()),
            "n_above": sum(d > 0 for d in pairs.values())}


def secondary_effects(runs: dict[tuple[str, int], dict[str, Any]], resamples: int = 2000
                      ) -> dict[str, Any]:
    """Per secondary outcome: each arm's changes (median, min, max, runs) and the registered
    comparisons' paired effects with intervals; descriptive, no verdict."""
    out: dict[str, Any] = {}
    for name in SECONDARY:
        by_arm = {a: {s: r["secondary"][name]["change"] for (x, s), r in runs.items() if x == a}
                  for a in ARMS}
        arms = {}
        for a, vals in by_arm.items():
            v = [x for x in vals.values() if x is not None]
            arms[a] = {"median": statistics.median(v) if v else None, "min": min(v, default=None),
                       "max": max(v, default=None), "runs": len(v), "of": len(vals)}
        comps = {}
        for hid, (arm, base, _, _) in COMPARISONS.items():
            if base is not None:
                d = paired_difference(by_arm[arm], by_arm[base], "mean", resamples)
                comps[f"{arm} - {base}"] = {k: d[k] for k in ("diff", "lo", "hi", "n")}
        out[name] = {"key": SECONDARY[name][0], "before_step": SECONDARY[name][1],
                     "arms": arms, "paired": comps}
    return out


def verdict_text(ev: dict[str, Any]) -> list[str]:
    """One sentence per hypothesis, built from its numbers and the registered rules only."""
    lines = []
    for h in ev["hypotheses"]:
        left = "; ".join(f"{k}: {v}" for k, v in sorted(h["dropped"].items())) or "none"
        unit = "runs" if h["baseline"] is None else "seeds"
        signs = (f", {h['n_below']} below 0 and {h['n_above']} above" if "n_below" in h else "")
        s = (f"**{h['id']}** ({h['claim']}; predicted {h['direction']}): "
             f"{h['statistic']} {_interval_text(h['effect'], h['lo'], h['hi'])} over {h['n']} "
             f"{unit}{signs}: **{h['verdict']}**")
        if h.get("why_no_data"):
            s += f" ({h['why_no_data']})"
        lines.append(s + f". Left out: {left}.")
    for h in ev["g4"]:
        undef = (f", {h['undefined_draws']} of the bootstrap draws had a constant side and no rho"
                 if h.get("undefined_draws") else "")
        pred = {"positive": "predicted positive", "negative": "predicted not positive (read on "
                "the negative side)", None: "no prediction"}[h["direction"]]
        lines.append(f"**{h['id']}** ({h['claim']}; {pred}): rho "
                     f"{_interval_text(h['effect'], h['lo'], h['hi'])} over {h['n']} runs{undef}: "
                     f"**{h['verdict']}**. Left out: "
                     f"{'; '.join(f'{k}: {v}' for k, v in sorted(h['dropped'].items())) or 'none'}.")
    g5 = ev["g5"]
    lines.append(f"**G5** ({g5['claim']}): rho {_interval_text(g5['effect'], g5['lo'], g5['hi'])} "
                 f"over {g5['n']} runs, no verdict. Runs where grounding fell by at least "
                 f"{G5_GROUNDING_FALL} while panel retrieval@1 fell by less than "
                 f"{G5_RETRIEVAL_FALL} (retrieval missed the drift): "
                 f"{', '.join(g5['retrieval_missed']) or 'none'}.")
    tc = [f"{r['arm']}/{r['seed']}" for r in ev["runs"].values() if r["template_collapse"]]
    unknown = [f"{r['arm']}/{r['seed']}" for r in ev["runs"].values()
               if r["template_collapse"] is None]
    lines.append(f"**Template collapse** (grounding change <= {COLLAPSE_CHANGE}, checkable >= "
                 f"{COLLAPSE_CHECKABLE} and held-out format errors <= {COLLAPSE_FORMAT} at step "
                 f"{FINAL}): {', '.join(tc) or 'in no run'}"
                 + (f"; not assessable in {', '.join(unknown)}" if unknown else "") + ".")
    return lines
