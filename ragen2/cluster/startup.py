"""The order in which the rollout engines and the learner ranks start.

**Colocated GPUs (``cluster.layout=colocated`` on CUDA): engines first.** A learner rank and an
engine share each GPU. vLLM sizes its KV cache once, while it starts: it takes
``engine.gpu_memory_utilization`` x the GPU's *total* memory (refusing to start when less than that
is free), profiles a forward pass, and turns what its weights and activations leave of that share
into KV-cache blocks, measuring free memory as it goes. A learner rank loading its models onto the
same GPU at that moment changes the free memory vLLM reads (a start-up failure, or a KV cache sized
against memory the learner takes next). So every rollout worker is started and waited for --
engine built, weights loaded, KV cache allocated -- before any learner rank is created; the
learner's models, gradients and optimiser state then grow into the other
``1 - gpu_memory_utilization`` of the GPU (:mod:`ragen2.cluster.memory` checks that they fit).
The other order (learner first, engines told the memory left) would size the KV cache against the
learner's start-up footprint, not its peak: AdamW's moments appear at the first step and the
gathered weights and activations in every update.

A rollout worker restarted mid-run (:class:`ragen2.rollout.pool.WorkerPool`) starts next to a
running learner: it gets its share only if the learner left ``gpu_memory_utilization`` of the GPU
free (with ``engine.sleep_mode`` the learner's update memory is free again between updates).

**Split GPUs and the CPU**: engines and learner ranks share no accelerator, so both start at once
(their imports and model loads overlap).
"""

from __future__ import annotations

import logging
from typing import Any, Callable, TypeVar

from ragen2.cluster.placement import PlacementPlan

log = logging.getLogger("ragen2")

Pool = TypeVar("Pool")
Learners = TypeVar("Learners")


def engines_first(plan: PlacementPlan) -> bool:
    """Whether the engines must be up before the learner ranks start: they share GPUs."""
    return plan.device == "cuda" and plan.layout == "colocated"


def start_actors(plan: PlacementPlan, start_engines: Callable[[], Pool],
                 start_learners: Callable[[], Learners],
                 wait_engines: Callable[[Pool], Any]) -> tuple[Pool, Learners]:
    """Start the rollout workers (``start_engines``) and the learner group (``start_learners``,
    which returns once its ranks hold their models) in the order :func:`engines_first` says.

    ``wait_engines(pool)`` returns once every worker's constructor has finished (a call on each
    actor: Ray runs it after ``__init__``); a worker that failed to start raises there.
    """
    pool = start_engines()
    if engines_first(plan):
        log.info("colocated GPUs: waiting for the rollout engines to size their KV cache before "
                 "the learner ranks load their models")
        wait_engines(pool)
    return pool, start_learners()
