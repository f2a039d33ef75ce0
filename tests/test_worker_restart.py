"""A rollout worker that dies mid-call is restarted and reruns its share, with identical results.

The pool's restart logic runs against small stand-in actors (a worker whose process exits or is
``ray.kill``-ed on its first call); the end-to-end test kills a real vLLM rollout worker mid-step
(its env sends itself SIGKILL) and checks the step matches an undisturbed run to the last digit.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from ragen2.rollout.pool import WorkerPool, WorkerRestartError


class _Worker:
    """Stand-in rollout worker: ``rollout(chunk, seed)`` -> ([(seed, item), ...], stats).

    ``die`` names a file: while it exists, the first call of worker ``victim`` removes it and
    then exits its process (``how="exit"``) or announces itself and waits to be killed.
    """

    def __init__(self, index: int, die: str = "", victim: int = 1, how: str = "exit",
                 fail_init: bool = False) -> None:
        if fail_init:
            raise ValueError("engine failed to load")
        self.index, self.die, self.victim, self.how = index, die, victim, how
        self.version = 0

    def rollout(self, chunk, seed):
        if self.index == self.victim and self.die and os.path.exists(self.die):
            if self.how == "always":
                os._exit(1)
            os.unlink(self.die)
            if self.how == "exit":
                os._exit(1)
            Path(self.die + ".started").touch()  # the test's thread now ray.kill()s this actor
            time.sleep(60)
        return [(seed, x, self.version) for x in chunk], {"env_s": float(self.index)}

    def set_version(self, version: int) -> None:
        self.version = version

    def policy_version(self) -> int:
        return self.version


def _pool(ray, size=2, **kwargs):
    cls = ray.remote(_Worker)
    restarted = []

    def on_restart(i, actor):
        restarted.append(i)
        ray.get(actor.set_version.remote(7))  # the controller re-syncs the current policy here

    pool = WorkerPool(lambda i: cls.options(num_cpus=0).remote(i, **kwargs), size, on_restart,
                      max_restarts=2)
    return pool, restarted


def test_a_dead_workers_chunk_is_rerun_with_its_own_arguments(ray_session, tmp_path):
    die = tmp_path / "die"
    pool, restarted = _pool(ray_session, die=str(die))
    try:
        ray_session.get([a.set_version.remote(7) for a in pool])
        first = pool[1]
        die.touch()
        items, stats = pool.gather("rollout", list(range(6)), [100, 101])
        assert items == [(100, x, 7) for x in range(3)] + [(101, x, 7) for x in range(3, 6)]
        assert stats == {"env_s": 1.0, "worker_restarts": 1.0}
        assert restarted == [1] and pool[1] is not first and pool.restarts == 1
        assert not die.exists()
        # the next call runs on the new worker, nothing restarted
        assert pool.gather("rollout", [0, 1], [5, 6])[1]["worker_restarts"] == 0.0
    finally:
        pool.shutdown()


def test_started_calls_finish_later_with_what_gather_returns(ray_session):
    """Bounded staleness launches a batch's calls, trains, then collects them (pool.start and
    pool.finish); two launches queue on the workers in order."""
    pool, restarted = _pool(ray_session)
    try:
        first = pool.start("rollout", list(range(5)), [10, 11])
        second = pool.start("rollout", [7, 8], [12, 13])
        assert pool.finish(second) == ([(12, 7, 0), (13, 8, 0)],
                                       {"env_s": 1.0, "worker_restarts": 0.0})
        items, stats = pool.finish(first)
        assert (items, stats) == pool.gather("rollout", list(range(5)), [10, 11])
        assert items == [(10, 0, 0), (10, 1, 0), (11, 2, 0), (11, 3, 0), (11, 4, 0)]
        assert restarted == []
    finally:
        pool.shutdown()


def test_a_worker_killed_by_ray_mid_call_is_restarted(ray_session, tmp_path):
    die = tmp_path / "die"
    pool, restarted = _pool(ray_session, die=str(die), how="wait")
    die.touch()

    def kill_when_started():
        started = Path(str(die) + ".started")
        while not started.exists():
            time.sleep(0.05)
        ray_session.kill(pool[1])

    killer = threading.Thread(target=kill_when_started)
    killer.start()
    try:
        items, stats = pool.gather("rollout", list(range(4)), [1, 2])
        killer.join()
        assert [i[:2] for i in items] == [(1, 0), (1, 1), (2, 2), (2, 3)]
        assert stats["worker_restarts"] == 1.0 and restarted == [1]
    finally:
        killer.join()
        pool.shutdown()


def test_liveness_check_replaces_a_worker_that_died_between_calls(ray_session):
    pool, restarted = _pool(ray_session)
    try:
        ray_session.kill(pool[0])
        assert pool.revive() == [0] and restarted == [0]
        assert pool.revive() == []
        assert pool.call_all("policy_version") == [7, 0]
    finally:
        pool.shutdown()


def test_a_worker_that_keeps_dying_stops_the_call_with_a_clear_error(ray_session, tmp_path):
    die = tmp_path / "die"
    die.touch()
    pool, restarted = _pool(ray_session, die=str(die), how="always")
    try:
        with pytest.raises(WorkerRestartError, match="rollout worker 1 died during rollout and the "
                                                     "call has used all its 2 restarts"):
            pool.gather("rollout", list(range(4)), [1, 2])
        assert restarted == [1, 1]
    finally:
        pool.shutdown()


def test_a_worker_that_fails_to_start_is_not_restarted(ray_session):
    pool, restarted = _pool(ray_session, fail_init=True)
    try:
        with pytest.raises(WorkerRestartError, match="(?s)failed while starting.*engine failed to load"):
            pool.gather("rollout", [0, 1], [1, 2])
        assert restarted == [] and pool.restarts == 0
    finally:
        pool.shutdown()


# ----------------------------------------------------------------------------- end to end
def _rows(run_dir: Path) -> dict[int, dict]:
    return {r["step"]: r for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())}


def _volatile(key: str) -> bool:
    """Keys that may differ between equal runs: wall times, the restart count, a cache hit."""
    return key.startswith("timing/") or key in ("rollout/worker_restarts", "warm_start/cached")


def _episodes(run_dir: Path, step: int) -> list[dict]:
    import gzip

    with gzip.open(run_dir / "rollouts" / f"step_{step:06d}.jsonl.gz", "rt") as f:
        return [json.loads(line) for line in f]


@pytest.mark.e2e
def test_worker_killed_mid_step_reruns_its_episodes_and_the_step_is_unchanged(
        ray_session, tiny_model_path, tmp_path):
    """Own run: a reference and a run whose worker is killed, on an env of its own. Worker 1 of 2 is SIGKILLed while it resets its group's envs at step 2 (after a weight
    sync, so the new worker must be re-synced to policy version 1 before it reruns)."""
    from ragen2 import seeding
    from ragen2.train import load_config, train
    from tests.dying_env import marker_path
    from tests.runs import ONE_RANK, small

    groups, size = 2, 3
    seed = seeding.group_seed(0, 2, 1)  # group 1 of step 2: worker 1's chunk
    cfg = load_config(small(tiny_model_path, ONE_RANK, "env.id=tests.dying_env:DyingFrozenLake-v0",
                            f"env.kwargs.die_on_seed={seed}", "rollout.num_workers=2",
                            f"rollout.env_groups={groups}", f"rollout.group_size={size}",
                            "trainer.total_steps=2", "trainer.save_every=0"))
    marker = Path(marker_path(seed))
    marker.unlink(missing_ok=True)
    train(cfg, tmp_path / "reference")
    marker.touch()
    try:
        train(cfg, tmp_path / "killed")
        assert not marker.exists(), "the env never killed its worker"
    finally:
        marker.unlink(missing_ok=True)

    ref, killed = _rows(tmp_path / "reference"), _rows(tmp_path / "killed")
    assert [killed[s]["rollout/worker_restarts"] for s in (1, 2)] == [0.0, 1.0]
    assert ref[2]["rollout/worker_restarts"] == 0.0
    for step in (0, 1, 2):
        a = {k: v for k, v in ref[step].items() if not _volatile(k)}
        b = {k: v for k, v in killed[step].items() if not _volatile(k)}
        assert a.keys() == b.keys()
        bad = {k: (a[k], b[k]) for k in a if abs(a[k] - b[k]) > 1e-6}
        assert not bad, f"step {step}: {bad}"
    # every episode of the step exactly once, the rerun's identical to the undisturbed ones
    episodes = _episodes(tmp_path / "killed", 2)
    assert len(episodes) == groups * size
    assert sorted(e["group_id"] for e in episodes) == [g for g in range(groups) for _ in range(size)]
    assert episodes == _episodes(tmp_path / "reference", 2)
    assert killed[2]["actor/policy_version"] == 2
