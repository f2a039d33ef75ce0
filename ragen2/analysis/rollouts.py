"""Read what a training run leaves in its run directory: metrics, saved rollouts, summary, overrides.

Layout (written by the trainer):
    RUN_DIR/metrics.jsonl                       one JSON object per line with "step" + metrics
    RUN_DIR/rollouts/step_000001.jsonl.gz       one JSON episode per line (the unfiltered batch)
    RUN_DIR/summary.json                        eval_before / eval_after / steps / seed / wall_s
    RUN_DIR/.hydra/overrides.yaml               the Hydra overrides of the run (a YAML list)

Every MI and retrieval value is read under ``monitor.min_samples``
(:mod:`ragen2.collapse.withhold`): :func:`load_metrics` drops the values of a measurement whose
logged ``n_samples`` is under the run's minimum (its ``.hydra/config.yaml``, else the default 16),
keeping its counts, so runs logged before the rule read as if it had been on, and every reader
(study, report, analyze, sweep report) sees an absent value, never a number from too few samples.

Readers are strict where a broken file means a bug (metrics, summary: ``ValueError`` naming the
file and line) and lenient where a killed run can leave a half-written file (rollouts: the file
is skipped with a ``RuntimeWarning``).

Corrupt content raises ``ValueError`` (not ``TypeError``) throughout: it is bad data, not a bug.
"""

from __future__ import annotations

import gzip
import json
import math
import re
import warnings
import zlib
from pathlib import Path
from typing import Any

__all__ = [
    "ROLLOUT_KEYS",
    "final_value",
    "load_hydra_config",
    "load_metrics",
    "load_overrides",
    "load_rollouts",
    "load_summary",
    "metric_series",
    "no_value_steps",
    "run_min_samples",
]

# Keys every saved episode must have for the analysis (the trainer writes more).
ROLLOUT_KEYS = ("group_id", "env_seed", "reasoning", "reward")
_STEP_FILE = re.compile(r"^step_(\d+)\.jsonl\.gz$")


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def run_min_samples(run_dir: str | Path) -> int:
    """The run's ``monitor.min_samples`` (``.hydra/config.yaml``), else the default (a run
    logged before the key existed, or without its config)."""
    from ragen2.collapse.withhold import MIN_SAMPLES

    monitor = (load_hydra_config(run_dir) or {}).get("monitor")
    v = monitor.get("min_samples") if isinstance(monitor, dict) else None
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 2 else MIN_SAMPLES


def load_metrics(run_dir: str | Path, *, min_samples: int | None = None
                 ) -> dict[int, dict[str, Any]]:
    """``RUN_DIR/metrics.jsonl`` as {step: row}, ascending steps.

    If a step appears on several lines (a resumed run rewrote it), the LAST line wins. Blank lines
    are ignored; ``null`` values (non-finite at log time) and NaN / Infinity are dropped, so a
    missing key and a null one read the same. The values of a measurement with fewer than
    ``min_samples`` samples (None: :func:`run_min_samples`) are dropped, its counts kept
    (:func:`ragen2.collapse.withhold.withhold`).

    Raises:
        FileNotFoundError: no metrics.jsonl in run_dir.
        ValueError: a line that is not a JSON object with an integer "step" (names file and line).
    """
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    rows: dict[int, dict[str, Any]] = {}
    lines = path.read_text(encoding="utf-8").splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            if lineno == len(lines):  # a run killed mid-write leaves a partial last line
                warnings.warn(f"{path}:{lineno}: partial last line skipped ({e.msg})",
                              RuntimeWarning, stacklevel=2)
                break
            raise ValueError(f"{path}:{lineno}: not valid JSON ({e.msg})") from None
        if not isinstance(row, dict):
            raise ValueError(f"{path}:{lineno}: expected a JSON object, got {type(row).__name__}")  # noqa: TRY004
        step = row.get("step")
        if isinstance(step, bool) or not isinstance(step, int):
            raise ValueError(f"{path}:{lineno}: missing or non-integer \"step\" ({step!r})")  # noqa: TRY004
        rows[step] = {k: v for k, v in row.items()
                      if v is not None and not (isinstance(v, float) and not math.isfinite(v))}
    from ragen2.collapse.withhold import withhold

    least = run_min_samples(run_dir) if min_samples is None else min_samples
    return {s: withhold(rows[s], least) for s in sorted(rows)}


def metric_series(metrics: dict[int, dict[str, Any]], key: str, *, min_step: int = 0
                  ) -> list[tuple[int, float]]:
    """[(step, value)] of one metric over the rows that have it as a finite number, step >= min_step."""
    return [(s, float(r[key])) for s, r in metrics.items()
            if s >= min_step and _is_number(r.get(key))]


