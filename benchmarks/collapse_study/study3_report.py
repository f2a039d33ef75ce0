"""Collapse study 3's outputs, regenerated from the committed runs: ``results.json``,
``tables.md``, ``curves.png`` / ``scatter.png`` and ``examples.md`` in ``results_v3/``.

:func:`analyze` reads every registered run (:func:`study3.run_order` over the counted seeds:
``screen.json``'s, else seeds 0-3), reports finished runs of other seeds apart
(:func:`not_counted`: an ineligible warm start is left out of G1-G5), names each
one it cannot use (:func:`missing_runs`: not run, interrupted, failed, no summary), evaluates the
registration (:func:`study3_analysis.evaluate`) and writes the files. The verdict text in
``tables.md`` is generated (:func:`study3_analysis.verdict_text`), never typed.
"""

from __future__ import annotations

import json
import os
import platform
import re
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

from study3 import ARMS, FULL, QUIET_CORES, _rows, load_screen, registered_seeds, run_order
from study3_analysis import (AFTER, BEFORE, ELIGIBLE_GROUNDING, FINAL, GROUNDING, SECONDARY,
                             evaluate, load_panel_grounding, verdict_text)


def missing_runs(out: Path, runs: list[dict[str, Any]], seeds: list[int] = FULL["seeds"]
                 ) -> tuple[dict[tuple[str, int], Path], dict[str, str]]:
    """(the finished registered runs' folders, ``{"<arm>_s<seed>": why}`` for every registered
    run that is not finished: not run, interrupted or failed (its exit status and last logged
    step), or without ``summary.json``)."""
    rows = {(r["arm"], r["seed"]): r for r in runs}
    done, missing = {}, {}
    for arm, seed in run_order(seeds):
        name, d = f"{arm}_s{seed}", out / "runs" / f"{arm}_s{seed}"
        r = rows.get((arm, seed))
        logged = _rows(d)
        last = f"last step logged {max(logged)}" if logged else "nothing logged"
        if r is None:
            missing[name] = "not run" if not d.exists() else f"no record, folder present ({last})"
        elif r.get("returncode") != 0:
            rc = r.get("returncode")
            missing[name] = (f"exit {rc}" + (" (interrupted: resumable)" if rc == 75 else "")
                             + f", {last}")
        elif not (d / "summary.json").exists() or not (d / "metrics.jsonl").exists():
            missing[name] = f"recorded with exit 0 but no summary.json or metrics.jsonl ({last})"
        else:
            done[(arm, seed)] = d
    return done, missing


def not_counted(out: Path, runs: list[dict[str, Any]], seeds: list[int]) -> dict[str, str]:
    """``{"<arm>_s<seed>": why}`` for every finished run whose seed is not counted (README
    "Study 3", Deviations 2026-12-06): reported, left out of G1-G5."""
    screen = {int(e["seed"]): e for e in (load_screen(out) or {}).get("seeds", [])}
    out_of = {}
    for r in runs:
        name = f"{r['arm']}_s{r['seed']}"
        if (r["seed"] in seeds or r.get("returncode") != 0
                or not (out / "runs" / name / "summary.json").exists()):
            continue
        e = screen.get(r["seed"])
        out_of[name] = (("ineligible warm start (step-0 later-turn panel grounding "
                         + (f"{e['grounding']:.3f} < {ELIGIBLE_GROUNDING:g}"
                            if e["grounding"] is not None else f"has no value: {e['why']}") + ")")
                        if e is not None and not e["eligible"] else
                        "not a counted seed (" + ("eligible, after the first 4" if e else
                                                  "not screened") + ")")
    return out_of


def _f(v: float | None, digits: int = 2, sign: bool = False) -> str:
    return "-" if v is None else (f"{v:+.{digits}f}" if sign else f"{v:.{digits}f}")


def _spread(a: dict[str, Any], digits: int = 3) -> str:
    if not a["runs"]:
        return f"- (0 of {a['of']})"
    return (f"{a['median']:+.{digits}f} [{a['min']:+.{digits}f}, {a['max']:+.{digits}f}] "
            f"({a['runs']} of {a['of']})")


