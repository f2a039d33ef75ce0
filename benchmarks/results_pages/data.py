"""The committed data the results pages are generated from, and the number formats they show.

Every figure of a generated block is read here from a file under ``benchmarks/`` (JSON documents,
run directories' ``metrics.jsonl``); nothing is recomputed that the file already holds. The
formats reproduce what the pages showed when they were typed by hand: three decimals for a
success rate, a sign on a gain, a Unicode minus in a difference column.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from decimal import ROUND_HALF_UP, Decimal
from functools import cache
from pathlib import Path
from typing import Any, Iterable

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
STUDY = ROOT / "benchmarks" / "collapse_study"


@cache
def load(path: str) -> Any:
    """A JSON document, by its path from the repository root."""
    return json.loads((ROOT / path).read_text())


@cache
def metrics(run_dir: str) -> dict[int, dict[str, float]]:
    """``{step: {key: value}}`` of a committed run's ``metrics.jsonl`` (finite numbers only), read
    by ``ragen2.analysis.rollouts.load_metrics``: an MI or retrieval value measured from fewer
    than the run's ``monitor.min_samples`` samples is absent, its counts kept
    (``ragen2.collapse.withhold``)."""
    from ragen2.analysis.rollouts import load_metrics

    return {s: {k: v for k, v in row.items() if isinstance(v, (int, float)) and math.isfinite(v)}
            for s, row in load_metrics(ROOT / run_dir).items()}


def least_samples(overrides: Iterable[str] | str) -> int:
    """A run's ``monitor.min_samples`` from its overrides (a list, or a command line), else the
    default (``ragen2.collapse.withhold.MIN_SAMPLES``)."""
    from ragen2.collapse.withhold import MIN_SAMPLES

    words = overrides.split() if isinstance(overrides, str) else overrides
    return next((int(w.split("=", 1)[1]) for w in words
                 if w.lstrip("+").startswith("monitor.min_samples=")), MIN_SAMPLES)


def implied_samples(share: float, most: int) -> int | None:
    """The sample count a share of hits (retrieval@1) implies when at most ``most`` samples were
    measured: the only n <= most with ``share * n`` whole (3/11 of at most 16: 11), None when
    several fit (0.5: 2, 4, ...) or none does."""
    fits = [n for n in range(1, most + 1) if abs(share * n - round(share * n)) < 1e-9]
    return fits[0] if len(fits) == 1 else None


def under_rule(row: dict, least: int, most: int | None = None) -> dict:
    """A JSON row of a run's metrics under ``monitor.min_samples`` = ``least``
    (``ragen2.collapse.withhold.withhold``): the values of a measurement with fewer samples are
    absent, its counts kept. A measurement logged without its count (a run from before counts
    were logged) is judged by the count its ``retrieval_acc@1`` implies out of at most ``most``
    samples (:func:`implied_samples`), recorded as ``<scope>n_samples`` with
    ``<scope>n_samples_implied``; with no count implied, its values are absent too."""
    from ragen2.collapse.withhold import SCOPES, scope_of, withhold

    out = dict(row)
    for scope in SCOPES:
        logged = [k for k in row if scope_of(k) == scope]
        if not logged or scope + "n_samples" in row:
            continue
        share = row.get(scope + "retrieval_acc@1")
        n = None if share is None or most is None else implied_samples(share, most)
        if n is None:
            out = {k: v for k, v in out.items() if k not in logged}
        else:
            out[scope + "n_samples"], out[scope + "n_samples_implied"] = float(n), True
    return withhold(out, least)


def no_value(row: dict, key: str, least: int) -> str:
    """What a page shows in place of a value ``row`` does not hold (withheld under
    ``monitor.min_samples``): ``— (n = 11 < 16)``, ``— (n = 11 < 16, implied)`` when the run
    logged no count (:func:`under_rule`), ``— (no sample count logged)``; ``— (< 2 prompts)``
    and ``— (not logged)`` for a value missing for another reason."""
    from ragen2.collapse.withhold import scope_of

    scope = scope_of(key) or ""
    n, prompts = row.get(scope + "n_samples"), row.get(scope + "n_prompts")
    if n is not None and n < least:
        implied = ", implied" if row.get(scope + "n_samples_implied") else ""
        return f"— (n = {n:g} < {least}{implied})"
    if prompts is not None and prompts < 2:
        return "— (< 2 prompts)"
    return "— (no sample count logged)" if scope and n is None else "— (not logged)"


def series(run_dir: str, key: str) -> dict[int, float]:
    """``{step: value}`` of one key of a committed run, in step order."""
    return {s: r[key] for s, r in sorted(metrics(run_dir).items()) if key in r}


def median(xs: Iterable[float]) -> float:
    return statistics.median(list(xs))


# --- formats ------------------------------------------------------------------------------------

def f(x: float, d: int = 3) -> str:
    """``0.535``: a fixed number of decimals."""
    return f"{x:.{d}f}"


def signed(x: float, d: int = 3) -> str:
    """``+0.410``, ``-0.030``: a gain, ASCII sign."""
    return f"{x:+.{d}f}"


def minus(x: float, d: int = 3) -> str:
    """``+0.016``, ``−0.070``: a difference, with the Unicode minus the tables use."""
    return signed(x, d).replace("-", "−")


def span(lo: float, hi: float, d: int = 3, sep: str = "-") -> str:
    """``0.117-0.133``."""
    return f"{lo:.{d}f}{sep}{hi:.{d}f}"


def signed_span(lo: float, hi: float, d: int = 3) -> str:
    """``+0.328 to +0.508``."""
    return f"{lo:+.{d}f} to {hi:+.{d}f}"


def secs(x: float) -> str:
    """``1,897 s``: whole seconds, thousands separated."""
    return f"{x:,.0f} s"


def pct(x: float, d: int = 0) -> str:
    """``21%`` from 0.21; a half rounds up (62.5% reads 63%)."""
    q = Decimal(repr(100 * x)).quantize(Decimal(1).scaleb(-d), rounding=ROUND_HALF_UP)
    return f"{q}%"


def sci(x: float, d: int = 0) -> str:
    """``8e-6``, ``5.6e-6``: scientific, the exponent unpadded."""
    m, e = f"{x:.{d}e}".split("e")
    return f"{m}e{int(e)}"


def count(n: int) -> str:
    """``six``: a small count in words, as prose writes it."""
    words = "zero one two three four five six seven eight nine ten eleven twelve".split()
    return words[n] if 0 <= n < len(words) else str(n)


def times(x: float, d: int = 1) -> str:
    """``3.3x``."""
    return f"{x:.{d}f}x"


def sig1(x: float) -> str:
    """One significant digit: ``4`` from 3.95, ``700`` from 697.7."""
    return f"{float(f'{x:.1g}'):g}"


def floor_to(x: float, d: int = 2) -> str:
    """``0.32`` from 0.328: a bound the data meets ("every run gained at least ...")."""
    return f"{math.floor(x * 10 ** d) / 10 ** d:.{d}f}"


def joined(parts: list[str], last: str = "and") -> str:
    """``a, b and c``."""
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + f" {last} " + parts[-1]


def table(head: list[str], rows: list[list[str]]) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(head) + " |", "| " + " | ".join("---" for _ in head) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(re.sub(r"\|  (?=\|)", "| ", line) for line in lines)  # an empty cell: "| |"
