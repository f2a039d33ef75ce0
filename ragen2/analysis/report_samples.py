"""Reasoning samples per prompt at the saved steps of a run, and the n-grams most prompts share.

Two sources; the fixed panel wins where the run has one:
    RUN_DIR/panel/step_000010.jsonl   one JSON record per panel prompt: {"step", "key", "env",
                                      "prompt", "reasoning": [str, ...], "answers": [str, ...]}
    RUN_DIR/rollouts/step_*.jsonl.gz  the rollout archive (``load_rollouts``): episodes grouped
                                      by (env, env_seed), the first action as the answer
Either way a step is a list of prompts ``{"key", "env", "prompt", "reasoning", "answers"}``
(key: "ENV KEY" for the panel, "ENV seed SEED" for the archive).

Template mining: a word n-gram (``ngram_signature``: casefolded runs of letters and digits) is a
template candidate when the reasoning of a large share of the prompts contains it; the share
counts a prompt once however many of its samples use the n-gram. :func:`highlight` marks those
n-grams in a text, as HTML.
"""

from __future__ import annotations

import json
import re
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

from ragen2.analysis.html import esc
from ragen2.analysis.rollouts import load_rollouts
from ragen2.collapse.plugin import ngram_signature

__all__ = ["highlight", "load_panel", "load_samples", "pair_prompts", "prompts_from_episodes",
           "template_ngrams", "word_spans"]

Prompt = dict[str, Any]
_PANEL_FILE = re.compile(r"^step_(\d+)\.jsonl$")
# the words of ngram_signature (ragen2/collapse/plugin.py), with their place in the text
_WORD = re.compile(r"[^\W_]+")


def _panel_record(rec: Any, where: str) -> Prompt:
    if not isinstance(rec, dict):
        raise ValueError(f"{where}: expected a JSON object")
    if "key" not in rec:
        raise ValueError(f"{where}: missing \"key\"")
    reasoning = rec.get("reasoning")
    if not isinstance(reasoning, list) or not all(r is None or isinstance(r, str) for r in reasoning):
        raise ValueError(f"{where}: \"reasoning\" must be a list of strings")
    answers = rec.get("answers") if isinstance(rec.get("answers"), list) else []
    env = rec.get("env")  # two envs of a mix may use the same panel key (a seed)
    key = f"{env} {rec['key']}" if env is not None else str(rec["key"])
    return {"key": key, "env": env, "prompt": rec.get("prompt"),
            "reasoning": reasoning, "answers": answers}


def load_panel(run_dir: str | Path, folder: str = "panel") -> dict[int, list[Prompt]]:
    """``RUN_DIR/<folder>/step_*.jsonl`` as {step: [prompt, ...]}, ascending; {} without the
    folder (``panel``: the first-turn panel; ``panel/turns``: the later-turn panel).

    A file with a defect (not JSON, a record without "key" or a reasoning list) is skipped with a
    ``RuntimeWarning`` naming it and the line, like ``load_rollouts`` does.
    """
    where = Path(run_dir) / folder
    if not where.is_dir():
        return {}
    out: dict[int, list[Prompt]] = {}
    for path in sorted(where.iterdir()):
        m = _PANEL_FILE.match(path.name)
        if not m or not path.is_file():
            continue
        try:
            prompts = []
            for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
                if line.strip():
                    try:
                        rec = json.loads(line)
                    except json.JSONDecodeError as e:
                        raise ValueError(f"line {lineno}: not valid JSON ({e.msg})") from None
                    prompts.append(_panel_record(rec, f"line {lineno}"))
            if not prompts:
                raise ValueError("no records")
            out[int(m.group(1))] = prompts
        except (ValueError, UnicodeDecodeError) as e:
            warnings.warn(f"skipping {path}: {e}", RuntimeWarning, stacklevel=2)
    return dict(sorted(out.items()))


