"""``cluster.layout=split`` on the CPU: the learner ranks and the rollout engines on disjoint cores.

On GPUs ``split`` gives the engines GPUs of their own (:mod:`ragen2.cluster.placement`). On the
CPU the same idea is a core split: the learner ranks share the first half of the cores this job
may use, the engines the rest, so that generation and the update can run at once without taking
cores from each other (what bounded staleness, ``trainer.max_staleness >= 1``, overlaps; see
``benchmarks/async_overlap.py``). Every thread of an actor's process is pinned
(:func:`pin_process`), and the threads it starts later inherit the pinning.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Collection, Sequence


@dataclass(frozen=True)
class CoreSplit:
    """The cores of the learner ranks and of the engines (disjoint, both non-empty)."""

    learner: tuple[int, ...]
    engines: tuple[int, ...]

    def threads(self, learner_world_size: int, num_workers: int) -> tuple[int, int]:
        """Torch threads per learner rank and per rollout worker: each side's cores shared
        between its actors (at least one thread each)."""
        return (max(1, len(self.learner) // learner_world_size),
                max(1, len(self.engines) // num_workers))


def split_cores(cores: Collection[int]) -> CoreSplit:
    """The learner ranks on the first ceil(n / 2) of ``cores`` (sorted), the engines on the rest.

    Raises ValueError with fewer than two cores (nothing to split)."""
    ordered = sorted(set(cores))
    if len(ordered) < 2:
        raise ValueError(f"cluster.layout=split on the CPU needs at least 2 cores (the learner "
                         f"on some, the engines on others); this job may use {len(ordered)} "
                         f"({ordered}): use cluster.layout=colocated")
    half = (len(ordered) + 1) // 2
    return CoreSplit(tuple(ordered[:half]), tuple(ordered[half:]))


def usable_cores() -> list[int]:
    """The cores this process may run on (its affinity mask)."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def claim_cpu(threads: int, cores: Sequence[int] = ()) -> None:
    """An actor's CPU share, at its start: pinned to ``cores`` (none: wherever the OS puts it),
    then ``threads`` torch threads (0: torch's default)."""
    if cores:
        pin_process(cores)
    if threads > 0:
        import torch

        torch.set_num_threads(threads)


def pin_process(cores: Sequence[int]) -> None:
    """Pin every thread of this process to ``cores``; threads started later inherit it.

    Linux only (``/proc/self/task``); a thread that exits meanwhile is skipped."""
    mask = set(cores)
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), mask)
        except ProcessLookupError:
            pass


__all__ = ["CoreSplit", "claim_cpu", "pin_process", "split_cores", "usable_cores"]