def _run_row(arm: str, seed: int, r: dict[str, Any], note: str = "") -> str:
    """One run's row of the per-run table."""
    ch = (f"{_f(r['grounding_change'], 3, True)} [{_f(r['grounding_lo'], 3, True)}, "
          f"{_f(r['grounding_hi'], 3, True)}]"
          + ("" if r["reading"] == "no data" else f" {r['reading']}")
          if r["grounding_change"] is not None else f"- ({r['grounding_change_why']})")
    tc = {True: "**yes**", False: "no", None: "n/a"}[r["template_collapse"]]
    return (f"| `{arm}_s{seed}`{note} | {_f(r['grounding_before'])} | "
            f"{', '.join(_f(v) for v in r['grounding_after'])} | {ch} | "
            f"{_f(r['checkable_final'])} | {_f(r['format_errors_final'])} | "
            f"{_f(r['success_before'])} -> {_f(r['success_final'])} | "
            f"{'**yes**' if r['no_reasoning_left'] else 'no'} | {tc} "
            f"({r['template_collapse_why']}) |")


def _seed_list(seeds: list[int]) -> str:
    return f" (seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))})" if seeds else ""


def answers(res: dict[str, Any], doses: dict[str, float], interim: bool) -> list[str]:
    """The issue's three questions (did template collapse appear, at which dose, did top-p change
    it), answered from an evaluation (``evaluate``'s result, or ``results.json``, which records
    the same keys), and whether the run-time MI diagnosis and alert flagged the runs the grounding
    rule calls template collapse: Markdown paragraphs and a table, every figure from the data.
    ``interim`` says so when registered runs are still missing."""
    hyp = {h["id"]: h for h in res["hypotheses"]}

    def h_text(hid: str) -> str:
        h = hyp[hid]
        what = "median change" if h["baseline"] is None else f"{h['arm']} - {h['baseline']}"
        return (f"{hid} ({what}) {_f(h['effect'], 3, True)} [{_f(h['lo'], 3, True)}, "
                f"{_f(h['hi'], 3, True)}] over {h['n']} {'runs' if h['baseline'] is None else 'seeds'}"
                f": **{h['verdict']}**")

    by_arm = res["collapse_by_arm"]
    yes = [f"{a}/{s}" for a, c in by_arm.items() for s in c["yes"]]
    na = [f"{a}/{s}" for a, c in by_arm.items() for s in c["n/a"]]
    assessed = sum(len(c["yes"]) + len(c["no"]) for c in by_arm.values())
    out = [("**Interim** (registered runs are missing; the answers read the runs finished so "
            "far). " if interim else "")
           + f"**Did template collapse appear?** By the registered rule, in {len(yes)} of "
           f"{assessed} assessable finished runs" + (f" ({', '.join(yes)})" if yes else "")
           + (f"; not assessable in {', '.join(na)}" if na else "")
           + f". Without a bonus and without a filter: {h_text('G1')}."]

    def cell(arm: str) -> str:
        c = by_arm[arm]
        n = len(c["yes"]) + len(c["no"])
        return (f"{len(c['yes'])} of {n}{_seed_list(c['yes'])}"
                + (f", {len(c['n/a'])} not assessable" if c["n/a"] else ""))

    def dose(d: str) -> str:
        return f"{d} ({doses[d]:g})" if d in doses else d

    rows = [f"| {dose(d)} | {cell(d)} | {cell(d + '_top_p')} |"
            for d in dict.fromkeys(d for d, _ in ARMS.values())]
    out += ["| dose (entropy_coef) | runs with template collapse, no filter | with top-p 0.9 |\n"
            "|---|---|---|\n" + "\n".join(rows)]
    out.append(f"**At which dose?** The table above, and the registered paired effects on the "
               f"grounding change: {h_text('G2a')}; {h_text('G2b')}.")
    f = res["filter_over_doses"]

    def collapsed(filt: str) -> str:  # "k of n" over the filter's arms, assessable runs only
        cs = [c for a, c in by_arm.items() if ARMS[a][1] == filt]
        return f"{sum(len(c['yes']) for c in cs)} of {sum(len(c['yes']) + len(c['no']) for c in cs)}"

    out.append(f"**Did top-p change it?** Registered: {h_text('G3a')}; {h_text('G3b')} (predicted "
               "positive: the filter holds grounding). Over all three doses (exploratory, not "
               "registered: Deviations 2026-12-06), top-p minus no filter on the grounding change, "
               f"mean over seeds {_f(f['effect'], 3, True)} [{_f(f['lo'], 3, True)}, "
               f"{_f(f['hi'], 3, True)}] over {f['n_seeds']} seeds ({f['n_pairs']} dose-seed "
               f"pairs, {f['n_below']} below 0 and {f['n_above']} above); template collapse in "
               f"{collapsed('top_p')} assessable top-p runs and {collapsed('none')} unfiltered "
               "ones.")
    # results.json records the per-run analysis as "per_run"; evaluate() returns it as "runs"
    runs = res["per_run"] if "per_run" in res else list(res["runs"].values())
    tc = [r for r in runs if r["template_collapse"]]

    def name(r: dict[str, Any]) -> str:
        return f"{r['arm']}/{r['seed']}"

    caught = [name(r) for r in tc if r.get("diagnosis_steps")]
    other = [name(r) for r in runs if r.get("diagnosis_steps") and not r["template_collapse"]]
    alerts = [name(r) for r in runs if r.get("alert_steps")]
    out.append("**Did the run-time MI instruments see it?** (descriptive) The runs' own "
               "diagnosis (at the pinned commit it read the later-turn panel MI only; ragen2's "
               "diagnosis now reads the grounding too) labelled template collapse at some step in "
               f"{len(caught)} of the {len(tc)} runs with template collapse by the grounding rule"
               + (f" ({', '.join(caught)})" if caught else "") + f" and in {len(other)} other "
               "finished runs" + (f" ({', '.join(other)})" if other else "") + "; the collapse "
               f"alert fired in {len(alerts)}" + (f" ({', '.join(alerts)})" if alerts else "")
               + " (it waits for held-out success to stop gaining).")
    if tc and all("instruments" in r for r in tc):
        cols = list(tc[0]["instruments"])
        out.append("The runs with template collapse by the grounding rule, each instrument "
                   "before RL -> at step 100 (panel = the later-turn probe panel):\n\n"
                   "| run | grounding | diagnosis flagged at | " + " | ".join(cols) + " |\n|"
                   + "---|" * (3 + len(cols)) + "\n" + "\n".join(
                       f"| {name(r)} | {_f(r['grounding_before'])} -> "
                       f"{_f(r['grounding_after'][-1])} | "
                       f"{', '.join(map(str, r.get('diagnosis_steps') or [])) or 'never'} | "
                       + " | ".join(f"{_f(a)} -> {_f(b)}" for a, b in
                                    (r["instruments"][c] for c in cols)) + " |" for r in tc))
    return out


