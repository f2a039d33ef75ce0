"""SIGUSR1 / SIGTERM: the run finishes its step, checkpoints and exits 75; resume continues it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ragen2.preempt import PREEMPTED_EXIT, StopSignal


@pytest.mark.parametrize("sig", [signal.SIGUSR1, signal.SIGTERM])
def test_first_signal_sets_a_flag_second_exits(sig):
    before = signal.getsignal(sig)
    with StopSignal() as s:
        os.kill(os.getpid(), sig)
        time.sleep(0.05)  # the handler runs in the main thread between bytecodes
        assert s.received == sig and s.name == signal.Signals(sig).name
        with pytest.raises(SystemExit) as e:
            os.kill(os.getpid(), sig)
            time.sleep(0.05)
        assert e.value.code == 128 + sig
    assert signal.getsignal(sig) == before


def _rows(run_dir: Path) -> dict[int, dict]:
    out = {}
    if (run_dir / "metrics.jsonl").exists():
        for line in (run_dir / "metrics.jsonl").read_text().splitlines():
            try:
                r = json.loads(line)
                out[r["step"]] = r
            except (ValueError, KeyError):
                pass
    return out


@pytest.mark.slow
def test_sigusr1_checkpoints_the_step_and_resume_finishes(tiny_model_path, tmp_path):
    from tests.test_e2e import ONE_RANK, small

    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "ragen2.train",
           *small(tiny_model_path, "trainer.total_steps=3", "trainer.save_every=0", ONE_RANK),
           f"hydra.run.dir={run}"]
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    log = open(f"{run}.log", "w")
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    try:
        deadline = time.monotonic() + 600
        while 1 not in _rows(run):
            assert p.poll() is None, Path(f"{run}.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "step 1 never logged"
            time.sleep(0.2)
        os.kill(p.pid, signal.SIGUSR1)  # the driver only, as the sbatch script forwards it
        code = p.wait(300)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        log.close()
    out = Path(f"{run}.log").read_text()
    assert code == PREEMPTED_EXIT, out[-3000:]
    stopped = max(_rows(run))
    assert stopped in (1, 2), out[-3000:]  # the step it was in, not the whole run
    latest = json.loads((run / "checkpoints" / "latest.json").read_text())
    assert latest["step"] == stopped  # save_every=0: only the signal wrote it
    assert f"stopped after step {stopped}" in out and "trainer.resume=true" in out
    assert not (run / "summary.json").exists()

    done = subprocess.run(cmd + ["trainer.resume=true"], capture_output=True, text=True, env=env,
                          timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert sorted(_rows(run)) == [0, 1, 2, 3]
    assert json.loads((run / "summary.json").read_text())["steps"] == 3
