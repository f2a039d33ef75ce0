"""Run plans on a local Ray that declares 4 logical GPUs (no CUDA needed) and print GPU ids.

``python tests/cluster/logical_gpus.py`` prints one JSON object: per layout, the Ray GPU ids each
learner rank, rollout worker and (colocated T > 1) engine shard was given. Used by
``tests/cluster/test_placement_ray.py`` in a subprocess, so its Ray does not meet the test
session's.
"""

from __future__ import annotations

import json
import os

import ray
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from ragen2.cluster.placement import cluster_nodes, create_placement_group, plan_placement
from ragen2.config import Config


@ray.remote
class Probe:
    """Stands in for a learner rank or a rollout worker; may start engine shards like vLLM does."""

    def gpu_ids(self) -> list[str]:
        return sorted(str(g) for g in ray.get_gpu_ids())

    def shard_gpu_ids(self) -> list[list[str]]:
        """Start one shard per ``VLLM_RAY_BUNDLE_INDICES`` entry in the current placement group."""
        pg = ray.util.get_current_placement_group()
        share = float(os.environ["VLLM_RAY_PER_WORKER_GPUS"])
        shards = [Probe.options(num_cpus=0, num_gpus=share, scheduling_strategy=
                                PlacementGroupSchedulingStrategy(pg, int(b))).remote()
                  for b in os.environ["VLLM_RAY_BUNDLE_INDICES"].split(",")]
        return ray.get([s.gpu_ids.remote() for s in shards])


def run(world: int, workers: int, tp: int, layout: str) -> dict:
    cfg = Config()
    cfg.cluster.device, cfg.cluster.layout = "cuda", layout
    cfg.cluster.learner_world_size, cfg.rollout.num_workers = world, workers
    cfg.engine.tensor_parallel_size = tp
    placement = create_placement_group(plan_placement(cfg, cluster_nodes()), timeout_s=60)
    learners = [Probe.options(**placement.learner_options(r)).remote() for r in range(world)]
    rollout = [Probe.options(**placement.worker_options(i)).remote() for i in range(workers)]
    out = {"learners": ray.get([a.gpu_ids.remote() for a in learners]),
           "workers": ray.get([a.gpu_ids.remote() for a in rollout])}
    if placement.plan.workers[0].engine_gpus_per_rank:
        out["shards"] = ray.get([a.shard_gpu_ids.remote() for a in rollout])
    for a in learners + rollout:
        ray.kill(a)
    placement.remove()
    return out


if __name__ == "__main__":
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(address="local", num_cpus=8, num_gpus=4, include_dashboard=False, log_to_driver=False)
    print(json.dumps({"colocated": run(4, 4, 1, "colocated"),
                      "colocated_tp2": run(4, 2, 2, "colocated"),
                      "split_tp2": run(2, 1, 2, "split")}))
    ray.shutdown()
