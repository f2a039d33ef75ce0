"""Start-up order: on colocated GPUs every engine is up before a learner rank starts.

Stand-in actors on the CPU: an engine whose constructor takes a while (vLLM sizing its KV cache)
and then leaves a marker file, and learner ranks (``ragen2.learner.group.LearnerRank`` replaced)
that record, when created and when loading their model (``setup``), which engines were up.
"""

from __future__ import annotations

import time
from pathlib import Path

from ragen2.cluster.placement import ActorSlot, Placement, PlacementPlan
from ragen2.cluster.startup import engines_first, start_actors

ENGINE_START_S = 2.0  # long next to a Ray actor's start, so a concurrent start shows


class _Engine:
    def __init__(self, log_dir: str, index: int) -> None:
        time.sleep(ENGINE_START_S)  # profiling and allocating the KV cache
        Path(log_dir, f"engine{index}.ready").touch()

    def policy_version(self) -> int:
        return 0


class _Rank:
    """LearnerRank's interface to LearnerGroup; ``model_path`` is the log directory here."""

    def __init__(self, cfg, model_path: str, rank: int, world_size: int, threads: int,
                 settings=None, cores=()) -> None:
        self.log, self.rank = Path(model_path), rank
        self._record("init")

    def _record(self, what: str) -> None:
        ready = sorted(p.name for p in self.log.glob("engine*.ready"))
        (self.log / f"rank{self.rank}.{what}").write_text(",".join(ready))

    def address(self) -> tuple[str, int]:
        return "127.0.0.1", 0

    def setup(self, master_addr: str, master_port: int) -> None:
        self._record("setup")  # where a real rank loads its models onto the GPU


def _plan(device: str, layout: str, world: int = 2, workers: int = 2) -> PlacementPlan:
    slot = ActorSlot(None, None, 0.0, 0.0)  # nothing reserved: runs on this CPU-only Ray
    return PlacementPlan(device, layout, (), (slot,) * world, (slot,) * workers)


def test_only_colocated_gpus_start_engines_first():
    assert engines_first(_plan("cuda", "colocated"))
    assert not engines_first(_plan("cuda", "split"))
    assert not engines_first(_plan("cpu", "colocated"))


def test_colocated_learner_ranks_start_after_every_engine(ray_session, tmp_path, monkeypatch):
    """The controller's start-up with stand-in actors (~5 s); fails on a concurrent start, where
    the ranks are created and set up while the engines are still starting."""
    import ragen2.learner.group as group
    from ragen2.learner.group import LearnerGroup
    from ragen2.rollout.pool import WorkerPool
    from ragen2.config import Config

    ray = ray_session
    monkeypatch.setattr(group, "LearnerRank", _Rank)
    world = workers = 2
    cfg = Config()
    cfg.cluster.learner_world_size = world
    plan = _plan("cuda", "colocated", world=world, workers=workers)
    placement = Placement(plan)
    engine = ray.remote(_Engine)
    order = []

    def start_engines():
        order.append("engines")
        return WorkerPool(lambda i: engine.options(**placement.worker_options(i))
                          .remote(str(tmp_path), i), workers)

    def start_learners():
        order.append("learners")
        return LearnerGroup(cfg, str(tmp_path), 1, placement)

    pool, learners = start_actors(plan, start_engines, start_learners,
                                  lambda p: p.call_all("policy_version"))
    try:
        everyone = ",".join(f"engine{i}.ready" for i in range(workers))
        for r in range(world):
            for what in ("init", "setup"):
                assert (tmp_path / f"rank{r}.{what}").read_text() == everyone, (r, what)
        assert order == ["engines", "learners"]
    finally:
        pool.shutdown()
        for a in learners.ranks:
            ray.kill(a)
