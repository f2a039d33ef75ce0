"""SNR filtering and the MI monitor end to end: a Hydra multirun, its report, the analysis of a
run, and an exact resume with tiered filtering (tier 2, `make test-e2e`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ragen2.train import load_config, train

from tests.runs import ONE_RANK, rows, small, without_timing

pytestmark = pytest.mark.e2e

# a warm start good enough that first turns carry <think> text for the monitor (cached: both tests
# below share it, since every input of its cache key agrees, the learner's world size included)
WARM = ["trainer.warm_start.episodes=512", "trainer.warm_start.epochs=1",
        "trainer.warm_start.batch_size=8", "rollout.max_turns=3", ONE_RANK]


def test_multirun_over_filter_values_and_the_sweep_report(tmp_path, tiny_model_path):
    """Own run: the Hydra multirun through the command line is the subject."""
    sweep = tmp_path / "sweep"
    cmd = [sys.executable, "-m", "ragen2.train", "-m", "filter=top_p", "filter.value=0.5,0.9",
           "monitor.every=1", "monitor.panel_size=0",
           # 4 x 2 = 8 samples a batch, under the default minimum of an MI value (16)
           "monitor.min_samples=2",
           "trainer.total_steps=2", "rollout.env_groups=4",
           "filter.include_zero=true", "rollout.group_size=2", *WARM, "trainer.eval_episodes=8",
           "trainer.eval_every=0", "model=hf", f"model.path={tiny_model_path}", "recipe=tiny",
           f"hydra.sweep.dir={sweep}", "hydra.sweep.subdir=${hydra.job.num}"]
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    for job in ("0", "1"):
        steps = rows(sweep / job)
        assert {1, 2} <= set(steps)
        for s in (1, 2):
            assert "filter/kept_ratio" in steps[s] and "collapse/mi" in steps[s]
            assert steps[s]["collapse/retrieval_acc@1"] >= 0
        assert (sweep / job / "rollouts" / "step_000002.jsonl.gz").exists()
    report = subprocess.run([sys.executable, "-m", "ragen2.analysis.sweep_report", str(sweep)],
                            capture_output=True, text=True, timeout=120)
    assert report.returncode == 0, report.stderr
    assert "filter.value=0.5" in report.stdout and "filter.value=0.9" in report.stdout
    assert (sweep / "sweep_report.png").stat().st_size > 0
    analysis = subprocess.run([sys.executable, "-m", "ragen2.analysis.analyze", str(sweep / "0")],
                              capture_output=True, text=True, timeout=120)
    assert analysis.returncode == 0, analysis.stderr
    result = json.loads((sweep / "0" / "analysis" / "analysis.json").read_text())
    assert result["diagnosis"]["label"] in {"healthy", "template_collapse", "overfitting",
                                            "underfitting"}


def test_tiered_filtering_resumes_exactly(ray_session, tiny_model_path, tmp_path):
    """Own run: tiered filtering's state across a finished run extended by a resume."""
    extra = ["filter=tiered", "filter.tiered.pool_size=6", "monitor.every=1",
             "monitor.min_samples=2",  # 3 x 3 = 9 samples a batch: under the default 16
             "monitor.grad_snr_every=2", "rollout.env_groups=3", *WARM]
    full_dir, part_dir = tmp_path / "full", tmp_path / "part"
    train(load_config(small(tiny_model_path, *extra, "trainer.total_steps=3")), full_dir)
    train(load_config(small(tiny_model_path, *extra, "trainer.total_steps=1",
                            "trainer.save_every=1")), part_dir)
    train(load_config(small(tiny_model_path, *extra, "trainer.total_steps=3",
                            "trainer.resume=true")), part_dir)
    full, resumed = rows(full_dir), rows(part_dir)
    assert {"snr/mean", "collapse/mi", "filter/kept_ratio"} <= set(full[2])
    assert any(k.startswith("grad_snr/b") and k.endswith("/task_norm") for k in full[2])
    for step in (2, 3):
        assert without_timing(resumed[step]) == without_timing(full[step])
