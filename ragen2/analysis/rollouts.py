"""Read what a training run leaves in its run directory: metrics, saved rollouts, summary, overrides.

Layout (written by the trainer):
    RUN_DIR/metrics.jsonl                       one JSON object per line with "step" + metrics
    RUN_DIR/rollouts/step_000001.jsonl.gz       one JSON episode per line (the unfiltered batch)
    RUN_DIR/summary.json                        eval_before / eval_after / steps / seed / wall_s
    RUN_DIR/.hydra/overrides.yaml               the Hydra overrides of the run (a YAML list)

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
    "load_hydra_config",
    "load_metrics",
    "load_overrides",
    "load_rollouts",
    "load_summary",
    "metric_series",
]

# Keys every saved episode must have for the analysis (the trainer writes more).
ROLLOUT_KEYS = ("group_id", "env_seed", "reasoning", "reward")
_STEP_FILE = re.compile(r"^step_(\d+)\.jsonl\.gz$")


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def load_metrics(run_dir: str | Path) -> dict[int, dict[str, Any]]:
    """``RUN_DIR/metrics.jsonl`` as {step: row}, ascending steps.

    If a step appears on several lines (a resumed run rewrote it), the LAST line wins. Blank lines
    are ignored; ``null`` values (non-finite at log time) and NaN / Infinity are dropped, so a
    missing key and a null one read the same.

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
    return dict(sorted(rows.items()))


def metric_series(metrics: dict[int, dict[str, Any]], key: str, *, min_step: int = 0
                  ) -> list[tuple[int, float]]:
    """[(step, value)] of one metric over the rows that have it as a finite number, step >= min_step."""
    return [(s, float(r[key])) for s, r in metrics.items()
            if s >= min_step and _is_number(r.get(key))]


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
