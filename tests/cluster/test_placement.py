"""Placement planning on hand-made node lists: every layout rule and every refusal."""

from __future__ import annotations

import pytest

from ragen2.cluster.placement import NodeResources, PlacementError, plan_placement
from ragen2.config import Config


def cfg(world=8, workers=8, tp=1, layout="colocated", device="cuda", strategy="PACK") -> Config:
    c = Config()
    c.cluster.device, c.cluster.layout, c.cluster.placement_strategy = device, layout, strategy
    c.cluster.learner_world_size = world
    c.rollout.num_workers = workers
    c.engine.tensor_parallel_size = tp
    return c


def nodes(*gpus: int, cpus: float = 64) -> list[NodeResources]:
    return [NodeResources(f"{i:02d}" * 8, cpus, g, f"10.0.0.{i + 1}") for i, g in enumerate(gpus)]


def gpus_of(plan, group: int, bundle: int) -> float:
    return plan.groups[group].bundles[bundle].get("GPU", 0.0)


# ------------------------------------------------------------------------------------ cpu
def test_cpu_plan_reserves_nothing():
    plan = plan_placement(cfg(world=2, workers=3, device="cpu"), [])
    assert plan.device == "cpu" and plan.groups == () and plan.gpus == 0
    assert len(plan.learners) == 2 and len(plan.workers) == 3
    assert all(s.group is None and s.num_gpus == 0 and s.num_cpus == 0
               for s in plan.learners + plan.workers)
    assert "no placement group" in plan.describe()


# ------------------------------------------------------------------------------ colocated
def test_colocated_one_node_8_gpus():
    plan = plan_placement(cfg(world=8, workers=8), nodes(8))
    assert plan.gpus == 8 and len(plan.groups) == 1
    g = plan.groups[0]
    assert g.strategy == "PACK" and g.bundles == tuple({"GPU": 1.0, "CPU": 1.0} for _ in range(8))
    for r, s in enumerate(plan.learners):
        assert (s.group, s.bundle) == (0, r)
    for i, s in enumerate(plan.workers):  # worker i shares learner rank i's GPU
        assert (s.group, s.bundle, s.engine_bundles) == (0, i, (i,))
        assert s.engine_gpus_per_rank == 0  # T == 1: the worker holds its GPU share itself
    # learner share + engine share fit one GPU, and CPU shares fit the bundle's one CPU
    assert plan.learners[0].num_gpus + plan.workers[0].num_gpus == pytest.approx(1.0)
    assert plan.learners[0].num_cpus + plan.workers[0].num_cpus <= 1.0
    assert 0 < plan.learners[0].num_gpus < 1 and 0 < plan.workers[0].num_gpus < 1


