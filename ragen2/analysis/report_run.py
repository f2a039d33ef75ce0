"""The run page of ``ragen2-report RUN_DIR``: one HTML document about one run directory.

Sections: the run directory, its overrides, composed config and ``summary.json``; the curves of
``report_figures.CURVES`` over steps (a figure the run has no data for says "not measured in this
run"); the diagnosis timeline with collapse alerts and rollbacks; the tiered SNR grades and every
``filter/*`` / ``snr/*`` metric over steps; the word n-grams the reasoning of most prompts shares
at the last saved step (template mining); per prompt, reasoning samples at the first and the last
saved step side by side, those n-grams marked. All model text is HTML-escaped. Problems that do
not stop the page (a half-written file, an unreadable summary) are listed under "Notes".
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

from ragen2.analysis import report_figures as figs
from ragen2.analysis.html import MISSING, esc, fmt, page, png_bytes, png_img, table
from ragen2.analysis.report_samples import highlight, load_samples, pair_prompts, template_ngrams
from ragen2.analysis.rollouts import load_hydra_config, load_metrics, load_overrides, load_summary

__all__ = ["is_run_dir", "run_report"]

MAX_TEXT = 1500  # characters of one reasoning shown
MAX_STEP_COLUMNS = 20  # steps of the filter / SNR table


def is_run_dir(path: Path) -> bool:
    """Whether ``path`` holds a run's own files (not just jobs of a sweep)."""
    return (path / "metrics.jsonl").is_file() or (path / "rollouts").is_dir() or (path / "panel").is_dir()


# ----------------------------------------------------------------------------- sections
def _header(run: Path, notes: list[str]) -> str:
    parts = [f"<h1>ragen2 run report</h1><p>run directory: <code>{esc(run)}</code></p>"]
    try:
        overrides = load_overrides(run)
    except ValueError as e:
        overrides = None
        notes.append(str(e))
    parts.append("<p>overrides: " + (" ".join(f"<code>{esc(o)}</code>" for o in overrides)
                                     if overrides else "<span class=\"missing\">none recorded</span>")
                 + "</p>")
    config = load_hydra_config(run)
    if config is not None:
        import yaml

        parts.append("<details><summary>composed config (.hydra/config.yaml)</summary>"
                     f"<pre>{esc(yaml.safe_dump(config, sort_keys=False))}</pre></details>")
    try:
        summary = load_summary(run)
    except ValueError as e:
        summary = None
        notes.append(str(e))
    if summary is None:
        parts.append('<p class="missing">no summary.json: the run may not have finished</p>')
    else:
        rows = [(esc(k), esc(fmt(v) if isinstance(v, (int, float)) else json.dumps(v)))
                for k, v in summary.items()]
        parts.append("<h3>summary.json</h3>" + table(["key", "value"], rows, id="summary"))
    return "\n".join(parts)


def _curves(metrics) -> str:
    items, absent_figs = [], []
    present = {k for row in metrics.values() for k in row}
    for curve in figs.CURVES:
        fig = figs.curve_figure(curve, metrics)
        if fig is None:
            absent_figs.append(f'<li id="fig-{curve.name}"><b>{esc(curve.title)}</b>: not measured '
                               f'in this run (no {esc(", ".join(line.key for line in curve.lines))})'
                               "</li>")
            continue
        absent = [k for k in curve.keys() if k not in present]
        note = (f'<span class="missing">not in this run: {esc(", ".join(absent))}</span>'
                if absent else "")
        items.append(f'<figure id="fig-{curve.name}">{png_img(png_bytes(fig), curve.title)}'
                     f"<figcaption>{note}</figcaption></figure>")
    return ("<h2>Curves over steps</h2><div class=\"figures\">" + "".join(items) + "</div>"
            + (f'<ul class="missing" id="not-measured">{"".join(absent_figs)}</ul>' if absent_figs
               else ""))


def _diagnosis(metrics) -> str:
    rows = figs.diagnosis_rows(metrics)
    head = "<h2>Diagnosis timeline</h2>"
    if not rows:
        return head + ('<p class="missing" id="diagnosis-timeline">not measured in this run '
                       "(no collapse/diagnosis, collapse/alert or collapse/rollback)</p>")
    fig = png_img(png_bytes(figs.diagnosis_figure(metrics)), "diagnosis timeline")
    cells = [(str(r["step"]),
              f'<span class="diag-{esc(r["label"])}">{esc(r["label"])}</span>' if r["label"] else MISSING,
              "alert" if r["alert"] else "", "rollback" if r["rollback"] else "") for r in rows]
    return (head + f'<figure id="fig-diagnosis">{fig}</figure>'
            + table(["step", "diagnosis (collapse/diagnosis)", "collapse/alert", "collapse/rollback"],
                    cells, id="diagnosis-timeline"))


def _pick(steps: list[int], k: int) -> list[int]:
    if len(steps) <= k:
        return steps
    return sorted({steps[round(i * (len(steps) - 1) / (k - 1))] for i in range(k)})


