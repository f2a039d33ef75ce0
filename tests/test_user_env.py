"""A user's env from their own module trains through Ray with `env.id=<module>:<id>` alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.slow
def test_example_env_trains_two_steps(tmp_path):
    cmd = [sys.executable, "-m", "ragen2.train", "env.id=corridor_env:Corridor-v0",
           "trainer.total_steps=2", "rollout.env_groups=2", "rollout.group_size=2",
           "trainer.warm_start.episodes=16", "trainer.warm_start.epochs=1",
           "trainer.eval_episodes=8", f"hydra.run.dir={tmp_path / 'run'}"]
    # run from elsewhere with the module on PYTHONPATH: the Ray workers must find it the same way
    path = os.pathsep.join(p for p in [str(EXAMPLES), os.environ.get("PYTHONPATH", "")] if p)
    r = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=400,
                       env={**os.environ, "RAY_AUTH_MODE": "disabled", "PYTHONPATH": path})
    assert r.returncode == 0, r.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [0, 1, 2]
    assert rows[-1]["actor/logprob_gap"] < 1e-3
    assert "cell" in (tmp_path / "run" / "samples" / "eval_step_000000.jsonl").read_text()


@pytest.mark.slow
def test_a_plain_gymnasium_env_trains_without_a_warm_start(ray_session, tiny_model_path, tmp_path,
                                                           capfd):
    """No demonstration() hook: the default warm start is skipped with one line saying so, and RL
    runs (a pretrained model needs no warm start; the tiny model learns from scratch)."""
    from ragen2.train import load_config, train
    from tests.test_e2e import ONE_RANK, rows, small

    train(load_config(small(tiny_model_path, ONE_RANK, "env.id=tests.plain_env:PlainGuess-v0",
                            "rollout.max_turns=1", "trainer.total_steps=1")), tmp_path)
    r = rows(tmp_path)
    assert r[0]["warm_start/skipped"] == 1.0 and "warm_start/loss" not in r[0]
    assert "actor/loss" in r[1] and r[1]["rollout/num_turns_mean"] == 1.0
    assert "warm start skipped: no training env (tests.plain_env:PlainGuess-v0) has a " \
           "demonstration() hook" in capfd.readouterr().out