def tables(ev: dict[str, Any], missing: dict[str, str], settings: dict[str, Any],
           runs: list[dict[str, Any]], seeds: list[int] = FULL["seeds"],
           apart: dict[str, Any] | None = None,
           forms: dict[str, dict[str, Any] | None] | None = None) -> str:
    """``tables.md``: runs (missing ones named), per run, per arm (primary and secondary
    changes), hypotheses, verdict text, step times of quiet pairs."""
    doses = settings.get("doses", {})
    commits = sorted({str(r.get("commit")) for r in runs if r.get("returncode") == 0})
    total = len(run_order(seeds))
    lines = ["# Study 3: tables", "",
             f"Generated by `run.py --design v3 --analyze-only` from the committed runs. Doses: "
             f"d0 {doses.get('d0')}, dlow {doses.get('dlow')}, dhigh {doses.get('dhigh')}. "
             f"Commits of the finished runs: {', '.join(commits) or 'none'}. "
             f"\"Change\" = mean(step {AFTER[0]}, step {AFTER[1]}) - step {BEFORE} (batch "
             "instruments: - step 1); a value measured from fewer than monitor.min_samples "
             "samples has no value, and a change needing it has none (the reason is given).", "",
             f"## Runs: {total - len(missing)} of {total} registered finished (counted seeds "
             f"{', '.join(map(str, seeds))})", ""]
    lines += [f"- missing `{k}`: {v}" for k, v in missing.items()] or ["- none missing"]
    lines += [f"- reported, left out of G1-G5: `{k}`: {v['why']}" for k, v in (apart or {}).items()]
    lines += ["", "## Per run (later-turn panel grounding)", "",
              "| run | before | steps 90, 100 | change [95% over prompts], its reading (a fall "
              "predicted) | checkable @100 | "
              "held-out format errors @100 | held-out success 0 -> 100 | no reasoning left | "
              "template collapse |", "|" + "---|" * 9]
    lines += [_run_row(arm, seed, r) for (arm, seed), r in ev["runs"].items()]
    lines += [_run_row(v["arm"], v["seed"], v, " (not counted)") for v in (apart or {}).values()]
    if forms:
        lines += ["", "## Sentence form kept (descriptive, not registered)", "",
                  "Added 2026-12-06 after `dlow_top_p_s3`, whose reasoning passed the registered "
                  "fluency test (checkable >= 0.8) while its sentences broke: of the later-turn "
                  "panel's reasonings at the last panel step, the share whose sentence form "
                  "(numbers masked, spaces collapsed) is one that at least 5% of the same panel's "
                  "reasonings had before RL (`sentence_form_kept`). No rule reads it.", "",
                  "| run | kept at the last panel step |", "|---|---|"]
        lines += [f"| `{k}` | " + ("-" if f is None else
                                   f"{f['frac']:.2f} ({f['kept']} of {f['of']}, step {f['step']})")
                  + " |" for k, f in forms.items()]
    lines += ["", "## Per arm: change, median [min, max] (runs with a value of the arm's runs)", "",
              "| outcome | " + " | ".join(f"`{a}`" for a in ARMS) + " |",
              "|" + "---|" * (len(ARMS) + 1)]
    primary = {a: {"median": None, "min": None, "max": None, "runs": 0, "of": 0} for a in ARMS}
    for a in ARMS:
        v = [r["grounding_change"] for r in ev["runs"].values() if r["arm"] == a]
        got = [x for x in v if x is not None]
        primary[a] = {"median": statistics.median(got) if got else None, "min": min(got, default=None),
                      "max": max(got, default=None), "runs": len(got), "of": len(v)}
    lines.append(f"| **later-turn panel grounding (primary)** | "
                 + " | ".join(_spread(primary[a]) for a in ARMS) + " |")
    for name, sec in ev["secondary"].items():
        lines.append(f"| {name} (`{sec['key']}`) | "
                     + " | ".join(_spread(sec["arms"][a]) for a in ARMS) + " |")
    lines += ["", "## The three questions" + (" (interim)" if missing else ""), ""]
    for par in answers(ev, doses, bool(missing)):
        lines += [par, ""]
    lines += ["## Hypotheses", ""]
    if missing:
        lines += [f"**Interim**: {len(missing)} of {total} registered runs are not finished. The "
                  "verdicts below read the runs finished so far; the study's verdicts are those "
                  "read once every registered run is finished (the docs page shows them only "
                  "then). Over 3 or 4 runs a bootstrap interval of Spearman's rho is degenerate "
                  "(most resamples repeat a run), so an interval of [+1, +1] there says little.",
                  ""]
    lines += ["| id | effect [95% interval] | n | verdict | left out |", "|---|---|---|---|---|"]
    for h in [*ev["hypotheses"], *ev["g4"], ev["g5"]]:
        lines.append(f"| {h['id']} | {_f(h['effect'], 3, True)} [{_f(h['lo'], 3, True)}, "
                     f"{_f(h['hi'], 3, True)}] | {h['n']} | {h['verdict']} | "
                     f"{len(h['dropped'])} |")
    lines += ["", "## Verdicts (generated from the rules)" + (", interim" if missing else ""), ""]
    lines += [f"- {x}" for x in verdict_text(ev)]
    lines += ["", "## Secondary outcomes, paired (descriptive, no verdict)", "",
              "| outcome | " + " | ".join(next(iter(ev["secondary"].values()))["paired"]) + " |",
              "|" + "---|" * (1 + len(next(iter(ev["secondary"].values()))["paired"]))]
    for name, sec in ev["secondary"].items():
        lines.append(f"| {name} | " + " | ".join(
            f"{_f(p['diff'], 3, True)} [{_f(p['lo'], 3, True)}, {_f(p['hi'], 3, True)}] (n {p['n']})"
            for p in sec["paired"].values()) + " |")
    lines += ["", "## Step times", "", step_times(runs), ""]
    return "\n".join(lines)


