"""SIGUSR1 / SIGTERM: the run finishes its step, checkpoints and exits 75; resume continues it.

The end-to-end test runs the real trainer (tiny CPU run) through the sbatch script with stand-in
``srun`` / ``scontrol``: the signal SLURM sends before the time limit, the checkpoint, the requeue
and the resumed job, in one go.
"""

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


def test_a_signal_while_starting_stops_before_the_first_step(monkeypatch):
    """SIGUSR1 between process start and the training loop (Ray, models) is remembered."""
    from ragen2 import preempt

    before = signal.getsignal(signal.SIGUSR1)
    try:
        preempt.install_early()
        os.kill(os.getpid(), signal.SIGUSR1)  # would end the process with the default action
        time.sleep(0.05)
        with StopSignal() as s:
            assert s.received == signal.SIGUSR1  # the loop stops before its first step
            assert s.preempted("x").chain is None  # the early handler is not chained
        assert preempt._pending is None
        calls = []
        signal.signal(signal.SIGUSR1, lambda sig, f: calls.append(sig))  # e.g. submitit's
        preempt.install_early()
        os.kill(os.getpid(), signal.SIGUSR1)
        time.sleep(0.05)
        assert calls == [signal.SIGUSR1] and preempt._pending is None  # left in place
    finally:
        signal.signal(signal.SIGUSR1, before)
        monkeypatch.setattr(preempt, "_pending", None)


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


@pytest.mark.e2e
def test_sbatch_time_limit_checkpoints_requeues_and_resumes(tiny_model_path, tmp_path):
    """Own run: it signals its own job. The whole SLURM loop with the real trainer on the CPU: the sbatch script (stand-in srun and
    scontrol, a real Ray head) runs ragen2-train; SIGUSR1 to the script (SLURM's --signal=B:USR1)
    makes the trainer checkpoint its step and exit 75, the script requeues the job; the requeued
    job (the same script again, SLURM_RESTART_COUNT=1) resumes in the same run directory."""
    import tempfile

    from tests.runs import ONE_RANK, small
    from tests.ports import now, port_clash, spare_port
    from tests.test_launch_files import (LAUNCH, ROOT, end_sessions, sbatch_env, session_pids,
                                         stand_in_slurm)

    bin_ = stand_in_slurm(
        tmp_path,
        scontrol=f"#!/usr/bin/env bash\nif [ \"$1\" = requeue ]; then echo \"$@\" >> "
                 f"{tmp_path}/requeued; else echo localhost; fi\n",
        # the console script as installed, run by this interpreter
        ragen2_train=f"#!/usr/bin/env bash\nexec {sys.executable} -m ragen2.train \"$@\"\n")
    run = tmp_path / "run"
    ray_dir = Path(tempfile.mkdtemp(prefix="r2pq", dir="/tmp"))
    env = sbatch_env(bin_, ray_dir, SLURM_JOB_ID="77", RAGEN2_RUN_DIR=str(run), RAY_NUM_CPUS="2",
                     RAGEN2_CLUSTER_ARGS="cluster.device=cpu cluster.backend=gloo",
                     PYTHONPATH=str(ROOT), RAY_AUTH_MODE="disabled")
    args = small(tiny_model_path, "trainer.total_steps=3", "trainer.save_every=0", ONE_RANK)
    jobs: list[subprocess.Popen] = []  # every job started, for end_sessions
    since: list[float] = []
    tries = {0: 0, 1: 0}

    def sbatch(restart: int) -> subprocess.Popen:
        port, client = spare_port(), spare_port()
        since.append(now())
        tries[restart] += 1
        jobs.append(subprocess.Popen(
            ["bash", str(LAUNCH / "slurm" / "ragen2.sbatch"), *args],
            stdout=open(tmp_path / f"job{restart}.log", "w"), stderr=subprocess.STDOUT, cwd=tmp_path,
            env={**env, "SLURM_RESTART_COUNT": str(restart), "RAY_PORT": str(port),
                 "RAY_START_ARGS": f"--ray-client-server-port={client}"},
            start_new_session=True))
        return jobs[-1]

    def again(restart: int) -> bool:
        """The last job ended as a Ray port it was given was taken before the head bound it:
        end what it left and start it again on new ports (at most 3 tries of each job)."""
        if tries[restart] >= 3 or not port_clash(
                (tmp_path / f"job{restart}.log").read_text(), ray_dir, since[-1]):
            return False
        for pid in session_pids(jobs[-1].pid):
            os.kill(pid, signal.SIGKILL)
        return True

    job0 = sbatch(0)
    try:
        deadline = time.monotonic() + 600
        while 1 not in _rows(run):
            if job0.poll() is not None and again(0):
                job0 = sbatch(0)
                continue
            assert job0.poll() is None, (tmp_path / "job0.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "step 1 never logged"
            time.sleep(0.2)
        job0.send_signal(signal.SIGUSR1)
        assert job0.wait(300) == 0, (tmp_path / "job0.log").read_text()[-3000:]
        out0 = (tmp_path / "job0.log").read_text()
        assert f"ragen2-train exited with {PREEMPTED_EXIT} (after SIGUSR1)" in out0, out0[-3000:]
        assert (tmp_path / "requeued").read_text().split() == ["requeue", "77"]
        stopped = max(_rows(run))
        assert stopped in (1, 2), out0[-3000:]  # the step it was in, not the whole run
        # save_every=0: only the signal wrote this checkpoint
        assert json.loads((run / "checkpoints" / "latest.json").read_text())["step"] == stopped
        assert f"stopped after step {stopped}" in out0 and "trainer.resume=true" in out0
        assert not (run / "summary.json").exists()
        job1 = sbatch(1)  # what SLURM runs after `scontrol requeue`
        while job1.wait(600) != 0 and again(1):
            job1 = sbatch(1)
        assert job1.returncode == 0, (tmp_path / "job1.log").read_text()[-3000:]
    finally:
        end_sessions(jobs, ray_dir)
    out1 = (tmp_path / "job1.log").read_text()
    assert "restart 1" in out1 and "ragen2-train exited with 0" in out1, out1[-3000:]
    assert sorted(_rows(run)) == [0, 1, 2, 3]
    assert json.loads((run / "summary.json").read_text())["steps"] == 3
    assert (tmp_path / "requeued").read_text().split() == ["requeue", "77"]  # not again
