"""A user's env from their own module trains through Ray with `env.id=<module>:<id>` alone.

The CLI test types the tutorial's command (docs/tutorials/add-an-environment.md, whose commands
tests/test_tutorials.py runs as written): the console script of this venv, run from the folder that
holds the user's module, with no PYTHONPATH.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
RAGEN2_TRAIN = Path(sys.executable).parent / "ragen2-train"  # the console script, as installed


def _as_typed(folder: Path, *overrides: str, timeout: float) -> subprocess.CompletedProcess:
    """``ragen2-train OVERRIDES`` run in ``folder`` with nothing else set (no PYTHONPATH)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([str(RAGEN2_TRAIN), *overrides], cwd=folder, capture_output=True,
                          text=True, timeout=timeout, env={**env, "RAY_AUTH_MODE": "disabled"})


def test_the_console_script_imports_the_users_module_from_the_working_dir(tmp_path):
    """The env check imports ``env.id``'s module from the folder the command runs in. No run: the
    module ends the process once imported."""
    (tmp_path / "stop_on_import.py").write_text("import os\nos._exit(42)\n")
    r = _as_typed(tmp_path, "env.id=stop_on_import:Stop-v0", f"hydra.run.dir={tmp_path / 'run'}",
                  timeout=120)
    assert r.returncode == 42, r.stderr[-3000:]


@pytest.mark.e2e
def test_a_plain_gymnasium_env_trains_without_a_warm_start(ray_session, tiny_model_path, tmp_path,
                                                           capfd):
    """No demonstration() hook: the default warm start is skipped with one line saying so, and RL
    runs (a pretrained model needs no warm start; the tiny model learns from scratch). Own run:
    no shared run has an env without a demonstration() hook."""
    from ragen2.train import load_config, train
    from tests.runs import ONE_RANK, rows, small

    train(load_config(small(tiny_model_path, ONE_RANK, "env.id=tests.plain_env:PlainGuess-v0",
                            "rollout.max_turns=1", "trainer.total_steps=1")), tmp_path)
    r = rows(tmp_path)
    assert r[0]["warm_start/skipped"] == 1.0 and "warm_start/loss" not in r[0]
    assert "actor/loss" in r[1] and r[1]["rollout/num_turns_mean"] == 1.0
    skipped = ("warm start skipped: no training env (tests.plain_env:PlainGuess-v0) has a "
               "demonstration() hook")
    assert skipped in capfd.readouterr().out
    log = (tmp_path / "train.log").read_text()  # an in-process run has its train.log too
    assert skipped in log and "held-out success before RL" in log and "after RL" in log