def step_times(runs: list[dict[str, Any]]) -> str:
    """Claimed only from pairs whose runs both had foreign_cores < QUIET_CORES (README
    "Timings"): top-p over no filter per dose and seed, or why not."""
    by = {(r["arm"], r["seed"]): r for r in runs if r.get("returncode") == 0}
    out = []
    for dose in ("d0", "dlow", "dhigh"):
        pairs = []
        for seed in sorted({s for _, s in by}):
            a, b = by.get((f"{dose}_top_p", seed)), by.get((dose, seed))
            if a and b and all((x.get("foreign_cores") is not None
                                and x["foreign_cores"] < QUIET_CORES) for x in (a, b)):
                if a.get("mean_step_s") and b.get("mean_step_s"):
                    pairs.append(f"seed {seed}: {a['mean_step_s'] / b['mean_step_s']:.2f}")
        out.append(f"- {dose}_top_p / {dose}: " + (", ".join(pairs) if pairs else
                                                   "not claimed (no pair quiet on both sides)"))
    return "\n".join(out)


def _mean_step_s(m: dict[int, dict[str, Any]]) -> float | None:
    v = [r["timing/step_s"] for s, r in m.items() if s >= 1 and isinstance(r.get("timing/step_s"),
                                                                           (int, float))]
    return statistics.fmean(v) if v else None


