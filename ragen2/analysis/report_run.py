"""The run page of ``ragen2-report RUN_DIR``: one HTML document about one run directory.

Sections: the run directory, its overrides, composed config and ``summary.json``; the curves of
``report_figures.CURVES`` over steps (a figure the run has no data for says "not measured in this
run"); the diagnosis timeline with collapse alerts and rollbacks; the tiered SNR grades and every
``filter/*`` / ``snr/*`` metric over steps; the word n-grams the reasoning of most prompts shares
at the last saved step (template mining); per prompt, reasoning samples at the first and the last
saved step side by side, those n-grams marked. The page is ``templates/run.html.j2``
(autoescaped: all model text is HTML-escaped). Problems that do
not stop the page (a half-written file, an unreadable summary) are listed under "Notes".
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

from ragen2.analysis import report_figures as figs
from ragen2.analysis.html import MISSING, Markup, fmt, macro, png_bytes, png_img, render
from ragen2.analysis.report_samples import highlight, load_samples, pair_prompts, template_ngrams
from ragen2.analysis.rollouts import load_hydra_config, load_metrics, load_overrides, load_summary

__all__ = ["is_run_dir", "run_report"]

MAX_TEXT = 1500  # characters of one reasoning shown
MAX_STEP_COLUMNS = 20  # steps of the filter / SNR table


def is_run_dir(path: Path) -> bool:
    """Whether ``path`` holds a run's own files (not just jobs of a sweep)."""
    return (path / "metrics.jsonl").is_file() or (path / "rollouts").is_dir() or (path / "panel").is_dir()


# ----------------------------------------------------------------------------- sections
# Each gathers one section's data for templates/run.html.j2; the template writes the HTML.
def _header(run: Path, notes: list[str]) -> dict[str, Any]:
    try:
        overrides = load_overrides(run)
    except ValueError as e:
        overrides = None
        notes.append(str(e))
    config = load_hydra_config(run)
    config_yaml = None
    if config is not None:
        import yaml

        config_yaml = yaml.safe_dump(config, sort_keys=False)
    try:
        summary = load_summary(run)
    except ValueError as e:
        summary = None
        notes.append(str(e))
    rows = None if summary is None else [
        (k, fmt(v) if isinstance(v, (int, float)) else json.dumps(v)) for k, v in summary.items()]
    return {"run": run, "overrides": overrides or [], "config_yaml": config_yaml, "summary": rows}


def _curves(metrics) -> dict[str, Any]:
    drawn, absent_figs = [], []
    present = {k for row in metrics.values() for k in row}
    for curve in figs.CURVES:
        fig = figs.curve_figure(curve, metrics)
        if fig is None:
            absent_figs.append({"name": curve.name, "title": curve.title,
                                "missing": ", ".join(line.key for line in curve.lines)})
            continue
        absent = [k for k in curve.keys() if k not in present]
        drawn.append({"name": curve.name, "img": png_img(png_bytes(fig), curve.title),
                      "absent": ", ".join(absent)})
    return {"curves": drawn, "not_measured": absent_figs}


def _diagnosis(metrics) -> dict[str, Any] | None:
    rows = figs.diagnosis_rows(metrics)
    if not rows:
        return None
    label = macro("diagnosis_label")
    cells = [(str(r["step"]), label(r["label"]) if r["label"] else MISSING,
              "alert" if r["alert"] else "", "rollback" if r["rollback"] else "") for r in rows]
    return {"img": png_img(png_bytes(figs.diagnosis_figure(metrics)), "diagnosis timeline"),
            "rows": cells}


def _pick(steps: list[int], k: int) -> list[int]:
    if len(steps) <= k:
        return steps
    return sorted({steps[round(i * (len(steps) - 1) / (k - 1))] for i in range(k)})


def _filter(metrics) -> dict[str, Any] | None:
    keys = sorted({k for row in metrics.values() for k in row if k.startswith(("filter/", "snr/"))})
    if not keys:
        return None
    fig = figs.snr_figure(metrics)
    logged = [s for s, row in metrics.items() if any(k in row for k in keys)]
    steps = _pick(logged, MAX_STEP_COLUMNS)
    code = macro("code")
    return {"img": png_img(png_bytes(fig), "tiered SNR grades") if fig else None,
            "n_logged": len(logged), "steps": steps, "step_headers": [f"step {s}" for s in steps],
            "rows": [[code(k)] + [fmt(metrics[s].get(k)) for s in steps] for k in keys]}


def _cell(p: dict[str, Any] | None, marks: set, ngram: int, samples: int) -> Markup:
    if p is None:
        return macro("sample_cell")(None)
    items = []
    for i, text in enumerate(p["reasoning"][:samples]):
        shown = (Markup(highlight(text[:MAX_TEXT], marks, ngram) + ("…" if len(text) > MAX_TEXT else ""))
                 if text else None)
        items.append({"shown": shown, "answer": p["answers"][i] if i < len(p["answers"]) else None})
    return macro("sample_cell")({"prompt": p.get("prompt"), "items": items,
                                 "more": len(p["reasoning"]) - samples})


def _samples(run: Path, notes: list[str], *, ngram: int, prompts: int, samples: int
             ) -> dict[str, Any] | None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        source, steps = load_samples(run)
    notes += [str(w.message) for w in caught]
    if not steps:
        return None
    first, last = min(steps), max(steps)
    mined = template_ngrams(steps[last], ngram)
    at_first = dict(template_ngrams(steps[first], ngram, min_share=0.0, top=10**9))
    marks = {g for g, _ in mined}
    rows = pair_prompts(steps[first], steps[last], prompts)
    common = {p["key"] for p in steps[first]} & {p["key"] for p in steps[last]}
    code = macro("code")
    cells = [(code(label), _cell(a, marks, ngram, samples), _cell(b, marks, ngram, samples))
             for label, a, b in rows]
    same = first == last
    if same:
        cells = [c[:2] for c in cells]
    return {"ngram": ngram, "first": first, "last": last, "n_last": len(steps[last]),
            "mined": [{"text": " ".join(g), "share": share, "share_first": at_first.get(g, 0.0)}
                      for g, share in mined],
            "source": source, "per_prompt": samples, "no_common": not common and not same,
            "headers": ["prompt", f"step {first}"] + ([] if same else [f"step {last}"]),
            "rows": cells}


NO_SAMPLES = "not measured in this run (no panel/step_*.jsonl and no rollouts/step_*.jsonl.gz)"


def run_report(run_dir: str | Path, *, ngram: int = 3, prompts: int = 8, samples: int = 3) -> str:
    """The HTML page of one run.

    Raises:
        FileNotFoundError: run_dir is not a run directory.
        ValueError: a corrupt metrics.jsonl (names file and line).
    """
    run = Path(run_dir)
    if not is_run_dir(run):
        raise FileNotFoundError(f"{run} is not a run directory (no metrics.jsonl, rollouts/ or panel/)")
    notes: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            metrics = load_metrics(run)
        except FileNotFoundError:
            metrics = {}
            notes.append("no metrics.jsonl: no curves")
    notes += [str(w.message) for w in caught]
    context = {**_header(run, notes), **_curves(metrics), "diagnosis": _diagnosis(metrics),
               "snr": _filter(metrics),
               "samples": _samples(run, notes, ngram=ngram, prompts=prompts, samples=samples),
               "no_samples": NO_SAMPLES}
    return render("run.html.j2", title=f"ragen2 report: {run.name}", notes=notes, **context)
