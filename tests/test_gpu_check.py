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
    """Own run: the script is its own process (as on the lent machine), so no shared fixture."""
    out, scratch = tmp_path / "gc", tmp_path / "scratch"
    proc = subprocess.run([sys.executable, str(REPO / "launch" / "gpu_check.py"), "--device", "cpu",
                           "--quick", "--out", str(out), "--scratch", str(scratch)],
                          capture_output=True, text=True, timeout=600)
    summary = json.loads((out / "summary.json").read_text())
    sections = summary["sections"]
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    assert summary["failed"] == []
    assert list(sections) == ["env", "model", "nccl_group", "start", "precision", "update",
                              "scorer", "push", "generate"]
    assert all(s["ok"] for s in sections.values())
    assert [p.name for p in out.iterdir()] == ["summary.json"]  # scratch files stay in --scratch
    # the built model's logits now spread like a pretrained model's
    model = sections["model"]
    assert model["after"]["logit_std"] == pytest.approx(3.0, rel=1e-3)
    assert model["before"]["logit_std"] < 1.0 and model["path"].startswith(str(scratch))
    assert sections["nccl_group"]["group"] == "ProcessGroupGloo"
    # fp32 everywhere: the engine and the learner agree to float noise on the same weights
    prec = sections["precision"]
    assert prec["probe_gap"]["mean"] < 1e-5 and prec["probe_floor"] == prec["probe_gap"]["mean"]
    assert prec["probe_threshold"] == 1e-3  # the fp32 absolute minimum
    assert prec["learner_vs_fp32"]["max"] < 1e-5
    up = sections["update"]
    assert up["steps"] == 2 and all(math.isfinite(g) and g > 0 for g in up["grad_norm"])
    assert up["estimate_gib"]["logits"] > 0
    sc = sections["scorer"]
    assert sc["score_tokens_64"]["estimate_gib"] < sc["unsliced"]["estimate_gib"]
    pushes = sections["push"]["pushes"]
    assert len(pushes) == 3
    for i, p in enumerate(pushes):
        # each update made the engine stale (every checked tensor differs); the push repairs it
        assert p["stale_tensors_before"] == p["checked_tensors"] > 0
        assert p["probe_gap_before"]["mean"] > 1e-3 and p["probe_gap_after"]["mean"] < 1e-5
        assert p["buckets"] > 1 and p["engine_version"] == 3 + i
        assert p["engine_memory"]["rss_gib"] > 0 and p["learner_memory"]["rss_gib"] > 0
    gen = sections["generate"]
    assert 0 < gen["tokens"] <= 4 * 16 and gen["tokens_per_s"] > 0  # a sampled EOS may end one early


def test_gpu_check_keeps_scratch_out_of_the_output_folder(tmp_path, capsys):
    gpu_check = _gpu_check()
    with pytest.raises(SystemExit):
        gpu_check.parse(["--out", str(tmp_path), "--scratch", str(tmp_path / "cache")])
    assert "inside --out" in capsys.readouterr().err
    a = gpu_check.parse(["--out", str(tmp_path / "o"), "--scratch", str(tmp_path / "s")])
    assert a.pushes == 5 and a.score_rows == 64 and a.score_width == 400


def _gpu_check():
    sys.path.insert(0, str(REPO / "launch"))
    try:
        import gpu_check
    finally:
        sys.path.remove(str(REPO / "launch"))
    return gpu_check


def test_gpu_check_refuses_bf16_on_cpu(capsys):
    gpu_check = _gpu_check()
    with pytest.raises(SystemExit):
        gpu_check.parse(["--device", "cpu", "--dtype", "bfloat16"])
    assert "float32" in capsys.readouterr().err