def write_examples(out: Path, ev: dict[str, Any], dirs: dict[tuple[str, int], Path]) -> None:
    """Later-turn panel reasoning at step 0 and at the last panel step, with the env's verdict
    per sample, of the runs with the largest and the smallest grounding change and of every run
    G5 flags (retrieval missed the drift): per run, the three panel prompts whose grounded
    fraction fell most from the first to the last step (:func:`panel_examples`)."""
    have = {k: r["grounding_change"] for k, r in ev["runs"].items()
            if r["grounding_change"] is not None}
    chosen = []
    if have:  # ties: the first run in the registered order
        most, least = min(have, key=have.get), max(have, key=have.get)
        chosen.append(("largest fall of grounding", most))
        if least != most:
            chosen.append(("smallest fall (or largest rise) of grounding", least))
    for name in ev["g5"]["retrieval_missed"]:
        arm, seed = name.split("/")
        chosen.append(("retrieval missed the drift (G5)", (arm, int(seed))))
    lines = ["# Study 3: reasoning examples", "",
             "Later-turn probe panel (fixed held-out states after a scripted opening): per run, "
             "the three prompts whose grounded fraction fell most from the first panel step to "
             "the last (ties: the panel's order), each sample's reasoning with the env's grounding "
             "verdict (1 = states the true position, 0 = a wrong one, - = nothing checkable).",
             ""]
    if not chosen:
        lines.append("No run has a grounding change yet.")
    for title, key in chosen:
        r = ev["runs"][key]
        lines += [f"## {title}: {key[0]} seed {key[1]} (grounding {_f(r['grounding_before'])} -> "
                  f"{', '.join(_f(v) for v in r['grounding_after'])}, change "
                  f"{_f(r['grounding_change'], 3, True)})", ""]
        lines += [*_example_lines(panel_examples(dirs[key])), ""]
    (out / "examples.md").write_text("\n".join(lines))


