"""The collapse study's smoke run: 3 arms x 1 seed x 2 steps through ``ragen2-train``, then its
analysis (tier 2). Its own runs, not a shared fixture: what it checks is the study script itself
launching the console script once per arm and analysing the runs it made."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

STUDY = Path(__file__).resolve().parents[1] / "benchmarks" / "collapse_study" / "run.py"


def test_collapse_study_quick_runs_every_arm_and_analyses_them(tmp_path):
    out = tmp_path / "study"
    r = subprocess.run([sys.executable, str(STUDY), "--quick", "--out", str(out)],
                       capture_output=True, text=True, timeout=1500)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    result = json.loads((out / "results.json").read_text())
    runs = result["runs"]
    assert sorted(run["arm"] for run in runs) == sorted(result["settings"]["arms"]) and len(runs) >= 3
    assert all(run["returncode"] == 0 for run in runs)
    for run in runs:  # 2 RL steps after the pre-RL evaluation, every step logged
        lines = (out / "runs" / f"{run['arm']}_s{run['seed']}" / "metrics.jsonl").read_text().splitlines()
        assert [json.loads(x)["step"] for x in lines] == [0, 1, 2]
    assert result["plots"] and all((out / p).stat().st_size > 0 for p in result["plots"])
    assert (out / "examples.md").exists()
