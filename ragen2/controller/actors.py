"""The run's Ray actors: the rollout workers (engine + envs) and the FSDP2 learner ranks, placed
on the cluster (``cluster.layout=split`` on the CPU: on disjoint cores) and started in the order
colocated GPUs need."""

from __future__ import annotations

import logging
import os
from typing import Any, Callable

from ragen2.config import Config
from ragen2.learner.settings import LearnerSettings
from ragen2.rollout.pool import WorkerPool
from ragen2.rollout.runner import EpisodeSpec
from ragen2.rollout.trajectory import Trajectory

log = logging.getLogger("ragen2")


def learner_settings(cfg: Config) -> LearnerSettings:
    """What the learner needs from the engine and rollout sections, resolved once (the learner
    reads only its own sections, :mod:`ragen2.learner.settings`)."""
    from ragen2.cluster.memory import scorer_reserve_bytes

    e, a = cfg.engine, cfg.algorithm
    return LearnerSettings(temperature=e.temperature if e.temperature > 0 else 1.0,
                           norm_tokens=a.loss_agg_norm_tokens or e.max_new_tokens * cfg.rollout.max_turns,
                           max_staleness=cfg.trainer.max_staleness,
                           score_reserve_bytes=scorer_reserve_bytes(cfg))


class Actors:
    """``pool`` (the rollout workers), ``learners`` (the learner group) and their ``placement``.

    ``on_restart(index, worker)`` brings a restarted worker to the current policy; it is set once
    the weights' sync exists (a worker restarted before that meets the sync's start-up instead).
    """

    def __init__(self, cfg: Config, model_path: str) -> None:
        import ray

        from ragen2.cluster import place
        from ragen2.cluster.startup import start_actors
        from ragen2.learner.group import LearnerGroup
        from ragen2.rollout.worker import RolloutWorker

        self.cfg = cfg
        self.on_restart: Callable[[int, Any], None] | None = None
        cores = int(ray.available_resources().get("CPU", os.cpu_count() or 1)) or 1
        c = cfg.cluster
        learner_threads = c.torch_threads or max(1, cores // c.learner_world_size)
        worker_threads = c.torch_threads or max(1, cores // cfg.rollout.num_workers)
        split = None  # the CPU split layout: the learner and the engines on disjoint cores
        if c.layout == "split" and c.device == "cpu":
            from ragen2.cluster.cores import split_cores, usable_cores

            split = split_cores(usable_cores())
            learner_threads, worker_threads = (
                (c.torch_threads, c.torch_threads) if c.torch_threads else
                split.threads(c.learner_world_size, cfg.rollout.num_workers))
            log.info("cluster.layout=split: learner ranks on cores %s, engines on cores %s",
                     list(split.learner), list(split.engines))
        # Plan against the live cluster and reserve the GPUs (PlacementError if it cannot fit);
        # on cluster.device=cpu nothing is reserved and every actor asks for 0 CPUs / 0 GPUs.
        self.placement = place(cfg)
        log.info(self.placement.plan.describe())
        worker_cls = ray.remote(RolloutWorker)

        def start_pool() -> WorkerPool:
            return WorkerPool(lambda i: worker_cls.options(**self.placement.worker_options(i))
                              .remote(cfg, model_path, i, worker_threads,
                                      split.engines if split else ()),
                              cfg.rollout.num_workers, on_restart=self._restarted,
                              max_restarts=cfg.rollout.max_worker_restarts)

        # colocated GPUs: the engines size their KV cache before the learner ranks load a model
        # (ragen2.cluster.startup); otherwise both start at once
        self.pool, self.learners = start_actors(
            self.placement.plan, start_pool,
            lambda: LearnerGroup(cfg, model_path, learner_threads, self.placement,
                                 learner_settings(cfg), split.learner if split else ()),
            lambda pool: pool.call_all("policy_version"))  # returns after every __init__

    @property
    def workers(self) -> list[Any]:
        """The rollout worker actors (a restarted worker replaces its predecessor in place)."""
        return self.pool.actors

    def gather(self, method: str, specs: list[EpisodeSpec],
               *args_per_worker: list[Any]) -> tuple[list[Trajectory], dict[str, float]]:
        """Split ``specs`` over the workers; trajectories in spec order, max wall-time stats and
        ``worker_restarts`` (a worker that died reran its chunk with the same seed and version)."""
        return self.pool.gather(method, specs, *args_per_worker)

    def sleep_engines(self) -> None:
        """Colocated GPUs (``engine.sleep_mode``): the engines give their memory to the update."""
        if self.cfg.engine.sleep_mode:
            self.pool.call_all("sleep")

    def _restarted(self, index: int, worker: Any) -> None:
        if self.on_restart is not None:
            self.on_restart(index, worker)

    def shutdown(self) -> None:
        self.learners.shutdown()
        self.pool.shutdown()
        self.placement.remove()