def panel_examples(run_dir: Path, k: int = 3, samples: int = 2) -> list[dict[str, Any]]:
    """The run's later-turn panel at its first and last panel steps: the ``k`` prompts whose
    grounded fraction fell most (:func:`_largest_falls`), in that order, per step. One entry per
    (step, prompt): ``{"step", "state", "samples": [(reasoning, verdict mark), ...]}`` with the
    first ``samples`` reasonings, the mark "1", "0" or "-" (nothing checkable); [] without panel
    files."""
    from ragen2.analysis.report_samples import load_panel

    texts = load_panel(run_dir, "panel/turns")
    verdicts = load_panel_grounding(run_dir, tuple(texts))
    first, last = min(texts, default=None), max(texts, default=None)
    shown = _largest_falls(verdicts, first, last, k)
    out = []
    for step in dict.fromkeys(x for x in (first, last) if x is not None):
        for p in sorted((p for p in texts[step] if _raw_key(p) in shown),
                        key=lambda p: shown.index(_raw_key(p))):
            g = next((v for key, v in verdicts.get(step, {}).items() if str(key) == _raw_key(p)),
                     [])
            out.append({"step": step,
                        "state": (p["prompt"] or "").strip().replace("\n", " / ")[:160],
                        "samples": [((text or "(none)")[:300],
                                     "-" if i >= len(g) or g[i] is None else f"{g[i]:g}")
                                    for i, text in enumerate(p["reasoning"][:samples])]})
    return out


def _example_lines(examples: list[dict[str, Any]]) -> list[str]:
    """``examples.md``'s nested list of :func:`panel_examples`' entries, grouped by step."""
    lines: list[str] = []
    step = None
    for e in examples:
        if e["step"] != step:
            step = e["step"]
            lines.append(f"- step {step}:")
        lines.append(f"  - state: `{e['state']}`")
        lines += [f"    - [{mark}] {text}" for text, mark in e["samples"]]
    return lines


def _form(text: str) -> str:
    """A reasoning's sentence form: its numbers masked as ``#``, its whitespace collapsed."""
    return re.sub(r"\d+", "#", " ".join(text.split()))


def sentence_form_kept(run_dir: Path, min_share: float = 0.05) -> dict[str, Any] | None:
    """Descriptive, not registered (added 2026-12-06): of the later-turn panel's reasonings at
    its last panel step, how many have a sentence form (:func:`_form`) that at least
    ``min_share`` of the same panel's reasonings had at its first step (before RL): the warm
    start's forms, not its rare slips. ``{"step", "kept", "of", "frac"}``; None without two
    panel steps. "I am at row 3, column 1." keeps the form of "I am at row 2, column 1.";
    "... starts 2." does not keep "... starts Down.".
    """
    from ragen2.analysis.report_samples import load_panel

    texts = load_panel(run_dir, "panel/turns")
    if len(texts) < 2:
        return None
    first, last = min(texts), max(texts)
    written = Counter(_form(t) for p in texts[first] for t in p["reasoning"] if t)
    before = {f for f, c in written.items() if c >= min_share * written.total()}
    after = [t for p in texts[last] for t in p["reasoning"]]
    kept = sum(1 for t in after if t and _form(t) in before)
    return {"step": last, "kept": kept, "of": len(after),
            "frac": kept / len(after) if after else 0.0}


def _raw_key(p: dict[str, Any]) -> str:
    """A panel record's prompt key as ``load_panel_grounding`` keys it (the env name dropped)."""
    return p["key"].split(" ", 1)[-1]


def _largest_falls(verdicts: dict[int, dict[Any, list[float | None]]], first: int | None,
                   last: int | None, k: int = 3) -> list[str]:
    """The keys of the ``k`` prompts whose grounded fraction (checkable samples only) fell most
    from step ``first`` to step ``last``; a prompt without a checkable sample at either step
    counts as no fall; ties keep the panel's order."""
    def frac(step: int | None, key: Any) -> float | None:
        g = [x for x in verdicts.get(step, {}).get(key, []) if x is not None]
        return sum(g) / len(g) if g else None

    keys = list(verdicts.get(first, {}) or verdicts.get(last, {}))
    falls = []
    for i, key in enumerate(keys):
        a, b = frac(first, key), frac(last, key)
        falls.append((b - a if a is not None and b is not None else 0.0, i, str(key)))
    return [key for _, _, key in sorted(falls)[:k]]


