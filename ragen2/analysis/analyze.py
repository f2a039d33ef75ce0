"""``ragen2-analyze RUN_DIR``: offline template-collapse analysis of one training run.

Per saved rollout step (``rollouts/step_*.jsonl.gz``): the plug-in mutual information between
the input (the episode's ``(env, env_seed)``, i.e. the group's prompt) and the cluster of its
first-turn reasoning (``reasoning_signatures`` over that step's texts; a null reasoning is its own
"empty" cluster), Miller-Madow corrected and raw, with its permutation floor; the share of
distinct reasoning texts; the mean within-group reward std. Then a run diagnosis
(``ragen2.collapse.diagnose``) from the latest MI, token entropy and success numbers, PNG plots
(``plots.py``), ``analysis.json`` and a short text summary on stdout.

Missing pieces (no saved rollouts, no MI monitor, no summary.json) are reported, not fatal.
A missing run directory or a corrupt metrics file: one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import warnings
from pathlib import Path
from typing import Any

from ragen2.analysis.command import Command, positive_int
from ragen2.analysis.rollouts import (
    load_hydra_config,
    load_metrics,
    load_rollouts,
    load_summary,
    metric_series,
    no_value_steps,
    run_min_samples,
)
from ragen2.collapse import (
    diagnose,
    plugin_mutual_information,
    plugin_permutation_floor,
    reasoning_signatures,
)
from ragen2.collapse.withhold import MIN_SAMPLES
from ragen2.groups import group_std

__all__ = ["analyze_run", "diagnosis_inputs", "main", "plugin_step", "summary_text"]

PROG = "ragen2-analyze"
CMD = Command(PROG)
EMPTY_CLUSTER = "empty"  # cluster id of episodes whose reasoning is null
TRAIN_WINDOW = 5  # train success = mean rollout/success over this many last steps
ENTROPY_KEYS = ("actor/entropy", "collapse/token_entropy")


# ----------------------------------------------------------------------------- per-step plug-in
def _input_id(ep: dict[str, Any]) -> tuple[str, str]:
    # (env, seed): two envs of a mix may use the same seed for different prompts.
    return (str(ep.get("env")), json.dumps(ep["env_seed"], sort_keys=True))


def _clusters(texts: list[str | None], ngram: int, threshold: float) -> list[int | str]:
    ids = iter(reasoning_signatures([t for t in texts if t is not None], n=ngram, threshold=threshold))
    return [EMPTY_CLUSTER if t is None else next(ids) for t in texts]


def _reward_spread(episodes: list[dict[str, Any]]) -> float:
    """Mean over groups of σ_g (:func:`ragen2.groups.group_std`, as the run's step metrics)."""
    stds = group_std([float(ep["reward"]) for ep in episodes],
                     [json.dumps(ep["group_id"]) for ep in episodes])
    return statistics.fmean(stds.tolist())


def _share(episodes: list[dict[str, Any]], key: str) -> float | None:
    vals = [bool(ep[key]) for ep in episodes if isinstance(ep.get(key), bool)]
    return sum(vals) / len(vals) if vals else None


#: the plug-in record's values estimated from the reasoning (None below ``monitor.min_samples``)
PLUGIN_VALUES = ("mi", "mi_raw", "mi_floor_mean", "mi_floor_q95", "mi_raw_floor_mean",
                 "mi_raw_floor_q95", "p_value", "h_cond")


def plugin_step(step: int, episodes: list[dict[str, Any]], *, ngram: int = 3,
                threshold: float = 0.5, permutations: int = 50,
                min_samples: int = MIN_SAMPLES) -> dict[str, Any]:
    """The plug-in record of one saved step (all values plain floats / ints).

    ``mi`` is Miller-Madow corrected, ``mi_raw`` uncorrected, each with the mean and 95th
    percentile of its permutation floor; ``h_cond`` = H(cluster | input) (corrected);
    ``log_n_inputs`` = log(number of distinct inputs), the MI upper bound. ``n_samples``: the
    episodes with a reasoning; below ``min_samples`` (``monitor.min_samples``) every value of
    :data:`PLUGIN_VALUES` is None (:mod:`ragen2.collapse.withhold`).
    """
    inputs = [_input_id(ep) for ep in episodes]
    texts = [ep["reasoning"] for ep in episodes]
    clusters = _clusters(texts, ngram, threshold)
    est = plugin_mutual_information(inputs, clusters)
    n_samples = sum(t is not None for t in texts)
    floor = (plugin_permutation_floor(inputs, clusters, permutations, seed=0)
             if n_samples >= min_samples else {})
    record = {
        "step": step,
        "n_episodes": len(episodes),
        "n_samples": n_samples,
        "n_inputs": int(est["n_inputs"]),
        "n_clusters": int(est["n_clusters"]),
        "n_empty_reasoning": sum(t is None for t in texts),
        "mi": est["mi"],
        "mi_raw": est["mi_raw"],
        "mi_floor_mean": floor.get("mi_floor_mean"),
        "mi_floor_q95": floor.get("mi_floor_q95"),
        "mi_raw_floor_mean": floor.get("mi_raw_floor_mean"),
        "mi_raw_floor_q95": floor.get("mi_raw_floor_q95"),
        "p_value": floor.get("p_value"),
        "h_cond": est["h_joint"] - est["h_input"],
        "log_n_inputs": math.log(est["n_inputs"]),
        "distinct_reasoning_share": len(set(texts)) / len(texts),
        "reward_spread": _reward_spread(episodes),
        "success": _share(episodes, "success"),
        "kept_share": _share(episodes, "kept"),
    }
    if n_samples < min_samples:
        record.update(dict.fromkeys(PLUGIN_VALUES))
    return record


# ----------------------------------------------------------------------------- diagnosis
def _last(series: list[tuple[int, float]]) -> tuple[int, float] | None:
    return series[-1] if series else None


def _withheld(metrics, prefix: str, last_value: tuple[int, float] | None
              ) -> tuple[dict[str, Any], dict[str, str]] | None:
    """None's and their reason when the newest measurement of ``prefix`` had no value (fewer than
    ``monitor.min_samples`` samples or 2 prompts): the diagnosis then does not assess template
    collapse, as the trainer's does, instead of reading an older value."""
    empty = no_value_steps(metrics, prefix + "mi")
    if not empty or (last_value is not None and last_value[0] > empty[-1][0]):
        return None
    step, n = empty[-1]
    why = (f"{prefix}* at step {step}: no value ("
           + ("fewer than 2 prompts" if n is None else
              f"n_samples {n:g}, under monitor.min_samples") + ")")
    keys = ("mi", "mi_null", "log_n")
    return dict.fromkeys(keys), dict.fromkeys(keys, why)


def _instrument_choice(config) -> str:
    """``monitor.alert_instrument`` of the run's saved config (``auto`` without one)."""
    monitor = (config or {}).get("monitor")
    return monitor.get("alert_instrument", "auto") if isinstance(monitor, dict) else "auto"


def _mi_inputs(metrics, records, config) -> tuple[dict[str, Any], dict[str, str]]:
    """mi, mi_null, log_n: the later-turn probe panel's newest measurement where the run logged
    one and its ``monitor.alert_instrument`` is not ``first_turn`` (the trainer's own choice,
    :mod:`ragen2.collapse.instrument`), else the online monitor's if it ran, else the plug-in one.
    A newest measurement without a value (too few samples) gives None's, not an older value."""
    choice = _instrument_choice(config)
    turns = _last(metric_series(metrics, "collapse/panel/turns/mi"))
    if choice != "first_turn" and (none := _withheld(metrics, "collapse/panel/turns/", turns)):
        return none
    if turns is not None and choice != "first_turn":
        step, mi = turns
        row, p = metrics[step], "collapse/panel/turns/"
        return ({"mi": mi, "mi_null": row.get(p + "mi_null"), "log_n": row.get(p + "log_n")},
                {k: f"{p}{k} at step {step}" if row.get(p + k) is not None else "not logged"
                 for k in ("mi", "mi_null", "log_n")})
    online = _last(metric_series(metrics, "collapse/mi"))
    if (none := _withheld(metrics, "collapse/", online)) is not None:
        return none
    if online is not None:
        step, mi = online
        row = metrics[step]
        null = row.get("collapse/mi_null")
        src = {"mi": f"collapse/mi at step {step}",
               "mi_null": f"collapse/mi_null at step {step}" if null is not None else "not logged"}
        log_n, src["log_n"] = _online_log_n(step, row, records, config)
        return {"mi": mi, "mi_null": null, "log_n": log_n}, src
    if records:
        r = records[-1]
        log_n = r["log_n_inputs"] if r["log_n_inputs"] > 0 else None
        held = (f": no value ({r.get('n_samples')} episodes with reasoning, under "
                "monitor.min_samples)" if r["mi"] is None else "")
        return ({"mi": r["mi"], "mi_null": r["mi_floor_mean"], "log_n": log_n},
                {"mi": f"plug-in MI (Miller-Madow) at step {r['step']}{held}",
                 "mi_null": f"plug-in permutation floor (mean) at step {r['step']}",
                 "log_n": (f"log({r['n_inputs']} distinct inputs) at step {r['step']}"
                           if log_n else "only one distinct input: no bound")})
    return {"mi": None, "mi_null": None, "log_n": None}, {"mi": "no MI monitor metrics, no rollouts"}


def _online_log_n(step, row, records, config) -> tuple[float | None, str]:
    """The online monitor's bound log N: logged, else from the rollouts or the config."""
    logged = row.get("collapse/log_n")
    if isinstance(logged, (int, float)) and not isinstance(logged, bool) and logged > 0:
        return float(row["collapse/log_n"]), f"collapse/log_n at step {step}"
    same = [r for r in records if r["step"] == step] or records[-1:]
    if same and same[0]["n_inputs"] > 1:
        r = same[0]
        return r["log_n_inputs"], f"log({r['n_inputs']} distinct inputs in rollouts of step {r['step']})"
    rollout = (config or {}).get("rollout")
    groups = rollout.get("env_groups") if isinstance(rollout, dict) else None
    if isinstance(groups, int) and not isinstance(groups, bool) and groups > 1:
        return math.log(groups), f"log(rollout.env_groups={groups}) from .hydra/config.yaml"
    return None, "unknown (no collapse/log_n, no rollouts, no .hydra/config.yaml)"


def _entropy_inputs(metrics) -> tuple[dict[str, Any], dict[str, str]]:
    for key in ENTROPY_KEYS:
        rl = metric_series(metrics, key, min_step=1)
        if rl:
            (s0, ref), (s1, cur) = rl[0], rl[-1]
            if ref <= 0:
                return ({"token_entropy": cur, "entropy_ref": None},
                        {"token_entropy": f"{key} at step {s1}",
                         "entropy_ref": f"{key} at step {s0} is {ref:g} (not > 0): unusable"})
            return ({"token_entropy": cur, "entropy_ref": ref},
                    {"token_entropy": f"{key} at step {s1}", "entropy_ref": f"{key} at step {s0}"})
    return {"token_entropy": None, "entropy_ref": None}, {"token_entropy": "no token-entropy metrics"}


def _success_inputs(metrics, summary) -> tuple[dict[str, Any], dict[str, str]]:
    train = metric_series(metrics, "rollout/success", min_step=1)[-TRAIN_WINDOW:]
    vals: dict[str, Any] = {"train_success": statistics.fmean(v for _, v in train) if train else None}
    src = {"train_success": (f"mean rollout/success over steps {train[0][0]}..{train[-1][0]}"
                             if train else "no rollout/success metrics")}
    ev = _last(metric_series(metrics, "eval/success"))
    if ev is not None:
        vals["eval_success"], src["eval_success"] = ev[1], f"eval/success at step {ev[0]}"
    elif summary and isinstance(summary.get("eval_after"), (int, float)):
        vals["eval_success"], src["eval_success"] = float(summary["eval_after"]), "summary.json eval_after"
    else:
        vals["eval_success"], src["eval_success"] = None, "no eval/success metrics"
    return vals, src


def _grounding_inputs(metrics, config) -> tuple[dict[str, Any], dict[str, str]]:
    """The later-turn panel's grounding as the online diagnosis reads it
    (:func:`ragen2.collapse.instrument.grounding_inputs`): its first measured value as the
    reference, the newest measurement's grounding and checkable share. Nothing where the run has
    no later-turn grounding (an env without a ``ground`` hook) or reads the first turn."""
    choice = _instrument_choice(config)
    p = "collapse/panel/turns/grounding/"
    series = sorted(metric_series(metrics, p + "frac"))
    checkable = sorted(metric_series(metrics, p + "checkable_frac"))
    if choice == "first_turn" or not series or not checkable:
        return {}, {}
    (s0, ref), (newest, chk) = series[0], checkable[-1]
    row = metrics[newest]
    return ({"grounding": row.get(p + "frac"), "grounding_ref": ref, "checkable": chk},
            {"grounding": f"{p}frac at step {newest}" if row.get(p + "frac") is not None
             else f"{p}frac withheld at step {newest}", "grounding_ref": f"{p}frac at step {s0}",
             "checkable": f"{p}checkable_frac at step {newest}"})


def diagnosis_inputs(metrics, records, summary=None, config=None
                     ) -> tuple[dict[str, Any], dict[str, str]]:
    """The keyword arguments of ``diagnose`` for this run, and where each one came from."""
    vals: dict[str, Any] = {}
    src: dict[str, str] = {}
    for v, s in (_mi_inputs(metrics, records, config), _entropy_inputs(metrics),
                 _success_inputs(metrics, summary), _grounding_inputs(metrics, config)):
        vals.update(v)
        src.update(s)
    return vals, src


# ----------------------------------------------------------------------------- the run
def analyze_run(run_dir: str | Path, *, ngram: int = 3, threshold: float = 0.5,
                permutations: int = 50) -> tuple[dict[str, Any], dict[int, dict[str, Any]]]:
    """Everything but the plots: (the analysis.json content, the metrics rows).

    Raises:
        FileNotFoundError: run_dir missing, or neither metrics.jsonl nor saved rollouts in it.
        ValueError: a corrupt metrics.jsonl / summary.json, or a metric outside its range.
    """
    run = Path(run_dir)
    if not run.is_dir():
        raise FileNotFoundError(f"run directory {run} does not exist")
    notes: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rollouts = load_rollouts(run)
    notes += [str(w.message) for w in caught]
    try:
        metrics = load_metrics(run)
    except FileNotFoundError:
        if not rollouts:
            raise FileNotFoundError(
                f"{run} is not a run directory: no metrics.jsonl and no readable rollouts/step_*.jsonl.gz"
            ) from None
        metrics = {}
        notes.append("no metrics.jsonl: only the saved rollouts are analysed")
    if not rollouts:
        notes.append("no readable rollouts/step_*.jsonl.gz: plug-in MI not computed")
    if metrics and not metric_series(metrics, "collapse/mi"):
        notes.append("no collapse/mi metrics: the online MI monitor did not run")
    summary = load_summary(run)
    if summary is None:
        notes.append("no summary.json: the run may not have finished")

    least = run_min_samples(run)
    records = [plugin_step(s, eps, ngram=ngram, threshold=threshold, permutations=permutations,
                           min_samples=least) for s, eps in rollouts.items()]
    vals, src = diagnosis_inputs(metrics, records, summary, load_hydra_config(run))
    try:
        d = diagnose(**vals)
    except ValueError as e:
        bad = str(e).split(" ", 1)[0] if str(e).split(" ", 1)[0] in vals else None
        where = f" ({bad} from {src.get(bad)})" if bad else ""
        raise ValueError(f"{run}: cannot diagnose: {e}{where}") from None
    result = {
        "run_dir": str(run),
        "settings": {"ngram": ngram, "threshold": threshold, "permutations": permutations,
                     "bias_correction": "miller_madow", "input": "(env, env_seed)",
                     "permutation_seed": 0},
        "metric_steps": len(metrics),
        "rollout_steps": list(rollouts),
        "steps": records,
        "diagnosis": {"label": d.label, "code": d.code, "also": list(d.also),
                      "evidence": d.evidence, "inputs": vals, "sources": src},
        "summary": summary,
        "notes": notes,
    }
    return result, metrics


# ----------------------------------------------------------------------------- text output
def _fmt(v: Any, digits: int = 3) -> str:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    return f"{v:.{digits}f}" if ok else "—"


def _pick_steps(steps: list[int], k: int = 8) -> list[int]:
    if len(steps) <= k:
        return steps
    return sorted({steps[round(i * (len(steps) - 1) / (k - 1))] for i in range(k)})


def summary_text(result: dict[str, Any], metrics: dict[int, dict[str, Any]]) -> str:
    """A markdown table of up to 8 steps, then the diagnosis line and the notes."""
    recs = {r["step"]: r for r in result["steps"]}
    ent_key = next((k for k in ENTROPY_KEYS if metric_series(metrics, k)), ENTROPY_KEYS[0])
    lines = [
        f"# {PROG} {result['run_dir']}",
        "",
        ("| step | train success | held-out success | MI (online) | plug-in MI | plug-in floor q95 "
         "| distinct reasoning | reward spread | token entropy |"),
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in _pick_steps(sorted(set(metrics) | set(recs))):
        row, rec = metrics.get(s, {}), recs.get(s, {})
        spread = rec.get("reward_spread", row.get("rollout/group_reward_std_mean"))
        lines.append(
            f"| {s} | {_fmt(row.get('rollout/success'))} | {_fmt(row.get('eval/success'))} "
            f"| {_fmt(row.get('collapse/mi'))} | {_fmt(rec.get('mi'))} | {_fmt(rec.get('mi_floor_q95'))} "
            f"| {_fmt(rec.get('distinct_reasoning_share'), 2)} | {_fmt(spread)} "
            f"| {_fmt(row.get(ent_key))} |"
        )
    lines += ["", f"diagnosis: {result['diagnosis']['evidence']}"]
    notes = list(result["notes"]) + [f"{name} plot skipped: {why}"
                                     for name, why in result.get("skipped_plots", {}).items()]
    if notes:
        lines += ["", "notes:"] + [f"- {n}" for n in notes]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- CLI
def _jaccard_level(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text!r}") from None
    if not 0.0 < v <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {v}")
    return v


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description="Offline template-collapse analysis of one ragen2 run directory.")
    p.add_argument("run_dir", type=Path, help="the run directory (has metrics.jsonl, rollouts/)")
    p.add_argument("--out", type=Path, default=None, help="output folder (default RUN_DIR/analysis)")
    p.add_argument("--ngram", type=positive_int, default=3,
                   help="word n-gram length of the reasoning clustering (default 3)")
    p.add_argument("--threshold", type=_jaccard_level, default=0.5,
                   help="Jaccard level in (0, 1] that merges two reasoning texts (default 0.5)")
    p.add_argument("--permutations", type=positive_int, default=50,
                   help="shuffles of the plug-in MI permutation floor (default 50)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from ragen2.analysis.plots import write_plots  # matplotlib only when it is needed

    out = args.out if args.out is not None else args.run_dir / "analysis"
    with CMD.bad_input_exits_2():
        result, metrics = analyze_run(args.run_dir, ngram=args.ngram, threshold=args.threshold,
                                      permutations=args.permutations)
        out.mkdir(parents=True, exist_ok=True)
        written, skipped = write_plots(metrics, result["steps"], out)
        result["plots"], result["skipped_plots"] = written, skipped
        (out / "analysis.json").write_text(json.dumps(result, indent=1, allow_nan=False) + "\n")
    print(summary_text(result, metrics))
    print(f"\nwrote {out / 'analysis.json'} and {len(written)} plot(s) in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
