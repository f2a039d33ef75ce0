"""Colocated GPUs: each learner rank shares a bucket's GPU buffer with the engine on its GPU.

Every learner rank gathers the full bucket onto its own GPU (FSDP all-gather), flattens it into
one buffer and exports a CUDA IPC handle keyed by the GPU's UUID. Each engine process (vLLM TP
workers included) opens the handle of *its* GPU, so weights never leave the device. The learner
keeps the buffer alive until every engine has loaded the bucket; then the next bucket follows.

A share travels as plain values (:func:`to_wire`: ints, bools, bytes, lists, strings), never as
``reduce_tensor``'s ``(rebuild function, args)`` pair: vLLM's ``collective_rpc`` into another
process serializes with msgpack, which refuses functions, classes and dtypes. The vLLM worker
opens it in :meth:`ragen2.engines.vllm_worker.WeightSyncExtension.ragen2_load_ipc_bucket`.

Everything up to ``rebuild_cuda_tensor`` is tested on CPU with the handle layer faked
(``tests/sync/test_vllm_sync.py``); the call itself needs CUDA (``tests/gpu/test_cuda.py``,
``launch/gpu_check.sh``; see docs/how-to/gpu-checklist.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Sequence

from ragen2.sync.base import WEIGHT_SYNCS, BucketSync, iter_buckets, sync_state

#: ``torch.multiprocessing.reductions.rebuild_cuda_tensor``'s parameters, in its order (what
#: ``reduce_tensor`` returns with it for a CUDA tensor; checked against torch in the tests)
REBUILD_ARGS = ("tensor_cls", "tensor_size", "tensor_stride", "tensor_offset", "storage_cls",
                "dtype", "storage_device", "storage_handle", "storage_size_bytes",
                "storage_offset_bytes", "requires_grad", "ref_counter_handle",
                "ref_counter_offset", "event_handle", "event_sync_required")

#: a share: [gpu uuid, wire dict of :func:`to_wire`, [[name, shape, numel], ...]]
Share = list


def to_wire(reduced: tuple[Any, tuple]) -> dict[str, Any]:
    """``reduce_tensor(flat)`` of a flat CUDA buffer as msgpack-native values: the rebuild
    arguments by name, without the two classes (always a plain tensor on a ``TypedStorage``),
    with the dtype by name and sizes as lists; handles stay bytes."""
    import torch
    from torch.multiprocessing import reductions

    rebuild, args = reduced
    if rebuild is not reductions.rebuild_cuda_tensor:
        raise ValueError(f"cuda_ipc shares CUDA buffers; reduce_tensor gave {rebuild!r} "
                         "(is the bucket on the CPU?)")
    if len(args) != len(REBUILD_ARGS):
        raise ValueError(f"rebuild_cuda_tensor got {len(args)} arguments, cuda_ipc knows "
                         f"{len(REBUILD_ARGS)} (torch changed its CUDA IPC layout; see "
                         "torch.multiprocessing.reductions)")
    a = dict(zip(REBUILD_ARGS, args))
    if a["tensor_cls"] is not torch.Tensor or a["storage_cls"] is not torch.storage.TypedStorage:
        raise ValueError(f"cuda_ipc shares a plain flat tensor; got {a['tensor_cls']} on "
                         f"{a['storage_cls']}")
    del a["tensor_cls"], a["storage_cls"]
    a.update(tensor_size=[int(s) for s in a["tensor_size"]],
             tensor_stride=[int(s) for s in a["tensor_stride"]],
             dtype=str(a["dtype"]).removeprefix("torch."))
    return a


def from_wire(wire: dict[str, Any], device: int) -> tuple:
    """``rebuild_cuda_tensor``'s positional arguments for a :func:`to_wire` share, opened on
    ``device`` (the GPU's index as *this* process numbers its visible GPUs)."""
    import torch

    a = dict(wire, tensor_cls=torch.Tensor, storage_cls=torch.storage.TypedStorage,
             tensor_size=torch.Size(wire["tensor_size"]), tensor_stride=tuple(wire["tensor_stride"]),
             dtype=getattr(torch, wire["dtype"]), storage_device=int(device))
    return tuple(a[k] for k in REBUILD_ARGS)


def expandable_segments_on(env: Any = None) -> bool:
    """Whether PyTorch's CUDA allocator was configured with ``expandable_segments:True``
    (``PYTORCH_CUDA_ALLOC_CONF``, or ``PYTORCH_ALLOC_CONF`` in newer torch)."""
    import os

    env = os.environ if env is None else env
    conf = ",".join(env.get(k, "") for k in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"))
    on = False
    for part in conf.replace(" ", "").split(","):
        if part.lower().startswith("expandable_segments:"):
            on = part.split(":", 1)[1].lower() == "true"
    return on


def _set_expandable_segments(on: bool) -> None:
    import torch

    torch.cuda.memory._set_allocator_settings(f"expandable_segments:{on}")


@dataclass
class SharePush:
    """A learner rank's side of one push, kept between :func:`share_next_bucket`'s calls (in the
    rank's ``sync_state``, under ``"cuda_ipc"``)."""

    stream: Iterator[list[tuple[str, Any]]]  # the buckets still to share
    expandable: bool  # the allocator had expandable segments, switched off for the push
    buffer: Any = None  # the bucket the engines are loading: kept alive until the next call


def share_next_bucket(rank: Any, bucket_bytes: int, dtype: str, start: bool) -> Share | None:
    """Learner side: ``[gpu uuid, wire share, [[name, shape, numel], ...]]`` of the next bucket,
    or None after the last (which also frees the previous buffer).

    Each call first frees the previous bucket's buffer and runs ``torch.cuda.ipc_collect()``, so
    memory the engines have released goes back at once rather than piling up over a push.
    Buffers allocated in expandable segments cannot be exported through CUDA IPC, so with
    ``expandable_segments:True`` the allocator is switched to plain segments for the push (the
    first call) and back after the last bucket (as verl does around its sync). What the push
    keeps between calls is a :class:`SharePush` in the rank's ``sync_state``.
    """
    import torch
    from torch.multiprocessing import reductions

    push = sync_state(rank).get("cuda_ipc")
    if start:
        stream = iter_buckets(rank.named_weights("cuda", dtype), bucket_bytes)
        push = sync_state(rank)["cuda_ipc"] = SharePush(
            stream, expandable_segments_on(), push.buffer if push is not None else None)
        if push.expandable:
            _set_expandable_segments(False)
    if push.buffer is not None:
        push.buffer = None  # the engines have loaded the previous bucket
        torch.cuda.ipc_collect()
    bucket = next(push.stream, None)
    if bucket is None:
        if push.expandable:
            _set_expandable_segments(True)
            push.expandable = False
        return None
    flat = torch.cat([t.reshape(-1) for _, t in bucket])
    torch.cuda.synchronize()
    push.buffer = flat
    uuid = str(torch.cuda.get_device_properties(flat.device).uuid)
    return [uuid, to_wire(reductions.reduce_tensor(flat)),
            [[n, list(t.shape), t.numel()] for n, t in bucket]]


def open_share(shares: dict[str, Share]) -> list[tuple[str, Any]]:
    """Open this process's GPU's share (``shares`` keyed by GPU uuid) and cut the buffer back
    into ``(name, tensor)`` views."""
    import torch
    from torch.multiprocessing import reductions

    dev = torch.cuda.current_device()
    uuid = str(torch.cuda.get_device_properties(dev).uuid)
    if uuid not in shares:
        raise KeyError(f"no cuda_ipc share for this process's GPU {uuid} (device {dev}); shares "
                       f"came from GPUs {sorted(shares)}: is every engine colocated with a "
                       "learner rank (cluster.layout=colocated)?")
    _, wire, meta = shares[uuid]
    flat = reductions.rebuild_cuda_tensor(*from_wire(wire, dev))
    out, off = [], 0
    for name, shape, numel in meta:
        out.append((name, flat[off:off + numel].view(shape)))
        off += numel
    return out


def load_shared_bucket(worker: Any, shares: dict[str, Share]) -> None:
    """Worker side: load one bucket into the engine (vLLM: inside each of its GPU workers)."""
    import torch

    llm = getattr(worker.engine, "llm", None)
    if llm is not None:
        llm.collective_rpc("ragen2_load_ipc_bucket", args=(shares,))
        return
    _copy_bucket(worker.engine.model.state_dict(), shares)  # its views of the buffer die with it
    torch.cuda.synchronize()
    torch.cuda.ipc_collect()  # drop this process's reference to the learner's buffer now


def _copy_bucket(params: dict[str, Any], shares: dict[str, Share]) -> None:
    import torch

    with torch.no_grad():
        for name, t in open_share(shares):
            params[name].copy_(t)


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
