"""Positive / negative control runs of the collapse instruments: arms that differ in one env
option, trained one step each from one tiny model built once (``model=hf model.path=<tiny>
recipe=tiny``), each arm with its own cached warm start."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from ragen2.train import load_config, resolve_model_path, train


def step1_rows(base: Sequence[str], option: str, arms: Sequence[str],
               tmp_path: Path) -> dict[str, dict[str, Any]]:
    """``{arm: the step-1 metrics row}`` of a one-step run per ``option=arm`` over ``base``."""
    model = resolve_model_path(load_config([*base, f"{option}={arms[0]}"]))
    rows = {}
    for arm in arms:
        run = tmp_path / arm
        train(load_config([*base, f"{option}={arm}", "model=hf", f"model.path={model}",
                           "recipe=tiny"]), run)
        lines = (run / "metrics.jsonl").read_text().splitlines()
        rows[arm] = next(r for r in map(json.loads, lines) if r["step"] == 1)
    return rows