#: the overrides that make a Study 3 arm (the seed keys differ within an arm)
ARM_KEYS = "filter,algorithm.entropy_coef"


def sweep_page(out: Path, runs: list[dict[str, Any]]) -> Path:
    """``out/report.html``: ragen2's sweep report (``ragen2.analysis.report_sweep``) over the
    finished counted runs only (:func:`missing_runs`: no run of a seed outside the count, none
    in progress), one arm per (filter, entropy_coef), without the per-run pages."""
    from ragen2.analysis.report_sweep import sweep_report

    dirs, _ = missing_runs(out, runs, registered_seeds(out))
    if not dirs:
        raise ValueError(f"{out}: no finished counted run to report")
    page = out / "report.html"
    page.write_text(sweep_report(out / "runs", sorted(dirs.values()), page, group_by=ARM_KEYS,
                                 job_reports=False), encoding="utf-8")
    return page


def analyze(out: Path, runs: list[dict[str, Any]], settings: dict[str, Any], plots: bool = True,
            resamples: int = 2000) -> dict[str, Any]:
    """Evaluate the registered runs in ``out/runs`` and write results.json, tables.md, the
    curves and the examples; returns the result."""
    from ragen2.analysis import study
    from ragen2.analysis.rollouts import load_metrics

    seeds = registered_seeds(out)
    dirs, missing = missing_runs(out, runs, seeds)
    metrics = {k: load_metrics(d) for k, d in dirs.items()}
    panels = {k: load_panel_grounding(d) for k, d in dirs.items()}
    ev = evaluate(metrics, panels, missing, resamples)
    apart = {}  # finished runs of seeds not counted: their figures, outside the hypotheses
    for name, why in not_counted(out, runs, seeds).items():
        arm, seed = name.rsplit("_s", 1)
        d = out / "runs" / name
        x = evaluate({(arm, int(seed)): load_metrics(d)}, {(arm, int(seed)): load_panel_grounding(d)},
                     None, resamples)["runs"]
        apart[name] = {**x[(arm, int(seed))], "key": name, "why": why}
    rows = [{**r, "mean_step_s": _mean_step_s(metrics[(r["arm"], r["seed"])])
             if (r["arm"], r["seed"]) in metrics else None} for r in runs]
    plot_names = []
    if plots and metrics:
        plot_names = [p.name for p in study.write_plots(metrics, study.correlations(metrics), out)]
    result = {"settings": settings, "machine": {"python": platform.python_version(),
                                                "cpus": os.cpu_count()},
              "commits": sorted({str(r.get("commit")) for r in rows if r.get("returncode") == 0}),
              "runs": rows, "counted_seeds": seeds, "missing": missing,
              "not_counted": {k: v["why"] for k, v in apart.items()},
              "per_run_not_counted": list(apart.values()),
              "per_run": [{**r, "key": f"{r['arm']}_s{r['seed']}"} for r in ev["runs"].values()],
              "no_reasoning_left": ev["no_reasoning_left"], "no_data_arms": ev["no_data_arms"],
              "hypotheses": ev["hypotheses"], "g4": ev["g4"], "g5": ev["g5"],
              "secondary": ev["secondary"], "collapse_by_arm": ev["collapse_by_arm"],
              "filter_over_doses": ev["filter_over_doses"], "verdicts": verdict_text(ev),
              "grounding_key": GROUNDING, "secondary_keys": {k: v[0] for k, v in SECONDARY.items()},
              "final_step": FINAL, "plots": plot_names}
    (out / "results.json").write_text(json.dumps(result, indent=1, default=str))
    forms = {f"{a}_s{sd}": sentence_form_kept(d) for (a, sd), d in dirs.items()}
    forms.update({k: sentence_form_kept(out / "runs" / k) for k in apart})
    (out / "tables.md").write_text(tables(ev, missing, settings, rows, seeds, apart, forms))
    if dirs:
        write_examples(out, ev, dirs)
    for line in result["verdicts"]:
        print(f"  {line}", flush=True)
    return result