def prompts_from_episodes(episodes: list[dict[str, Any]]) -> list[Prompt]:
    """Episodes of one saved step grouped by (env, env_seed), in first-seen order."""
    groups: dict[str, Prompt] = {}
    for ep in episodes:
        key = f"{ep.get('env')} seed {json.dumps(ep['env_seed'], sort_keys=True)}"
        p = groups.setdefault(key, {"key": key, "env": ep.get("env"), "prompt": ep.get("prompt"),
                                    "reasoning": [], "answers": []})
        actions = ep.get("actions")
        p["reasoning"].append(ep["reasoning"])
        p["answers"].append(actions[0] if isinstance(actions, list) and actions else None)
    return list(groups.values())


def load_samples(run_dir: str | Path) -> tuple[str | None, dict[int, list[Prompt]]]:
    """(source, {step: prompts}): the fixed panel when present, else the rollout archive."""
    panel = load_panel(run_dir)
    if panel:
        return "panel/step_*.jsonl (the fixed panel)", panel
    rollouts = load_rollouts(run_dir)
    if rollouts:
        return ("rollouts/step_*.jsonl.gz (the rollout archive)",
                {s: prompts_from_episodes(eps) for s, eps in rollouts.items()})
    return None, {}


def pair_prompts(first: list[Prompt], last: list[Prompt], limit: int
                 ) -> list[tuple[str, Prompt | None, Prompt | None]]:
    """Rows (label, prompt at the first step, prompt at the last step), at most ``limit``.

    Prompts of both steps come first (same key, in the last step's order); then the rest of each
    step side by side in order (a run that draws fresh prompts every step has no common key).
    """
    by_key = {p["key"]: p for p in first}
    common = [p for p in last if p["key"] in by_key]
    rows: list[tuple[str, Prompt | None, Prompt | None]] = [
        (p["key"], by_key[p["key"]], p) for p in common]
    done = {p["key"] for p in common}
    rest_first = [p for p in first if p["key"] not in done]
    rest_last = [p for p in last if p["key"] not in done]
    for i in range(max(len(rest_first), len(rest_last))):
        a = rest_first[i] if i < len(rest_first) else None
        b = rest_last[i] if i < len(rest_last) else None
        label = " | ".join(p["key"] for p in (a, b) if p is not None)
        rows.append((label, a, b))
    return rows[:limit]


def template_ngrams(prompts: list[Prompt], n: int = 3, *, min_share: float = 0.5, top: int = 15
                    ) -> list[tuple[tuple[str, ...], float]]:
    """The n-grams in the reasoning of at least ``min_share`` of the prompts, with that share.

    Only prompts with some non-empty reasoning count; fewer than 2 of them: [] (every n-gram of
    one prompt would have share 1). Sorted by share (highest first), then alphabetically.
    """
    sigs = []
    for p in prompts:
        texts = [t for t in p["reasoning"] if t]
        if texts:
            sigs.append(frozenset().union(*(ngram_signature(t, n) for t in texts)))
    if len(sigs) < 2:
        return []
    counts = Counter(g for s in sigs for g in s)
    found = [(g, c / len(sigs)) for g, c in counts.items() if c / len(sigs) >= min_share]
    return sorted(found, key=lambda x: (-x[1], x[0]))[:top]


def word_spans(text: str) -> list[tuple[str, int, int]]:
    """(casefolded word, start, end) of every word of ``text``, as ``ngram_signature`` cuts it."""
    return [(m.group().casefold(), m.start(), m.end()) for m in _WORD.finditer(text)]


def highlight(text: str, ngrams: set[tuple[str, ...]], n: int) -> str:
    """``text`` as HTML (escaped) with every occurrence of one of ``ngrams`` in ``<mark>``."""
    words = word_spans(text)
    spans: list[list[int]] = []
    windows = ([(0, len(words))] if 0 < len(words) < n
               else [(i, i + n) for i in range(len(words) - n + 1)])
    for a, b in windows:
        if tuple(w for w, _, _ in words[a:b]) in ngrams:
            start, end = words[a][1], words[b - 1][2]
            if spans and start <= spans[-1][1]:  # overlapping or touching: one mark
                spans[-1][1] = max(spans[-1][1], end)
            else:
                spans.append([start, end])
    out, pos = [], 0
    for start, end in spans:
        out += [esc(text[pos:start]), "<mark>", esc(text[start:end]), "</mark>"]
        pos = end
    out.append(esc(text[pos:]))
    return "".join(out)