def no_value_steps(metrics: dict[int, dict[str, Any]], key: str
                   ) -> list[tuple[int, float | None]]:
    """(step, its logged sample count, None when only the prompt count was logged) of the steps
    where the measurement of ``key`` (an MI or retrieval value: ``collapse/panel/turns/mi``, ...)
    ran but gave no value: its scope logged ``n_samples`` or ``n_prompts`` and not ``key``
    (fewer than ``monitor.min_samples`` samples, or fewer than 2 prompts with reasoning).
    [] for a key that is no measured value (``rollout/success``, ``collapse/token_entropy``)."""
    from ragen2.collapse.withhold import scope_of

    scope = scope_of(key)
    if scope is None:
        return []
    out = []
    for step, row in metrics.items():
        n, prompts = row.get(scope + "n_samples"), row.get(scope + "n_prompts")
        if _is_number(row.get(key)) or not (_is_number(n) or _is_number(prompts)):
            continue
        out.append((step, float(n) if _is_number(n) else None))
    return out


def final_value(metrics: dict[int, dict[str, Any]], key: str) -> float | None:
    """``key`` at the last step that measured it: None when that measurement gave no value
    (:func:`no_value_steps`: too few samples or prompts), never an earlier step's value in its
    place; the last logged value for a key that is no measured value."""
    values, empty = metric_series(metrics, key), no_value_steps(metrics, key)
    if empty and (not values or empty[-1][0] > values[-1][0]):
        return None
    return values[-1][1] if values else None


def _read_episodes(path: Path) -> list[dict[str, Any]]:
    """All episodes of one gz file; raises ValueError on any defect (caller decides to skip)."""
    episodes = []
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            for lineno, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    ep = json.loads(line)
                except json.JSONDecodeError as e:
                    raise ValueError(f"line {lineno}: not valid JSON ({e.msg})") from None
                if not isinstance(ep, dict):
                    raise ValueError(f"line {lineno}: expected a JSON object")  # noqa: TRY004
                missing = [k for k in ROLLOUT_KEYS if k not in ep]
                if missing:
                    raise ValueError(f"line {lineno}: missing key(s) {', '.join(missing)}")
                if ep["reasoning"] is not None and not isinstance(ep["reasoning"], str):
                    raise ValueError(f"line {lineno}: \"reasoning\" must be a string or null")
                if not _is_number(ep["reward"]):
                    raise ValueError(f"line {lineno}: \"reward\" must be a finite number")
                episodes.append(ep)
    except (EOFError, OSError, zlib.error, UnicodeDecodeError) as e:
        # EOFError: truncated stream; gzip.BadGzipFile is an OSError
        raise ValueError(f"unreadable gzip ({type(e).__name__}: {e})") from None
    if not episodes:
        raise ValueError("no episodes")
    return episodes


def load_rollouts(run_dir: str | Path) -> dict[int, list[dict[str, Any]]]:
    """Saved episodes as {step: [episode, ...]}, ascending steps; {} without a rollouts/ folder.

    The step is read from the file name (``step_000012.jsonl.gz`` -> 12). A file that is
    truncated, not gzip, not JSON, empty, or lacks a key of ``ROLLOUT_KEYS`` is skipped with a
    ``RuntimeWarning`` naming it (a run killed mid-write leaves such files); this never raises
    for a bad file.
    """
    folder = Path(run_dir) / "rollouts"
    if not folder.is_dir():
        return {}
    out: dict[int, list[dict[str, Any]]] = {}
    for path in sorted(folder.iterdir()):
        m = _STEP_FILE.match(path.name)
        if not m or not path.is_file():
            continue
        try:
            out[int(m.group(1))] = _read_episodes(path)
        except ValueError as e:
            warnings.warn(f"skipping {path}: {e}", RuntimeWarning, stacklevel=2)
    return dict(sorted(out.items()))


def load_summary(run_dir: str | Path) -> dict[str, Any] | None:
    """``RUN_DIR/summary.json`` as a dict, or None when the file is absent (run did not finish).

    Raises:
        ValueError: the file exists but is not a JSON object.
    """
    path = Path(run_dir) / "summary.json"
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(data).__name__}")  # noqa: TRY004
    return data


def load_overrides(run_dir: str | Path) -> list[str] | None:
    """``RUN_DIR/.hydra/overrides.yaml`` as a list of strings, or None when the file is absent.

    Raises:
        ValueError: the file exists but is not a YAML list.
    """
    import yaml

    path = Path(run_dir) / ".hydra" / "overrides.yaml"
    if not path.is_file():
        return None
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from None
    if data is None:
        return []
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a YAML list of overrides, got {type(data).__name__}")  # noqa: TRY004
    return [str(x) for x in data]


def load_hydra_config(run_dir: str | Path) -> dict[str, Any] | None:
    """``RUN_DIR/.hydra/config.yaml`` (the composed config) as a dict, or None when absent/unreadable."""
    import yaml

    path = Path(run_dir) / ".hydra" / "config.yaml"
    if not path.is_file():
        return None
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) else None
