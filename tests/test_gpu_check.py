"""launch/gpu_check.py rehearsed on the CPU: the same sections a lent GPU runs (learner, HF engine
in a second process, probe, weight push, generation), so the script cannot rot between loans."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.e2e
def test_gpu_check_rehearsal_on_cpu(tmp_path):
    out = tmp_path / "gc"
    proc = subprocess.run([sys.executable, str(REPO / "launch" / "gpu_check.py"), "--device", "cpu",
                           "--quick", "--out", str(out)], capture_output=True, text=True,
                          timeout=600)
    summary = json.loads((out / "summary.json").read_text())
    sections = summary["sections"]
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    assert summary["failed"] == []
    assert list(sections) == ["env", "model", "start", "precision", "update", "push", "generate"]
    assert all(s["ok"] for s in sections.values())
    # fp32 everywhere: the engine and the learner agree to float noise on the same weights
    assert sections["precision"]["probe_gap"]["mean"] < 1e-5
    assert sections["precision"]["learner_vs_fp32"]["max"] < 1e-5
    up = sections["update"]
    assert up["steps"] == 2 and all(math.isfinite(g) and g > 0 for g in up["grad_norm"])
    push = sections["push"]
    # the updates made the engine stale; the push brings it back to float noise
    assert push["probe_gap_before"]["mean"] > 1e-3
    assert push["probe_gap_after"]["mean"] < 1e-5
    assert push["buckets"] > 1 and push["engine_version"] == 2
    gen = sections["generate"]
    assert 0 < gen["tokens"] <= 4 * 16 and gen["tokens_per_s"] > 0  # a sampled EOS may end one early


def test_gpu_check_refuses_bf16_on_cpu(capsys):
    sys.path.insert(0, str(REPO / "launch"))
    try:
        import gpu_check
    finally:
        sys.path.remove(str(REPO / "launch"))
    with pytest.raises(SystemExit):
        gpu_check.parse(["--device", "cpu", "--dtype", "bfloat16"])
    assert "float32" in capsys.readouterr().err
