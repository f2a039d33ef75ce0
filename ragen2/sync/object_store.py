"""Weights as numpy buckets through Ray's object store (zero-copy reads on one node).

Learner rank 0 puts one object per bucket (every rank takes part in gathering each parameter);
each worker streams the buckets into its engine one at a time: the HF engine copies tensors in
place, the vLLM engine runs ``reload_weights`` over the stream and then resets its prefix cache
(a multiprocess vLLM engine, ``engine.multiprocess`` or TP > 1, reloads from one ``/dev/shm`` file
the stream is written to: ``ragen2.engines.vllm_worker``).
"""

from __future__ import annotations

from typing import Any, Sequence

from ragen2.sync.base import WEIGHT_SYNCS, BucketSync, iter_buckets


def put_buckets(rank: Any, bucket_bytes: int) -> list[Any] | None:
    """Learner side (every rank): gather each parameter; rank 0 puts numpy buckets, returns refs."""
    import ray

    refs = []
    for bucket in iter_buckets(rank.named_weights("cpu"), bucket_bytes):
        if rank.rank == 0:
            refs.append(ray.put({name: t.float().numpy() for name, t in bucket}))
    return refs if rank.rank == 0 else None


def load_buckets(worker: Any, refs: Sequence[Any], version: int) -> int:
    """Worker side: stream the buckets (fetched one at a time) into the engine."""
    import ray

    def stream():
        for ref in refs:
            yield from ray.get(ref).items()

    worker.engine.load_weights(stream(), version)
    return version


@WEIGHT_SYNCS.register("object_store")
class ObjectStoreSync(BucketSync):
    def push(self, version: int, only: Sequence[int] | None = None) -> dict[str, float]:
        import ray

        refs = self.learners.run(put_buckets, self.bucket_bytes)[0]
        ray.get([w.run.remote(load_buckets, refs, version) for w in self.targets(only)])
        return {"sync/buckets": float(len(refs))}
