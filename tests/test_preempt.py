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


def test_submitits_signal_is_handled_and_its_handler_chained(monkeypatch):
    """Inside a submitit job: USR2 (its default) stops after the step, then submitit requeues."""
    from ragen2.preempt import stop_signals

    assert signal.SIGUSR2 not in stop_signals()
    monkeypatch.setenv("SUBMITIT_EXECUTOR", "slurm")
    assert stop_signals() == (signal.SIGUSR1, signal.SIGTERM, signal.SIGUSR2)
    monkeypatch.setenv("SUBMITIT_PREEMPT_SIGNAL", "USR1")
    assert stop_signals() == (signal.SIGUSR1, signal.SIGTERM)
    monkeypatch.delenv("SUBMITIT_PREEMPT_SIGNAL")
    calls = []
    before = signal.signal(signal.SIGUSR2, lambda s, f: calls.append(s))  # submitit's requeue
    try:
        with StopSignal() as s:
            os.kill(os.getpid(), signal.SIGUSR2)
            time.sleep(0.05)
            assert s.received == signal.SIGUSR2 and calls == []  # not requeued yet
            e = s.preempted("checkpointed")
        assert e.signum == signal.SIGUSR2 and e.chain is not None
        e.chain(e.signum, None)
        assert calls == [signal.SIGUSR2]
        with StopSignal() as s:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
            assert s.preempted("x").chain is None  # Ray's / submitit's SIGTERM handler: never
    finally:
        signal.signal(signal.SIGUSR2, before)


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