def _filter(metrics) -> str:
    head = "<h2>SNR grades and the group filter</h2>"
    keys = sorted({k for row in metrics.values() for k in row if k.startswith(("filter/", "snr/"))})
    if not keys:
        return (head + '<p class="missing" id="filter-table">not measured in this run (no filter/* '
                "or snr/* metrics)</p>")
    fig = figs.snr_figure(metrics)
    body = (f'<figure id="fig-snr">{png_img(png_bytes(fig), "tiered SNR grades")}</figure>' if fig
            else '<p class="missing">tiered SNR grades: not measured in this run (no snr/frac_*: '
                 "filter=tiered was off)</p>")
    logged = [s for s, row in metrics.items() if any(k in row for k in keys)]
    steps = _pick(logged, MAX_STEP_COLUMNS)
    rows = [[f"<code>{esc(k)}</code>"] + [fmt(metrics[s].get(k)) for s in steps] for k in keys]
    shown = (f"<p>{len(steps)} of the {len(logged)} logged steps, evenly spaced.</p>"
             if len(steps) < len(logged) else "")
    return (head + body + shown + '<div class="scroll">'
            + table(["metric"] + [f"step {s}" for s in steps], rows, id="filter-table",
                    numeric=[False] + [True] * len(steps)) + "</div>")


def _cell(p: dict[str, Any] | None, marks: set, ngram: int, samples: int) -> str:
    if p is None:
        return '<span class="missing">not at this step</span>'
    prompt = (f"<details><summary>prompt</summary><pre>{esc(p['prompt'])}</pre></details>"
              if p.get("prompt") else "")
    items = []
    for i, text in enumerate(p["reasoning"][:samples]):
        answer = p["answers"][i] if i < len(p["answers"]) else None
        shown = (highlight(text[:MAX_TEXT], marks, ngram) + ("…" if len(text) > MAX_TEXT else "")
                 if text else '<span class="missing">no reasoning</span>')
        items.append(f'<li><div class="reasoning">{shown}</div>'
                     + (f'<div class="answer">answer: <code>{esc(answer)}</code></div>'
                        if answer is not None else "") + "</li>")
    more = len(p["reasoning"]) - samples
    return (prompt + '<ol class="samples">' + "".join(items) + "</ol>"
            + (f"<p class=\"missing\">+{more} more samples</p>" if more > 0 else ""))


def _samples(run: Path, notes: list[str], *, ngram: int, prompts: int, samples: int) -> str:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        source, steps = load_samples(run)
    notes += [str(w.message) for w in caught]
    head_t, head_s = "<h2>Template mining</h2>", "<h2>Reasoning samples per prompt</h2>"
    if not steps:
        why = "not measured in this run (no panel/step_*.jsonl and no rollouts/step_*.jsonl.gz)"
        return (f'{head_t}<p class="missing" id="templates">{why}</p>'
                f'{head_s}<p class="missing" id="samples">{why}</p>')
    first, last = min(steps), max(steps)
    mined = template_ngrams(steps[last], ngram)
    at_first = dict(template_ngrams(steps[first], ngram, min_share=0.0, top=10**9))
    marks = {g for g, _ in mined}
    if mined:
        items = "".join(f"<li><code>{esc(' '.join(g))}</code> in <b>{share:.0%}</b> of prompts"
                        f" (at step {first}: {at_first.get(g, 0.0):.0%})</li>" for g, share in mined)
        mining = f'<ol id="templates">{items}</ol>'
    else:
        mining = (f'<p class="missing" id="templates">no word {ngram}-gram occurs in the reasoning of '
                  f"half the prompts or more at step {last} ({len(steps[last])} prompts)</p>")
    intro = (f"<p>Word {ngram}-grams in the reasoning of at least half of the {len(steps[last])} "
             f"prompts at the last saved step ({last}), with their share; they are "
             "<mark>marked</mark> in the samples below.</p>")
    rows = pair_prompts(steps[first], steps[last], prompts)
    common = {p["key"] for p in steps[first]} & {p["key"] for p in steps[last]}
    pairing = ("" if common or first == last else " The two steps have no prompt in common (the run "
               "draws fresh prompts): rows pair them by position.")
    cells = [(f"<code>{esc(label)}</code>", _cell(a, marks, ngram, samples),
              _cell(b, marks, ngram, samples)) for label, a, b in rows]
    same = first == last
    cols = ["prompt", f"step {first}"] + ([] if same else [f"step {last}"])
    if same:
        cells = [c[:2] for c in cells]
    return (head_t + intro + mining + head_s
            + f"<p>source: <code>{esc(source)}</code>; the first and the last saved step, "
              f"{len(rows)} prompts, up to {samples} samples each.{pairing}</p>"
            + table(cols, cells, id="samples", cls="samples"))


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
    body = [_header(run, notes), _curves(metrics), _diagnosis(metrics), _filter(metrics),
            _samples(run, notes, ngram=ngram, prompts=prompts, samples=samples)]
    if notes:
        body.append('<h2>Notes</h2><ul class="notes">'
                    + "".join(f"<li>{esc(n)}</li>" for n in notes) + "</ul>")
    return page(f"ragen2 report: {run.name}", "\n".join(body))
