"""Weight sync learner -> rollout engines: the interface, the strategy registry and bucketing.

A strategy moves the learner's full (unsharded, LoRA-merged) weights into every rollout engine
and sets the engines' policy version. Weights travel in buckets of at most ``sync.bucket_mb`` so
no side ever holds more than one bucket beyond its own model. Strategies run their learner-side
and worker-side halves through ``LearnerRank.run`` / ``RolloutWorker.run``, so each one lives in a
single module here: ``object_store`` (numpy through Ray, any engine, CPU or GPU), ``cuda_ipc``
(colocated GPUs: CUDA IPC handles, no copy) and ``nccl`` (split GPUs: a broadcast group between
learner rank 0 and the engines; the same code runs on gloo for CPU tests).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Iterator, Protocol, Sequence

from ragen2.registry import Registry

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from ragen2.config import Config


class WeightSync(Protocol):
    """Pushes the learner's current weights to every rollout worker and sets their version."""

    def push(self, version: int, only: Sequence[int] | None = None) -> dict[str, float]:
        """Move the weights (into workers ``only``, by index, if given; a strategy that must
        reach every worker at once may send to all); returns ``sync/*`` metrics."""
        ...

    def replace_worker(self, index: int, worker: Any) -> None:
        """Worker ``index`` was restarted: later pushes go to the new actor."""
        ...


class WeightSyncError(RuntimeError):
    """A weight sync failed or the post-sync probe found the engine out of step with the learner."""


WEIGHT_SYNCS: Registry = Registry("weight sync")


class BucketSync:
    """What every strategy holds: the learner group, the worker actors (by index) and the bucket
    size; subclasses implement :meth:`WeightSync.push`."""

    def __init__(self, learners: Any, workers: Sequence[Any], cfg: "Config") -> None:
        self.learners, self.workers = learners, list(workers)
        self.bucket_bytes = int(cfg.sync.bucket_mb * 2**20)
        self.dtype = cfg.model.dtype

    def targets(self, only: Sequence[int] | None) -> list[Any]:
        """The workers a push goes to: all, or those at the indices ``only``."""
        return self.workers if only is None else [self.workers[i] for i in only]

    def replace_worker(self, index: int, worker: Any) -> None:
        self.workers[index] = worker


def sync_state(holder: Any) -> dict[str, Any]:
    """What the strategies keep in one process between their calls, by strategy (``cuda_ipc``: the
    bucket the engines are loading; ``nccl``: the broadcast group): the ``sync_state`` of the
    holder their code runs on. A learner rank and a rollout worker declare it; a vLLM worker,
    whose class is vLLM's, gets it here."""
    return holder.__dict__.setdefault("sync_state", {})


def iter_buckets(pairs: Iterable[tuple[str, "torch.Tensor"]],
                 bucket_bytes: int) -> Iterator[list[tuple[str, "torch.Tensor"]]]:
    """Group ``(name, tensor)`` pairs, in order, into lists of at most ``bucket_bytes`` bytes.

    A tensor larger than the budget travels alone. Never yields an empty bucket.
    """
    if bucket_bytes <= 0:
        raise ValueError(f"bucket_bytes={bucket_bytes} is invalid; allowed: > 0")
    bucket: list[tuple[str, Any]] = []
    size = 0
    for name, t in pairs:
        nbytes = t.numel() * t.element_size()
        if bucket and size + nbytes > bucket_bytes:
            yield bucket
            bucket, size = [], 0
        bucket.append((name, t))
        size += nbytes
    if bucket:
        yield bucket


def resolve_strategy(cfg: "Config") -> str:
    """``sync.strategy`` with ``auto`` resolved: object_store on CPU, cuda_ipc when colocated on
    GPUs, nccl when the engines have GPUs of their own."""
    s = cfg.sync.strategy
    if s != "auto":
        return s
    if cfg.cluster.device != "cuda":
        return "object_store"
    return "cuda_ipc" if cfg.cluster.layout == "colocated" else "nccl"


def make_sync(cfg: "Config", learners: Any, workers: Sequence[Any]) -> WeightSync:
    """The configured strategy, bound to the learner group and the rollout worker actors."""
    name = resolve_strategy(cfg)
    return WEIGHT_SYNCS.get(name)(learners, workers, cfg)
