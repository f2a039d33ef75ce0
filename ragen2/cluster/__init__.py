"""Running on a Ray cluster: GPU placement of learner ranks and engines, and hardware preflight.

``placement`` plans (pure) and reserves (Ray) where every actor runs; ``preflight`` checks the
machine (CUDA, NCCL, vLLM, flash-attn, bf16, and GPU memory by ``memory``'s per-GPU estimate)
before anything starts. Both fail with messages that name the config keys.
"""

from ragen2.cluster.memory import MemoryBudget, estimate_memory, memory_problems, plan_memory
from ragen2.cluster.placement import (ActorSlot, GroupSpec, NodeResources, Placement,
                                      PlacementError, PlacementPlan, cluster_nodes,
                                      create_placement_group, place, plan_placement)
from ragen2.cluster.preflight import (HardwareError, check_hardware, check_hardware_on_cluster,
                                      hardware_problems)

__all__ = [
    "ActorSlot", "GroupSpec", "HardwareError", "MemoryBudget", "estimate_memory",
    "memory_problems", "plan_memory", "NodeResources", "Placement", "PlacementError",
    "PlacementPlan", "check_hardware", "check_hardware_on_cluster", "cluster_nodes",
    "create_placement_group", "hardware_problems", "place", "plan_placement",
]
