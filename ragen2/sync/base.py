"""Weight sync learner -> rollout workers, behind one interface."""

from __future__ import annotations

from typing import Any, Protocol, Sequence

from ragen2.registry import Registry


class WeightSync(Protocol):
    """Pushes a full set of policy weights to every rollout worker and sets their version."""

    def push(self, weights: Any, version: int) -> None: ...


WEIGHT_SYNCS: Registry = Registry("weight sync")


@WEIGHT_SYNCS.register("object_store")
class ObjectStoreSync:
    """Weights travel as numpy arrays through Ray's object store (zero-copy reads on one node).

    ``weights`` is the ObjectRef of learner rank 0's ``policy_weights()`` result: each worker
    fetches it itself, the driver never materialises it.
    """

    def __init__(self, workers: Sequence[Any]) -> None:
        self.workers = list(workers)

    def push(self, weights: Any, version: int) -> None:
        import ray

        ray.get([w.load_weights.remote(weights, version) for w in self.workers])
