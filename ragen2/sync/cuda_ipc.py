"""Colocated GPUs: each learner rank shares a bucket's GPU buffer with the engine on its GPU.

Every learner rank gathers the full bucket onto its own GPU (FSDP all-gather), flattens it into
one buffer and exports a CUDA IPC handle keyed by the GPU's UUID. Each engine process (vLLM TP
workers included) opens the handle of *its* GPU, so weights never leave the device. The learner
keeps the buffer alive until every engine has loaded the bucket; then the next bucket follows.

Written for CUDA and not run on the CPU machines of CI (see README, "What has run on a GPU").
"""

from __future__ import annotations

from typing import Any, Sequence

from ragen2.sync.base import WEIGHT_SYNCS, BucketSync, iter_buckets


def share_next_bucket(rank: Any, bucket_bytes: int, dtype: str, start: bool) -> Any:
    """Learner side: (gpu uuid, ipc handle, [(name, shape, numel)]) of the next bucket, or None."""
    import torch
    from torch.multiprocessing.reductions import reduce_tensor

    if start:
        rank._sync_stream = iter_buckets(rank.named_weights("cuda", dtype), bucket_bytes)
    rank._sync_buffer = None  # the engines have loaded the previous bucket
    bucket = next(rank._sync_stream, None)
    if bucket is None:
        return None
    flat = torch.cat([t.reshape(-1) for _, t in bucket])
    torch.cuda.synchronize()
    rank._sync_buffer = flat
    uuid = str(torch.cuda.get_device_properties(flat.device).uuid)
    return uuid, reduce_tensor(flat), [(n, tuple(t.shape), t.numel()) for n, t in bucket]


def _open(shares: dict[str, Any]) -> list[tuple[str, Any]]:
    """Open this process's GPU's handle and cut the buffer back into named tensors."""
    import torch

    dev = torch.cuda.current_device()
    _, (rebuild, args), meta = shares[str(torch.cuda.get_device_properties(dev).uuid)]
    args = list(args)
    args[6] = dev  # the storage's device index as this process numbers its visible GPUs
    flat, out, off = rebuild(*args), [], 0
    for name, shape, numel in meta:
        out.append((name, flat[off:off + numel].view(shape)))
        off += numel
    return out


def _load_in_vllm_worker(vworker: Any, shares: dict[str, Any]) -> None:
    import torch

    vworker.model_runner.model.load_weights(weights=_open(shares))
    torch.cuda.synchronize()


def load_shared_bucket(worker: Any, shares: dict[str, Any]) -> None:
    """Worker side: load one bucket into the engine (vLLM: inside each of its GPU workers)."""
    import torch

    llm = getattr(worker.engine, "llm", None)
    if llm is not None:
        llm.collective_rpc(_load_in_vllm_worker, args=(shares,))
        return
    params = worker.engine.model.state_dict()
    with torch.no_grad():
        for name, t in _open(shares):
            params[name].copy_(t)
    torch.cuda.synchronize()


def finish(worker: Any, version: int) -> int:
    worker.engine.finish_update(version)
    return version


@WEIGHT_SYNCS.register("cuda_ipc")
class CudaIpcSync(BucketSync):
    def push(self, version: int, only: Sequence[int] | None = None) -> dict[str, float]:
        import ray

        targets = self.targets(only)
        n = 0
        while True:
            shares = self.learners.run(share_next_bucket, self.bucket_bytes, self.dtype, n == 0)
            if shares[0] is None:
                break
            by_gpu = {s[0]: s for s in shares}
            ray.get([w.run.remote(load_shared_bucket, by_gpu) for w in targets])
            n += 1
        self.learners.run(share_next_bucket, self.bucket_bytes, self.dtype, False)  # free buffers
        ray.get([w.run.remote(finish, version) for w in targets])
        return {"sync/buckets": float(n)}
