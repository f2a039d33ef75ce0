"""``kill -9`` of a training run's process group, then ``trainer.resume=true``: the same run goes on.

The CLI runs in a session of its own; once step 2 is logged, SIGKILL goes to its process group.
That group holds the driver and the local Ray it started (GCS, raylet, monitors: Ray starts them
with the kernel's parent-death signal too). Ray's worker processes (learner ranks, rollout
workers) are started by the raylet in process groups of their own, so the signal does not reach
them: they exit when they see their raylet die (Ray checks every second). Every process of the run
is found by a tag in its environment, which each process the run starts inherits, Ray's included.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.runs import hf_ppo_mixed

pytestmark = pytest.mark.e2e
psutil = pytest.importorskip("psutil")

TAG = "RAGEN2_TEST_RUN_TAG"


def _cli(tiny_model_path: str, run_dir: Path, tag: str, *extra: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "ragen2.train",
           *hf_ppo_mixed(tiny_model_path),
           f"hydra.run.dir={run_dir}", *extra]
    with open(f"{run_dir}.log", "a") as log:  # the child keeps its own descriptor
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, "RAY_AUTH_MODE": "disabled", TAG: tag})


def _finish(p: subprocess.Popen, run_dir: Path, timeout: float = 600) -> None:
    assert p.wait(timeout) == 0, Path(f"{run_dir}.log").read_text()[-3000:]


def _rows(run_dir: Path) -> dict[int, dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return {r["step"]: r for r in map(json.loads, filter(str.strip, lines))}


def _logged_steps(run_dir: Path) -> list[int]:
    """Steps in metrics.jsonl so far (a line being written is skipped)."""
    steps = []
    if (run_dir / "metrics.jsonl").exists():
        for line in (run_dir / "metrics.jsonl").read_text().splitlines():
            try:
                steps.append(json.loads(line)["step"])
            except (ValueError, KeyError):
                pass
    return steps


def _processes(tag: str) -> list:
    """Live processes whose environment carries ``tag`` (the run's driver, Ray, its workers)."""
    out = []
    for p in psutil.process_iter():
        try:
            if p.environ().get(TAG) == tag and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return out


def _describe(procs: list) -> list[str]:
    out = []
    for p in procs:
        try:
            out.append(f"{p.pid} {p.name()} {' '.join(p.cmdline())[:120]}")
        except psutil.Error:
            pass
    return out


def _comparable(row: dict) -> dict:
    return {k: v for k, v in row.items()
            if not k.startswith("timing/") and k not in ("warm_start/cached",)}


def _kill_at_step_2_then_resume(reference: Path, tiny_model_path: str, run: Path,
                                *extra: str) -> dict[int, dict]:
    """Start the run through the CLI, SIGKILL its process group once step 2 is logged, check that
    no process of it survives, resume it (``trainer.resume=true``) and check that every step's
    metrics equal the uninterrupted ``reference``'s. Returns the resumed run's rows."""
    tag = uuid.uuid4().hex
    p = _cli(tiny_model_path, run, tag, *extra)
    try:
        deadline = time.monotonic() + 600
        while max(_logged_steps(run), default=0) < 2:
            assert p.poll() is None, Path(f"{run}.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "step 2 never logged"
            time.sleep(0.2)
        before = _processes(tag)
        os.killpg(p.pid, signal.SIGKILL)
        p.wait(30)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert len(before) > 3, _describe(before)  # the driver, Ray's daemons, learners, workers

    # nothing of the killed run survives it (Ray's workers follow their raylet within seconds)
    deadline = time.monotonic() + 30
    while (alive := _processes(tag)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not alive, f"processes of the killed run survive it: {_describe(alive)}"

    _finish(_cli(tiny_model_path, run, uuid.uuid4().hex, "trainer.resume=true", *extra), run)
    out = Path(f"{run}.log").read_text()
    assert "held-out success before RL" in out and "after RL" in out
    assert json.loads((run / "summary.json").read_text())["steps"] == 4
    full, resumed = _rows(reference), _rows(run)
    assert sorted(resumed) == [0, 1, 2, 3, 4]
    for step in range(5):
        a, b = _comparable(full[step]), _comparable(resumed[step])
        assert a.keys() == b.keys(), (step, a.keys() ^ b.keys())
        bad = {k: (a[k], b[k]) for k in a if abs(a[k] - b[k]) > 1e-6}
        assert not bad, f"step {step}: {bad}"
    return resumed


def test_kill_9_then_resume_continues_the_same_run(hf_ppo_mixed, tiny_model_path, tmp_path):
    """Own run: it kills its own process group. The reference is the uninterrupted in-process run
    of the same config (the shared ``hf_ppo_mixed``: the HF engine, PPO with a critic and a KL
    reference, mixed envs); the killed and the resumed runs go through the CLI as a user runs
    them."""
    _kill_at_step_2_then_resume(hf_ppo_mixed, tiny_model_path, tmp_path / "run")


def test_kill_9_with_a_batch_generated_ahead_then_resume(ray_session, tiny_model_path, tmp_path):
    """``trainer.max_staleness=1`` on the HF engine (issue 31, items 6 and 7). Own runs: the
    reference is the uninterrupted run of ``hf_ppo_mixed``'s config at k = 1 (no shared run has
    k >= 1). Killed once step 2 is logged, while the engines generate the next batch ahead; the
    newest complete checkpoint (step 1 or 2, whichever was written before the kill) holds the
    next step's batch, generated by a version whose weights it no longer has. The resumed run
    trains on that batch, generates the later ones from the same seeds and versions, and every
    metric equals the uninterrupted run's."""
    from ragen2.train import load_config, train

    k1 = "trainer.max_staleness=1"
    reference = tmp_path / "reference"
    train(load_config(hf_ppo_mixed(tiny_model_path, k1)), reference)
    ref = _rows(reference)
    # the schedule really ran ahead: steps 2.. trained on a batch one version old
    assert [ref[s]["async/staleness_max"] for s in (1, 2, 3, 4)] == [0, 1, 1, 1]
    assert all(ref[s]["timing/overlap_s"] > 0 for s in (1, 2, 3))
    _kill_at_step_2_then_resume(reference, tiny_model_path, tmp_path / "run", k1)
    assert "resumed 1 batch(es) generated ahead" in Path(f"{tmp_path / 'run'}.log").read_text()