def test_colocated_tp2_two_nodes_gets_one_strict_pack_group_per_engine():
    plan = plan_placement(cfg(world=8, workers=4, tp=2), nodes(4, 4))
    assert len(plan.groups) == 4
    assert all(g.strategy == "STRICT_PACK" and len(g.bundles) == 2 for g in plan.groups)
    # learner rank r sits in engine r // 2's group: ranks 0,1 with engine 0, ...
    assert [(s.group, s.bundle) for s in plan.learners] == [(r // 2, r % 2) for r in range(8)]
    for i, s in enumerate(plan.workers):
        assert (s.group, s.engine_bundles) == (i, (0, 1))
        assert s.num_gpus == 0 and s.engine_gpus_per_rank > 0  # shards are Ray actors
        assert plan.learners[2 * i].num_gpus + s.engine_gpus_per_rank == pytest.approx(1.0)


def test_colocated_tp2_strict_pack_uses_one_group_on_one_node():
    plan = plan_placement(cfg(world=4, workers=2, tp=2, strategy="STRICT_PACK"), nodes(4))
    assert len(plan.groups) == 1 and plan.groups[0].strategy == "STRICT_PACK"
    assert [s.engine_bundles for s in plan.workers] == [(0, 1), (2, 3)]
    assert [s.bundle for s in plan.workers] == [0, 2]


def test_colocated_count_mismatch_names_the_keys():
    with pytest.raises(PlacementError) as e:
        plan_placement(cfg(world=8, workers=2, tp=2), nodes(8))
    msg = str(e.value)
    for key in ("rollout.num_workers", "engine.tensor_parallel_size", "cluster.learner_world_size",
                "2 x 2 = 4 != 8", "rollout.num_workers=4", "cluster.layout=split"):
        assert key in msg


def test_colocated_mismatch_with_tp_not_dividing_world():
    with pytest.raises(PlacementError, match="divisor of 6"):
        plan_placement(cfg(world=6, workers=1, tp=4), nodes(8))


def test_colocated_not_enough_gpus():
    with pytest.raises(PlacementError) as e:
        plan_placement(cfg(world=8, workers=8), nodes(4))
    msg = str(e.value)
    assert "cluster.learner_world_size=8" in msg and "4 GPUs on 1 node" in msg
    assert "10.0.0.1: 4 GPU" in msg


def test_colocated_tp_groups_must_fit_within_nodes():
    # 3 + 3 GPUs = 6 = world, but a TP-2 engine needs 2 GPUs of one node: 3 nodes-worth is 1 + 1
    with pytest.raises(PlacementError) as e:
        plan_placement(cfg(world=6, workers=3, tp=2), nodes(3, 3))
    assert "only 2 such groups" in str(e.value) and "rollout.num_workers=3" in str(e.value)
    plan_placement(cfg(world=4, workers=2, tp=2), nodes(3, 3))  # 2 engines fit: 1 per node


# ---------------------------------------------------------------------------------- split
def test_split_one_node_8_gpus():
    plan = plan_placement(cfg(world=4, workers=4, layout="split"), nodes(8))
    assert plan.gpus == 8 and len(plan.groups) == 1
    b = plan.groups[0].bundles
    assert b[:4] == tuple({"GPU": 1.0, "CPU": 1.0} for _ in range(4))
    assert b[4:] == tuple({"GPU": 1.0, "CPU": 1.0} for _ in range(4))
    assert [s.bundle for s in plan.learners] == [0, 1, 2, 3]
    assert [s.bundle for s in plan.workers] == [4, 5, 6, 7]
    assert all(s.num_gpus == 1 for s in plan.learners + plan.workers)  # nothing is shared


def test_split_tp2_two_nodes():
    plan = plan_placement(cfg(world=4, workers=2, tp=2, layout="split"), nodes(4, 4))
    b = plan.groups[0].bundles
    assert len(b) == 6 and b[4] == b[5] == {"GPU": 2.0, "CPU": 1.0}  # one bundle = one node
    assert [(s.bundle, s.num_gpus, s.engine_bundles) for s in plan.workers] == [
        (4, 2.0, (4,)), (5, 2.0, (5,))]
    assert all(s.engine_gpus_per_rank == 0 for s in plan.workers)  # TP ranks: local processes
    assert sum(gpus_of(plan, 0, i) for i in range(6)) == plan.gpus == 8


def test_split_not_enough_gpus_counts_both_sides():
    with pytest.raises(PlacementError) as e:
        plan_placement(cfg(world=8, workers=2, tp=2, layout="split"), nodes(8))
    msg = str(e.value)
    assert "cluster.learner_world_size=8 + rollout.num_workers=2 x engine.tensor_parallel_size=2 = 12" in msg
    assert "8 GPUs on 1 node" in msg and "cluster.layout=colocated" in msg


def test_split_tp_larger_than_any_node():
    with pytest.raises(PlacementError) as e:
        plan_placement(cfg(world=2, workers=1, tp=8, layout="split"), nodes(4, 4, 4))
    assert "engine.tensor_parallel_size=8 needs 8 GPUs on one node" in str(e.value)
    assert "largest node has 4" in str(e.value)


def test_split_tp_groups_must_fit_within_nodes():
    # 3 nodes x 3 GPUs hold one TP-2 engine each: 3 engines fit, 4 do not (though 1 + 8 <= 9)
    plan_placement(cfg(world=2, workers=3, tp=2, layout="split"), nodes(3, 3, 3))
    with pytest.raises(PlacementError, match="hold only 3 such groups"):
        plan_placement(cfg(world=1, workers=4, tp=2, layout="split"), nodes(3, 3, 3))


# ------------------------------------------------------------------------ strategies, nodes
def test_strict_pack_needs_everything_on_one_node():
    plan_placement(cfg(world=4, workers=4, layout="split", strategy="STRICT_PACK"), nodes(8, 2))
    with pytest.raises(PlacementError) as e:
        plan_placement(cfg(world=4, workers=4, layout="split", strategy="STRICT_PACK"), nodes(4, 4))
    assert "cluster.placement_strategy=STRICT_PACK" in str(e.value) and "PACK" in str(e.value)


def test_spread_strategy_is_passed_to_ray():
    plan = plan_placement(cfg(world=4, workers=4, strategy="SPREAD"), nodes(2, 2))
    assert plan.groups[0].strategy == "SPREAD"


def test_cuda_on_a_cluster_without_gpus():
    with pytest.raises(PlacementError, match="no GPU.*cluster.device=cpu"):
        plan_placement(cfg(world=2, workers=2), nodes(0, 0))


def test_gpus_without_cpus_are_not_bundled():
    with pytest.raises(PlacementError, match="short of CPUs: 10.0.0.1"):
        plan_placement(cfg(world=8, workers=8), nodes(8, cpus=4))


def test_describe_summarises_bundles():
    plan = plan_placement(cfg(world=4, workers=2, tp=2, layout="split"), nodes(8))
    assert "4 x {GPU: 1, CPU: 1} + 2 x {GPU: 2, CPU: 1}" in plan.describe()


# ----------------------------------------------------------------------------- actor options
def test_every_gpu_actor_gets_nccl_cumem_off_and_tp_engines_their_bundles():
    """vLLM sets NCCL_CUMEM_ENABLE=0 in its processes; a learner that does not can hang the
    weight broadcast (SkyRL PR #143): every GPU actor's runtime env sets it. The CPU path sets
    nothing."""
    from ragen2.cluster.placement import Placement

    for plan in (plan_placement(cfg(world=4, workers=2, tp=2), nodes(4)),
                 plan_placement(cfg(world=2, workers=1, tp=2, layout="split"), nodes(4))):
        p = Placement(plan, groups=[object()] * len(plan.groups))
        p._options = lambda slot, capture_children=False: {}  # no Ray scheduling strategy here
        for opts in [p.learner_options(r) for r in range(len(plan.learners))] + \
                    [p.worker_options(i) for i in range(len(plan.workers))]:
            assert opts["runtime_env"]["env_vars"]["NCCL_CUMEM_ENABLE"] == "0"
    colocated = Placement(plan_placement(cfg(world=4, workers=2, tp=2), nodes(4)))
    colocated._options = lambda slot, capture_children=False: {}
    env = colocated.worker_options(1)["runtime_env"]["env_vars"]
    assert env["VLLM_RAY_BUNDLE_INDICES"] == "0,1" and env["VLLM_RAY_PER_WORKER_GPUS"] == "0.5"
    cpu = Placement(plan_placement(cfg(world=2, workers=2, device="cpu"), []))
    assert "runtime_env" not in cpu.learner_options(0) and "runtime_env" not in cpu.worker_options(0)
